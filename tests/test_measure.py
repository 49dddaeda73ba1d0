"""The timing loop on real callables: first call apart, warmup detected, CI reported."""

from __future__ import annotations

import time

import torch

from autotune.core.measurement import Measurement
from autotune.worker.timing import MeasureSettings, measure_callable

CPU = torch.device("cpu")


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_first_call_and_warmup_are_reported_apart() -> None:
    calls = [0]

    def fn() -> None:
        calls[0] += 1
        if calls[0] == 1:
            busy(0.05)  # "compile"
        elif calls[0] <= 60:
            busy(0.002)  # warmup: 4x slower
        else:
            busy(0.0005)

    t0, cpu0 = time.perf_counter(), time.process_time()
    m = measure_callable(fn, batch_size=4, device=CPU,
                         settings=MeasureSettings(mode="latency", ci_target=0.02, max_seconds=5.0))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert m.first_call_seconds >= 0.05
    assert m.classification == "warmup", m.analysis
    assert m.warmup_iterations is not None and m.warmup_iterations >= 40
    # Where the warmup ends is what the timings show only when the spinning callable had its core: preempted by the
    # other test process of `make test-fast`, the scheduler's slices read as a later level change (976 iterations,
    # session 39), as in test_budget_stops_a_never_settling_callable. A neighbour's burst of 45 ms within the level (91
    # values at 6%) once moved the start to 1,986 with the core held (session 40's CI): the analysis absorbs bursts now
    # (test_warmup.py's test_a_burst_of_ninety_values_within_a_level_is_not_where_the_steady_state_starts).
    if cpu >= 0.9 * wall:
        assert m.warmup_iterations <= 80, (m.warmup_iterations, cpu / wall)
    assert abs(m.median_seconds - 0.0005) / 0.0005 < 0.25
    assert m.throughput == 4 / m.mean_seconds
    lo, hi = m.throughput_ci
    assert lo <= m.throughput <= hi


def test_real_model_throughput_mode_and_round_trip() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).eval()
    x = torch.randn(16, 64)
    with torch.inference_mode():
        m = measure_callable(lambda: model(x), batch_size=16, device=CPU,
                             settings=MeasureSettings(mode="throughput", ci_target=0.02, max_seconds=2.0))
    assert m.iterations_per_sample >= 1
    assert m.stopped_by in ("precision", "budget", "max_values")
    assert m.latency_ms["p50"] <= m.latency_ms["p99"]
    again = Measurement.from_dict(m.to_dict())
    assert again.throughput == m.throughput and again.samples == m.samples


def test_budget_stops_a_never_settling_callable() -> None:
    calls = [0]

    def drifting() -> None:
        calls[0] += 1
        busy(0.0002 * (1 + calls[0] / 50))  # keeps getting slower

    t0, cpu0 = time.perf_counter(), time.process_time()
    m = measure_callable(drifting, batch_size=1, device=CPU,
                         settings=MeasureSettings(mode="latency", ci_target=0.01, max_seconds=1.0))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert wall < 5.0
    assert m.stopped_by == "budget"
    # The drift is what the timings show only when the spinning callable had its core: preempted (two busy
    # neighbours on 2 cores, or a parallel test), the scheduler's slices outweigh it, and "flat" or "warmup" came
    # back in 3 of 6 such runs. A process that got under 90% of the wall time as CPU was preempted.
    if cpu >= 0.9 * wall:
        assert m.classification in ("no_steady_state", "slowdown")


def test_fast_callables_are_timed_in_blocks() -> None:
    m = measure_callable(lambda: None, batch_size=1, device=CPU,
                         settings=MeasureSettings(mode="throughput", ci_target=0.05, max_seconds=0.5))
    assert m.iterations_per_sample > 100  # one timer read per ~5 ms block, not per call
    assert m.mean_seconds < 20e-6


def test_per_call_latency_sees_tails_that_block_means_average_away() -> None:
    """Every 10th call is 10x slow: per-call p99 shows it, block means (k calls averaged) cannot."""
    from autotune.worker.timing import per_call_timings

    calls = [0]

    def fn() -> None:
        calls[0] += 1
        busy(0.002 if calls[0] % 10 == 0 else 0.0002)

    blocks = measure_callable(fn, batch_size=1, device=CPU,
                              settings=MeasureSettings(ci_target=0.05, max_seconds=0.6))
    assert blocks.iterations_per_sample > 1 and blocks.latency_source == "block_means"
    per_call = measure_callable(fn, batch_size=1, device=CPU,
                                settings=MeasureSettings(ci_target=0.05, max_seconds=0.6, per_call_seconds=0.2))
    assert per_call.latency_source == "per_call" and len(per_call.latency_samples) >= 100
    assert per_call.latency_ms["p99"] > 1.5  # the slow calls (2 ms) are in the per-call tail
    # averaged with nine fast calls each (0.38 ms nominal; relative, so a busy machine cannot fail it)
    assert blocks.latency_ms["p99"] < 0.75 * per_call.latency_ms["p99"]
    back = Measurement.from_dict(per_call.to_dict())
    assert back.latency_ms == per_call.latency_ms and back.latency_source == "per_call"
    # at least MIN_PER_CALL calls even when the time asked for is tiny
    assert len(per_call_timings(lambda: None, device=CPU, seconds=0.001)) >= 100
