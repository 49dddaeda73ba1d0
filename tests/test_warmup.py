"""Warmup detection: PELT against ruptures, each phenomenon, the shared traces, the online detector,
and the trace helpers of the ``autotune warmup`` command."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import InputError
from autotune.traces import SHAPES, load_trace, sketch, summary, synthetic_suite, synthetic_trace
from autotune.warmup import CLASSIFICATIONS, OnlineDetector, WarmupAnalysis, analyze, find_spikes, pelt

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "warmup-traces"


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
    """Moderate noise and autocorrelation: every shape is classified right, mean within 0.5%."""
    for seed in range(4):
        t = synthetic_trace(shape, n=1500, level=2e-3, cv=0.02, phi=0.4, seed=seed)
        a = analyze(t.values)
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


@pytest.mark.skipif(not (SHARED / "labels.json").exists(), reason="shared warmup traces not present")
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


# ----------------------------------------------------------------------------------------------
# Online detector
# ----------------------------------------------------------------------------------------------


def _feed(det: OnlineDetector, x: np.ndarray) -> None:
    for v in x:
        if det.push(float(v)):
            break


def test_online_stops_on_a_flat_trace_with_the_target_precision() -> None:
    x = synthetic_trace("flat", n=3000, cv=0.02, phi=0.3, seed=1).values
    det = OnlineDetector(ci_target=0.01)
    _feed(det, x)
    assert det.done and det.stopped_by == "precision" and det.steady
    assert det.min_values <= det.consumed < 1000
    a = det.result()
    assert a.n == det.consumed and a.ci is not None and a.steady_mean is not None
    assert (a.ci[1] - a.ci[0]) / 2 <= 0.01 * a.steady_mean
    assert abs(a.steady_mean / x.mean() - 1) < 0.01


def test_online_waits_for_the_warmup_to_end() -> None:
    rng = np.random.default_rng(12)
    x = np.concatenate([np.full(250, 2.0), np.full(2750, 1.0)]) * (1.0 + 0.01 * rng.standard_normal(3000))
    det = OnlineDetector()
    _feed(det, x)
    assert det.done and 250 < det.consumed < 1000
    a = det.result()
    assert a.classification == "warmup" and a.steady_start == 250
    assert a.steady_mean is not None and abs(a.steady_mean / x[250:].mean() - 1) < 0.005


def test_online_restarts_when_the_level_moves() -> None:
    rng = np.random.default_rng(9)
    n = 4000
    level = np.concatenate([np.full(100, 2.0), np.full(500, 1.0), np.full(n - 600, 1.3)])
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
        if i == 599:
            seen_steady_before_move = det.steady
    assert seen_steady_before_move
    assert det.restarts >= 1
    a = det.result()
    assert a.steady_start is not None and a.steady_start >= 590
    assert not det.done or det.consumed >= a.steady_start + det.min_after_restart
    assert a.steady_mean is not None and abs(a.steady_mean / 1.3 - 1) < 0.03


def test_online_drift_never_stops_and_max_values_does() -> None:
    t = synthetic_trace("drift", n=2000, cv=0.01, phi=0.3, seed=2)
    det = OnlineDetector()
    _feed(det, t.values)
    assert not det.done and det.consumed == 2000
    assert det.result().classification == "no_steady_state"
    det = OnlineDetector(max_values=500)
    _feed(det, t.values)
    assert det.done and det.stopped_by == "max_values" and det.consumed == 500


def test_online_stops_exactly_at_the_floor_on_a_flat_trace() -> None:
    """No warmup seen: the floor is min_values_no_warmup (never below min_values)."""
    x = 1e-3 * (1.0 + 0.01 * np.random.default_rng(8).standard_normal(3000))
    for floor in (200, 390, 540):
        det = OnlineDetector(min_values=200, min_values_no_warmup=floor)
        _feed(det, x)
        assert det.done and det.stopped_by == "precision" and det.consumed == floor
        assert det.result().classification == "flat"
    det = OnlineDetector(min_values=300, min_values_no_warmup=100)
    _feed(det, x)
    assert det.consumed == 300


def test_online_a_seen_warmup_lowers_the_floor() -> None:
    """Warmup over at 20: stop at min_values (390 here); the same values without the warmup wait longer."""
    rng = np.random.default_rng(17)
    noise = 1.0 + 0.01 * rng.standard_normal(3000)
    warm = np.where(np.arange(3000) < 20, 1.5, 1.0) * noise
    det = OnlineDetector(min_values=390, min_values_no_warmup=540)
    _feed(det, warm)
    assert det.done and det.consumed == 390 and det.result().steady_start == 20
    det = OnlineDetector(min_values=390, min_values_no_warmup=540)
    _feed(det, noise)
    assert det.done and det.consumed == 540


@pytest.mark.parametrize(("before", "change_at"), [(1.5, 400), (0.7, 500)])
def test_online_catches_a_change_after_a_flat_prelude(before: float, change_at: int) -> None:
    """A long flat warmup (step down at 400) or a slowdown at 500: nothing before the change
    says it will come, so only the no-warmup floor catches it; a 390-value floor stops blind."""
    rng = np.random.default_rng(change_at)
    x = np.where(np.arange(3000) < change_at, before, 1.0) * (1.0 + 0.01 * rng.standard_normal(3000))
    truth = float(x[change_at:].mean())
    det = OnlineDetector()
    _feed(det, x)
    a = det.result()
    assert det.done and det.consumed > change_at and a.steady_start == change_at
    assert a.steady_mean is not None and abs(a.steady_mean / truth - 1) < 0.005
    blind = OnlineDetector(min_values_no_warmup=390)
    _feed(blind, x)
    assert blind.done and blind.consumed == 390 and blind.result().steady_mean is not None
    assert abs(blind.result().steady_mean / truth - 1) > 0.2


def test_online_a_slowdown_seen_early_counts_as_the_end_of_the_first_phase() -> None:
    """Fast until 150, then 30% slower: the no-change floor (540) no longer applies, the history
    gate (the slow level outlasts 2 x 150) and min_after_restart decide."""
    rng = np.random.default_rng(21)
    x = np.where(np.arange(3000) < 150, 1.0, 1.3) * (1.0 + 0.01 * rng.standard_normal(3000))
    det = OnlineDetector(min_values=370, min_values_no_warmup=540, min_after_restart=300)
    _feed(det, x)
    a = det.result()
    assert det.done and a.classification == "slowdown" and a.steady_start == 150
    assert 150 + 300 <= det.consumed < 540


def test_online_min_after_counts_from_the_detected_steady_start() -> None:
    rng = np.random.default_rng(7)
    x = np.concatenate([np.full(20, 1.5), np.full(2980, 1.0)]) * (1.0 + 0.01 * rng.standard_normal(3000))
    det = OnlineDetector(min_after=100)  # the floor decides
    _feed(det, x)
    assert det.done and det.consumed == det.min_values and det.result().steady_start == 20
    det = OnlineDetector(min_after=500)  # the values after the steady start decide
    _feed(det, x)
    assert det.done and det.result().steady_start == 20 and 520 <= det.consumed <= 580


def test_online_level_that_went_up_must_outlast_the_earlier_level() -> None:
    """Fast for 250 values, then 30% slower: the slow level must last 2 x 250 before a stop."""
    rng = np.random.default_rng(5)
    x = np.concatenate([np.full(250, 1.0), np.full(3000, 1.3)]) * (1.0 + 0.01 * rng.standard_normal(3250))
    det = OnlineDetector(regime_factor=2.0)
    _feed(det, x)
    a = det.result()
    assert det.done and a.classification == "slowdown" and a.steady_start == 250
    assert det.consumed >= 250 + 2 * 250 and det.blocked.get("history", 0) > 0
    loose = OnlineDetector(regime_factor=0.0)
    _feed(loose, x)
    assert loose.done and loose.consumed < det.consumed and "history" not in loose.blocked


def test_online_restart_asks_for_min_after_restart_after_the_new_level() -> None:
    rng = np.random.default_rng(11)
    x = np.concatenate([np.full(150, 2.0), np.full(150, 1.0), np.full(3000, 1.2)])
    x = x * (1.0 + 0.01 * rng.standard_normal(x.size))
    # the new level (1.2) is above the one before it (1.0 for 150 values): the history gate also asks
    # for 2 x 150 values, so the larger of the two requirements decides
    for tail, need in ((200, 300 + 2 * 150), (400, 300 + 400)):
        det = OnlineDetector(min_values=200, min_after_restart=tail)
        _feed(det, x)
        a = det.result()
        assert det.done and det.restarts >= 1 and a.steady_start == 300
        assert need <= det.consumed < need + 80


def test_online_slow_drift_within_tolerance_of_the_segments_does_not_stop() -> None:
    """0.8% per 390 values: the changepoint analysis of the prefix says flat; the trend gate does not."""
    n = 3000
    rng = np.random.default_rng(6)
    x = (1.0 + 2e-5 * np.arange(n)) * (1.0 + 0.002 * rng.standard_normal(n))
    assert analyze(x[:390]).classification == "flat"
    det = OnlineDetector()
    _feed(det, x)
    assert not det.done and det.blocked.get("drift", 0) > 0
    assert det.result().classification == "no_steady_state"
    blind = OnlineDetector(drift_t=1e9)
    _feed(blind, x)
    assert blind.done and blind.consumed == blind.min_values_no_warmup


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
    with pytest.raises(InputError):
        det.push(float("nan"))
    with pytest.raises(ValueError):
        OnlineDetector(ci_target=0)
    with pytest.raises(ValueError):
        OnlineDetector(regime_factor=-1.0)
    with pytest.raises(ValueError):
        OnlineDetector(drift_t=0.0)


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
