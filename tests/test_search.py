"""The Optuna search loop over a real SQLite study, with a fake evaluator (pure algorithm tests).

The real evaluator (worker measurements) is exercised end to end in test_cli.py.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import InputError
from autotune.recipe import Constraints
from autotune.search import Search, SearchSettings, SearchSpace

SPEED = {"eager": 100.0, "frozen": 180.0, "compile": 150.0, "broken": 1.0}


def fake_row(trial: int, variant: str, batch: int, *, latency_ms: float | None = None) -> dict[str, Any]:
    status = "failed" if variant == "broken" else "ok"
    tput = SPEED[variant] * (1 + batch / 64)
    lat = latency_ms if latency_ms is not None else batch / tput * 1e3
    return {
        "trial": trial, "variant": variant, "batch_size": batch, "status": status,
        "reason": "boom" if status == "failed" else None, "feasible": status == "ok", "violations": [],
        "throughput": tput if status == "ok" else None,
        "latency_ms": {"mean": lat, "p50": lat, "p90": lat, "p99": lat} if status == "ok" else None,
        "peak_memory_bytes": batch * 1000, "classification": "flat",
    }


def settings(tmp_path: Path, **kw: Any) -> SearchSettings:
    base = dict(objective="throughput", constraints=Constraints(), storage=f"sqlite:///{tmp_path / 's.db'}",
                study_name="t", recipe_fingerprint="abc", time_budget_s=1e9, max_trials=0, seed=0)
    base.update(kw)
    return SearchSettings(**base)


SPACE = SearchSpace(variants=("eager", "frozen", "compile"), batch_sizes={
    "eager": (1, 8, 32), "frozen": (1, 8, 32), "compile": (1, 8)})


def test_exhausts_the_space_once_each(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        calls.append((v, b))
        return fake_row(trial, v, b)

    out = Search(SPACE, settings(tmp_path), evaluate).run()
    assert sorted(calls) == sorted(SPACE.combos())
    assert out.stopped_by == "exhausted"
    assert sorted((r["variant"], r["batch_size"]) for r in out.rows) == sorted(SPACE.combos())
    assert ("compile", 32) not in calls  # outside compile's boundary: never measured


def test_priors_measure_every_variant_at_its_largest_batch_first(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []
    Search(SPACE, settings(tmp_path, max_trials=3),
           lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert calls == [("eager", 32), ("frozen", 32), ("compile", 8)]


def test_max_trials_and_time_budget(tmp_path: Path) -> None:
    out = Search(SPACE, settings(tmp_path, max_trials=4), lambda t, v, b: fake_row(t, v, b)).run()
    assert out.measured_this_run == 4 and out.stopped_by == "max_trials"

    now = [0.0]

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        now[0] += 10.0  # each candidate costs 10 fake seconds
        return fake_row(trial, v, b)

    out = Search(SPACE, settings(tmp_path, study_name="t2", time_budget_s=25.0), evaluate,
                 clock=lambda: now[0]).run()
    assert out.measured_this_run == 3 and out.stopped_by == "time_budget"


def test_failed_variant_is_not_retried_at_other_batch_sizes(tmp_path: Path) -> None:
    space = SearchSpace(variants=("eager", "broken"), batch_sizes={"eager": (1, 8), "broken": (1, 8, 32)})
    calls: list[tuple[str, int]] = []
    out = Search(space, settings(tmp_path), lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert [c for c in calls if c[0] == "broken"] == [("broken", 32)]
    pruned = [r for r in out.rows if r["status"] == "pruned"]
    assert {r["batch_size"] for r in pruned} == {1, 8}
    assert all("variant failed at batch 32: boom" in r["reason"] for r in pruned)


def test_resume_measures_nothing_twice(tmp_path: Path) -> None:
    first = Search(SPACE, settings(tmp_path, max_trials=3), lambda t, v, b: fake_row(t, v, b)).run()
    seen: list[tuple[str, int]] = []
    second = Search(SPACE, settings(tmp_path), lambda t, v, b: seen.append((v, b)) or fake_row(t, v, b)).run()
    done_first = {(r["variant"], r["batch_size"]) for r in first.rows}
    assert not done_first & set(seen)
    assert len(second.rows) == len(SPACE.combos())


def test_study_made_for_another_workload_is_refused(tmp_path: Path) -> None:
    Search(SPACE, settings(tmp_path, max_trials=1), lambda t, v, b: fake_row(t, v, b)).run()
    with pytest.raises(InputError, match="made for another model"):
        Search(SPACE, settings(tmp_path, recipe_fingerprint="other"), lambda t, v, b: fake_row(t, v, b))


def test_latency_constraint_and_pareto_objective(tmp_path: Path) -> None:
    from autotune.candidate import best_row, pareto_front

    cons = Constraints(max_latency_ms=100.0)
    out = Search(SPACE, settings(tmp_path, objective="pareto", constraints=cons),
                 lambda t, v, b: fake_row(t, v, b)).run()
    assert out.stopped_by == "exhausted"
    front = pareto_front(out.rows, cons)
    assert front
    best = best_row(out.rows, objective="throughput", constraints=cons)
    assert best is not None and best["variant"] == "frozen"


def _worker(storage: str, log: str) -> None:
    import time

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        with open(log, "a") as fh:
            fh.write(f"{v},{b}\n")
        time.sleep(0.2)
        return fake_row(trial, v, b)

    s = SearchSettings(objective="throughput", constraints=Constraints(), storage=storage, study_name="shared",
                       recipe_fingerprint="abc", time_budget_s=120.0)
    Search(SPACE, s, evaluate).run()


def test_two_workers_share_one_study(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    Search(SPACE, SearchSettings(objective="throughput", constraints=Constraints(), storage=storage,
                                 study_name="shared", recipe_fingerprint="abc", time_budget_s=0.0),
           lambda t, v, b: fake_row(t, v, b)).run()  # creates the study, measures nothing
    ctx = mp.get_context("spawn")
    logs = [str(tmp_path / f"w{i}.log") for i in range(2)]
    procs = [ctx.Process(target=_worker, args=(storage, log)) for log in logs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    measured = [tuple(line.split(",")) for log in logs if Path(log).exists()
                for line in Path(log).read_text().splitlines()]
    combos = {(v, int(b)) for v, b in measured}
    assert combos == set(SPACE.combos())
    assert len(measured) <= len(combos) + 1  # at most one race between ask and the in-flight check
