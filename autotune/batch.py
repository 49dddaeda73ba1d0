"""Batch-size boundary search: the exact largest batch that fits in memory, in few probes.

A *probe* runs the model once at a batch size and says whether it fit and how much memory it
peaked at (the lead's worker does the running; this module is pure logic and never imports
torch). Probes are expensive -- each is a process that builds and runs the model -- so the
search spends them carefully, but the answer is exact, never an estimate: the reported batch
was probed and fit, and the next one up (one granularity step higher) was probed and did not.

Why a memory model: peak memory of a forward pass is close to affine in the batch size,
``peak(b) ≈ a + c·b`` (weights and workspace plus per-sample activations). When the caller knows
the limit (a CPU budget or the GPU's capacity) the fitted line says where the boundary is, so
the search jumps there and confirms instead of doubling blindly. The model is only a guide:
peaks are noisy, allocators round and fragment, so every decision it drives is checked by a
probe, and the bracket logic below bounds how many probes a wrong model can waste.

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
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import BatchSearchError, InputError
from autotune.sizes import format_size

DEFAULT_MAX_BATCH_SIZE = 65536
DEFAULT_HEADROOM = 0.10
# Extra probes a misleading model may cost over doubling (before the first failure) and over
# bisection (after it); see the envelope and the window in ``find_max_batch_size``.
SLACK = 2


@dataclass(frozen=True)
class ProbeResult:
    """What one probe reports.

    ``peak_memory_bytes`` of a fitting probe feeds the memory model; that of a failed probe is
    only recorded (an out-of-memory error stops the run part-way, so its peak is partial).
    ``error`` says why it did not fit, e.g. ``"CUDA out of memory"`` or
    ``"over budget: 3.1 GiB > 2 GiB"``.
    """

    fits: bool
    peak_memory_bytes: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class ProbeRecord:
    """One probe as the search saw it, in the order it ran (goes into report.json)."""

    batch_size: int
    fits: bool
    peak_memory_bytes: int | None
    seconds: float
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "fits": self.fits,
            "peak_memory_bytes": self.peak_memory_bytes,
            "seconds": self.seconds,
            "error": self.error,
        }


@dataclass(frozen=True)
class MemoryModel:
    """``peak(b) ≈ intercept + slope·b``, the least-squares line through the fitting probes."""

    intercept_bytes: float
    bytes_per_sample: float

    def __post_init__(self) -> None:
        if not (self.bytes_per_sample > 0 and math.isfinite(self.bytes_per_sample)):
            raise ValueError(f"bytes_per_sample must be positive and finite, got {self.bytes_per_sample!r}")
        if not math.isfinite(self.intercept_bytes):
            raise ValueError(f"intercept_bytes must be finite, got {self.intercept_bytes!r}")

    def predict(self, batch_size: int) -> float:
        """Predicted peak memory at ``batch_size``, in bytes."""
        return self.intercept_bytes + self.bytes_per_sample * batch_size

    def boundary(self, limit_bytes: float) -> float:
        """The (fractional) batch size at which the line reaches ``limit_bytes``."""
        return (limit_bytes - self.intercept_bytes) / self.bytes_per_sample

    def max_batch_for(self, limit_bytes: float) -> int:
        """Largest batch size whose predicted peak is within ``limit_bytes`` (0 if none)."""
        return max(0, math.floor(self.boundary(limit_bytes)))

    def to_dict(self) -> dict[str, Any]:
        return {"intercept_bytes": self.intercept_bytes, "bytes_per_sample": self.bytes_per_sample}


def fit_memory_model(records: Sequence[ProbeRecord]) -> MemoryModel | None:
    """Least-squares affine fit over the fitting probes that report a peak.

    Returns None with fewer than two distinct batch sizes, or when the fitted slope is not
    positive: then the peaks carry no usable batch signal (noise dominates) and guiding the
    search by them would be worse than not.
    """
    points = [
        (record.batch_size, float(record.peak_memory_bytes))
        for record in records
        if record.fits and record.peak_memory_bytes is not None
    ]
    if len({b for b, _ in points}) < 2:
        return None
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_p = sum(p for _, p in points) / n
    sxx = sum((b - mean_b) ** 2 for b, _ in points)
    sxy = sum((b - mean_b) * (p - mean_p) for b, p in points)
    slope = sxy / sxx
    if not slope > 0:
        return None
    return MemoryModel(intercept_bytes=mean_p - slope * mean_b, bytes_per_sample=slope)


@dataclass(frozen=True)
class BatchBoundary:
    """The result of :func:`find_max_batch_size`.

    ``max_batch_size`` fits and was probed; unless ``hit_upper_bound``, ``max_batch_size +
    granularity`` was probed and did not fit. ``upper_bound`` is the largest batch the search
    was allowed to try (the requested maximum rounded down to the granularity). ``anomalies``
    lists probes that contradicted the known limit (see the module docstring).
    """

    max_batch_size: int
    granularity: int
    upper_bound: int
    hit_upper_bound: bool
    probes: tuple[ProbeRecord, ...]
    model: MemoryModel | None
    memory_limit_bytes: int | None
    anomalies: tuple[str, ...] = ()

    def usable_max_batch_size(self, headroom: float = DEFAULT_HEADROOM) -> int:
        """The largest batch size the tuner should recommend, ``headroom`` below the boundary.

        A batch that fits in a probe can still run out of memory in deployment: allocator
        fragmentation grows over a long run, and other allocations come and go. Rule:

            boundary = max_batch_size, or, when the search stopped at the upper bound without
                       an out-of-memory error, the model's predicted boundary if it is larger
                       (limit known), else the upper bound
            usable   = floor((1 - headroom) * boundary / granularity) * granularity,
                       capped at max_batch_size and at least granularity (which did fit)

        The margin is a share of the batch size rather than of total memory: fragmentation
        scales with the per-batch (activation) allocations, not with the fixed weights.
        """
        if not 0 <= headroom < 1:
            raise InputError(f"headroom: must be in [0, 1), got {headroom!r}")
        boundary = float(self.max_batch_size)
        if self.hit_upper_bound and self.model is not None and self.memory_limit_bytes is not None:
            # capped where the result is the upper bound anyway, so a huge prediction stays finite
            cap = self.upper_bound / (1 - headroom) + self.granularity
            boundary = max(boundary, min(self.model.boundary(self.memory_limit_bytes), cap))
        steps = math.floor((1 - headroom) * boundary / self.granularity + 1e-9)
        usable = min(self.max_batch_size, steps * self.granularity)
        return max(self.granularity, usable)

    def to_dict(self, *, headroom: float = DEFAULT_HEADROOM) -> dict[str, Any]:
        return {
            "max_batch_size": self.max_batch_size,
            "usable_max_batch_size": self.usable_max_batch_size(headroom),
            "headroom": headroom,
            "granularity": self.granularity,
            "upper_bound": self.upper_bound,
            "hit_upper_bound": self.hit_upper_bound,
            "memory_limit_bytes": self.memory_limit_bytes,
            "probes": [record.to_dict() for record in self.probes],
            "model": None if self.model is None else self.model.to_dict(),
            "anomalies": list(self.anomalies),
        }


def find_max_batch_size(
    probe: Callable[[int], ProbeResult],
    *,
    granularity: int = 1,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    memory_limit_bytes: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BatchBoundary:
    """Find the exact largest batch size (a multiple of ``granularity``) for which ``probe`` fits.

    The search works on the lattice k = batch / granularity, k in 1..K, K = max_batch_size //
    granularity. ``lo`` is the largest k known to fit, ``hi`` the smallest known to fail
    (K + 1 until a probe fails: a virtual failure just above the bound)::

        probe k = 1; if it fails: raise BatchSearchError
        lo, hi = 1, K + 1
        while hi - lo > 1:
            x = boundary estimate: limit unknown: none; known: the memory model's (L - a) / (c·g),
                or before two peaks exist, what the one proves, k·L/peak(k) (if a >= 0)
            if x is None:   t = 2·lo if no failure yet else (lo + hi) // 2   # double, then bisect
            elif floor(x) <= lo: t = lo + 1                                 # confirm from above
            else:           t = floor(x)                                      # jump to the estimate
            gallop: u = fits the model expected to fail since the last failure: t >= lo + 2^u;
                    d = failures it expected to fit since the last fit: t <= hi - 2^d
                    (a model that is wrong by e batches costs O(log e) probes, not O(e))
            envelope, before any failure, after j probes: t >= 2^(j - 1 - SLACK)
                    (a model that keeps under-predicting cannot grow slower than doubling)
            window, from the first failure on, with m probes left of a budget of
                    ceil(log2(hi - lo)) + SLACK set then: t in [hi - 2^(m-1), lo + 2^(m-1)]
                    (either outcome leaves a bracket bisection can finish in m - 1 probes)
            t = clamp(t, lo + 1, hi - 1); probe t; if it fits: lo = t else: hi = t
        answer lo · granularity; hi = lo + 1 was probed and failed unless lo == K

    The window is the projection step of the ITP method (Oliveira & Takahashi 2020). Together
    with the envelope it bounds the cost of any model, however wrong: at most
    ceil(log2(K)) + 2 + SLACK probes up to the first failure, then ceil(log2(hi - lo)) + SLACK.
    The price: after a first failure far above the last fit (lo still small, as when the first
    jump overshoots) a wrong model gets only SLACK guesses before the search bisects the whole
    bracket, so a model that overestimates by e >= ~10 batches costs up to that bisection.

    ``probe`` may raise for errors other than running out of memory; that propagates (the
    caller reports the candidate as failed). ``clock`` times each probe (ProbeRecord.seconds).
    """
    _check_int("granularity", granularity, minimum=1)
    _check_int("max_batch_size", max_batch_size, minimum=granularity)
    if memory_limit_bytes is not None:
        _check_int("memory_limit_bytes", memory_limit_bytes, minimum=1)
    search = _Search(
        probe=probe,
        granularity=granularity,
        top=max_batch_size // granularity,
        limit=memory_limit_bytes,
        clock=clock,
    )
    search.run()
    return BatchBoundary(
        max_batch_size=search.lo * granularity,
        granularity=granularity,
        upper_bound=search.top * granularity,
        hit_upper_bound=search.lo == search.top,
        probes=tuple(search.records),
        model=fit_memory_model(search.records),
        memory_limit_bytes=memory_limit_bytes,
        anomalies=tuple(search.anomalies),
    )


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name}: must be an integer of at least {minimum}, got {value!r}")


@dataclass
class _Search:
    """Mutable state of one search (private; the public result is the frozen BatchBoundary)."""

    probe: Callable[[int], ProbeResult]
    granularity: int
    top: int
    limit: int | None
    clock: Callable[[], float]
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
            result = self._probe(target, expect_fit=expect_fit)
            if result.fits:
                self.lo = target
            else:
                self.hi = target
                if self.budget_end is None:
                    width = self.hi - self.lo
                    self.budget_end = len(self.records) + math.ceil(math.log2(width)) + SLACK

    def _next(self) -> tuple[int, bool | None]:
        estimate, predicted = self._estimate()
        bracketed = self.hi <= self.top
        if estimate is None:
            target = (self.lo + self.hi) // 2 if bracketed else 2 * self.lo
        else:
            target = max(math.floor(min(estimate, self.top + 1)), self.lo + 1)
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
        # Only a model's prediction sets expectations (and so the gallop counters): the bound a
        # single peak proves is a floor, not a prediction of where the boundary is.
        expect_fit = target <= estimate if predicted and estimate is not None else None
        return target, expect_fit

    def _estimate(self) -> tuple[float | None, bool]:
        """The boundary estimate in lattice units (fractional), None without a limit or peaks,
        and whether it is a model's prediction.

        With a memory model: where its line meets the limit. Before there is one (a single
        fitting probe): the bound that probe proves if memory is affine (or concave) with a
        non-negative intercept -- bytes per sample are at most peak / batch, so the boundary is at
        least batch · limit / peak. That jump is safe, and lands far enough out to pin the slope.
        """
        if self.limit is None:
            return None, False
        model = fit_memory_model(self.records)
        if model is not None:
            return model.boundary(self.limit) / self.granularity, True
        peaks = [(r.batch_size, r.peak_memory_bytes) for r in self.records if r.fits and r.peak_memory_bytes]
        if not peaks:
            return None, False
        return max(batch * self.limit / peak for batch, peak in peaks) / self.granularity, False

    def _probe(self, k: int, *, expect_fit: bool | None) -> ProbeResult:
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
            )
        )
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


def candidate_batch_sizes(usable_max: int, *, granularity: int = 1) -> list[int]:
    """The batch sizes the tuner should consider, ascending: granularity·2^i up to ``usable_max``,
    plus ``usable_max`` itself.

    Why powers of two: throughput as a function of batch size rises and then saturates, so a
    geometric grid covers the interesting range in log2(max) points, and kernels are usually
    tuned for power-of-two shapes. Why the maximum itself: the best throughput is often at the
    largest batch that fits (with headroom), which is rarely a power of two.
    """
    _check_int("granularity", granularity, minimum=1)
    _check_int("usable_max", usable_max, minimum=granularity)
    if usable_max % granularity:
        raise InputError(f"usable_max: must be a multiple of the granularity {granularity}, got {usable_max}")
    sizes: list[int] = []
    size = granularity
    while size <= usable_max:
        sizes.append(size)
        size *= 2
    if sizes[-1] != usable_max:
        sizes.append(usable_max)
    return sizes


@dataclass(frozen=True)
class SyntheticProbe:
    """A deterministic stand-in for a real probe, for tests and the benchmark (no model runs).

    Batch ``b`` fits iff ``b <= boundary``. A fitting probe reports the peak
    ``intercept + per_sample·b·(1 + noise·z_b)``, z_b a standard normal drawn from (seed, b),
    capped at the limit (a run that fit cannot have exceeded it). The limit sits between the
    boundary and the next batch on the *noise-free* line, inflated by ``fragmentation``: with
    fragmentation > 0 the true boundary is below where the allocated-memory line meets the
    limit, as when reserved memory exceeds allocated memory on a GPU.
    """

    boundary: int
    intercept_bytes: float
    bytes_per_sample: float
    noise: float = 0.0
    fragmentation: float = 0.0
    position: float = 0.5  # where in [boundary, boundary + 1) the noise-free line meets the limit
    seed: int = 0

    @property
    def memory_limit_bytes(self) -> int:
        crossing = (self.boundary + self.position) * (1 + self.fragmentation)
        return int(self.intercept_bytes + self.bytes_per_sample * crossing)

    def __call__(self, batch_size: int) -> ProbeResult:
        if batch_size > self.boundary:
            return ProbeResult(fits=False, error="out of memory (synthetic)")
        z = random.Random(f"{self.seed}:{batch_size}").gauss(0.0, 1.0)
        peak = self.intercept_bytes + self.bytes_per_sample * batch_size * (1 + self.noise * z)
        return ProbeResult(fits=True, peak_memory_bytes=int(min(max(peak, 0.0), self.memory_limit_bytes)))
