"""The limited boundary search (autotune.batch.probe_cost): the probe cost model, the saturation rule, the caps.

Pure algorithms against fake probes and a fake clock (the memory side is autotune.testing.SyntheticProbe).
The real thing, an ``autotune run`` on a real model in real workers that stops early, stores each boundary as
it is found and reuses it, is tests/test_boundary_progress.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from autotune.batch import (
    SATURATION_GROWTH,
    BatchBoundary,
    ProbeLimits,
    ProbeRecord,
    ProbeResult,
    find_max_batch_size,
    fit_probe_cost,
    saturated_at,
)
from autotune.batch.probe_cost import plan_probe, throughput_peak
from autotune.errors import InputError, RecipeError
from autotune.testing import SyntheticProbe


def _record(b: int, step: float | None, *, seconds: float = 1.0, fits: bool = True, calls: int = 2,
            overhead: float = 0.0) -> ProbeRecord:
    return ProbeRecord(batch_size=b, fits=fits, peak_memory_bytes=None, seconds=seconds, error=None,
                       step_seconds=step, forward_calls=calls, overhead_seconds=overhead)


@dataclass
class TimedProbe:
    """A SyntheticProbe (memory) that also takes time: ``fixed + calls·step(b)`` on a fake clock, with
    ``step(b) = overhead + b / peak_rate`` below ``knee`` and a per-sample cost ``slowdown`` times higher past it
    (throughput rises, saturates, then falls, as caches overflow on a CPU)."""

    memory: SyntheticProbe
    fixed: float = 2.0
    overhead: float = 0.01
    per_sample: float = 0.001
    knee: int = 64
    slowdown: float = 1.3
    now: float = 0.0
    probed: list[int] = field(default_factory=list)

    def step(self, b: int) -> float:
        below = min(b, self.knee)
        return self.overhead + self.per_sample * below + self.per_sample * self.slowdown * max(0, b - self.knee)

    def __call__(self, b: int) -> ProbeResult:
        self.probed.append(b)
        res = self.memory(b)
        self.now += self.fixed + 2 * self.step(b)
        return ProbeResult(fits=res.fits, peak_memory_bytes=res.peak_memory_bytes, error=res.error,
                           baseline_bytes=res.baseline_bytes, step_seconds=self.step(b), forward_calls=2)

    def clock(self) -> float:
        return self.now


def _far_memory() -> SyntheticProbe:
    """A CPU-like memory boundary far out (30,000 samples), as for a small model in 20 GiB."""
    return SyntheticProbe(boundary=30_000, intercept_bytes=800e6, bytes_per_sample=300e3, baseline_bytes=700e6)


# ----------------------------------------------------------------------------- the cost model


def test_cost_model_predicts_an_affine_step_and_the_fixed_part() -> None:
    records = [_record(b, 0.01 + 0.001 * b, seconds=3.0 + 2 * (0.01 + 0.001 * b)) for b in (1, 4, 16)]
    cost = fit_probe_cost(records)
    assert cost is not None
    assert cost.step_seconds(256) == pytest.approx(0.01 + 0.256, rel=1e-6)
    assert cost.fixed_seconds == pytest.approx(3.0)
    assert cost.seconds(256) == pytest.approx(3.0 + 2 * 0.266, rel=1e-6)


def test_one_probe_extrapolates_through_the_origin_on_the_safe_side() -> None:
    cost = fit_probe_cost([_record(4, 0.02, seconds=5.0, overhead=3.0)])
    assert cost is not None
    # the worker's start (overhead) is not a cost later probes pay
    assert cost.fixed_seconds == pytest.approx(5.0 - 3.0 - 2 * 0.02)
    assert cost.step_seconds(40) == pytest.approx(0.2)  # 10x the batch, 10x the step: at least the truth


def test_the_first_probes_once_only_costs_are_not_a_later_probes() -> None:
    # the first probe built the worker's model (20 s); the next ones cost 3 s whatever the batch
    records = [_record(1, 0.01, seconds=20.0), _record(4, 0.02, seconds=3.04), _record(16, 0.04, seconds=3.08)]
    cost = fit_probe_cost(records)
    assert cost is not None and cost.fixed_seconds == pytest.approx(3.0)


def test_a_noisy_negative_slope_falls_back_to_the_proportional_line() -> None:
    cost = fit_probe_cost([_record(1, 0.02), _record(2, 0.015)])
    assert cost is not None and cost.slope is None
    assert cost.step_seconds(20) == pytest.approx(0.15)


def test_probes_without_step_readings_count_wholly_as_batch_dependent() -> None:
    cost = fit_probe_cost([_record(1, None, seconds=1.0), _record(2, None, seconds=2.0)])
    assert cost is not None and cost.fixed_seconds == 0.0
    assert cost.seconds(10) == pytest.approx(10.0)
    assert fit_probe_cost([]) is None


def test_largest_within_a_cap() -> None:
    cost = fit_probe_cost([_record(1, 0.01), _record(8, 0.08)])  # 10 ms a sample, 2 calls
    assert cost is not None
    assert cost.largest_within(1.0, lo=1, hi=1000) == 50
    assert cost.largest_within(0.001, lo=1, hi=1000) is None


# ----------------------------------------------------------------------------- the saturation rule


def test_saturation_needs_a_probe_span_times_past_the_best_without_the_gain() -> None:
    rising = [_record(b, 0.005 + 0.001 * b) for b in (1, 4, 16)]  # throughput 167, 444, 762/s: still growing
    assert saturated_at(rising) is None
    flat = [*rising, _record(64, 0.005 + 0.001 * 64), _record(256, 0.005 + 0.001 * 256)]  # 928, 981/s
    assert saturated_at(flat) == 64  # 256 is within 10% of 64's 928/s (and 64 is 22% over 16)
    falling = [_record(b, s) for b, s in ((1, 0.01), (4, 0.012), (16, 0.03), (64, 0.2))]  # 100, 333, 533, 320/s
    assert saturated_at(falling) == 16
    assert saturated_at(falling[:3]) is None  # 16 is the best so far, nothing 4x past it yet


def test_the_throughput_peak_is_the_fastest_probed_batch_not_the_largest() -> None:
    falling = [_record(b, s) for b, s in ((1, 0.01), (4, 0.012), (16, 0.03), (64, 0.2))]  # 100, 333, 533, 320/s
    assert throughput_peak(falling) == 16
    assert throughput_peak([_record(4, None), _record(8, 0.5, fits=False)]) is None  # no timed fit, no peak
    assert throughput_peak([_record(2, 0.02), _record(4, 0.04)]) == 2  # a tie: the smaller batch


def test_a_search_ended_by_saturation_names_its_peak_and_others_do_not() -> None:
    probe = TimedProbe(_far_memory(), knee=64)
    found = find_max_batch_size(probe, memory_limit_bytes=probe.memory.memory_limit_bytes, clock=probe.clock,
                                limits=ProbeLimits(stop_at_saturation=True))
    assert found.stopped_by == "throughput"
    peak = found.throughput_peak
    assert peak is not None and peak < found.max_batch_size and peak in probe.probed
    assert found.to_dict()["throughput_peak"] == peak and f"throughput peaked at {peak}" in found.summary()
    exact = find_max_batch_size(TimedProbe(SyntheticProbe(boundary=300, intercept_bytes=1e9, bytes_per_sample=1e6)),
                                memory_limit_bytes=int(1e9 + 300.5e6))
    assert exact.throughput_peak is None and "throughput_peak" not in exact.to_dict()


def test_saturation_ignores_failures_and_untimed_probes() -> None:
    records = [_record(1, 0.01), _record(4, 0.012), _record(16, None), _record(64, 0.5, fits=False)]
    assert saturated_at(records) is None


# ----------------------------------------------------------------------------- the limited search


def test_unlimited_search_is_the_exact_memory_boundary() -> None:
    probe = TimedProbe(SyntheticProbe(boundary=300, intercept_bytes=1e9, bytes_per_sample=1e6))
    found = find_max_batch_size(probe, memory_limit_bytes=probe.memory.memory_limit_bytes, clock=probe.clock)
    assert (found.max_batch_size, found.stopped_by, found.stopped_early) == (300, "memory", False)
    unlimited = find_max_batch_size(TimedProbe(probe.memory), memory_limit_bytes=probe.memory.memory_limit_bytes,
                                    limits=ProbeLimits())
    assert unlimited.max_batch_size == 300


def test_saturation_stops_far_short_of_a_far_memory_boundary() -> None:
    probe = TimedProbe(_far_memory(), knee=64)
    heard: list[tuple[int, float | None]] = []
    found = find_max_batch_size(probe, memory_limit_bytes=probe.memory.memory_limit_bytes, clock=probe.clock,
                                limits=ProbeLimits(stop_at_saturation=True),
                                on_probe=lambda r, predicted: heard.append((r.batch_size, predicted)))
    assert found.stopped_by == "throughput" and found.stopped_early and not found.hit_upper_bound
    assert found.max_batch_size == probe.probed[-1] and all(b <= 1024 for b in probe.probed)
    # a geometric grid: each probe at most SATURATION_GROWTH times the last
    assert all(b2 <= SATURATION_GROWTH * b1 for b1, b2 in zip(probe.probed, probe.probed[1:], strict=False))
    # each probe after the first came with a prediction of its cost, close to what it took
    assert heard[0] == (1, None) and all(p is not None for _, p in heard[1:])
    # the answer is honest: a probed fit, and the memory model's estimate of the real limit
    assert found.predicted_limit is not None and found.predicted_limit[1] > 10 * found.max_batch_size
    assert "fits up to" in found.summary() and "predicts the limit near" in found.summary()
    assert found.usable_max_batch_size(0.1) == found.max_batch_size  # the limit is far: no headroom to take


def test_hint_jumps_to_where_another_variant_saturated() -> None:
    probe = TimedProbe(_far_memory(), knee=64)
    find_max_batch_size(probe, memory_limit_bytes=probe.memory.memory_limit_bytes, clock=probe.clock,
                        limits=ProbeLimits(stop_at_saturation=True, hint=256))
    # past the grid's 4 at once, up to the hint (the memory model's safe edge may hold it lower)
    assert probe.probed[0] == 1 and SATURATION_GROWTH < probe.probed[1] <= 256
    plain = TimedProbe(_far_memory(), knee=64)
    find_max_batch_size(plain, memory_limit_bytes=plain.memory.memory_limit_bytes, clock=plain.clock,
                        limits=ProbeLimits(stop_at_saturation=True))
    assert plain.probed[1] == SATURATION_GROWTH and len(probe.probed) < len(plain.probed)


def test_probe_cap_lowers_the_next_probe_then_stops() -> None:
    probe = TimedProbe(_far_memory(), knee=100_000, per_sample=0.01)  # 10 ms a sample: 2 calls of b=250 is 5 s
    found = find_max_batch_size(probe, memory_limit_bytes=probe.memory.memory_limit_bytes, clock=probe.clock,
                                limits=ProbeLimits(max_probe_seconds=5.0))
    assert found.stopped_by == "probe_cap"
    assert all(2 * probe.step(b) <= 5.0 * 1.01 for b in probe.probed[1:])
    assert found.max_batch_size >= 200  # it went as far as the cap allows, not one step and out
    assert "max_probe_seconds" in found.stop_detail


def test_time_cap_stops_before_a_probe_would_end_late() -> None:
    probe = TimedProbe(_far_memory(), fixed=10.0)
    found = find_max_batch_size(probe, memory_limit_bytes=probe.memory.memory_limit_bytes, clock=probe.clock,
                                limits=ProbeLimits(deadline=35.0, deadline_source="batch.max_seconds = 35"))
    assert found.stopped_by == "time_cap" and len(probe.probed) >= 2 and probe.now <= 35.0
    assert "batch.max_seconds = 35" in found.summary()


def test_a_memory_limit_that_binds_first_is_still_found_exactly() -> None:
    # the boundary (100) comes before throughput saturates (knee 10,000): the limited search finds it exactly
    probe = TimedProbe(SyntheticProbe(boundary=100, intercept_bytes=1e9, bytes_per_sample=5e6), knee=10_000)
    found = find_max_batch_size(probe, memory_limit_bytes=probe.memory.memory_limit_bytes, clock=probe.clock,
                                limits=ProbeLimits(stop_at_saturation=True, max_probe_seconds=60.0))
    assert (found.max_batch_size, found.stopped_by) == (100, "memory")


def test_early_stop_without_a_model_keeps_the_probed_batch() -> None:
    boundary = BatchBoundary(max_batch_size=64, granularity=1, upper_bound=65536, hit_upper_bound=False, probes=(),
                             model=None, memory_limit_bytes=None, stopped_by="time_cap")
    assert boundary.usable_max_batch_size(0.1) == 64
    assert "no memory limit is known" in boundary.summary()
    assert boundary.to_dict()["stopped_by"] == "time_cap"


def test_plan_lowers_a_probe_to_the_grid_only_while_saturation_is_watched() -> None:
    records = [_record(1, 0.001), _record(4, 0.002)]
    plan = plan_probe(1000, lo=4, hi=65537, granularity=1, records=records,
                      limits=ProbeLimits(stop_at_saturation=True), now=lambda: 0.0, bracketed=False)
    assert plan.target == 4 * SATURATION_GROWTH
    plan = plan_probe(1000, lo=4, hi=65537, granularity=1, records=records,
                      limits=ProbeLimits(max_probe_seconds=100.0), now=lambda: 0.0, bracketed=False)
    assert plan.target == 1000


def test_limits_reject_a_cap_that_is_not_positive() -> None:
    with pytest.raises(InputError, match="max_probe_seconds"):
        ProbeLimits(max_probe_seconds=0.0)


# ----------------------------------------------------------------------------- the recipe fields


@pytest.mark.parametrize("line, pattern", [
    ("max_probe_seconds = -1", r"field 'batch\.max_probe_seconds': must be positive"),
    ("max_seconds = 0", r"field 'batch\.max_seconds': must be positive"),
    ('max_seconds = "soon"', r"field 'batch\.max_seconds': expected a number"),
    ("max_probe_second = 3", r"did you mean 'batch\.max_probe_seconds'"),
])
def test_bad_batch_limits_name_the_field(write_recipe, line: str, pattern: str) -> None:
    from autotune.core.recipe import load_recipe
    from tests.support import TINY

    path = write_recipe(TINY.format(kwargs="", variants='["eager"]') + f"[batch]\n{line}\n")
    with pytest.raises(RecipeError, match=pattern):
        load_recipe(path)


def test_batch_limits_round_trip_and_stay_out_of_the_json_form_unset(write_recipe) -> None:
    from autotune.core.recipe import Recipe, load_recipe
    from tests.support import TINY

    plain = load_recipe(write_recipe(TINY.format(kwargs="", variants='["eager"]')))
    assert "max_probe_seconds" not in plain.to_dict()["batch"]  # a study's fingerprint is unchanged
    text = TINY.format(kwargs="", variants='["eager"]') + "[batch]\nmax_probe_seconds = 2.5\nmax_seconds = 30\n"
    recipe = load_recipe(write_recipe(text))
    assert (recipe.batch.max_probe_seconds, recipe.batch.max_seconds) == (2.5, 30.0)
    assert Recipe.from_dict(recipe.to_dict()) == recipe


# ----------------------------------------------------------------------------- a run's shares and hints


def test_variant_share_is_twice_an_even_share_and_all_for_the_last() -> None:
    from autotune.variant_boundaries import variant_share

    assert variant_share(90.0, 7) == pytest.approx(90.0 * 2 / 8)
    assert variant_share(30.0, 1) == pytest.approx(30.0)
    assert variant_share(-5.0, 3) == 0.0


def test_saturation_hint_is_the_largest_batch_a_saturated_variant_probed() -> None:
    from autotune.variant_boundaries import saturation_hint

    docs = {"eager": {"stopped_by": "throughput", "max_batch_size": 256},
            "trace": {"stopped_by": "time_cap", "max_batch_size": 1024},  # cut short: says nothing of throughput
            "script": {"stopped_by": "throughput", "max_batch_size": 64}}
    assert saturation_hint(docs) == 256
    assert saturation_hint({"eager": {"stopped_by": "memory", "max_batch_size": 40}}) is None


def test_the_smallest_probes_one_reading_needs_two_probes_to_call_the_curve_flat() -> None:
    lucky = [_record(1, 0.01), _record(4, 0.06)]  # 100/s at 1 (a lucky reading), 67/s at 4
    assert saturated_at(lucky) is None
    assert saturated_at([*lucky, _record(16, 0.2)]) == 1  # 80/s at 16: two probes agree


def test_one_slow_first_reading_does_not_end_the_search_on_the_probe_cap() -> None:
    first = [_record(1, 4.0)]  # a disturbed first step: 4 s at batch 1
    plan = plan_probe(64, lo=1, hi=65537, granularity=1, records=first, limits=ProbeLimits(max_probe_seconds=5.0),
                      now=lambda: 0.0, bracketed=False)
    assert plan.target == 2 and plan.stopped_by is None
    plan = plan_probe(64, lo=2, hi=65537, granularity=1, records=[*first, _record(2, 8.0)],
                      limits=ProbeLimits(max_probe_seconds=5.0), now=lambda: 0.0, bracketed=False)
    assert plan.target is None and plan.stopped_by == "probe_cap"


def test_a_time_capped_variant_is_searched_up_to_the_hint_within_the_models_safe_side() -> None:
    from autotune.batch import MemoryModel
    from autotune.variant_boundaries import extended_batch

    def capped(stopped_by: str, low: float) -> BatchBoundary:
        return BatchBoundary(max_batch_size=1, granularity=1, upper_bound=65536, hit_upper_bound=False, probes=(),
                             model=MemoryModel(800e6, 1e6), memory_limit_bytes=int(800e6 + 1e6 * low),
                             stopped_by=stopped_by, predicted_limit=(low, low * 2))

    assert extended_batch(capped("time_cap", 173.0), hint=64, headroom=0.1) == 64
    assert extended_batch(capped("time_cap", 50.0), hint=64, headroom=0.1) == 45  # the safe side, less headroom
    assert extended_batch(capped("probe_cap", 173.0), hint=64, headroom=0.1) is None  # bigger is too slow
    assert extended_batch(capped("time_cap", 173.0), hint=None, headroom=0.1) is None


def test_the_peak_joins_the_grid_and_is_where_each_environment_of_its_variant_starts() -> None:
    from autotune.variant_boundaries import preferred_batches, with_peak

    assert with_peak([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 708], 177) == (
        1, 2, 4, 8, 16, 32, 64, 128, 177, 256, 512, 708)
    assert with_peak([1, 2, 4], 4) == (1, 2, 4) and with_peak([1, 2, 4], None) == (1, 2, 4)
    assert with_peak([1, 2, 4], 9) == (1, 2, 4)  # above the usable range (headroom): not a candidate
    docs = {"onnx": {"throughput_peak": 177}, "eager": {"stopped_by": "time_cap"}}
    sizes = {"onnx": (1, 177, 708), "onnx+jemalloc": (1, 177, 708), "eager": (1, 64)}
    assert preferred_batches(docs, sizes, {"onnx+jemalloc": "onnx"}) == {"onnx": 177, "onnx+jemalloc": 177}
