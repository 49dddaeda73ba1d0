"""Confidence intervals under autocorrelation, percentiles, and the Measurement value object."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autotune.errors import InputError
from autotune.measurement import Measurement
from autotune.stats import (
    block_bootstrap_ci,
    choose_block_length,
    lag1_autocorrelation,
    normal_quantile,
    percentiles,
)
from autotune.traces import synthetic_trace
from autotune.warmup import analyze


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


def test_measurement_round_trip_through_json() -> None:
    t = synthetic_trace("compile_first", n=600, cv=0.02, seed=2)
    m = _measurement(t.values, mode="latency", iterations_per_sample=1, extra={"device": "cpu"})
    data = json.loads(json.dumps(m.to_dict()))
    assert data["samples"] == list(m.samples) and data["classification"] == m.classification
    back = Measurement.from_dict(data)
    assert back == m
    assert back.throughput == pytest.approx(m.throughput) and back.latency_ms == m.latency_ms


def test_measurement_validation() -> None:
    x = np.full(100, 1e-3)
    with pytest.raises(ValueError):
        _measurement(x, mode="fast")
    with pytest.raises(ValueError):
        _measurement(x, stopped_by="boredom")
    with pytest.raises(InputError):
        Measurement.from_dict({"batch_size": 1})
