"""What a probe reports (:class:`ProbeResult`) and how the search records it (:class:`ProbeRecord`).

The contract between the search and whatever runs the model (a worker's ``probe`` op, a
:class:`autotune.testing.SyntheticProbe`): pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProbeResult:
    """What one probe reports.

    ``peak_memory_bytes`` of a fitting probe feeds the memory model. That of a failed probe is
    used only when it is above the limit: a CPU budget check runs to the end and reports the
    full peak, while an out-of-memory error stops the run part-way (its peak is partial and at
    most the limit). ``baseline_bytes`` is the memory held right before the batch's inputs were
    created (runtime and model): a direct reading of the intercept. ``error`` says why it did
    not fit, e.g. ``"CUDA out of memory"`` or ``"over budget: 3.1 GiB > 2 GiB"``. ``step_seconds`` is
    one steady forward pass at the batch and ``forward_calls`` the passes the probe ran in all: what
    the cost model and the saturation rule read (:mod:`autotune.batch.probe_cost`; None: not timed);
    ``overhead_seconds`` the part of the probe's time no later probe pays (a worker process started for it).
    """

    fits: bool
    peak_memory_bytes: int | None = None
    error: str | None = None
    baseline_bytes: int | None = None
    step_seconds: float | None = None
    forward_calls: int = 1
    overhead_seconds: float = 0.0


#: How a probe that crashed its worker is recorded (its ``error`` starts with this), for the boundary's document.
CRASH_PREFIX = "crashed: "


def crashed_past(reason: str, ran: str) -> ProbeResult:
    """A probe whose worker crashed (``reason``, e.g. "worker died with SIGSEGV") once ``ran`` (e.g. "batch 1024")
    had run: does not fit. Why: a deployment process crashes at that size too, so it lies past the boundary a
    deployment sees; dropping the variant (or the configuration) for it threw away every size below that ran."""
    return ProbeResult(fits=False, error=f"{CRASH_PREFIX}{reason}; {ran} ran, so this size is taken as one that "
                                         "does not run (a deployment process would crash here too), not as an "
                                         "out-of-memory error")


@dataclass(frozen=True)
class ProbeRecord:
    """One probe as the search saw it, in the order it ran (goes into report.json)."""

    batch_size: int
    fits: bool
    peak_memory_bytes: int | None
    seconds: float
    error: str | None
    baseline_bytes: int | None = None
    phase: str = "search"  # "search" (the cheap probe) or "confirm" (refine_max_batch_size's probe)
    step_seconds: float | None = None
    forward_calls: int = 1
    overhead_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        timed = {} if self.step_seconds is None else {"step_seconds": self.step_seconds}
        return {
            "phase": self.phase,
            "batch_size": self.batch_size,
            "fits": self.fits,
            "peak_memory_bytes": self.peak_memory_bytes,
            "baseline_bytes": self.baseline_bytes,
            "seconds": self.seconds,
            "error": self.error,
            **timed,
        }
