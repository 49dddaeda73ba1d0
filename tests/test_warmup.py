"""Warmup detection: PELT against ruptures, each phenomenon, the shared traces, the online detector,
and the trace helpers of the ``autotune warmup`` command."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from autotune.core.warmup import (
    CLASSIFICATIONS,
    OnlineDetector,
    WarmupAnalysis,
    analyze,
    budget_floor_seconds,
    find_spikes,
    pelt,
)
from autotune.errors import InputError
from autotune.traces import (
    SHAPES,
    held_out_suite,
    label_real_trace,
    load_trace,
    sketch,
    summary,
    synthetic_suite,
    synthetic_trace,
)
from tests.support import is_reported_wander

SHARED = Path(__file__).resolve().parent / "data" / "warmup-traces"  # the labelled set, copied from ../shared


# ----------------------------------------------------------------------------------------------
# PELT against ruptures (the reference implementation; pure Python, so the signals are short)
# ----------------------------------------------------------------------------------------------


def _signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "mean_shift": np.concatenate([rng.normal(0, 1, 120), rng.normal(2.5, 1, 130)]),
        "variance_shift": np.concatenate([rng.normal(0, 1, 120), rng.normal(0, 4, 120)]),
        "mean_and_variance": np.concatenate(
            [rng.normal(5, 2, 60), rng.normal(0, 1, 100), rng.normal(-2, 0.3, 90)]
        ),
        "no_change": rng.normal(0, 1, 240),
        "short_warmup": np.concatenate([rng.normal(8, 1, 6), rng.normal(0, 1, 200)]),
        "many_steps": np.concatenate([rng.normal(m, 1, 50) for m in (0, 3, 1, 4, -1)]),
    }


@pytest.mark.parametrize("name", list(_signals()))
def test_pelt_matches_ruptures(name: str) -> None:
    rpt = pytest.importorskip("ruptures")
    x = _signals()[name]
    for pen in (3 * np.log(x.size), 25.0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ruptures warns about its 1e-6 variance floor
            expected = rpt.Pelt(model="normal", jump=1, min_size=2).fit(x).predict(pen=pen)[:-1]
        assert pelt(x, penalty=pen, min_size=2) == expected


def test_pelt_matches_ruptures_with_jump_and_min_size() -> None:
    rpt = pytest.importorskip("ruptures")
    x = _signals()["mean_and_variance"]
    for min_size, jump in ((3, 5), (5, 2), (2, 7)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = rpt.Pelt(model="normal", jump=jump, min_size=min_size).fit(x).predict(pen=20.0)[:-1]
        assert pelt(x, penalty=20.0, min_size=min_size, jump=jump) == expected


def test_pelt_finds_changes_and_nothing_in_noise() -> None:
    x = _signals()["many_steps"]
    cps = pelt(x, penalty=30.0)
    assert len(cps) == 4
    assert all(abs(c - t) <= 3 for c, t in zip(cps, (50, 100, 150, 200), strict=True))
    assert pelt(np.random.default_rng(3).normal(0, 1, 2000)) == []


def test_pelt_degenerate_inputs() -> None:
    assert pelt([]) == []
    assert pelt([1.0, 2.0, 3.0]) == []
    assert pelt(np.ones(100)) == []
    with pytest.raises(InputError, match="index 2"):
        pelt([1.0, 2.0, float("nan"), 3.0, 4.0])


# ----------------------------------------------------------------------------------------------
# Offline analysis, phenomenon by phenomenon
# ----------------------------------------------------------------------------------------------


def _rel_err(a: WarmupAnalysis, trace: np.ndarray, start: int) -> float:
    assert a.steady_mean is not None
    oracle = float(trace[start:].mean())
    return abs(a.steady_mean - oracle) / oracle


@pytest.mark.parametrize("shape", SHAPES)
def test_each_phenomenon(shape: str) -> None:
    """Moderate noise and autocorrelation: every shape is classified right, mean within 0.5% (a regime trace may
    be a reported wander instead: :func:`is_reported_wander`)."""
    for seed in range(4):
        t = synthetic_trace(shape, n=1500, level=2e-3, cv=0.02, phi=0.4, seed=seed)
        a = analyze(t.values)
        if shape == "regime" and is_reported_wander(a, t.values):
            continue
        assert a.classification == t.cls, (shape, seed, a.steady_start, t.steady_start, a.changepoints)
        if t.steady_start is None:
            assert a.steady_start is None and a.steady_mean is None and a.ci is None
        else:
            assert _rel_err(a, t.values, t.steady_start) < 0.005, (shape, seed)


def test_step_start_is_located() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([2.0 + 0.02 * rng.standard_normal(137), 1.0 + 0.01 * rng.standard_normal(863)])
    a = analyze(x)
    assert a.classification == "warmup"
    assert a.steady_start == 137
    assert a.changepoints == (137,)
    assert a.ci is not None and a.ci[0] < a.steady_mean < a.ci[1]  # type: ignore[operator]


def test_compile_spike_is_warmup_not_a_changepoint() -> None:
    rng = np.random.default_rng(2)
    x = 1e-3 * (1.0 + 0.03 * rng.standard_normal(1000))
    x[0] = 0.9  # a 900x first call
    a = analyze(x)
    assert a.classification == "warmup"
    assert a.steady_start == 1
    assert a.changepoints == ()
    assert 0 in a.outliers


def test_isolated_spikes_stay_in_the_mean_but_make_no_segments() -> None:
    rng = np.random.default_rng(3)
    x = 5e-3 * (1.0 + 0.01 * rng.standard_normal(2000))
    hits = rng.choice(np.arange(10, 2000), size=30, replace=False)
    x[hits] *= 8.0  # GC pauses
    a = analyze(x)
    assert a.classification == "flat" and a.steady_start == 0 and a.changepoints == ()
    assert set(hits.tolist()) <= set(a.outliers)
    assert a.steady_mean == pytest.approx(float(x.mean()))  # spikes are part of the cost


def test_first_call_spike_is_warmup_and_leaves_the_mean() -> None:
    """A first call 100-2000x the steady time, then a flat series: warmup from value 1, not flat
    with the spike averaged in."""
    rng = np.random.default_rng(22)
    for factor in (100.0, 2000.0):
        x = 2e-3 * (1.0 + 0.01 * rng.standard_normal(600))
        x[0] *= factor
        a = analyze(x, margin=0.02)
        assert a.classification == "warmup" and a.steady_start == 1
        assert a.steady_mean == pytest.approx(float(x[1:].mean()))


def test_one_off_recompile_spike_is_counted_and_left_out_of_the_mean() -> None:
    rng = np.random.default_rng(23)
    x = 1e-3 * (1.0 + 0.01 * rng.standard_normal(2000))
    x[1200] = 0.5  # a 500x recompile in the middle of the run
    a = analyze(x)
    assert a.classification == "flat" and a.steady_start == 0
    assert a.one_off == (1200,) and 1200 in a.outliers
    assert a.steady_mean == pytest.approx(float(np.delete(x, 1200).mean()))
    assert WarmupAnalysis.from_dict(a.to_dict()).one_off == (1200,)
    assert "1 one-off, left out of the mean" in summary("t.csv", a)


def test_recurring_extreme_spikes_stay_in_the_mean() -> None:
    """Ten 50x pauses are not one-off events: every iteration pays their share."""
    rng = np.random.default_rng(24)
    x = 1e-3 * (1.0 + 0.01 * rng.standard_normal(3000))
    x[np.arange(150, 3000, 300)] *= 50.0
    a = analyze(x)
    assert a.steady_start == 0 and a.one_off == ()
    assert a.steady_mean == pytest.approx(float(x.mean()))


def test_level_shift_within_the_margin_is_one_steady_state() -> None:
    """A 3% shift halfway: one steady state at a 5% margin; at 1% (and at 2%) the later level is the steady one."""
    rng = np.random.default_rng(25)
    x = 1e-3 * np.where(np.arange(3000) < 1500, 1.0, 1.03) * (1.0 + 0.005 * rng.standard_normal(3000))
    wide = analyze(x, margin=0.05)
    assert wide.classification == "flat" and wide.steady_start == 0
    for narrow in (analyze(x), analyze(x, margin=0.02)):
        assert narrow.steady_start == 1500 and narrow.classification == "slowdown"
    with pytest.raises(ValueError):
        analyze(x, margin=0.0)


def test_machine_level_shifts_below_the_margin_do_not_make_no_steady_state() -> None:
    """Regimes of +-1.5% every few hundred values (a neighbour, the clock): steady at a 5% margin;
    regimes of +-15% are no steady state at the same margin."""
    rng = np.random.default_rng(26)
    n = 3000
    regimes = np.repeat(rng.choice([-1.0, 0.0, 1.0], size=n // 200), 200)
    for amp, steady in ((0.015, True), (0.15, False)):
        x = 1e-3 * (1.0 + amp * regimes) * (1.0 + 0.005 * rng.standard_normal(n))
        a = analyze(x, margin=0.05)
        assert a.steady == steady, amp
        if steady:
            assert a.steady_median is not None and abs(a.steady_median / np.median(x[n // 2:]) - 1) < 0.05


def test_periodic_slow_iterations_are_flat_even_when_the_first_is_slow() -> None:
    rng = np.random.default_rng(4)
    x = 1e-3 * (1.0 + 0.01 * rng.standard_normal(2000))
    x[::50] *= 1.7  # index 0 is one of them
    a = analyze(x)
    assert a.classification == "flat" and a.steady_start == 0


def test_quantised_timer_and_bimodal_noise_make_no_segments() -> None:
    rng = np.random.default_rng(13)
    ticks = np.round(12 + 0.3 * rng.standard_normal(2000)) * 1e-6  # 1 us timer, mostly 12 us
    assert analyze(ticks).classification == "flat"
    ticks[:50] += 6e-6
    a = analyze(ticks)
    assert a.classification == "warmup" and a.steady_start == 50
    bimodal = np.where(rng.random(2000) < 0.3, 1.3, 1.0) * (1 + 0.01 * rng.standard_normal(2000))
    b = analyze(bimodal)
    assert b.classification == "flat" and b.outliers == ()


def test_several_compile_calls_then_a_fast_one() -> None:
    rng = np.random.default_rng(14)
    x = 1e-3 * (1.0 + 0.001 * rng.standard_normal(600))
    x[:3] = [0.7, 1.6, 0.02]
    x[3] = 0.985e-3  # a low spike right after them must not hide the compile calls
    assert find_spikes(x)[:4].all()
    a = analyze(x)
    assert a.classification == "warmup" and a.steady_start == 3


def test_slowdown_after_warmup() -> None:
    rng = np.random.default_rng(5)
    level = np.concatenate([np.full(100, 3.0), np.full(400, 0.8), np.full(1500, 1.0)])
    a = analyze(level * (1.0 + 0.01 * rng.standard_normal(level.size)))
    assert a.classification == "slowdown"
    assert abs((a.steady_start or 0) - 500) <= 2


def test_drift_and_late_change_have_no_steady_state() -> None:
    rng = np.random.default_rng(6)
    n = 2000
    drift = np.linspace(0.7, 1.0, n) * (1.0 + 0.01 * rng.standard_normal(n))
    late = np.concatenate([np.ones(1800), np.full(200, 1.3)]) * (1.0 + 0.01 * rng.standard_normal(n))
    for x in (drift, late):
        a = analyze(x)
        assert a.classification == "no_steady_state"
        assert a.steady_start is None and a.steady_mean is None


def test_relative_tolerance_makes_the_analysis_scale_free() -> None:
    t = synthetic_trace("multistep", n=1200, level=1.0, cv=0.02, phi=0.3, seed=11)
    results = [analyze(t.values * scale) for scale in (1e-6, 1e-3, 1.0, 50.0)]
    assert len({(r.classification, r.steady_start, r.changepoints) for r in results}) == 1


def test_short_and_constant_series() -> None:
    assert analyze([1.0] * 10).classification == "no_steady_state"
    a = analyze(np.full(500, 2e-3))
    assert a.classification == "flat" and a.steady_mean == pytest.approx(2e-3)
    assert a.ci == (pytest.approx(2e-3), pytest.approx(2e-3))
    with pytest.raises(InputError, match="index 3"):
        analyze([1.0, 1.0, 1.0, float("inf")] + [1.0] * 50)


def test_find_spikes_isolated_only() -> None:
    rng = np.random.default_rng(8)
    x = 1.0 + 0.01 * rng.standard_normal(300)
    x[50] = 3.0
    x[100:102] = 2.5
    x[200:210] = 2.0  # a level change, not a spike
    mask = find_spikes(x)
    assert mask[50] and mask[100] and mask[101]
    assert not mask[200:210].any()
    assert mask.sum() == 3


def test_analysis_dict_is_json_and_round_trips() -> None:
    a = analyze(synthetic_trace("step", n=800, seed=1).values)
    d = json.loads(json.dumps(a.to_dict()))
    for key in ("classification", "steady_start", "steady_mean", "steady_median", "ci", "changepoints"):
        assert key in d
    assert d["classification"] in CLASSIFICATIONS
    assert WarmupAnalysis.from_dict(d) == a
    with pytest.raises(InputError):
        WarmupAnalysis.from_dict({"classification": "warmup"})


def test_analysis_of_2000_values_is_fast() -> None:
    """The benchmark checks the 20 ms target; here a loose bound that a shared CI box meets."""
    x = synthetic_trace("regime", n=2000, seed=3).values
    analyze(x)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        analyze(x)
        times.append(time.perf_counter() - t0)
    assert float(np.median(times)) < 0.08


# ----------------------------------------------------------------------------------------------
# Accuracy on data sets
# ----------------------------------------------------------------------------------------------


def test_shared_traces_class_accuracy_and_mean() -> None:
    labels = json.loads((SHARED / "labels.json").read_text())
    correct, within, steady, false_steady = 0, 0, 0, 0
    for name, label in labels.items():
        x = load_trace(SHARED / name)
        a = analyze(x)
        correct += a.classification == label["cls"]
        if label["steady_start"] is None:
            false_steady += a.steady_start is not None
            continue
        steady += 1
        within += a.steady_mean is not None and _rel_err(a, x, label["steady_start"]) <= 0.01
    assert correct / len(labels) >= 0.95
    assert within / steady >= 0.98
    assert false_steady <= 0.05 * (len(labels) - steady)


def test_held_out_synthetic_accuracy() -> None:
    """Random lengths, levels (1 us - 1 s), noise, AR(1) and skew: the detector generalises."""
    traces = synthetic_suite(72, seed=2024)
    correct = sum(analyze(t.values).classification == t.cls for t in traces)
    assert correct / len(traces) >= 0.93


REAL = Path(__file__).resolve().parent / "data" / "real-traces"


def test_real_corpus_labels_follow_the_protocol() -> None:
    """The stored labels are what the detector-free protocol says about each stored trace."""
    labels = json.loads((REAL / "labels.json").read_text())
    assert len(labels) >= 40
    assert {lab["threads"] for lab in labels.values()} == {1, 2}
    for name, lab in labels.items():
        x = load_trace(REAL / name)
        assert x.size == lab["n"] == lab["calls"]
        again = label_real_trace(x).to_dict()
        assert again["label"] == lab["label"] and again["reference"] == pytest.approx(lab["reference"])


def test_real_corpus_steady_traces_agree_with_the_reference() -> None:
    """Traces whose late half holds one level at 2% come out steady, median within 2% of it."""
    labels = json.loads((REAL / "labels.json").read_text())
    steady = [(name, lab) for name, lab in labels.items() if lab["label"] == "steady"]
    good = 0
    for name, lab in steady:
        a = analyze(load_trace(REAL / name), margin=0.02, with_ci=False)
        good += a.steady_median is not None and abs(a.steady_median / lab["reference"] - 1) <= 0.02
    assert good / len(steady) >= 0.9


@pytest.mark.parametrize("folder", ["", "heldout2"])
def test_real_traces_median_interval_holds_the_late_half_median(folder: str) -> None:
    """The printed 95% CI of the steady median (four batch medians) covers the late-half median of plainly steady
    real traces whose steady state begins in their first half (issue 31; benchmarks/bench_median_ci.py): 30/30 on
    the quiet corpus, 11/11 on the second held-out capture. The bootstrap with short blocks it replaced covered
    19/30 and 10/11, so a narrower interval that leaves the wander out fails here."""
    covered = total = 0
    for path in sorted((REAL / folder).glob("*.txt")):
        x = load_trace(path)
        n = x.size
        if abs(np.median(x[n // 2:3 * n // 4]) / np.median(x[3 * n // 4:]) - 1) > 0.05:
            continue  # not plainly steady
        a = analyze(x)
        if a.steady_start is None or a.steady_start > n // 2 or a.median_ci is None:
            continue
        total += 1
        covered += a.median_ci[0] <= float(np.median(x[n // 2:])) <= a.median_ci[1]
    assert total >= 10 and covered / total >= 0.9


def test_label_protocol() -> None:
    rng = np.random.default_rng(27)
    flat = 1e-3 * (1.0 + 0.02 * rng.standard_normal(1000))
    lab = label_real_trace(flat)
    assert lab.steady and lab.reference == pytest.approx(float(np.median(flat[500:])))
    drift = flat * np.linspace(1.0, 1.2, 1000)
    assert not label_real_trace(drift).steady
    spike = flat.copy()
    spike[0] = 1.0
    assert label_real_trace(spike).first_call_ratio > 500


def test_held_out_changes_are_in_iterations_up_to_the_horizon() -> None:
    traces = held_out_suite(48, seed=1)
    assert [t.values[:5].tolist() for t in traces[:3]] == [t.values[:5].tolist() for t in held_out_suite(3, seed=1)]
    for t in traces:
        assert t.iterations_per_value >= 1
        assert 10e-6 <= (t.level or 10e-6) * (1 + 1e-9) and (t.level or 0.0) <= 10e-3 * (1 + 1e-9)
        if t.steady_start and t.shape not in ("compile_first",):
            assert (t.steady_start - 1) * t.iterations_per_value < 3000
            assert t.steady_start <= 0.8 * t.n


# ----------------------------------------------------------------------------------------------
# Online detector
# ----------------------------------------------------------------------------------------------


def _feed(det: OnlineDetector, x: np.ndarray) -> None:
    for v in x:
        if det.push(float(v)):
            break


def _flat(n: int, level: float, cv: float = 0.01, seed: int = 8) -> np.ndarray:
    return level * (1.0 + cv * np.random.default_rng(seed).standard_normal(n))


def _floor_met(det: OnlineDetector) -> bool:
    iterations = det.consumed * det.iterations_per_value
    sec = det.seconds()
    capped = det.floor_seconds is not None and sec >= det.floor_seconds
    return sec >= det.min_seconds and (iterations >= det.min_iterations or capped)


#: The timing loop's cap on the iteration horizon for the quickstart's 3 s per-candidate budget.
CAP_3S = budget_floor_seconds(3.0)


def test_online_stops_on_a_flat_trace_with_the_target_precision() -> None:
    x = synthetic_trace("flat", n=3000, level=1e-3, cv=0.02, phi=0.3, seed=1).values
    det = OnlineDetector(ci_target=0.01, floor_seconds=CAP_3S)
    _feed(det, x)
    assert det.done and det.stopped_by == "precision" and det.steady
    assert _floor_met(det) and det.consumed < 2500
    a = det.result()
    assert a.n == det.consumed and a.ci is not None and a.steady_mean is not None
    assert (a.ci[1] - a.ci[0]) / 2 <= 0.01 * a.steady_mean
    assert abs(a.steady_mean / x.mean() - 1) < 0.01


@pytest.mark.parametrize(("call", "k"), [(1e-3, 1), (1e-3, 5), (20e-6, 250), (2e-3, 1)])
def test_online_floor_is_in_iterations_and_seconds_not_values(call: float, k: int) -> None:
    """The same flat series stops once the floor's wall time / iterations are covered, whatever
    the block size: values of k iterations count k times, seconds are value * k."""
    det = OnlineDetector(iterations_per_value=k, floor_seconds=CAP_3S)
    _feed(det, _flat(20_000, call))
    assert det.done and det.stopped_by == "precision"
    assert _floor_met(det)
    before = OnlineDetector(iterations_per_value=k, floor_seconds=CAP_3S)
    _feed(before, _flat(det.consumed - 1, call))  # one value less: the floor is not met yet
    assert not before.done and not _floor_met(before)
    # a fast call reaches min_iterations long before floor_seconds; a slow one is capped in time
    if call * 3000 < CAP_3S:
        assert det.seconds() < CAP_3S
    else:
        assert det.consumed * k < det.min_iterations


def test_online_waits_for_the_warmup_to_end() -> None:
    rng = np.random.default_rng(12)
    x = 1e-3 * np.concatenate([np.full(250, 2.0), np.full(2750, 1.0)]) * (1.0 + 0.01 * rng.standard_normal(3000))
    det = OnlineDetector(floor_seconds=CAP_3S)
    _feed(det, x)
    assert det.done and 250 < det.consumed
    a = det.result()
    assert a.classification == "warmup" and a.steady_start == 250
    assert a.steady_mean is not None and abs(a.steady_mean / x[250:].mean() - 1) < 0.005


@pytest.mark.parametrize("before", [1.5, 0.7])
def test_online_catches_a_change_inside_the_iteration_horizon(before: float) -> None:
    """A fast call (50 us, blocks of 100): a step down or a slowdown at iteration 2,800 (value 28)
    comes before min_iterations = 3,000 is reached, so the stop sees it."""
    k, change_at = 100, 28
    rng = np.random.default_rng(int(before * 10))
    x = 50e-6 * np.where(np.arange(5000) < change_at, before, 1.0) * (1.0 + 0.01 * rng.standard_normal(5000))
    det = OnlineDetector(iterations_per_value=k)
    _feed(det, x)
    a = det.result()
    assert det.done and det.consumed * k >= 3000 and a.steady_start == change_at
    assert a.steady_mean is not None and abs(a.steady_mean / float(x[change_at:].mean()) - 1) < 0.005


def test_online_a_change_after_the_time_cap_of_a_slow_call_is_missed() -> None:
    """The price of a time budget: a 10 ms call whose level changes at iteration 2,500 (25 s)
    is stopped at about the cap (floor_seconds), blind to the change; the detector's defaults
    (the risk model alone: the 3,000-iteration horizon, no cap) catch it."""
    change_at = 2500
    rng = np.random.default_rng(3)
    x = 10e-3 * np.where(np.arange(6000) < change_at, 1.3, 1.0) * (1.0 + 0.01 * rng.standard_normal(6000))
    det = OnlineDetector(floor_seconds=CAP_3S)
    _feed(det, x)
    assert det.done and det.consumed < change_at
    patient = OnlineDetector()  # min_iterations (3,000) decides
    _feed(patient, x)
    assert patient.done and patient.result().steady_start == change_at


def test_online_restarts_when_the_level_moves() -> None:
    rng = np.random.default_rng(9)
    n = 4000
    level = 1e-3 * np.concatenate([np.full(100, 2.0), np.full(500, 1.0), np.full(n - 600, 1.3)])
    noise = np.empty(n)
    noise[0] = rng.standard_normal()
    for i in range(1, n):  # strongly autocorrelated: the 1% CI takes long, so the move comes first
        noise[i] = 0.9 * noise[i - 1] + np.sqrt(1 - 0.81) * rng.standard_normal()
    x = level * (1.0 + 0.06 * noise)
    det = OnlineDetector()
    seen_steady_before_move = False
    for i, v in enumerate(x):
        if det.push(float(v)):
            break
        if 300 <= i < 600:  # steady at the first level at some point (its AR(0.9) wander may restart it too)
            seen_steady_before_move |= det.steady
    assert seen_steady_before_move
    assert det.restarts >= 1
    a = det.result()
    assert a.steady_start is not None and a.steady_start >= 590
    # after a restart the new level meets the floor by itself
    assert not det.done or (det.consumed - a.steady_start) * det.iterations_per_value >= det.min_iterations
    assert a.steady_mean is not None and abs(a.steady_mean / 1.3e-3 - 1) < 0.03


def test_online_drift_never_stops_and_max_values_does() -> None:
    t = synthetic_trace("drift", n=2000, level=1e-3, cv=0.01, phi=0.3, seed=2)
    det = OnlineDetector()
    _feed(det, t.values)
    assert not det.done and det.consumed == 2000
    assert det.result().classification == "no_steady_state"
    det = OnlineDetector(max_values=500)
    _feed(det, t.values)
    assert det.done and det.stopped_by == "max_values" and det.consumed == 500


def test_online_level_that_went_up_must_outlast_the_earlier_level() -> None:
    """Fast for 2,000 values (2 s), then 30% slower: the slow level must last 2 x as long before a stop."""
    rng = np.random.default_rng(5)
    x = 1e-3 * np.concatenate([np.full(2000, 1.0), np.full(8000, 1.3)]) * (1.0 + 0.01 * rng.standard_normal(10000))
    det = OnlineDetector(regime_factor=2.0, floor_seconds=3.0)
    _feed(det, x)
    a = det.result()
    assert det.done and a.classification == "slowdown" and a.steady_start == 2000
    assert det.consumed >= 2000 + 2 * 2000 and det.blocked.get("history", 0) > 0
    loose = OnlineDetector(regime_factor=0.0, floor_seconds=3.0)
    _feed(loose, x)
    assert loose.done and loose.consumed < det.consumed and "history" not in loose.blocked


def test_online_slow_drift_within_tolerance_of_the_segments_does_not_stop() -> None:
    """0.8% per 390 values (of 1 ms), margin 1%: the changepoint analysis of the prefix says flat; the trend
    gate does not."""
    n = 3000
    rng = np.random.default_rng(6)
    x = 1e-3 * (1.0 + 2e-5 * np.arange(n)) * (1.0 + 0.002 * rng.standard_normal(n))
    assert analyze(x[:390], margin=0.01).classification == "flat"
    det = OnlineDetector(margin=0.01, floor_seconds=CAP_3S)
    _feed(det, x)
    assert not det.done and det.blocked.get("drift", 0) + det.blocked.get("history", 0) > 0
    assert det.result().classification == "no_steady_state"
    blind = OnlineDetector(margin=0.01, drift_t=1e9, regime_factor=0.0, floor_seconds=CAP_3S)  # gates off: stops blind
    _feed(blind, x)
    assert blind.done and _floor_met(blind)


def test_online_margin_merges_a_level_shift_smaller_than_it() -> None:
    """A 3% level shift halfway: one steady state at a 5% margin, a slowdown at the 1% default."""
    rng = np.random.default_rng(4)
    x = 1e-3 * np.where(np.arange(4000) < 2000, 1.0, 1.03) * (1.0 + 0.005 * rng.standard_normal(4000))
    wide = OnlineDetector(margin=0.05, floor_seconds=10.0)
    _feed(wide, x)
    assert wide.result().steady_start == 0 and wide.rel_tolerance == 0.05
    narrow = OnlineDetector(floor_seconds=10.0)
    _feed(narrow, x)
    assert narrow.result().steady_start == 2000


@pytest.mark.parametrize("n", [30, 60, 100])
def test_online_short_series_classify_like_the_offline_analysis(n: int) -> None:
    """A slow model may only afford tens of samples: result() must still say flat / warmup."""
    rng = np.random.default_rng(n)
    flat = 1e-3 * (1.0 + 0.02 * rng.standard_normal(n))
    warm = np.where(np.arange(n) < 8, 2e-3, 1e-3) * (1.0 + 0.02 * rng.standard_normal(n))
    cases = [(flat, "flat")] + ([(warm, "warmup")] if n >= 60 else [])
    for x, cls in cases:
        det = OnlineDetector()
        _feed(det, x)
        assert not det.done and det.consumed == n
        a = det.result()
        assert a.classification == cls
        if cls == "warmup":
            assert a.steady_start == 8


def test_online_result_any_time_and_bad_values() -> None:
    det = OnlineDetector()
    assert det.result().classification == "no_steady_state"  # nothing yet
    for v in (1e-3, 1.1e-3, 0.9e-3):
        det.push(v)
    assert det.consumed == 3 and det.result().n == 3
    assert det.seconds() == pytest.approx(3e-3)
    with pytest.raises(InputError):
        det.push(float("nan"))
    for bad in ({"ci_target": 0}, {"regime_factor": -1.0}, {"drift_t": 0.0}, {"iterations_per_value": 0},
                {"margin": 0.0}, {"min_seconds": -1.0}):
        with pytest.raises(ValueError):
            OnlineDetector(**bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# traces.py: reading files, sketch, summary
# ----------------------------------------------------------------------------------------------


def test_load_trace_formats(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("seconds,iteration\n0.5,0\n\n# comment\n0.25,1\n1e-3,2\n")
    assert load_trace(p).tolist() == [0.5, 0.25, 1e-3]
    q = tmp_path / "t.txt"
    q.write_text("1\n2\n3\n")
    assert load_trace(q).tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("0.1\n0.2\nabc\n", r"line 3: 'abc' is not a number"),
        ("0.1\nnan\n", r"line 2: 'nan' is not a finite number"),
        ("0.1\n-0.2\n", r"line 2: '-0.2' is negative"),
        ("header\n\n", r"no values"),
    ],
)
def test_load_trace_errors_name_file_and_line(tmp_path: Path, content: str, match: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(InputError, match=match) as info:
        load_trace(p)
    assert "bad.csv" in str(info.value)


def test_load_trace_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "missing.csv")
    with pytest.raises(InputError, match="directory"):
        load_trace(tmp_path)


def test_sketch_and_summary_mark_the_steady_start() -> None:
    t = synthetic_trace("step", n=1000, cv=0.01, seed=3)
    a = analyze(t.values)
    art = sketch(t.values, a, width=60, height=10)
    lines = art.splitlines()
    assert len(lines) == 12
    axis = lines[-2]
    assert "S" in axis and axis.index("S") > axis.index("+")
    text = summary("x.csv", a, consumed=321)
    assert "warmup" in text and f"iteration {a.steady_start}" in text and "321" in text
    nss = analyze(synthetic_trace("drift", n=1000, cv=0.01, seed=3).values)
    assert "no steady state" in summary("d.csv", nss)
    assert "S" not in sketch(np.ones(5), nss).splitlines()[-2]


def test_a_level_that_wanders_after_the_warmup_is_steady_with_its_wander_and_a_wider_ci() -> None:
    """Issue 31: after a transient, the level wanders up and down by ~5% between segments (a machine, not a
    warmup that never ended): steady from the end of the transient, the wander measured, and a CI over blocks
    long enough to span the level changes, wider than the noise within a level. A one-way drift of the same size
    stays no_steady_state."""
    from autotune.core.warmup.offline import WANDER_BLOCKS

    rng = np.random.default_rng(31)
    n = 4000
    levels = np.repeat(rng.choice([0.95, 1.0, 1.05], size=(n - 400) // 90 + 1), 90)[: n - 400]
    x = 1e-3 * np.concatenate([np.linspace(3.0, 1.0, 400), levels]) * (1 + 0.01 * rng.standard_normal(n))
    a = analyze(x)
    assert a.steady and a.wander is not None and 0.03 < a.wander <= 0.10, a
    assert 300 <= (a.steady_start or 0) <= 1000  # the transient is left out, not the whole trace
    assert a.ci is not None and a.steady_mean is not None
    blocks = np.array_split(x[a.steady_start:], WANDER_BLOCKS)
    assert a.ci[0] < a.steady_mean < a.ci[1]
    assert (a.ci[1] - a.ci[0]) / 2 > 3 * 0.01 * a.steady_mean / np.sqrt(len(blocks[0]) * WANDER_BLOCKS)
    back = WarmupAnalysis.from_dict(a.to_dict())
    assert back == a and a.to_dict()["wander"] == a.wander
    drift = 1e-3 * np.linspace(1.0, 1.1, n) * (1 + 0.01 * rng.standard_normal(n))
    assert analyze(drift).classification == "no_steady_state"


def _blocks(levels: list[float], seed: int, size: int = 100) -> np.ndarray:
    """Block-structured values: ``size`` values per level, 0.5% noise."""
    rng = np.random.default_rng(seed)
    return 1e-3 * np.repeat(levels, size) * (1 + 0.005 * rng.standard_normal(size * len(levels)))


@pytest.mark.parametrize(
    ("levels", "steady"),
    [
        # the halves' medians 2.9% apart, but each half wanders 6-8% inside itself (a real openvino trace's shape)
        ([1.018, 1.0, 0.967, 0.955, 0.989, 1.02, 1.069, 1.005], True),
        # the last block 3.9% above the first half's highest, which wandered 6% itself
        ([1.0, 0.97, 1.03, 0.99, 1.0, 0.98, 1.01, 1.07], True),
        # two regimes 4% apart, each flat: a level change, not a wander
        ([1.0, 1.005, 0.998, 1.002, 1.04, 1.038, 1.042, 1.04], False),
        # a flat level, then a last block 5% above it: a late regime
        ([1.0, 1.002, 0.998, 1.001, 1.0, 0.999, 1.001, 1.05], False),
    ],
)
def test_a_wander_is_judged_against_its_own_size(levels: list[float], steady: bool) -> None:
    """Issue 31: whether the tail's halves sit at two levels, and whether its last block is a level the first half
    never visited, is judged against the wander the blocks show themselves, not only against the 2% margin: a real
    trace's level wanders 5-8% between blocks, so halves 3% apart or a last block 4% out are that wander. A level
    change between flat stretches, or a late block off a flat level, still is not steady. (The two wandering shapes
    were no_steady_state when both checks used the margin alone.)"""
    from autotune.core.warmup.offline import _wander_start

    y = _blocks(levels, seed=len(levels))
    found = _wander_start(y, [], min_len=y.size, tol=0.02)  # only the start 0 is judged
    assert (found is not None) is steady, found
    if steady:
        assert found is not None and found[0] == 0 and 0.03 < found[1] <= 0.10


def test_real_traces_that_plainly_settle_are_steady() -> None:
    """Issue 31's measure on the two held-out captures (they were looked at when the wander's checks were last
    changed, so they are a development set now; benchmarks/bench_median_ci.py scores the fresh capture): of the
    plainly steady traces (the medians of their third and fourth quarters within 5%), >= 90% are called steady with
    the median within 5% of the late-half median. 34/37 here; 28/37 when the wander was judged against the 2%
    margin alone."""
    plain = good = 0
    for folder in ("heldout", "heldout2"):
        for path in sorted((REAL / folder).glob("*.txt")):
            x = load_trace(path)
            n = x.size
            if abs(np.median(x[n // 2:3 * n // 4]) / np.median(x[3 * n // 4:]) - 1) > 0.05:
                continue
            plain += 1
            a = analyze(x, with_ci=False)
            good += a.steady_median is not None and abs(a.steady_median / float(np.median(x[n // 2:])) - 1) <= 0.05
    assert plain >= 30 and good / plain >= 0.9, (good, plain)


def test_the_report_says_the_level_wanders() -> None:
    from autotune.report.format import wander_text

    row = {"measurement": {"analysis": {"wander": 0.058}}}
    assert wander_text(row) == "level wanders \u00b15.8% between blocks (its CI spans it)"
    assert wander_text({"measurement": {"analysis": {}}}) is None and wander_text({}) is None


def _short(levels: list[float], *, cv: float = 0.01, seed: int = 0) -> np.ndarray:
    """A short series of block means: ``levels`` with multiplicative noise of ``cv``."""
    rng = np.random.default_rng(seed)
    return np.asarray(levels) * (1.0 + cv * rng.standard_normal(len(levels)))


def test_a_short_series_gets_a_verdict_from_sixteen_values() -> None:
    """A budget ends a measurement of traffic passes (15 calls a value) or of slow calls after 15-30 values, and a
    steady tail of 30 was required: every such row read "no steady state" (BERT-like keyword traffic, session 37).
    From 16 values the same questions are asked of a tail of at least half of it (12 at least): a level is steady, a
    short head off it is a warmup or a slowdown, and a drift, a late move or a level that never held is not steady.
    Fewer than 16 values get no verdict."""
    flat = analyze(_short([1.0] * 20))
    assert flat.classification == "flat" and flat.steady_start == 0 and flat.ci is not None
    assert abs(flat.steady_mean / 1.0 - 1) < 0.01
    assert analyze(_short([1.0] * 15)).classification == "no_steady_state"  # too few to say
    warm = analyze(_short([1.6, 1.3, 1.1] + [1.0] * 21))
    assert warm.classification == "warmup" and warm.steady_start == 3 and abs(warm.steady_mean - 1) < 0.01
    # a slowdown's fast head, the first value a first call's cost: called flat from 0 before the head was looked at
    slow = analyze(_short([1.5, 0.69, 0.80] + [1.0] * 17, cv=0.002))
    assert slow.classification == "slowdown" and slow.steady_start == 3
    drift = analyze(_short(list(np.linspace(0.79, 1.0, 16)), cv=0.005))  # its last value once read as a spike
    assert drift.classification == "no_steady_state"
    late = analyze(_short([0.85] * 13 + [0.93, 0.97, 1.0], cv=0.02))
    assert late.classification == "no_steady_state"
    regime = analyze(_short([1.75] * 22 + [1.0, 1.0], cv=0.005))  # a level the last values moved to
    assert regime.classification == "no_steady_state"
    # one last value off is not a level (a stall, a one-off): the median of the last eighth shrugs it off
    assert analyze(_short([1.0] * 23 + [1.4], cv=0.005)).classification == "flat"


def test_a_series_of_thirty_to_sixty_values_needs_a_tail_of_half_of_it() -> None:
    """A series short of 30 values needed a tail of half of it, one of 30 a tail of 30: no series of 30-59 values with
    a transient could be steady, and a demo on an AVX2 EPYC marked its rows of 30-47 values `~` (session 40). The tail
    needed now grows with the series, half of it up to 30, and a drift or a late level is still not steady."""
    warm = analyze(_short([1.5, 1.4, 1.3, 1.2, 1.1, 1.05] + [1.0] * 34))
    assert warm.classification == "warmup" and warm.steady_start == 6 and abs(warm.steady_mean - 1) < 0.01
    long_head = analyze(_short([1.4] * 16 + [1.0] * 16))  # a compile's first calls, then half the series steady
    assert long_head.classification == "warmup" and long_head.steady_start == 16
    assert analyze(_short([1.4] * 20 + [1.0] * 12)).classification == "no_steady_state"  # the level held too briefly
    assert analyze(_short(list(np.linspace(0.8, 1.0, 45)), cv=0.005)).classification == "no_steady_state"
    assert analyze(_short([1.0] * 40 + [1.3] * 8, cv=0.005)).classification == "no_steady_state"


@pytest.mark.parametrize("blocks", [20, 30, 45])
def test_real_steady_traces_cut_short_are_called_steady(blocks: int) -> None:
    """The real thing behind the short-series tests above: each labelled-steady per-call trace of the corpus, its
    first call dropped, cut into ``blocks`` consecutive blocks (a budget-ended measurement of passes): >= 90% are
    called steady with the median within 5% of the label's reference (at 20: 63/65 when the rule was written, 0/65
    before; at 30: 51/68 while a series of 30 needed a tail of 30)."""
    good = total = 0
    for labels_path in sorted(REAL.rglob("labels.json")):
        for name, meta in json.loads(labels_path.read_text()).items():
            if meta["label"] != "steady":
                continue
            x = load_trace(labels_path.parent / name)[1:]
            a = analyze(np.array([b.mean() for b in np.array_split(x, blocks)]))
            total += 1
            good += a.steady_median is not None and abs(a.steady_median / meta["reference"] - 1) <= 0.05
    assert total >= 60 and good / total >= 0.9, (good, total)


# ----------------------------------------------------------------------------------------------
# Bursts: a neighbour slows a level for a moment; the level did not change
# ----------------------------------------------------------------------------------------------


def _stepped_with(rng: np.random.Generator, spans: list[tuple[int, float]]) -> np.ndarray:
    """Consecutive spans of (values, factor) at 0.5 ms, 0.5% noise: the stepped callable of test_measure.py."""
    return np.concatenate([5e-4 * f * (1.0 + 0.005 * rng.standard_normal(k)) for k, f in spans])


def test_a_burst_of_ninety_values_within_a_level_is_not_where_the_steady_state_starts() -> None:
    """CI of session 40: 59 calls at 4x, then one level of 0.5-ms calls that a neighbour slowed by 6% for 91 values
    (45 ms) at value 928 of 4,323 was reported as a warmup of 1,019 iterations; the level held before the burst for
    nine times as long and after it for thirty-five."""
    rng = np.random.default_rng(40)
    x = _stepped_with(rng, [(59, 4.0), (869, 1.0), (91, 1.06), (3304, 1.0)])
    a = analyze(x)
    assert a.classification == "warmup" and a.steady_start == 59, (a.steady_start, a.changepoints)
    assert a.changepoints == (59,)
    assert a.steady_median is not None and abs(a.steady_median / 5e-4 - 1.0) < 0.005


def test_several_bursts_and_a_lull_between_two_are_absorbed() -> None:
    rng = np.random.default_rng(41)
    x = _stepped_with(rng, [(100, 2.0), (400, 1.0), (40, 1.3), (8, 1.0), (30, 1.4), (900, 1.0), (60, 1.2),
                            (1200, 1.0)])
    a = analyze(x)
    assert a.steady_start == 100, (a.steady_start, a.changepoints)


def test_a_slow_excursion_longer_than_the_level_before_it_is_a_level_change() -> None:
    """A, then B for longer than A lasted, then A again: B is a level of its own, and the tail starts after it."""
    rng = np.random.default_rng(42)
    x = _stepped_with(rng, [(60, 3.0), (100, 1.0), (300, 1.3), (2000, 1.0)])
    a = analyze(x)
    assert a.steady_start == 460, (a.steady_start, a.changepoints)


def test_a_slow_excursion_of_more_than_a_quarter_of_the_tail_is_a_level_change() -> None:
    rng = np.random.default_rng(43)
    x = _stepped_with(rng, [(60, 3.0), (1500, 1.0), (300, 1.3), (1000, 1.0)])
    a = analyze(x)
    assert a.steady_start == 1860, (a.steady_start, a.changepoints)


def test_a_faster_stretch_within_a_level_is_not_a_burst() -> None:
    """A neighbour only slows a process down: 80 values 30% faster are another mode of the machine, not absorbed."""
    rng = np.random.default_rng(44)
    x = _stepped_with(rng, [(60, 3.0), (1500, 1.0), (80, 0.7), (2000, 1.0)])
    a = analyze(x)
    assert a.steady_start == 1640, (a.steady_start, a.changepoints)


def test_synthetic_bursts_start_where_the_level_does() -> None:
    """The ``burst`` shape (outside SHAPES): the class and a start within 2% of the trace on 19 of 20 seeds (the
    held-out score is benchmarks/bench_bursts.py's)."""
    right = 0
    for seed in range(20):
        t = synthetic_trace("burst", n=2000, level=1e-3, cv=0.02, phi=0.3, seed=900 + seed)
        a = analyze(t.values)
        assert t.steady_start is not None
        right += (a.classification == t.cls and a.steady_start is not None
                  and abs(a.steady_start - t.steady_start) <= 40)
    assert right >= 19
