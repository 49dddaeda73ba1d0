from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import pytest

from autotune.batch import (
    SLACK,
    BatchBoundary,
    MemoryModel,
    ProbeRecord,
    ProbeResult,
    SyntheticProbe,
    candidate_batch_sizes,
    find_max_batch_size,
    fit_memory_model,
)
from autotune.errors import BatchSearchError, InputError

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
    # batch 1, the bound a >= 0 proves, the model's jump, its confirmation (+1 when the bound was exact)
    for seed, boundary in enumerate(log_uniform_boundaries(100, low=1, seed=7)):
        probe = make_probe(seed, boundary, noise=0.0)
        result = find_max_batch_size(probe, memory_limit_bytes=probe.memory_limit_bytes)
        assert result.max_batch_size == boundary
        assert len(result.probes) <= 5, [r.batch_size for r in result.probes]
        # the second probe is the bound the first peak proves (bytes per sample <= peak / batch)
        first, second = result.probes[0], result.probes[1]
        assert first.peak_memory_bytes is not None
        proven = max(2, probe.memory_limit_bytes // first.peak_memory_bytes)
        assert second.batch_size == proven and second.fits == (proven <= boundary)


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
    # Gallop: each probe the model gets wrong doubles the next step away from it. For an
    # overestimate the first failure leaves lo far below, so the window caps the gallop at SLACK
    # guesses; larger overestimates cost up to a bisection of that bracket (see find_max_batch_size).
    probe, limit = systematically_wrong_probe(boundary, error)
    result = find_max_batch_size(probe, memory_limit_bytes=limit)
    assert result.max_batch_size == boundary
    assert_confirmed(result, lambda b: b <= boundary)
    assert len(result.probes) <= 5 + 2 * math.ceil(math.log2(abs(error) + 1))


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
    assert set(data["probes"][0]) == {"batch_size", "fits", "peak_memory_bytes", "seconds", "error"}
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
