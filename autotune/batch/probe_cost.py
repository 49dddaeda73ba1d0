"""What a probe costs and how far probing is worth it (pure): the cost model, the saturation rule, the caps.

Why: on a CPU the memory boundary of a small model lies at tens of thousands of samples, where one
forward pass takes minutes, while throughput stopped growing at a batch of tens. A search that proves
the memory boundary there spends the run's whole budget on an answer no throughput search uses. So a
``batch_sizes = "auto"`` run probes only as far as it can afford (:class:`ProbeLimits`) and as far as
the search can use (:func:`saturated_at`); ``autotune batch`` asks for the exact memory boundary and
gets it (no limits unless the recipe sets them).

The cost model (:func:`fit_probe_cost`). A probe's wall time is a part paid whatever the batch (the
variant's build, first-call costs such as a compiler's recompilation at a new shape, the worker round
trip) plus ``calls`` forward passes at b; the worker times one steady pass (``step_seconds``), which is
close to affine in b (``step(b) ≈ a + c·b``: per-call overhead, per-sample work)::

    fixed     = the larger (seconds - overhead - calls · step) of the last two probes after the first
                (the first alone while it is the only one)
                # the first pays once-only costs (the worker's copy of the model, the variant's first
                # build); recent, and the dearer of two: a compiler's recompilation varies from probe to
                # probe; overhead: what no later probe pays (a worker process started for it)
    step(b)   = least squares of step over b             (>= 2 sizes and a positive slope)
                else step_max · b / b_max                # through the origin at the largest probe: too
                                                         # steep if the per-call overhead is real (safe)
    seconds(b) = fixed + calls · step(b)
    Probes without a step reading (fake probes, old workers): fixed = 0 and the whole probe is
    treated as batch-dependent (step = seconds, calls = 1).

The per-probe cap bounds the batch-dependent part, ``calls · step(b) <= max_probe_seconds``: the
fixed part is paid by any probe, even batch 1, and the total cap bounds it.

The saturation rule (:func:`saturated_at`). Throughput at a probed batch is ``b / step(b)``. It
rises while the per-call overhead dominates and flattens (or falls: caches) once per-sample work
does. The curve has *stopped growing* past ``b_s`` when the probes above ``b_s`` reach at least
``SATURATION_SPAN · b_s`` and none of them beats the best throughput up to ``b_s`` by more than
``SATURATION_GAIN``::

    T(b) = b / step(b) over the fitting probes with a step reading
    for b_s in the probed batches, ascending:
        best = max T(b) for b <= b_s
        above = probes with b > b_s
        if max b in above >= SATURATION_SPAN · b_s and max T in above <= (1 + SATURATION_GAIN) · best
           and (b_s is not the smallest probe or above holds two probes):
            return b_s
    return None

The boundary a run then uses is the largest probed batch (it fits; it lies at least SPAN times past
where throughput peaked, so the search's candidates cover the plateau). The boundary of interest is
thus the smaller of the memory limit and that batch: whichever the probes reach first ends the search.
Probing grows geometrically meanwhile (at most SATURATION_GROWTH times the largest fit per probe), so
the throughput curve is sampled on a geometric grid: 1, 4, 16, 64, ... with no memory failure in the way,
and the rule then needs one probe past the best batch (a few probes in all: each one rebuilds the variant).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.batch.memory_model import least_squares
from autotune.batch.probes import ProbeRecord
from autotune.errors import InputError

#: Throughput gain (a fraction) a larger batch must bring to count as "still growing".
SATURATION_GAIN = 0.10
#: How far past the best batch the probes must reach without that gain before the curve is called flat.
SATURATION_SPAN = 4
#: Largest factor between one probe and the next while the saturation rule is on (the doubling grid).
SATURATION_GROWTH = 4


@dataclass(frozen=True)
class ProbeCost:
    """``seconds(b) = fixed_seconds + calls · step(b)``, ``step(b)``: the fitted line, else proportional (module)."""

    fixed_seconds: float
    calls: int
    intercept: float | None  # the least-squares line of step over b, None with fewer than two sizes
    slope: float | None
    proportional: float  # step of the largest probe / its batch

    def step_seconds(self, batch_size: float) -> float:
        """Predicted seconds of one steady forward pass at ``batch_size``."""
        through_origin = self.proportional * batch_size
        if self.intercept is None or self.slope is None:
            return through_origin
        return self.intercept + self.slope * batch_size

    def batch_seconds(self, batch_size: float) -> float:
        """Predicted seconds of a probe's forward passes at ``batch_size`` (what the per-probe cap bounds)."""
        return self.calls * self.step_seconds(batch_size)

    def seconds(self, batch_size: float) -> float:
        """Predicted wall seconds of a whole probe at ``batch_size``."""
        return self.fixed_seconds + self.batch_seconds(batch_size)

    def largest_within(self, cap_seconds: float, *, lo: int, hi: int) -> int | None:
        """The largest integer batch in ``(lo, hi)`` whose :meth:`batch_seconds` is at most the cap, else None
        (bisection: the prediction grows with the batch)."""
        if hi - lo <= 1 or self.batch_seconds(lo + 1) > cap_seconds:
            return None
        good, bad = lo + 1, hi
        while bad - good > 1:
            mid = (good + bad) // 2
            if self.batch_seconds(mid) <= cap_seconds:
                good = mid
            else:
                bad = mid
        return good


def fit_probe_cost(records: Sequence[ProbeRecord]) -> ProbeCost | None:
    """The cost model over the probes so far (module docstring); None before any probe."""
    if not records:
        return None
    timed = [r for r in records if r.step_seconds is not None and r.step_seconds > 0]
    if not timed:  # no step readings: the whole probe is batch-dependent
        top = max(records, key=lambda r: r.batch_size)
        line = least_squares([(float(r.batch_size), r.seconds - r.overhead_seconds) for r in records])
        return ProbeCost(fixed_seconds=0.0, calls=1, intercept=None if line is None else line.intercept,
                         slope=None if line is None or line.slope <= 0 else line.slope,
                         proportional=max(top.seconds - top.overhead_seconds, 0.0) / top.batch_size)
    calls = max(1, max(r.forward_calls for r in timed))
    recent = timed[1:][-2:] if len(timed) > 1 else timed
    fixed = max(0.0, max(r.seconds - r.overhead_seconds - r.forward_calls * float(r.step_seconds or 0.0)
                         for r in recent))
    top = max(timed, key=lambda r: r.batch_size)
    line = least_squares([(float(r.batch_size), float(r.step_seconds or 0.0)) for r in timed])
    usable = line is not None and line.slope > 0
    return ProbeCost(fixed_seconds=fixed, calls=calls,
                     intercept=line.intercept if line is not None and usable else None,
                     slope=line.slope if line is not None and usable else None,
                     proportional=float(top.step_seconds or 0.0) / top.batch_size)


def throughputs(records: Sequence[ProbeRecord]) -> list[tuple[int, float]]:
    """``(b, b / step)`` for the fitting probes with a step reading, ascending in b (the best reading per b)."""
    best: dict[int, float] = {}
    for r in records:
        if r.fits and r.step_seconds is not None and r.step_seconds > 0:
            best[r.batch_size] = max(best.get(r.batch_size, 0.0), r.batch_size / r.step_seconds)
    return sorted(best.items())


def throughput_peak(records: Sequence[ProbeRecord]) -> int | None:
    """The probed batch with the highest throughput ``b / step(b)`` (the smaller on a tie), None without readings.

    Where a throughput search should start: past the saturation point throughput on a CPU often falls
    (caches), so the largest probed batch, which the boundary reports, can be the worst of the plateau.
    """
    points = throughputs(records)
    if not points:
        return None
    top = max(t for _, t in points)
    return next(b for b, t in points if t == top)


def saturated_at(records: Sequence[ProbeRecord], *, gain: float = SATURATION_GAIN,
                 span: float = SATURATION_SPAN) -> int | None:
    """The batch past which throughput stopped growing (the module's rule), or None while it still grows."""
    points = throughputs(records)
    best = 0.0
    for i, (b_s, t_s) in enumerate(points):
        best = max(best, t_s)
        above = points[i + 1:]
        enough = len(above) >= 2 or i > 0  # the smallest probe's one noisy reading needs two to refute it
        if above and enough and above[-1][0] >= span * b_s and max(t for _, t in above) <= (1 + gain) * best:
            return b_s
    return None


@dataclass(frozen=True)
class ProbeLimits:
    """How far a boundary search may probe (None everywhere: the exact memory boundary, whatever it costs).

    ``max_probe_seconds``: no probe whose predicted forward passes take longer (``batch.max_probe_seconds``);
    ``deadline``: no probe predicted to end after this clock reading (the total cap; ``deadline_source`` names
    it in the report: ``batch.max_seconds`` or the share of ``search.time_budget_s``);
    ``stop_at_saturation``: stop once throughput stopped growing (:func:`saturated_at`), probing on a
    geometric grid meanwhile; ``hint``: a batch where another variant of the same model saw throughput
    saturate (variants of one model saturate at similar batches): the grid may jump there at once, saving
    the probes in between (each rebuilds the variant: seconds to a minute for a compiler).
    """

    max_probe_seconds: float | None = None
    deadline: float | None = None
    deadline_source: str = "batch.max_seconds"
    stop_at_saturation: bool = False
    hint: int | None = None

    def __post_init__(self) -> None:
        if self.max_probe_seconds is not None and not (self.max_probe_seconds > 0
                                                       and math.isfinite(self.max_probe_seconds)):
            raise InputError(f"max_probe_seconds: must be a positive number, got {self.max_probe_seconds!r}")

    @property
    def unlimited(self) -> bool:
        return self.max_probe_seconds is None and self.deadline is None and not self.stop_at_saturation


@dataclass(frozen=True)
class ProbePlan:
    """The next probe after the limits were applied: ``batch`` (lattice units) or a reason to stop."""

    target: int | None  # None: stop
    predicted_seconds: float | None
    stopped_by: str | None = None  # "throughput" | "probe_cap" | "time_cap"
    detail: str = ""


def plan_probe(target: int, *, lo: int, hi: int, granularity: int, records: Sequence[ProbeRecord],
               limits: ProbeLimits, now: Callable[[], float], bracketed: bool) -> ProbePlan:
    """Apply ``limits`` to the search's next ``target`` (lattice units, strictly inside (lo, hi))::

        if saturation is on, nothing failed yet and saturated_at(records) = b_s:  stop ("throughput")
        if saturation is on and nothing failed yet:
            target = min(target, max(SATURATION_GROWTH · lo, hint))
        cost = fit_probe_cost(records)
        if max_probe_seconds and cost.batch_seconds(target·g) > cap:
            target = the largest k in (lo, target) within the cap, else lo + 1 after the first probe
                     (one reading does not end a search), else stop ("probe_cap")
        if deadline and now + cost.seconds(target·g) > deadline: stop ("time_cap")
    """
    g = granularity
    if limits.stop_at_saturation and not bracketed:
        b_s = saturated_at(records)
        if b_s is not None:
            return ProbePlan(None, None, "throughput",
                             f"throughput stopped growing past batch {b_s} (no gain over "
                             f"{SATURATION_GAIN:.0%} up to {max(r.batch_size for r in records if r.fits)})")
        hint = 0 if limits.hint is None else limits.hint // g
        target = max(lo + 1, min(target, max(SATURATION_GROWTH * lo, hint)))
    cost = fit_probe_cost(records)
    if cost is None:
        return ProbePlan(target, None)
    cap = limits.max_probe_seconds
    if cap is not None and cost.batch_seconds(target * g) > cap:
        within = cost.largest_within(cap, lo=lo * g, hi=target * g)
        k = None if within is None else within // g
        if (k is None or k <= lo) and len(records) < 2:
            k = lo + 1  # one step reading (the first, the noisiest) does not end a search: the next batch up
        if k is None or k <= lo:
            return ProbePlan(None, cost.seconds(target * g), "probe_cap",
                             f"a probe at batch {(lo + 1) * g} would run its forward passes for about "
                             f"{cost.batch_seconds((lo + 1) * g):.1f} s, over batch.max_probe_seconds = {cap:g}")
        target = k
    predicted = cost.seconds(target * g)
    if limits.deadline is not None and now() + predicted > limits.deadline:
        return ProbePlan(None, predicted, "time_cap",
                         f"a probe at batch {target * g} (about {predicted:.1f} s) would end after the boundary "
                         f"search's time ({limits.deadline_source})")
    return ProbePlan(target, predicted)
