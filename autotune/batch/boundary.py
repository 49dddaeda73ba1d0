"""The search's answer (:class:`BatchBoundary`), the headroom rule, and the batch sizes worth tuning."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.batch.memory_model import MemoryModel
from autotune.batch.probe_cost import throughput_peak
from autotune.batch.probes import ProbeRecord
from autotune.errors import InputError

DEFAULT_MAX_BATCH_SIZE = 65536
DEFAULT_HEADROOM = 0.10
#: What may end a limited search before the memory boundary (see :attr:`BatchBoundary.stopped_by`).
EARLY_STOPS = ("throughput", "probe_cap", "time_cap")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name}: must be an integer of at least {minimum}, got {value!r}")


@dataclass(frozen=True)
class BatchBoundary:
    """The result of :func:`find_max_batch_size`.

    ``max_batch_size`` fits and was probed; unless ``hit_upper_bound``, ``max_batch_size +
    granularity`` was probed and did not fit. ``upper_bound`` is the largest batch the search
    was allowed to try (the requested maximum rounded down to the granularity). ``anomalies``
    lists probes that contradicted the known limit (see the module docstring).

    ``stopped_by`` says what ended the search: ``memory`` (the exact boundary: b fits, b + g does
    not), ``upper_bound``, or, when the search was limited (:class:`autotune.batch.probe_cost.ProbeLimits`),
    ``throughput`` (it stopped growing), ``probe_cap`` (the next probe was predicted too long) or
    ``time_cap`` (the boundary search's time ran out). In those three ``max_batch_size`` is the largest
    batch probed to fit, not a boundary; ``predicted_limit`` is where the memory model's line
    (``center``) and the safe edge of its band (``low``) reach the limit, when a limit and a model exist.
    """

    max_batch_size: int
    granularity: int
    upper_bound: int
    hit_upper_bound: bool
    probes: tuple[ProbeRecord, ...]
    model: MemoryModel | None
    memory_limit_bytes: int | None
    anomalies: tuple[str, ...] = ()
    stopped_by: str = "memory"
    stop_detail: str = ""
    predicted_limit: tuple[float, float] | None = None  # (low, center), batch units

    @property
    def stopped_early(self) -> bool:
        """True when limits ended the search before the memory boundary (or the upper bound) was reached."""
        return self.stopped_by in EARLY_STOPS

    @property
    def throughput_peak(self) -> int | None:
        """Where the probes' throughput peaked, when throughput is what ended the search (else None).

        Only then: a search ended by memory or by a cap may have stopped while throughput still grew, and
        its largest batch is then the better start. A search's first candidate is this batch
        (:class:`autotune.study.SearchSpace` ``preferred``).
        """
        return throughput_peak(self.probes) if self.stopped_by == "throughput" else None

    def usable_max_batch_size(self, headroom: float = DEFAULT_HEADROOM) -> int:
        """The largest batch size the tuner should recommend, ``headroom`` below the boundary.

        A batch that fits in a probe can still run out of memory in deployment: allocator
        fragmentation grows over a long run, and other allocations come and go. Rule:

            boundary = max_batch_size, or, when the search stopped at the upper bound without
                       an out-of-memory error, the model's predicted boundary if it is larger
                       (limit known), else the upper bound
            usable   = floor((1 - headroom) * boundary / granularity) * granularity,
                       capped at max_batch_size and at least granularity (which did fit)

        The margin is a share of the batch size rather than of total memory: fragmentation
        scales with the per-batch (activation) allocations, not with the fixed weights.
        """
        if not 0 <= headroom < 1:
            raise InputError(f"headroom: must be in [0, 1), got {headroom!r}")
        boundary = float(self.max_batch_size)
        open_ended = self.hit_upper_bound or self.stopped_early
        if open_ended and self.model is not None and self.memory_limit_bytes is not None:
            # capped where the result is the upper bound anyway, so a huge prediction stays finite
            cap = self.upper_bound / (1 - headroom) + self.granularity
            boundary = max(boundary, min(self.model.boundary(self.memory_limit_bytes), cap))
        # stopped early: the probed batch fit, and when no model says the limit is near, nothing says it is
        steps = math.floor((1 - headroom) * boundary / self.granularity + 1e-9)
        usable = min(self.max_batch_size, steps * self.granularity)
        if self.stopped_early and self.model is None:
            usable = self.max_batch_size
        return max(self.granularity, usable)

    def summary(self) -> str:
        """One honest sentence: what was proved, and what the model only predicts."""
        b = self.max_batch_size
        if self.stopped_by == "memory":
            return f"largest batch that fits: {b} ({b + self.granularity} does not)"
        if self.stopped_by == "upper_bound":
            return f"fits up to the upper bound {b} (probed; no out-of-memory below it)"
        text = f"fits up to {b} (probed); stopped by {self.stopped_by}"
        if self.stop_detail:
            text += f": {self.stop_detail}"
        if self.throughput_peak is not None:
            text += f"; throughput peaked at {self.throughput_peak} in the probes"
        if self.predicted_limit is not None:
            low, center = self.predicted_limit
            text += (f"; the memory model predicts the limit near {center:,.0f} "
                     f"(safe side {low:,.0f})")
        elif self.memory_limit_bytes is None:
            text += "; no memory limit is known"
        return text

    def to_dict(self, *, headroom: float = DEFAULT_HEADROOM) -> dict[str, Any]:
        return {
            "max_batch_size": self.max_batch_size,
            "usable_max_batch_size": self.usable_max_batch_size(headroom),
            "headroom": headroom,
            "granularity": self.granularity,
            "upper_bound": self.upper_bound,
            "hit_upper_bound": self.hit_upper_bound,
            "memory_limit_bytes": self.memory_limit_bytes,
            "probes": [record.to_dict() for record in self.probes],
            "model": None if self.model is None else self.model.to_dict(),
            "anomalies": list(self.anomalies),
            "stopped_by": self.stopped_by,
            "summary": self.summary(),
            **({"throughput_peak": self.throughput_peak} if self.throughput_peak is not None else {}),
            **({"predicted_limit": {"low": self.predicted_limit[0], "center": self.predicted_limit[1]}}
               if self.predicted_limit is not None else {}),
        }


def candidate_batch_sizes(usable_max: int, *, granularity: int = 1) -> list[int]:
    """The batch sizes the tuner should consider, ascending: granularity·2^i up to ``usable_max``,
    plus ``usable_max`` itself.

    Why powers of two: throughput as a function of batch size rises and then saturates, so a
    geometric grid covers the interesting range in log2(max) points, and kernels are usually
    tuned for power-of-two shapes. Why the maximum itself: the best throughput is often at the
    largest batch that fits (with headroom), which is rarely a power of two.
    """
    _check_int("granularity", granularity, minimum=1)
    _check_int("usable_max", usable_max, minimum=granularity)
    if usable_max % granularity:
        raise InputError(f"usable_max: must be a multiple of the granularity {granularity}, got {usable_max}")
    sizes: list[int] = []
    size = granularity
    while size <= usable_max:
        sizes.append(size)
        size *= 2
    if sizes[-1] != usable_max:
        sizes.append(usable_max)
    return sizes
