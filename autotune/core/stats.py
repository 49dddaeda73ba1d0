"""Statistics of timing samples: percentiles, autocorrelation-aware confidence intervals.

Per-iteration timings are not independent: a slow iteration (a clock ramp, a cache refill, a
busy neighbour) makes the next one slow too. A textbook ``mean ± 1.96·s/√n`` interval then
claims a precision the data do not have, and a tuner that stops sampling on such an interval
stops too early. The intervals here come from a circular block bootstrap: resampling blocks
of consecutive values keeps the short-range dependence inside each block, and the block length
is chosen from the measured autocorrelation, so independent data get blocks of one and
strongly correlated data get long blocks.

numpy only: this module is imported by the timing loop and the report, which must stay light.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autotune.errors import InputError

__all__ = [
    "BATCHES",
    "Z95",
    "batch_statistics_ci",
    "block_bootstrap_ci",
    "bootstrap_means",
    "bootstrap_percentiles",
    "choose_block_length",
    "lag1_autocorrelation",
    "normal_quantile",
    "percentiles",
    "replicate_interval",
    "samples_to_decide",
    "wilson_interval",
]


# Above this many blocks per resample, blocks are made longer instead: the bootstrap mean of
# that many blocks is already close to normal, longer-than-optimal blocks only cost a little
# efficiency, and the cost of a resample stays bounded (n_boot x this many look-ups).
_MAX_BLOCKS = 128


def _as_1d(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=float).reshape(-1)
    return arr


def normal_quantile(p: float) -> float:
    """Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9).

    Kept here so that the package does not need scipy for a two-sided 95% quantile.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2.0 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0)
    if p > 1.0 - lo:
        return -normal_quantile(1.0 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / (
        ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)


#: 97.5% quantiles of Student's t for 1..30 degrees of freedom (beyond: 1.96 + 2.4 / df, within 0.002).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t_quantile_975(df: float) -> float:
    """The 97.5% quantile of Student's t at ``floor(df)`` degrees of freedom (at least 1): conservative."""
    k = max(1, int(math.floor(df)))
    return _T975[k - 1] if k <= len(_T975) else 1.96 + 2.4 / k


def log_t_interval(values: Sequence[float]) -> list[float] | None:
    """exp(mean log x -+ t * sd / sqrt(n)): a 95% interval for a rate measured once per fresh process (at least 2
    positive values; None otherwise). Logs, because rates are ratios of work to time: a round twice as slow weighs
    as much as one twice as fast, and the interval stays positive."""
    if len(values) < 2 or min(values) <= 0:
        return None
    logs = [math.log(float(x)) for x in values]
    mean = math.fsum(logs) / len(logs)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in logs) / (len(logs) - 1))
    half = t_quantile_975(len(logs) - 1) * sd / math.sqrt(len(logs))
    return [math.exp(mean - half), math.exp(mean + half)]


def lag1_autocorrelation(values: Sequence[float] | np.ndarray) -> float:
    """Lag-1 autocorrelation of ``values`` (0.0 for fewer than 3 values or a constant series)."""
    x = _as_1d(values)
    if x.size < 3:
        return 0.0
    # The coefficient is scale-free: computed on x / max|x| so that no sum of squares overflows (values up to
    # 1e308) and none underflows to zero (values down to 1e-308).
    scale = float(np.max(np.abs(x)))
    if not math.isfinite(scale) or scale <= 0.0:
        return 0.0
    y = x / scale
    d = y - y.mean()
    den = float(np.dot(d, d))
    if not den > 0.0 or not math.isfinite(den):
        return 0.0
    rho = float(np.dot(d[:-1], d[1:]) / den)
    return rho if math.isfinite(rho) else 0.0


def choose_block_length(values: Sequence[float] | np.ndarray) -> int:
    """Block length for a circular block bootstrap of the mean, from the lag-1 autocorrelation.

    Politis & White (2004) give the MSE-optimal block length of the circular block bootstrap
    as ``b = (2 G^2 / D)^(1/3) n^(1/3)``. For an AR(1) process with coefficient rho this is::

        b = 6^(1/3) * (rho / (1 - rho^2))^(2/3) * n^(1/3)

    rho is estimated from the data and clipped to [0, 0.98]; negative correlation (alternating
    values) makes blocks of one conservative enough. The result is at least 1 and at most n/4.
    """
    x = _as_1d(values)
    n = x.size
    if n < 8:
        return 1
    rho = min(max(lag1_autocorrelation(x), 0.0), 0.98)
    if rho <= 0.0:
        return 1
    b = 6.0 ** (1.0 / 3.0) * (rho / (1.0 - rho * rho)) ** (2.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(1, math.ceil(b)), max(1, n // 4)))


def _block_geometry(n: int, block: int | None, values: np.ndarray) -> tuple[int, int]:
    """(block length, blocks per resample) of a circular block bootstrap of ``n`` values."""
    b = choose_block_length(values) if block is None else int(block)
    if b < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    b = min(max(b, math.ceil(n / _MAX_BLOCKS)), n)
    return b, max(1, round(n / b))


def _check_bootstrap(x: np.ndarray, *, n_boot: int, name: str) -> None:
    if x.size == 0:
        raise ValueError(f"{name} needs at least one value")
    if not np.all(np.isfinite(x)):
        raise InputError(f"{name} needs finite values")
    if n_boot < 10:
        raise ValueError(f"n_boot must be at least 10, got {n_boot}")


def _mean_deviations(x: np.ndarray, *, n_boot: int, block: int | None, seed: int) -> np.ndarray:
    """Resampled means minus the sample mean (circular block bootstrap; see :func:`block_bootstrap_ci`)."""
    n = x.size
    b, k = _block_geometry(n, block, x)
    centred = x - float(x.mean())
    wrapped = np.concatenate((centred, centred[: b - 1]))
    prefix = np.concatenate(([0.0], np.cumsum(wrapped)))
    block_sums = prefix[b : b + n] - prefix[:n]
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n, size=(n_boot, k))
    deviations: np.ndarray = block_sums[starts].sum(axis=1) / (k * b)
    return deviations


#: Consecutive batches :func:`batch_statistics_ci` cuts a series into.
BATCHES = 4


def batch_statistics_ci(values: Sequence[float] | np.ndarray, *, statistic: str = "median",
                        batches: int = BATCHES) -> tuple[float, float]:
    """95% CI of the mean or median of a correlated series from a few long batches (batch means / medians).

    Why: a machine's level wanders slowly (a neighbour, the clock, the allocator's state), so consecutive timings
    are correlated over hundreds of calls, far longer than the lag-1 autocorrelation a block bootstrap sizes its
    blocks from sees (that bootstrap covered the late-half median of real steady traces 64% of the time, issue
    31). Batches longer than the memory have independent statistics, and their spread carries the wander into
    the interval. How many: a rule that halves the batch count while a test finds the batch statistics
    correlated (LBATCH) has little power with a handful of batches and covered a wandering level 72-93% of the
    time on synthetic series (72-81% at the longest memory); four batches (t with 3 degrees of freedom) covered
    it 86-96%, at about 1.6x the width an interval of independent values would have (tests/test_stats.py,
    BENCHMARKS.md "The steady median's interval, printed")::

        m_1..m_k = the statistic of k consecutive equal batches
        estimate = the statistic of all values
        half     = t_0.975(k - 1) * sd(m_1..m_k) / sqrt(k)
    """
    if statistic not in ("mean", "median"):
        raise ValueError(f"statistic must be mean or median, got {statistic!r}")
    if batches < 2:
        raise ValueError(f"batches must be at least 2, got {batches}")
    x = _as_1d(values)
    if x.size < 2 * batches:
        raise ValueError(f"batch_statistics_ci needs at least {2 * batches} values, got {x.size}")
    if not np.all(np.isfinite(x)):
        raise InputError("batch_statistics_ci needs finite values")
    blocks = np.array_split(x, batches)
    v = np.array([float(np.median(b)) if statistic == "median" else float(b.mean()) for b in blocks])
    half = t_quantile_975(batches - 1) * float(np.std(v, ddof=1)) / math.sqrt(batches)
    center = float(np.median(x)) if statistic == "median" else float(x.mean())
    return (center - half, center + half)


def block_bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_boot: int = 1000,
    block: int | None = None,
    seed: int = 0,
) -> tuple[float, float]:
    """Confidence interval of the mean by a circular block bootstrap (percentile interval).

    Pseudo-code::

        b      = block or choose_block_length(x)          # from the autocorrelation
        b      = max(b, ceil(n / 128))                    # bound the work per resample
        k      = round(n / b)                             # blocks per resample
        sums   = prefix sums of x wrapped around (circular), so a block sum is one subtraction
        repeat n_boot times: draw k block starts uniformly in [0, n); mean of the k blocks
        return the (1-c)/2 and (1+c)/2 quantiles of the resampled means,
               re-centred on the sample mean (the circular scheme is unbiased for the mean)

    Deterministic for a given ``seed``. A single value gives a zero-width interval.
    """
    x = _as_1d(values)
    _check_bootstrap(x, n_boot=n_boot, name="block_bootstrap_ci")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = float(x.mean())
    if x.size == 1 or float(x.max()) == float(x.min()):
        return (mean, mean)
    boot = _mean_deviations(x, n_boot=n_boot, block=block, seed=seed)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return (mean + float(lo), mean + float(hi))


def bootstrap_means(
    values: Sequence[float] | np.ndarray, *, n_boot: int = 1000, block: int | None = None, seed: int = 0
) -> np.ndarray:
    """``n_boot`` resampled means of ``values``: the distribution :func:`block_bootstrap_ci` takes quantiles of.

    For statistics of several series (a ratio of two runs' throughputs): resample each series on its own
    (its own block length, from its own autocorrelation), combine the replicates element-wise, and take the
    quantiles of the result. Give the series different seeds, or two copies of one series resample alike.
    """
    x = _as_1d(values)
    _check_bootstrap(x, n_boot=n_boot, name="bootstrap_means")
    mean = float(x.mean())
    if x.size == 1 or float(x.max()) == float(x.min()):
        return np.full(n_boot, mean)
    return mean + _mean_deviations(x, n_boot=n_boot, block=block, seed=seed)


#: Values resampled per chunk in :func:`bootstrap_percentiles` (bounds its memory at ~16 MB).
_CHUNK_VALUES = 2_000_000


def bootstrap_percentiles(
    values: Sequence[float] | np.ndarray, q: float, *, n_boot: int = 1000, block: int | None = None,
    seed: int = 0,
) -> np.ndarray:
    """``n_boot`` resampled ``q``-th percentiles (0-100) of ``values``, by the same circular block bootstrap.

    Pseudo-code::

        b, k = block length and blocks per resample, as for the mean
        repeat n_boot times: draw k block starts in [0, n); the percentile q of the k*b values
                             x[start], ..., x[start + b - 1] (indices mod n) of those blocks

    A percentile needs the resampled values themselves, not block sums, so resamples are drawn in chunks.
    Extreme percentiles of few values resample poorly (a p99 of 100 values is about their maximum): the
    interval is then too narrow, like any bootstrap of a sample maximum.
    """
    x = _as_1d(values)
    _check_bootstrap(x, n_boot=n_boot, name="bootstrap_percentiles")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    n = x.size
    if n == 1 or float(x.max()) == float(x.min()):
        return np.full(n_boot, float(x[0]))
    b, k = _block_geometry(n, block, x)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n, size=(n_boot, k))
    offsets = np.arange(b)
    chunk = max(1, _CHUNK_VALUES // (k * b))
    out = np.empty(n_boot)
    for first in range(0, n_boot, chunk):
        idx = (starts[first : first + chunk, :, None] + offsets) % n
        out[first : first + chunk] = np.percentile(x[idx].reshape(idx.shape[0], -1), q, axis=1)
    return out


def replicate_interval(replicates: np.ndarray, *, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates (their (1-c)/2 and (1+c)/2 quantiles)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    r = _as_1d(replicates)
    if r.size == 0 or not np.all(np.isfinite(r)):
        raise InputError("replicate_interval needs finite replicates")
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(r, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> dict[float, float]:
    """Percentiles (0-100, linear interpolation) of ``values``, keyed by the requested q."""
    x = _as_1d(values)
    if x.size == 0:
        raise ValueError("percentiles needs at least one value")
    qs_list = [float(q) for q in qs]
    for q in qs_list:
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not qs_list:
        return {}
    got = np.percentile(x, qs_list)
    return {q: float(v) for q, v in zip(qs_list, np.atleast_1d(got), strict=True)}


# --------------------------------------------------------------------------------------- proportions

#: The two-sided 95% normal quantile.
Z95 = 1.959963984540054
#: The largest sample count :func:`samples_to_decide` names (beyond it: "cannot be decided at this rate").
_MAX_DECIDING_SAMPLES = 10**9


def wilson_interval(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``k / n`` (95% by default).

    Wilson, not ``p +- z*sqrt(p(1-p)/n)``: at 0 or 1 of 48 predictions differing the normal interval has width 0
    or goes negative, and says a 48-sample check proved 99% agreement; Wilson's says 0 of 48 is compatible with
    anything up to 7.4% disagreement. ``k`` may be fractional (:func:`samples_to_decide` asks "what if the
    observed rate held over more samples"). ``n == 0``: the whole range."""
    if n <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, k / n))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - margin), min(1.0, centre + margin)


def samples_to_decide(k: int, n: int, bound: float, z: float = Z95) -> int | None:
    """How many samples, at the observed rate ``k / n``, would put the Wilson interval on one side of ``bound``.

    Why: a budget judged on too few samples is undecided, and the useful answer is how much more data would
    decide it. Below the bound: the smallest N whose interval's top is at most the bound ("shown within"); above
    it: the smallest N whose interval's bottom is over it ("shown over"). None when the rate equals the bound (no
    sample count separates them) or when it takes more than 10**9 samples. Assumes the rate holds, so it is an
    estimate, not a promise."""
    if n <= 0 or not 0.0 <= bound <= 1.0:
        return None
    p = k / n
    if p == bound:
        return None

    def decided(m: int) -> bool:
        lo, hi = wilson_interval(p * m, m, z)
        return hi <= bound if p < bound else lo > bound

    high = max(1, n)
    while not decided(high):
        high *= 2
        if high > _MAX_DECIDING_SAMPLES:
            return None
    low = 0
    while high - low > 1:
        mid = (low + high) // 2
        if decided(mid):
            high = mid
        else:
            low = mid
    return high
