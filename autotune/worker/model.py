"""Build the model and its inputs from a recipe (runs inside the worker process).

The factory reference is resolved by :mod:`autotune.worker.factory`; calling it, and the first forward on the
traffic (:mod:`autotune.worker.traffic`), happen here, so every way it can go wrong (factory raising, forward
rejecting the inputs) becomes one :class:`WorkloadError` that names the recipe field and what was found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from autotune.core.recipe import InputSpec, Recipe
from autotune.errors import WorkloadError
from autotune.worker.factory import one_line, resolve_factory


def build_model(recipe: Recipe, *, device: torch.device) -> torch.nn.Module:
    """Call the factory with the recipe's kwargs; the model is in eval mode on ``device``."""
    factory = resolve_factory(recipe.model, recipe_path=recipe.path)
    # Seeded so every worker (reused, fresh, on another machine) builds the same random weights:
    # the gate, the memory probes and the measurements then all see one and the same model.
    torch.manual_seed(recipe.search.seed)
    try:
        model = factory(**dict(recipe.model.kwargs))
    except Exception as exc:
        raise WorkloadError(
            f"{recipe.path}: field 'model.factory': '{recipe.model.factory}' raised "
            f"with kwargs {dict(recipe.model.kwargs)}: {one_line(exc)}"
        ) from None
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"{recipe.path}: field 'model.factory': '{recipe.model.factory}' returned "
            f"{type(model).__name__}, expected a torch.nn.Module"
        )
    return model.eval().to(device)


def make_inputs(
    specs: tuple[InputSpec, ...], *, batch_size: int, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Fresh random inputs on the device: normal floats, integers in ``range`` or [0, vocab_size)."""
    from autotune.worker.traffic import random_batch

    return tuple(t.to(device) for t in random_batch(specs, batch_size=batch_size, seed=seed))


@dataclass(frozen=True)
class WorkloadInfo:
    """What the worker learnt about the workload when it validated it."""

    parameters: int
    parameter_bytes: int
    input_ndims: tuple[int, ...]
    input_is_float: tuple[bool, ...]
    output_summary: str
    #: What the traffic is (:meth:`autotune.worker.traffic.Traffic.describe` at batch 2): the report's ``data``.
    data: dict[str, Any] | None = None
    #: Whether dim 0 is a batch of independent rows (:func:`autotune.worker.batch_rows.check_rows`); None when
    #: not checked (a recipe that searches batch 1 only, or outputs whose structure follows the rows).
    batch_rows: dict[str, Any] | None = None
    #: The dtype most of the model's floating parameters are in, and whether this device computes it natively
    #: (:func:`weights_precision`); None for a model without floating parameters.
    weights: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameters": self.parameters,
            "parameter_bytes": self.parameter_bytes,
            "input_ndims": list(self.input_ndims),
            "input_is_float": list(self.input_is_float),
            "output_summary": self.output_summary,
            **({"data": self.data} if self.data is not None else {}),
            **({"batch_rows": self.batch_rows} if self.batch_rows is not None else {}),
            **({"weights": self.weights} if self.weights is not None else {}),
        }


def weights_precision(model: torch.nn.Module, device: torch.device) -> dict[str, Any] | None:
    """``{"dtype": "float16", "native": False}``: the dtype most of the model's floating parameters are in, and
    whether this CPU does its arithmetic natively (None: not a CPU or a reduced dtype, or torch cannot tell).

    Why: a model the user already converted with ``.half()`` runs fp16 on a CPU without AVX512-FP16 / AMX-FP16 by
    emulation: resnet18 at batch 4 x 64x64 took 237 ms a call in float16 against 15.5 ms in float32 (and 12.9 ms
    in bfloat16, native there) on an AVX-512 EPYC (session 35). The search compares variants of that model, all
    slow, and nothing said that its precision was the first thing to change."""
    counts: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    if not counts:
        return None
    dtype = max(counts, key=lambda d: counts[d])
    reduced = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype)
    native = None
    if device.type == "cpu" and reduced is not None:
        from autotune.worker.devices import cpu_native_precision

        native = cpu_native_precision(reduced)
    return {"dtype": str(dtype).replace("torch.", ""), "native": native}


def describe_output(out: Any) -> str:
    if isinstance(out, torch.Tensor):
        return f"Tensor{tuple(out.shape)} {str(out.dtype).replace('torch.', '')}"
    if isinstance(out, dict):
        return "{" + ", ".join(f"{k}: {describe_output(v)}" for k, v in out.items()) + "}"
    if isinstance(out, (tuple, list)):
        return type(out).__name__ + "(" + ", ".join(describe_output(v) for v in out) + ")"
    return type(out).__name__


def check_forward(recipe: Recipe, model: torch.nn.Module, *, device: torch.device) -> WorkloadInfo:
    """Run one eager forward at batch 2; a model that rejects the inputs is a recipe error.

    Batch 2 rather than 1 so that models which squeeze the batch dimension still see a batch; batch 1 when the
    recipe searches batch 1 only (a model that cannot take several samples, such as a Hugging Face GPT-2
    classifier without a pad token, is tuned that way, and the error at batch 2 says so). With a data factory,
    its batches for the probe's batch size are loaded and checked (:mod:`autotune.worker.traffic`) and the model
    runs on every distinct shape among them. At batch 2, the example's two rows are also run alone, to tell
    whether dim 0 is a batch of independent rows (:mod:`autotune.worker.batch_rows`).
    """
    from autotune.worker.traffic import load_traffic, shape_text

    probe = 1 if recipe.search.batch_sizes == (1,) else 2
    traffic = load_traffic(recipe, batch_size=probe, device=device)
    inputs = traffic.example
    seen: set[str] = set()
    out: Any = None
    for batch in traffic.gate_batches(1):
        key = shape_text(traffic.layout, batch)
        if key in seen:
            continue
        seen.add(key)
        try:
            with torch.inference_mode():
                out = traffic.layout.call(model, batch)
        except Exception as exc:
            shapes = ", ".join(
                f"'{n}' {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
                for n, t in zip(traffic.layout.names, batch, strict=True)
            )
            if recipe.data is not None:
                raise WorkloadError(
                    f"{recipe.path}: field 'data.factory': the model rejected a batch of '{recipe.data.factory}' "
                    f"({shapes}; called as {_call_form(traffic.layout)}). The model said: {one_line(exc)}"
                ) from None
            raise WorkloadError(
                f"{recipe.path}: field 'inputs': the model rejected the inputs ({shapes}; batch {probe} in front of "
                f"each per-sample shape; called as {_call_form(traffic.layout)}). The model said: {one_line(exc)}"
                + (_runs_at_batch_one(recipe, model, device) if probe > 1 else "")
            ) from None
    params = list(model.parameters())
    from autotune.worker.batch_rows import check_rows

    rows = check_rows(lambda b: traffic.layout.call(model, b), inputs, model) if probe > 1 else None
    return WorkloadInfo(
        parameters=sum(p.numel() for p in params),
        parameter_bytes=sum(p.numel() * p.element_size() for p in params),
        input_ndims=tuple(t.dim() for t in inputs),
        input_is_float=tuple(t.is_floating_point() for t in inputs),
        output_summary=describe_output(out),
        data=({"factory": recipe.data.factory, "kwargs": dict(recipe.data.kwargs), **traffic.describe()}
              if recipe.data is not None else None),
        batch_rows=rows,
        weights=weights_precision(model, device),
    )


def _runs_at_batch_one(recipe: Recipe, model: torch.nn.Module, device: torch.device) -> str:
    """What the batch-2 error adds when the model runs at batch 1: it cannot take a batch of several samples."""
    from autotune.worker.traffic import load_traffic

    traffic = load_traffic(recipe, batch_size=1, device=device)
    try:
        with torch.inference_mode():
            traffic.layout.call(model, traffic.example)
    except Exception:
        return ""
    return (" At batch 1 the model runs: it cannot take several samples in one call, so tune it at batch 1 "
            "([search] batch_sizes = [1]).")


def _call_form(layout: Any) -> str:
    n = layout.n_positional
    parts = [*layout.names[:n], *(f"{k}=..." for k in layout.names[n:])]
    return f"model({', '.join(parts)})"
