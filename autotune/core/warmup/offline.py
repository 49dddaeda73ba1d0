"""Offline warmup analysis: cut the series into segments, find the steady tail, classify the trace.

:func:`analyze` holds the algorithm (its docstring has the pseudo-code); the helpers below are
its steps, used nowhere else, which is why they stay in this one module (~500 lines) rather
than being spread over several: the pseudo-code and the steps it names read together.
:class:`WarmupAnalysis` is its result, also what the online detector returns.

Why one module (~500 lines): the private helpers are the steps of :func:`analyze`'s pseudo-code (walk
back, merge, staircase, drift, practical start) and are only understood read beside it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.core.stats import (
    BATCHES,
    batch_statistics_ci,
    block_bootstrap_ci,
    choose_block_length,
)
from autotune.core.warmup.changepoints import check_finite, pelt, refine
from autotune.core.warmup.mixture import Mixture, find_mixture
from autotune.core.warmup.noise import Equivalence, estimate_phi, trend
from autotune.core.warmup.spikes import (
    SPIKE_MAX_RUN,
    SPIKE_MAX_SHARE,
    SPIKE_THRESHOLD,
    SPIKE_WINDOW,
    one_off_spikes,
    robust_sigma,
    rolling_median,
    spike_mask,
)
from autotune.errors import InputError

__all__ = ["CLASSIFICATIONS", "DEFAULT_MARGIN", "WarmupAnalysis", "analyze"]

CLASSIFICATIONS = ("flat", "warmup", "slowdown", "no_steady_state")

#: Default practical-equivalence margin: the showdown's default ``equivalence_margin`` (2%).
#: Levels closer than this are one steady state; pass ``margin=`` to use another.
DEFAULT_MARGIN = 0.02
#: A short series (:data:`SHORT_UNDER`): the fewest values a steady-state verdict is given on, the fewest its steady
#: tail may hold, and the share of the series it must hold. Why: a measurement of traffic takes whole passes over its
#: batches per value (15 calls of 7 ms: one value), and a slow model's calls one each, so a 3-s budget ends them after
#: 15-30 values; with a steady tail of ``min_steady`` (30) required, every such row was called ``no_steady_state``,
#: "the timings kept drifting", though it had no chance to show a level (BERT-like keyword traffic: every row with
#: fewer than 30 values, and only those, session 37). A tail of 12 is the practical test's four windows of three;
#: 16 values leave a transient of four before it; a level seen for less than half of a short series has not been
#: shown to last. Scored by ``benchmarks/bench_short_series.py`` (12 values were tried first: with no room for a
#: transient, 40% of the steady synthetic shapes were called steady within 2%, so 16).
SHORT_MIN = 16
SHORT_TAIL_MIN = 12
SHORT_TAIL = 0.5
#: A series is short below this many times ``min_steady`` (60 values by default), so that the tail it needs grows
#: with it (half of it) up to ``min_steady`` and never jumps. Why: with short meaning fewer than ``min_steady``, a
#: series of 29 values needed a tail of 15 and one of 30 a tail of 30, so no series of 30-59 values with a transient
#: could be steady: on the labelled real traces cut into block means, 99% of the steady ones were called steady at 29
#: values and 75% at 30 (synthetic steady shapes 97% and 65%), and a demo on an AVX2 EPYC marked four rows of 30-47
#: values `~` (session 40). Scored by ``benchmarks/bench_short_series.py --sizes 30,32,36,40,48,56``: on the
#: development set 97-99% (real) and 96-98% (synthetic steady), drifting shapes caught 96-97%; held out (seed
#: 5551212, the AVX2 capture ``heldout4``) 97-99% steady, 96-98% caught, against 67-93% and 96-99% before.
SHORT_UNDER = 2

_PRACTICAL_WINDOWS = 4  # windows of the tail in the practical-equivalence test

_TREND_T = 3.0  # |t| of a slope that counts as drift (long-run SE, so AR wander is accounted for)
_TREND_T_END = 2.0  # the same, one-sided, for the end of a tail whose whole trend is significant
_TREND_STEPS = 16  # candidate later starts tried when the trend is confined to the tail's beginning


@dataclass(frozen=True)
class WarmupAnalysis:
    """Result of :func:`analyze`. Times are in the unit of the input (seconds)."""

    classification: str
    steady_start: int | None
    steady_mean: float | None
    steady_median: float | None
    ci: tuple[float, float] | None
    changepoints: tuple[int, ...]
    outliers: tuple[int, ...]
    n: int
    #: one-off extreme spikes (a compile, a recompile mid-run): listed in ``outliers`` too, and
    #: left out of the steady mean, median and CI (see :func:`analyze`)
    one_off: tuple[int, ...] = ()
    #: a stationary mixture of two speeds (:mod:`.mixture`): the two levels' means (fast, slow) and the slow
    #: level's share of the values; empty / None when the series is not one
    levels: tuple[float, ...] = ()
    share_high: float | None = None
    #: a steady state whose level wanders (:func:`_wander_start`): the largest departure of a block's median
    #: from the steady median, as a fraction (0.06: "wanders +-6%"); None when the level holds within the margin
    wander: float | None = None
    #: 95% CI of the steady median from four batch medians (:func:`autotune.core.stats.batch_statistics_ci`):
    #: batches long enough that the level's wander is in it, not only the noise within a level (issue 31)
    median_ci: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.classification not in CLASSIFICATIONS:
            raise ValueError(f"classification must be one of {CLASSIFICATIONS}, got {self.classification!r}")

    @property
    def steady(self) -> bool:
        return self.steady_start is not None

    @property
    def bimodal(self) -> bool:
        """Per-call times alternate between two levels (the steady mean is the mixture's)."""
        return len(self.levels) == 2

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict with the keys of the ``autotune warmup --json`` contract (+ outliers, n)."""
        return {
            "classification": self.classification,
            "steady_start": self.steady_start,
            "steady_mean": self.steady_mean,
            "steady_median": self.steady_median,
            "ci": None if self.ci is None else [self.ci[0], self.ci[1]],
            "changepoints": list(self.changepoints),
            "outliers": list(self.outliers),
            "one_off": list(self.one_off),
            "n": self.n,
            **({"levels": list(self.levels), "share_high": self.share_high} if self.levels else {}),
            **({"wander": self.wander} if self.wander is not None else {}),
            **({"median_ci": [self.median_ci[0], self.median_ci[1]]} if self.median_ci is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WarmupAnalysis:
        """Inverse of :meth:`to_dict`; raises InputError for a dict that is not one."""
        try:
            ci = data.get("ci")
            start = data.get("steady_start")
            mean = data.get("steady_mean")
            median = data.get("steady_median")
            return cls(
                classification=str(data["classification"]),
                steady_start=None if start is None else int(start),
                steady_mean=None if mean is None else float(mean),
                steady_median=None if median is None else float(median),
                ci=None if ci is None else (float(ci[0]), float(ci[1])),
                changepoints=tuple(int(c) for c in data.get("changepoints", ())),
                outliers=tuple(int(c) for c in data.get("outliers", ())),
                n=int(data["n"]),
                one_off=tuple(int(c) for c in data.get("one_off", ())),
                levels=tuple(float(v) for v in data.get("levels") or ()),
                share_high=None if data.get("share_high") is None else float(data["share_high"]),
                wander=None if data.get("wander") is None else float(data["wander"]),
                median_ci=None if data.get("median_ci") is None else (float(data["median_ci"][0]),
                                                                      float(data["median_ci"][1])),
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise InputError(f"not a stored warmup analysis (missing or bad field: {exc})") from exc


@dataclass(frozen=True)
class _Segment:
    start: int
    end: int
    mean: float

    @property
    def length(self) -> int:
        return self.end - self.start


#: A run of segments off the level, between the tail and an earlier stretch at the tail's level at least as long as
#: the run, is a burst (a neighbour, an interrupt storm), not a level change, when it lasts at most this share of the
#: tail.
TRANSIENT_SHARE = 0.25


@dataclass(frozen=True)
class _Tail:
    """Where the steady tail starts, the mean of its segments at its level, and the bursts absorbed into it."""

    start: int
    level: float
    bursts: tuple[tuple[int, int], ...]


def _burst_before(segs: list[_Segment], i: int, at_level: Callable[[_Segment], bool], level: float,
                  max_transient: int, limit: float) -> int | None:
    """Index of the last segment at the level before a burst that ends with ``segs[i]``; None: a level change.

    The burst runs back over segments off the level to a stretch at the level at least as long as
    the burst so far (a shorter stretch is a lull within the burst, and part of it). One of at most
    ``max_transient`` values needs only some level before it, either way; a longer one must be
    slower than ``level`` throughout (a neighbour only ever slows a process down: a faster
    stretch is another mode of the machine) and last at most ``limit`` values.
    """
    pos, burst, slower = i, 0, True
    while True:
        while pos >= 0 and not at_level(segs[pos]):
            burst += segs[pos].length
            slower = slower and segs[pos].mean > level
            pos -= 1
        if pos < 0 or (burst > max_transient and (not slower or burst > limit)):
            return None
        top, stretch = pos, 0
        while pos >= 0 and at_level(segs[pos]):
            stretch += segs[pos].length
            pos -= 1
        if stretch >= burst or burst <= max_transient:
            return top
        burst += stretch


def _walk_back(segs: list[_Segment], same: Equivalence, max_transient: int) -> _Tail:
    """Start of the steady tail: merge earlier segments into the final one while equivalent.

    A run of segments that are not equivalent but sit between the tail and an earlier stretch of
    equivalent segments is a transient (a burst of slow iterations longer than a spike) and is
    absorbed (:func:`_burst_before`) when it lasts at most ``max_transient`` values, or when the
    stretch before it is at least as long as it and it is at most :data:`TRANSIENT_SHARE` of the
    tail after it. Why not a fixed number of values: a burst has a duration in seconds, so its
    length in values grows as the iterations get shorter (a 50 ms neighbour is 100 values of
    0.5 ms), while a level held before it for as long as it lasted, and after it for four times as
    long, says that the level never changed. A long excursion (a level A, then B for longer than A
    lasted, or for more than a quarter of what follows, then A again) is a level change, and the
    tail starts after it.

    The tail's level, which each earlier segment is compared with, is the mean of its equivalent
    segments only: a burst absorbed is part of the tail but not of its level (two bursts of 1.3x
    would otherwise lift the level by a few percent and part it from the stretch before them).
    """
    tail_start = segs[-1].start
    level_sum = segs[-1].mean * segs[-1].length
    level_len = segs[-1].length
    tail_len = level_len
    bursts: list[tuple[int, int]] = []
    i = len(segs) - 2
    while i >= 0:
        level_mean = level_sum / level_len

        def at_level(s: _Segment, mean: float = level_mean, n: int = level_len) -> bool:
            return same(s.mean, s.length, mean, n)

        if at_level(segs[i]):
            s = segs[i]
            tail_start, level_sum, level_len = s.start, level_sum + s.mean * s.length, level_len + s.length
            tail_len += s.length
            i -= 1
            continue
        top = _burst_before(segs, i, at_level, level_mean, max_transient, TRANSIENT_SHARE * tail_len)
        if top is None:
            break
        bursts.append((segs[top + 1].start, segs[i].end))
        tail_len += segs[i].end - segs[top + 1].start
        i = top  # the stretch at the level before the burst is merged next
    return _Tail(tail_start, level_sum / level_len, tuple(reversed(bursts)))


def _merge_earlier(segs: list[_Segment], tail_start: int, same: Equivalence) -> list[_Segment]:
    """The segments before the tail, neighbours that are equivalent merged (left to right)."""
    out: list[_Segment] = []
    for s in segs:
        if s.start >= tail_start:
            break
        if out and same(s.mean, s.length, out[-1].mean, out[-1].length):
            cur = out[-1]
            total = cur.length + s.length
            out[-1] = _Segment(cur.start, s.end, (cur.mean * cur.length + s.mean * s.length) / total)
        else:
            out.append(s)
    return out


def _staircase(earlier: list[_Segment], tail_mean: float, transient: int) -> int:
    """+1 / -1 when the last two level changes up to the tail go the same way, else 0.

    Segments of at most ``transient`` values (transitions between two levels) do not count.
    """
    steps = [s for s in earlier if s.length > transient]
    if len(steps) < 2:
        return 0
    a, b = steps[-2].mean, steps[-1].mean
    if b > a and tail_mean > b:
        return 1
    if b < a and tail_mean < b:
        return -1
    return 0


def _start_after_drift(
    y: np.ndarray, tail_start: int, min_len: int, tau: float, rel_tolerance: float, stairs: int
) -> int | None:
    """Where the steady state starts given a possible trend in the tail (None: it never settles).

    A piecewise-constant model cuts a drift into small steps that may each be within tolerance,
    so the tail is tested for a linear trend::

        d = sign of the tail's trend if significant (|t| > _TREND_T, change > rel_tolerance),
            or the staircase direction of the preceding changes if the tail trends that way
            (one-sided t > _TREND_T_END)
        no trend: the tail starts where the segments say
        the last min_len values still trend in direction d (one-sided): no steady state
        otherwise the trend is confined to the tail's beginning (the end of a decay): start at
            the first of 16 later candidates from which the rest does not trend in direction d
    """
    n = y.size
    if n - tail_start < min_len:
        return None
    rel_all, t_all = trend(y[tail_start:], tau)
    direction = 0
    if abs(rel_all) > rel_tolerance and abs(t_all) > _TREND_T:
        direction = 1 if rel_all > 0 else -1
    elif stairs and rel_all * stairs > rel_tolerance and t_all * stairs > _TREND_T_END:
        direction = stairs
    if direction == 0:
        return tail_start

    def trending(seg: np.ndarray) -> bool:
        rel, tstat = trend(seg, tau)
        return rel * direction > rel_tolerance and tstat * direction > _TREND_T_END

    if trending(y[n - min_len :]):
        return None
    span = n - min_len - tail_start
    for k in range(1, _TREND_STEPS + 1):
        cand = tail_start + (span * k) // _TREND_STEPS
        if not trending(y[cand:]):
            return cand
    return None


def _leading_warmup(x: np.ndarray, spikes: np.ndarray) -> int:
    """Length of a run of leading spikes that is warmup (a compile, a first call), else 0.

    The leading run is warmup when it is above everything after it. If the rest has spikes of
    its own (periodic slow iterations, GC pauses), it must also stand out from those by as much
    as they stand out from the median: otherwise it is just the first of them.
    """
    n = x.size
    if n < 2 or not spikes[0]:
        return 0
    level = float(np.median(x))
    lead = 0
    while lead < n and spikes[lead] and x[lead] > level:  # slow leading spikes only
        lead += 1
    if lead == 0 or lead >= n:
        return 0
    rest = x[lead:]
    top = float(rest.max())
    if spikes[lead:].any():
        top += top - float(np.median(rest))
    return lead if float(x[:lead].min()) > top else 0


def _quantum(y: np.ndarray) -> float:
    """Timer resolution of quantised timings (smallest step between distinct values), else 0.

    Rounded timings have runs of identical values whose sample variance is 0; the Gaussian
    cost would pay any penalty to cut them out. Flooring the variance at the rounding
    variance (quantum^2 / 12) removes that artefact.
    """
    u = np.unique(y)
    if u.size < 2 or u.size > y.size // 2:
        return 0.0
    return float(np.diff(u).min())


def _short_head(y: np.ndarray, start: int, min_len: int, tol: float) -> int:
    """Where a short series' tail begins once its leading values off the level are dropped: ``start`` moved past
    each leading value further from the level (the median of the tail's later three quarters) than ``tol`` and
    three robust sigmas of those values, while ``min_len`` values remain.

    Why: on 16-29 values the changepoint search (segments of two or more) does not cut a transient of a few values,
    and the practical test's window medians are made to shrug them off: a slowdown whose first three of 20 values
    read 1.50, 0.69 and 0.80 of the level was called flat from the first value."""
    n = y.size
    rest = y[start + (n - start) // 4:]
    level = float(np.median(rest))
    allow = max(tol * abs(level), 3.0 * robust_sigma(rest - level, level))
    i = start
    while n - (i + 1) >= min_len and abs(float(y[i]) - level) > allow:
        i += 1
    return i


def _short_end_moved(x: np.ndarray, y: np.ndarray, start: int, tol: float) -> bool:
    """Whether a short series' last values (the median of its last eighth as measured, ``x``, two values at least)
    sit off the level of its tail before them (``y``, slow spikes replaced) by more than ``tol`` and three robust
    sigmas of that tail: a level that moved at the end has not been seen to last (a late drift's last three of 16
    values at +7%, +12% and +15% were called flat). The raw values, since a spike test cannot tell the last value of
    a move from a stall; the median, so that one slow value alone is not a move."""
    n = y.size
    k = max(2, math.ceil(n / 8))
    body = y[start:n - k]
    if body.size < 4:
        return False
    level = float(np.median(body))
    allow = max(tol * abs(level), 3.0 * robust_sigma(body - level, level))
    return abs(float(np.median(x[n - k:])) - level) > allow


def _no_steady(n: int, changepoints: Sequence[int], outliers: Sequence[int] | np.ndarray,
               one_off: Sequence[int] | np.ndarray = ()) -> WarmupAnalysis:
    return WarmupAnalysis(
        classification="no_steady_state",
        steady_start=None,
        steady_mean=None,
        steady_median=None,
        ci=None,
        changepoints=tuple(int(c) for c in changepoints),
        outliers=tuple(int(o) for o in outliers),
        n=n,
        one_off=tuple(int(o) for o in one_off),
    )


def _wanders(tail: np.ndarray, tol: float, sigma_lr: float) -> bool:
    """Does the tail's level wander beyond the tolerance? Quarter medians against the tail's median.

    ``|median(quarter_i) - median(tail)| > max(tol * median(tail), Z * 1.2533 * sigma_lr / sqrt(len_i))``
    for some quarter: more than the margin, and more than the noise lets a median of that many
    values move (1.2533: the median's standard error in units of the mean's). ``sigma`` is the
    local noise (robust scale around the rolling median, times the AR(1) long-run factor), so
    a tail cut by stalls (a neighbour holding a core for seconds) is not excused as noise.
    """
    if tail.size < 2 * _PRACTICAL_WINDOWS:
        return False
    big = float(np.median(tail))
    z_med = Equivalence.Z * 1.2533 * sigma_lr
    return any(
        abs(float(np.median(p)) - big) > max(tol * abs(big), z_med / math.sqrt(p.size))
        for p in np.array_split(tail, _PRACTICAL_WINDOWS)
    )


def _practical_start(
    y: np.ndarray, cands: Sequence[int], min_len: int, tol: float, sigma: float, tau: float,
    same: Equivalence,
) -> int | None:
    """Earliest start whose tail holds one level at the practical-equivalence tolerance, else None.

    The changepoint search cuts a real machine's few-percent level shifts (a neighbour, the
    clock governor) into segments; when they are not equivalent the walk back stops early and
    the tail is too short to claim. What matters to a comparison at a margin is whether the
    tail's level moves by more than the tolerance, so this test looks at the tail as a whole::

        for s in candidate starts (0, the changepoints, 1/16 steps of n), earliest first,
                with n - s >= min_len:
            tail = y[s:]; M = median(tail); m_i = medians of 4 consecutive windows of tail
            allow_i = max(tol * M, Z * 1.2533 * sigma / sqrt(len_i))   # margin, or local noise
            steady if every |m_i - M| <= allow_i (not _wanders) and the tail has no trend beyond tol
                (|relative change| > tol with |t| > _TREND_T), and the final segment (from
                the last changepoint) is equivalent to M: a level that moved at the very end
                has not been seen to last, and Barrett et al. call that no steady state
            then skip leading segments of the tail whose median is outside M +- allow
                (a warmup too short to move the first window's median) -> start

    Window medians, not means: a short burst (a spike run, a 100 ms neighbour) must not move
    a window; 4 windows: the two halves of the tail and their halves.
    """
    n = y.size
    last = cands[-1] if len(cands) else 0
    final_mean = float(y[last:].mean())
    grid = [n * j // 16 for j in range(16)]
    starts = sorted({0, *cands, *grid})
    z_med = Equivalence.Z * 1.2533 * sigma
    for s in starts:
        if n - s < min_len:
            break
        tail = y[s:]
        if _wanders(tail, tol, sigma):
            continue
        rel, tstat = trend(tail, tau)
        if abs(rel) > tol and abs(tstat) > _TREND_T:
            continue
        if last > s and not same(final_mean, n - last, float(tail.mean()), n - s):
            return None
        big = float(np.median(tail))
        allow = max(tol * abs(big), z_med / math.sqrt(max(-(-(n - s) // _PRACTICAL_WINDOWS), 1)))
        limit = s + (n - s) // _PRACTICAL_WINDOWS
        start = s
        for c in sorted(c for c in cands if s < c <= limit):
            if abs(float(np.median(y[start:c])) - big) > allow:
                start = c
            else:
                break
        return start
    return None


#: Blocks a wandering tail is judged in, and its CI computed over (batch means).
WANDER_BLOCKS = 8
#: A level that wanders further than this from its median is not one level.
WANDER_MAX = 0.10
#: |Spearman rho| of the block medians against their order from which a tail is a one-way drift.
DRIFT_RHO = 0.8


def _wander_start(y: np.ndarray, cands: Sequence[int], min_len: int, tol: float) -> tuple[int, float] | None:
    """Where a steady state whose level wanders begins, and how far it wanders; None when there is none.

    Why: a real machine's level wanders up and down by a few percent between segments (a neighbour, the clock
    governor, the allocator's state): medians at 0.97, 1.06, 0.99, 0.95, 1.01, 1.05 of the late level. That is
    not a warmup that never ended, and calling it `no_steady_state` dropped the transient at the start along
    with it (issue 31). A stationary wander is averaged over and put into the uncertainty (:func:`analyze`'s
    batch-means CI); a trend to the end, a one-way drift, or a late level not seen before are still not steady::

        for s in candidate starts (0, the changepoints, 1/16 steps of n), earliest first, n - s >= min_len:
            m_1..m_K = medians of K consecutive blocks of y[s:];  M = median(y[s:])
            skip s if some |m_k / M - 1| > WANDER_MAX                   (not one level at all)
            skip s if m_1, or the median of the first 1/(4K) of y[s:], is outside [min, max] of m_2..m_K by
                more than tol  (still the transient; the short head catches a decay that one block's median
                hides once the halves no longer have to agree within tol)
            skip s if the medians of the halves' block medians differ by more than
                max(tol, half the larger range of the block medians within a half)
                (long regimes, or a transient still in the first half: a later start may be one level;
                halves whose difference is no larger than the wander inside each are one wandering level)
            none if m_K is outside [min, max] of the first half's m by more than
                max(tol, the range of the first half's m)
                (a level the tail's first half never visited: a late regime; a wander comes back, and a last
                block no further out than the first half's own wander is that wander, not a new level)
            none if |Spearman rho(m, order)| >= DRIFT_RHO and |m_K / m_1 - 1| > tol  (a one-way drift)
            steady from s; wander = max |m_k / M - 1|
    """
    n = y.size
    grid = [n * j // 16 for j in range(16)]
    for s in sorted({0, *cands, *grid}):
        if n - s < max(min_len, 4 * WANDER_BLOCKS):
            break
        tail = y[s:]
        big = float(np.median(tail))
        if big <= 0:
            return None
        meds = np.array([float(np.median(b)) for b in np.array_split(tail, WANDER_BLOCKS)])
        dev = meds / big - 1.0
        if float(np.max(np.abs(dev))) > WANDER_MAX:
            continue
        later, first_half = meds[1:], meds[: WANDER_BLOCKS // 2]
        head = float(np.median(tail[: max(1, tail.size // (4 * WANDER_BLOCKS))]))
        if any(m > later.max() * (1 + tol) or m < later.min() * (1 - tol) for m in (meds[0], head)):
            continue
        second_half = meds[WANDER_BLOCKS // 2:]
        within = max(float(np.ptp(first_half)), float(np.ptp(second_half))) / big / 2
        if abs(float(np.median(first_half)) / float(np.median(second_half)) - 1.0) > max(tol, within):
            continue  # the halves sit at different levels: a few long regimes, not a wander around one level
        reach = max(tol, float(np.ptp(first_half)) / big)
        if meds[-1] > first_half.max() * (1 + reach) or meds[-1] < first_half.min() * (1 - reach):
            return None  # the last level was not seen in the tail's first half: a regime, not a wander
        order = np.argsort(np.argsort(meds))
        rho = float(np.corrcoef(order, np.arange(meds.size))[0, 1]) if np.ptp(meds) > 0 else 0.0
        if abs(rho) >= DRIFT_RHO and abs(meds[-1] / meds[0] - 1.0) > tol:
            return None
        return s, float(np.max(np.abs(dev)))
    return None


def _median_ci(steady: np.ndarray, *, with_ci: bool, confidence: float) -> tuple[float, float] | None:
    """The steady median's 95% CI from batch medians; None when no CI was asked for, at another confidence, or for
    too few values to batch."""
    if not with_ci or confidence != 0.95 or steady.size < 2 * BATCHES:
        return None
    return batch_statistics_ci(steady, statistic="median")


def _residuals(z: np.ndarray, cps: Sequence[int]) -> np.ndarray:
    out = z.copy()
    bounds = [0, *cps, z.size]
    for a, b in itertools.pairwise(bounds):
        out[a:b] -= out[a:b].mean()
    return out


def analyze(
    values: Sequence[float] | np.ndarray,
    *,
    rel_tolerance: float = DEFAULT_MARGIN,
    margin: float | None = None,
    penalty: float | None = None,
    min_steady: int = 30,
    end_fraction: float = 0.25,
    confidence: float = 0.95,
    n_boot: int = 1000,
    with_ci: bool = True,
    seed: int = 0,
    max_grid: int = 300,
) -> WarmupAnalysis:
    """Offline warmup analysis of a timing series (seconds per iteration, in order).

    Pseudo-code::

        tol    = margin if given, else rel_tolerance
        spikes = find_spikes(x) (none if more than 10% qualify: that is a bimodal distribution)
        one_off = spikes >= 20x the local level, if there are at most 3 of them
        y      = x with spikes replaced by the rolling median
        z      = (y - median) / sigma                 # scale-free
        phi    = AR(1) coefficient from the differences of y;  tau = (1+phi)/(1-phi)
        cps    = pelt(z, penalty = 3 log n * tau, variance floor = max(1e-6, rounding variance))
                 on a grid of <= max_grid points, then placed exactly within one grid step
        walk back from the final segment, merging each earlier segment whose mean is within
            max(rel_tolerance * mean, 3 * long-run SE of the difference) of the merged tail;
            a run of non-equivalent segments between equivalent ones is a transient, merged too, when it is at
            most max(5, n / 200) values, or slower than the level, after a stretch at the level at least as
            long, and at most TRANSIENT_SHARE of the tail after it (a neighbour's burst: :func:`_walk_back`)
        tail shorter than max(min_steady, end_fraction * n), or still trending at its end
            (drift): the practical test (_practical_start): the earliest start whose tail's
            quarter medians stay within tol of its median, without a trend beyond tol and
            without a final segment that moved away -> steady from there; none -> no_steady_state
        trend confined to the tail's beginning (end of a decay)   -> start later
        leading spikes far above everything after them (a compile) -> start after them;
            one-off spikes at the head of the tail -> start after them
        classify: start 0 -> flat; an earlier (merged) segment faster than the steady mean
            beyond tolerance -> slowdown; otherwise warmup
        a short series (SHORT_MIN <= n < SHORT_UNDER * min_steady):
            min_steady = max(SHORT_TAIL_MIN, SHORT_TAIL * n); slow spikes against the series' median, none
            in its first quarter; no mixture; after the start is found:
            a last eighth off the level -> no_steady_state (_short_end_moved); leading values off the level are
            dropped (_short_head), and the head decides warmup or slowdown; fewer than SHORT_MIN -> no_steady_state
        (first of all: a stationary mixture of two alternating levels, :mod:`.mixture`, is analysed
            by its block means, and its steady mean and CI are the mixture's: :func:`_analyze_mixture`)
        steady mean / median / CI from the raw values from the start on, recurring spikes
            included (they are part of what an iteration costs), one-off spikes left out
            (CI: circular block bootstrap, block length from the autocorrelation of the
            spike-free values)

    ``margin`` is the practical-equivalence margin of the final comparison (the showdown's
    ``equivalence_margin``; default :data:`DEFAULT_MARGIN` = 0.02 through ``rel_tolerance``):
    pass it and ``rel_tolerance`` is ignored.

    ``penalty`` overrides the automatic penalty (in units of the standardised cost); the
    reported ``changepoints`` are the boundaries after merging equivalent neighbours.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    n = int(x.size)
    check_finite(x)
    if not 0.0 < end_fraction < 1.0:
        raise ValueError("end_fraction must be in (0, 1)")
    if margin is not None:
        if not margin > 0.0:
            raise ValueError("margin must be > 0")
        rel_tolerance = float(margin)
    if rel_tolerance < 0.0:
        raise ValueError("rel_tolerance must be >= 0")
    if max_grid < 10:
        raise ValueError("max_grid must be at least 10")
    min_steady = max(int(min_steady), 3)
    short = n < SHORT_UNDER * min_steady
    if short:
        if n < SHORT_MIN:
            return _no_steady(n, (), ())
        # a short series (a budget that ended a measurement of slow calls, or of passes over a traffic's batches):
        # the same tests, on a tail of at least half of it
        min_steady = max(SHORT_TAIL_MIN, math.ceil(SHORT_TAIL * n))
    mixture = None if short else find_mixture(x)  # (alternating levels need more than a few values to show)
    if mixture is not None:
        mixed = _analyze_mixture(x, mixture, rel_tolerance=rel_tolerance, min_steady=min_steady,
                                 end_fraction=end_fraction, confidence=confidence, n_boot=n_boot,
                                 with_ci=with_ci, seed=seed)
        if mixed is not None:
            return mixed

    if short:
        # barely a rolling window long, its ends would all look like spikes against a rolling median (a drift's last
        # value was one): single slow values against the series' median, past the head (:func:`_short_head`'s)
        med_local = np.full(n, float(np.median(x)))
        spikes = spike_mask(x, med_local, SPIKE_THRESHOLD, 1) & (x > med_local)
        spikes[: n // 4] = False
    else:
        med_local = rolling_median(x, SPIKE_WINDOW)
        spikes = spike_mask(x, med_local, SPIKE_THRESHOLD, SPIKE_MAX_RUN)
    if spikes.mean() > SPIKE_MAX_SHARE:  # that many are not outliers but part of the distribution
        spikes[:] = False
    spike_idx = np.flatnonzero(spikes)
    one_off = one_off_spikes(x, med_local, spikes)
    one_off_idx = np.flatnonzero(one_off)
    y = np.where(spikes, med_local, x)
    center = float(np.median(y))
    sigma = robust_sigma(y - med_local, center)
    z = (y - center) / sigma
    var_floor = max(1e-6, (_quantum(y) / sigma) ** 2 / 12.0)

    phi = estimate_phi(y)
    tau = (1.0 + phi) / (1.0 - phi)
    pen = 3.0 * math.log(n) * tau if penalty is None else float(penalty)
    jump = max(1, math.ceil(n / max_grid))
    cps = pelt(z, penalty=pen, min_size=2, jump=jump, var_floor=var_floor)
    cps = refine(z, cps, jump=jump, penalty=pen, min_size=2, var_floor=var_floor)
    sigma_lr = float(np.std(_residuals(z, cps))) * sigma * math.sqrt(tau)
    same = Equivalence(rel_tolerance, sigma_lr)

    bounds = [0, *cps, n]
    segs = [_Segment(a, b, float(y[a:b].mean())) for a, b in itertools.pairwise(bounds)]
    max_transient = max(5, n // 200)
    tail = _walk_back(segs, same, max_transient)
    tail_start = tail.start
    y_level = y.copy() if tail.bursts else y  # the bursts the tail absorbed at its level: no trend, no wander
    for a, b in tail.bursts:
        y_level[a:b] = tail.level
    earlier = _merge_earlier(segs, tail_start, same)
    changepoints = [s.start for s in earlier[1:]] + ([tail_start] if tail_start > 0 else [])

    min_len = max(min_steady, math.ceil(end_fraction * n))
    stairs = _staircase(earlier, float(y_level[tail_start:].mean()), max_transient)
    start = _start_after_drift(y_level, tail_start, min_len, tau, rel_tolerance, stairs)
    sigma_local = sigma * math.sqrt(tau)  # local (rolling-median) noise: a stall of seconds is not noise
    if start is not None and _wanders(y_level[start:], rel_tolerance, sigma_local):
        start = None  # segments within noise of each other, but the tail's level wanders beyond the margin
    practical = False
    wander: float | None = None
    if start is None:
        start = _practical_start(y, cps, min_len, rel_tolerance, sigma_local, tau, same)
        if start is None:
            wandering = _wander_start(y, cps, min_len, rel_tolerance)
            if wandering is None:
                return _no_steady(n, changepoints, spike_idx, one_off_idx)
            start, wander = wandering
        practical = True
        changepoints = [c for c in changepoints if c < start]
        if start > 0 and (not changepoints or changepoints[-1] != start):
            changepoints.append(start)
    if short:
        if _short_end_moved(x, y, start, rel_tolerance):
            return _no_steady(n, changepoints, spike_idx, one_off_idx)
        trimmed = _short_head(y, start, min_len, rel_tolerance)
        if trimmed > start:
            changepoints = [c for c in changepoints if c < trimmed] + [trimmed]
        # its head is too few values for segments of their own: slower or faster than the level decides
        start, practical = trimmed, True
    if start == 0:
        start = _leading_warmup(x, spikes)
    while start < n - 1 and one_off[start]:  # a one-off at the head of the tail (a first call) is warmup
        start += 1

    keep = ~one_off[start:]
    steady = x[start:][keep]
    level = float(y_level[start:].mean())  # spike- and burst-free, comparable with the segment means
    if start == 0:
        cls = "flat"
    elif practical:
        head = float(np.median(y[:start]))
        cls = "slowdown" if head < level * (1.0 - rel_tolerance) else "warmup"
    elif any(
        s.mean < level and not same(s.mean, s.length, level, steady.size)
        for s in earlier
        if s.length > max_transient
    ):
        cls = "slowdown"
    else:
        cls = "warmup"
    ci: tuple[float, float] | None = None
    if with_ci and wander is not None and steady.size >= 2 * WANDER_BLOCKS and confidence == 0.95:
        ci = batch_statistics_ci(steady, statistic="mean", batches=WANDER_BLOCKS)
    elif with_ci:
        block = choose_block_length(y[start:])
        ci = block_bootstrap_ci(steady, confidence=confidence, n_boot=n_boot, block=block, seed=seed)
    return WarmupAnalysis(
        classification=cls,
        steady_start=int(start),
        steady_mean=float(steady.mean()),
        steady_median=float(np.median(steady)),
        ci=ci,
        changepoints=tuple(changepoints),
        outliers=tuple(int(o) for o in spike_idx),
        n=n,
        one_off=tuple(int(o) for o in one_off_idx),
        wander=wander,
        median_ci=_median_ci(steady, with_ci=with_ci, confidence=confidence),
    )


def _analyze_mixture(x: np.ndarray, mixture: Mixture, *, rel_tolerance: float, min_steady: int,
                     end_fraction: float, confidence: float, n_boot: int, with_ci: bool, seed: int
                     ) -> WarmupAnalysis | None:
    """:func:`analyze` of a two-level mixture by its block means (pseudo-code in :mod:`.mixture`).

    None when the series is too short for enough blocks: the ordinary analysis then decides.
    """
    b = mixture.block
    m = x.size // b
    steady_blocks = max(8, math.ceil(min_steady / b))
    if m < max(steady_blocks, 16):
        return None
    blocks = x[: m * b].reshape(m, b).mean(axis=1)
    a = analyze(blocks, rel_tolerance=rel_tolerance, min_steady=steady_blocks, end_fraction=end_fraction,
                with_ci=False, seed=seed)
    changepoints = tuple(int(c) * b for c in a.changepoints)
    levels = (mixture.low, mixture.high)
    if a.steady_start is None:
        return WarmupAnalysis(classification="no_steady_state", steady_start=None, steady_mean=None,
                              steady_median=None, ci=None, changepoints=changepoints, outliers=(), n=int(x.size),
                              levels=levels, share_high=mixture.share_high)
    start = int(a.steady_start) * b
    steady = x[start:]
    ci: tuple[float, float] | None = None
    if with_ci:
        block = min(max(b, choose_block_length(steady)), max(steady.size // 2, 1))
        ci = block_bootstrap_ci(steady, confidence=confidence, n_boot=n_boot, block=block, seed=seed)
    return WarmupAnalysis(classification=a.classification, steady_start=start, steady_mean=float(steady.mean()),
                          steady_median=float(np.median(steady)), ci=ci, changepoints=changepoints, outliers=(),
                          n=int(x.size), levels=levels, share_high=mixture.share_high,
                          median_ci=_median_ci(steady, with_ci=with_ci, confidence=confidence))
