"""How a candidate is timed (:class:`MeasureSettings`): derived from the recipe in one place, sent as JSON.

The parent derives the settings (:meth:`MeasureSettings.from_recipe`: the tuner's search, ``autotune
measure`` and the API's ``measure`` all call it), the measure request carries their JSON form
(:meth:`MeasureSettings.to_dict`, :class:`autotune.core.protocol.MeasureSettingsData`), and the worker
reads it back (:meth:`MeasureSettings.from_dict`) for the timing loop (:func:`autotune.worker.timing.measure_callable`).
One frozen value on both sides, so a setting is named, typed and defaulted once.

No torch import: the parent builds the settings, and the parent never imports torch. The defaults are the
recipe's (``MeasureSpec``, ``SearchSpec.equivalence_margin``): ``MeasureSettings()`` is what a recipe
that sets nothing gives, so a default is never written twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from autotune.core.protocol import MeasureSettingsData
from autotune.core.recipe.spec import MeasureSpec, Recipe, SearchSpec

__all__ = ["BLOCK_TARGET_SECONDS", "MAX_SAMPLES", "PER_CALL_SHARE", "MeasureSettings"]

#: Target wall time of one timed block in throughput mode: long enough that the timer's own
#: resolution and the loop overhead vanish, short enough to give the detector many samples.
BLOCK_TARGET_SECONDS = 0.005
#: Hard cap on samples per candidate, whatever the detector says.
MAX_SAMPLES = 20_000
#: Per-call latency timing, as a share of the candidate's measurement budget (when latency matters).
PER_CALL_SHARE = 0.25


@dataclass(frozen=True)
class MeasureSettings:
    mode: str = MeasureSpec.mode  # throughput | latency (autotune.core.vocab.MODES)
    ci_target: float = MeasureSpec.ci_target
    max_seconds: float = MeasureSpec.max_seconds
    block_target_seconds: float = BLOCK_TARGET_SECONDS
    max_samples: int = MAX_SAMPLES
    #: Seconds of individually synchronised calls after the blocks, for per-call latency
    #: percentiles (0: none; the percentiles are then of block means, and labelled so).
    per_call_seconds: float = 0.0
    #: Practical-equivalence margin: levels closer than this are one steady state (the recipe's
    #: ``search.equivalence_margin``, so the detector and the showdown judge alike).
    margin: float = SearchSpec.equivalence_margin

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> MeasureSettings:
        """The settings every full measurement of ``recipe`` uses (the search's, ``autotune measure``'s).

        Per-call latency is timed whenever a latency number can decide something: the objective is
        latency or pareto, or a latency SLO constrains the search.
        """
        m = recipe.measure
        latency_matters = recipe.search.objective != "throughput" or recipe.constraints.max_latency_ms is not None
        return cls(mode=m.mode, ci_target=m.ci_target, max_seconds=m.max_seconds,
                   per_call_seconds=PER_CALL_SHARE * m.max_seconds if latency_matters else 0.0,
                   margin=recipe.search.equivalence_margin)

    def at_fidelity(self, fidelity: float) -> MeasureSettings:
        """These settings with ``fidelity`` (a share, 1: full) of the time: the bracket strategy's short screens.

        Both time budgets scale; the precision target does not (a short screen simply stops on its budget).
        """
        if fidelity >= 1.0:
            return self
        return replace(self, max_seconds=self.max_seconds * fidelity,
                       per_call_seconds=self.per_call_seconds * fidelity)

    def to_dict(self) -> MeasureSettingsData:
        """The JSON form a measure request carries (every field, so the worker needs no defaults)."""
        return {"mode": self.mode, "ci_target": self.ci_target, "max_seconds": self.max_seconds,
                "block_target_seconds": self.block_target_seconds, "max_samples": self.max_samples,
                "per_call_seconds": self.per_call_seconds, "margin": self.margin}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeasureSettings:
        """Inverse of :meth:`to_dict` (the worker's side); a field left out takes its default."""
        return cls(**data)
