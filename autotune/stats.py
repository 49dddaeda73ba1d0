"""Statistics of timing samples: percentiles, autocorrelation-aware confidence intervals, Measurement.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.errors import InputError

if TYPE_CHECKING:
    from autotune.warmup import WarmupAnalysis

__all__ = [
    "MODES",
    "STOPPED_BY",
    "Measurement",
    "block_bootstrap_ci",
    "choose_block_length",
    "lag1_autocorrelation",
    "normal_quantile",
    "percentiles",
]

MODES = ("throughput", "latency")
STOPPED_BY = ("precision", "budget", "max_values")

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


def lag1_autocorrelation(values: Sequence[float] | np.ndarray) -> float:
    """Lag-1 autocorrelation of ``values`` (0.0 for fewer than 3 values or a constant series)."""
    x = _as_1d(values)
    if x.size < 3:
        return 0.0
    d = x - x.mean()
    den = float(np.dot(d, d))
    if den <= 0.0:
        return 0.0
    return float(np.dot(d[:-1], d[1:]) / den)


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
        b      = max(b, ceil(n / 256))                    # bound the work per resample
        k      = round(n / b)                             # blocks per resample
        sums   = prefix sums of x wrapped around (circular), so a block sum is one subtraction
        repeat n_boot times: draw k block starts uniformly in [0, n); mean of the k blocks
        return the (1-c)/2 and (1+c)/2 quantiles of the resampled means,
               re-centred on the sample mean (the circular scheme is unbiased for the mean)

    Deterministic for a given ``seed``. A single value gives a zero-width interval.
    """
    x = _as_1d(values)
    n = x.size
    if n == 0:
        raise ValueError("block_bootstrap_ci needs at least one value")
    if not np.all(np.isfinite(x)):
        raise InputError("block_bootstrap_ci needs finite values")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 10:
        raise ValueError(f"n_boot must be at least 10, got {n_boot}")
    mean = float(x.mean())
    if n == 1 or float(x.max()) == float(x.min()):
        return (mean, mean)
    b = choose_block_length(x) if block is None else int(block)
    if b < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    b = min(max(b, math.ceil(n / _MAX_BLOCKS)), n)
    k = max(1, round(n / b))
    centred = x - mean
    wrapped = np.concatenate((centred, centred[: b - 1]))
    prefix = np.concatenate(([0.0], np.cumsum(wrapped)))
    block_sums = prefix[b : b + n] - prefix[:n]
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n, size=(n_boot, k))
    boot = block_sums[starts].sum(axis=1) / (k * b)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return (mean + float(lo), mean + float(hi))


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


@dataclass(frozen=True)
class Measurement:
    """What the timing loop returns for one configuration (cf. ``torch.utils.benchmark.Measurement``).

    ``samples`` are seconds per iteration, warmup included, in order. In throughput mode one
    sample is one timed block divided by ``iterations_per_sample``. The derived statistics use
    the steady samples, ``samples[analysis.steady_start:]``. When the analysis found no steady
    state they use the trailing half of the samples instead and ``classification`` says
    ``no_steady_state``: an honest number with a wide interval, not a precise-looking one.
    """

    batch_size: int
    mode: str
    samples: tuple[float, ...]
    iterations_per_sample: int
    first_call_seconds: float
    analysis: WarmupAnalysis
    stopped_by: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Seconds of individually synchronised calls (throughput mode, when latency matters):
    #: the latency percentiles come from these instead of from block means.
    latency_samples: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.stopped_by not in STOPPED_BY:
            raise ValueError(f"stopped_by must be one of {STOPPED_BY}, got {self.stopped_by!r}")
        if self.batch_size < 1 or self.iterations_per_sample < 1:
            raise ValueError("batch_size and iterations_per_sample must be at least 1")
        if not self.samples:
            raise ValueError("a Measurement needs at least one sample")
        object.__setattr__(self, "samples", tuple(float(s) for s in self.samples))
        object.__setattr__(self, "latency_samples", tuple(float(s) for s in self.latency_samples))

    # -- derived -------------------------------------------------------------------------------
    @property
    def classification(self) -> str:
        return self.analysis.classification

    @property
    def warmup_iterations(self) -> int | None:
        """Iterations spent before the steady state (None when there is no steady state)."""
        if self.analysis.steady_start is None:
            return None
        return self.analysis.steady_start * self.iterations_per_sample

    @cached_property
    def steady_samples(self) -> np.ndarray:
        """Samples the statistics are computed from (see the class docstring)."""
        x = np.asarray(self.samples, dtype=float)
        start = self.analysis.steady_start
        if start is None or start >= x.size:
            start = x.size // 2
        return x[start:]

    @property
    def mean_seconds(self) -> float:
        if self.analysis.steady_start is not None and self.analysis.steady_mean is not None:
            return float(self.analysis.steady_mean)
        return float(self.steady_samples.mean())

    @property
    def median_seconds(self) -> float:
        if self.analysis.steady_start is not None and self.analysis.steady_median is not None:
            return float(self.analysis.steady_median)
        return float(np.median(self.steady_samples))

    @cached_property
    def ci_seconds(self) -> tuple[float, float]:
        """95% CI of the steady mean, seconds per iteration."""
        if self.analysis.ci is not None and self.analysis.steady_start is not None:
            return (float(self.analysis.ci[0]), float(self.analysis.ci[1]))
        return block_bootstrap_ci(self.steady_samples)

    @property
    def latency_source(self) -> str:
        """``per_call`` when the percentiles are of single synchronised calls, else ``block_means``.

        A block mean averages k calls, so its p99 hides per-call tails: such percentiles are
        labelled, never presented as what one request waits.
        """
        return "per_call" if self.latency_samples or self.iterations_per_sample == 1 else "block_means"

    @cached_property
    def latency_ms(self) -> dict[str, float]:
        """Latency in milliseconds: mean (steady), p50, p90, p99 (see :attr:`latency_source`)."""
        source = np.asarray(self.latency_samples) if self.latency_samples else self.steady_samples
        pct = percentiles(source, (50.0, 90.0, 99.0))
        return {
            "mean": self.mean_seconds * 1e3,
            "p50": pct[50.0] * 1e3,
            "p90": pct[90.0] * 1e3,
            "p99": pct[99.0] * 1e3,
        }

    @property
    def throughput(self) -> float:
        """Samples per second at the steady mean (batch_size / seconds per iteration)."""
        mean = self.mean_seconds
        return self.batch_size / mean if mean > 0 else math.inf

    @property
    def throughput_ci(self) -> tuple[float, float]:
        lo, hi = self.ci_seconds
        return (
            self.batch_size / hi if hi > 0 else math.inf,
            self.batch_size / lo if lo > 0 else math.inf,
        )

    @property
    def relative_ci_half_width(self) -> float:
        lo, hi = self.ci_seconds
        mean = self.mean_seconds
        return (hi - lo) / 2.0 / mean if mean > 0 else math.inf

    # -- serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: the raw samples, the analysis and the derived statistics."""
        return {
            "batch_size": self.batch_size,
            "mode": self.mode,
            "iterations_per_sample": self.iterations_per_sample,
            "first_call_seconds": self.first_call_seconds,
            "stopped_by": self.stopped_by,
            "classification": self.classification,
            "warmup_iterations": self.warmup_iterations,
            "mean_seconds": self.mean_seconds,
            "median_seconds": self.median_seconds,
            "ci_seconds": list(self.ci_seconds),
            "latency_ms": dict(self.latency_ms),
            "latency_source": self.latency_source,
            "latency_samples": list(self.latency_samples),
            "throughput": _json_float(self.throughput),
            "throughput_ci": [_json_float(v) for v in self.throughput_ci],
            "relative_ci_half_width": _json_float(self.relative_ci_half_width),
            "analysis": self.analysis.to_dict(),
            "samples": list(self.samples),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        """Inverse of :meth:`to_dict` (derived fields are recomputed, not trusted)."""
        from autotune.warmup import WarmupAnalysis  # runtime import: warmup imports this module

        try:
            return cls(
                batch_size=int(data["batch_size"]),
                mode=str(data["mode"]),
                samples=tuple(float(s) for s in data["samples"]),
                iterations_per_sample=int(data["iterations_per_sample"]),
                first_call_seconds=float(data["first_call_seconds"]),
                analysis=WarmupAnalysis.from_dict(data["analysis"]),
                stopped_by=str(data["stopped_by"]),
                extra=dict(data.get("extra", {})),
                latency_samples=tuple(float(s) for s in data.get("latency_samples", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"not a stored Measurement (missing or bad field: {exc})") from exc


def _json_float(value: float) -> float | None:
    return None if not math.isfinite(value) else value
