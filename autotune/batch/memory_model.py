"""The memory model: peak memory affine in the batch size, ``peak(b) ≈ a + c·b``, and its prediction band.

:class:`MemoryModel` is the least-squares line through the fitting probes that goes into the report;
:class:`BandedLine` is the line the search steers by, with the spread of its prediction (noise of a
reading, the leverage of the fitted points, curvature beyond the largest fitting batch). Why the
model is distrusted, and how much, is in :mod:`autotune.batch.boundary_search`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.batch.probes import ProbeRecord

#: Noise of a reading that scales with the memory a batch adds (allocator rounding, size classes).
RELATIVE_NOISE = 0.01
#: Standard deviations of margin a conservative jump keeps (one-sided, about 98%).
CONFIDENCE_Z = 2.0
#: Relative uncertainty of the slope beyond the largest fitting batch: real memory curves bend
#: (allocator size classes, algorithm choices that change with the batch).
CURVATURE = 0.05


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


@dataclass(frozen=True)
class LineFit:
    """An ordinary least-squares line ``y = intercept + slope·x``, with what its prediction band needs."""

    slope: float
    intercept: float
    #: mean of the x values and their sum of squared deviations (the leverage of a new x)
    mean_x: float
    sxx: float


def least_squares(points: Sequence[tuple[float, float]]) -> LineFit | None:
    """The least-squares line through ``(x, y)`` points; None with fewer than two distinct x.

    Both the memory model (:func:`fit_memory_model`) and the search's fitted line use it::

        mean_x, mean_y = means;  sxx = sum (x - mean_x)^2;  sxy = sum (x - mean_x)(y - mean_y)
        slope = sxy / sxx;  intercept = mean_y - slope * mean_x
    """
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return LineFit(slope=slope, intercept=mean_y - slope * mean_x, mean_x=mean_x, sxx=sxx)


def fit_memory_model(records: Sequence[ProbeRecord]) -> MemoryModel | None:
    """Least-squares affine fit over the fitting probes that report a peak.

    With a single batch size the line is anchored at the median baseline reading, if the probes
    report one (the intercept is measured, so one point gives the slope). Returns None when
    neither applies, or when the slope is not positive: then the peaks carry no usable batch
    signal (noise dominates) and guiding anything by them would be worse than not.
    """
    fitting = [record for record in records if record.fits and record.peak_memory_bytes is not None]
    points = [(record.batch_size, float(record.peak_memory_bytes or 0)) for record in fitting]
    sizes = {b for b, _ in points}
    if len(sizes) == 1:
        baselines = sorted(r.baseline_bytes for r in fitting if r.baseline_bytes is not None)
        if not baselines:
            return None
        baseline = float(baselines[len(baselines) // 2])
        slope = (sum(p for _, p in points) / len(points) - baseline) / points[0][0]
        return MemoryModel(intercept_bytes=baseline, bytes_per_sample=slope) if slope > 0 else None
    line = least_squares(points)
    if line is None or not line.slope > 0:
        return None
    return MemoryModel(intercept_bytes=line.intercept, bytes_per_sample=line.slope)


@dataclass(frozen=True)
class BandedLine:
    """``m(b) ≈ offset + slope·b`` in batch units, with the spread of its prediction.

    ``count == 0`` marks the anchored line (through the origin and the point at ``anchor``, its
    error that of the one reading scaled by b / anchor); otherwise a least-squares fit of
    ``count`` points with mean batch ``mean`` and sum of squares ``sxx``. ``anchor`` is the
    largest fitting batch: beyond it the slope itself is uncertain (CURVATURE).
    """

    offset: float
    slope: float
    sigma: float
    anchor: float
    count: int = 0
    mean: float = 0.0
    sxx: float = 0.0

    def predict(self, batch: float) -> float:
        return self.offset + self.slope * batch

    def spread(self, batch: float) -> float:
        if self.count == 0:
            noise = self.sigma * batch / self.anchor
        else:
            noise = self.sigma * math.sqrt(1 / self.count + (batch - self.mean) ** 2 / self.sxx)
        relative = RELATIVE_NOISE * max(0.0, self.predict(batch))
        return math.hypot(noise, relative, CURVATURE * self.slope * max(0.0, batch - self.anchor))

    def crossing(self, headroom: float) -> float:
        """Where the line reaches ``headroom``."""
        return (headroom - self.offset) / self.slope

    def safe_crossing(self, headroom: float, *, cap: float) -> float:
        """Where the band's upper edge reaches ``headroom``: the smallest b >= anchor with
        predict(b) + z·spread(b) >= headroom, found by bisection (the edge increases there,
        and it is at least the line, so the answer is at most ``crossing``); ``cap`` bounds the
        search where the line is nearly flat."""

        def upper(batch: float) -> float:
            return self.predict(batch) + CONFIDENCE_Z * self.spread(batch)

        low, high = self.anchor, max(self.anchor, min(self.crossing(headroom), cap))
        if upper(low) >= headroom:
            return low
        if upper(high) < headroom:
            return high
        for _ in range(60):
            mid = (low + high) / 2
            if upper(mid) < headroom:
                low = mid
            else:
                high = mid
        return low


@dataclass(frozen=True)
class BoundaryEstimate:
    """The boundary (batch units) where the line reaches the limit, and the safe-side ``low``."""

    center: float
    low: float
    sigma: float  # one standard deviation of ``center``
