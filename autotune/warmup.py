"""When does a benchmark reach its steady state? Offline changepoint analysis and an online detector.

A fixed warmup count ("discard 10, average 100") is wrong in both directions: a compiled GPU
kernel is steady after one call, a JIT or allocator can take hundreds of iterations, and some
programs never settle. Following Barrett et al., "Virtual Machine Warmup Blows Hot and Cold"
(OOPSLA 2017), the series is cut into segments of constant behaviour by a changepoint search,
segments that differ by less than a tolerance are treated as the same, and the trace is
classified by how its final segment relates to the ones before it:

* ``flat``: one behaviour from the first iteration on;
* ``warmup``: the final segment is the fastest (earlier iterations were slower);
* ``slowdown``: some earlier segment was faster than the final one;
* ``no_steady_state``: the last change is too close to the end (or the final segment drifts),
  so no steady level can be claimed.

Departures from the paper, and why:

* Tolerances are *relative* (plus a noise-aware term): GPU iterations of 50 us and CPU
  iterations of 2 s must be judged alike, which an absolute tolerance cannot do. The tolerance
  is the final comparison's practical-equivalence margin (``margin=``): levels closer than the
  margin are one steady state to a comparison that calls such candidates a tie, so a real
  machine's few-percent level shifts do not make "no steady state"; a drift counts when it
  exceeds the margin. When the changepoints leave too short a tail, the tail is also accepted
  when the medians of its quarters stay within the margin (:func:`_practical_start`).
* Isolated spikes (a recompile, a GC pause, a periodic slow iteration) are found first with a
  rolling median and replaced by the local level before segmentation, so they neither become
  segments nor inflate a segment's variance. Recurring ones stay in the steady mean: they are
  part of what running the model costs. One-off extreme ones (>= 20x the local level, at most
  3: a compile, a recompile) are counted in ``one_off`` and left out of it; at the head of the
  steady tail (a first call) they are warmup.
* The penalty of the changepoint search is scaled by the long-run variance factor of the noise
  ((1+phi)/(1-phi) for AR(1) noise), estimated from the data: timing noise is autocorrelated,
  and an i.i.d. likelihood would otherwise cut every slow wander into a segment.
* The final segment is also tested for a linear trend (drift), which a piecewise-constant model
  chops into many small steps that are each within tolerance.

numpy only, no scipy: the timing loop imports this module.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.errors import InputError
from autotune.stats import block_bootstrap_ci, choose_block_length, lag1_autocorrelation, normal_quantile

__all__ = [
    "CLASSIFICATIONS",
    "DEFAULT_MARGIN",
    "OnlineDetector",
    "WarmupAnalysis",
    "analyze",
    "find_spikes",
    "pelt",
    "replay",
]

CLASSIFICATIONS = ("flat", "warmup", "slowdown", "no_steady_state")

_SPIKE_WINDOW = 15  # rolling-median window of the spike finder
_SPIKE_THRESHOLD = 6.0  # robust sigmas from the local level
_SPIKE_MAX_RUN = 3  # longer runs are level changes, not spikes
_SPIKE_MAX_SHARE = 0.1  # more "spikes" than this: a bimodal distribution, not outliers
_PHI_MAX = 0.9  # cap of the AR(1) estimate (long-run factor <= 19)

#: Default practical-equivalence margin: the showdown's default ``equivalence_margin`` (2%).
#: Levels closer than this are one steady state; pass ``margin=`` to use another.
DEFAULT_MARGIN = 0.02

_EXTREME = 20.0  # a spike this many times the local level is an event (compile), not noise
_ONE_OFF_MAX = 3  # more extreme spikes than this recur: they stay in the steady mean
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

    def __post_init__(self) -> None:
        if self.classification not in CLASSIFICATIONS:
            raise ValueError(f"classification must be one of {CLASSIFICATIONS}, got {self.classification!r}")

    @property
    def steady(self) -> bool:
        return self.steady_start is not None

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
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise InputError(f"not a stored warmup analysis (missing or bad field: {exc})") from exc


# ---------------------------------------------------------------------------------------------
# PELT
# ---------------------------------------------------------------------------------------------


def _check_finite(x: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise InputError(f"timing at index {int(bad[0])} is {x[bad[0]]!r}; timings must be finite numbers")


def pelt(
    values: Sequence[float] | np.ndarray,
    *,
    penalty: float | None = None,
    min_size: int = 2,
    jump: int = 1,
    var_floor: float = 1e-6,
) -> list[int]:
    """Exact penalised changepoint search (PELT, Killick et al. 2012), Gaussian mean+variance cost.

    Minimises ``sum over segments of [ m * log(var + var_floor) ] + penalty * (#segments)``
    where ``m`` is the segment length and ``var`` its (population) variance: the "normal"
    cost of ``ruptures``, including its ``1e-6`` floor. The result equals
    ``ruptures.Pelt(model="normal", min_size=min_size, jump=jump).fit(x).predict(pen=penalty)``
    without the final ``n``: the returned indices are where new segments start, excluding 0
    and ``len(values)``. Note the floor is absolute: scale the series (``analyze`` standardises
    it) so that real variances are far above it.

    ``penalty`` defaults to BIC, ``3 log n`` (mean, variance and position per change).

    Pseudo-code (F[t] = optimal cost of x[:t], candidates = admissible last changepoints)::

        F[0] = 0; candidates = {0}
        for t in grid (multiples of jump >= min_size, then n):
            cost_s = F[s] + C(x[s:t]) for s in candidates     # one vectorised expression
            F[t]   = min cost_s + penalty;  last[t] = argmin
            candidates = {s : cost_s <= F[t]}                  # pruning, exact since K = 0
            add the next grid point t' with t' <= next_t - min_size
        backtrack last[] from n

    C(x[s:t]) comes from cumulative sums of x and x^2 in O(1) per candidate. The candidate set
    is kept in parallel arrays so each step is a handful of numpy calls.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    n = x.size
    if min_size < 1 or jump < 1:
        raise ValueError("min_size and jump must be at least 1")
    _check_finite(x)
    if n < 2 * max(min_size, 1) or n < min_size + jump:
        return []
    pen = 3.0 * math.log(n) if penalty is None else float(penalty)
    c = x - float(np.median(x))  # centring keeps the cumulative sums well conditioned
    s1 = np.concatenate(([0.0], np.cumsum(c)))
    s2 = np.concatenate(([0.0], np.cumsum(c * c)))
    grid = [k for k in range(0, n, jump) if k >= min_size]
    grid.append(n)
    F = np.full(n + 1, np.inf)
    F[0] = 0.0
    last = np.zeros(n + 1, dtype=np.intp)
    cap = len(grid) + 2
    c_idx = np.zeros(cap, dtype=np.intp)
    c_pos = np.zeros(cap)
    c_s1 = np.zeros(cap)
    c_s2 = np.zeros(cap)
    c_f = np.zeros(cap)
    w_m = np.empty(cap)
    w_a = np.empty(cap)
    w_v = np.empty(cap)
    na = 0
    last_added = -1
    for t in grid:
        new = ((t - min_size) // jump) * jump
        if new != last_added and (new == 0 or new >= min_size):
            c_idx[na] = new
            c_pos[na] = new
            c_s1[na] = s1[new]
            c_s2[na] = s2[new]
            c_f[na] = F[new]
            na += 1
            last_added = new
        if na == 0:
            continue
        m = w_m[:na]
        a = w_a[:na]
        v = w_v[:na]
        np.subtract(float(t), c_pos[:na], out=m)
        np.subtract(s1[t], c_s1[:na], out=a)
        np.divide(a, m, out=a)
        np.multiply(a, a, out=a)
        np.subtract(s2[t], c_s2[:na], out=v)
        np.divide(v, m, out=v)
        np.subtract(v, a, out=v)
        # E[x^2] - E[x]^2 from cumulative sums can come out a hair below 0 (cancellation); a NaN
        # from its log would win argmin
        np.maximum(v, 1e-300 if var_floor <= 0.0 else 0.0, out=v)
        v += var_floor
        np.log(v, out=v)
        np.multiply(v, m, out=v)
        np.add(v, c_f[:na], out=v)
        k = int(np.argmin(v))
        best = float(v[k])
        F[t] = best + pen
        last[t] = c_idx[k]
        keep = v <= best + pen
        kept = int(np.count_nonzero(keep))
        if kept != na:
            for arr in (c_idx, c_pos, c_s1, c_s2, c_f):
                arr[:kept] = arr[:na][keep]
            na = kept
    out: list[int] = []
    t = n
    while t > 0:
        s = int(last[t])
        if s > 0:
            out.append(s)
        t = s
    out.reverse()
    return out


def _refine(z: np.ndarray, cps: list[int], *, jump: int, penalty: float, min_size: int, var_floor: float) -> list[int]:
    """Exact placement of changepoints found on a ``jump`` grid.

    The grid search can only cut at multiples of ``jump``; a change between two grid points
    comes out as one cut a few values off, or as two cuts around a short mixed segment. Here
    the same penalised cost is minimised exactly over cuts within one grid step of the grid
    changepoints (any subset of them, so cuts may also merge or vanish), cluster by cluster
    (grid cuts closer than two steps form a cluster), between the neighbouring clusters'
    grid cuts as fixed ends::

        P = {left} + {c - jump + 1 .. c + jump - 1 : c in cluster} + {right}
        F[p] = min over q in P, q <= p - min_size of F[q] + C(z[q:p]) + penalty
    """
    if jump <= 1 or not cps:
        return cps
    n = z.size
    s1 = np.concatenate(([0.0], np.cumsum(z)))
    s2 = np.concatenate(([0.0], np.cumsum(z * z)))
    clusters: list[list[int]] = [[cps[0]]]
    for c in cps[1:]:
        if c - clusters[-1][-1] <= 2 * jump:
            clusters[-1].append(c)
        else:
            clusters.append([c])
    out: list[int] = []
    for i, cluster in enumerate(clusters):
        left = clusters[i - 1][-1] if i > 0 else 0
        right = clusters[i + 1][0] if i + 1 < len(clusters) else n
        cand: set[int] = set()
        for c in cluster:
            cand.update(range(max(left + min_size, c - jump + 1), min(right - min_size, c + jump - 1) + 1))
        pos = np.asarray([left, *sorted(cand), right], dtype=np.intp)
        F = np.full(pos.size, np.inf)
        F[0] = 0.0
        last = np.zeros(pos.size, dtype=np.intp)
        fpos = pos.astype(float)
        p1, p2 = s1[pos], s2[pos]
        for j in range(1, pos.size):
            m = fpos[j] - fpos[:j]
            mean = (p1[j] - p1[:j]) / m
            var = (p2[j] - p2[:j]) / m - mean * mean
            np.maximum(var, 0.0, out=var)
            var += var_floor
            tot = np.log(var, out=var)
            tot *= m
            tot += F[:j]
            tot[m < min_size] = np.inf
            k = int(tot.argmin())
            F[j] = tot[k] + penalty
            last[j] = k
        found: list[int] = []
        j = pos.size - 1
        while j > 0:
            j = int(last[j])
            if j > 0:
                found.append(int(pos[j]))
        out.extend(reversed(found))
    return out


# ---------------------------------------------------------------------------------------------
# Spikes
# ---------------------------------------------------------------------------------------------


def _rolling_median(x: np.ndarray, window: int) -> np.ndarray:
    """Centred rolling median; the ends are mirrored (not repeated: x[0] may be a spike)."""
    h = window // 2
    if x.size <= h:
        return np.full(x.size, float(np.median(x)))
    padded = np.pad(x, h, mode="reflect")
    view = np.lib.stride_tricks.sliding_window_view(padded, 2 * h + 1)
    return np.median(view, axis=1)


def _robust_sigma(r: np.ndarray, level: float) -> float:
    mad = float(np.median(np.abs(r - np.median(r))))
    sigma = 1.4826 * mad
    if sigma <= 0.0:  # quantised timer or constant series
        sigma = float(np.std(r))
    return max(sigma, 1e-6 * abs(level), 1e-300)


def find_spikes(
    values: Sequence[float] | np.ndarray,
    *,
    window: int = 15,
    threshold: float = 6.0,
    max_run: int = 3,
) -> np.ndarray:
    """Boolean mask of isolated spikes: short excursions far from the local level.

    Pseudo-code::

        med   = centred rolling median (window, mirrored ends)
        r     = x - med;  sigma = 1.4826 * MAD(r)
        cand  = |r| > threshold * sigma
        spike = cand, in runs of at most max_run consecutive values of the same sign

    A longer run is a level change, not a spike, and is left to the changepoint search.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    if x.size < 5:
        return np.zeros(x.size, dtype=bool)
    return _spike_mask(x, _rolling_median(x, window), threshold, max_run)


def _spike_mask(x: np.ndarray, med: np.ndarray, threshold: float, max_run: int) -> np.ndarray:
    n = x.size
    mask = np.zeros(n, dtype=bool)
    r = x - med
    sigma = _robust_sigma(r, float(np.median(x)))
    sign = np.where(r > threshold * sigma, 1, np.where(r < -threshold * sigma, -1, 0))
    if not sign.any():
        return mask
    # run-length encode the sign sequence
    change = np.flatnonzero(np.diff(sign)) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [n]))
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if sign[s] != 0 and e - s <= max_run:
            mask[s:e] = True
    return mask


# ---------------------------------------------------------------------------------------------
# Offline analysis
# ---------------------------------------------------------------------------------------------


def _estimate_phi(y: np.ndarray, window: int = 31) -> float:
    """AR(1) coefficient of the noise, insensitive to level shifts and smooth trends.

    For AR(1) noise the first differences have lag-1 autocorrelation ``-(1 - phi) / 2``, so
    ``phi = 1 + 2 * rho_d``. Differences are blind to the level; a step becomes one large
    difference, which clipping at 4 MAD neutralises, and a smooth trend (a decay, a drift)
    becomes a slowly varying mean of the differences, which a moving average removes.
    Clipped to [0, _PHI_MAX]: beyond that the long-run factor (1+phi)/(1-phi) is too sensitive
    to the estimate to be useful, and such a series is closer to a random walk than to noise.
    """
    d = np.diff(y)
    if d.size < 8:
        return 0.0
    med = float(np.median(d))
    mad = 1.4826 * float(np.median(np.abs(d - med)))
    if mad > 0:
        d = np.clip(d, med - 4.0 * mad, med + 4.0 * mad)
    c = np.concatenate(([0.0], np.cumsum(d)))
    h = window // 2
    idx = np.arange(d.size)
    lo = np.maximum(idx - h, 0)
    hi = np.minimum(idx + h + 1, d.size)
    d = d - (c[hi] - c[lo]) / (hi - lo)
    return min(max(1.0 + 2.0 * lag1_autocorrelation(d), 0.0), _PHI_MAX)


def _trend(y: np.ndarray, tau: float) -> tuple[float, float]:
    """Relative change over ``y`` predicted by a least-squares line, and its t-statistic.

    The slope's standard error uses the residual scale of the fit times ``sqrt(tau)``, the
    long-run variance factor of the noise, so the slow wandering of autocorrelated noise is
    not mistaken for drift.
    """
    m = y.size
    if m < 3:
        return 0.0, 0.0
    t = np.arange(m, dtype=float) - (m - 1) / 2.0
    sxx = float(np.dot(t, t))
    mean = float(y.mean())
    slope = float(np.dot(t, y - mean)) / sxx
    resid = y - mean - slope * t
    sigma = math.sqrt(float(np.dot(resid, resid)) / (m - 2) * tau)
    rel = slope * m / mean if mean != 0 else 0.0
    se = sigma / math.sqrt(sxx)
    if se <= 0:
        return rel, (math.copysign(math.inf, slope) if slope else 0.0)
    return rel, slope / se


@dataclass(frozen=True)
class _Segment:
    start: int
    end: int
    mean: float

    @property
    def length(self) -> int:
        return self.end - self.start


class _Equivalence:
    """Are two segment means the same level? Relative tolerance, or within noise.

    ``|a - b| <= max(rel_tolerance * |b|, Z * sigma_lr * sqrt(1/n_a + 1/n_b))`` where
    ``sigma_lr`` is the long-run (autocorrelation-inflated) noise scale: two short segments of
    very noisy data are not called different just because PELT cut between them.
    """

    Z = 3.0

    def __init__(self, rel_tolerance: float, sigma_lr: float) -> None:
        self.rel = rel_tolerance
        self.sigma_lr = sigma_lr

    def __call__(self, a_mean: float, a_len: int, b_mean: float, b_len: int) -> bool:
        noise = self.Z * self.sigma_lr * math.sqrt(1.0 / a_len + 1.0 / b_len)
        return abs(a_mean - b_mean) <= max(self.rel * abs(b_mean), noise)


def _walk_back(segs: list[_Segment], same: _Equivalence, max_transient: int) -> int:
    """Start of the steady tail: merge earlier segments into the final one while equivalent.

    A short segment that is not equivalent but sits between the tail and an equivalent
    segment is a transient (a burst of slow iterations longer than a spike) and is absorbed.
    """
    tail_start = segs[-1].start
    tail_sum = segs[-1].mean * segs[-1].length
    tail_len = segs[-1].length
    i = len(segs) - 2
    while i >= 0:
        tail_mean = tail_sum / tail_len
        s = segs[i]
        if same(s.mean, s.length, tail_mean, tail_len):
            tail_start, tail_sum, tail_len = s.start, tail_sum + s.mean * s.length, tail_len + s.length
            i -= 1
            continue
        if s.length <= max_transient and i >= 1:
            p = segs[i - 1]
            if same(p.mean, p.length, tail_mean, tail_len):
                tail_start = p.start
                tail_sum += s.mean * s.length + p.mean * p.length
                tail_len += s.length + p.length
                i -= 2
                continue
        break
    return tail_start


def _merge_earlier(segs: list[_Segment], tail_start: int, same: _Equivalence) -> list[_Segment]:
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
    rel_all, t_all = _trend(y[tail_start:], tau)
    direction = 0
    if abs(rel_all) > rel_tolerance and abs(t_all) > _TREND_T:
        direction = 1 if rel_all > 0 else -1
    elif stairs and rel_all * stairs > rel_tolerance and t_all * stairs > _TREND_T_END:
        direction = stairs
    if direction == 0:
        return tail_start

    def trending(seg: np.ndarray) -> bool:
        rel, tstat = _trend(seg, tau)
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


def _no_steady(n: int, changepoints: Sequence[int], outliers: Sequence[int],
               one_off: Sequence[int] = ()) -> WarmupAnalysis:
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


def _one_off_spikes(x: np.ndarray, med: np.ndarray, spikes: np.ndarray) -> np.ndarray:
    """Boolean mask of one-off extreme spikes: at most ``_ONE_OFF_MAX`` values >= ``_EXTREME`` x the local level.

    Pseudo-code::

        extreme  = spike and x >= _EXTREME * rolling median      (a compile, a recompile)
        one_off  = extreme if count(extreme) <= _ONE_OFF_MAX else nothing

    Why: an iteration that costs 20x its neighbours is not the same work as they are (a
    compile, a recompile on a guard failure, a page-in of the weights). Once or a few times in
    a run it is an event the deployment pays once, and averaging it into the steady mean
    can double the mean (a 2,000x first call in 2,000 values). The same cost *recurring*
    (more than a few times: GC pauses, interrupts, a periodic slow iteration) is what every
    iteration costs on average, and stays in. The count, not the size, tells the two apart:
    recurring slow iterations of any size stay.
    """
    extreme = spikes & (x >= _EXTREME * med)
    if int(extreme.sum()) > _ONE_OFF_MAX:
        return np.zeros(x.size, dtype=bool)
    return extreme


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
    z_med = _Equivalence.Z * 1.2533 * sigma_lr
    return any(
        abs(float(np.median(p)) - big) > max(tol * abs(big), z_med / math.sqrt(p.size))
        for p in np.array_split(tail, _PRACTICAL_WINDOWS)
    )


def _practical_start(
    y: np.ndarray, cands: Sequence[int], min_len: int, tol: float, sigma: float, tau: float,
    same: _Equivalence,
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
    z_med = _Equivalence.Z * 1.2533 * sigma
    for s in starts:
        if n - s < min_len:
            break
        tail = y[s:]
        if _wanders(tail, tol, sigma):
            continue
        rel, tstat = _trend(tail, tau)
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
            a short non-equivalent segment between equivalent ones is a transient, merged too
        tail shorter than max(min_steady, end_fraction * n), or still trending at its end
            (drift): the practical test (_practical_start): the earliest start whose tail's
            quarter medians stay within tol of its median, without a trend beyond tol and
            without a final segment that moved away -> steady from there; none -> no_steady_state
        trend confined to the tail's beginning (end of a decay)   -> start later
        leading spikes far above everything after them (a compile) -> start after them;
            one-off spikes at the head of the tail -> start after them
        classify: start 0 -> flat; an earlier (merged) segment faster than the steady mean
            beyond tolerance -> slowdown; otherwise warmup
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
    _check_finite(x)
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
    if n < min_steady:
        return _no_steady(n, (), ())

    med_local = _rolling_median(x, _SPIKE_WINDOW)
    spikes = _spike_mask(x, med_local, _SPIKE_THRESHOLD, _SPIKE_MAX_RUN)
    if spikes.mean() > _SPIKE_MAX_SHARE:  # that many are not outliers but part of the distribution
        spikes[:] = False
    spike_idx = np.flatnonzero(spikes)
    one_off = _one_off_spikes(x, med_local, spikes)
    one_off_idx = np.flatnonzero(one_off)
    y = np.where(spikes, med_local, x)
    center = float(np.median(y))
    sigma = _robust_sigma(y - med_local, center)
    z = (y - center) / sigma
    var_floor = max(1e-6, (_quantum(y) / sigma) ** 2 / 12.0)

    phi = _estimate_phi(y)
    tau = (1.0 + phi) / (1.0 - phi)
    pen = 3.0 * math.log(n) * tau if penalty is None else float(penalty)
    jump = max(1, math.ceil(n / max_grid))
    cps = pelt(z, penalty=pen, min_size=2, jump=jump, var_floor=var_floor)
    cps = _refine(z, cps, jump=jump, penalty=pen, min_size=2, var_floor=var_floor)
    sigma_lr = float(np.std(_residuals(z, cps))) * sigma * math.sqrt(tau)
    same = _Equivalence(rel_tolerance, sigma_lr)

    bounds = [0, *cps, n]
    segs = [_Segment(a, b, float(y[a:b].mean())) for a, b in itertools.pairwise(bounds)]
    max_transient = max(5, n // 200)
    tail_start = _walk_back(segs, same, max_transient)
    earlier = _merge_earlier(segs, tail_start, same)
    changepoints = [s.start for s in earlier[1:]] + ([tail_start] if tail_start > 0 else [])

    min_len = max(min_steady, math.ceil(end_fraction * n))
    stairs = _staircase(earlier, float(y[tail_start:].mean()), max_transient)
    start = _start_after_drift(y, tail_start, min_len, tau, rel_tolerance, stairs)
    sigma_local = sigma * math.sqrt(tau)  # local (rolling-median) noise: a stall of seconds is not noise
    if start is not None and _wanders(y[start:], rel_tolerance, sigma_local):
        start = None  # segments within noise of each other, but the tail's level wanders beyond the margin
    practical = False
    if start is None:
        start = _practical_start(y, cps, min_len, rel_tolerance, sigma_local, tau, same)
        if start is None:
            return _no_steady(n, changepoints, spike_idx, one_off_idx)
        practical = True
        changepoints = [c for c in changepoints if c < start]
        if start > 0 and (not changepoints or changepoints[-1] != start):
            changepoints.append(start)
    if start == 0:
        start = _leading_warmup(x, spikes)
    while start < n - 1 and one_off[start]:  # a one-off at the head of the tail (a first call) is warmup
        start += 1

    keep = ~one_off[start:]
    steady = x[start:][keep]
    level = float(y[start:].mean())  # spike-free, comparable with the segment means
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
    if with_ci:
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
    )


# ---------------------------------------------------------------------------------------------
# Online detector
# ---------------------------------------------------------------------------------------------


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
      call, more than any recipe's ``max_seconds``. Past the coarse tiers, what is left in
      a slow call are per-call effects of microseconds, below a percent of a call of 0.5 ms
      or more, so the iteration horizon is capped at ``floor_seconds`` = 1.5 s (= 3,000 x
      0.5 ms): half of the shortest shipped budget (3 s), leaving the other half to reach the
      precision target. A count-driven change later than that in a slow call is outside the
      model, and is missed (the benchmark reports how often, by the change's time).

    None of these numbers is fitted to change positions of the labelled traces. A value
    therefore has to satisfy::

        floor:  seconds >= min_seconds and (iterations >= min_iterations or seconds >= floor_seconds)
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
        floor_seconds: float = 1.5,
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
        if min_iterations < 0 or min_seconds < 0 or floor_seconds < 0:
            raise ValueError("min_iterations, min_seconds and floor_seconds must be >= 0")
        if margin is not None and not margin > 0:
            raise ValueError("margin must be > 0")
        self.ci_target = float(ci_target)
        self.max_values = max_values
        self.rel_tolerance = float(margin) if margin is not None else float(rel_tolerance)
        self.iterations_per_value = int(iterations_per_value)
        self.min_iterations = int(min_iterations)
        self.min_seconds = float(min_seconds)
        self.floor_seconds = max(float(floor_seconds), self.min_seconds)
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
        med = _rolling_median(x, _SPIKE_WINDOW)
        y = np.where(_spike_mask(x, med, _SPIKE_THRESHOLD, _SPIKE_MAX_RUN), med, x)
        phi = _estimate_phi(y)
        tau = (1.0 + phi) / (1.0 - phi)
        rel, tstat = _trend(y, tau)
        if abs(tstat) > self.drift_t and abs(rel) > self.rel_tolerance / 2.0:
            return True
        h = m // 2
        a, b = float(y[:h].mean()), float(y[h:].mean())
        sigma_lr = float(np.std(y)) * math.sqrt(tau)
        noise = _Equivalence.Z * sigma_lr * math.sqrt(1.0 / h + 1.0 / (m - h))
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
        return (n - lo) * self.iterations_per_value >= self.min_iterations or sec >= self.floor_seconds

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
