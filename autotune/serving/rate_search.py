"""The highest request rate a running server sustains within the SLO: load points and their bisection.

A load point sends open-loop Poisson arrivals (:mod:`autotune.serving.schedule`, :mod:`autotune.serving.loadgen`)
at one rate for a few seconds and reads the SLO's percentile of the latencies, counted from each request's
intended send time. A request that failed, timed out or was never sent counts as infinitely late: it cannot
meet the SLO, so errors count against the percentile (and the goodput) instead of vanishing from it. The
first tenth of a point is left out: the server starts it with an empty queue.

How sure a point is: latencies under load are autocorrelated (a queue drains slowly), so the percentile's
95% interval is a circular block bootstrap (:func:`autotune.core.stats.bootstrap_percentiles`), block length
from the measured autocorrelation. A point *passes* when the whole interval is within the SLO (95% sure the
percentile is), and fails otherwise; ``clear`` says whether a failure was sure too (the whole interval above).

The bisection (pseudo-code)::

    r = the simulation's prediction (or a guess)
    until a point passed and one failed: r *= 1.3 after a pass, r *= 0.7 after a fail
    then r = sqrt(lo * hi) between the highest pass below the lowest fail, until hi / lo <= 1 + tolerance
    max rate = the highest passing rate below every failing one (passing: the percentile's whole CI within)
    its interval: [the max rate, the lowest rate whose whole CI was above the SLO] (where the truth lies: the
                   rates between passed on their point estimate or were near things)

The number of points and each point's length come from the time left (:class:`RateSearchBudget`); a point
runs long enough for ~600 requests (6 beyond a p99), between 2 and 8 s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from autotune.core.stats import bootstrap_percentiles, replicate_interval

#: Left out of each point's percentiles: the empty queue the point starts with.
WARM_FRACTION = 0.1
#: A failed, timed-out or unsent request, in the percentiles: later than any SLO.
_NEVER_MS = 1e9


@dataclass(frozen=True)
class LoadPoint:
    """One rate, measured: latency percentiles (ms) and what happened to the requests."""

    rate: float
    seconds: float
    sent: int
    ok: int
    failed: int
    timed_out: int
    dropped: int
    achieved_rate: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    pct_ms: float  # the SLO's percentile
    pct_ci_ms: tuple[float, float]
    p99_ci_ms: tuple[float, float]
    good: int  # requests answered within the SLO
    send_lag_p99_ms: float
    passed: bool
    clear: bool  # the whole interval on one side of the SLO
    kept: int = 0  # the requests the percentiles were read from (the first tenth left out, errors counted in)
    errors: tuple[str, ...] = ()  # the first distinct error messages the client got (what failed requests said)
    #: The server's own account of the point (its ``/stats``): the calls it made, their mean rows (the batches the
    #: dynamic batcher formed at this rate), and the median call as the front end saw it (merge, the pipe both
    #: ways, the model, the split); 0 / None where the server was not asked.
    calls: int = 0
    rows_per_call: float | None = None
    call_p50_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pct_ci_ms"] = [round(x, 3) for x in self.pct_ci_ms]
        d["p99_ci_ms"] = [round(x, 3) for x in self.p99_ci_ms]
        d["errors"] = list(self.errors)
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


def point_from(result: Any, *, rate: float, seconds: float, slo_ms: float, percentile: float) -> LoadPoint:
    """A :class:`LoadPoint` from a load generator's result (``autotune.serving.loadgen.LoadResult``)."""
    lat = np.asarray(result.latencies_ms, dtype=float)
    sent = int(result.sent)
    errors = int(result.failed) + int(result.timed_out) + int(result.dropped)
    skip = int(len(lat) * WARM_FRACTION)
    kept = lat[skip:]
    err_kept = errors - int(errors * WARM_FRACTION)
    values = np.concatenate([kept, np.full(err_kept, _NEVER_MS)]) if err_kept else kept
    if values.size == 0:
        values = np.array([_NEVER_MS])
    q = [50.0, 90.0, 99.0, percentile]
    p50, p90, p99, pct = (float(v) for v in np.percentile(values, q))
    lo, hi = _interval(values, percentile, pct, seed=int(rate) % 997)
    if kept.size + err_kept == 0:  # nothing was sent (a low rate's short point): no evidence either way, not sure
        lo = 0.0
    p99_ci = (lo, hi) if percentile == 99.0 else _interval(values, 99.0, p99, seed=int(rate) % 997)
    good = int(np.sum(lat <= slo_ms))
    lag = float(getattr(result, "send_lag_p99_ms", 0.0) or 0.0)
    # a pass is sure: the percentile's whole interval within the SLO. A point estimate just under it, with an
    # interval across it, is a near thing that the next minute may fail (the curve of a busy 2-core machine
    # had p99 15-22 ms at every rate from 50% to 100% of a max rate bisected on point estimates)
    passed = hi <= slo_ms
    clear = passed or lo > slo_ms
    return LoadPoint(rate=rate, seconds=seconds, sent=sent, ok=int(result.ok), failed=int(result.failed),
                     timed_out=int(result.timed_out), dropped=int(result.dropped),
                     achieved_rate=float(result.achieved_rate), p50_ms=p50, p90_ms=p90, p99_ms=p99, pct_ms=pct,
                     pct_ci_ms=(float(lo), float(hi)), p99_ci_ms=p99_ci, good=good, send_lag_p99_ms=lag, passed=passed,
                     clear=clear, kept=int(kept.size) + err_kept,
                     errors=tuple(str(e) for e in (getattr(result, "errors", ()) or ())[:3]))


def _interval(values: np.ndarray, q: float, estimate: float, *, seed: int) -> tuple[float, float]:
    """The ``q``-th percentile's 95% block-bootstrap interval (the ok latencies keep their order, so their
    autocorrelation is in it; errors are appended, a small tail)."""
    if values.size < 20 or float(values.max()) == float(values.min()):
        return estimate, estimate
    lo, hi = replicate_interval(bootstrap_percentiles(values, q, n_boot=400, seed=seed))
    return float(lo), float(hi)


def requests_to_bound(percentile: float, confidence: float = 0.95) -> int:
    """The fewest requests whose slowest one bounds the ``percentile`` with ``confidence``: n with
    ``(q/100)^n <= 1 - confidence`` (299 for a p99, 59 for a p95, 29 for a p90). A point with fewer cannot tell a
    percentile over the SLO from one slow request: its interval's top is its slowest request, so it passes only
    when none was over the SLO, and one slow call (a collection, a neighbour) fails a rate the server sustains."""
    q = min(max(percentile / 100.0, 1e-9), 1.0 - 1e-9)
    return math.ceil(math.log(1.0 - confidence) / math.log(q))


def short_bound(points: Sequence[LoadPoint], max_rate: float, percentile: float) -> LoadPoint | None:
    """The failing point that bounds ``max_rate`` (the lowest failure above it) when it failed on too few requests
    to say so (:func:`requests_to_bound`) and its interval reached under the SLO; None when the bound is sound or
    there is none. With such a bound the max rate is a floor: the truth may lie well above it (a detector at 5.7
    requests/s on 50-request points served 7.4 within its p99 for 30 s under tritonclient, session 31)."""
    above = [p for p in points if not p.passed and p.rate > max_rate]
    if not above:
        return None
    bound = min(above, key=lambda p: p.rate)
    if bound.clear or not 0 < bound.kept < requests_to_bound(percentile):
        return None
    return bound


def point_seconds(rate: float, *, requests: int = 600, low: float = 2.0, high: float = 8.0) -> float:
    """How long a point runs: ~``requests`` requests, within [low, high] seconds."""
    return min(high, max(low, requests / max(rate, 1e-9)))


@dataclass(frozen=True)
class RateOutcome:
    """The bisection's answer for one configuration."""

    max_rate: float  # 0: not even the lowest rate tried passed
    max_rate_ci: tuple[float, float]
    points: tuple[LoadPoint, ...]
    stopped_by: str  # converged | points | time


def bound_above(points: Sequence[LoadPoint], rate: float) -> float:
    """The top of a max rate's interval: the lowest sure failure above ``rate``, else the lowest failure above it;
    ``rate`` itself when none failed above it (the interval's top is what was shown, not more)."""
    above = [p for p in points if not p.passed and p.rate > rate]
    return min((p.rate for p in above if p.clear), default=min((p.rate for p in above), default=rate))


def max_rate_of(points: Sequence[LoadPoint]) -> tuple[float, tuple[float, float]]:
    """The highest passing rate below every failing one, and the bracket up to the lowest sure failure."""
    lowest_fail = min((p.rate for p in points if not p.passed), default=math.inf)
    best = max((p.rate for p in points if p.passed and p.rate < lowest_fail), default=0.0)
    return best, (best, bound_above(points, best))


def next_rate(points: Sequence[LoadPoint], rate: float, *, floor: float = 0.5,
              tolerance: float = 0.06) -> float | None:
    """The bisection's next rate after ``points`` (the last measured at ``rate``); None when it is done: the
    bracket is within ``tolerance``, or nothing passed down to ``floor``."""
    lo = max((p.rate for p in points if p.passed), default=None)
    fails = [p.rate for p in points if not p.passed]
    hi = min(fails) if fails else None
    if lo is not None and hi is not None and lo >= hi:  # a pass above a fail: noise; trust the fail
        lo = max((p.rate for p in points if p.passed and p.rate < hi), default=None)
    if hi is None:
        return rate * 1.3
    if lo is None:
        if rate <= floor:
            return None
        # overloaded, the server still answered at its capacity (or below it, its queue draining after the
        # schedule ended): start under that rather than stepping down 30% at a time from far above
        served = points[-1].achieved_rate
        return max(floor, min(rate * 0.7, 0.9 * served) if 0 < served < 0.8 * rate else rate * 0.7)
    if hi / lo <= 1.0 + tolerance:
        return None
    return math.sqrt(lo * hi)


def find_max_rate(measure: Callable[[float, float], LoadPoint], *, start: float, deadline: float,
                  tolerance: float = 0.06, max_points: int = 8, floor: float = 0.5,
                  prior: Sequence[LoadPoint] = ()) -> RateOutcome:
    """Bisect the rate with ``measure(rate, seconds) -> LoadPoint`` until the bracket is within ``tolerance``,
    ``max_points`` were measured, or the next point would end after ``deadline`` (``time.monotonic()``).

    With ``prior`` points (an earlier bisection of the same configuration, in the order measured), it goes on from
    where they left it (:func:`next_rate`), ``start`` unused, and its outcome counts them too."""
    points: list[LoadPoint] = list(prior)
    stopped_by = "converged"
    nxt = next_rate(points, points[-1].rate, floor=floor, tolerance=tolerance) if points else max(start, floor)
    while nxt is not None:
        rate = nxt
        seconds = point_seconds(rate)
        if len(points) - len(prior) >= max_points:
            stopped_by = "points"
            break
        if len(points) > len(prior) and time.monotonic() + seconds + 1.0 > deadline:
            stopped_by = "time"
            break
        points.append(measure(rate, seconds))
        nxt = next_rate(points, rate, floor=floor, tolerance=tolerance)
    best, ci = max_rate_of(points)
    return RateOutcome(best, ci, tuple(points), stopped_by)


def as_dicts(points: Sequence[LoadPoint]) -> list[dict[str, Any]]:
    return [p.to_dict() for p in points]


__all__ = ["LoadPoint", "RateOutcome", "as_dicts", "bound_above", "find_max_rate", "max_rate_of", "next_rate",
           "point_from", "point_seconds", "requests_to_bound", "short_bound"]
