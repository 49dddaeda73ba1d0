"""What the timing loop returns for one configuration: the samples, their analysis, the statistics.

A value object, kept apart from :mod:`autotune.stats` (the numeric helpers it is computed with)
because it also holds a :class:`~autotune.warmup.WarmupAnalysis`, and the warmup detector in turn
uses those helpers: with the result among the helpers, ``stats`` and ``warmup`` imported each
other. Now the direction is one way: ``measurement`` -> ``warmup`` -> ``stats``.

numpy only: the parent (candidate rows, the report) reads measurements without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from autotune.errors import InputError
from autotune.stats import block_bootstrap_ci, percentiles
from autotune.warmup import WarmupAnalysis

__all__ = ["MODES", "STOPPED_BY", "Measurement"]

MODES = ("throughput", "latency")
STOPPED_BY = ("precision", "budget", "max_values")


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
