"""Batch-size boundary search: the exact largest batch that fits in memory, in few probes (pure, no torch).

One module per part: :mod:`~autotune.batch.probes` (what a probe reports), :mod:`~autotune.batch.memory_model`
(the affine memory model and its prediction band), :mod:`~autotune.batch.probe_cost` (what a probe costs,
where throughput saturates, the caps of a limited search), :mod:`~autotune.batch.boundary_search` (the search,
:func:`find_max_batch_size`, and why it works as it does), :mod:`~autotune.batch.refine` (re-confirming
the answer with fresh-process probes) and :mod:`~autotune.batch.boundary` (the answer, the headroom rule and
the batch sizes worth tuning). The package re-exports the public names; :mod:`autotune.variant_boundaries` runs it
for each variant of a run.
"""

from autotune.batch.boundary import (
    DEFAULT_HEADROOM,
    DEFAULT_MAX_BATCH_SIZE,
    EARLY_STOPS,
    BatchBoundary,
    candidate_batch_sizes,
)
from autotune.batch.boundary_search import (
    AIM_RATIO,
    DEFAULT_NOISE_FRACTION,
    SLACK,
    find_max_batch_size,
)
from autotune.batch.memory_model import (
    CONFIDENCE_Z,
    CURVATURE,
    RELATIVE_NOISE,
    LineFit,
    MemoryModel,
    fit_memory_model,
    least_squares,
)
from autotune.batch.probe_cost import (
    SATURATION_GAIN,
    SATURATION_GROWTH,
    SATURATION_SPAN,
    ProbeCost,
    ProbeLimits,
    fit_probe_cost,
    saturated_at,
)
from autotune.batch.probes import CRASH_PREFIX, ProbeRecord, ProbeResult, crashed_past
from autotune.batch.refine import refine_max_batch_size

__all__ = [
    "AIM_RATIO",
    "CONFIDENCE_Z",
    "CRASH_PREFIX",
    "CURVATURE",
    "DEFAULT_HEADROOM",
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_NOISE_FRACTION",
    "EARLY_STOPS",
    "RELATIVE_NOISE",
    "SATURATION_GAIN",
    "SATURATION_GROWTH",
    "SATURATION_SPAN",
    "SLACK",
    "BatchBoundary",
    "LineFit",
    "MemoryModel",
    "ProbeCost",
    "ProbeLimits",
    "ProbeRecord",
    "ProbeResult",
    "candidate_batch_sizes",
    "crashed_past",
    "find_max_batch_size",
    "fit_memory_model",
    "fit_probe_cost",
    "least_squares",
    "refine_max_batch_size",
    "saturated_at",
]
