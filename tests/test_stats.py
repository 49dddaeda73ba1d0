"""Confidence intervals under autocorrelation, percentiles, and the Measurement value object."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autotune.core.measurement import SECONDS_FORMAT, Measurement, decode_seconds, encode_seconds
from autotune.core.stats import (
    batch_statistics_ci,
    block_bootstrap_ci,
    bootstrap_means,
    bootstrap_percentiles,
    choose_block_length,
    lag1_autocorrelation,
    normal_quantile,
    percentiles,
    replicate_interval,
)
from autotune.core.warmup import analyze
from autotune.errors import InputError
from autotune.traces import synthetic_trace


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    e = rng.standard_normal(n)
    out = np.empty(n)
    out[0] = e[0] / math.sqrt(1 - phi * phi)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + e[i]
    return out


def test_normal_quantile() -> None:
    assert normal_quantile(0.975) == pytest.approx(1.959963985, abs=1e-8)
    assert normal_quantile(0.5) == pytest.approx(0.0, abs=1e-12)
    assert normal_quantile(0.01) == pytest.approx(-2.326347874, abs=1e-8)
    with pytest.raises(ValueError):
        normal_quantile(1.0)


def test_block_length_follows_the_autocorrelation() -> None:
    rng = np.random.default_rng(0)
    iid = rng.standard_normal(2000)
    assert choose_block_length(iid) <= 2
    lengths = [choose_block_length(_ar1(rng, 2000, phi)) for phi in (0.3, 0.7, 0.9)]
    assert lengths == sorted(lengths) and lengths[-1] > 3 * lengths[0]
    assert lag1_autocorrelation(_ar1(rng, 5000, 0.7)) == pytest.approx(0.7, abs=0.05)


def test_bootstrap_ci_covers_the_mean_of_ar1_noise() -> None:
    """Coverage of the 95% interval on AR(1) noise (phi 0.7) is near nominal; the naive i.i.d.
    interval on the same data covers far less, so this test would catch a block-length bug."""
    rng = np.random.default_rng(42)
    reps, n, phi = 150, 800, 0.7
    hits_block = hits_naive = 0
    for rep in range(reps):
        x = 1.0 + 0.05 * _ar1(rng, n, phi)  # true mean 1.0
        lo, hi = block_bootstrap_ci(x, n_boot=400, seed=rep)
        hits_block += lo <= 1.0 <= hi
        half = 1.96 * x.std(ddof=1) / math.sqrt(n)
        hits_naive += abs(x.mean() - 1.0) <= half
    assert 0.85 <= hits_block / reps <= 0.995
    assert hits_naive / reps < 0.75


def _wandering(rng: np.random.Generator, n: int, tau: float) -> np.ndarray:
    """Level 1.0 + AR(1) noise (phi 0.3, sd 2%) + a slow mean-reverting wander (time constant ``tau`` calls, sd
    1%): a stationary series whose median is 1.0 but whose level moves over hundreds of calls, as real traces do."""
    a = math.exp(-1.0 / tau)
    e = rng.standard_normal(n)
    w = np.empty(n)
    w[0] = e[0]
    for i in range(1, n):
        w[i] = a * w[i - 1] + math.sqrt(1 - a * a) * e[i]
    return 1.0 + 0.02 * math.sqrt(1 - 0.09) * _ar1(rng, n, 0.3) + 0.01 * w


def test_batch_median_ci_covers_a_wandering_level() -> None:
    """Long batches carry a slow wander into the median's interval: near-nominal coverage of the true level,
    where the block bootstrap (blocks from the lag-1 autocorrelation) misses it."""
    rng = np.random.default_rng(7)
    reps, n = 150, 1200
    hits_batch = hits_boot = 0
    for rep in range(reps):
        x = _wandering(rng, n, tau=100.0)
        lo, hi = batch_statistics_ci(x, statistic="median")
        hits_batch += lo <= 1.0 <= hi
        blo, bhi = replicate_interval(bootstrap_percentiles(x, 50.0, n_boot=300, seed=rep))
        hits_boot += blo <= 1.0 <= bhi
    assert 0.88 <= hits_batch / reps <= 0.995
    assert hits_boot / reps < 0.75


def test_batch_mean_ci_covers_ar1_noise_and_says_what_it_needs() -> None:
    rng = np.random.default_rng(3)
    reps, hits = 150, 0
    for _ in range(reps):
        x = 1.0 + 0.05 * _ar1(rng, 800, 0.7)
        lo, hi = batch_statistics_ci(x, statistic="mean")
        hits += lo <= 1.0 <= hi
        assert lo < float(x.mean()) < hi
    assert 0.88 <= hits / reps <= 0.995
    with pytest.raises(ValueError, match="at least 8 values"):
        batch_statistics_ci([1.0] * 7)
    with pytest.raises(ValueError, match="batches must be at least 2"):
        batch_statistics_ci([1.0] * 20, batches=1)
    with pytest.raises(ValueError, match="mean or median"):
        batch_statistics_ci([1.0] * 20, statistic="p99")
    with pytest.raises(InputError, match="finite"):
        batch_statistics_ci([1.0] * 19 + [math.nan])
    assert batch_statistics_ci([2.0] * 20) == (2.0, 2.0)


def test_analysis_prints_the_median_interval_and_keeps_it() -> None:
    x = synthetic_trace("expdecay", n=1500, seed=4).values
    a = analyze(x)
    assert a.median_ci is not None and a.median_ci[0] <= a.steady_median <= a.median_ci[1]
    back = type(a).from_dict(json.loads(json.dumps(a.to_dict())))
    assert back.median_ci == pytest.approx(a.median_ci)
    assert analyze(x, with_ci=False).median_ci is None


def test_bootstrap_ci_basics() -> None:
    x = np.random.default_rng(1).normal(10.0, 1.0, 500)
    lo, hi = block_bootstrap_ci(x, seed=3)
    assert lo < x.mean() < hi
    assert (lo, hi) == block_bootstrap_ci(x, seed=3)  # deterministic
    lo99, hi99 = block_bootstrap_ci(x, confidence=0.99, seed=3)
    assert lo99 < lo and hi99 > hi
    assert block_bootstrap_ci([2.0]) == (2.0, 2.0)
    assert block_bootstrap_ci([2.0] * 50) == (2.0, 2.0)
    with pytest.raises(ValueError):
        block_bootstrap_ci([])
    with pytest.raises(InputError):
        block_bootstrap_ci([1.0, float("nan")])


def test_percentiles() -> None:
    x = np.arange(101, dtype=float)
    assert percentiles(x, [50, 90, 99]) == {50.0: 50.0, 90.0: 90.0, 99.0: 99.0}
    y = np.random.default_rng(2).random(37)
    got = percentiles(y, (10.0, 75.0))
    assert got[10.0] == pytest.approx(float(np.percentile(y, 10)))
    assert percentiles(y, []) == {}
    with pytest.raises(ValueError):
        percentiles(y, [101])
    with pytest.raises(ValueError):
        percentiles([], [50])


def _measurement(values: np.ndarray, **kw: object) -> Measurement:
    args: dict[str, object] = {
        "batch_size": 8,
        "mode": "throughput",
        "samples": tuple(values.tolist()),
        "iterations_per_sample": 4,
        "first_call_seconds": 1.5,
        "analysis": analyze(values),
        "stopped_by": "precision",
    }
    args.update(kw)
    return Measurement(**args)  # type: ignore[arg-type]


def test_measurement_derived_statistics() -> None:
    t = synthetic_trace("step", n=1500, level=4e-3, cv=0.02, phi=0.3, seed=5)
    m = _measurement(t.values)
    assert m.classification == "warmup"
    start = m.analysis.steady_start
    assert start is not None and m.warmup_iterations == start * 4
    steady = t.values[start:]
    assert m.mean_seconds == pytest.approx(float(steady.mean()))
    assert m.throughput == pytest.approx(8 / steady.mean())
    lo, hi = m.throughput_ci
    assert lo < m.throughput < hi
    assert m.relative_ci_half_width == pytest.approx((m.ci_seconds[1] - m.ci_seconds[0]) / 2 / m.mean_seconds)
    lat = m.latency_ms
    assert set(lat) == {"mean", "p50", "p90", "p99"}
    assert lat["p50"] == pytest.approx(float(np.median(steady)) * 1e3)
    assert lat["p50"] <= lat["p90"] <= lat["p99"]


def test_measurement_without_steady_state_uses_the_trailing_half() -> None:
    t = synthetic_trace("drift", n=1000, cv=0.01, seed=1)
    m = _measurement(t.values, stopped_by="budget")
    assert m.classification == "no_steady_state" and m.warmup_iterations is None
    assert m.mean_seconds == pytest.approx(float(t.values[500:].mean()))
    lo, hi = m.ci_seconds
    assert lo < m.mean_seconds < hi
    # the drift is in the interval: wider than the bootstrap of the same half, which sees only the noise
    blo, bhi = block_bootstrap_ci(t.values[500:])
    assert (hi - lo) > 2 * (bhi - blo)


def test_measurement_round_trip_through_json() -> None:
    t = synthetic_trace("compile_first", n=600, cv=0.02, seed=2)
    per_call = tuple(np.random.default_rng(3).lognormal(math.log(2e-3), 0.1, 300).tolist())
    m = _measurement(t.values, mode="latency", iterations_per_sample=1, extra={"device": "cpu"},
                     latency_samples=per_call)
    data = json.loads(json.dumps(m.to_dict()))
    # the raw samples and the analysis, nothing derived: every statistic is recomputed from them
    assert set(data) == {"batch_size", "mode", "iterations_per_sample", "first_call_seconds", "stopped_by",
                         "analysis", "samples", "latency_samples", "extra"}
    assert data["samples"]["format"] == SECONDS_FORMAT and data["samples"]["count"] == 600
    assert tuple(decode_seconds(data["samples"]).tolist()) == m.samples
    assert tuple(decode_seconds(data["latency_samples"]).tolist()) == m.latency_samples
    back = Measurement.from_dict(data)
    assert back == m
    assert back.throughput == m.throughput and back.latency_ms == m.latency_ms and back.ci_seconds == m.ci_seconds


def test_samples_are_float32_and_the_old_list_form_is_still_read() -> None:
    t = synthetic_trace("flat", n=300, cv=0.02, seed=4)
    m = _measurement(t.values)
    assert m.samples == tuple(t.values.astype(np.float32).astype(float).tolist())
    assert max(abs(a / b - 1) for a, b in zip(m.samples, t.values, strict=True)) < 1e-7
    old = {**m.to_dict(), "samples": t.values.tolist(), "latency_samples": []}  # as to_dict wrote it before
    assert Measurement.from_dict(old) == m


def test_encoded_seconds_are_compact_and_bad_ones_say_why() -> None:
    t = synthetic_trace("step", n=4000, cv=0.03, seed=6)
    enc = encode_seconds(t.values)
    assert len(json.dumps(enc)) < 4.8 * 4000  # a JSON list of the same floats takes ~20 characters a value
    assert np.array_equal(decode_seconds(enc), t.values.astype(np.float32).astype(float))
    assert decode_seconds(encode_seconds([])).size == 0
    for bad, message in (
        ({**enc, "format": "f64"}, "format"),
        ({**enc, "count": 3999}, "3999 needs 15996"),
        ({**enc, "count": -1}, "count"),
        ({**enc, "data": enc["data"][:-8]}, "data"),
        ({**enc, "data": "!!!"}, "base64"),
        (encode_seconds([1.0, float("inf")]), "not finite"),
        ([1.0], "expected an object"),
    ):
        with pytest.raises(InputError, match=message):
            decode_seconds(bad)
    with pytest.raises(InputError, match="not a stored Measurement \\(samples: format"):
        Measurement.from_dict({**_measurement(t.values).to_dict(), "samples": {**enc, "format": "x"}})


def test_steady_samples_are_what_the_analysis_computed_its_statistics_from() -> None:
    """One-off spikes inside the steady tail are left out of the mean by the analysis, so of the samples too."""
    rng = np.random.default_rng(7)
    x = 1e-3 * (1 + 0.01 * rng.standard_normal(800))
    x[500] = 0.2  # a recompile: 200x the level
    m = _measurement(x)
    assert 500 in m.analysis.one_off and m.analysis.steady_start is not None
    assert m.analysis.steady_start < 500
    assert m.steady_samples.size == 800 - m.analysis.steady_start - 1
    assert float(m.steady_samples.mean()) == pytest.approx(m.mean_seconds, rel=1e-7)
    assert m.latency_ms["p99"] < 2.0  # the spike is no latency tail either


def test_bootstrap_replicates_are_the_ci_resampling() -> None:
    x = 1e-3 * (1 + 0.02 * _ar1(np.random.default_rng(8), 1000, 0.6))
    means = bootstrap_means(x, seed=3)
    assert replicate_interval(means) == pytest.approx(block_bootstrap_ci(x, seed=3), rel=1e-12)
    assert np.all(bootstrap_means(np.full(5, 2.0)) == 2.0)
    p90 = bootstrap_percentiles(x, 90.0, seed=3, n_boot=400)
    lo, hi = replicate_interval(p90)
    assert lo < float(np.percentile(x, 90)) < hi
    # drawn in chunks: a chunk of one resample gives the same replicates
    import autotune.core.stats as stats

    saved = stats._CHUNK_VALUES
    try:
        stats._CHUNK_VALUES = 1
        assert np.array_equal(bootstrap_percentiles(x, 90.0, seed=3, n_boot=400), p90)
    finally:
        stats._CHUNK_VALUES = saved
    m = _measurement(x, iterations_per_sample=1)
    tput = m.throughput_replicates(seed=1)
    assert tput.shape == (1000,) and np.median(tput) == pytest.approx(m.throughput, rel=2e-3)
    assert m.latency_replicates("p99", seed=1, n_boot=100).shape == (100,)
    with pytest.raises(ValueError):
        m.latency_replicates("p95")


def test_measurement_validation() -> None:
    x = np.full(100, 1e-3)
    with pytest.raises(ValueError):
        _measurement(x, mode="fast")
    with pytest.raises(ValueError):
        _measurement(x, stopped_by="boredom")
    with pytest.raises(InputError):
        Measurement.from_dict({"batch_size": 1})
