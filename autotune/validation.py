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
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from autotune.client import WorkerClient
from autotune.core.process_env import resolve_environments
from autotune.core.recipe import Recipe
from autotune.core.variant_names import VariantSpec
from autotune.errors import WorkloadError
from autotune.runner import Runner

T = TypeVar("T")

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
    #: A variant crossed with a process environment -> the variant the worker expanded (``frozen+jemalloc`` ->
    #: ``frozen``); variants not in it are their own base. Batch boundaries are found per base (in the probe
    #: worker) and shared by its environments.
    base_of: Mapping[str, str] = field(default_factory=dict)

    def bases(self) -> ValidatedWorkload:
        """This workload with the worker's own variants only (what the batch-boundary search probes)."""
        if not self.base_of:
            return self
        names = tuple(dict.fromkeys(self.base_of.get(v, v) for v in self.variants))
        return replace(self, variants=names, base_of={})

    def spread(self, per_base: Mapping[str, T]) -> dict[str, T]:
        """Per-base answers (batch sizes, boundary failures) given to every process environment of each base."""
        return {v: per_base[self.base_of.get(v, v)] for v in self.variants if self.base_of.get(v, v) in per_base}


def validate(runner: Runner, recipe: Recipe) -> ValidatedWorkload:
    """Build the model and run one forward in a worker; input problems raise InputError."""
    res = WorkerClient(runner).validate(recipe, timeout=VALIDATE_TIMEOUT)
    if "status" in res:  # a CallFailure (a ValidateResult has no status)
        raise WorkloadError(f"{recipe.path}: field 'model.factory': building or running the model crashed "
                            f"the worker: {res.get('reason')}")
    variants, specs, unavailable, base_of = cross_environments(
        tuple(res["variants"]), res["specs"], recipe.search.environments)
    return ValidatedWorkload(
        device=res["device"],
        variants=variants,
        unavailable=tuple(res["unavailable"]) + unavailable,
        specs=specs,
        info=res["workload"],
        memory_method=res["memory_method"],
        host_memory_available=res["host_memory_available"],
        device_memory_capacity=res["device_memory_capacity"],
        torch_facts=res["torch_facts"],
        base_of=base_of,
    )


def cross_environments(variants: tuple[str, ...], specs: Mapping[str, Mapping[str, Any]],
                       selection: tuple[str, ...] | str
                       ) -> tuple[tuple[str, ...], dict[str, Mapping[str, Any]], tuple[dict[str, Any], ...],
                                  dict[str, str]]:
    """The worker's variants crossed with ``search.environments`` (:mod:`autotune.core.process_env`).

    Pseudo-code::

        envs, missing = resolve(selection)            # "auto": every allocator whose library is here
        for v in variants:                            # a variant naming its own environment keeps it
            for e in ([v's] if v names one or not selection else envs):
                e available here ? yield v+e (spec: v's with environment=e) : unavailable (install command)

    Returns the variants, their specs, the unavailable ones (``{variant, reason}``) and crossed -> base names.
    """
    out: list[str] = []
    out_specs: dict[str, Mapping[str, Any]] = dict(specs)
    unavailable: list[dict[str, Any]] = []
    base_of: dict[str, str] = {}
    envs, missing = resolve_environments(selection) if selection else ((), ())
    for v in variants:
        spec = VariantSpec.parse(v)
        named = spec.process_environment
        choices = [named] if (not named.is_default or not envs) else list(envs)
        for env in choices:
            crossed = replace(spec, environment=env.name)
            reason = env.unavailable_reason()
            if reason is not None:
                unavailable.append({"variant": crossed.name, "reason": reason})
                continue
            out.append(crossed.name)
            if crossed.name != v:
                out_specs[crossed.name] = dict(specs.get(v, {}), **crossed.to_dict())
                base_of[crossed.name] = v
        if not named.is_default or not envs:
            continue
        for name, reason in missing:
            unavailable.append({"variant": replace(spec, environment=name).name, "reason": reason})
    return tuple(dict.fromkeys(out)), out_specs, tuple(unavailable), base_of
