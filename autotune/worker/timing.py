"""The timing loop: first call, adaptive warmup, steady-state sampling to a precision target.

Algorithm (per candidate)::

    prepare inputs on the device (outside timing)
    first  = time one call, synchronised            # compile / lazy init, reported apart
    second = the fastest of three more calls, synchronised   # one descheduled call would make k = 1
    k      = 1 in latency mode, else ceil(block_target / second)   # iterations per sample
    traffic (a call that cycles through n batches of several shapes; every shape already warm):
             k = n * ceil(block_target / one pass), in both modes: every sample is whole passes, the same
             mix of shapes, so the detector sees one steady level instead of the shapes' differences;
             then per-call timings over whole passes (each call's batch recorded: per-bucket statistics)
    detector = OnlineDetector(ci_target, floor_seconds=min(1.5 s, max_seconds / 2))
    repeat:
        s = time a block of k calls (CPU: perf_counter_ns around the block;
                                     accelerators: the backend's events around the block,
                                     one sync at its end;
                                     latency mode: k = 1, so every call is synchronised)
        if detector.push(s / k): stop (precision reached: steady state + tight CI)
        if the time budget is spent: stop (budget) — the analysis says how far it got
    return Measurement(samples, first, analysis of everything pushed)

Why blocks in throughput mode: a per-call synchronisation would drain the GPU queue and
measure latency, not throughput; one timer read per block also keeps the harness's own
overhead far below a microsecond per iteration for tiny models.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autotune.core.measure_settings import BLOCK_TARGET_SECONDS, MeasureSettings  # no torch: the parent builds them
from autotune.core.measurement import Measurement
from autotune.core.warmup import OnlineDetector, budget_floor_seconds
from autotune.worker.devices import backend_for


def time_first_call(call: Callable[[], Any], *, device: torch.device) -> float:
    """Wall seconds of one synchronised call (used for the compile-dominated first call)."""
    sync = backend_for(device).synchronize
    sync()
    t0 = time.perf_counter()
    call()
    sync()
    return time.perf_counter() - t0


def measure_callable(
    call: Callable[[], Any],
    *,
    batch_size: int,
    device: torch.device,
    settings: MeasureSettings,
    first_call_seconds: float | None = None,
) -> Measurement:
    """Measure ``call`` (a zero-argument closure over prepared inputs) until precise or out of budget.

    ``first_call_seconds`` lets the caller pass a first call it already made (e.g. in the
    correctness gate); otherwise the first call is timed here.
    """
    if first_call_seconds is None:
        first_call_seconds = time_first_call(call, device=device)
    block = backend_for(device).block_timer()
    budget_end = time.perf_counter() + settings.max_seconds
    cycle = _cycle_length(call)
    if settings.mode == "latency" and cycle == 1:
        per_sample = 1
    elif cycle > 1:
        # traffic: a block is whole passes over the batches, so every sample holds the same mix of shapes
        # (the detector then sees one level, not the shapes' differences) — timed from one pass
        _restart(call)
        probe = time_first_call(lambda: [call() for _ in range(cycle)], device=device)
        per_sample = cycle * max(1, math.ceil(settings.block_target_seconds / max(probe, 1e-9)))
    else:
        # the fastest of three calls: one call descheduled by a neighbour would make k = 1
        probe = min(time_first_call(call, device=device) for _ in range(3))
        per_sample = max(1, math.ceil(settings.block_target_seconds / max(probe, 1e-9)))
    _restart(call)
    detector = OnlineDetector(ci_target=settings.ci_target, max_values=settings.max_samples,
                              iterations_per_value=per_sample, margin=settings.margin,
                              floor_seconds=budget_floor_seconds(settings.max_seconds))
    samples: list[float] = []
    stopped_by = "max_values"
    while len(samples) < settings.max_samples:
        seconds = block(call, per_sample) / per_sample
        samples.append(seconds)
        if detector.push(seconds):
            stopped_by = detector.stopped_by or "precision"
            break
        if time.perf_counter() >= budget_end:
            stopped_by = "budget"
            break
    latency: tuple[float, ...] = ()
    extra: dict[str, Any] = {}
    per_call_seconds = settings.per_call_seconds
    if cycle > 1 and per_call_seconds <= 0:
        # several batches: per-call timings give each shape bucket its own throughput and percentiles
        per_call_seconds = min(1.0, settings.max_seconds / 4)
    if per_call_seconds > 0 and (per_sample > 1 or cycle > 1):
        _restart(call)
        batches: list[int] = []
        latency = per_call_timings(call, device=device, seconds=per_call_seconds,
                                   on_call=(lambda: batches.append(getattr(call, "index", 0)))
                                   if cycle > 1 else None,
                                   multiple_of=cycle)
        if cycle > 1:
            extra["latency_batches"] = batches
    return Measurement(
        batch_size=batch_size,
        mode=settings.mode,
        samples=tuple(samples),
        iterations_per_sample=per_sample,
        first_call_seconds=first_call_seconds,
        analysis=detector.result(),
        stopped_by=stopped_by,
        latency_samples=latency,
        extra=extra,
    )


def _cycle_length(call: Callable[[], Any]) -> int:
    """Batches a traffic call cycles through (:class:`autotune.worker.traffic.TrafficCall`); 1 for a plain call."""
    try:
        return max(1, len(call))  # type: ignore[arg-type]
    except TypeError:
        return 1


def _restart(call: Callable[[], Any]) -> None:
    reset = getattr(call, "reset", None)
    if reset is not None:
        reset()


#: Per-call timings taken at least / at most (a p99 from fewer than ~100 calls is its maximum).
MIN_PER_CALL = 100
MAX_PER_CALL = 5_000


def per_call_timings(call: Callable[[], Any], *, device: torch.device, seconds: float,
                     on_call: Callable[[], None] | None = None, multiple_of: int = 1) -> tuple[float, ...]:
    """Seconds of each of a run of individually synchronised calls: what one request waits.

    Runs for ``seconds`` of wall time, but at least ``MIN_PER_CALL`` calls (so a p99 is not just
    the maximum) unless that would take more than 4x ``seconds``, and at most ``MAX_PER_CALL``.
    ``multiple_of``: stop only after a whole number of passes over a traffic's batches (each shape weighs as
    often as in the data); ``on_call`` runs after each call, outside its timing.
    """
    out: list[float] = []
    sync = backend_for(device).synchronize
    clock = time.perf_counter
    start = clock()
    while len(out) < MAX_PER_CALL:
        t0 = clock()
        call()
        sync()
        t1 = clock()
        out.append(t1 - t0)
        if on_call is not None:
            on_call()
        spent = t1 - start
        if (spent >= seconds and (len(out) >= MIN_PER_CALL or spent >= 4.0 * seconds)
                and len(out) % multiple_of == 0):
            break
    return tuple(out)


@dataclass(frozen=True)
class Slice:
    """One showdown slice of a staged candidate: mean seconds per call, and per-call latency if asked."""

    calls: int
    seconds_per_call: float
    latency_samples: tuple[float, ...] = ()


def time_slice(call: Callable[[], Any], *, device: torch.device, seconds: float, per_call: bool,
               block_target_seconds: float = BLOCK_TARGET_SECONDS, warmup_seconds: float = 0.0) -> Slice:
    """Time ``call`` back to back for ``seconds`` (already warm): one round of the showdown.

    Throughput: blocks of k calls (k from one call's time, as in :func:`measure_callable`), the
    slice's total time over its total calls. Latency (``per_call``): every call synchronised.
    ``warmup_seconds``: untimed calls first (whole cycles), for a process that was just continued after a
    SIGSTOP (quiet rounds): its threads and caches start cold (:mod:`autotune.showdown.rounds`).
    """
    if warmup_seconds > 0:
        cycle = _cycle_length(call)
        _restart(call)
        end = time.perf_counter() + warmup_seconds
        while time.perf_counter() < end:
            for _ in range(cycle):
                call()
        backend_for(device).synchronize()
    if per_call:
        _restart(call)
        lat = per_call_timings(call, device=device, seconds=seconds, multiple_of=_cycle_length(call))
        return Slice(calls=len(lat), seconds_per_call=float(sum(lat) / len(lat)), latency_samples=lat)
    cycle = _cycle_length(call)
    _restart(call)
    probe = time_first_call(lambda: [call() for _ in range(cycle)], device=device)
    k = cycle * max(1, math.ceil(block_target_seconds / max(probe, 1e-9)))
    _restart(call)
    block = backend_for(device).block_timer()
    total, calls = 0.0, 0
    while total < seconds:
        total += block(call, k)
        calls += k
    return Slice(calls=calls, seconds_per_call=total / calls)
