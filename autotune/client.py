"""The parent's typed client of the worker protocol: one method per op, and the only place requests are built.

Why one place: a request is a plain dict (:mod:`autotune.core.protocol`: the JSON shape is the
contract), and when every caller wrote its own (the API, the tuner, the boundary probes, validation,
the showdown, the artifact step), each had to know the op's field names, which fields are optional and
how the recipe travels, and the measure settings came in three shapes. Here each op is a method with
typed arguments that builds its request (:class:`~autotune.core.protocol.MeasureRequest` and so on) and
returns what :meth:`autotune.runner.Runner.call` returns for it: the op's result TypedDict, or a
:class:`~autotune.runner.CallFailure` when the worker crashed, timed out or raised (input errors are
raised as :class:`~autotune.errors.InputError`). ``tests/test_client.py`` checks that no other module of
the package builds a request; the one fixed message, the handshake
:data:`~autotune.core.protocol.HELLO`, is a constant of the protocol that the runner sends to each
worker it starts.

The client wraps a :class:`~autotune.runner.Runner`, which keeps owning the processes (roles, reuse,
recycling, crash statistics); wrapping is free, so a function that is handed a runner makes its client
where it sends requests. Timeouts are the caller's: they depend on what the caller knows (the recipe's
``measure.timeout_s``, a showdown slice's length). No torch import: this is the parent's side.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core.measure_settings import MeasureSettings
from autotune.core.protocol import (
    HELLO,
    ArtifactRequest,
    ArtifactResult,
    DeviceMemoryRequest,
    DeviceMemoryResult,
    GenerateAction,
    GenerateOutcome,
    GenerateRequest,
    HelloResult,
    MeasureOutcome,
    MeasureRequest,
    Outcome,
    ParseVariantRequest,
    ParseVariantResult,
    ProbeOutcome,
    ProbeRequest,
    SliceOutcome,
    SliceRequest,
    StageOutcome,
    StageRequest,
    ValidateRequest,
    ValidateResult,
)
from autotune.core.recipe import Recipe
from autotune.runner import CallFailure, Runner

__all__ = ["RecipeLike", "WorkerClient"]

#: A recipe as a request carries it: the value, or its JSON form (``Recipe.to_dict()``) when the caller
#: already has it (the showdown and the artifact step are handed the dict; a search converts once).
RecipeLike = Recipe | Mapping[str, Any]


def _recipe_data(recipe: RecipeLike) -> dict[str, Any]:
    return recipe.to_dict() if isinstance(recipe, Recipe) else dict(recipe)


class WorkerClient:
    """Typed calls to the workers of ``runner``: each method sends one op's request and returns its reply.

    Every method returns the op's result or a :class:`CallFailure` (``status`` ``failed``, ``reason``,
    ``crash`` when the worker died), exactly as :meth:`Runner.call`; results that have no ``status`` of
    their own (hello, validate, device_memory, artifact) are told apart from a failure by ``"status" in res``.
    """

    __slots__ = ("runner",)

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def hello(self, *, timeout: float) -> HelloResult | CallFailure:
        """The measure worker's versions and start-up time (the round trip of a request with no work)."""
        return self.runner.call(HELLO, timeout=timeout)

    def validate(self, recipe: RecipeLike, *, timeout: float) -> ValidateResult | CallFailure:
        """Build the model, run one forward, expand the variants for the device (``autotune.validation``)."""
        req: ValidateRequest = {"op": "validate", "recipe": _recipe_data(recipe)}
        return self.runner.call(req, timeout=timeout)

    def measure(self, recipe: RecipeLike, variant: str, batch_size: int, settings: MeasureSettings, *,
                timeout: float) -> MeasureOutcome | Outcome | CallFailure:
        """Build ``variant`` at ``batch_size``, gate it against eager fp32, time it as ``settings`` say."""
        req: MeasureRequest = {"op": "measure", "recipe": _recipe_data(recipe), "variant": variant,
                               "batch_size": batch_size, "settings": settings.to_dict()}
        return self.runner.call(req, timeout=timeout)

    def probe(self, recipe: RecipeLike, variant: str, batch_size: int, *, memory_budget_bytes: int | None,
              fresh: bool = False, timeout: float) -> ProbeOutcome | CallFailure:
        """Does ``batch_size`` fit under ``memory_budget_bytes``? (a probe worker; ``fresh``: drop the master
        copy of the model first, so the process holds what a deployment holds)."""
        req: ProbeRequest = {"op": "probe", "recipe": _recipe_data(recipe), "variant": variant,
                             "batch_size": batch_size, "memory_budget_bytes": memory_budget_bytes, "fresh": fresh}
        return self.runner.call(req, timeout=timeout)

    def device_memory(self, recipe: RecipeLike, *, timeout: float) -> DeviceMemoryResult | CallFailure:
        """Memory free to a fresh process on the recipe's device (a probe worker, before any model)."""
        req: DeviceMemoryRequest = {"op": "device_memory", "recipe": _recipe_data(recipe)}
        return self.runner.call(req, timeout=timeout)

    def parse_variant(self, recipe: RecipeLike, variant: str, *, timeout: float
                      ) -> ParseVariantResult | CallFailure:
        """``variant``'s spec if the worker can run it on the recipe's device (an unknown or unavailable name is
        an :class:`~autotune.errors.InputError`)."""
        req: ParseVariantRequest = {"op": "parse_variant", "recipe": _recipe_data(recipe), "variant": variant}
        return self.runner.call(req, timeout=timeout)

    def stage(self, recipe: RecipeLike, variant: str, batch_size: int, *, warmup_iterations: int,
              warmup_seconds: float, timeout: float, shipped: dict[str, Any] | None = None
              ) -> StageOutcome | Outcome | CallFailure:
        """Build a showdown finalist in this worker, or load it from its saved artifact (``shipped``: the plain
        process's spec, :func:`autotune.artifact_timing.child_spec`), and warm it up (at least
        ``warmup_iterations`` + 10 calls and ``warmup_seconds``), for the slices that follow."""
        req: StageRequest = {"op": "stage", "recipe": _recipe_data(recipe), "variant": variant,
                             "batch_size": batch_size, "warmup_iterations": warmup_iterations,
                             "warmup_seconds": warmup_seconds}
        if shipped is not None:
            req["shipped"] = dict(shipped)
        return self.runner.call(req, timeout=timeout)

    def slice(self, seconds: float, *, per_call: bool, percentile: str, timeout: float, warmup_seconds: float = 0.0
              ) -> SliceOutcome | CallFailure:
        """Time the staged finalist for ``seconds`` (one showdown round; ``per_call``: every call synchronised,
        and ``percentile`` of those calls reported), after ``warmup_seconds`` of untimed calls."""
        req: SliceRequest = {"op": "slice", "seconds": seconds, "per_call": per_call, "percentile": percentile,
                             "warmup_seconds": warmup_seconds}
        return self.runner.call(req, timeout=timeout + warmup_seconds)

    def artifact(self, recipe: RecipeLike, variant: str, batch_size: int, *, directory: str | Path | None,
                 profile: bool = True, timeout: float) -> ArtifactResult | CallFailure:
        """Build the recommendation once, save it into ``directory`` (None: no artifact) and, with ``profile``,
        profile it next to eager (:func:`autotune.worker.artifact.deploy`)."""
        req: ArtifactRequest = {"op": "artifact", "recipe": _recipe_data(recipe), "variant": variant,
                                "batch_size": batch_size, "directory": None if directory is None else str(directory),
                                "profile": profile}
        return self.runner.call(req, timeout=timeout)

    def generate(self, recipe: RecipeLike, config: Mapping[str, Any], concurrency: int, *, action: GenerateAction,
                 calls: int = 0, memory_budget_bytes: int | None = None, directory: str | Path | None = None,
                 timeout: float) -> GenerateOutcome | Outcome | CallFailure:
        """One ``[generate]`` configuration at ``concurrency`` sequences: measured, probed for memory or saved
        (:mod:`autotune.worker.generation`); in a fresh worker when the runner has ``fresh_measure``."""
        req: GenerateRequest = {"op": "generate", "recipe": _recipe_data(recipe), "config": dict(config),
                                "concurrency": concurrency, "action": action, "calls": calls,
                                "memory_budget_bytes": memory_budget_bytes}
        if directory is not None:
            req["directory"] = str(directory)
        return self.runner.call(req, timeout=timeout)
