"""The traffic a candidate is gated and timed on: the user's own batches, or random ones from ``[[inputs]]``.

Runs in the worker (torch). A deployment serves what its users send; so, when the recipe names a data
factory (``[data] factory = "data.py:batches"``), every candidate is built, gated and timed on the batches
that factory yields for its batch size, exactly as the user's own DataLoader would give them: a tensor, a
tuple of tensors (positional arguments of ``forward``) or a dict of tensors (keyword arguments). Without
``[data]`` the traffic is one random batch from ``[[inputs]]`` (keyword inputs and integer ranges allowed),
as before.

Inside the tool a batch is *flat*: a tuple of tensors in the layout's order (positional inputs first, then
keyword ones), so every builder (trace, export, ONNX, OpenVINO) sees positional tensors;
:class:`KeywordAdapter` turns them back into the model's own call. Outputs keep their structure (tensors,
tuples, lists, dicts, ``ModelOutput``): the gate compares them leaf by leaf, and the runtimes flatten them in
pytree order (:mod:`autotune.worker.variants.runtimes`).

Dynamic dimensions: any dimension other than dim 0 whose size differs between batches. The batch dimension
itself is always dynamic for the artifact (a service sees partial batches). A ``+buckets`` variant pads each
dynamic dimension up to the next bucket before the call and slices the output back (:class:`BucketPlan`); the
padding is part of what is timed, and the gate judges the padded answer against eager on the unpadded batch,
so a model whose answer changes with padding (no attention mask) is rejected, not recommended.

Validation of the factory's output (every failure a :class:`WorkloadError` naming ``data.factory``, so the
CLI exits 2 before anything is measured)::

    batches = factory(batch_size=b, **kwargs)          raises -> error naming the factory and the exception
    not iterable / yields nothing                       -> error
    for each batch (at most max_batches):
        form = tensor | tuple of tensors | dict str -> tensor; anything else (None, lists of ints,
               numpy arrays, nested dicts) -> error naming the batch index and the leaf
        every tensor has a batch dimension; all agree on its size, 1 <= rows <= b
        same form, names, dtypes and number of dims as the first batch
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from autotune.core.recipe import InputSpec, Recipe
from autotune.errors import WorkloadError
from autotune.worker.factory import one_line, resolve_factory

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
}

BatchForm = Literal["tensor", "tuple", "dict"]


@dataclass(frozen=True)
class InputLayout:
    """How a flat tuple of tensors maps onto the model's call: names, which are keyword, the batch's form."""

    names: tuple[str, ...]
    keyword: tuple[bool, ...]
    form: BatchForm = "tuple"

    @property
    def n_positional(self) -> int:
        return sum(1 for k in self.keyword if not k)

    @property
    def has_keywords(self) -> bool:
        return any(self.keyword)

    def call(self, model: Callable[..., Any], flat: Sequence[Any]) -> Any:
        n = self.n_positional
        if not self.has_keywords:
            return model(*flat)
        return model(*flat[:n], **dict(zip(self.names[n:], flat[n:], strict=True)))


class KeywordAdapter(torch.nn.Module):
    """``forward(*tensors)`` -> ``model(*positional, **keyword)``: what trace, export and the exporters see.

    Only used when the model takes keyword inputs; a positional model is built as it is.
    """

    def __init__(self, model: torch.nn.Module, layout: InputLayout) -> None:
        super().__init__()
        self.model = model
        self.layout = layout

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.layout.call(self.model, tensors)


def adapt(model: torch.nn.Module, layout: InputLayout) -> torch.nn.Module:
    """The model as the builders see it: itself when positional, else a :class:`KeywordAdapter`."""
    return KeywordAdapter(model, layout).eval() if layout.has_keywords else model


def shape_text(layout: InputLayout, flat: Sequence[torch.Tensor]) -> str:
    """``input_ids 8x32, attention_mask 8x32``: a batch's shapes, the key of its shape bucket."""
    return ", ".join(f"{n} {'x'.join(str(d) for d in t.shape)}" for n, t in zip(layout.names, flat, strict=True))


@dataclass(frozen=True)
class Traffic:
    """The batches of one batch size, flat and on the device, with what was learnt about their shapes."""

    layout: InputLayout
    batches: tuple[tuple[torch.Tensor, ...], ...]
    source: Literal["factory", "inputs"]
    #: Per flat input: the dims (never 0) whose size differs between batches.
    dynamic_dims: tuple[tuple[int, ...], ...]
    buckets: tuple[int, ...] = ()
    pad_values: Mapping[str, float] = field(default_factory=dict)

    @property
    def rows(self) -> tuple[int, ...]:
        return tuple(int(b[0].shape[0]) for b in self.batches)

    @property
    def samples_per_call(self) -> float:
        return sum(self.rows) / len(self.batches)

    @property
    def has_dynamic_dims(self) -> bool:
        return any(self.dynamic_dims)

    def shape_keys(self) -> tuple[str, ...]:
        return tuple(shape_text(self.layout, b) for b in self.batches)

    def example_index(self) -> int:
        """The batch variants are built from: the largest (most elements); a dynamic dim is then exported at
        its largest size, and a trace sees the full batch."""
        sizes = [sum(t.numel() for t in b) for b in self.batches]
        return max(range(len(sizes)), key=lambda i: (sizes[i], -i))

    @property
    def example(self) -> tuple[torch.Tensor, ...]:
        return self.batches[self.example_index()]

    def gate_batches(self, count: int) -> list[tuple[torch.Tensor, ...]]:
        """Batches for the correctness gate: one of every distinct shape first (a variant that specialised on
        the example's shape fails there), then the rest in order, up to ``count`` (more if there are more
        shapes: every shape is checked). For the example's shape another batch is preferred to the example
        itself: a trace is always right on its own example."""
        keys = self.shape_keys()
        ex = self.example_index()
        first_of: dict[str, int] = {}
        for i, k in enumerate(keys):
            if i != ex:
                first_of.setdefault(k, i)
        first_of.setdefault(keys[ex], ex)
        chosen = list(first_of.values())
        order = chosen + [i for i in range(len(keys)) if i not in chosen]
        return [self.batches[i] for i in order[:max(count, len(chosen))]]

    def build_dims(self) -> tuple[tuple[int, ...], ...] | None:
        """Per input, the dims a variant is built dynamic in (``build_variant(dynamic_dims=...)``).

        The batch dim 0 always (a service sees partial batches, and the artifact must take every batch size
        up to the recommended one: a dynamic batch dim measured as fast as a static one, see README's artifact
        section), plus the dims that vary in the factory's batches. None only for one batch of one row (random
        inputs at batch size 1: nothing varies, nothing is left dynamic).
        """
        if self.source == "factory":
            return tuple((0, *dims) for dims in self.dynamic_dims)
        if max(self.rows) > 1:
            return tuple((0,) for _ in self.layout.names)
        return None

    def dynamic_dim_names(self) -> list[str]:
        return [f"{n}[{d}]" for n, dims in zip(self.layout.names, self.dynamic_dims, strict=True) for d in dims]

    def describe(self) -> dict[str, Any]:
        """The report's ``data`` section (what the traffic is), without timings."""
        # per-sample shapes ("b" for the batch dim): what the data looks like whatever the batch size it was
        # loaded at (validation loads it at 2)
        counts = Counter(", ".join(f"{n} {'x'.join(['b', *(str(d) for d in t.shape[1:])])}"
                                   for n, t in zip(self.layout.names, batch, strict=True)) for batch in self.batches)
        return {
            "source": self.source,
            "batches": len(self.batches),
            "samples": sum(self.rows),
            "form": self.layout.form,
            "inputs": list(self.layout.names),
            "keyword_inputs": [n for n, k in zip(self.layout.names, self.layout.keyword, strict=True) if k],
            "dtypes": [str(t.dtype).replace("torch.", "") for t in self.batches[0]],
            "dynamic_dims": self.dynamic_dim_names(),
            "shapes": [{"shape": k, "batches": c} for k, c in counts.items()],
            "buckets": list(self.buckets) if self.has_dynamic_dims else None,
        }


def dynamic_shapes_for(target: Any, example: Sequence[Any], dynamic_dims: Sequence[Sequence[int]]) -> Any:
    """``dynamic_shapes`` for ``torch.export.export`` / ``torch.onnx.export(dynamo=True)``: per input its dims
    as ``Dim.DYNAMIC`` (torch decides the range, or specialises a dim the model's code fixes); a
    ``forward(*tensors)`` (:class:`KeywordAdapter`) takes them as one varargs parameter, so they are nested once.
    """
    import inspect

    shapes = tuple({d: torch.export.Dim.DYNAMIC for d in dims} if isinstance(x, torch.Tensor) and dims else None
                   for x, dims in zip(example, dynamic_dims, strict=True))
    try:
        params = inspect.signature(target.forward).parameters.values()
        varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    except (TypeError, ValueError, AttributeError):
        varargs = False
    return (shapes,) if varargs else shapes


def output_paths(out: Any) -> list[tuple[str, str]]:
    """``(name, path)`` of each output leaf in pytree order: the order in which the runtimes (and a flattened
    AOTInductor package) return outputs, and the names the exported graphs give them.

    ``path`` is pytree's key path (``['logits']``, ``[0]``, ``''`` for a lone tensor); ``name`` is it as one
    identifier-like word (``logits``, ``output_0``, ``output``), made unique.
    """
    import torch.utils._pytree as pytree

    leaves, _ = pytree.tree_flatten_with_path(out)
    result: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path, _leaf in leaves:
        parts = []
        for key in path:
            for attr in ("key", "idx", "name"):
                if hasattr(key, attr):
                    parts.append(str(getattr(key, attr)))
                    break
        word = "_".join("".join(c if c.isalnum() or c == "_" else "_" for c in p) for p in parts)
        name = word if word and word.isidentifier() else "output" + (f"_{word}" if word else "")
        base, n = name, 1
        while name in seen:
            name, n = f"{base}_{n}", n + 1
        seen.add(name)
        result.append((name, pytree.keystr(path)))
    return result


# ---------------------------------------------------------------------------------------------- loading


def _resolve_data_factory(recipe: Recipe) -> Callable[..., Any]:
    assert recipe.data is not None
    return resolve_factory(recipe.data, recipe_path=recipe.path, field="data.factory")


def _where(recipe: Recipe) -> str:
    assert recipe.data is not None
    return f"{recipe.path}: field 'data.factory': '{recipe.data.factory}'"


def _flatten_batch(recipe: Recipe, index: int, batch: Any
                   ) -> tuple[BatchForm, tuple[str, ...], tuple[torch.Tensor, ...]]:
    where = _where(recipe)

    def bad(path: str, value: Any) -> WorkloadError:
        kind = type(value).__name__
        return WorkloadError(f"{where}: batch {index}: {path} is a {kind}, expected a torch.Tensor (a batch is a "
                             "tensor, a tuple of tensors or a dict of tensors)")

    if isinstance(batch, torch.Tensor):
        return "tensor", ("input0",), (batch,)
    if isinstance(batch, (tuple, list)):
        if not batch:
            raise WorkloadError(f"{where}: batch {index} is an empty {type(batch).__name__}")
        for i, t in enumerate(batch):
            if not isinstance(t, torch.Tensor):
                raise bad(f"item {i}", t)
        return "tuple", tuple(f"input{i}" for i in range(len(batch))), tuple(batch)
    if isinstance(batch, Mapping):
        if not batch:
            raise WorkloadError(f"{where}: batch {index} is an empty dict")
        for k, t in batch.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise WorkloadError(f"{where}: batch {index}: key {k!r} is not a keyword argument name")
            if not isinstance(t, torch.Tensor):
                raise bad(f"key '{k}'", t)
        return "dict", tuple(batch.keys()), tuple(batch.values())
    raise bad("the batch", batch)


def _check_rows(recipe: Recipe, index: int, names: Sequence[str], flat: Sequence[torch.Tensor],
                batch_size: int) -> None:
    where = _where(recipe)
    for n, t in zip(names, flat, strict=True):
        if t.dim() == 0:
            raise WorkloadError(f"{where}: batch {index}: '{n}' is a 0-dim tensor; every input needs the batch "
                                "dimension first")
    rows = {n: int(t.shape[0]) for n, t in zip(names, flat, strict=True)}
    if len(set(rows.values())) > 1:
        raise WorkloadError(f"{where}: batch {index}: inputs disagree on the batch size (dim 0): "
                            + ", ".join(f"'{n}' {r}" for n, r in rows.items()))
    r = next(iter(rows.values()))
    if not 1 <= r <= batch_size:
        raise WorkloadError(f"{where}: batch {index} has {r} rows for batch_size={batch_size}; a batch must have "
                            f"between 1 and batch_size rows")


def load_factory_batches(recipe: Recipe, *, batch_size: int, seed: int = 0
                         ) -> tuple[InputLayout, list[tuple[torch.Tensor, ...]]]:
    """Call the data factory and validate what it yields (rules in the module docstring); CPU tensors."""
    data = recipe.data
    assert data is not None
    factory = _resolve_data_factory(recipe)
    where = _where(recipe)
    torch.manual_seed(seed)  # a factory that draws random batches draws the same ones in every worker
    try:
        produced = factory(batch_size=batch_size, **dict(data.kwargs))
        iterator = iter(produced)
    except TypeError as exc:
        if "not iterable" in str(exc):
            raise WorkloadError(f"{where} returned {type(produced).__name__}, expected an iterable of batches "
                                "(a list, a generator or a DataLoader)") from None
        raise WorkloadError(f"{where} raised with batch_size={batch_size} and kwargs {dict(data.kwargs)}: "
                            f"{one_line(exc)}") from None
    except Exception as exc:
        raise WorkloadError(f"{where} raised with batch_size={batch_size} and kwargs {dict(data.kwargs)}: "
                            f"{one_line(exc)}") from None
    layout: InputLayout | None = None
    first: tuple[torch.Tensor, ...] = ()
    batches: list[tuple[torch.Tensor, ...]] = []
    while len(batches) < data.max_batches:
        try:
            batch = next(iterator)
        except StopIteration:
            break
        except Exception as exc:
            raise WorkloadError(f"{where} raised while yielding batch {len(batches)}: {one_line(exc)}") from None
        i = len(batches)
        form, names, flat = _flatten_batch(recipe, i, batch)
        _check_rows(recipe, i, names, flat, batch_size)
        flat = tuple(t.detach() for t in flat)
        if layout is None:
            layout = InputLayout(names=names, keyword=tuple(form == "dict" for _ in names), form=form)
            first = flat
        else:
            if form != layout.form or names != layout.names:
                raise WorkloadError(f"{where}: batch {i} is a {form} with inputs {list(names)}, but batch 0 is a "
                                    f"{layout.form} with inputs {list(layout.names)}; every batch must have the "
                                    "same form")
            for n, t, t0 in zip(names, flat, first, strict=True):
                if t.dtype != t0.dtype or t.dim() != t0.dim():
                    raise WorkloadError(
                        f"{where}: batch {i}: '{n}' is {str(t.dtype).replace('torch.', '')} with {t.dim()} dims, "
                        f"but {str(t0.dtype).replace('torch.', '')} with {t0.dim()} dims in batch 0")
        batches.append(flat)
    if layout is None:
        raise WorkloadError(f"{where} yielded no batches for batch_size={batch_size}")
    return layout, batches


def random_batch(specs: Sequence[InputSpec], *, batch_size: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random inputs on the CPU: normal floats; integers uniform in ``range`` or ``[0, vocab_size)``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tensors = []
    for spec in specs:
        shape = (batch_size, *spec.shape)
        if spec.is_integer:
            low, high = spec.range if spec.range else (0, spec.vocab_size or 1)
            t = torch.randint(low, high, shape, generator=gen, dtype=_DTYPES[spec.dtype])
        else:
            t = torch.randn(shape, generator=gen, dtype=torch.float32).to(_DTYPES[spec.dtype])
        tensors.append(t)
    return tuple(tensors)


def inputs_layout(specs: Sequence[InputSpec]) -> InputLayout:
    keyword = tuple(s.keyword for s in specs)
    return InputLayout(names=tuple(s.name for s in specs), keyword=keyword,
                       form="dict" if all(keyword) else "tuple")


def dynamic_dims_of(batches: Sequence[Sequence[torch.Tensor]]) -> tuple[tuple[int, ...], ...]:
    if not batches:
        return ()
    out = []
    for j, t0 in enumerate(batches[0]):
        dims = tuple(d for d in range(1, t0.dim()) if len({int(b[j].shape[d]) for b in batches}) > 1)
        out.append(dims)
    return tuple(out)


def default_buckets(batches: Sequence[Sequence[torch.Tensor]], dynamic: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Powers of two from the smallest dynamic size seen up to the largest, which is always a bucket."""
    sizes = [int(b[j].shape[d]) for b in batches for j, dims in enumerate(dynamic) for d in dims]
    if not sizes:
        return ()
    lo, hi = min(sizes), max(sizes)
    out = {hi}
    p = 1 << max(0, math.ceil(math.log2(lo)))
    while p < hi:
        out.add(p)
        p *= 2
    return tuple(sorted(out))


def load_traffic(recipe: Recipe, *, batch_size: int, device: torch.device, seed: int = 0) -> Traffic:
    """The traffic of ``batch_size``: the factory's batches, or one random batch from ``[[inputs]]``."""
    if recipe.data is None:
        layout = inputs_layout(recipe.inputs)
        flat = random_batch(recipe.inputs, batch_size=batch_size, seed=seed)
        return Traffic(layout=layout, batches=(tuple(t.to(device) for t in flat),), source="inputs",
                       dynamic_dims=tuple(() for _ in flat))
    layout, batches = load_factory_batches(recipe, batch_size=batch_size, seed=recipe.search.seed)
    dynamic = dynamic_dims_of(batches)
    buckets = recipe.data.buckets or default_buckets(batches, dynamic)
    return Traffic(layout=layout, batches=tuple(tuple(t.to(device) for t in b) for b in batches), source="factory",
                   dynamic_dims=dynamic, buckets=tuple(buckets), pad_values=dict(recipe.data.pad_values))


# ---------------------------------------------------------------------------------------------- buckets


@dataclass(frozen=True)
class BucketPlan:
    """Pad dynamic dims up to the next bucket before a call; slice the output's matching dims back after it.

    Which output dims follow an input's dynamic dim is learnt, not guessed from sizes (a hidden size of 128
    and a bucket of 128 look alike): :func:`bucket_plan` runs the eager model on the example padded to two
    different lengths and records which output leaves' dims changed. Pseudo-code::

        call(x):  for each input j, dynamic dim d:  L = x[j].shape[d]; P = smallest bucket >= L (else L)
                                                    x[j] = pad(x[j], dim d up to P, value pad_values[name])
                  out = fn(*x)
                  for each output leaf path p, dim e that follows the dynamic length: out[p] = out[p][..., :L]
    """

    layout: InputLayout
    dynamic_dims: tuple[tuple[int, ...], ...]
    buckets: tuple[int, ...]
    pad_values: tuple[float, ...]
    #: (leaf index in pytree order, dim) of output dims that follow the (first) dynamic length.
    output_dims: tuple[tuple[int, int], ...]

    def bucket_of(self, size: int) -> int:
        for b in self.buckets:
            if b >= size:
                return b
        return size

    def pad(self, flat: Sequence[torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], int | None]:
        out = []
        length: int | None = None
        for t, dims, value in zip(flat, self.dynamic_dims, self.pad_values, strict=True):
            for d in dims:
                size = int(t.shape[d])
                length = size if length is None else length
                target = self.bucket_of(size)
                if target > size:
                    pad_shape = list(t.shape)
                    pad_shape[d] = target - size
                    t = torch.cat([t, t.new_full(pad_shape, value)], dim=d)
            out.append(t)
        return tuple(out), length

    def unpad(self, out: Any, length: int | None) -> Any:
        if length is None or not self.output_dims:
            return out
        import torch.utils._pytree as pytree

        leaves, spec = pytree.tree_flatten(out)
        for i, d in self.output_dims:
            leaf = leaves[i]
            if isinstance(leaf, torch.Tensor) and leaf.dim() > d and leaf.shape[d] > length:
                leaves[i] = leaf.narrow(d, 0, length)
        return pytree.tree_unflatten(leaves, spec)

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def bucketed(*flat: torch.Tensor) -> Any:
            padded, length = self.pad(flat)
            return self.unpad(fn(*padded), length)

        return bucketed

    def describe(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "output_dims": [list(x) for x in self.output_dims]}


def bucket_plan(model: Callable[..., Any], traffic: Traffic) -> BucketPlan:
    """Learn which output dims follow the dynamic length (see :class:`BucketPlan`) with two eager calls."""
    import torch.utils._pytree as pytree

    pads = tuple(float(traffic.pad_values.get(n, 0.0)) for n in traffic.layout.names)
    probe = BucketPlan(traffic.layout, traffic.dynamic_dims, (), pads, ())
    example = traffic.example
    base = [int(t.shape[d]) for t, dims in zip(example, traffic.dynamic_dims, strict=True) for d in dims]
    longer = BucketPlan(traffic.layout, traffic.dynamic_dims, (max(base) + 3,), pads, ())
    with torch.inference_mode():
        a = pytree.tree_leaves(model(*probe.pad(example)[0]))
        b = pytree.tree_leaves(model(*longer.pad(example)[0]))
    dims: list[tuple[int, int]] = []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dim() == y.dim():
            dims.extend((i, d) for d in range(x.dim()) if x.shape[d] != y.shape[d])
    return BucketPlan(traffic.layout, traffic.dynamic_dims, traffic.buckets, pads, tuple(dims))


class TrafficCall:
    """A zero-argument call that serves the traffic's batches in turn: the timed unit of a candidate.

    ``index`` is the batch the *last* call served, so per-call timings can be attributed to shape buckets.
    One step costs a list index and an integer add, far below a microsecond.
    """

    def __init__(self, fn: Callable[..., Any], batches: list[tuple[Any, ...]]) -> None:
        self._fn = fn
        self._batches = batches
        self._n = len(batches)
        self.index = -1

    def __len__(self) -> int:
        return self._n

    def reset(self) -> None:
        self.index = -1

    def __call__(self) -> Any:
        i = self.index + 1
        if i == self._n:
            i = 0
        self.index = i
        return self._fn(*self._batches[i])


def iterate_all(call: TrafficCall) -> None:
    """One call per batch (a whole pass), from the first batch."""
    call.reset()
    for _ in range(len(call)):
        call()


__all__ = [
    "BucketPlan",
    "InputLayout",
    "KeywordAdapter",
    "Traffic",
    "TrafficCall",
    "adapt",
    "bucket_plan",
    "default_buckets",
    "dynamic_dims_of",
    "dynamic_shapes_for",
    "inputs_layout",
    "iterate_all",
    "load_factory_batches",
    "load_traffic",
    "output_paths",
    "random_batch",
    "shape_text",
]
