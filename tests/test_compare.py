"""``autotune compare``: the ratio CI, matching, regressions, bad input, and a real slowed model.

The unit tests derive their documents from ``tests/data/compare-base-report.json``, a real
report.json of a tiny recipe (two configurations of ``eager+threads=1``), so they have exactly the
structure ``autotune run`` writes. Expected values are computed from the document, never typed in.
The last test runs two real short tunings, the second of a deliberately slowed model.
"""

from __future__ import annotations

import copy
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
)
from autotune.errors import InputError
from autotune.report import load_report
from tests.support import run_cli, tiny_recipe

BASE_FILE = Path(__file__).resolve().parent / "data" / "compare-base-report.json"


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return load_report(BASE_FILE)


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


def test_cli_exit_codes_table_and_json(tmp_path: Path, base: dict[str, Any]) -> None:
    slow = copy.deepcopy(base)
    _scaled(_rows(slow)[0], 0.5)
    b = _write(tmp_path, "b.json", slow)
    code, out, err = run_cli("compare", str(BASE_FILE), str(b))
    assert code == 3, err
    assert "REGRESSION" in out and _label(_rows(slow)[0]) in out and str(b) in out
    code, out, err = run_cli("compare", str(BASE_FILE), str(b), "--json", "--threshold", "60%")
    assert code == 0, err  # a 50% slowdown is inside a 60% threshold
    data = json.loads(out)
    assert data["threshold"] == 0.6 and data["regressions"] == []
    code, out, err = run_cli("compare", str(BASE_FILE), str(BASE_FILE))
    assert code == 0 and "No regression beyond 5%" in out, err


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
    assert sorted(data["regressions"]) == ["eager+threads=1@1", "eager+threads=1@4"]
    code, out, err = run_cli("compare", str(a_out), str(a_out / "report.json"))
    assert code == 0, out + err
    print(f"two real runs and three compares in {time.monotonic() - start:.1f} s")
