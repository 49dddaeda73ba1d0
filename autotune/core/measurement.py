"""What the timing loop returns for one configuration: the samples, their analysis, the statistics.

A value object, kept apart from :mod:`autotune.core.stats` (the numeric helpers it is computed with)
because it also holds a :class:`~autotune.core.warmup.WarmupAnalysis`, and the warmup detector in turn
uses those helpers: with the result among the helpers, ``stats`` and ``warmup`` imported each
other. Now the direction is one way: ``measurement`` -> ``warmup`` -> ``stats``.

**One value, end to end.** :meth:`Measurement.to_dict` is the measurement's stored form, a
:class:`MeasurementRecord`: the raw samples (every timed block, warmup included, and the per-call
latencies) with the warmup analysis that says which of them are steady, and nothing derived. The
worker sends it, the candidate row carries it (``measurement``), the study stores it and report.json
holds it; :meth:`Measurement.from_dict` gives the same :class:`Measurement` back anywhere, and every
statistic (throughput and its CI, latency percentiles, bootstrap replicates for a comparison of two
runs) is a property of that object, computed here and nowhere else. The flattened numbers of a
candidate row (``throughput``, ``throughput_ci``, ``latency_ms``, ...) are copies of these properties.

The samples travel as :class:`EncodedSeconds`: float32 little-endian, zlib, base64 (about 4.5
characters a value instead of ~20 for a JSON number). A :class:`Measurement` rounds its samples to
float32 when it is made, so the object the worker built and the one read back from a report are
equal. float32 keeps 24 bits (a relative 6e-8), below what the clock resolves: 1 ns of
``perf_counter`` is 2e-7 of a 5 ms block and more of a shorter call.

numpy only: the parent (candidate rows, the report) reads measurements without torch.
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypedDict

import numpy as np

from autotune.core.stats import (
    BATCHES,
    batch_statistics_ci,
    block_bootstrap_ci,
    bootstrap_means,
    bootstrap_percentiles,
    percentiles,
)
from autotune.core.vocab import MODES
from autotune.core.warmup import WarmupAnalysis
from autotune.errors import InputError

__all__ = [
    "SECONDS_FORMAT", "STOPPED_BY", "EncodedSeconds", "Measurement", "MeasurementRecord",
    "decode_seconds", "encode_seconds",
]

STOPPED_BY = ("precision", "budget", "max_values")
#: The one encoding of :class:`EncodedSeconds` (a reader refuses others rather than misread them).
SECONDS_FORMAT = "f32le-zlib-base64"
#: Values one encoded series may hold (a corrupt ``count`` cannot make a reader allocate gigabytes).
MAX_ENCODED_VALUES = 10_000_000


class EncodedSeconds(TypedDict):
    """A series of seconds, compact: ``count`` float32 little-endian values, zlib-compressed, base64 (``data``)."""

    format: str  # SECONDS_FORMAT
    count: int
    data: str


class MeasurementRecord(TypedDict):
    """A :class:`Measurement` as stored (:meth:`Measurement.to_dict`): the raw samples and their analysis.

    ``samples``: seconds per iteration of every timed block, in order, warmup included (one block is
    ``iterations_per_sample`` calls); ``analysis``: ``WarmupAnalysis.to_dict()``, whose ``steady_start``
    and ``one_off`` say which samples are the steady ones; ``latency_samples``: seconds of single
    synchronised calls (none when the percentiles are of block means). Nothing derived is stored.
    """

    batch_size: int
    mode: str
    iterations_per_sample: int
    first_call_seconds: float
    stopped_by: str
    analysis: dict[str, Any]
    samples: EncodedSeconds
    latency_samples: EncodedSeconds
    extra: dict[str, Any]


def encode_seconds(values: Sequence[float] | np.ndarray) -> EncodedSeconds:
    """``values`` as :class:`EncodedSeconds` (rounded to float32)."""
    arr = np.ascontiguousarray(np.asarray(values, dtype=float).reshape(-1), dtype="<f4")
    data = base64.b64encode(zlib.compress(arr.tobytes(), 9)).decode("ascii")
    return {"format": SECONDS_FORMAT, "count": int(arr.size), "data": data}


def decode_seconds(encoded: Any) -> np.ndarray:
    """The float64 values of :class:`EncodedSeconds`; ``InputError`` says what is wrong with a bad one."""
    if not isinstance(encoded, Mapping):
        raise InputError(f"expected an object with format, count and data, got {type(encoded).__name__}")
    if encoded.get("format") != SECONDS_FORMAT:
        raise InputError(f"format: expected {SECONDS_FORMAT!r}, got {encoded.get('format')!r}")
    count, text = encoded.get("count"), encoded.get("data")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_ENCODED_VALUES:
        raise InputError(f"count: expected an integer from 0 to {MAX_ENCODED_VALUES}, got {count!r}")
    if not isinstance(text, str):
        raise InputError(f"data: expected a base64 string, got {type(text).__name__}")
    try:
        # at most one byte more than expected is inflated, so a corrupt stream cannot expand without bound
        raw = zlib.decompressobj().decompress(base64.b64decode(text, validate=True), 4 * count + 1)
    except (binascii.Error, ValueError, zlib.error) as exc:
        raise InputError(f"data: not base64 of a zlib stream ({exc})") from None
    if len(raw) != 4 * count:
        raise InputError(f"data: holds {len(raw)} bytes, count {count} needs {4 * count}")
    values = np.frombuffer(raw, dtype="<f4").astype(float)
    if not np.all(np.isfinite(values)):
        raise InputError("data: holds values that are not finite")
    return values


def _float32(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(np.asarray(values, dtype=float).astype(np.float32).astype(float).tolist())


def _seconds(value: Any, name: str) -> tuple[float, ...]:
    """Stored seconds: :class:`EncodedSeconds`, or a plain list (the form before schema 2)."""
    if isinstance(value, list | tuple):
        return tuple(float(s) for s in value)
    try:
        return tuple(decode_seconds(value).tolist())
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class Measurement:
    """What the timing loop returns for one configuration (cf. ``torch.utils.benchmark.Measurement``).

    ``samples`` are seconds per iteration, warmup included, in order. In throughput mode one
    sample is one timed block divided by ``iterations_per_sample``. The derived statistics use
    the steady samples (:attr:`steady_samples`): ``samples[analysis.steady_start:]`` without the
    one-off spikes the analysis left out (``analysis.one_off``). When the analysis found no steady
    state they use the trailing half of the samples instead and ``classification`` says
    ``no_steady_state``: an honest number with a wide interval, not a precise-looking one.
    Samples and latency samples are rounded to float32 (see the module docstring).
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
        object.__setattr__(self, "samples", _float32(self.samples))
        object.__setattr__(self, "latency_samples", _float32(self.latency_samples))

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
        """Samples the statistics are computed from (see the class docstring): the ones the steady mean,
        median and CI of the analysis were computed from."""
        x = np.asarray(self.samples, dtype=float)
        start = self.analysis.steady_start
        if start is None or start >= x.size:
            start = x.size // 2
        tail = x[start:]
        keep = np.ones(tail.size, dtype=bool)
        keep[[i - start for i in self.analysis.one_off if start <= i < x.size]] = False
        return tail[keep] if keep.any() else tail

    @cached_property
    def latency_values(self) -> np.ndarray:
        """Seconds the latency percentiles are taken of (see :attr:`latency_source`)."""
        if self.latency_samples:
            return np.asarray(self.latency_samples, dtype=float)
        return self.steady_samples

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
        """95% CI of the steady mean, seconds per iteration.

        Without a steady state it is the trailing half's, from four batch means (:func:`batch_statistics_ci`):
        a series that kept moving has its drift or wander in the interval, where a bootstrap with blocks sized
        from the lag-1 autocorrelation would print the noise of one moment as the precision of the number."""
        if self.analysis.ci is not None and self.analysis.steady_start is not None:
            return (float(self.analysis.ci[0]), float(self.analysis.ci[1]))
        tail = self.steady_samples
        if self.analysis.steady_start is None and tail.size >= 2 * BATCHES:
            return batch_statistics_ci(tail, statistic="mean")
        return block_bootstrap_ci(tail)

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
        pct = percentiles(self.latency_values, (50.0, 90.0, 99.0))
        return {
            "mean": self.mean_seconds * 1e3,
            "p50": pct[50.0] * 1e3,
            "p90": pct[90.0] * 1e3,
            "p99": pct[99.0] * 1e3,
        }

    @property
    def samples_per_call(self) -> float:
        """Rows one call serves on average: the batch size, or over a traffic the mean of its batches' rows
        (a partial last batch counts what it holds)."""
        return float(self.extra.get("samples_per_call", self.batch_size))

    @property
    def throughput(self) -> float:
        """Samples per second at the steady mean (samples per call / seconds per call)."""
        mean = self.mean_seconds
        return self.samples_per_call / mean if mean > 0 else math.inf

    @property
    def throughput_ci(self) -> tuple[float, float]:
        lo, hi = self.ci_seconds
        n = self.samples_per_call
        return (
            n / hi if hi > 0 else math.inf,
            n / lo if lo > 0 else math.inf,
        )

    def bucket_stats(self) -> list[dict[str, Any]]:
        """Per shape bucket of a traffic: calls, samples, throughput and p50/p99 from the per-call timings.

        ``extra["traffic_batches"]`` lists each batch's ``[shape, rows]`` and ``extra["latency_batches"]``
        which batch each per-call timing served; empty without a traffic of several batches.
        """
        batches = self.extra.get("traffic_batches") or []
        served = self.extra.get("latency_batches") or []
        if not batches or len(served) != len(self.latency_samples):
            return []
        groups: dict[str, list[tuple[float, int]]] = {}
        for seconds, i in zip(self.latency_samples, served, strict=True):
            shape, rows = batches[int(i)]
            groups.setdefault(str(shape), []).append((seconds, int(rows)))
        out = []
        for shape, calls in groups.items():
            secs = [c[0] for c in calls]
            rows = sum(c[1] for c in calls)
            pct = percentiles(secs, (50.0, 99.0))
            out.append({"shape": shape, "calls": len(calls), "samples": rows,
                        "throughput": rows / sum(secs) if sum(secs) > 0 else None,
                        "p50_ms": pct[50.0] * 1e3, "p99_ms": pct[99.0] * 1e3})
        return out

    @property
    def relative_ci_half_width(self) -> float:
        lo, hi = self.ci_seconds
        mean = self.mean_seconds
        return (hi - lo) / 2.0 / mean if mean > 0 else math.inf

    # -- resampling (comparisons of two runs: autotune.compare) ---------------------------------
    def throughput_replicates(self, *, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
        """Bootstrap replicates of :attr:`throughput`: the throughput at each resampled steady mean.

        The resampling is :func:`autotune.core.stats.bootstrap_means` of :attr:`steady_samples` (circular
        blocks, the block length from their autocorrelation), the scheme the analysis's CI comes from.
        Written as :attr:`throughput` x ``mean_seconds / resampled mean`` so that it follows however
        :attr:`throughput` turns seconds per iteration into samples per second.
        """
        means = bootstrap_means(self.steady_samples, n_boot=n_boot, seed=seed)
        return np.asarray(self.throughput * (self.mean_seconds / means))

    def latency_replicates(self, statistic: str, *, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
        """Bootstrap replicates of ``latency_ms[statistic]`` (``mean``, ``p50``, ``p90`` or ``p99``), in ms."""
        if statistic == "mean":
            return bootstrap_means(self.steady_samples, n_boot=n_boot, seed=seed) * 1e3
        if statistic not in ("p50", "p90", "p99"):
            raise ValueError(f"latency statistic must be mean, p50, p90 or p99, got {statistic!r}")
        return bootstrap_percentiles(self.latency_values, float(statistic[1:]), n_boot=n_boot, seed=seed) * 1e3

    # -- serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> MeasurementRecord:
        """The stored form (:class:`MeasurementRecord`): raw samples, encoded, and the analysis; JSON-able."""
        return {
            "batch_size": self.batch_size,
            "mode": self.mode,
            "iterations_per_sample": self.iterations_per_sample,
            "first_call_seconds": self.first_call_seconds,
            "stopped_by": self.stopped_by,
            "analysis": self.analysis.to_dict(),
            "samples": encode_seconds(self.samples),
            "latency_samples": encode_seconds(self.latency_samples),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        """Inverse of :meth:`to_dict` (also reads samples stored as plain lists, the form before schema 2)."""
        try:
            return cls(
                batch_size=int(data["batch_size"]),
                mode=str(data["mode"]),
                samples=_seconds(data["samples"], "samples"),
                iterations_per_sample=int(data["iterations_per_sample"]),
                first_call_seconds=float(data["first_call_seconds"]),
                analysis=WarmupAnalysis.from_dict(data["analysis"]),
                stopped_by=str(data["stopped_by"]),
                extra=dict(data.get("extra") or {}),
                latency_samples=_seconds(data.get("latency_samples") or (), "latency_samples"),
            )
        except InputError as exc:
            raise InputError(f"not a stored Measurement ({exc})") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"not a stored Measurement (missing or bad field: {exc})") from exc
