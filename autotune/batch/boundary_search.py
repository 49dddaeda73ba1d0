"""Batch-size boundary search: the exact largest batch that fits in memory, in few probes.

A *probe* runs the model once at a batch size and says whether it fit, how much memory it
peaked at and, where it can, the memory the process held just before the batch's inputs were
created (the *baseline*: runtime and model). autotune.worker does the running; this module is
pure logic and never imports torch. Probes are expensive -- each builds and runs the model, and
its cost grows with the batch -- so the search spends them carefully, but the answer is exact,
never an estimate: the reported batch was probed and fit, and the next one up (one granularity
step higher) was probed and did not.

Why a memory model: peak memory of a forward pass is close to affine in the batch size,
``peak(b) ≈ a + c·b`` (runtime, weights and workspace plus per-sample activations). When the
caller knows the limit (a CPU budget or the GPU's capacity) the fitted line says where the
boundary is, so the search jumps there and confirms instead of doubling blindly.

Why the model is distrusted, and how much: on CPU the peak is the worker's resident set, a
large constant (torch and the model, ~0.5-1 GiB) plus a per-sample part that at small batches
is smaller than the noise of reading it (a few MB, independent of the batch). A slope estimated
from batches 1 and 2 is then noise, and a jump on it lands far past the boundary -- the
slowest probe of all, and on a real machine a risk of the kernel's OOM killer. So each line
carries a prediction band (noise of a reading, the leverage of the fitted points, and a share of
the slope for curvature beyond the largest fitting batch), and until the first failure the
search aims where the *upper* edge of the band reaches the limit -- a batch that fits with high
confidence and, being far out, pins the slope for the next jump -- and at the line itself only
once the two are close. The baseline anchors the intercept, so a single probe already gives
a slope, ``(peak - baseline) / b``, that is too steep if anything (the per-probe overhead above
the baseline counts as per-sample): its jumps fall short rather than past, up to noise and to
curvature below the probed batch. After the first failure the search interpolates between the bracket's
ends (regula falsi, Illinois-weighted) when the failure's peak is known, else uses the refitted
line, and probes the median of that estimate's distribution within the bracket; every decision
is checked by a probe, and the bracket logic bounds what a wrong model can waste.

Why no model without a limit: fitting probes tell where memory *is* at a batch size, not where
the limit is; without the limit only fit/fail outcomes locate the boundary, so the search then
doubles and bisects (in an affine world bisection in batch space is bisection in memory space).

Monotonicity is assumed (if b fits, every smaller batch fits). The search only ever probes
strictly inside the open bracket (largest known fit, smallest known failure), so it never
probes above a failure and cannot observe a contradiction: a failure is trusted and everything
above it is ruled out. For a probe that is not monotone the answer is still a confirmed local
boundary (b fits, b + granularity fails), though not necessarily the largest batch that fits.
What it can observe is a probe disagreeing with the known limit (it fit but peaked above it):
the probe's verdict is trusted and the disagreement recorded in ``BatchBoundary.anomalies``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist

from autotune.batch.boundary import DEFAULT_MAX_BATCH_SIZE, EARLY_STOPS, BatchBoundary, _check_int
from autotune.batch.memory_model import BandedLine, BoundaryEstimate, fit_memory_model, least_squares
from autotune.batch.probe_cost import ProbeLimits, fit_probe_cost, plan_probe
from autotune.batch.probes import ProbeRecord, ProbeResult
from autotune.core.sizes import format_size
from autotune.errors import BatchSearchError, InputError

# Extra probes a misleading model may cost over doubling (before the first failure) and over
# bisection (after it); see the envelope and the window in ``find_max_batch_size``.
SLACK = 2
#: Assumed noise (one standard deviation) of a peak reading, as a share of the limit, when the
#: caller does not say. CPU resident-set peaks move by a few MB between identical runs (allocator
#: and page-cache effects), about 0.25% of a 2 GiB budget; GPU allocator peaks move less.
DEFAULT_NOISE_FRACTION = 0.0025
#: Before the first failure the search aims at the line only when that is at most this factor
#: above the band's safe edge (a plausible overshoot of at most 25%); else it approaches.
AIM_RATIO = 1.25


def find_max_batch_size(
    probe: Callable[[int], ProbeResult],
    *,
    granularity: int = 1,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    memory_limit_bytes: int | None = None,
    noise_bytes: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    limits: ProbeLimits | None = None,
    on_probe: Callable[[ProbeRecord, float | None], None] | None = None,
) -> BatchBoundary:
    """Find the exact largest batch size (a multiple of ``granularity``) for which ``probe`` fits.

    The search works on the lattice k = batch / granularity, k in 1..K, K = max_batch_size //
    granularity. ``lo`` is the largest k known to fit, ``hi`` the smallest known to fail
    (K + 1 until a probe fails: a virtual failure just above the bound). Memory is modelled as
    the increment m(b) = peak(b) - baseline (the raw peak where probes report no baseline);
    the headroom is H = L - the latest baseline reading::

        probe k = 1; if it fails: raise BatchSearchError
        lo, hi = 1, K + 1
        while hi - lo > 1:
            lines (limit known): anchored: through the origin and the largest fitting probe
                                 (slope m(b)/b; too steep if anything, so it falls short)
                                 fitted: least squares over the fitting probes (>= 2 sizes)
                each with the spread s(b) = sqrt(σ²·leverage(b) + (RELATIVE_NOISE·m(b))²
                                             + (CURVATURE·slope·(b - b_max))²),
                σ = noise_bytes (or the fit's residual spread, if larger);
                take the line whose upper edge m(b) + z·s(b) reaches H farthest out:
                center = where the line reaches H, low = where its upper edge does,
                sd = s(center) / slope
            if no line:           t = 2·lo if no failure yet else (lo + hi) // 2  # double, bisect
            elif no failure yet:  t = floor(center) if center <= AIM_RATIO·low   # aim: sharp model
                                  else max(floor(low), min(2·lo, floor(center)))  # approach
            else:                 c = regula falsi between the peaks at lo and hi if hi's peak is
                                      known and above L (the end kept s >= 2 times in a row weighs
                                      2^-(s-1): Illinois), else center
                                  t = floor(median of N(c, sd·2^(u+d)) cut to [lo, hi))
                                  # probabilistic bisection: a sharp model is trusted, a vague
                                  # one (or one proved wrong u + d times in a row) bisects
            gallop: u = fits the model expected to fail since the last failure: t >= lo + 2^u;
                    d = failures it expected to fit since the last fit: t <= hi - 2^d
                    (a model that is wrong by e batches costs O(log e) probes, not O(e))
            envelope, before any failure, after j probes: t >= 2^(j - 1 - SLACK)
                    (a model that keeps under-predicting cannot grow slower than doubling)
            window, from the first failure on, with m probes left of a budget of
                    ceil(log2(hi - lo)) + SLACK set then: t in [hi - 2^(m-1), lo + 2^(m-1)]
                    (either outcome leaves a bracket bisection can finish in m - 1 probes)
            t = clamp(t, lo + 1, hi - 1); probe t; if it fits: lo = t else: hi = t
            limits (when given, autotune.batch.probe_cost.plan_probe): before each probe after the
                    first, t may be lowered (the doubling grid while saturation is watched; the
                    per-probe cap) or the search ends: stopped_by = throughput | probe_cap | time_cap
        answer lo · granularity; hi = lo + 1 was probed and failed unless lo == K or the limits
        ended the search (then lo is the largest batch probed to fit, and the memory model's
        estimate of the boundary goes with it: BatchBoundary.predicted_limit)

    Why aim low before the first failure: a probe above the boundary is the costliest there is
    (probe time grows with the batch) and on CPU it may be killed by the kernel; one aimed at
    the band's edge fits, and being far out it shrinks the band, until the line is at most
    AIM_RATIO above the edge: then a probe at the line overshoots by at most that much, and is
    usually within a step or two of the boundary ("b fits, b + 1 fails" right there).

    The window is the projection step of the ITP method (Oliveira & Takahashi 2020). Together
    with the envelope it bounds the cost of any model, however wrong: at most
    ceil(log2(K)) + 2 + SLACK probes up to the first failure, then ceil(log2(hi - lo)) + SLACK.

    ``noise_bytes`` is the standard deviation of one peak (and baseline) reading; by default
    DEFAULT_NOISE_FRACTION of the limit. ``probe`` may raise for errors other than running out
    of memory; that propagates (the caller reports the candidate as failed). ``clock`` times
    each probe (ProbeRecord.seconds). ``on_probe(record, predicted_seconds)`` is told about each
    probe as it ends (progress; the prediction is the cost model's, None before the first probe).
    """
    _check_int("granularity", granularity, minimum=1)
    _check_int("max_batch_size", max_batch_size, minimum=granularity)
    if memory_limit_bytes is not None:
        _check_int("memory_limit_bytes", memory_limit_bytes, minimum=1)
    if noise_bytes is not None and not (noise_bytes >= 0 and math.isfinite(noise_bytes)):
        raise InputError(f"noise_bytes: must be a finite number of at least 0, got {noise_bytes!r}")
    if noise_bytes is None:
        noise_bytes = DEFAULT_NOISE_FRACTION * memory_limit_bytes if memory_limit_bytes is not None else 0.0
    search = _BoundarySearch(
        probe=probe,
        granularity=granularity,
        top=max_batch_size // granularity,
        limit=memory_limit_bytes,
        noise=float(noise_bytes),
        clock=clock,
        limits=limits if limits is not None and not limits.unlimited else None,
        on_probe=on_probe,
    )
    search.run()
    predicted = None
    if search.stopped_by in EARLY_STOPS:
        estimate = search._estimate()
        if estimate is not None:
            predicted = (estimate.low, estimate.center)
    return BatchBoundary(
        max_batch_size=search.lo * granularity,
        granularity=granularity,
        upper_bound=search.top * granularity,
        hit_upper_bound=search.lo == search.top,
        probes=tuple(search.records),
        model=fit_memory_model(search.records),
        memory_limit_bytes=memory_limit_bytes,
        anomalies=tuple(search.anomalies),
        stopped_by=search.stopped_by if search.stopped_by else ("upper_bound" if search.lo == search.top else "memory"),
        stop_detail=search.stop_detail,
        predicted_limit=predicted,
    )


@dataclass
class _BoundarySearch:
    """Mutable state of one search (private; the public result is the frozen BatchBoundary)."""

    probe: Callable[[int], ProbeResult]
    granularity: int
    top: int
    limit: int | None
    noise: float
    clock: Callable[[], float]
    limits: ProbeLimits | None = None
    on_probe: Callable[[ProbeRecord, float | None], None] | None = None
    stopped_by: str = ""
    stop_detail: str = ""
    lo: int = 0
    hi: int = 0
    records: list[ProbeRecord] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)
    fits_against_model: int = 0  # fits the model expected to fail, since the last failure
    fails_against_model: int = 0  # failures the model expected to fit, since the last fit
    budget_end: int | None = None  # probe count by which the bracket phase must be done

    def run(self) -> None:
        self.hi = self.top + 1
        first = self._probe(1, expect_fit=None)
        if not first.fits:
            raise BatchSearchError(self._smallest_failed_message(first))
        self.lo = 1
        while self.hi - self.lo > 1:
            target, expect_fit = self._next()
            cost = fit_probe_cost(self.records)
            predicted = None if cost is None else cost.seconds(target * self.granularity)
            if self.limits is not None:
                plan = plan_probe(target, lo=self.lo, hi=self.hi, granularity=self.granularity,
                                  records=self.records, limits=self.limits, now=self.clock,
                                  bracketed=self.hi <= self.top)
                if plan.target is None:
                    self.stopped_by, self.stop_detail = plan.stopped_by or "time_cap", plan.detail
                    return
                if plan.target != target:  # lowered: the model's expectation was for the old target
                    target, expect_fit = plan.target, (True if expect_fit else None)
                predicted = plan.predicted_seconds
            result = self._probe(target, expect_fit=expect_fit, predicted=predicted)
            if result.fits:
                self.lo = target
            else:
                self.hi = target
                if self.budget_end is None:
                    width = self.hi - self.lo
                    self.budget_end = len(self.records) + math.ceil(math.log2(width)) + SLACK

    def _next(self) -> tuple[int, bool | None]:
        g = self.granularity
        bracketed = self.hi <= self.top
        estimate = self._estimate()
        aim: float | None = None  # where the model puts the boundary (lattice units)
        if estimate is None:
            target = (self.lo + self.hi) // 2 if bracketed else 2 * self.lo
        else:
            aim = estimate.center / g
            if bracketed:
                secant = self._secant()
                aim = aim if secant is None else secant / g
                # each probe in a row that proved the model wrong halves the trust in it
                doubt = 2 ** (self.fits_against_model + self.fails_against_model)
                target = math.floor(self._median_inside(aim, doubt * estimate.sigma / g))
            elif aim <= AIM_RATIO * estimate.low / g:
                target = math.floor(min(aim, self.top + 1))
            else:
                low = math.floor(min(estimate.low / g, self.top + 1))
                target = max(low, min(2 * self.lo, math.floor(min(aim, self.top + 1))))
            target = max(target, self.lo + 1)
            if self.fits_against_model:
                target = max(target, self.lo + 2**self.fits_against_model)
            if self.fails_against_model:
                target = min(target, self.hi - 2**self.fails_against_model)
        if not bracketed:
            target = max(target, 2 ** max(0, len(self.records) - 1 - SLACK))
        elif self.budget_end is not None:
            left = max(1, self.budget_end - len(self.records))
            reach = 2 ** (left - 1)
            target = min(max(target, self.hi - reach), self.lo + reach)
        target = min(max(target, self.lo + 1), self.hi - 1)
        return target, (None if aim is None else target <= aim)

    def _lines(self) -> tuple[list[BandedLine], float]:
        """The anchored and the fitted line over the fitting probes, and the headroom (bytes)."""
        assert self.limit is not None
        fitting = [r for r in self.records if r.fits and r.peak_memory_bytes is not None]
        anchored = bool(fitting) and all(r.baseline_bytes is not None for r in fitting)

        def increment(record: ProbeRecord) -> float:
            peak = float(record.peak_memory_bytes or 0)
            return peak - float(record.baseline_bytes or 0) if anchored else peak

        points = [(float(r.batch_size), increment(r)) for r in fitting]
        baselines = [r.baseline_bytes for r in self.records if r.baseline_bytes is not None]
        # without baselines the origin stands in: the intercept is not negative
        headroom = self.limit - (float(baselines[-1]) if anchored else 0.0)
        lines: list[BandedLine] = []
        if not points:
            return lines, headroom
        top_b, top_m = max(points)
        if top_m > 0:
            lines.append(BandedLine(offset=0.0, slope=top_m / top_b, sigma=self.noise, anchor=top_b))
        n = len(points)
        fit = least_squares(points)
        if fit is not None and fit.slope > 0:
            offset, slope = fit.intercept, fit.slope
            sigma = self.noise
            if n >= 3:
                residual = sum((m - offset - slope * b) ** 2 for b, m in points)
                sigma = max(sigma, math.sqrt(residual / (n - 2)))
            lines.append(BandedLine(offset, slope, sigma, anchor=top_b, count=n, mean=fit.mean_x, sxx=fit.sxx))
        return lines, headroom

    def _estimate(self) -> BoundaryEstimate | None:
        """The boundary estimate in batch units, None without a limit or peaks.

        Of the anchored and the fitted line, the one whose band reaches the headroom farthest
        out says the most: early (one probe, or two close together) that is the anchored line,
        whose steepness is known to err on the safe side; once the fitting probes span a range,
        the fitted one (which also sees the overhead above the baseline as an intercept).
        """
        if self.limit is None:
            return None
        lines, headroom = self._lines()
        if not lines:
            return None
        cap = float((self.top + 1) * self.granularity)
        scored = [(line.safe_crossing(headroom, cap=cap), line) for line in lines]
        low, best = max(scored, key=lambda item: item[0])
        center = best.crossing(headroom)
        return BoundaryEstimate(center=center, low=low, sigma=best.spread(center) / best.slope)

    def _median_inside(self, center: float, sigma: float) -> float:
        """The median of the boundary's distribution N(center, sigma) cut to the bracket [lo, hi)
        (lattice units): a probe there halves the remaining probability, so a sharp model is
        trusted (median = center) and a vague one bisects the bracket."""
        if not sigma > 0:
            return center
        belief = NormalDist(center, sigma)
        below, above = belief.cdf(self.lo), belief.cdf(self.hi)
        if above - below < 1e-9:  # the model puts (almost) nothing inside: the gallop takes over
            return float(self.lo if center < self.lo else self.hi - 1)
        return belief.inv_cdf((below + above) / 2)

    def _secant(self) -> float | None:
        """Regula falsi on peak(b) - L between the bracket's ends (batch units), or None.

        Needs the peak at lo and a peak above the limit at hi (a budget check that ran to the
        end; an out-of-memory error's peak is partial). Illinois: when the same end moved s >= 2
        times in a row, the other end's distance to the limit weighs 2^-(s-1), so a curved
        memory line cannot pin the interpolation to one side.
        """
        assert self.limit is not None
        g = self.granularity
        lo_rec = self._record(self.lo * g)
        hi_rec = self._record(self.hi * g)
        if lo_rec is None or hi_rec is None or lo_rec.peak_memory_bytes is None:
            return None
        if hi_rec.peak_memory_bytes is None or hi_rec.peak_memory_bytes <= self.limit:
            return None
        below = max(0.0, float(self.limit - lo_rec.peak_memory_bytes))
        above = float(hi_rec.peak_memory_bytes - self.limit)
        last = self.records[-1].fits
        streak = 0
        for record in reversed(self.records):
            if record.fits != last:
                break
            streak += 1
        if streak >= 2:
            if last:
                above *= 0.5 ** (streak - 1)
            else:
                below *= 0.5 ** (streak - 1)
        return lo_rec.batch_size + (hi_rec.batch_size - lo_rec.batch_size) * below / (below + above)

    def _record(self, batch_size: int) -> ProbeRecord | None:
        for record in self.records:
            if record.batch_size == batch_size:
                return record
        return None

    def _probe(self, k: int, *, expect_fit: bool | None, predicted: float | None = None) -> ProbeResult:
        batch_size = k * self.granularity
        start = self.clock()
        result = self.probe(batch_size)
        seconds = self.clock() - start
        if not isinstance(result, ProbeResult):
            raise TypeError(f"probe({batch_size}) returned {type(result).__name__}, expected ProbeResult")
        self.records.append(
            ProbeRecord(
                batch_size=batch_size,
                fits=result.fits,
                peak_memory_bytes=result.peak_memory_bytes,
                seconds=seconds,
                error=result.error,
                baseline_bytes=result.baseline_bytes,
                step_seconds=result.step_seconds,
                forward_calls=result.forward_calls,
                overhead_seconds=result.overhead_seconds,
            )
        )
        if self.on_probe is not None:
            self.on_probe(self.records[-1], predicted)
        self._note_anomaly(batch_size, result)
        if result.fits:
            self.fails_against_model = 0
            if expect_fit is False:
                self.fits_against_model += 1
        else:
            self.fits_against_model = 0
            if expect_fit is True:
                self.fails_against_model += 1
        return result

    def _note_anomaly(self, batch_size: int, result: ProbeResult) -> None:
        peak = result.peak_memory_bytes
        if result.fits and self.limit is not None and peak is not None and peak > self.limit:
            self.anomalies.append(
                f"batch {batch_size} fit but peaked at {format_size(peak)}, above the limit "
                f"{format_size(self.limit)}"
            )

    def _smallest_failed_message(self, result: ProbeResult) -> str:
        parts = [f"batch size {self.granularity} does not fit"]
        if self.granularity > 1:
            parts[0] += f" (the smallest at granularity {self.granularity}; granularity 1 may find smaller)"
        if result.peak_memory_bytes is not None:
            peak = f"peak {format_size(result.peak_memory_bytes)}"
            if self.limit is not None:
                peak += f" vs limit {format_size(self.limit)}"
            parts.append(peak)
        elif self.limit is not None:
            parts.append(f"limit {format_size(self.limit)}")
        if result.error:
            parts.append(result.error)
        return ": ".join(parts)
