"""Re-confirming a boundary with a more faithful (fresh-process) probe: :func:`refine_max_batch_size`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from autotune.batch.boundary import BatchBoundary
from autotune.batch.probes import ProbeRecord, ProbeResult
from autotune.errors import BatchSearchError


def refine_max_batch_size(
    probe: Callable[[int], ProbeResult],
    boundary: BatchBoundary,
    *,
    clock: Callable[[], float] = time.perf_counter,
    on_probe: Callable[[ProbeRecord, float | None], None] | None = None,
) -> BatchBoundary:
    """Re-confirm a boundary with another (more expensive, more faithful) probe, fixing it locally.

    Why: the search runs in a reused worker, cheap but carrying state from earlier probes; a
    deployment starts fresh. A fresh-process probe is seconds each, so it is spent only where it
    matters: at the answer. The fresh processes' peaks sit at a roughly constant offset from the
    reused worker's line (measured: 5-20 MiB on a wide MLP), with the same slope, so each fresh peak
    says how far the fresh boundary is, and the next probe goes there; fit/fail alone would gallop
    one granularity step at a time (10-26 fresh probes on the wide MLP, 13-19 s each)::

        g = granularity; L = limit; c = the search's fitted bytes per sample (None: no model)
        lo = largest batch seen to fit, hi = smallest seen to fail (hi = upper + g: a virtual failure)
        b = boundary.max_batch_size
        repeat:
            r = probe(b); update lo / hi
            if hi - lo == g: stop                         # the confirming pair: lo fits, lo + g fails
            if c and r has a usable peak p (a fit's, or a failure's above L):
                next = floor((b + (L - p) / c) / g) * g   # where the fresh line meets the limit
                (a fit at b whose estimate is b: next = b + g; a failure's: next = b - g)
            else: gallop from b away from the known side: b ± g, ± 2g, ± 4g, ...
            keep next strictly inside (lo, hi); when both ends are known and the last estimated
            step did not at least halve the bracket, bisect instead (safeguard: O(log) probes
            whatever the peaks say)
        if lo is unknown after stepping down to g: raise BatchSearchError (batch g does not fit)

    Only for a boundary the search reached (``stopped_by`` memory or upper_bound): one that limits
    ended early is a probed fit far from the limit, and there is nothing to confirm.

    Every verdict is a probe, so the answer is exact whatever the estimates are (and a probe that
    is not monotone still yields a confirmed local boundary).
    """
    g, upper = boundary.granularity, boundary.upper_bound
    limit = boundary.memory_limit_bytes
    slope = boundary.model.bytes_per_sample if boundary.model is not None else None
    records: list[ProbeRecord] = []
    known: dict[int, ProbeResult] = {}

    def run(b: int) -> ProbeResult:
        if b not in known:
            t0 = clock()
            res = probe(b)
            records.append(ProbeRecord(batch_size=b, fits=res.fits, peak_memory_bytes=res.peak_memory_bytes,
                                       seconds=clock() - t0, error=res.error, baseline_bytes=res.baseline_bytes,
                                       phase="confirm", step_seconds=res.step_seconds,
                                       forward_calls=res.forward_calls, overhead_seconds=res.overhead_seconds))
            if on_probe is not None:
                on_probe(records[-1], None)
            known[b] = res
        return known[b]

    def estimate(b: int, res: ProbeResult) -> int | None:
        """Where the fresh line through this probe's peak reaches the limit (a multiple of g), or None."""
        p = res.peak_memory_bytes
        if slope is None or limit is None or p is None or (not res.fits and p <= limit) or (res.fits and p > limit):
            # an out-of-memory error stops part-way, so its peak says nothing about the line; a probe whose
            # verdict contradicts its own peak (an allocator cap, a kernel's OOM killer) is not a line either
            return None
        target = math.floor((b + (limit - p) / slope) / g) * g
        if res.fits:
            return max(target, b + g)
        return min(target, b - g)

    lo: int | None = None
    hi = upper + g  # nothing above the upper bound is probed: a virtual failure
    b = boundary.max_batch_size
    step = g
    last_width: int | None = None
    while True:
        res = run(b)
        if res.fits:
            lo = b if lo is None else max(lo, b)
        else:
            hi = min(hi, b)
        if lo is not None and hi - lo <= g:
            break
        if lo is None and b <= g:
            raise BatchSearchError(f"batch {g} does not fit when re-checked in a fresh process")
        width = None if lo is None else hi - lo
        guess = estimate(b, res)
        if guess is not None and width is not None and last_width is not None and width * 2 > last_width:
            guess = None  # the estimates are not closing the bracket: bisect
        if guess is None:
            if lo is not None and hi <= upper:  # both ends known: bisect
                guess = lo + ((hi - lo) // g // 2) * g
            elif res.fits:  # gallop up
                guess = b + step
                step *= 2
            else:  # gallop down
                guess = b - step
                step *= 2
        floor_ = (lo if lo is not None else 0) + g
        guess = max(floor_, min(guess, hi - g))
        if guess in known:  # the clamp landed on a probed size: take the bracket's middle instead
            guess = max(floor_, (lo if lo is not None else 0) + ((hi - (lo or 0)) // g // 2) * g)
        last_width = width
        b = guess
    hit_upper = lo + g > upper
    return BatchBoundary(
        max_batch_size=lo,
        granularity=g,
        upper_bound=upper,
        hit_upper_bound=hit_upper,
        probes=boundary.probes + tuple(records),
        model=boundary.model,
        memory_limit_bytes=boundary.memory_limit_bytes,
        anomalies=boundary.anomalies,
        stopped_by="upper_bound" if hit_upper else "memory",
    )
