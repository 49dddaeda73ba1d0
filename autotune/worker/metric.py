"""The user's ``[accuracy] metric``: resolving it, the form it is called with, and checking what it returns.

Calling convention (README, "Lower precision and the accuracy budget")::

    metric(outputs, batches) -> float, higher is better
      batches    the data factory's batches, in order, in the form it yielded them (tensor, tuple or dict of CPU
                 tensors): the inputs only, since every entry of a batch is passed to forward
      outputs[i] the model's output on batches[i], in the model's own structure, on the CPU, floats as float32

The labels stay with the metric (usually in the same file as the data factory, imported once per worker for
both: :func:`autotune.worker.factory.resolve_factory` keys modules by file). Every failure is a
:class:`WorkloadError` naming ``accuracy.metric``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from autotune.errors import WorkloadError
from autotune.worker.factory import one_line, resolve_factory

if TYPE_CHECKING:
    from autotune.core.recipe import Recipe
    from autotune.worker.traffic import InputLayout, Traffic


def cpu_float(out: Any) -> Any:
    """A detached CPU copy of an output, floating leaves as float32 (bf16 would surprise a user's metric; a CUDA
    graph's outputs are overwritten by its next call, so they are copied before it)."""
    import torch.utils._pytree as pytree

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            x = x.detach().to("cpu", copy=True)
            return x.float() if x.is_floating_point() and x.dtype != torch.float64 else x
        return x

    return pytree.tree_map(leaf, out)


def user_batch(layout: InputLayout, flat: Sequence[torch.Tensor]) -> Any:
    """A flat batch back in the form the data factory yielded it: a tensor, a tuple or a dict (CPU)."""
    cpu = [t.detach().cpu() for t in flat]
    if layout.form == "tensor":
        return cpu[0]
    if layout.form == "dict":
        return dict(zip(layout.names, cpu, strict=True))
    return tuple(cpu)


def resolve_metric(recipe: Recipe) -> Callable[..., Any]:
    """The ``[accuracy] metric`` callable (a :class:`WorkloadError` naming ``accuracy.metric`` if it cannot be)."""
    assert recipe.accuracy is not None and recipe.accuracy.metric
    return resolve_factory(recipe.accuracy, recipe_path=recipe.path, field="accuracy.metric")


def call_metric(recipe: Recipe, metric: Callable[..., Any], outputs: list[Any], batches: list[Any], *,
                whose: str) -> float:
    """``metric(outputs, batches)`` as a float; raises :class:`WorkloadError` (naming ``accuracy.metric``) when it
    raises or returns something that is not a finite number, ``whose`` saying on which outputs."""
    assert recipe.accuracy is not None
    where = f"{recipe.path}: field 'accuracy.metric': '{recipe.accuracy.metric}'"
    try:
        raw = metric(outputs, batches)
    except Exception as exc:
        raise WorkloadError(f"{where} raised on {whose}: {one_line(exc)}") from None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise WorkloadError(f"{where} returned {type(raw).__name__} {raw!r} on {whose}; expected a number "
                            "(higher is better)") from None
    if not math.isfinite(value):
        raise WorkloadError(f"{where} returned {value} on {whose}; expected a finite number")
    return value


def check_metric(recipe: Recipe, model: Callable[..., Any], traffic: Traffic) -> float:
    """Validation: eager fp32's metric on ``traffic`` (the factory's batches at batch 2), so a metric that cannot be
    resolved, raises or returns no number is a :class:`WorkloadError` naming ``accuracy.metric`` before anything
    is measured."""
    metric = resolve_metric(recipe)
    with torch.inference_mode():
        outputs = [cpu_float(model(*flat)) for flat in traffic.batches]
    batches = [user_batch(traffic.layout, flat) for flat in traffic.batches]
    return call_metric(recipe, metric, outputs, batches, whose="eager fp32's outputs at batch size 2")


def metric_name(reference: str) -> str:
    """How reports name a metric: ``data.py:metric`` for ``/any/dir/data.py:metric`` (the recipe has the full one)."""
    target, _, attr = reference.rpartition(":")
    if target.endswith(".py") or "/" in target:
        return f"{target.rsplit('/', 1)[-1]}:{attr}"
    return reference


__all__ = ["call_metric", "check_metric", "cpu_float", "metric_name", "resolve_metric", "user_batch"]
