from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Callable

import pytest

from autotune.batch import (
    RELATIVE_NOISE,
    SLACK,
    BatchBoundary,
    MemoryModel,
    ProbeRecord,
    ProbeResult,
    candidate_batch_sizes,
    find_max_batch_size,
    fit_memory_model,
)
from autotune.errors import BatchSearchError, InputError
from autotune.testing import SyntheticProbe

GIB = 1024**3
TOP = 65536


def make_probe(seed: int, boundary: int, *, noise: float, fragmentation: float = 0.0) -> SyntheticProbe:
    rng = random.Random(f"probe:{seed}")
    limit = rng.uniform(1, 80) * GIB
    intercept = rng.uniform(0.0, 0.9) * limit
    position = rng.random()
    per_sample = (limit - intercept) / ((boundary + position) * (1 + fragmentation))
    return SyntheticProbe(
        boundary=boundary,
        intercept_bytes=intercept,
        bytes_per_sample=per_sample,
        noise=noise,
        fragmentation=fragmentation,
        position=position,
        seed=seed,
    )


def log_uniform_boundaries(count: int, *, low: int, seed: int) -> list[int]:
    rng = random.Random(f"boundaries:{seed}")
    return [int(math.exp(rng.uniform(math.log(low), math.log(TOP + 1)))) for _ in range(count)]


def worst_case_probes(top_steps: int) -> int:
    """The documented bound: growth <= log2(K) + 1 + SLACK, bracket <= ceil(log2(width)) + SLACK."""
    bits = math.ceil(math.log2(top_steps + 1))
    return 2 * bits + 2 + 2 * SLACK


def assert_confirmed(result: BatchBoundary, fits: Callable[[int], bool]) -> None:
    """The answer was probed and fit; the next step up was probed and failed (unless at the bound);
    nothing was probed above a failure; every record matches the probe."""
    by_size = {record.batch_size: record for record in result.probes}
    assert by_size[result.max_batch_size].fits
    if result.hit_upper_bound:
        assert result.max_batch_size == result.upper_bound
    else:
        assert not by_size[result.max_batch_size + result.granularity].fits
    smallest_failure = math.inf
    for record in result.probes:
        assert record.batch_size < smallest_failure
        assert record.batch_size % result.granularity == 0
        assert record.fits == fits(record.batch_size)
        if not record.fits:
            smallest_failure = min(smallest_failure, record.batch_size)
    assert len(by_size) == len(result.probes), "no batch size is probed twice"


@pytest.mark.parametrize("granularity", [1, 8])
@pytest.mark.parametrize("known_limit", [True, False])
@pytest.mark.parametrize(("noise", "fragmentation"), [(0.0, 0.0), (0.02, 0.0), (0.01, 0.05)])
def test_exact_boundary_on_seeded_fake_probes(
    granularity: int, known_limit: bool, noise: float, fragmentation: float
) -> None:
    edges = [granularity, granularity + 1, 2 * granularity - 1, 2 * granularity, 1000, TOP - 1, TOP]
    boundaries = log_uniform_boundaries(40, low=granularity, seed=granularity) + edges
    for seed, boundary in enumerate(boundaries):
        probe = make_probe(seed, boundary, noise=noise, fragmentation=fragmentation)
        limit = probe.memory_limit_bytes if known_limit else None
        result = find_max_batch_size(probe, granularity=granularity, memory_limit_bytes=limit)
        assert result.max_batch_size == boundary // granularity * granularity, (seed, boundary)
        assert result.hit_upper_bound == (boundary // granularity == TOP // granularity)
        assert_confirmed(result, lambda b, boundary=boundary: b <= boundary)
        assert len(result.probes) <= worst_case_probes(TOP // granularity)


def test_known_limit_and_exact_model_needs_few_probes() -> None:
    # Exact readings, and the caller says so (noise_bytes=0): batch 1, the safe jump a single peak
    # allows, the model's aim, its confirmation, and at most two more where the jump landed close.
    counts = []
    for seed, boundary in enumerate(log_uniform_boundaries(100, low=1, seed=7)):
        probe = make_probe(seed, boundary, noise=0.0)
        result = find_max_batch_size(probe, memory_limit_bytes=probe.memory_limit_bytes, noise_bytes=0)
        assert result.max_batch_size == boundary
        counts.append(len(result.probes))
        assert len(result.probes) <= 6, [r.batch_size for r in result.probes]
        # the second probe is at most the bound the first peak proves (bytes per sample <= peak / batch)
        # and, the intercept being >= 0, it fits
        first, second = result.probes[0], result.probes[1]
        assert first.peak_memory_bytes is not None
        proven = max(2, probe.memory_limit_bytes // first.peak_memory_bytes)
        assert second.batch_size <= proven and (second.fits or boundary == 1)
    assert sorted(counts)[50] <= 5


def test_default_noise_costs_a_few_approach_probes_on_exact_readings() -> None:
    # Without noise_bytes the search assumes readings move by 0.25% of the limit and approaches
    # from below before aiming: more probes than with exact readings, but never a wrong answer.
    for seed, boundary in enumerate(log_uniform_boundaries(100, low=1, seed=7)):
        probe = make_probe(seed, boundary, noise=0.0)
        result = find_max_batch_size(probe, memory_limit_bytes=probe.memory_limit_bytes)
        assert result.max_batch_size == boundary
        assert len(result.probes) <= 9, [r.batch_size for r in result.probes]


def test_known_limit_uses_fewer_probes_than_doubling_and_bisecting() -> None:
    with_limit: list[int] = []
    without: list[int] = []
    for seed, boundary in enumerate(log_uniform_boundaries(100, low=1, seed=11)):
        probe = make_probe(seed, boundary, noise=0.01)
        with_limit.append(len(find_max_batch_size(probe, memory_limit_bytes=probe.memory_limit_bytes).probes))
        without.append(len(find_max_batch_size(probe).probes))
    assert sorted(with_limit)[50] < sorted(without)[50]
    assert sum(with_limit) < 0.6 * sum(without)


def test_without_limit_doubles_then_bisects() -> None:
    probe = make_probe(0, 300, noise=0.0)
    result = find_max_batch_size(probe)
    sizes = [record.batch_size for record in result.probes]
    assert sizes[:10] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert sizes[10:] == [384, 320, 288, 304, 296, 300, 302, 301]
    assert result.max_batch_size == 300


def systematically_wrong_probe(boundary: int, error: int) -> tuple[Callable[[int], ProbeResult], int]:
    """Exact affine peaks, but the line meets the limit ``error`` batches away from the boundary
    (negative: the model predicts too few, as when peaks are over-reported; positive: too many,
    as when the limit passed is the total memory and part of it is taken)."""
    limit = 10 * GIB
    intercept = 0.3 * limit
    per_sample = (limit - intercept) / (boundary + error + 0.5)

    def probe(batch_size: int) -> ProbeResult:
        if batch_size > boundary:
            return ProbeResult(fits=False, error="out of memory")
        return ProbeResult(fits=True, peak_memory_bytes=int(intercept + per_sample * batch_size))

    return probe, limit


@pytest.mark.parametrize("boundary", [1000, 30_000])
@pytest.mark.parametrize("error", [-1, -3, -10, -30, -300, 1, 2, 3, 5])
def test_systematic_model_error_costs_logarithmic_probes(boundary: int, error: int) -> None:
    # Gallop: each probe the model gets wrong doubles the next step away from it, and doubles the
    # spread the bracket phase gives the model. An overestimate ends the approach with a failure
    # just above the boundary; the search then bisects the model's own band (its relative noise,
    # ±2σ), which a model that is right up to e batches cannot tell from a noisy one.
    probe, limit = systematically_wrong_probe(boundary, error)
    result = find_max_batch_size(probe, memory_limit_bytes=limit, noise_bytes=0)
    assert result.max_batch_size == boundary
    assert_confirmed(result, lambda b: b <= boundary)
    band = math.ceil(math.log2(1 + 4 * RELATIVE_NOISE * boundary)) if error > 0 else 0
    assert len(result.probes) <= 5 + 2 * math.ceil(math.log2(abs(error) + 1)) + band


def test_misleading_peaks_cost_at_most_the_documented_bound() -> None:
    # Peaks that say nothing true about memory: the model is wrong everywhere, the answer is still exact.
    for seed, boundary in enumerate(log_uniform_boundaries(60, low=1, seed=3)):
        rng = random.Random(seed)

        def probe(batch_size: int, boundary: int = boundary, rng: random.Random = rng) -> ProbeResult:
            if batch_size > boundary:
                return ProbeResult(fits=False, error="out of memory")
            return ProbeResult(fits=True, peak_memory_bytes=rng.randint(1, 10 * GIB))

        result = find_max_batch_size(probe, memory_limit_bytes=5 * GIB)
        assert result.max_batch_size == boundary
        assert_confirmed(result, lambda b, boundary=boundary: b <= boundary)
        assert len(result.probes) <= worst_case_probes(TOP)


def test_concave_memory_curve_does_not_creep() -> None:
    # An affine model fitted to a concave curve keeps predicting just above the last fit; the
    # doubling envelope stops it from creeping up one small step at a time.
    limit = 10 * GIB
    for boundary in (7, 300, 50_000):

        def probe(batch_size: int, boundary: int = boundary) -> ProbeResult:
            if batch_size > boundary:
                return ProbeResult(fits=False, error="out of memory")
            return ProbeResult(fits=True, peak_memory_bytes=int(limit * (batch_size / boundary) ** 0.3))

        result = find_max_batch_size(probe, memory_limit_bytes=limit)
        assert result.max_batch_size == boundary
        assert len(result.probes) <= worst_case_probes(TOP)


def test_batch_one_not_fitting_is_a_clear_error() -> None:
    def probe(batch_size: int) -> ProbeResult:
        return ProbeResult(fits=False, peak_memory_bytes=3 * GIB, error="over budget")

    with pytest.raises(BatchSearchError) as excinfo:
        find_max_batch_size(probe, memory_limit_bytes=2 * GIB)
    message = str(excinfo.value)
    assert "batch size 1 does not fit" in message
    assert "3.00 GiB" in message and "2.00 GiB" in message and "over budget" in message

    with pytest.raises(BatchSearchError, match=r"batch size 8 does not fit.*granularity 8"):
        find_max_batch_size(lambda b: ProbeResult(fits=b < 8), granularity=8)


def test_upper_bound_reached_without_oom() -> None:
    probe = make_probe(1, 10**6, noise=0.01)
    result = find_max_batch_size(probe, max_batch_size=1000, memory_limit_bytes=probe.memory_limit_bytes)
    assert result.hit_upper_bound and result.max_batch_size == result.upper_bound == 1000
    assert max(record.batch_size for record in result.probes) == 1000
    assert_confirmed(result, lambda b: True)

    eights = find_max_batch_size(probe, granularity=8, max_batch_size=1001)
    assert eights.upper_bound == eights.max_batch_size == 1000 and eights.hit_upper_bound

    single = find_max_batch_size(probe, max_batch_size=1)
    assert single.max_batch_size == 1 and single.hit_upper_bound and len(single.probes) == 1


def test_non_monotone_probe_gets_a_confirmed_local_boundary() -> None:
    # Fits at 1..100 and again at 150..200: the search trusts the first failure it sees and never
    # probes above it, so the answer is a batch that fits with the next one failing.
    def fits(batch_size: int) -> bool:
        return batch_size <= 100 or 150 <= batch_size <= 200

    for limit in (None, 2 * GIB):
        result = find_max_batch_size(
            lambda b: ProbeResult(fits=fits(b), peak_memory_bytes=GIB // 400 * b if fits(b) else None),
            memory_limit_bytes=limit,
        )
        assert result.max_batch_size in (100, 200)
        assert_confirmed(result, fits)

    for seed in range(30):  # a flaky probe: random answers, still a confirmed pair every time
        rng = random.Random(seed)
        answers = {1: True}

        def flaky(batch_size: int, answers: dict[int, bool] = answers, rng: random.Random = rng) -> bool:
            return answers.setdefault(batch_size, rng.random() < 0.7)

        result = find_max_batch_size(lambda b, flaky=flaky: ProbeResult(fits=flaky(b)), max_batch_size=5000)
        assert_confirmed(result, flaky)


def test_probe_errors_propagate() -> None:
    def probe(batch_size: int) -> ProbeResult:
        if batch_size > 10:
            raise RuntimeError("worker crashed")
        return ProbeResult(fits=True, peak_memory_bytes=batch_size * 1000)

    with pytest.raises(RuntimeError, match="worker crashed"):
        find_max_batch_size(probe)
    with pytest.raises(TypeError, match="expected ProbeResult"):
        find_max_batch_size(lambda b: True)  # type: ignore[arg-type, return-value]


def test_probe_wall_time_comes_from_the_clock() -> None:
    now = [100.0]

    def clock() -> float:
        return now[0]

    def probe(batch_size: int) -> ProbeResult:
        now[0] += 0.25 + batch_size / 1000
        return ProbeResult(fits=batch_size <= 77, peak_memory_bytes=batch_size * 10)

    result = find_max_batch_size(probe, clock=clock)
    assert result.max_batch_size == 77
    for record in result.probes:
        assert record.seconds == pytest.approx(0.25 + record.batch_size / 1000)


def test_anomaly_recorded_when_a_fit_peaks_above_the_limit() -> None:
    def probe(batch_size: int) -> ProbeResult:
        return ProbeResult(fits=batch_size <= 40, peak_memory_bytes=batch_size * 100)

    result = find_max_batch_size(probe, memory_limit_bytes=2000)
    assert result.max_batch_size == 40  # the probe's verdict is trusted over the limit
    assert any("batch 40 fit but peaked" in note for note in result.anomalies)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"granularity": 0}, "granularity"),
        ({"granularity": 8, "max_batch_size": 7}, "max_batch_size"),
        ({"max_batch_size": True}, "max_batch_size"),
        ({"memory_limit_bytes": 0}, "memory_limit_bytes"),
    ],
)
def test_bad_options_are_input_errors(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}: "):
        find_max_batch_size(lambda b: ProbeResult(fits=True), **kwargs)  # type: ignore[arg-type]


def boundary_value(max_batch_size: int, granularity: int = 1, **changes: object) -> BatchBoundary:
    values: dict[str, object] = {
        "max_batch_size": max_batch_size,
        "granularity": granularity,
        "upper_bound": TOP,
        "hit_upper_bound": False,
        "probes": (),
        "model": None,
        "memory_limit_bytes": None,
    }
    values.update(changes)
    return BatchBoundary(**values)  # type: ignore[arg-type]


def test_headroom_rule() -> None:
    assert boundary_value(1000).usable_max_batch_size() == 900
    assert boundary_value(1000).usable_max_batch_size(0.25) == 750
    assert boundary_value(1000).usable_max_batch_size(0.0) == 1000
    assert boundary_value(1000, 8).usable_max_batch_size() == 896  # floor(900 / 8) * 8
    assert boundary_value(1).usable_max_batch_size() == 1  # never below the smallest batch
    assert boundary_value(8, 8).usable_max_batch_size() == 8
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(InputError, match="headroom"):
            boundary_value(1000).usable_max_batch_size(bad)


def test_headroom_at_the_upper_bound_uses_the_model_when_it_can() -> None:
    model = MemoryModel(intercept_bytes=1000.0, bytes_per_sample=10.0)
    far = boundary_value(
        512, upper_bound=512, hit_upper_bound=True, model=model, memory_limit_bytes=1_000_000
    )
    assert far.usable_max_batch_size() == 512  # the model puts the boundary near 99,900
    near = boundary_value(512, upper_bound=512, hit_upper_bound=True, model=model, memory_limit_bytes=6500)
    assert near.usable_max_batch_size() == math.floor(0.9 * 550)  # the model puts it at 550
    blind = boundary_value(512, upper_bound=512, hit_upper_bound=True)
    assert blind.usable_max_batch_size() == math.floor(0.9 * 512)


def test_to_dict_is_json_with_the_report_fields() -> None:
    probe = make_probe(5, 1234, noise=0.01)
    result = find_max_batch_size(probe, granularity=8, memory_limit_bytes=probe.memory_limit_bytes)
    data = json.loads(json.dumps(result.to_dict(headroom=0.2)))
    assert {
        "max_batch_size",
        "usable_max_batch_size",
        "headroom",
        "granularity",
        "upper_bound",
        "hit_upper_bound",
        "memory_limit_bytes",
        "probes",
        "model",
    } <= set(data)
    assert data["max_batch_size"] == 1232 and data["headroom"] == 0.2
    assert data["usable_max_batch_size"] == result.usable_max_batch_size(0.2)
    assert len(data["probes"]) == len(result.probes)
    assert set(data["probes"][0]) == {
        "phase",
        "batch_size",
        "fits",
        "peak_memory_bytes",
        "baseline_bytes",
        "seconds",
        "error",
    }
    assert set(data["model"]) == {"intercept_bytes", "bytes_per_sample"}


def test_memory_model_fit_recovers_an_affine_line() -> None:
    records = [ProbeRecord(b, True, 5000 + 300 * b, 0.0, None) for b in (1, 7, 64)]
    records.append(ProbeRecord(500, False, 10, 0.0, "out of memory"))  # failures are not fitted
    model = fit_memory_model(records)
    assert model is not None
    assert model.intercept_bytes == pytest.approx(5000)
    assert model.bytes_per_sample == pytest.approx(300)
    assert model.predict(10) == pytest.approx(8000)
    assert model.max_batch_for(8000) == 10
    assert model.max_batch_for(8299) == 10
    assert model.max_batch_for(100) == 0


def test_memory_model_needs_two_batch_sizes_and_a_positive_slope() -> None:
    assert fit_memory_model([]) is None
    assert fit_memory_model([ProbeRecord(4, True, 100, 0.0, None)] * 3) is None
    assert (
        fit_memory_model([ProbeRecord(4, True, None, 0.0, None), ProbeRecord(8, True, 90, 0.0, None)]) is None
    )
    flat = [ProbeRecord(1, True, 100, 0.0, None), ProbeRecord(9, True, 100, 0.0, None)]
    assert fit_memory_model(flat) is None
    with pytest.raises(ValueError):
        MemoryModel(intercept_bytes=0.0, bytes_per_sample=0.0)


def test_candidate_batch_sizes() -> None:
    assert candidate_batch_sizes(1000) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    assert candidate_batch_sizes(1024) == [2**i for i in range(11)]
    assert candidate_batch_sizes(1) == [1]
    assert candidate_batch_sizes(1000, granularity=8) == [8, 16, 32, 64, 128, 256, 512, 1000]
    assert candidate_batch_sizes(24, granularity=8) == [8, 16, 24]
    with pytest.raises(InputError):
        candidate_batch_sizes(4, granularity=8)
    with pytest.raises(InputError):
        candidate_batch_sizes(0)


def test_synthetic_probe_is_deterministic_and_consistent() -> None:
    probe = make_probe(3, 500, noise=0.05)
    assert probe(200) == probe(200)
    assert all(probe(b).fits for b in (1, 250, 500)) and not probe(501).fits
    assert all(probe(b).peak_memory_bytes <= probe.memory_limit_bytes for b in range(1, 501, 7))  # type: ignore[operator]


# --- the CPU failure mode: a large intercept, absolute noise, a baseline reading ----------------

MIB = 1024**2


def make_cpu_probe(
    seed: int,
    boundary: int,
    *,
    noise_bytes: float = 4 * MIB,
    failure_peaks: bool = True,
    baseline: bool = True,
) -> SyntheticProbe:
    """A budget of 1-8 GiB of which the runtime and model take 20-70% (reported as the baseline),
    a per-probe overhead of up to 5% above it, absolute noise on every reading."""
    rng = random.Random(f"cpu:{seed}")
    limit = rng.uniform(1, 8) * GIB
    base = rng.uniform(0.2, 0.7) * limit
    intercept = base + rng.uniform(0.0, 0.05) * limit
    position = rng.random()
    return SyntheticProbe(
        boundary=boundary,
        intercept_bytes=intercept,
        bytes_per_sample=(limit - intercept) / (boundary + position),
        noise=0.01,
        position=position,
        seed=seed,
        noise_bytes=noise_bytes,
        baseline_bytes=base if baseline else None,
        failure_peaks=failure_peaks,
    )


@pytest.mark.parametrize("granularity", [1, 8])
@pytest.mark.parametrize("failure_peaks", [True, False])
@pytest.mark.parametrize("baseline", [True, False])
def test_exact_and_no_overshoot_on_cpu_like_fake_probes(
    granularity: int, failure_peaks: bool, baseline: bool
) -> None:
    edges = [granularity, 2 * granularity, 1000, TOP - 1, TOP]
    overshoots = []
    for seed, boundary in enumerate(log_uniform_boundaries(40, low=granularity, seed=5) + edges):
        probe = make_cpu_probe(seed, boundary, failure_peaks=failure_peaks, baseline=baseline)
        result = find_max_batch_size(
            probe, granularity=granularity, memory_limit_bytes=probe.memory_limit_bytes
        )
        expected = boundary // granularity * granularity
        assert result.max_batch_size == expected, (seed, boundary)
        assert_confirmed(result, lambda b, boundary=boundary: b <= boundary)
        assert len(result.probes) <= worst_case_probes(TOP // granularity)
        if expected >= 32 * granularity:
            overshoots.append(max(r.batch_size for r in result.probes) / (expected + granularity))
    # no probe far above the boundary: the costly, OOM-killer-risking kind on a real machine
    assert max(overshoots) <= 1.1, sorted(overshoots)[-5:]


def efficientnet_replay(seed: int, *, baseline: bool = True) -> Callable[[int], ProbeResult]:
    """Peaks measured for efficientnet_b0 on CPU against a 2 GiB budget (MiB, linear in between):
    a 740 MiB baseline, 6 MiB between batches 1 and 2, a 200 MiB step between 66 and 67 and a
    non-monotone stretch above; readings with 3 MiB of noise. The boundary is 66."""
    measured = [
        (1, 763.13),
        (2, 769.03),
        (66, 1894.0),
        (67, 2120.0),
        (68, 2140.0),
        (70, 2109.0),
        (74, 2099.0),
        (82, 2253.0),
        (98, 2294.0),
        (130, 2570.0),
        (212, 3523.0),
        (216, 3471.0),
        (218, 3502.0),
        (256, 3900.0),
    ]

    def probe(batch_size: int) -> ProbeResult:
        for (b0, p0), (b1, p1) in zip(measured, measured[1:], strict=False):
            if b0 <= batch_size <= b1:
                peak = p0 + (p1 - p0) * (batch_size - b0) / (b1 - b0)
                break
        rng = random.Random(f"{seed}:{batch_size}")
        peak_bytes = int((peak + rng.gauss(0, 3)) * MIB)
        base = int((740 + rng.gauss(0, 1)) * MIB) if baseline else None
        return ProbeResult(fits=batch_size <= 66, peak_memory_bytes=peak_bytes, baseline_bytes=base)

    return probe


@pytest.mark.parametrize(("baseline", "largest"), [(True, 80), (False, 90)])
def test_the_efficientnet_case_does_not_jump_past_the_boundary(baseline: bool, largest: int) -> None:
    # Before: 1, 2, then 218 (3.3x the boundary), 216, 212, 130, ... 13 probes, 1,418 samples probed.
    # Without a baseline the slope between batches 1 and 2 (6 MiB, the curve is convex there) is
    # all there is until the third probe, and the band cannot know about the curvature: the first
    # jump may land 1.3x past the boundary; with the baseline, (peak - baseline) / 2 is 14.5 MiB.
    for seed in range(10):
        result = find_max_batch_size(
            efficientnet_replay(seed, baseline=baseline), max_batch_size=256, memory_limit_bytes=2048 * MIB
        )
        sizes = [r.batch_size for r in result.probes]
        assert result.max_batch_size == 66
        assert max(sizes) <= largest, sizes
        assert sum(sizes) <= 600, sizes
        assert len(sizes) <= 10, sizes


def test_the_baseline_anchors_the_first_jump() -> None:
    # A runtime of 70% of the limit: without a baseline one peak proves only boundary >= L / peak(1),
    # about 1.4; with it, (peak - baseline) / 1 bounds the bytes per sample, and the jump goes far
    # (to where the band's upper edge, 2 MiB of noise per sample above the line, meets the limit).
    limit = 4 * GIB
    exact = SyntheticProbe(
        boundary=500,
        intercept_bytes=0.7 * limit,
        bytes_per_sample=0.3 * limit / 500.5,
        baseline_bytes=0.7 * limit,
    )
    blind = SyntheticProbe(boundary=500, intercept_bytes=0.7 * limit, bytes_per_sample=0.3 * limit / 500.5)
    anchored = find_max_batch_size(exact, memory_limit_bytes=exact.memory_limit_bytes, noise_bytes=MIB)
    unanchored = find_max_batch_size(blind, memory_limit_bytes=blind.memory_limit_bytes, noise_bytes=MIB)
    assert anchored.max_batch_size == unanchored.max_batch_size == 500
    assert anchored.probes[1].fits and anchored.probes[1].batch_size >= 250
    assert unanchored.probes[1].batch_size <= 2
    assert len(anchored.probes) < len(unanchored.probes)
    assert all(r.baseline_bytes is not None for r in anchored.probes)


def test_a_failure_peak_above_the_limit_drives_the_interpolation() -> None:
    # Exact affine memory, failures report their full peak: the secant through the bracket's ends
    # lands on the boundary, so one failure costs at most two more probes.
    for seed, boundary in enumerate(log_uniform_boundaries(30, low=4, seed=9)):
        probe = make_cpu_probe(seed, boundary, noise_bytes=0.0)
        probe = SyntheticProbe(**{**probe.__dict__, "noise": 0.0})
        result = find_max_batch_size(probe, memory_limit_bytes=probe.memory_limit_bytes, noise_bytes=0)
        first_failure = next(i for i, r in enumerate(result.probes) if not r.fits)
        assert result.max_batch_size == boundary
        assert len(result.probes) - first_failure <= 3, [r.batch_size for r in result.probes]


def test_curved_memory_with_failure_peaks_does_not_stall() -> None:
    # Convex memory: every secant lands below the crossing, plain regula falsi would creep up one
    # step at a time; the Illinois weighting and the gallop keep it logarithmic.
    limit = 10 * GIB
    for boundary in (50, 700, 20_000):

        def probe(batch_size: int, boundary: int = boundary) -> ProbeResult:
            peak = int(0.2 * limit + 0.8 * limit * ((batch_size / (boundary + 0.5)) ** 3))
            return ProbeResult(
                fits=batch_size <= boundary, peak_memory_bytes=peak, baseline_bytes=int(0.2 * limit)
            )

        result = find_max_batch_size(probe, memory_limit_bytes=limit)
        assert result.max_batch_size == boundary
        assert len(result.probes) <= 2 * math.ceil(math.log2(boundary)) + 4, [
            r.batch_size for r in result.probes
        ]


def test_memory_model_with_one_batch_size_uses_the_baseline() -> None:
    records = [ProbeRecord(4, True, 1000 + 4 * 50, 0.0, None, baseline_bytes=1000)]
    model = fit_memory_model(records)
    assert model is not None
    assert model.intercept_bytes == 1000 and model.bytes_per_sample == pytest.approx(50)
    assert fit_memory_model([ProbeRecord(4, True, 900, 0.0, None, baseline_bytes=1000)]) is None


def test_synthetic_probe_cpu_fields() -> None:
    probe = make_cpu_probe(2, 300)
    low, high = probe(10), probe(301)
    assert low == probe(10) and high == probe(301)
    assert low.fits and low.baseline_bytes is not None and low.peak_memory_bytes is not None
    assert abs(low.baseline_bytes - probe.baseline_bytes) < 40 * MIB  # type: ignore[operator]
    assert not high.fits and high.peak_memory_bytes is not None
    assert high.peak_memory_bytes > probe.memory_limit_bytes
    quiet = SyntheticProbe(**{**probe.__dict__, "failure_peaks": False})
    assert quiet(301).peak_memory_bytes is None


def test_bad_noise_is_an_input_error() -> None:
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(InputError, match=r"^noise_bytes: "):
            find_max_batch_size(lambda b: ProbeResult(fits=True), memory_limit_bytes=100, noise_bytes=bad)


def test_refine_fixes_an_answer_the_cheap_probes_got_slightly_wrong() -> None:
    from autotune.batch import refine_max_batch_size

    cheap = SyntheticProbe(boundary=500, intercept_bytes=1e8, bytes_per_sample=1e6, seed=1)
    rough = find_max_batch_size(cheap, granularity=1, memory_limit_bytes=cheap.memory_limit_bytes)
    assert rough.max_batch_size == 500
    for true in (488, 500, 517):  # the faithful probe disagrees a little (or not at all)
        faithful = SyntheticProbe(boundary=true, intercept_bytes=1e8, bytes_per_sample=1e6, seed=2)
        fixed = refine_max_batch_size(faithful, rough)
        assert fixed.max_batch_size == true
        confirm = [p for p in fixed.probes if p.phase == "confirm"]
        assert {(p.batch_size, p.fits) for p in confirm} >= {(true, True), (true + 1, False)}
        assert len(confirm) <= 12


def test_refine_follows_the_fresh_peaks_instead_of_galloping() -> None:
    """Fresh processes read a constant offset above the reused worker's line (5-20 MiB measured on a wide
    MLP): their peaks say where their boundary is, so a handful of fresh probes settle it exactly."""
    from autotune.batch import refine_max_batch_size

    mib = 2**20
    per_sample, intercept, limit = 66_000.0, 800 * mib, 1536 * mib
    cheap = SyntheticProbe(boundary=int((limit - intercept) / per_sample), intercept_bytes=intercept,
                           bytes_per_sample=per_sample, seed=3)
    rough = find_max_batch_size(cheap, granularity=1, memory_limit_bytes=cheap.memory_limit_bytes)
    for offset_mib, noise_mib in ((21.7, 0.5), (5.0, 1.0), (-8.0, 0.5), (0.0, 0.0)):
        rng = random.Random(offset_mib)

        def fresh(b: int, off: float = offset_mib * mib, noise: float = noise_mib * mib,
                  rng: random.Random = rng) -> ProbeResult:
            peak = intercept + off + per_sample * b + rng.gauss(0.0, noise)  # a budget check: full peaks
            return ProbeResult(fits=peak <= cheap.memory_limit_bytes, peak_memory_bytes=int(peak))

        fixed = refine_max_batch_size(fresh, rough)
        b = fixed.max_batch_size
        confirm = [p for p in fixed.probes if p.phase == "confirm"]
        assert {(p.batch_size, p.fits) for p in confirm} >= {(b, True), (b + 1, False)}
        expected = (cheap.memory_limit_bytes - intercept - offset_mib * mib) / per_sample
        assert abs(b - expected) <= 3 * noise_mib * mib / per_sample + 1, (offset_mib, b, expected)
        # fit/fail alone (no slope to read the peaks with) on the same fresh world, for comparison
        blind = refine_max_batch_size(fresh, dataclasses.replace(rough, model=None))
        blind_count = sum(1 for p in blind.probes if p.phase == "confirm")
        assert len(confirm) <= 10, (offset_mib, [(p.batch_size, p.fits) for p in confirm])
        assert len(confirm) < blind_count or blind_count <= 3, (offset_mib, len(confirm), blind_count)


def test_a_worker_that_crashed_past_a_size_that_ran_is_a_probe_that_does_not_fit() -> None:
    """The classification both boundaries use (the real worker's crash: tests/test_batch_real.py): a fault of the
    worker's own, not a timeout or a kill, and never SIGILL (an instruction this CPU lacks is no size's doing)."""
    from autotune.batch import CRASH_PREFIX, crashed_past
    from autotune.runner import WorkerCrash

    assert WorkerCrash("worker died with SIGSEGV", signal="SIGSEGV").crashed
    assert WorkerCrash("worker died with SIGABRT", signal="SIGABRT").crashed
    assert not WorkerCrash("timed out", signal="SIGKILL", timed_out=True).crashed
    assert not WorkerCrash("worker died with SIGKILL", signal="SIGKILL").crashed  # the OOM killer: its own rule
    assert not WorkerCrash("worker died with SIGILL", signal="SIGILL").crashed
    assert not WorkerCrash("exited with 3", exit_code=3).crashed
    got = crashed_past("worker died with SIGSEGV", "48 sequences")
    assert not got.fits and got.peak_memory_bytes is None
    assert got.error is not None and got.error.startswith(CRASH_PREFIX) and "48 sequences ran" in got.error
