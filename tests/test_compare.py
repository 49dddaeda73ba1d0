"""``autotune compare``: the ratio CI, matching, regressions, bad input, and a real slowed model.

The unit tests derive their documents from two real report.json files of the same tiny recipe (two
configurations of ``eager+threads=1``), so they have exactly the structure ``autotune run`` writes:
``tests/data/compare-base-report.json`` (schema 1: statistics only, compared by MOVER) and
``tests/data/compare-base-report-v2.json`` (schema 2: every candidate's raw samples, compared by a
bootstrap of them). Expected values are computed from the documents, never typed in. The sample-based
interval's width and coverage are measured on synthetic runs with a known true ratio. The last test runs
two real short tunings, the second of a deliberately slowed model.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.compare import (
    DEFAULT_THRESHOLD,
    compare_files,
    compare_reports,
    parse_threshold,
    ratio_ci,
    sample_latency_ratio,
    sample_ratio_ci,
)
from autotune.core.measurement import Measurement
from autotune.core.stats import block_bootstrap_ci
from autotune.core.warmup import WarmupAnalysis
from autotune.errors import InputError
from autotune.report import load_report
from tests.support import run_cli, tiny_recipe

BASE_FILE = Path(__file__).resolve().parent / "data" / "compare-base-report.json"
BASE_V2_FILE = Path(__file__).resolve().parent / "data" / "compare-base-report-v2.json"


def _screens_only(doc: dict[str, Any]) -> dict[str, Any]:
    """The report without its showdown: these tests are of the screens' statistics (a showdown's fresh processes
    take over the rows it timed: tests/test_compare_fresh.py)."""
    doc["showdown"] = None
    return doc


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return _screens_only(load_report(BASE_FILE))


@pytest.fixture(scope="module")
def base2() -> dict[str, Any]:
    return _screens_only(load_report(BASE_V2_FILE))


def _rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["candidates"]


def _scaled(row: dict[str, Any], factor: float, *, ci_factor: tuple[float, float] | None = None) -> None:
    """Scale a row's throughput (and its CI; ``ci_factor`` rescales the CI around the new value)."""
    lo, hi = row["throughput_ci"]
    t = row["throughput"]
    row["throughput"] = t * factor
    if ci_factor is None:
        row["throughput_ci"] = [lo * factor, hi * factor]
    else:
        row["throughput_ci"] = [t * factor * ci_factor[0], t * factor * ci_factor[1]]
    row["latency_ms"] = {k: v / factor for k, v in row["latency_ms"].items()}


def _scaled_samples(row: dict[str, Any], factor: float) -> None:
    """Scale a schema-2 row's throughput by ``factor``: its raw samples (and the analysis's levels) by
    1/factor, and the row's statistics recomputed from them as ``autotune.candidate.candidate_row`` does."""
    m = Measurement.from_dict(row["measurement"])
    a = m.analysis

    def div(v: float | None) -> float | None:
        return None if v is None else v / factor

    scaled = dataclasses.replace(
        m, samples=tuple(x / factor for x in m.samples), latency_samples=tuple(x / factor for x in m.latency_samples),
        analysis=dataclasses.replace(a, steady_mean=div(a.steady_mean), steady_median=div(a.steady_median),
                                     ci=None if a.ci is None else (a.ci[0] / factor, a.ci[1] / factor)))
    row.update(measurement=scaled.to_dict(), throughput=scaled.throughput, throughput_ci=list(scaled.throughput_ci),
               latency_ms=dict(scaled.latency_ms))


def _label(row: dict[str, Any]) -> str:
    return f"{row['variant']}@{row['batch_size']}"


def _write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


# --------------------------------------------------------------------------- the ratio CI


def test_ratio_ci_of_log_symmetric_intervals_adds_the_log_half_widths_in_quadrature() -> None:
    a, sa, b, sb = 200.0, 0.04, 150.0, 0.03
    r = ratio_ci(a, (a * math.exp(-sa), a * math.exp(sa)), b, (b * math.exp(-sb), b * math.exp(sb)))
    assert r.value == pytest.approx(b / a)
    assert r.ci is not None
    half = math.hypot(sa, sb)
    assert r.ci[0] == pytest.approx(b / a * math.exp(-half))
    assert r.ci[1] == pytest.approx(b / a * math.exp(half))


def test_ratio_ci_keeps_asymmetry_a_upper_limit_moves_only_the_lower_limit() -> None:
    a_ci, b_ci = (95.0, 105.0), (190.0, 210.0)
    narrow = ratio_ci(100.0, a_ci, 200.0, b_ci)
    wide_a_top = ratio_ci(100.0, (95.0, 150.0), 200.0, b_ci)
    assert narrow.ci is not None and wide_a_top.ci is not None
    assert wide_a_top.ci[0] < narrow.ci[0]  # a possibly faster A makes B/A possibly smaller
    assert wide_a_top.ci[1] == pytest.approx(narrow.ci[1])


def test_ratio_ci_without_a_usable_interval_has_none() -> None:
    assert ratio_ci(100.0, None, 90.0, (80.0, 100.0)).ci is None
    assert ratio_ci(100.0, (90.0, None), 90.0, (80.0, 100.0)).ci is None
    assert ratio_ci(100.0, (0.0, 110.0), 90.0, (80.0, 100.0)).ci is None
    with pytest.raises(ValueError):
        ratio_ci(0.0, (1.0, 2.0), 1.0, (1.0, 2.0))


def test_ratio_ci_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    """Simulated independent measurements with known log-normal noise: MOVER's coverage is ~95%."""
    rng = np.random.default_rng(0)
    true_a, true_b, sd_a, sd_b = 1000.0, 800.0, 0.05, 0.02
    z = 1.959963984540054
    trials, covered = 4000, 0
    for la, lb in zip(rng.normal(math.log(true_a), sd_a, trials), rng.normal(math.log(true_b), sd_b, trials),
                      strict=True):
        a, b = math.exp(la), math.exp(lb)
        r = ratio_ci(a, (a * math.exp(-z * sd_a), a * math.exp(z * sd_a)),
                     b, (b * math.exp(-z * sd_b), b * math.exp(z * sd_b)))
        assert r.ci is not None
        covered += r.ci[0] <= true_b / true_a <= r.ci[1]
    assert 0.935 <= covered / trials <= 0.965


# --------------------------------------------------------------------------- the ratio CI from raw samples


def _flat(values: np.ndarray, *, latency: np.ndarray | None = None, batch: int = 4) -> Measurement:
    """A measurement of stationary synthetic timings, steady from the first sample: the analysis a flat
    trace gets, made directly (the tests below are about the comparison; the real analysis runs in the
    report-based tests above and in tests/test_warmup.py)."""
    x = np.asarray(values, dtype=np.float32).astype(float)
    analysis = WarmupAnalysis(classification="flat", steady_start=0, steady_mean=float(x.mean()),
                              steady_median=float(np.median(x)), ci=block_bootstrap_ci(x), changepoints=(),
                              outliers=(), n=int(x.size))
    return Measurement(batch_size=batch, mode="throughput", samples=tuple(x.tolist()), iterations_per_sample=1,
                       first_call_seconds=0.0, analysis=analysis, stopped_by="precision",
                       latency_samples=() if latency is None else tuple(latency.tolist()))


def _ar1(rng: np.random.Generator, n: int, *, mean: float, cv: float, phi: float = 0.5) -> np.ndarray:
    """Timings with an autocorrelated (AR(1)) relative noise of standard deviation ``cv`` around ``mean``."""
    e = rng.standard_normal(n) * math.sqrt(1 - phi * phi)
    y = np.empty(n)
    y[0] = rng.standard_normal()
    for i in range(1, n):
        y[i] = phi * y[i - 1] + e[i]
    return mean * (1 + cv * y)


#: Seconds per call of A and B in the simulated pairs: B/A throughput is 0.8 exactly.
_MEAN_A, _MEAN_B = 1.0e-3, 1.25e-3


def _simulated_pairs(pairs: int, *, seed: int, latency: bool = False) -> list[tuple[Measurement, Measurement]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(pairs):
        lat_a = rng.lognormal(math.log(_MEAN_A), 0.2, 500) if latency else None
        lat_b = rng.lognormal(math.log(_MEAN_B), 0.2, 500) if latency else None
        out.append((_flat(_ar1(rng, 400, mean=_MEAN_A, cv=0.05), latency=lat_a),
                    _flat(_ar1(rng, 600, mean=_MEAN_B, cv=0.05), latency=lat_b)))
    return out


def test_the_sample_ratio_ci_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    """200 simulated pairs of autocorrelated runs with a known true ratio: the bootstrap's coverage is ~95%."""
    true = _MEAN_A / _MEAN_B
    covered = 0
    for a, b in _simulated_pairs(200, seed=11):
        r = sample_ratio_ci(a, b)
        assert r.method == "bootstrap" and r.ci is not None and r.ci[0] < r.value < r.ci[1]
        covered += r.ci[0] <= true <= r.ci[1]
    assert 0.90 <= covered / 200 <= 0.99


def test_the_sample_ratio_ci_is_as_wide_as_movers_on_the_same_data() -> None:
    """Both add the two runs' variances, so on the same samples their widths agree (on log scale, within a few %).

    The raw samples do not buy a narrower throughput interval: two independent runs' noise is what it is.
    They buy an interval for the latency percentile (below), and a report that can be analysed again.
    """
    widths = []
    for a, b in _simulated_pairs(200, seed=12):
        boot = sample_ratio_ci(a, b)
        mover = ratio_ci(a.throughput, a.throughput_ci, b.throughput, b.throughput_ci)
        assert boot.ci is not None and mover.ci is not None and mover.method == "mover"
        widths.append(math.log(boot.ci[1] / boot.ci[0]) / math.log(mover.ci[1] / mover.ci[0]))
    assert 0.97 <= float(np.median(widths)) <= 1.03
    assert 0.85 <= min(widths) and max(widths) <= 1.15


def test_the_latency_percentile_ratio_gets_a_ci_that_covers_about_95_percent() -> None:
    """Per-call latencies of two runs (100 simulated pairs): the p99 ratio's bootstrap interval covers its truth."""
    covered = 0
    for a, b in _simulated_pairs(100, seed=13, latency=True):
        r = sample_latency_ratio(a, b, "p99")
        assert r is not None and r.ci is not None and r.method == "bootstrap"
        covered += r.ci[0] <= _MEAN_B / _MEAN_A <= r.ci[1]  # same log-normal shape: every percentile scales alike
    assert 0.88 <= covered / 100 <= 0.99


def test_one_steady_sample_gives_no_sample_ci() -> None:
    rng = np.random.default_rng(14)
    a, b = _flat(_ar1(rng, 300, mean=_MEAN_A, cv=0.05)), _flat(np.array([_MEAN_B]))
    assert sample_ratio_ci(a, b).ci is None and sample_ratio_ci(a, b).value == b.throughput / a.throughput
    assert sample_ratio_ci(a, a).ci is not None  # a run compared with itself: resampled apart, an interval around 1


# --------------------------------------------------------------------------- thresholds


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("0.1", 0.1), (" 12.5% ", 0.125)])
def test_parse_threshold(text: str, value: float) -> None:
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "0", "0%", "100%", "-1%", "abc", "nan", ""])
def test_parse_threshold_rejects(text: str) -> None:
    with pytest.raises(InputError, match="--threshold"):
        parse_threshold(text)


# --------------------------------------------------------------------------- matching and verdicts


def test_a_report_against_itself_has_no_regression(base: dict[str, Any]) -> None:
    result = compare_reports(base, copy.deepcopy(base))
    assert [r.label for r in result.rows] == sorted(_label(r) for r in _rows(base))
    for row in result.rows:
        assert row.throughput.value == 1.0
        assert row.throughput.ci is not None and row.throughput.ci[0] < 1.0 < row.throughput.ci[1]
        assert row.verdict == "unchanged"
        assert row.latency is not None and row.latency.value == 1.0
    assert result.regressions == ()
    assert result.differences == () and not result.different_machines and not result.different_torch
    assert result.only_a == () and result.only_b == ()
    assert "Same machine" in " ".join(result.summary())


def test_a_slower_configuration_is_a_regression_and_the_others_are_not(base: dict[str, Any]) -> None:
    slow = copy.deepcopy(base)
    target = _rows(slow)[0]
    _scaled(target, 0.5)
    result = compare_reports(base, slow)
    assert result.regressions == (_label(target),)
    by_label = {r.label: r for r in result.rows}
    hit = by_label[_label(target)]
    assert hit.verdict == "regression"
    assert hit.throughput.value == pytest.approx(0.5)
    assert hit.throughput.ci is not None and hit.throughput.ci[1] < 1 - DEFAULT_THRESHOLD
    assert hit.latency is not None and hit.latency.value == pytest.approx(2.0)
    assert all(r.verdict == "unchanged" for label, r in by_label.items() if label != _label(target))
    assert "1 regression(s) beyond 5%: " + _label(target) in " ".join(result.summary())


def test_the_threshold_decides_small_but_certain_slowdowns(base: dict[str, Any]) -> None:
    slow = copy.deepcopy(base)
    target = _rows(slow)[0]
    _scaled(target, 0.97, ci_factor=(0.999, 1.001))  # 3% slower, very precise
    _rows(base)[0]["throughput_ci"] = [_rows(base)[0]["throughput"] * 0.999, _rows(base)[0]["throughput"] * 1.001]
    hit = next(r for r in compare_reports(base, slow).rows if r.label == _label(target))
    assert hit.throughput.ci is not None and hit.throughput.ci[1] < 1.0  # certainly slower ...
    assert hit.verdict == "unchanged"  # ... but by less than 5%
    assert compare_reports(base, slow, threshold=0.01).regressions == (_label(target),)


def test_a_slowdown_inside_the_noise_is_not_a_regression(base: dict[str, Any]) -> None:
    noisy = copy.deepcopy(base)
    target = _rows(noisy)[0]
    _scaled(target, 0.5, ci_factor=(0.2, 5.0))
    hit = next(r for r in compare_reports(base, noisy).rows if r.label == _label(target))
    assert hit.throughput.value == pytest.approx(0.5)
    assert hit.verdict == "unchanged"


def test_a_faster_configuration_is_an_improvement(base: dict[str, Any]) -> None:
    fast = copy.deepcopy(base)
    _scaled(_rows(fast)[1], 2.0)
    result = compare_reports(base, fast)
    assert {r.label: r.verdict for r in result.rows}[_label(_rows(fast)[1])] == "improvement"
    assert result.regressions == ()


def test_a_zero_width_interval_is_no_interval(base: dict[str, Any]) -> None:
    other = copy.deepcopy(base)
    row = _rows(other)[0]
    row["throughput"] *= 0.5
    row["throughput_ci"] = [row["throughput"], row["throughput"]]
    hit = next(r for r in compare_reports(base, other).rows if r.label == _label(row))
    assert hit.throughput.ci is None and hit.verdict == "no CI"


def test_configurations_in_one_report_only(base: dict[str, Any]) -> None:
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    first, second = _rows(b)
    extra = copy.deepcopy(first)
    extra.update(trial=99, batch_size=64)
    _rows(b).append(extra)  # new in B
    second.update(status="pruned", reason="not measured: the time budget ran out")  # measured in A only
    a_only = copy.deepcopy(first)
    a_only.update(trial=98, batch_size=128)
    _rows(a).append(a_only)  # absent from B
    result = compare_reports(a, b)
    assert [r.label for r in result.rows] == [_label(first)]
    assert {(u.label, u.other) for u in result.only_a} == {(_label(second), "pruned"), (_label(a_only), "absent")}
    assert [(u.label, u.other) for u in result.only_b] == [(_label(extra), "absent")]
    assert result.regressions == ()  # not measured is not slower


@pytest.mark.parametrize("status", ["oom", "failed", "rejected"])
def test_a_configuration_that_no_longer_runs_is_a_regression(base: dict[str, Any], status: str) -> None:
    b = copy.deepcopy(base)
    row = _rows(b)[0]
    row.update(status=status, reason=f"deliberate {status}", throughput=None, throughput_ci=None)
    result = compare_reports(base, b)
    assert [(u.label, u.other, u.broken) for u in result.only_a] == [
        (_label(row), f"{status}: deliberate {status}", True)]
    assert result.regressions == (_label(row),)


def test_repeated_trials_count_once(base: dict[str, Any]) -> None:
    b = copy.deepcopy(base)
    repeat = copy.deepcopy(_rows(b)[0])
    repeat.update(trial=50, repeat_of_trial=_rows(b)[0]["trial"], throughput=1.0, throughput_ci=[0.5, 2.0])
    _rows(b).append(repeat)
    result = compare_reports(base, b)
    assert len(result.rows) == len(_rows(base)) and result.regressions == ()


def test_the_latency_ratio_uses_the_reports_percentile(base: dict[str, Any]) -> None:
    a = copy.deepcopy(base)
    a["recipe"]["constraints"]["latency_percentile"] = "p90"
    b = copy.deepcopy(a)
    row = _rows(b)[0]
    row["latency_ms"]["p90"] *= 3.0
    result = compare_reports(a, b)
    assert result.latency_percentile == "p90"
    hit = next(r for r in result.rows if r.label == _label(row))
    assert hit.latency is not None and hit.latency.value == pytest.approx(3.0)
    assert hit.verdict == "unchanged"  # latency has no CI: shown, never the verdict


def test_a_schema_2_report_against_itself_is_compared_from_its_raw_samples(base2: dict[str, Any]) -> None:
    result = compare_reports(base2, copy.deepcopy(base2))
    assert [r.label for r in result.rows] == sorted(_label(r) for r in _rows(base2))
    for row in result.rows:
        assert row.a.measurement is not None and row.throughput.method == "bootstrap"
        assert row.throughput.value == 1.0 and row.verdict == "unchanged"
        assert row.throughput.ci is not None and row.throughput.ci[0] < 1.0 < row.throughput.ci[1]
        assert row.latency is not None and row.latency.value == 1.0
        assert row.latency.ci is not None and row.latency.ci[0] <= 1.0 <= row.latency.ci[1]
    assert result.regressions == ()


def test_a_slower_configuration_from_raw_samples_is_a_regression(base2: dict[str, Any]) -> None:
    slow = copy.deepcopy(base2)
    target = _rows(slow)[0]
    _scaled_samples(target, 0.5)
    result = compare_reports(base2, slow)
    assert result.regressions == (_label(target),)
    hit = next(r for r in result.rows if r.label == _label(target))
    assert hit.throughput.method == "bootstrap" and hit.throughput.value == pytest.approx(0.5, rel=1e-6)
    assert hit.throughput.ci is not None and hit.throughput.ci[0] < 0.5 < hit.throughput.ci[1] < 1 - DEFAULT_THRESHOLD
    assert hit.latency is not None and hit.latency.value == pytest.approx(2.0, rel=1e-6)
    assert hit.latency.ci is not None and hit.latency.ci[0] <= 2.0 <= hit.latency.ci[1]
    assert hit.verdict == "regression"


def test_rows_without_raw_samples_on_a_side_are_compared_by_mover(base: dict[str, Any],
                                                                  base2: dict[str, Any]) -> None:
    """A schema 1 report against a schema 2 one (same recipe), and a schema 2 row that lost its samples."""
    old_new = compare_reports(base, base2)
    assert len(old_new.rows) == 2 and {r.throughput.method for r in old_new.rows} == {"mover"}
    assert all(r.latency is None or r.latency.ci is None for r in old_new.rows)
    partial = copy.deepcopy(base2)
    del _rows(partial)[0]["measurement"]
    methods = {r.label: r.throughput.method for r in compare_reports(base2, partial).rows}
    assert methods == {_label(_rows(partial)[0]): "mover", _label(_rows(partial)[1]): "bootstrap"}


def test_to_dict_names_each_rows_ci_method_and_the_latency_ci(base: dict[str, Any], base2: dict[str, Any]) -> None:
    data = json.loads(json.dumps(compare_reports(base2, base2).to_dict()))
    assert {r["ratio_ci_method"] for r in data["rows"]} == {"bootstrap"}
    assert all(r["latency_ratio_ci"] is not None and r["a"]["raw_samples"] for r in data["rows"])
    old = json.loads(json.dumps(compare_reports(base, base).to_dict()))
    assert {r["ratio_ci_method"] for r in old["rows"]} == {"mover"}
    assert all(r["latency_ratio_ci"] is None and not r["a"]["raw_samples"] for r in old["rows"])


def test_different_machines_and_torch_versions_are_named(base: dict[str, Any]) -> None:
    b = copy.deepcopy(base)
    b["environment"].update(hostname="other-host", cpu_model="Some Other CPU", torch_version="2.13.0+cpu")
    result = compare_reports(base, b)
    fields = {d.field: (d.a, d.b) for d in result.differences}
    assert fields["hostname"] == (base["environment"]["hostname"], "other-host")
    assert fields["torch"] == (base["environment"]["torch_version"], "2.13.0+cpu")
    assert result.different_machines and result.different_torch
    text = " ".join(result.summary())
    assert "different machines (hostname, cpu_model differ)" in text
    assert f"different torch versions: {base['environment']['torch_version']} and 2.13.0+cpu" in text


def test_to_dict_is_json_and_carries_the_verdicts(base: dict[str, Any]) -> None:
    slow = copy.deepcopy(base)
    _scaled(_rows(slow)[0], 0.5)
    data = json.loads(json.dumps(compare_reports(base, slow).to_dict()))
    assert data["regressions"] == [_label(_rows(slow)[0])]
    row = next(r for r in data["rows"] if r["label"] == _label(_rows(slow)[0]))
    assert row["verdict"] == "regression" and row["throughput_ratio"] == pytest.approx(0.5)
    assert row["a"]["throughput"] == pytest.approx(_rows(base)[0]["throughput"])


# --------------------------------------------------------------------------- bad input


def test_missing_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape(f"{tmp_path / 'nope'}: no such report file")):
        compare_files(tmp_path / "nope", BASE_FILE)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=re.escape(f"{tmp_path / 'empty' / 'report.json'}: no such report file")):
        compare_files(BASE_FILE, tmp_path / "empty")


def test_bad_documents_name_the_path_and_the_field(tmp_path: Path, base: dict[str, Any]) -> None:
    not_json = tmp_path / "bad.json"
    not_json.write_text("{")
    with pytest.raises(InputError, match=r"bad\.json: not valid JSON"):
        compare_files(BASE_FILE, not_json)
    with pytest.raises(InputError, match=r"other.json: report.recipe: required field missing"):
        compare_files(BASE_FILE, _write(tmp_path, "other.json", {"schema": 1}))
    newer = copy.deepcopy(base)
    newer["schema"] = 3
    with pytest.raises(InputError, match=r"newer.json: schema: this autotune reads report schema 1 and 2.*says 3"):
        compare_files(_write(tmp_path, "newer.json", newer), BASE_FILE)
    broken = copy.deepcopy(base)
    broken["candidates"][1]["throughput"] = "fast"
    with pytest.raises(InputError, match=r"broken.json: report.candidates\[1\].throughput"):
        compare_files(BASE_FILE, _write(tmp_path, "broken.json", broken))


# --------------------------------------------------------------------------- the CLI


def test_cli_exit_codes_table_and_json(tmp_path: Path, base: dict[str, Any], base2: dict[str, Any]) -> None:
    slow = copy.deepcopy(base)
    _scaled(_rows(slow)[0], 0.5)
    b = _write(tmp_path, "b.json", slow)
    a, a2 = _write(tmp_path, "a.json", base), _write(tmp_path, "a2.json", base2)
    code, out, err = run_cli("compare", str(a), str(b))
    assert code == 3, err
    assert "REGRESSION" in out and _label(_rows(slow)[0]) in out and str(b) in out
    code, out, err = run_cli("compare", str(a), str(b), "--json", "--threshold", "60%")
    assert code == 0, err  # a 50% slowdown is inside a 60% threshold
    data = json.loads(out)
    assert data["threshold"] == 0.6 and data["regressions"] == []
    code, out, err = run_cli("compare", str(a), str(a))
    assert code == 0 and "No regression beyond 5%" in out and "MOVER" in out, err
    slow2 = copy.deepcopy(base2)
    _scaled_samples(_rows(slow2)[0], 0.5)
    code, out, err = run_cli("compare", str(a2), str(_write(tmp_path, "b2.json", slow2)))
    assert code == 3 and "REGRESSION" in out and "samples" in out, err


def test_cli_bad_input_is_exit_2_naming_the_problem(tmp_path: Path) -> None:
    code, _, err = run_cli("compare", str(BASE_FILE), str(tmp_path / "missing"))
    assert code == 2 and f"{tmp_path / 'missing'}: no such report file" in err and "Traceback" not in err
    code, _, err = run_cli("compare", str(BASE_FILE), str(BASE_FILE), "--threshold", "5")
    assert code == 2 and "--threshold" in err and "Traceback" not in err


# --------------------------------------------------------------------------- real runs


def _slowable_recipe(write_recipe, name: str, *, slow: bool) -> Path:
    text = tiny_recipe(name="slowable", kwargs=f"kwargs = {{ slow = {'true' if slow else 'false'} }}",
                       variants='["eager+threads=1"]', batch_sizes="[1, 4]", time_budget_s=60)
    # One thread: on a small shared machine two OpenMP threads make per-call times swing by 10x.
    return write_recipe(text.replace("@MODELS@/broken.py:tiny", "@MODELS@/slowable.py:slowable"), name)


@pytest.mark.worker
@pytest.mark.slow  # two real runs (~35 s); the fresh-process statistics are tested in test_compare_fresh.py
def test_compare_flags_a_deliberately_slowed_model(write_recipe, tmp_path: Path) -> None:
    start = time.monotonic()
    a_out, b_out = tmp_path / "A", tmp_path / "B"
    for out, slow in ((a_out, False), (b_out, True)):
        recipe = _slowable_recipe(write_recipe, f"{out.name}.toml", slow=slow)
        code, _, err = run_cli("run", str(recipe), "--out", str(out), "--no-progress")
        assert code == 0, err
    code, out, err = run_cli("compare", str(a_out), str(b_out))
    print(out)
    assert code == 3, out + err
    for batch in (1, 4):
        assert f"eager+threads=1@{batch}" in out
    assert "model.kwargs: A {'slow': False}, B {'slow': True}" in out
    data = json.loads(run_cli("compare", str(a_out), str(b_out), "--json")[1])
    # the slowed model is flagged; a configuration whose few fresh processes (process as the unit, t quantile
    # 12.7 at one degree of freedom) leave the CI wider than the threshold is at least never called faster
    assert "eager+threads=1@4" in data["regressions"] or "eager+threads=1@1" in data["regressions"]
    for row in data["rows"]:
        assert row["throughput_ratio"] < 0.5 and row["throughput_ratio_ci"][1] < 1.0, row
    # both finalists of both showdowns: compared on their fresh-process rounds
    assert {(r["source"], r["ratio_ci_method"]) for r in data["rows"]} == {("showdown", "processes")}
    code, out, err = run_cli("compare", str(a_out), str(a_out / "report.json"))
    assert code == 0, out + err
    print(f"two real runs and three compares in {time.monotonic() - start:.1f} s")
