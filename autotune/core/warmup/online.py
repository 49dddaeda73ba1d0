"""The online stop: one value at a time, when warmup is over and when enough has been measured.

:class:`OnlineDetector` reruns the offline :func:`~autotune.core.warmup.offline.analyze` on a
geometric schedule and adds the stop gates of its risk model (its docstring has both);
:func:`replay` feeds a recorded series through it.

Why one module (~430 lines): it is one class; its private methods are the steps and stop gates of its
pseudo-code and share the detector's running state (schedule, steady start, restarts), so they are only
understood read beside it. A fifth of the length is the class docstring's risk model and pseudo-code.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune.core.stats import lag1_autocorrelation, normal_quantile
from autotune.core.warmup.noise import Equivalence, estimate_phi, trend
from autotune.core.warmup.offline import DEFAULT_MARGIN, WarmupAnalysis, analyze
from autotune.core.warmup.spikes import SPIKE_MAX_RUN, SPIKE_THRESHOLD, SPIKE_WINDOW, rolling_median, spike_mask
from autotune.errors import InputError

__all__ = ["BUDGET_SHARE_FOR_HORIZON", "SLOW_CALL_HORIZON_S", "OnlineDetector", "budget_floor_seconds",
           "replay"]

#: Share of a candidate's time budget that may go to waiting out the iteration horizon (the risk
#: model's late count-driven changes); the rest is for reaching the precision target.
BUDGET_SHARE_FOR_HORIZON = 0.5
#: Wall time after which a slow call's remaining count-driven effects are below a percent: the
#: horizon (3,000 iterations) of a 0.5 ms call, whose per-call effects of microseconds are < 1%.
SLOW_CALL_HORIZON_S = 1.5


def budget_floor_seconds(max_seconds: float) -> float:
    """The ``floor_seconds`` cap for a caller that has ``max_seconds`` per candidate.

    ``min(SLOW_CALL_HORIZON_S, BUDGET_SHARE_FOR_HORIZON * max_seconds)``: a larger budget
    does not buy a longer wait, because past 1.5 s a call of 0.5 ms or more has nothing
    left in the model that moves it by a percent; a smaller one keeps half for precision.
    """
    return min(SLOW_CALL_HORIZON_S, BUDGET_SHARE_FOR_HORIZON * float(max_seconds))


class OnlineDetector:
    """Decides, one value at a time, when warmup is over and when enough has been measured.

    Each value is the mean seconds per iteration of a block of ``iterations_per_value``
    iterations (throughput mode: k = ceil(5 ms / call); latency mode and plain per-iteration
    traces: 1), so the detector knows how many *iterations* and how many *seconds* it has
    seen: ``iterations = k * values`` and ``seconds = k * sum(values)``. Its floors are in
    those units, not in values, so they mean the same for every model and block size.

    Risk model (what could still change after a stop, and what the floors cover):

    * Count-driven changes come after a number of *calls*: TorchScript's profiling executor
      (a profiled run, then the optimised graph; fusion re-specialisations, at most a dozen),
      dynamo recompiles on guard failures (bounded by its cache limit of 8), caching
      allocators growing their pools, CPython's specialisation, CPU caches and branch
      predictors. The coarse ones end within tens of calls; per-call overhead effects are of
      the order of microseconds. The horizon for them is ``min_iterations`` = 3,000
      iterations (the horizon the issue's held-out set draws change positions from).
    * Time-driven changes come after *wall time*: the clock governor ramps up within ~100 ms
      of load; neighbours on a shared machine come and go at any time (those are not a
      warmup and are handled by practical equivalence, not by waiting). ``min_seconds`` =
      0.25 s covers the ramp with room.
    * Budget: waiting for 3,000 iterations costs 3,000 x the call time, 30 s for a 10 ms
      call, more than any recipe's ``max_seconds``. The budget is the caller's, not the
      detector's: by default (``floor_seconds=None``) the detector waits out the whole
      horizon, and a caller with a time budget caps the wait with ``floor_seconds``. The
      timing loop passes :func:`budget_floor_seconds`: 1.5 s (= 3,000 x 0.5 ms), or half of
      the candidate's ``max_seconds`` if that is less, leaving the rest to reach the precision
      target. The cap is affordable because past the coarse tiers what is left in a slow call
      are per-call effects of microseconds, below a percent of a call of 0.5 ms or more; a count-driven
      change later than the cap in a slow call is missed, and the benchmark reports how often,
      by the change's time, with and without the cap.

    None of these numbers is fitted to change positions of the labelled traces. A value
    therefore has to satisfy::

        floor:  seconds >= min_seconds and (iterations >= min_iterations
                                            or (floor_seconds is set and seconds >= floor_seconds))
        tail:   values after the steady start >= min_steady and their seconds >= min_seconds;
                after a restart (the level moved after it was declared steady) the new level
                must meet the floor by itself, counted from its start: a series that moved
                after looking settled gives no credit for its past

    The offline analysis is rerun on a geometric schedule (every ``growth`` x more values),
    so the cost per value stays small however long the run is. Pseudo-code::

        push(v): append v
          at a scheduled check (n >= next_check; next_check = max(n + gap, n * growth)):
              a = analyze(values, no CI)
              not steady yet: a steady start found twice in a row (same start, or the same
                  level within the tolerance) -> steady from a.steady_start
                  (after the first sighting the confirming check comes early, n + 5%)
              steady: a has no steady state, or starts later at a different level
                  -> the level moved: restart (not steady; restarts += 1)
                  a starts later at the same level -> sampling starts there instead
          steady and n >= next_ci (every 5% of the steady samples):
              cheap AR(1)-corrected CI of mean(values[start:]); if its half-width <= ci_target * mean:
                  a = analyze(values, no CI); stop gates (all must pass, else keep measuring):
                    1. enough: the floor and the tail above
                    2. stable: a agrees with the previous check (same start or level) and
                       does not move the level
                    3. history: if the level has gone up before (an earlier segment faster
                       than the steady level: a slowdown, regimes), the steady tail must be
                       >= regime_factor x the longest earlier segment
                    4. no drift in the tail: least-squares trend, long-run SE, |t| <= drift_t or
                       relative change <= tolerance / 2; and the two halves of the tail
                       the same level (within the tolerance or within noise)
                  then the bootstrap CI: half-width <= ci_target * mean -> done ("precision")
          consumed >= max_values: done ("max_values")

    The caller stops at its own time budget; :meth:`result` then analyses what was consumed.

    Tolerance: ``margin`` is the practical-equivalence margin of the final comparison
    (``equivalence_margin``; default :data:`DEFAULT_MARGIN` = 2%, the showdown's default):
    levels closer than it are one steady state, and a drift is reported only when it exceeds
    it. ``rel_tolerance`` is the same thing under its old name (``margin`` wins when both are
    given). Pass the recipe's margin: ``OnlineDetector(margin=equivalence_margin, ...)``.

    Why the gates: a causal detector cannot tell a flat start from a long flat warmup (or the
    fast phase before a slowdown) until the change happens, so the floor is the price of
    catching changes up to the horizon. A series whose level has already gone up and down is
    more likely to change again (regimes, Barrett et al.'s "no steady state"), so its current
    level must outlast the earlier ones before it is trusted; a slow drift is cut by the
    changepoint search into steps within tolerance, so the tail is tested for a trend
    explicitly. Gates only delay the stop: each failure means "measure more".
    """

    def __init__(
        self,
        *,
        ci_target: float = 0.01,
        max_values: int | None = None,
        margin: float | None = None,
        rel_tolerance: float = DEFAULT_MARGIN,
        iterations_per_value: int = 1,
        min_iterations: int = 3000,
        min_seconds: float = 0.25,
        floor_seconds: float | None = None,
        min_steady: int = 30,
        growth: float = 1.15,
        min_check_gap: int = 10,
        confidence: float = 0.95,
        end_fraction: float = 0.25,
        regime_factor: float = 2.0,
        drift_t: float = 3.0,
        seed: int = 0,
    ) -> None:
        if ci_target <= 0:
            raise ValueError("ci_target must be > 0")
        if max_values is not None and max_values < 1:
            raise ValueError("max_values must be at least 1")
        if growth <= 1.0:
            raise ValueError("growth must be > 1")
        if min_check_gap < 1:
            raise ValueError("min_check_gap must be at least 1")
        if not 0.0 < confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")
        if regime_factor < 0 or drift_t <= 0:
            raise ValueError("regime_factor must be >= 0 and drift_t > 0")
        if iterations_per_value < 1:
            raise ValueError("iterations_per_value must be at least 1")
        if min_iterations < 0 or min_seconds < 0 or (floor_seconds is not None and floor_seconds < 0):
            raise ValueError("min_iterations, min_seconds and floor_seconds must be >= 0")
        if margin is not None and not margin > 0:
            raise ValueError("margin must be > 0")
        self.ci_target = float(ci_target)
        self.max_values = max_values
        self.rel_tolerance = float(margin) if margin is not None else float(rel_tolerance)
        self.iterations_per_value = int(iterations_per_value)
        self.min_iterations = int(min_iterations)
        self.min_seconds = float(min_seconds)
        self.floor_seconds = None if floor_seconds is None else max(float(floor_seconds), self.min_seconds)
        self.min_steady = max(int(min_steady), 3)
        self.growth = float(growth)
        self.min_check_gap = int(min_check_gap)
        self.confidence = float(confidence)
        self.end_fraction = float(end_fraction)
        self.regime_factor = float(regime_factor)
        self.drift_t = float(drift_t)
        self.seed = int(seed)
        self.restarts = 0
        self.blocked: dict[str, int] = {}  # stop gate -> how often it delayed the stop (diagnostics)
        self._z = normal_quantile(0.5 + self.confidence / 2.0)
        self._values: list[float] = []
        self._cum: list[float] = [0.0]  # cumulative sums of the values (seconds / k)
        self._next_check = max(self.min_steady, self.min_check_gap)
        self._next_ci = 0
        self._steady_start: int | None = None
        self._prev: WarmupAnalysis | None = None
        self._final: WarmupAnalysis | None = None
        self._done = False
        self._stopped_by: str | None = None

    # -- state ------------------------------------------------------------------------------------
    @property
    def consumed(self) -> int:
        """Values pushed so far."""
        return len(self._values)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def steady(self) -> bool:
        """Steady state currently declared."""
        return self._steady_start is not None

    @property
    def steady_start(self) -> int | None:
        return self._steady_start

    @property
    def stopped_by(self) -> str | None:
        """``"precision"`` or ``"max_values"`` once done, else None (the time budget is the caller's)."""
        return self._stopped_by

    # -- internals -------------------------------------------------------------------------------
    def _analyze(self, *, with_ci: bool) -> WarmupAnalysis:
        return analyze(
            self._values,
            rel_tolerance=self.rel_tolerance,
            min_steady=self.min_steady,
            end_fraction=self.end_fraction,
            confidence=self.confidence,
            with_ci=with_ci,
            seed=self.seed,
        )

    def _same_level(self, a: WarmupAnalysis, b: WarmupAnalysis) -> bool:
        if a.steady_start is None or b.steady_start is None:
            return False
        gap = max(self.min_check_gap, (len(self._values) - b.steady_start) // 10)
        if abs(a.steady_start - b.steady_start) <= gap:
            return True
        ma, mb = a.steady_median or 0.0, b.steady_median or 0.0
        return abs(ma - mb) <= self.rel_tolerance * abs(mb)

    def _level_moved(self, a: WarmupAnalysis) -> bool:
        """After steady was declared at ``self._steady_start``: does ``a`` say the level moved?

        Only a steady state found later at another level is a move. An analysis that finds no
        steady state at all (a burst at the very end, a change not yet long enough to be a
        segment) is not evidence of a new level: it blocks the stop (gate "unstable") and the
        next check decides. Restarting on it would charge a stall of a few calls the whole
        floor again.
        """
        start = self._steady_start
        assert start is not None
        if a.steady_start is None:
            return False
        if a.steady_start <= start:
            return False
        before = float(np.median(self._values[start : a.steady_start]))
        after = a.steady_median or 0.0
        return abs(before - after) > self.rel_tolerance * abs(after)

    def _restart(self) -> None:
        """The declared steady level moved: forget it; sampling waits for the next steady state."""
        self._steady_start = None
        self.restarts += 1

    def _quick_half_width(self) -> tuple[float, float]:
        """AR(1)-corrected normal CI half-width of the steady mean, and the mean: a cheap pre-check."""
        y = np.asarray(self._values[self._steady_start or 0 :], dtype=float)
        mean = float(y.mean())
        if y.size < 3:
            return math.inf, mean
        rho = min(max(lag1_autocorrelation(y), 0.0), 0.98)
        var = float(y.var(ddof=1)) * (1.0 + rho) / (1.0 - rho)
        return self._z * math.sqrt(var / y.size), mean

    def _check(self, n: int) -> None:
        a = self._analyze(with_ci=False)
        if self._steady_start is None:
            if a.steady_start is not None and self._prev is not None and self._same_level(a, self._prev):
                self._steady_start = a.steady_start
                self._next_ci = n
            elif a.steady_start is not None:  # first sighting: confirm soon
                self._next_check = min(self._next_check, n + max(self.min_check_gap, math.ceil(0.05 * n)))
        elif self._level_moved(a):
            self._restart()
        elif a.steady_start is not None and a.steady_start > self._steady_start:
            self._steady_start = a.steady_start
        self._prev = a

    def _history_blocks(self, a: WarmupAnalysis, start: int, n: int) -> bool:
        """Gate 3: has the level gone up before without the tail outlasting the earlier levels?

        Only a rise counts: falling levels are what warmup looks like, rises are a slowdown or
        regimes, which may come back.
        """
        bounds = [0, *(c for c in a.changepoints if c < start), start]
        transient = max(5, n // 200)
        level = a.steady_median or 0.0
        longest = 0
        went_up = False
        for lo, hi in itertools.pairwise(bounds):
            if hi - lo <= transient:
                continue
            longest = max(longest, hi - lo)
            if float(np.median(self._values[lo:hi])) < level * (1.0 - self.rel_tolerance):
                went_up = True
        return went_up and n - start < self.regime_factor * longest

    def _drift_blocks(self, start: int) -> bool:
        """Gate 4: does the steady tail trend, or do its two halves differ?"""
        x = np.asarray(self._values[start:], dtype=float)
        m = x.size
        if m < 8:
            return False
        med = rolling_median(x, SPIKE_WINDOW)
        y = np.where(spike_mask(x, med, SPIKE_THRESHOLD, SPIKE_MAX_RUN), med, x)
        phi = estimate_phi(y)
        tau = (1.0 + phi) / (1.0 - phi)
        rel, tstat = trend(y, tau)
        if abs(tstat) > self.drift_t and abs(rel) > self.rel_tolerance / 2.0:
            return True
        h = m // 2
        a, b = float(y[:h].mean()), float(y[h:].mean())
        sigma_lr = float(np.std(y)) * math.sqrt(tau)
        noise = Equivalence.Z * sigma_lr * math.sqrt(1.0 / h + 1.0 / (m - h))
        return abs(b - a) > max(self.rel_tolerance * abs(b), noise)

    def seconds(self, lo: int = 0, hi: int | None = None) -> float:
        """Wall seconds covered by values ``lo:hi`` (each value is k iterations of its seconds)."""
        hi = len(self._values) if hi is None else hi
        return (self._cum[hi] - self._cum[lo]) * self.iterations_per_value

    def _floor_met(self, lo: int, n: int) -> bool:
        """The floor of the risk model (class docstring) for the values ``lo:n``."""
        sec = self.seconds(lo, n)
        if sec < self.min_seconds:
            return False
        if (n - lo) * self.iterations_per_value >= self.min_iterations:
            return True
        return self.floor_seconds is not None and sec >= self.floor_seconds

    def _tail_met(self, start: int, n: int) -> bool:
        """Enough of the steady level: ``min_steady`` values and ``min_seconds``; after a restart, the floor."""
        if n - start < self.min_steady:
            return False
        if self.restarts:
            return self._floor_met(start, n)
        return self.seconds(start, n) >= self.min_seconds

    def _gate(self, a: WarmupAnalysis, n: int) -> str | None:
        """Name of the first stop gate that ``a`` fails (see the class docstring), or None."""
        start = a.steady_start
        if start is None or self._steady_start is None or self._level_moved(a):
            return "unstable"
        if not self._floor_met(0, n) or not self._tail_met(start, n):
            return "too_early"
        if self._prev is None or not self._same_level(a, self._prev):
            return "unstable"
        if self._history_blocks(a, start, n):
            return "history"
        if self._drift_blocks(start):
            return "drift"
        return None

    def _try_stop(self, n: int) -> None:
        start = self._steady_start
        assert start is not None
        self._next_ci = n + max(1, (n - start) // 20)
        if not self._floor_met(0, n) or not self._tail_met(start, n):
            self._next_ci = n + 1  # come back at the next value: the floor is in seconds, not values
            return
        half, mean = self._quick_half_width()
        if mean <= 0 or half > self.ci_target * mean:
            return
        a = self._analyze(with_ci=False)
        reason = self._gate(a, n)
        if reason is not None:
            self.blocked[reason] = self.blocked.get(reason, 0) + 1
            if self._level_moved(a):
                self._restart()
            elif a.steady_start is not None and a.steady_start > start:
                self._steady_start = a.steady_start
            self._prev = a
            return
        a = self._analyze(with_ci=True)
        if a.steady_start is None or a.ci is None or a.steady_mean is None:
            return
        if (a.ci[1] - a.ci[0]) / 2.0 <= self.ci_target * abs(a.steady_mean):
            self._final = a
            self._done, self._stopped_by = True, "precision"

    # -- API -------------------------------------------------------------------------------------
    def push(self, value: float) -> bool:
        """Add one timing (seconds); returns True once the detector would stop measuring."""
        if self._done:
            return True
        v = float(value)
        if not math.isfinite(v):
            raise InputError(f"timing number {len(self._values)} is {value!r}; timings must be finite numbers")
        self._values.append(v)
        self._cum.append(self._cum[-1] + v)
        self._final = None
        n = len(self._values)
        if n >= self._next_check:
            self._next_check = max(n + self.min_check_gap, math.ceil(n * self.growth))
            self._check(n)
        if self._steady_start is not None and n >= self._next_ci:
            self._try_stop(n)
        if not self._done and self.max_values is not None and n >= self.max_values:
            self._done, self._stopped_by = True, "max_values"
        return self._done

    def result(self) -> WarmupAnalysis:
        """Analysis (with the bootstrap CI) of everything consumed so far; callable at any time."""
        if self._final is None or self._final.n != len(self._values):
            self._final = self._analyze(with_ci=True)
        return self._final


def replay(values: Sequence[float] | np.ndarray, **detector_options: Any) -> OnlineDetector:
    """Feed ``values`` one at a time to a new :class:`OnlineDetector` until it would stop.

    For ``autotune warmup --online`` and the benchmark: ``replay(x).consumed`` is how many
    values the detector needed (all of them if it never stopped).
    """
    det = OnlineDetector(**detector_options)
    for v in np.asarray(values, dtype=float).reshape(-1):
        if det.push(float(v)):
            break
    return det
