"""Between-process spread in the showdown (pure and with worker doubles), and an honest verdict.

The doubles stand in for workers only to script each process's luck; the real workers are run by
``tests/test_showdown.py::test_a_real_run_decides_by_showdown``.
"""

from __future__ import annotations

import numpy as np
import pytest

from autotune.showdown import (
    MAX_PROCESSES,
    Contender,
    ShowdownSettings,
    hierarchical_median_ci,
    paired_verdict,
    run_showdown,
    simplicity,
    spreads,
    verdict_text,
)
from tests.support import PausableDouble


def _row(variant: str, thr: float) -> dict:
    return {"trial": 0, "variant": variant, "batch_size": 1, "status": "ok", "feasible": True, "throughput": thr,
            "throughput_ci": [thr * 0.99, thr * 1.01], "compiler": variant, "latency_ms": {"p99": 1000.0 / thr},
            "peak_memory_bytes": 1}


def test_the_ci_holds_the_spread_between_processes() -> None:
    """Four processes whose luck differs by 2% (sd), three rounds each 0.2% apart, true median 0: over 300
    seeded data sets the rounds-only bootstrap covers the truth ~72% of the time, the two-level one ~85%."""
    rng = np.random.default_rng(42)
    groups = [0, 1, 2, 3] * 3
    flat = nested = 0
    for i in range(300):
        d = rng.normal(0.0, 0.02, 4)[groups] + rng.normal(0.0, 0.002, 12)
        lo, hi = hierarchical_median_ci(d, (), seed=i, n_boot=500)
        flat += lo <= 0.0 <= hi
        lo, hi = hierarchical_median_ci(d, groups, seed=i, n_boot=500)
        nested += lo <= 0.0 <= hi
    assert nested / 300 >= 0.8 and nested - flat >= 0.08 * 300
    d = rng.normal(0.0, 0.01, 12)
    # one process: the plain bootstrap over rounds, to the bit
    assert hierarchical_median_ci(d, [0] * 12, seed=1) == hierarchical_median_ci(d, (), seed=1)
    perf = np.exp(np.array([0.03, -0.03, 0.0])[[0, 1, 2] * 4] + 0.003 * rng.standard_normal(12))
    within, between = spreads(perf, [0, 1, 2] * 4)
    assert within == pytest.approx(0.003, rel=0.6) and between == pytest.approx(0.03, rel=0.3)
    assert spreads(perf)[1] is None


def test_the_standing_reports_both_spreads() -> None:
    rounds = 9
    procs = tuple(r % 3 for r in range(rounds))
    lead = Contender("frozen@1", 1, (0.01,) * rounds, simplicity({"compiler": "frozen"}), processes=procs)
    luck = np.array([1.0, 1.05, 0.97])[list(procs)]
    other = Contender("eager@1", 1, tuple(0.0103 * luck), simplicity({"compiler": "eager"}), processes=procs)
    flat = paired_verdict([lead, Contender(**{**other.__dict__, "processes": ()})]).standing("eager@1")
    nested = paired_verdict([lead, other]).standing("eager@1")
    assert nested.ratio == flat.ratio
    assert nested.ratio_ci[1] - nested.ratio_ci[0] >= flat.ratio_ci[1] - flat.ratio_ci[0]
    assert nested.process_spread is not None and nested.process_spread > 0.02
    assert nested.round_spread == pytest.approx(0.0, abs=1e-9)


class _LuckyRunner(PausableDouble):
    """A worker double: each process gets its own speed factor (its luck); slices vary 0.2% around it."""

    def __init__(self, speeds: dict[str, float], luck: float, rng: np.random.Generator) -> None:
        super().__init__()
        self.speeds, self.luck, self.rng = speeds, luck, rng
        self.seconds = 0.0

    def call(self, message: dict, *, timeout: float) -> dict:
        if message["op"] == "stage":
            self.seconds = self.speeds[message["variant"]] * self.luck
            return {"status": "ok"}
        s = self.seconds * (1.0 + 0.002 * self.rng.standard_normal())
        return {"status": "ok", "seconds_per_call": s, "load": {"foreign_cores": 0.0, "disturbed": False}}

    def close(self) -> None:
        pass


def _lucky_showdown(spread: float, *, rounds: int = 4, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    speeds = {"eager": 0.0102, "frozen": 0.0100}  # eager 2% slower: on the margin
    settings = ShowdownSettings(rounds=rounds, round_seconds=0.1, margin=0.02, objective="throughput",
                                latency_percentile="p99", timeout_s=10, processes=3, seed=seed)
    return run_showdown([_row("frozen", 100), _row("eager", 98)], recipe_data={}, settings=settings,
                        make_runner=lambda: _LuckyRunner(speeds, float(1.0 + spread * rng.standard_normal()), rng))


def test_processes_are_added_while_their_spread_is_comparable_to_the_margin() -> None:
    calm = _lucky_showdown(0.0)
    assert calm["processes_used"] == 3 and sorted(set(calm["round_process"])) == [0, 1, 2]
    lucky = _lucky_showdown(0.04)
    assert lucky["processes_used"] > 3 and lucky["processes_used"] <= MAX_PROCESSES
    assert set(lucky["round_process"]) == set(range(lucky["processes_used"]))
    standing = next(s for s in lucky["verdict"]["standings"] if s["key"] == "eager@1")
    assert standing["process_spread"] > 0.01 and standing["round_spread"] < 0.01
    # six processes, 4% apart, cannot separate a 2% difference at a 2% margin: the run says so
    assert lucky["verdict"]["undecided"] == ["eager@1"]
    assert lucky["verdict"]["text"].startswith("Undecided:") and "wins" not in lucky["verdict"]["text"]


def _straddling_showdown() -> dict:
    """A stored showdown (the rounds as a run records them) whose eager CI straddles 0.98 at the end."""
    rng = np.random.default_rng(3)
    rounds = 6
    frozen = 0.0100 * (1.0 + 0.002 * rng.standard_normal(rounds))
    eager = 0.0102 * np.array([1.0, 1.04, 0.97] * 2) * (1.0 + 0.002 * rng.standard_normal(rounds))
    procs = [r % 3 for r in range(rounds)]
    rows = {"frozen@1": _row("frozen", 100), "eager@1": _row("eager", 98)}
    contenders = [Contender(k, 1, tuple(v), simplicity(rows[k]), p99_ms=10.0, processes=tuple(procs))
                  for k, v in (("frozen@1", frozen), ("eager@1", eager))]
    verdict = paired_verdict(contenders, margin=0.02)
    doc = {"rounds": rounds, "round_seconds": 0.1, "margin": 0.02, "objective": "throughput", "processes": 3,
           "processes_used": 3, "round_process": procs, "finalists": list(rows),
           "seconds_per_call": {"frozen@1": list(frozen), "eager@1": list(eager)},
           "disturbed_rounds": [], "rounds_run": rounds, "burn_in_rounds": 0,
           "rounds_compared": list(range(rounds)), "dropped": {}, "verdict": verdict.to_dict()}
    doc["verdict"]["text"] = verdict_text(doc)
    return doc


def test_a_ci_straddling_the_margin_when_the_rounds_run_out_is_undecided() -> None:
    doc = _straddling_showdown()
    v = doc["verdict"]
    eager = next(s for s in v["standings"] if s["key"] == "eager@1")
    assert eager["ratio_ci"][0] < 0.98 <= eager["ratio_ci"][1]
    assert v["undecided"] == ["eager@1"]
    assert v["text"].startswith("Undecided:") and "eager@1" in v["text"] and v["pick"] in v["text"]
    assert "picked by" in v["text"] and "wins" not in v["text"]


def test_a_busy_showdown_says_so_first() -> None:
    doc = _straddling_showdown()
    doc["disturbed_rounds"] = [0, 1, 2, 3]
    text = verdict_text(doc)
    assert text is not None and text.startswith("Busy machine: 4 of 6 showdown rounds")
    assert "Undecided:" in text
