"""The parent's view of a validated workload: what a measure worker found when it built the model.

Validation is the first step of every pipeline (``tune``, ``find_batch_boundary``, ``measure``):
a worker builds the model, runs one forward, expands the recipe's variants for the device and
says which are unavailable and why. The answer is a value (:class:`ValidatedWorkload`) that the
boundary search, the study and the report all read, so it lives here, below all of them, rather
than in the pipeline module :mod:`autotune.tuner` (where it used to sit, which made the boundary
search and the tuner import each other). The worker's side of the same step, building the model, is
:mod:`autotune.worker.model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.client import WorkerClient
from autotune.core.recipe import Recipe
from autotune.errors import WorkloadError
from autotune.runner import Runner

__all__ = ["VALIDATE_TIMEOUT", "ValidatedWorkload", "validate"]

#: Seconds allowed for validating the workload (build + one forward) in a fresh worker.
VALIDATE_TIMEOUT = 600.0


@dataclass(frozen=True)
class ValidatedWorkload:
    """What validation in the worker found out (the parent's view of the model)."""

    device: str
    variants: tuple[str, ...]
    unavailable: tuple[Mapping[str, Any], ...]
    specs: Mapping[str, Mapping[str, Any]]
    info: Mapping[str, Any]
    memory_method: str
    host_memory_available: int | None
    device_memory_capacity: int | None
    #: What torch in the worker said about the machine (:class:`autotune.core.protocol.TorchFacts`), for the
    #: report's ``environment``; None where no worker was asked (a document built from a hand-made workload).
    torch_facts: Mapping[str, Any] | None = None


def validate(runner: Runner, recipe: Recipe) -> ValidatedWorkload:
    """Build the model and run one forward in a worker; input problems raise InputError."""
    res = WorkerClient(runner).validate(recipe, timeout=VALIDATE_TIMEOUT)
    if "status" in res:  # a CallFailure (a ValidateResult has no status)
        raise WorkloadError(f"{recipe.path}: field 'model.factory': building or running the model crashed "
                            f"the worker: {res.get('reason')}")
    return ValidatedWorkload(
        device=res["device"],
        variants=tuple(res["variants"]),
        unavailable=tuple(res["unavailable"]),
        specs=res["specs"],
        info=res["workload"],
        memory_method=res["memory_method"],
        host_memory_available=res["host_memory_available"],
        device_memory_capacity=res["device_memory_capacity"],
        torch_facts=res["torch_facts"],
    )
