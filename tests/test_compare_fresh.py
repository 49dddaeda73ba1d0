"""``autotune compare`` on fresh processes: the showdowns' rounds, the process as the unit, screens widened.

Pure: reports are the stored sample report with showdown rounds written into it (as a run writes them); the
real runs are ``tests/test_compare.py::test_compare_flags_a_deliberately_slowed_model`` and
``benchmarks/bench_compare.py``.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.compare import compare_reports
from autotune.compare_rounds import FreshRounds, fresh_ratio, fresh_rounds, screen_spread, t_quantile_975
from autotune.report import load_report

BASE_FILE = Path(__file__).resolve().parent / "data" / "compare-base-report.json"


def _run(seed: int, *, slow: float = 1.0, screen: float = 1.0, process_sd: float = 0.01) -> dict[str, Any]:
    """One run of the sample report: its two configurations timed by a showdown in 3 fresh processes x 3 rounds
    (each process with its own luck, ``process_sd``), their screens off by ``screen`` (a reused worker)."""
    doc = load_report(BASE_FILE)
    rng = np.random.default_rng(seed)
    rows = [c for c in doc["candidates"] if c["status"] == "ok"]
    seconds, order = {}, [0, 1, 2] * 4
    for row in rows:
        key = f"{row['variant']}@{row['batch_size']}"
        truth = row["batch_size"] / row["throughput"] / slow  # fresh processes: the screen, before its luck
        luck = np.exp(rng.normal(0.0, process_sd, 3))
        seconds[key] = list(truth * luck[order] * np.exp(rng.normal(0.0, 0.003, len(order))))
        row["throughput"] *= screen * slow
        row["throughput_ci"] = [v * screen * slow for v in row["throughput_ci"]]
    doc["showdown"] = {**doc["showdown"], "processes": 3, "round_process": order, "rounds_run": len(order),
                       "seconds_per_call": seconds, "disturbed_rounds": [], "rounds_compared": list(range(3, 12)),
                       "burn_in_rounds": 3}
    return doc


def test_the_t_quantile() -> None:
    assert t_quantile_975(4) == pytest.approx(2.776) and t_quantile_975(4.9) == t_quantile_975(4)
    assert t_quantile_975(0.3) == pytest.approx(12.706) and t_quantile_975(200) == pytest.approx(1.972, abs=0.002)


def test_rounds_are_grouped_by_process_and_burn_in_is_left_out() -> None:
    doc = _run(0)
    fresh = fresh_rounds(doc, "eager+threads=1", 4)
    assert fresh is not None and [len(p) for p in fresh.processes] == [3, 3, 3]
    assert fresh_rounds(doc, "eager+threads=1", 99) is None
    # an older showdown without round_process: round r ran in process r mod processes
    old = copy.deepcopy(doc)
    del old["showdown"]["round_process"]
    assert fresh_rounds(old, "eager+threads=1", 4) == fresh


def test_two_runs_of_the_same_code_are_not_a_regression_though_their_screens_moved() -> None:
    """The screens of run B sit 13% low (a reused worker's history); the fresh processes agree: no regression."""
    a, b = _run(1), _run(2, screen=0.87)
    result = compare_reports(a, b)
    assert result.regressions == ()
    assert {r.source for r in result.rows} == {"showdown"}
    assert all(r.throughput.ci is not None and r.throughput.ci[0] < 1.0 < r.throughput.ci[1] for r in result.rows)
    assert "2 of 2 configuration(s) compared on the showdowns' fresh processes" in " ".join(result.summary())


def test_a_model_slowed_by_ten_percent_is_flagged() -> None:
    result = compare_reports(_run(1), _run(2, slow=0.9))
    assert sorted(result.regressions) == ["eager+threads=1@1", "eager+threads=1@4"]
    for row in result.rows:
        assert row.throughput.value == pytest.approx(0.9, abs=0.03)
        assert row.throughput.method == "processes"


def test_the_ci_counts_processes_not_rounds() -> None:
    """Process luck of 3% (sd): the ratio CI is about as wide as three values a side allow (t, 4 dof)."""
    a, b = _run(3, process_sd=0.03), _run(4, process_sd=0.03)
    fa, fb = fresh_rounds(a, "eager+threads=1", 4), fresh_rounds(b, "eager+threads=1", 4)
    assert fa is not None and fb is not None
    value, ci = fresh_ratio(fa, fb)
    assert ci is not None
    half = math.log(ci[1] / value)
    # the same rounds as if one process had timed them all: 9 "independent" values a side, a narrower CI
    pooled = [FreshRounds(f.key, (tuple(v for p in f.processes for v in p),)) for f in (fa, fb)]
    _, naive = fresh_ratio(*pooled)
    assert naive is not None and half > 1.5 * math.log(naive[1] / value) and half > 0.03


def test_a_screen_only_row_is_widened_to_the_run_to_run_spread_of_a_screen() -> None:
    """A configuration no showdown timed is compared on the screens, with the CI floor that the reports'
    own finalists show (screen against fresh processes)."""
    a, b = _run(1, screen=0.92), _run(2, screen=1.05)
    for doc in (a, b):
        doc["showdown"]["seconds_per_call"].pop("eager+threads=1@1")
    assert screen_spread(a) == pytest.approx(0.083, abs=0.02)
    result = compare_reports(a, b)
    row = next(r for r in result.rows if r.label == "eager+threads=1@1")
    assert row.source == "screen" and row.verdict != "regression"
    assert row.throughput.ci is not None and math.log(row.throughput.ci[1] / row.throughput.value) > 0.1
    assert result.screen_floor is not None and "widened" in result.sources
