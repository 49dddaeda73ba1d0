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

Where each part lives (one concept per module; this package re-exports the public names):

* :mod:`~autotune.core.warmup.cost`: the Gaussian segment cost, written once for both searches;
* :mod:`~autotune.core.warmup.changepoints`: PELT, the exact penalised changepoint search and its refinement;
* :mod:`~autotune.core.warmup.spikes`: isolated spikes and one-off extreme ones;
* :mod:`~autotune.core.warmup.noise`: the noise model shared by both detectors (AR(1) long-run
  factor, trend test, equivalence of two levels);
* :mod:`~autotune.core.warmup.offline`: :func:`analyze` and its result, :class:`WarmupAnalysis`;
* :mod:`~autotune.core.warmup.online`: :class:`OnlineDetector` (the timing loop's stop) and :func:`replay`.

Dependencies point one way: ``online`` -> ``offline`` -> ``changepoints`` (-> ``cost``), ``spikes``
and ``noise`` -> :mod:`autotune.core.stats`. The changepoint module is not called ``pelt``: the package
re-exports the function :func:`pelt`, which would shadow a submodule of that name
(``import autotune.core.warmup.pelt as m`` would then bind the function).

numpy only, no scipy: the timing loop imports this package.
"""

from __future__ import annotations

from autotune.core.warmup.changepoints import pelt
from autotune.core.warmup.offline import CLASSIFICATIONS, DEFAULT_MARGIN, WarmupAnalysis, analyze
from autotune.core.warmup.online import OnlineDetector, budget_floor_seconds, replay
from autotune.core.warmup.spikes import find_spikes

__all__ = [
    "CLASSIFICATIONS",
    "DEFAULT_MARGIN",
    "OnlineDetector",
    "WarmupAnalysis",
    "analyze",
    "budget_floor_seconds",
    "find_spikes",
    "pelt",
    "replay",
]
