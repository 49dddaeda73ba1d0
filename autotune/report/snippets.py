"""Code fragments shared by the loader snippet (:mod:`autotune.report.loader`) and the reproduction code
(:mod:`autotune.report.reproduce`): the artifact's calling interface, inputs, the runtimes' sessions, the torch
call. Pure text builders.

Everything that comes from the user (input and output names, dtypes, paths) is pasted as a ``repr()`` inside a
constant or as docstring text with its quotes neutralised, never as an identifier: a data factory's dict keys
are valid identifiers, but ``class`` is one too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.report.codegen import py_comment, py_doc, py_int, torch_dtype

_REDUCED = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}
_NUMPY_DTYPES = {"float32": "np.float32", "float16": "np.float16", "int64": "np.int64", "int32": "np.int32"}
_INTEGER_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
#: How many sizes of a dim the docstring lists, and its line width.
_SHAPES_LISTED = 8
_WIDTH = 110


# ---- the interface: what predict takes and returns --------------------------------------------------------


def interface_of(recipe: Mapping[str, Any], section: Mapping[str, Any] | None, batch: int) -> dict[str, Any]:
    """The artifact's calling interface: the one the worker recorded (``section["interface"]``,
    :func:`autotune.worker.artifact.describe_interface`), else one made from the recipe's ``[[inputs]]`` for reports
    written before it existed (positional inputs first, then keyword ones; every dim static; outputs unknown)."""
    recorded = section.get("interface") if isinstance(section, Mapping) else None
    if isinstance(recorded, Mapping) and recorded.get("inputs"):
        return dict(recorded)
    inputs = []
    for i, spec in enumerate(recipe.get("inputs") or []):
        dtype = str(spec.get("dtype") or "float32")
        bounds = spec.get("range")
        if not bounds and dtype in _INTEGER_DTYPES:
            bounds = [0, int(spec.get("vocab_size") or 2)]
        inputs.append({"name": str(spec.get("name") or f"input{i}"), "keyword": bool(spec.get("keyword")),
                       "dtype": dtype, "shape": [batch, *(int(d) for d in spec.get("shape") or [])],
                       "range": [int(b) for b in bounds] if bounds else None, "dynamic_dims": []})
    keyword = [bool(x["keyword"]) for x in inputs]
    form = "dict" if keyword and all(keyword) else "tuple"
    return {"source": "inputs", "form": form, "inputs": inputs, "outputs": [], "batch_size": batch, "shapes": []}


def doc_text(text: str) -> str:
    """``text`` safe inside a triple-quoted docstring (:func:`autotune.report.codegen.py_doc`)."""
    return py_doc(text)


def _n_positional(iface: Mapping[str, Any]) -> int:
    return sum(1 for x in iface["inputs"] if not x.get("keyword"))


def call_example(iface: Mapping[str, Any]) -> str:
    """``predict(input_ids=..., attention_mask=...)``: how one batch is passed (docstring text)."""
    n = _n_positional(iface)
    names = [str(x["name"]) for x in iface["inputs"]]
    return "predict(" + ", ".join([*names[:n], *(f"{k}=..." for k in names[n:])]) + ")"


def call_line(iface: Mapping[str, Any], batch: str = "batch") -> str:
    """``predict(**batch)``: the call of one batch of :func:`make_inputs`'s form, as code."""
    n, total = _n_positional(iface), len(iface["inputs"])
    if iface.get("form") == "tensor" and total == 1:
        return f"predict({batch})"
    if n == total:
        return f"predict(*{batch})"
    if n == 0:
        return f"predict(**{batch})"
    return f"predict(*{batch}[0], **{batch}[1])"


def interface_doc_lines(iface: Mapping[str, Any], *, batch: int, outputs_are: str,
                        buckets: Mapping[str, Any] | None) -> list[str]:
    """The docstring's description of the interface: inputs (form, dtypes, shapes, dynamic dims, the batch
    sizes and shapes taken), bucket padding, outputs (names and pytree paths, in order), ``make_inputs``."""
    inputs = iface["inputs"]
    form = str(iface.get("form") or "tuple")
    n = _n_positional(iface)
    how = {"dict": "keyword arguments, like one batch (a dict) of the data",
           "tensor": "one tensor, like one batch of the data",
           "tuple": "positional arguments" + (", then keyword ones" if n < len(inputs) else "")}.get(form, form)
    lines = [f"    outputs = {call_example(iface)}", f"    outputs = {call_line(iface, 'make_inputs()')}", "",
             f"Inputs ({how}; torch tensors or numpy arrays):"]
    for x in inputs:
        dyn = list(x.get("dynamic_dims") or [])
        shape = "x".join(str(d) for d in x.get("shape") or [])
        lines.append(f"    {x['name']}: {x.get('dtype')}, {shape} in the first batch"
                     + (f"; dynamic dims {dyn}" if dyn else "; static"))
    batch_dynamic = bool(inputs) and all(0 in (x.get("dynamic_dims") or []) for x in inputs)
    lines.append(f"Batch sizes 1 to {batch} (dim 0 is dynamic)." if batch_dynamic else
                 f"Exactly batch size {batch} (the artifact was built for it).")
    sizes = iface.get("dynamic_sizes") or {}
    if iface.get("source") == "factory":
        rows = [str(r) for r in iface.get("batch_rows") or []]
        seen = [f"{dim} {_listed(values)}" for dim, values in sizes.items()]
        lines += _wrapped(f"The data's {len(iface.get('shapes') or [])} batch shapes are all taken: rows "
                          f"{_listed(rows)}" + (", sizes " + "; ".join(seen) if seen else "") + ".")
    if buckets:
        lines += _wrapped(f"Dynamic dims are padded up to the next bucket of {list(buckets.get('buckets') or [])} "
                          "before the call (PAD_DIMS, PAD_VALUES), and the output dims that follow them are sliced "
                          "back after it (SLICE), as autotune measured it (+buckets).")
    outs = list(iface.get("outputs") or [])
    lines.append(f"Outputs: {outputs_are}" + (":" if outs else "."))
    for i, o in enumerate(outs):
        shape = "x".join(str(d) for d in o.get("shape") or [])
        lines.append(f"    [{i}] {o.get('name')}: path {o.get('path') or '(the output itself)'}, {o.get('dtype')}, "
                     f"{shape} on the build example")
    ranges = [f"{x['name']} [{x['range'][0]}, {x['range'][1]})" for x in inputs if x.get("range")]
    like = "the data's first batch" if iface.get("source") == "factory" else f"a batch of {batch}"
    lines += _wrapped("make_inputs(batch_size=None): the typical batch of the traffic saved beside this file "
                      "(traffic.npz; of its fullest batches, the one nearest the traffic's mean size per row, where "
                      "the report's throughput is over the whole traffic), its rows repeated in turn to batch_size; "
                      "without it, random inputs shaped like "
                      f"{like} (floats standard normal"
                      + (", integers uniform in the range " + ("seen in the data" if iface.get("source") == "factory"
                                                              else "of the recipe") + ": " + ", ".join(ranges)
                         if ranges else "") + "); in the form predict takes.")
    return [doc_text(line) for line in lines]


def _listed(values: Sequence[Any]) -> str:
    values = [str(v) for v in values]
    if len(values) > _SHAPES_LISTED:
        return ", ".join(values[:_SHAPES_LISTED - 1]) + f", ... {values[-1]} ({len(values)} sizes)"
    return ", ".join(values)


def _wrapped(text: str) -> list[str]:
    import textwrap

    return textwrap.wrap(" ".join(text.split()), width=_WIDTH, break_on_hyphens=False) or [""]


def interface_lines(iface: Mapping[str, Any], *, batch: int) -> list[str]:
    """The interface's constants and ``_flatten`` (predict's arguments in the artifact's input order)."""
    names = [str(x["name"]) for x in iface["inputs"]]
    n = _n_positional(iface)
    outputs = [str(o.get("name")) for o in iface.get("outputs") or []]
    sample = [(str(x.get("dtype") or "float32"), [int(d) for d in x.get("shape") or []],
               [int(b) for b in x["range"]] if x.get("range") else None) for x in iface["inputs"]]
    return [
        f"BATCH_SIZE = {batch}  # the largest batch the artifact takes (built and measured at it)",
        f"INPUTS = {names!r}  # the artifact's inputs, in the order it takes them",
        f"N_POSITIONAL = {n}  # INPUTS[:N_POSITIONAL] are predict's positional arguments, the rest keyword ones",
        f"OUTPUTS = {outputs!r}  # predict's outputs, in pytree order of the model's output",
        "# per input: dtype, shape in the data's first batch (or the recipe's), integer range [low, high) or None",
        f"SAMPLE = {sample!r}",
        "",
        "",
        "def _flatten(args, kwargs):",
        '    """predict\'s arguments in INPUTS order."""',
        "    keyword = INPUTS[N_POSITIONAL:]",
        "    if len(args) != N_POSITIONAL or sorted(kwargs) != sorted(keyword):",
        '        raise TypeError(f"predict takes {N_POSITIONAL} positional input(s) and the keyword inputs "',
        '                        f"{keyword}; got {len(args)} positional and {sorted(kwargs)}")',
        "    return [*args, *(kwargs[name] for name in keyword)]",
        "",
        "",
        "def _form(xs):",
        '    """Inputs in INPUTS order as predict takes them (the form of one batch)."""',
        "    " + _form_return(iface),
    ]


def _form_return(iface: Mapping[str, Any]) -> str:
    n, total = _n_positional(iface), len(iface["inputs"])
    if iface.get("form") == "tensor" and total == 1:
        return "return xs[0]"
    if n == total:
        return "return tuple(xs)"
    if n == 0:
        return "return dict(zip(INPUTS, xs))"
    return "return tuple(xs[:N_POSITIONAL]), dict(zip(INPUTS[N_POSITIONAL:], xs[N_POSITIONAL:]))"


def bucket_lines(buckets: Mapping[str, Any], names: Sequence[str], *, numpy: bool) -> list[str]:
    """``_pad`` / ``_unpad``: :class:`autotune.worker.traffic.BucketPlan`'s padding, for numpy arrays or torch
    tensors."""
    per_input = {str(x.get("name")): x for x in buckets.get("inputs") or []}
    dims = [[int(d) for d in per_input[n].get("dims") or []] if n in per_input else [] for n in names]
    values = [float(per_input[n].get("pad_value") or 0.0) if n in per_input else 0.0 for n in names]
    cat = ("np.concatenate([x, np.full(shape, value, dtype=x.dtype)], axis=d)" if numpy else
           "torch.cat([x, x.new_full(shape, value)], dim=d)")
    return [
        f"BUCKETS = {[int(b) for b in buckets.get('buckets') or []]!r}",
        f"PAD_DIMS = {dims!r}  # per input, the dims padded up to a bucket",
        f"PAD_VALUES = {values!r}  # per input, the value padding is filled with",
        f"SLICE = {[[int(i), int(d)] for i, d in buckets.get('output_dims') or []]!r}"
        "  # (output index, dim): cut back to the unpadded length",
        "",
        "",
        "def _pad(xs):",
        '    """Each dynamic dim padded up to the next bucket; returns the inputs and the (first) unpadded length."""',
        "    out, length = [], None",
        "    for x, dims, value in zip(xs, PAD_DIMS, PAD_VALUES):",
        "        for d in dims:",
        "            size = int(x.shape[d])",
        "            length = size if length is None else length",
        "            target = next((b for b in BUCKETS if b >= size), size)",
        "            if target > size:",
        "                shape = list(x.shape)",
        "                shape[d] = target - size",
        f"                x = {cat}",
        "        out.append(x)",
        "    return out, length",
        "",
        "",
        "def _unpad(outputs, length):",
        '    """The outputs (a flat list) with the dims that follow the padded length cut back to it."""',
        "    outputs = list(outputs)",
        "    for i, d in SLICE:",
        "        o = outputs[i]",
        "        if length is not None and o.ndim > d and o.shape[d] > length:",
        "            outputs[i] = o[(slice(None),) * d + (slice(0, length),)]",
        "    return outputs",
    ]


def numpy_make_inputs_lines() -> list[str]:
    """``make_inputs(batch_size=None)``: numpy arrays from ``SAMPLE`` in predict's form."""
    return [
        "_rng = np.random.default_rng(0)",
        "",
        "",
        "def make_inputs(batch_size=None):",
        '    """A batch like the ones autotune measured, in predict\'s form: the saved traffic\'s typical one (see the',
        '    module docstring), else random."""',
        "    xs = _traffic_rows(batch_size)",
        "    if xs is not None:",
        "        return _form(xs)",
        "    xs = []",
        "    for dtype, shape, bounds in SAMPLE:",
        "        shape = [batch_size or shape[0], *shape[1:]]",
        "        if bounds is not None:",
        "            xs.append(_rng.integers(bounds[0], bounds[1], shape).astype(dtype))",
        '        elif dtype == "bool":',
        "            xs.append(_rng.random(shape) < 0.5)",
        "        else:",
        '            xs.append(_rng.standard_normal(shape).astype(dtype if dtype in ("float16", "float64") else '
        '"float32"))',
        "    return _form(xs)",
    ]


def traffic_batch_lines() -> list[str]:
    """``_traffic_rows(batch_size)`` and ``traffic_batch()``: the typical batch of the traffic saved beside the
    loader (None without it), what ``python load.py`` runs and ``make_inputs`` returns. Random inputs are not inputs
    every model takes: a BART classifier needs an <eos> in every row, and its artifact's ``run.sh`` failed on a random
    batch, as did a plain process timing it on ``make_inputs()`` (session 38).

    Typical, not first (``_typical_key``: of the batches with the most rows, the first whose size per row is nearest
    the traffic's mean): the report's throughput is over the whole traffic, and a plain process timing the loader on
    one batch times that batch's shape. A DeBERTa on sentences of 20-128 tokens, padded per batch (session 43): the
    first batch, 16x93, ran 392-472 samples/s in plain processes, the traffic 375-400 (16x128 alone 308); the
    typical batch, 16x104, 391. With one shape (an image model) every batch is typical and the first is taken."""
    return [
        "def _traffic_rows(batch_size=None):",
        '    """The typical batch of the traffic autotune measured (traffic.npz beside this file: _typical_key), numpy',
        '    arrays in INPUTS order, its rows repeated in turn to batch_size (None: as saved); None without it."""',
        "    import pathlib",
        "",
        "    import numpy",
        "",
        '    path = pathlib.Path(__file__).resolve().parent / "traffic.npz"',
        "    if not path.exists():",
        "        return None",
        "    with numpy.load(path, allow_pickle=False) as data:",
        "        key = _typical_key(data)",
        '        xs = [data[f"{key}.{name}"] if f"{key}.{name}" in data.files else None for name in INPUTS]',
        "    if any(x is None for x in xs):",
        "        return None",
        "    if batch_size:",
        "        index = numpy.arange(batch_size) % xs[0].shape[0]",
        "        xs = [numpy.ascontiguousarray(x[index]) for x in xs]",
        "    return xs",
        "",
        "",
        "def _typical_key(data):",
        '    """The saved batch that stands for the traffic ("b<i>"): of the batches with the most rows, the first',
        "    whose elements per row (all inputs) are nearest the traffic's mean. The report's throughput is over",
        "    the whole traffic; one batch of it, timed alone, gives what its own shape runs at (a batch padded to",
        '    the longest sentence runs slower than the traffic, one of short sentences faster)."""',
        "    import numpy",
        "",
        '    shapes = {}  # "b<i>" -> {input: shape}',
        "    for name in data.files:",
        '        key, _, inp = name.partition(".")',
        "        shapes.setdefault(key, {})[inp] = data[name].shape",
        "    keys = sorted((k for k in shapes if k[1:].isdigit()), key=lambda k: int(k[1:]))",
        "    if not keys:",
        '        return "b0"',
        "    rows = {k: max(s[0] for s in shapes[k].values()) for k in keys}",
        "    size = {k: sum(int(numpy.prod(s)) for s in shapes[k].values()) for k in keys}",
        "    mean = sum(size.values()) / max(1, sum(rows.values()))",
        "    most = max(rows.values())",
        "    return min((k for k in keys if rows[k] == most), key=lambda k: abs(size[k] / max(1, rows[k]) - mean))",
        "",
        "",
        "def traffic_batch():",
        '    """The typical batch of the traffic autotune measured (_typical_key), in predict\'s form; None without',
        '    it."""',
        "    xs = _traffic_rows()",
        "    return None if xs is None else _form(xs)",
    ]


def main_batch_lines() -> list[str]:
    """The ``__main__`` block's batch: the saved traffic's typical one (``_typical_key``), else :func:`make_inputs`'."""
    return ["    batch = traffic_batch()", "    if batch is None:", "        batch = make_inputs()"]


def torch_make_inputs_lines() -> list[str]:
    """``make_inputs(batch_size=None)``: torch tensors on ``device`` from ``SAMPLE`` in predict's form."""
    return [
        "def make_inputs(batch_size=None):",
        '    """A batch like the ones autotune measured, in predict\'s form: the saved traffic\'s typical one (see the',
        '    module docstring), else random."""',
        "    xs = _traffic_rows(batch_size)",
        "    if xs is not None:",
        "        return _form([torch.as_tensor(x, device=device) for x in xs])",
        "    gen = torch.Generator().manual_seed(0)",
        "    xs = []",
        "    for dtype, shape, bounds in SAMPLE:",
        "        shape = [batch_size or shape[0], *shape[1:]]",
        "        if bounds is not None:",
        "            x = torch.randint(bounds[0], bounds[1], shape, generator=gen, dtype=getattr(torch, dtype))",
        '        elif dtype == "bool":',
        "            x = torch.rand(shape, generator=gen) < 0.5",
        "        else:",
        "            x = torch.randn(shape, generator=gen).to(getattr(torch, dtype))",
        "        xs.append(x.to(device))",
        "    return _form(xs)",
    ]


def leaves_lines() -> list[str]:
    """``_leaves``: a torch output's tensors in pytree order (what a file artifact's predict returns)."""
    return [
        "def _leaves(out):",
        '    """The output\'s tensors in pytree order: a dict\'s values in order, tuples and lists in order."""',
        "    if out is None:",
        "        return []",
        "    if isinstance(out, dict):",
        "        return [t for v in out.values() for t in _leaves(v)]",
        "    if isinstance(out, (list, tuple)):",
        "        return [t for v in out for t in _leaves(v)]",
        "    return [out]",
    ]


# ---- inputs of the reproduction script -----------------------------------------------------------------


def _shape_expr(spec: Mapping[str, Any]) -> str:
    """The batch's shape as code: ``batch_size, 3, 64, 64`` (``batch_size,`` for a per-sample scalar)."""
    dims = [str(py_int(d, 1)) for d in spec.get("shape") or []]
    return ", ".join(["batch_size", *dims]) + ("" if dims else ",")


def numpy_input_lines(inputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """``make_inputs(batch_size)`` returning numpy arrays in the recipe's dtypes (runtimes take numpy)."""
    lines = ["_rng = np.random.default_rng(0)", "", "", "def make_inputs(batch_size=BATCH_SIZE):",
             '    """A random batch like the one autotune measured (normal floats, uniform tokens)."""',
             "    return ("]
    for spec in inputs:
        shape = _shape_expr(spec)
        dtype = str(spec.get("dtype") or "float32")
        np_dtype = _NUMPY_DTYPES.get(dtype, "np.float32")
        if dtype.startswith(("float", "bfloat")):
            cast = "" if np_dtype == "np.float32" else f".astype({np_dtype})"
            expr = f"_rng.standard_normal(({shape}), dtype=np.float32){cast}"
        else:
            expr = f"_rng.integers(0, {py_int(spec.get('vocab_size'), 2)}, ({shape}), dtype={np_dtype})"
        lines.append(f"        {expr},  # {_comment(spec.get('name'))}")
    return [*lines, "    )"]


def _comment(name: Any) -> str:
    return py_comment(" ".join(str(name or "input").split()))


def torch_input_lines(inputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """``make_inputs(batch_size)`` returning torch tensors on ``device`` in the recipe's dtypes."""
    lines = ["def make_inputs(batch_size=BATCH_SIZE):",
             '    """A random batch like the one autotune measured (normal floats, uniform tokens)."""',
             "    return ("]
    for spec in inputs:
        shape = _shape_expr(spec)
        dtype = str(spec.get("dtype") or "float32")
        dtype_expr = torch_dtype(dtype)
        if dtype.startswith(("float", "bfloat")):
            expr = f"torch.randn(({shape}), device=device).to({dtype_expr})"
        else:
            high = py_int(spec.get("vocab_size"), 2)
            expr = f"torch.randint(0, {high}, ({shape}), device=device, dtype={dtype_expr})"
        lines.append(f"        {expr},  # {_comment(spec.get('name'))}")
    return [*lines, "    )"]


# ---- the runtimes' sessions ---------------------------------------------------------------------------


def _array_lines() -> list[str]:
    return [
        "def _array(x):",
        '    """A torch tensor or anything numpy takes, as a C-contiguous numpy array."""',
        '    if hasattr(x, "detach"):',
        "        x = x.detach().cpu().numpy()",
        "    return np.ascontiguousarray(x)",
        "",
        "",
    ]


def onnx_lines(*, mode: str | None, threads: str, path: str, device: str, interface: bool = False,
               buckets: bool = False) -> list[str]:
    """``load()`` for an ONNX model: an InferenceSession with the options autotune measured.

    ``interface``: ``predict`` takes one batch in the artifact's form (``_flatten``, ``_array``; ``_pad`` /
    ``_unpad`` with ``buckets``) and returns the outputs as a list; else ``predict(*arrays)``.
    """
    parallel = mode == "parallel"
    providers = '["CUDAExecutionProvider", "CPUExecutionProvider"]' if device.startswith("cuda") else \
        '["CPUExecutionProvider"]'
    head = [
        "def load():",
        '    """An InferenceSession as autotune measured it: ORT_ENABLE_ALL, explicit thread counts."""',
        "    opts = ort.SessionOptions()",
        "    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL",
        f"    opts.execution_mode = ort.ExecutionMode.{'ORT_PARALLEL' if parallel else 'ORT_SEQUENTIAL'}",
        f"    opts.intra_op_num_threads = {threads}",
        f"    opts.inter_op_num_threads = {threads if parallel else 1}",
        f"    session = ort.InferenceSession({path}, opts, providers={providers})",
        "    names = [i.name for i in session.get_inputs()]",
        "",
    ]
    if not interface:
        return [*head, "    def predict(*arrays):",
                "        return session.run(None, dict(zip(names, arrays, strict=True)))", "", "    return predict"]
    return [*_array_lines(), *head, "    def predict(*args, **kwargs):",
            "        arrays = [_array(x) for x in _flatten(args, kwargs)]",
            *(["        arrays, length = _pad(arrays)"] if buckets else []),
            "        outputs = session.run(None, dict(zip(names, arrays, strict=True)))",
            "        return _unpad(outputs, length)" if buckets else "        return outputs",
            "", "    return predict"]


def openvino_lines(*, config: str, requests: str, model: str, interface: bool = False,
                   buckets: bool = False) -> list[str]:
    """``load()`` for an OpenVINO model: compiled with the measured configuration; with ``requests`` > 1
    a call splits the batch over an AsyncInferQueue (throughput hint), as autotune measured it: a batch of r
    rows as ``min(requests, r)`` near-equal chunks (equal ones for the full batch).

    ``interface``: as for :func:`onnx_lines`.
    """
    body = [
        "def load():",
        '    """The model compiled as autotune measured it (performance hint, threads, inference precision)."""',
        f"    compiled = ov.Core().compile_model({model}, \"CPU\", {config})",
        "    n_out = len(compiled.outputs)",
        f"    requests = {requests}",
        "    if requests == 1:",
        "        request = compiled.create_infer_request()",
        "",
        "        def run(arrays):",
        "            request.infer(list(arrays))",
        "            return [request.get_output_tensor(i).data.copy() for i in range(n_out)]",
        "    else:",
        "        queue = ov.AsyncInferQueue(compiled, requests)",
        "        results = [None] * requests",
        "",
        "        def done(request, index):",
        "            results[index] = [request.get_output_tensor(i).data.copy() for i in range(n_out)]",
        "",
        "        queue.set_callback(done)",
        "",
        "        def run(arrays):",
        "            rows = arrays[0].shape[0]",
        "            m = max(1, min(requests, rows))  # chunks of near-equal size, in order",
        "            cuts = [rows * i // m for i in range(m + 1)]",
        "            for i in range(m):",
        "                queue.start_async([a[cuts[i]:cuts[i + 1]] for a in arrays], userdata=i)",
        "            queue.wait_all()",
        "            return [np.concatenate([r[j] for r in results[:m]]) for j in range(n_out)]",
        "",
    ]
    if not interface:
        return [*body, "    def predict(*arrays):", "        return run(arrays)", "", "    return predict"]
    return [*_array_lines(), *body, "    def predict(*args, **kwargs):",
            "        arrays = [_array(x) for x in _flatten(args, kwargs)]",
            *(["        arrays, length = _pad(arrays)"] if buckets else []),
            "        return _unpad(run(arrays), length)" if buckets else "        return run(arrays)",
            "", "    return predict"]


# ---- the torch call -----------------------------------------------------------------------------------


def torch_prepare_lines(rec: Mapping[str, Any]) -> list[str]:
    """``_prepare(inputs)``: float inputs cast to the variant's precision and memory format."""
    precision = str(rec.get("precision") or "fp32")
    reduced = _REDUCED.get(precision.removeprefix("autocast-"))
    lines = ["def _prepare(inputs):",
             '    """Inputs as autotune fed the variant: float inputs cast to its precision, its memory format."""',
             "    out = []", "    for x in inputs:", "        if x.is_floating_point():"]
    body = []
    if reduced and not precision.startswith("autocast"):
        body.append(f"            x = x.to({reduced})")
    if rec.get("memory_format") == "channels_last":
        body += ["            if x.dim() == 4:", "                x = x.contiguous(memory_format=torch.channels_last)"]
    lines += body or ["            pass"]
    return [*lines, "        out.append(x)", "    return out"]


def torch_context(rec: Mapping[str, Any], *, runtime_autocast: bool) -> str:
    """The context a torch call runs in: inference mode, and autocast where eager/script enter it per call."""
    reduced = _REDUCED.get(str(rec.get("precision") or "fp32").removeprefix("autocast-"))
    if runtime_autocast and reduced:
        return f"torch.inference_mode(), torch.autocast(device.type, dtype={reduced})"
    return "torch.inference_mode()"


def torch_predict_lines(*, context: str, call: str, flat: bool, buckets: bool, rows: bool = False) -> list[str]:
    """``predict(*args, **kwargs)`` around a loaded torch callable: inputs as tensors on ``device`` in INPUTS
    order (padded to buckets; ``rows``: their rows padded up to a call size, :func:`row_padding_lines`),
    ``_prepare``, the call in ``context``; ``flat``: the outputs as ``_leaves`` (cut back with ``_unpad``), else
    the model's own structure (cut back leaf by leaf)."""
    structured = (buckets or rows) and not flat
    lines = ["    import torch.utils._pytree as pytree", ""] if structured else []
    lines += ["    def predict(*args, **kwargs):",
             "        xs = [torch.as_tensor(x, device=device) for x in _flatten(args, kwargs)]",
             *(["        xs, length = _pad(xs)"] if buckets else []),
             *(["        xs, rows = _pad_rows(xs)"] if rows else []),
             "        xs = _prepare(xs)",
             f"        with {context}:",
             f"            out = {call}"]
    cut = [*(["_unpad", "length"] if buckets else []), *(["_unpad_rows", "rows"] if rows else [])]

    def cut_back(expr: str) -> str:
        for i in range(0, len(cut), 2):
            expr = f"{cut[i]}({expr}, {cut[i + 1]})"
        return expr

    if flat:
        lines.append(f"        return {cut_back('_leaves(out)')}")
    elif structured:
        lines += ["        leaves, spec = pytree.tree_flatten(out)",
                  f"        return pytree.tree_unflatten({cut_back('leaves')}, spec)"]
    else:
        lines.append("        return out")
    return [*lines, "", "    return predict"]


def call_sizes(batch: int) -> list[int]:
    """The batch sizes a static-shape torch.compile artifact runs its model at: the powers of two below ``batch``,
    and ``batch`` (:func:`row_padding_lines`)."""
    return sorted({*(2 ** i for i in range(batch.bit_length()) if 2 ** i < batch), batch})


def rows_padded(iface: Mapping[str, Any], batch: int) -> bool:
    """Whether predict may pad a batch's rows (:func:`row_padding_lines`): every input is batched in dim 0, and every
    output of the build example has ``batch`` rows in dim 0, so the padded rows' answers are cut off whole. Not
    for a model whose outputs come one entry per row (torchvision's detectors: a dict per image) or unknown."""
    inputs, outputs = list(iface.get("inputs") or []), list(iface.get("outputs") or [])
    if batch < 2 or not inputs or not outputs:
        return False
    return (all(0 in (x.get("dynamic_dims") or []) for x in inputs)
            and all((o.get("shape") or [None])[0] == batch for o in outputs))


def row_padding_doc_lines(batch: int) -> list[str]:
    """load.py's docstring lines on :func:`row_padding_lines`."""
    return [doc_text(line) for line in _wrapped(
        f"A batch's rows are padded up to the next of {call_sizes(batch)} (CALL_SIZES; the last row repeated) and the "
        "answers cut back: torch.compile of static shapes compiles once per batch size, and past its recompile limit "
        "runs the model eagerly.")]


def row_padding_lines(batch: int, shapes: int) -> list[str]:
    """``CALL_SIZES``, ``_pad_rows`` and ``_unpad_rows``: a static-shape torch.compile artifact pads a batch's rows
    up to the next call size (the last row repeated) and cuts its answers back.

    Why: torch.compile with ``dynamic=False`` compiles again for every new batch size, and after torch's recompile
    limit (8 a frame) runs the model eagerly, silently: a small MLP served at max batch 12 compiled 8 times
    (about a second each) and ran batches of 9-12 in eager. A server's batcher makes every size up to its max
    batch. Padded to the powers of two (vLLM pads to its captured CUDA-graph sizes the same way), the model
    compiles ``len(CALL_SIZES)`` times per shape of the other dims (``shapes``), and the recompile limit is raised
    to cover them; the padding's cost is in every figure measured through load.py (the artifact check, the
    serving search), which call predict as a deployment does."""
    sizes = call_sizes(batch)
    return [
        f"CALL_SIZES = {sizes!r}  # the batch sizes the compiled model runs at: a batch's rows are padded up to one",
        "_dynamo_config = torch._dynamo.config",
        f"_dynamo_config.recompile_limit = max(_dynamo_config.recompile_limit, {len(sizes) * max(1, shapes) + 2})",
        "",
        "",
        "def _pad_rows(xs):",
        '    """The inputs with their rows padded up to the next of CALL_SIZES (the last row repeated), and (the rows',
        '    asked for, the rows called with)."""',
        "    n = int(xs[0].shape[0])",
        "    target = next((s for s in CALL_SIZES if s >= n), n)",
        "    if target == n or n == 0:",
        "        return xs, (n, n)",
        "    index = torch.arange(target).clamp(max=n - 1)",
        "    return [x.index_select(0, index.to(x.device)) for x in xs], (n, target)",
        "",
        "",
        "def _unpad_rows(leaves, rows):",
        '    """The output leaves (a flat list) with the padded rows cut off."""',
        "    n, target = rows",
        "    if n == target:",
        "        return leaves",
        "    return [o[:n] if isinstance(o, torch.Tensor) and o.ndim and o.shape[0] == target else o for o in leaves]",
    ]


__all__ = [
    "bucket_lines",
    "call_example",
    "call_line",
    "call_sizes",
    "doc_text",
    "interface_doc_lines",
    "interface_lines",
    "interface_of",
    "leaves_lines",
    "numpy_input_lines",
    "numpy_make_inputs_lines",
    "onnx_lines",
    "openvino_lines",
    "row_padding_doc_lines",
    "row_padding_lines",
    "rows_padded",
    "torch_context",
    "torch_input_lines",
    "torch_make_inputs_lines",
    "torch_predict_lines",
    "torch_prepare_lines",
]
