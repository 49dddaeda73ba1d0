"""The Optuna search loop over a real SQLite study, with a fake evaluator (pure algorithm tests).

The real evaluator (worker measurements) is exercised end to end in test_cli.py; here end to end only
where the search's own promises need a real process: a run killed mid-measurement, a bad --storage.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.core.recipe import Constraints
from autotune.errors import InputError
from autotune.study import Search, SearchSettings, SearchSpace, display_url
from autotune.study import heartbeat as heartbeat_mod
from tests.support import ROOT, FakeRow, largest_measurement_record, run_cli, tiny_recipe


def settings(tmp_path: Path, **kw: Any) -> SearchSettings:
    base = dict(objective="throughput", constraints=Constraints(), storage=f"sqlite:///{tmp_path / 's.db'}",
                study_name="t", recipe_fingerprint="abc", time_budget_s=1e9, max_trials=0, seed=0)
    base.update(kw)
    return SearchSettings(**base)


SPACE = SearchSpace(variants=("eager", "frozen", "compile"), batch_sizes={
    "eager": (1, 8, 32), "frozen": (1, 8, 32), "compile": (1, 8)})


def test_exhausts_the_space_once_each(tmp_path: Path, fake_row: FakeRow) -> None:
    calls: list[tuple[str, int]] = []

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        calls.append((v, b))
        return fake_row(trial, v, b)

    out = Search(SPACE, settings(tmp_path), evaluate).run()
    assert sorted(calls) == sorted(SPACE.combos())
    assert out.stopped_by == "exhausted"
    assert sorted((r["variant"], r["batch_size"]) for r in out.rows) == sorted(SPACE.combos())
    assert ("compile", 32) not in calls  # outside compile's boundary: never measured


def test_priors_start_where_the_probes_saw_throughput_peak(tmp_path: Path, fake_row: FakeRow) -> None:
    """A variant with a probed throughput peak is measured there first, the others at their largest batch."""
    space = SearchSpace(variants=SPACE.variants, batch_sizes=SPACE.batch_sizes, preferred={"eager": 8, "frozen": 7})
    calls: list[tuple[str, int]] = []
    Search(space, settings(tmp_path, max_trials=3),
           lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert calls == [("eager", 8), ("frozen", 32), ("compile", 8)]  # frozen's 7 is not a candidate: ignored


def test_after_the_priors_the_search_climbs_from_the_leader_to_its_peak(tmp_path: Path, fake_row: FakeRow) -> None:
    """Throughput peaks at 32 and falls past it; from the prior at 256 the climb walks the grid down to 32 and
    stops there (16 is worse), in one trial per step, before TPE explores."""
    import math

    sizes = tuple(2**i for i in range(11))
    space = SearchSpace(variants=("eager",), batch_sizes={"eager": sizes}, preferred={"eager": 256})
    calls: list[int] = []

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        calls.append(b)
        return {**fake_row(trial, v, b), "throughput": 1000.0 * math.exp(-((math.log2(b) - 5) ** 2) / 8)}

    out = Search(space, settings(tmp_path, max_trials=6), evaluate).run()
    assert calls == [256, 128, 512, 64, 32, 16]
    best = max(out.rows, key=lambda r: r["throughput"])
    assert best["batch_size"] == 32


def test_priors_measure_every_variant_at_its_largest_batch_first(tmp_path: Path, fake_row: FakeRow) -> None:
    calls: list[tuple[str, int]] = []
    Search(SPACE, settings(tmp_path, max_trials=3),
           lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert calls == [("eager", 32), ("frozen", 32), ("compile", 8)]


def _first_screens(space: SearchSpace, tmp_path: Path, fake_row: FakeRow, trials: int) -> list[str]:
    """The variants a search over ``space`` measures in its first ``trials`` trials, in order (every row alike)."""
    calls: list[str] = []

    def evaluate(trial: int, v: str, b: int, **_kw: Any) -> dict[str, Any]:
        calls.append(v)
        return {**fake_row(trial, "eager", b), "variant": v}

    Search(space, settings(tmp_path, max_trials=trials), evaluate).run()
    return calls


def test_every_runtime_is_screened_plain_before_its_precisions_and_environments(tmp_path: Path,
                                                                                fake_row: FakeRow) -> None:
    """The variants come crossed depth first (eager with all its precisions and environments, then onnx, ...); a
    ConvNeXt's budget spent itself on ten eager rows and never measured onnx or openvino (session 38). The first
    measurements go breadth first: every runtime plain, then one modifier at a time, then combinations. (The
    bracket strategy orders its screens by expected improvement per second, from its additive model.)"""
    variants = ("eager", "eager+tcmalloc", "eager+bf16", "eager+bf16+tcmalloc", "onnx", "onnx+tcmalloc",
                "onnx+int8", "openvino", "openvino+int8+tcmalloc")
    space = SearchSpace(variants=variants, batch_sizes={v: (8,) for v in variants})
    assert space.screen_order() == ("eager", "onnx", "openvino", "eager+tcmalloc", "eager+bf16", "onnx+tcmalloc",
                                    "onnx+int8", "eager+bf16+tcmalloc", "openvino+int8+tcmalloc")
    assert _first_screens(space, tmp_path, fake_row, 3) == ["eager", "onnx", "openvino"]


def test_the_slow_builds_are_screened_after_the_quick_ones_of_their_tier(tmp_path: Path, fake_row: FakeRow) -> None:
    """On an AVX2 EPYC the quickstart's compile screen took 38 s where the others took 9, and openvino, listed after
    it, was never measured (session 40): torch.compile and export go after the builds of seconds in each tier."""
    variants = ("eager", "compile", "compile:max-autotune", "export", "onnx", "openvino", "compile+bf16", "onnx+int8")
    space = SearchSpace(variants=variants, batch_sizes={v: (16,) for v in variants})
    assert space.screen_tiers() == (("eager", "onnx", "openvino", "compile", "compile:max-autotune", "export"),
                                    ("onnx+int8", "compile+bf16"))
    assert _first_screens(space, tmp_path, fake_row, 3) == ["eager", "onnx", "openvino"]


def test_the_leading_runtime_gets_its_modifiers_first(tmp_path: Path, fake_row: FakeRow) -> None:
    """After the plain screens, a tier's variants go in the order their runtime ranks so far: an EfficientNet whose
    onnx ran 3.8x eager screened eager's precisions and environments first, and its budget ended before onnx or
    openvino got a modifier (session 39). Then the next tier, ranked again by what the last one showed."""
    variants = ("eager", "eager+bf16", "eager+tcmalloc", "onnx", "onnx+int8", "onnx+tcmalloc", "openvino",
                "openvino+int8", "eager+bf16+tcmalloc", "onnx+int8+tcmalloc", "openvino+int8+tcmalloc")
    space = SearchSpace(variants=variants, batch_sizes={v: (8,) for v in variants})
    assert space.screen_tiers() == (("eager", "onnx", "openvino"),
                                    ("eager+bf16", "eager+tcmalloc", "onnx+int8", "onnx+tcmalloc", "openvino+int8"),
                                    ("eager+bf16+tcmalloc", "onnx+int8+tcmalloc", "openvino+int8+tcmalloc"))
    speed = {"eager": 100.0, "onnx": 380.0, "openvino": 200.0, "openvino+int8": 900.0}
    calls: list[str] = []

    def evaluate(trial: int, v: str, b: int, **_kw: Any) -> dict[str, Any]:
        calls.append(v)
        return {**fake_row(trial, "eager", b), "variant": v, "throughput": speed.get(v, speed[v.split("+")[0]])}

    Search(space, settings(tmp_path, max_trials=9), evaluate).run()
    assert calls == ["eager", "onnx", "openvino", "onnx+int8", "onnx+tcmalloc", "openvino+int8", "eager+bf16",
                     "eager+tcmalloc", "openvino+int8+tcmalloc"]  # openvino leads after its int8


def test_a_tiers_precisions_go_before_its_environments() -> None:
    """Within a runtime's tier, a precision before a memory format before a process environment (the variants come
    crossed with the environments innermost: onnx+jemalloc before onnx+int8)."""
    from autotune.study.space import modifier_kind, plain_name

    names = ["onnx+jemalloc", "onnx+channels_last", "onnx+int8", "onnx", "weird-name"]
    assert [modifier_kind(n) for n in names] == [3, 1, 0, 4, 4]
    assert sorted(names[:3], key=modifier_kind) == ["onnx+int8", "onnx+channels_last", "onnx+jemalloc"]
    assert plain_name("openvino+int8+tcmalloc") == "openvino" and plain_name("weird+x") == "weird"


def test_max_trials_and_time_budget(tmp_path: Path, fake_row: FakeRow) -> None:
    out = Search(SPACE, settings(tmp_path, max_trials=4), lambda t, v, b: fake_row(t, v, b)).run()
    assert out.measured_this_run == 4 and out.stopped_by == "max_trials"

    now = [0.0]

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        now[0] += 10.0  # each candidate costs 10 fake seconds
        return fake_row(trial, v, b)

    out = Search(SPACE, settings(tmp_path, study_name="t2", time_budget_s=25.0), evaluate,
                 clock=lambda: now[0]).run()
    assert out.measured_this_run == 3 and out.stopped_by == "time_budget"


def test_failed_variant_is_not_retried_at_other_batch_sizes(tmp_path: Path, fake_row: FakeRow) -> None:
    space = SearchSpace(variants=("eager", "broken"), batch_sizes={"eager": (1, 8), "broken": (1, 8, 32)})
    calls: list[tuple[str, int]] = []
    out = Search(space, settings(tmp_path), lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert [c for c in calls if c[0] == "broken"] == [("broken", 32)]
    pruned = [r for r in out.rows if r["status"] == "pruned"]
    assert {r["batch_size"] for r in pruned} == {1, 8}
    assert all("variant failed at batch 32: boom" in r["reason"] for r in pruned)


def test_an_export_specialised_to_its_batch_is_still_tried_at_batch_1(tmp_path: Path, fake_row: FakeRow) -> None:
    """A variant whose export specialised the batch it was built at (``batch_specific``: a detector's per-image
    loop unrolled at 32) fails at every batch above 1; batch 1 is still measured, where it works, and 8 is not."""
    space = SearchSpace(variants=("eager", "broken"), batch_sizes={"eager": (1, 8), "broken": (1, 8, 32)})
    calls: list[tuple[str, int]] = []

    def evaluate(t: int, v: str, b: int) -> dict[str, Any]:
        calls.append((v, b))
        if v != "broken":
            return fake_row(t, v, b)
        if b == 32:
            return {**fake_row(t, v, b), "batch_specific": True}
        return fake_row(t, "eager", b) | {"variant": "broken"}

    out = Search(space, settings(tmp_path), evaluate).run()
    assert sorted(c for c in calls if c[0] == "broken") == [("broken", 1), ("broken", 32)]
    assert [r["batch_size"] for r in out.rows if r["status"] == "pruned"] == [8]


def test_resume_measures_nothing_twice(tmp_path: Path, fake_row: FakeRow) -> None:
    first = Search(SPACE, settings(tmp_path, max_trials=3), lambda t, v, b: fake_row(t, v, b)).run()
    seen: list[tuple[str, int]] = []
    second = Search(SPACE, settings(tmp_path), lambda t, v, b: seen.append((v, b)) or fake_row(t, v, b)).run()
    done_first = {(r["variant"], r["batch_size"]) for r in first.rows}
    assert not done_first & set(seen)
    assert len(second.rows) == len(SPACE.combos())


def test_study_made_for_another_workload_is_refused(tmp_path: Path, fake_row: FakeRow) -> None:
    from autotune.study import fingerprint_digest

    parts = {"model.factory_file_sha256": "aaaa", "device": "cpu", "torch": "2.5.1"}
    made = settings(tmp_path, max_trials=1, recipe_fingerprint=fingerprint_digest(parts), fingerprint=parts)
    Search(SPACE, made, lambda t, v, b: fake_row(t, v, b)).run()
    Search(SPACE, made, lambda t, v, b: fake_row(t, v, b))  # the same fingerprint resumes
    other = {**parts, "model.factory_file_sha256": "bbbb", "torch": "2.6.0"}
    with pytest.raises(InputError) as info:
        Search(SPACE, settings(tmp_path, recipe_fingerprint=fingerprint_digest(other), fingerprint=other),
               lambda t, v, b: fake_row(t, v, b))
    message = str(info.value)
    assert message.startswith("--study t: the study in sqlite:///") and "made for another setup" in message
    assert "what differs: model.factory_file_sha256: study aaaa, here bbbb; torch: study 2.5.1, here 2.6.0." in message
    assert "device" not in message
    # no parts to compare (a caller that passes only a digest): the old, general message
    Search(SPACE, settings(tmp_path, study_name="bare", max_trials=1), lambda t, v, b: fake_row(t, v, b)).run()
    with pytest.raises(InputError, match="made for another setup; what differs: model, inputs or device"):
        Search(SPACE, settings(tmp_path, study_name="bare", recipe_fingerprint="other"),
               lambda t, v, b: fake_row(t, v, b))


def test_latency_constraint_and_pareto_objective(tmp_path: Path, fake_row: FakeRow) -> None:
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

    from tests.support import search_row as fake_row  # a child process: no fixtures there

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        with open(log, "a") as fh:
            fh.write(f"{v},{b}\n")
        time.sleep(0.2)
        return fake_row(trial, v, b)

    s = SearchSettings(objective="throughput", constraints=Constraints(), storage=storage, study_name="shared",
                       recipe_fingerprint="abc", time_budget_s=120.0)
    Search(SPACE, s, evaluate).run()


@pytest.mark.worker
def test_two_workers_share_one_study(tmp_path: Path, fake_row: FakeRow) -> None:
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
    assert len(measured) == len(combos)  # never twice: popping an enqueued trial is atomic on SQLite too


def _pop_enqueued(storage: str, out: str, go: Any) -> None:
    """Ask trials until none is WAITING; write the numbers of the enqueued ones this process got."""
    import warnings

    import optuna
    from optuna.distributions import CategoricalDistribution

    from autotune.study.storage import make_storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    study = optuna.load_study(study_name="pop", storage=make_storage(storage))
    go.wait()
    got = []
    while study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        trial = study.ask({"x": CategoricalDistribution(list(range(1000)))})
        if trial.number < ENQUEUED:
            got.append(trial.number)
    Path(out).write_text(json.dumps(got))


#: Trials enqueued for the popping race (numbers 0 .. ENQUEUED-1 are the enqueued ones).
ENQUEUED = 150


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_an_enqueued_trial_is_popped_by_one_process_only(tmp_path: Path) -> None:
    """Four processes pop 150 enqueued trials at once from one SQLite study: each trial goes to exactly one.

    Optuna's pop is read-check-update; on SQLite without ``BEGIN IMMEDIATE`` two processes both read WAITING
    and both run the trial (measured before the fix: 158 and 160 pops of 150 trials in two runs).
    """
    import optuna

    from autotune.study.storage import make_storage

    storage = f"sqlite:///{tmp_path / 'pop.db'}"
    study = optuna.create_study(study_name="pop", storage=make_storage(storage))
    for i in range(ENQUEUED):
        study.enqueue_trial({"x": i})
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    outs = [str(tmp_path / f"{i}.json") for i in range(4)]
    procs = [ctx.Process(target=_pop_enqueued, args=(storage, out, go)) for out in outs]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    popped = [n for out in outs for n in json.loads(Path(out).read_text())]
    assert sorted(popped) == list(range(ENQUEUED))


# ----------------------------------------------------------------------------- stale trials (heartbeat)


@pytest.fixture
def short_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Heartbeat every second, stale after two: storages made in this process from now on (read at call time)."""
    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_GRACE_S", 2)


def _die_while_measuring(storage: str) -> None:
    """A process hard-killed in the middle of a measurement: no tell, no cleanup, its heartbeat thread gone."""

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        os._exit(137)

    Search(SPACE, SearchSettings(objective="throughput", constraints=Constraints(), storage=storage,
                                 study_name="t", recipe_fingerprint="abc", time_budget_s=60.0), evaluate).run()


def started_by_a_dead_process(storage: str) -> int:
    """Run a process that dies while measuring its first candidate; returns that trial's number."""
    proc = mp.get_context("spawn").Process(target=_die_while_measuring, args=(storage,))
    proc.start()
    proc.join(timeout=120)
    assert proc.exitcode == 137
    import optuna

    running = [t for t in optuna.load_study(study_name="t", storage=storage).trials if t.state.name == "RUNNING"]
    assert len(running) == 1
    return running[0].number


def trial_state(storage: str, number: int) -> tuple[str, dict[str, Any]]:
    import optuna

    trial = optuna.load_study(study_name="t", storage=storage).trials[number]
    return trial.state.name, trial.user_attrs


@pytest.mark.worker
def test_a_dead_process_trial_is_failed_and_measured_again(tmp_path: Path, short_heartbeat: None,
                                                            fake_row: FakeRow) -> None:
    s = settings(tmp_path, time_budget_s=60.0)
    dead = started_by_a_dead_process(s.storage)
    calls: list[tuple[str, int]] = []
    out = Search(SPACE, s, lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert out.stopped_by == "exhausted"  # not "time_budget": it did not wait for the dead trial for good
    assert calls.count(("eager", 32)) == 1 and sorted(calls) == sorted(SPACE.combos())
    state, attrs = trial_state(s.storage, dead)
    assert state == "FAIL" and "row" not in attrs  # failed as stale: no row, so not "measured"
    assert [r for r in out.rows if r["trial"] == dead] == []
    assert sorted((r["variant"], r["batch_size"]) for r in out.rows) == sorted(SPACE.combos())


def test_a_live_trial_keeps_beating_through_a_long_measurement(tmp_path: Path, short_heartbeat: None,
                                                                fake_row: FakeRow) -> None:
    """Another process checking for stale trials while this one measures for longer than the grace period."""
    s = settings(tmp_path, max_trials=1)
    other = Search(SPACE, s, lambda t, v, b: fake_row(t, v, b))
    seen: list[str] = []

    def slow(trial: int, v: str, b: int) -> dict[str, Any]:
        for _ in range(3):
            time.sleep(1.5)  # 4.5 s in all: more than the 2 s grace, so only the thread's beats keep it alive
            heartbeat_mod.fail_stale_trials(other.study)
            seen.append(trial_state(s.storage, trial)[0])
        return fake_row(trial, v, b)

    out = Search(SPACE, s, slow).run()
    assert seen == ["RUNNING"] * 3
    assert out.measured_this_run == 1 and out.rows[0]["status"] == "ok"


def test_an_exception_from_evaluate_fails_the_trial_and_propagates(tmp_path: Path, fake_row: FakeRow) -> None:
    s = settings(tmp_path)

    def crash(trial: int, v: str, b: int) -> dict[str, Any]:
        raise RuntimeError("the evaluator broke")

    with pytest.raises(RuntimeError, match="the evaluator broke"):
        Search(SPACE, s, crash).run()
    state, attrs = trial_state(s.storage, 0)
    assert state == "FAIL" and "row" not in attrs
    calls: list[tuple[str, int]] = []
    out = Search(SPACE, s, lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert out.stopped_by == "exhausted"  # the failed trial was not left "in flight"
    assert ("eager", 32) in calls and sorted(calls) == sorted(SPACE.combos())


def test_an_interrupt_stops_the_search_and_fails_its_trial(tmp_path: Path, fake_row: FakeRow) -> None:
    s = settings(tmp_path)
    calls: list[tuple[str, int]] = []

    def interrupted_second(trial: int, v: str, b: int) -> dict[str, Any]:
        calls.append((v, b))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake_row(trial, v, b)

    out = Search(SPACE, s, interrupted_second).run()
    assert out.stopped_by == "interrupted" and out.measured_this_run == 1
    assert [(r["variant"], r["batch_size"]) for r in out.rows] == calls[:1]
    import optuna

    states = [t.state.name for t in optuna.load_study(study_name="t", storage=s.storage).trials]
    assert "RUNNING" not in states and states.count("FAIL") == 1


@pytest.mark.parametrize("strategy", ["tpe", "bracket"])
@pytest.mark.parametrize("where", ["in a trial", "between trials"])
def test_an_interrupt_inside_a_storage_transaction_still_fails_its_trial(tmp_path: Path, fake_row: FakeRow,
                                                                        where: str, strategy: str) -> None:
    """Ctrl-C can land while the interrupted code holds a SQLite write transaction (BEGIN IMMEDIATE taken, the
    connection referenced only by the interrupted frames): the trial's failure, written next through another
    connection, then waited 10 s for that lock and the run ended "database is locked", exit 2 (seen once in
    test_cli's interrupt test). The frames' locals are let go first, so the connection closes and its lock goes."""
    import sqlite3

    s = settings(tmp_path, strategy=strategy)
    db = s.storage.removeprefix("sqlite:///")
    calls: list[tuple[str, int]] = []

    def hold_the_lock_then_interrupt() -> None:
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        raise KeyboardInterrupt

    def evaluate(trial: int, v: str, b: int, **_: Any) -> dict[str, Any]:
        calls.append((v, b))
        if len(calls) == 2 and where == "in a trial":
            hold_the_lock_then_interrupt()
        return fake_row(trial, v, b)

    search = Search(SPACE, s, evaluate)
    if where == "between trials":
        search.on_row = lambda row: hold_the_lock_then_interrupt()
    started = time.monotonic()
    out = search.run()
    assert time.monotonic() - started < 8  # no 10-s wait for a lock
    assert out.stopped_by == "interrupted" and out.measured_this_run == 1
    import optuna

    states = [t.state.name for t in optuna.load_study(study_name="t", storage=s.storage).trials]
    assert "RUNNING" not in states


def test_an_interrupt_while_waiting_for_other_workers_still_reports(tmp_path: Path, fake_row: FakeRow) -> None:
    """Ctrl-C during the wait for a combination another worker is measuring: stop with the rows, not a traceback."""
    space = SearchSpace(variants=("eager",), batch_sizes={"eager": (1, 8)})
    first = Search(space, settings(tmp_path, max_trials=1), lambda t, v, b: fake_row(t, v, b)).run()
    assert [r["batch_size"] for r in first.rows] == [8]  # the prior: the largest batch
    import optuna

    study = optuna.load_study(study_name="t", storage=settings(tmp_path).storage)
    study.enqueue_trial({"variant": "eager", "batch_size": 1})
    study.ask()  # batch 1 RUNNING in "another worker" (no heartbeat row: never stale)

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    s = settings(tmp_path)
    out = Search(space, s, lambda t, v, b: pytest.fail("nothing is left to measure here"), sleep=interrupt).run()
    assert out.stopped_by == "interrupted" and out.measured_this_run == 0
    assert [r["batch_size"] for r in out.rows] == [8]


# ----------------------------------------------------------------------------- storage errors


def test_display_url_masks_the_password() -> None:
    assert display_url("postgresql+psycopg2://u:secret@db.example:5432/x") == "postgresql+psycopg2://u:***@db.example:5432/x"
    assert display_url("sqlite:////tmp/out/study.db") == "sqlite:////tmp/out/study.db"
    assert display_url("postgresql://u:secret@host:notaport/x") == "postgresql://u:***@host:notaport/x"
    assert display_url("no url at all") == "no url at all"


@pytest.mark.parametrize(
    ("url", "patterns"),
    [
        ("nosuchdialect://x", ["unknown database kind", "nosuchdialect"]),
        ("not a url", ["not a valid database URL"]),
        ("postgresql+nosuchdriver://u:secret@h/x", ["postgresql+nosuchdriver://u:***@h/x"]),
        ("mysql+nosuchdriver_xyz://u:secret@h/x", ["u:***@h"]),
        ("sqlite:////nonexistent-dir-xyz/study.db", ["unable to open database file"]),
        ("redis://u:secret@localhost", ["Redis storage was removed"]),
    ],
)
def test_a_storage_that_cannot_be_opened_is_an_input_error(tmp_path: Path, url: str, patterns: list[str],
                                                           fake_row: FakeRow) -> None:
    with pytest.raises(InputError) as info:
        Search(SPACE, settings(tmp_path, storage=url), lambda t, v, b: fake_row(t, v, b))
    message = str(info.value)
    assert message.startswith("--storage ") and "secret" not in message
    for p in patterns:
        assert p in message, message


def test_loading_a_study_that_must_exist(tmp_path: Path, fake_row: FakeRow) -> None:
    from autotune.study import load_existing_study

    s = settings(tmp_path, storage=f"sqlite:///{tmp_path / 'w.db'}")
    Search(SPACE, s, lambda t, v, b: fake_row(t, v, b))  # creates study "t"
    assert load_existing_study(s.storage, "t").user_attrs["recipe_fingerprint"] == "abc"
    with pytest.raises(InputError, match="--study: no study named 'nope' in sqlite:///"):
        load_existing_study(s.storage, "nope")
    with pytest.raises(InputError, match=r"^--storage postgresql\+nosuchdriver://u:\*\*\*@h/x: cannot open"):
        load_existing_study("postgresql+nosuchdriver://u:secret@h/x", "t")


def storage_recipe(*, max_seconds: float, ci_target: float) -> str:
    return tiny_recipe(variants='["eager"]', time_budget_s=60, max_seconds=max_seconds, ci_target=ci_target)


@pytest.mark.worker
@pytest.mark.parametrize("url", ["postgresql+psycopg2://u:secret@127.0.0.1:1/x", "nosuchdialect://x"])
def test_run_with_a_bad_storage_is_exit_2_without_the_password(write_recipe, tmp_path: Path, url: str) -> None:
    path = write_recipe(storage_recipe(max_seconds=0.3, ci_target=0.05))
    code, _, err = run_cli("run", str(path), "--out", str(tmp_path / "out"), "--storage", url, "--no-progress")
    assert code == 2, err
    assert "Traceback" not in err and "--storage" in err and "secret" not in err, err


@pytest.mark.slow  # its kind stays in make test (issue 31): test_interrupt's killed-at-measurement run, then its resume
@pytest.mark.worker
def test_a_run_killed_mid_measurement_is_resumed(write_recipe, tmp_path: Path, short_heartbeat: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL `autotune run` while it measures; a second run on the same --out measures that combination."""
    import optuna

    from autotune.cli import main

    out, db = tmp_path / "out", tmp_path / "out" / "study.db"
    slow = write_recipe(storage_recipe(max_seconds=5, ci_target=0.0001), "slow.toml")
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(slow), "--out", str(out), "--no-progress"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    children: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while (killed := _running_with_heartbeat(db)) is None:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no trial started measuring"
            time.sleep(0.05)
        children = _children(proc.pid)  # its measuring worker: reaped below, not left to finish alone
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill(children)

    quick = write_recipe(storage_recipe(max_seconds=0.3, ci_target=0.05), "quick.toml")
    code = main(["run", str(quick), "--out", str(out), "--no-progress", "--time-budget", "40"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "report.json").read_text())
    assert doc["search"]["stopped_by"] == "exhausted"  # before the fix: "time_budget", waiting for a dead trial
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{db}")
    dead = study.trials[killed]
    assert dead.state.name == "FAIL" and "row" not in dead.user_attrs
    combo = (dead.params["variant"], dead.params["batch_size"])
    rows = [c for c in doc["candidates"] if (c["variant"], c["batch_size"]) == combo]
    assert [r["status"] for r in rows] == ["ok"] and rows[0]["trial"] != killed
    assert {(c["variant"], c["batch_size"]) for c in doc["candidates"]} == {("eager", 1), ("eager", 4)}
    assert not [t for t in study.trials if t.state.name == "RUNNING"]


def _running_with_heartbeat(db: Path) -> int | None:
    """Number of a RUNNING trial whose first heartbeat is stored (the process is measuring it), if any."""
    import sqlite3

    if not db.exists():
        return None
    try:
        with sqlite3.connect(db) as con:
            row = con.execute("SELECT t.number FROM trials t JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
                              "WHERE t.state = 'RUNNING'").fetchone()
    except sqlite3.Error:  # the tables are not there yet
        return None
    return None if row is None else int(row[0])


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        out += [int(p) for p in task.read_text().split()]
    return out


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_the_study_reads_well_in_optuna_dashboard(tmp_path: Path, fake_row: FakeRow) -> None:
    """What optuna-dashboard shows: named objectives, the two parameters, scalar columns beside the row."""
    import optuna

    s = settings(tmp_path, objective="pareto", constraints=Constraints(latency_percentile="p90"))
    Search(SPACE, s, lambda t, v, b: fake_row(t, v, b)).run()
    study = optuna.load_study(study_name="t", storage=s.storage)
    assert study.metric_names == ["throughput (samples/s)", "p90 latency (ms)"]
    trial = study.trials[0]
    assert set(trial.params) == {"variant", "batch_size"}
    assert trial.user_attrs["status"] == "ok" and trial.user_attrs["throughput"] > 0
    assert trial.user_attrs["p90_ms"] > 0 and trial.user_attrs["peak_memory_bytes"] > 0


# --------------------------------------------------------------------------- rows: the measurement record


#: What one user attribute may take on any Optuna storage: MySQL's TEXT column (SQLite and PostgreSQL take ~1 GB).
MYSQL_TEXT_BYTES = 65_535


def test_rows_keep_their_raw_samples_in_pieces_every_sql_storage_holds(tmp_path: Path, fake_row: FakeRow) -> None:
    """The largest record (~100 kB) is stored beside its row in pieces under 64 KiB and read back whole."""
    import optuna

    from autotune.core.measurement import Measurement
    from autotune.study import stored_rows

    record = largest_measurement_record()
    out = Search(SPACE, settings(tmp_path, max_trials=2),
                 lambda t, v, b: {**fake_row(t, v, b), "measurement": record}).run()
    assert [r["measurement"] for r in out.rows] == [record, record]
    study = optuna.load_study(study_name="t", storage=settings(tmp_path).storage)
    told = [t for t in study.trials if "row" in t.user_attrs]
    assert len(told) == 2
    for trial in told:
        sizes = {key: len(json.dumps(value).encode()) for key, value in trial.user_attrs.items()}
        assert max(sizes.values()) < MYSQL_TEXT_BYTES, sizes
        assert sorted(k for k in sizes if k.startswith("measurement.")) == [f"measurement.{i}" for i in range(4)]
        assert "measurement" not in trial.user_attrs["row"]  # the row stays a readable dashboard column
    rows = stored_rows(study)
    assert Measurement.from_dict(rows[0]["measurement"]) == Measurement.from_dict(record)


def test_row_attrs_store_no_record_for_a_repeat_and_survive_a_broken_one() -> None:
    from autotune.study.rows import ROW_ATTR, row_attrs, row_from_attrs

    row = {"trial": 3, "variant": "eager", "batch_size": 8, "status": "ok", "measurement": {"samples": "x" * 70_000}}
    attrs = row_attrs(row)
    assert list(attrs) == ["measurement.0", "measurement.1", "measurement.2", ROW_ATTR]  # the row written last
    assert row_from_attrs(attrs) == row
    assert list(row_attrs({**row, "repeat_of_trial": 1})) == [ROW_ATTR]  # its original holds the record
    assert list(row_attrs({**row, "measurement": None})) == [ROW_ATTR]
    broken = {k: v for k, v in attrs.items() if k != "measurement.2"}  # a piece lost: the JSON is cut
    assert row_from_attrs(broken) == {k: v for k, v in row.items() if k != "measurement"}
