"""The final showdown: the paired comparison and tie-break (pure), and a real run that uses them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autotune.showdown import (
    Contender,
    paired_verdict,
    recommendation,
    select_finalists,
    simplicity,
)
from tests.support import PausableDouble, RealRun


def _contender(key: str, level: float, *, rounds: int = 6, noise: float = 0.0, seed: int = 0,
               compiler: str = "eager", shared: np.ndarray | None = None, p99: float = 1.0) -> Contender:
    rng = np.random.default_rng(seed)
    machine = np.ones(rounds) if shared is None else shared
    secs = level * machine * (1.0 + noise * rng.standard_normal(rounds))
    return Contender(key=key, batch_size=1, seconds_per_call=tuple(secs),
                     simplicity=simplicity({"compiler": compiler}), p99_ms=p99)


def test_a_clear_winner_is_not_a_tie() -> None:
    v = paired_verdict([_contender("eager@1", 1.0, compiler="eager"), _contender("compile@1", 0.8, compiler="compile")])
    assert v.leader == v.pick == "compile@1"
    assert not v.tie
    assert v.standing("eager@1").ratio == pytest.approx(0.8)


def test_within_the_margin_is_a_tie_won_by_the_simpler_variant() -> None:
    v = paired_verdict([_contender("compile@1", 0.99, compiler="compile"),
                        _contender("eager@1", 1.0, compiler="eager")], margin=0.02)
    assert v.leader == "compile@1"
    assert v.tie and v.pick == "eager@1"
    assert "simplest execution first" in v.tie_break


def test_a_difference_beyond_the_margin_is_not_a_tie() -> None:
    v = paired_verdict([_contender("compile@1", 0.95, compiler="compile"), _contender("eager@1", 1.0)], margin=0.02)
    assert not v.tie and v.pick == "compile@1"


def test_a_noisy_finalist_whose_median_is_beyond_the_margin_is_not_a_tie() -> None:
    """The rounds of a live showdown (frozen+threads=2 at batch 64 and 32, samples/s per round, 2-core machine):
    batch 32 is 5.5% slower by the paired median, but with ~6% noise per round its CI reaches 1.0. Handing it
    the tie let the tie-break (lower p99) pick it; the median decides ties now."""
    b64 = [786, 770, 705, 685, 777, 767, 740, 639, 679, 717, 765]
    b32 = [720, 722, 720, 685, 715, 725, 661, 687, 595, 701, 723]
    frozen = simplicity({"compiler": "frozen"})
    v = paired_verdict([Contender("f@64", 64, tuple(64 / x for x in b64), frozen, p99_ms=90.0),
                 Contender("f@32", 32, tuple(32 / x for x in b32), frozen, p99_ms=48.0)], margin=0.02)
    s = v.standing("f@32")
    assert s.ratio_ci[1] >= 0.98 > s.ratio  # the CI cannot exclude a tie, the median is beyond the margin
    assert not v.tie and v.pick == v.leader == "f@64"


def test_the_paired_ratio_cancels_what_a_round_shares() -> None:
    """A busy machine slows whole rounds; pairing within rounds still sees a clean 10% gap."""
    busy = np.array([1.0, 1.6, 1.0, 2.0, 1.1, 1.0])
    a = _contender("a@1", 1.0, shared=busy, noise=0.002, seed=1)
    b = _contender("b@1", 0.9, shared=busy, noise=0.002, seed=2)
    v = paired_verdict([a, b])
    s = v.standing("a@1")
    assert s.ratio == pytest.approx(0.9, rel=0.01)
    assert 0.88 < s.ratio_ci[0] <= s.ratio_ci[1] < 0.92
    assert s.round_spread > 0.2  # the rounds themselves moved a lot: reported, not hidden


def test_tie_break_then_p99_then_memory() -> None:
    a = Contender("eager@4", 4, (1.0,) * 3, simplicity({"compiler": "eager"}), p99_ms=5.0)
    b = Contender("eager@2", 2, (0.5,) * 3, simplicity({"compiler": "eager"}), p99_ms=2.0)
    assert paired_verdict([a, b]).pick == "eager@2"


def test_latency_objective_compares_latency() -> None:
    fast = Contender("a@1", 1, (1.0,) * 3, (0,), latency_seconds=(0.010,) * 3)
    slow = Contender("b@1", 1, (0.5,) * 3, (0,), latency_seconds=(0.020,) * 3)
    assert paired_verdict([fast, slow], objective="latency").pick == "a@1"


def test_compare_rejects_unequal_rounds() -> None:
    with pytest.raises(ValueError, match="same number"):
        paired_verdict([Contender("a@1", 1, (1.0, 1.0), (0,)), Contender("b@1", 1, (1.0,), (0,))])


def _row(trial: int, variant: str, thr: float, half: float, *, feasible: bool = True) -> dict:
    return {"trial": trial, "variant": variant, "batch_size": 1, "status": "ok", "feasible": feasible,
            "throughput": thr, "throughput_ci": [thr * (1 - half), thr * (1 + half)], "compiler": variant,
            "latency_ms": {"p99": 1000.0 / thr}, "peak_memory_bytes": 1}


def test_finalists_are_the_leader_and_every_row_that_can_still_reach_it() -> None:
    rows = [_row(0, "eager", 100, 0.01), _row(1, "script", 99, 0.02), _row(2, "frozen", 90, 0.01),
            _row(3, "trace", 80, 0.01), _row(4, "compile", 70, 0.5), _row(5, "export", 200, 0.01, feasible=False)]
    keys = [f"{r['variant']}" for r in select_finalists(rows, objective="throughput", min_finalists=2)]
    assert keys == ["eager", "script", "compile"]  # compile's wide CI still reaches eager's lower bound
    assert len(select_finalists(rows, objective="throughput", min_finalists=3)) == 4
    rows[3]["foreign_cores"] = 1.0  # trace's window was shared with a busy neighbour: it gets another look
    keys = [f"{r['variant']}" for r in select_finalists(rows, objective="throughput", min_finalists=2)]
    assert keys == ["eager", "script", "trace", "compile"]
    assert select_finalists([], objective="throughput") == []


def test_recommendation_follows_the_verdict() -> None:
    rows = [_row(0, "eager", 100, 0.01), _row(1, "compile", 101, 0.01)]
    contenders = [Contender("eager@1", 1, (0.0101,) * 3, simplicity(rows[0])),
                  Contender("compile@1", 1, (0.0100,) * 3, simplicity(rows[1]))]
    verdict = paired_verdict(contenders).to_dict()
    rec = recommendation(rows, {"verdict": verdict}, fallback=rows[1])
    assert rec is not None and rec["variant"] == "eager" and rec["decided_by"] == "showdown"
    assert rec["showdown"]["tie"] and rec["showdown"]["tied_with"] == ["compile@1"]
    assert recommendation(rows, None, fallback=rows[1])["decided_by"] == "search"


def test_the_headline_throughput_is_the_showdowns_fresh_processes() -> None:
    """The screen (a reused worker) said 100/s; the rounds in fresh processes say ~110/s: the report says 110."""
    rows = [_row(0, "eager", 100, 0.01), _row(1, "compile", 90, 0.01)]
    rounds = (1 / 108, 1 / 110, 1 / 112, 1 / 109, 1 / 111)
    contenders = [Contender("eager@1", 1, rounds, simplicity(rows[0])),
                  Contender("compile@1", 1, tuple(r * 1.2 for r in rounds), simplicity(rows[1]))]
    verdict = paired_verdict(contenders).to_dict()
    rec = recommendation(rows, {"verdict": verdict, "objective": "throughput"}, fallback=rows[0])
    assert rec is not None and rec["throughput_source"] == "showdown"
    assert rec["throughput"] == pytest.approx(110.0)
    lo, hi = rec["throughput_ci"]
    assert 108 <= lo <= 110 <= hi <= 112
    assert rec["showdown"]["screen_throughput"] == 100
    # a traffic's partial batches: a call serves its mean rows, not the batch size
    traffic_row = {**rows[0], "traffic": {"samples_per_call": 0.5}}
    from autotune.showdown import contender_from

    assert contender_from(traffic_row, rounds).batch_size == 0.5
    # under the latency objective the rounds' perf is 1/latency: no throughput is made of it
    latency = recommendation(rows, {"verdict": verdict, "objective": "latency"}, fallback=rows[0])
    assert latency is not None and "throughput_source" not in latency and latency["throughput"] == 100


@pytest.mark.worker
def test_a_real_run_decides_by_showdown(showdown_run: RealRun) -> None:
    """Real workers: finalists staged in their own processes, sliced in interleaved rounds."""
    assert showdown_run.code == 0, showdown_run.stderr
    out = showdown_run.stdout
    doc = json.loads((showdown_run.out / "report.json").read_text())
    sd = doc["showdown"]
    assert sd["processes"] == 1 and sd["processes_used"] == 1  # one process: no spread between processes to add for
    assert sd["verdict"] is not None and sd["finalists"] == sorted(sd["finalists"], key=sd["finalists"].index)
    assert set(sd["seconds_per_call"]) == {"eager@2", "script@2"}
    # script has a file form: saved and timed as shipped (its load.py, a worker that built nothing); eager is code
    assert sd["staged_from"] == {"eager@2": "build", "script@2": "artifact"}
    assert sd["stopped_by"] in ("settled", "deadline", "round_cap")  # read back through the report's schema
    assert not list(showdown_run.out.glob(".artifact.finalists.*"))  # removed after the showdown
    assert "script@2 was timed as shipped" in (showdown_run.out / "report.md").read_text()
    # 1 burn-in round (the process's first slice), then 3 undisturbed rounds wanted; rounds a neighbour disturbed,
    # or an undecided verdict, run more (at most 3 x 3 + 1 in all)
    assert sd["burn_in_rounds"] == 1 and 4 <= sd["rounds_run"] <= 10
    assert min(sd["rounds_compared"]) >= 1
    assert sd["verdict"]["rounds"] == len(sd["rounds_compared"])
    assert all(len(v) == sd["rounds_run"] and all(math.isfinite(x) and x > 0 for x in v)
               for v in sd["seconds_per_call"].values())
    assert all(len(v) == sd["rounds_run"] for v in sd["foreign_cores"].values())
    # what staging took (a save for script's artifact, one stage per finalist), beside the cost the fit assumed
    assert len(sd["stage_seconds"]) == 2 and all(0 < s < sd["staging_seconds"] for s in sd["stage_seconds"])
    assert sum(sd["stage_seconds"]) < sd["staging_seconds"] < sd["wall_seconds"] and sd["estimated_seconds"] > 0
    assert doc["recommendation"]["decided_by"] == "showdown"
    assert f"{doc['recommendation']['variant']}@2" == sd["verdict"]["pick"]
    assert "Showdown:" in out
    assert "## Showdown" in (showdown_run.out / "report.md").read_text()
    # the other finalists' workers were stopped while one was timed, and the report says so
    assert sd["quiet"] is True and "stopped (SIGSTOP)" in (showdown_run.out / "report.md").read_text()


class _FakeRunner(PausableDouble):
    """A worker double for the orchestration: scripted slices (the real run is tested above)."""

    def __init__(self, seconds: float, slices: list[int], everyone: list[PausableDouble] | None = None) -> None:
        super().__init__(everyone)
        self.seconds = seconds
        self.slices = slices  # shared by the finalists: the machine's timeline

    def call(self, message: dict, *, timeout: float) -> dict:
        self.paused = False
        if message["op"] == "stage":
            return {"status": "ok"}
        self.slice_started()
        self.slices.append(len(self.slices) + 1)
        busy = len(self.slices) in (2, 3, 4)  # a neighbour during the first rounds' slices
        load: dict = {"foreign_cores": 1.0 if busy else 0.0, "disturbed": busy}
        if busy:  # what the worker's /proc reading would name (autotune.core.contention.top_consumers)
            load["consumers"] = [{"name": "spinner", "pid": 4242, "cores": 0.97}]
        return {"status": "ok", "seconds_per_call": self.seconds * (5.0 if busy else 1.0), "load": load}

    def close(self) -> None:
        pass


def test_a_deadline_passed_while_staging_still_gets_the_minimum_rounds() -> None:
    """Staging is the costly part; once it is done, min(rounds, MIN_ROUNDS_STAGED) rounds run even past the
    deadline (the demo's showdown ran 2 rounds over 3 processes and decided nothing), and no more."""
    import time

    from autotune.showdown import ShowdownSettings, run_showdown
    from autotune.showdown.rounds import MIN_ROUNDS_STAGED

    rows = [_row(0, "eager", 100, 0.01), _row(1, "frozen", 110, 0.01)]
    speeds = iter([0.010] * 3 + [0.0091] * 3)  # three processes of eager, then three of frozen
    timeline: list[int] = [10, 11, 12, 13]  # past the busy slices: every round is quiet
    doc = run_showdown(rows, recipe_data={}, make_runner=lambda: _FakeRunner(next(speeds), timeline),
                       settings=ShowdownSettings(rounds=8, round_seconds=0.1, margin=0.02, objective="throughput",
                                                 latency_percentile="p99", timeout_s=10, processes=3,
                                                 deadline=time.monotonic() - 1.0))
    assert doc["rounds_run"] == MIN_ROUNDS_STAGED == 6
    assert set(doc["round_process"]) == {0, 1, 2}  # every process compared
    assert doc["verdict"]["pick"] == "frozen@1"
    # the progress lines counted toward 8 undisturbed compared rounds; the document and the report say what ended them
    from autotune.report.sections import showdown_summary

    assert doc["stopped_by"] == "deadline"
    text = showdown_summary({"showdown": doc, "candidates": rows}, busy=False) or ""
    assert "The run's time budget ended the rounds after 3 undisturbed compared rounds of the 8 asked for" in text
    assert "time budget ended" not in (showdown_summary({"showdown": {**doc, "stopped_by": "settled"},
                                                         "candidates": rows}, busy=False) or "")


def test_disturbed_rounds_are_run_again_and_left_out() -> None:
    from autotune.showdown import ShowdownSettings, run_showdown

    rows = [_row(0, "eager", 100, 0.01), _row(1, "frozen", 110, 0.01)]
    speeds = iter([0.010, 0.0091])
    timeline: list[int] = []
    everyone: list[PausableDouble] = []
    doc = run_showdown(rows, recipe_data={}, make_runner=lambda: _FakeRunner(next(speeds), timeline, everyone),
                       settings=ShowdownSettings(rounds=3, round_seconds=0.1, margin=0.02, objective="throughput",
                                                 latency_percentile="p99", timeout_s=10, processes=1))
    # quiet rounds: while one finalist was timed, the other's worker was stopped, every slice
    assert doc["quiet"] and all(d.ran_beside and set(d.ran_beside) == {0} for d in everyone)
    assert doc["disturbed_rounds"] == [0, 1] and doc["rounds_run"] == 5
    assert doc["rounds_compared"] == [2, 3, 4] and doc["stopped_by"] == "settled"
    # and what disturbed them, named by process, for the report's sentence
    assert doc["disturbed_by"] == [{"name": "spinner", "pid": 4242, "rounds": 2, "cores": 0.97}]
    from autotune.report.sections import showdown_summary

    text = showdown_summary({"showdown": doc, "candidates": rows}, busy=False) or ""
    assert "2 of 5 rounds ran while processes outside autotune used more than 0.1 core (seen using CPU " \
           "meanwhile: spinner (pid 4242) in 2 rounds, up to 0.97 core); they were left out." in text
    assert "(1 per finalist, measure.processes; 3 or more see it)" in text
    cut = showdown_summary({"showdown": {**doc, "processes_asked": 3}, "candidates": rows}, busy=False) or ""
    assert "(1 per finalist, the time left did not cover measure.processes = 3; 3 or more see it)" in cut
    v = doc["verdict"]
    assert v["pick"] == "frozen@1" and not v["tie"]
    eager = next(s for s in v["standings"] if s["key"] == "eager@1")
    assert eager["ratio"] == pytest.approx(0.91, rel=1e-6)  # the busy rounds did not move it


def test_a_tie_that_is_a_coin_flip_is_undecided() -> None:
    """A CI straddling 1 - margin is undecided; a clear loss or a clear tie is not."""
    from autotune.showdown import undecided

    lead = _contender("frozen@1", 1.0, compiler="frozen")
    # 5% slower with 6% noise per round: the CI reaches 0.98 and goes below it
    coin = paired_verdict([lead, _contender("eager@1", 1.05, noise=0.06, seed=3)], margin=0.02)
    lo, hi = coin.standing("eager@1").ratio_ci
    assert lo < 0.98 <= hi and undecided(coin)
    assert not undecided(paired_verdict([lead, _contender("eager@1", 1.25, noise=0.01)], margin=0.02))  # clearly slower
    assert not undecided(paired_verdict([lead, _contender("eager@1", 1.001)], margin=0.02))  # clearly the same


class _NoisyRunner(PausableDouble):
    """Slices around a level with seeded per-slice noise (for the undecided-tie extension)."""

    def __init__(self, seconds: float, noise: float, seed: int) -> None:
        super().__init__()
        self.seconds, self.noise = seconds, noise
        self.rng = np.random.default_rng(seed)

    def call(self, message: dict, *, timeout: float) -> dict:
        if message["op"] == "stage":
            return {"status": "ok"}
        s = self.seconds * (1.0 + self.noise * self.rng.standard_normal())
        return {"status": "ok", "seconds_per_call": s, "load": {"foreign_cores": 0.0, "disturbed": False}}

    def close(self) -> None:
        pass


def test_the_showdown_runs_more_rounds_while_a_tie_is_a_coin_flip() -> None:
    """eager 6% slower, 3% noise per slice: 4 rounds leave its tie undecided, so rounds go on (up to 3x) until
    they settle it (eager not tied: frozen, the faster, is picked); with no noise 4 rounds are enough."""
    from autotune.showdown import MAX_ROUNDS_FACTOR, ShowdownSettings, run_showdown

    rows = [_row(0, "eager", 100, 0.01), _row(1, "frozen", 106, 0.01)]
    settings = ShowdownSettings(rounds=4, round_seconds=0.1, margin=0.02, objective="throughput",
                                latency_percentile="p99", timeout_s=10, processes=1)

    def run(noise: float) -> dict:
        seeds = iter([11, 12])
        speeds = iter([0.0106, 0.0100])
        return run_showdown(rows, recipe_data={}, settings=settings,
                            make_runner=lambda: _NoisyRunner(next(speeds), noise, next(seeds)))

    quiet = run(0.0)
    assert quiet["rounds_run"] == 4 + 1  # the rounds asked for, after the process's burn-in round
    noisy = run(0.03)
    assert 4 + 1 < noisy["rounds_run"] <= MAX_ROUNDS_FACTOR * 4 + 1
    eager = next(s for s in noisy["verdict"]["standings"] if s["key"] == "eager@1")
    assert eager["ratio_ci"][1] < 0.98  # settled: shown slower than the margin
    assert noisy["verdict"]["pick"] == "frozen@1" and not noisy["verdict"]["tie"]


def test_the_progress_line_counts_what_it_says_it_counts() -> None:
    """Issue 31: "round 2 (0/6 undisturbed so far)" during the burn-in read as "every round was disturbed"."""
    from autotune.showdown import ShowdownSettings
    from autotune.showdown.rounds import _progress_line

    settings = ShowdownSettings(rounds=6, round_seconds=0.1, margin=0.02, objective="throughput",
                                latency_percentile="p99", timeout_s=10, processes=3)
    assert "burn-in 2 of 3" in _progress_line(2, [False], settings)
    assert "undisturbed" not in _progress_line(3, [False, False], settings)
    line = _progress_line(6, [False, False, False, True, False], settings)
    assert "1 of 2 compared rounds so far undisturbed" in line and "6 undisturbed wanted" in line


def test_an_undecided_verdict_picks_the_simplest_it_could_not_separate() -> None:
    """Issue 31: resnet18, tcmalloc led by a hair, glibc undecided against it (CI straddling the margin): the
    default environment is picked, as for a tie, and the verdict says how."""
    rng = np.random.default_rng(5)
    lead = 0.0100 * (1.0 + 0.002 * rng.standard_normal(8))
    glibc = 0.0102 * np.array([1.0, 1.05, 0.96, 1.03] * 2) * (1.0 + 0.002 * rng.standard_normal(8))
    procs = tuple(r % 2 for r in range(8))
    tc = Contender("eager+tcmalloc@16", 16, tuple(lead), simplicity({"compiler": "eager",
                                                                     "variant": "eager+tcmalloc"}), processes=procs)
    default = Contender("eager@16", 16, tuple(glibc), simplicity({"compiler": "eager", "variant": "eager"}),
                        processes=procs)
    v = paired_verdict([tc, default], margin=0.02)
    assert v.leader == "eager+tcmalloc@16" and v.undecided == ("eager@16",)
    assert v.pick == "eager@16" and "could not separate" in v.how_picked
    # a clear loss stays a loss: 10% slower with a tight CI is not in the running
    slow = Contender("eager@16", 16, tuple(lead * 1.10), simplicity({"compiler": "eager", "variant": "eager"}),
                     processes=procs)
    assert paired_verdict([tc, slow], margin=0.02).pick == "eager+tcmalloc@16"
    # slower for sure, though perhaps by less than the margin (its CI below 1, its top above the margin's floor: the
    # busy reproducibility run's eager at 0.82x, CI 0.77-0.98): undecided, and not picked over the leader
    wide = 0.0100 * np.array([1.30, 1.02, 1.25, 1.01, 1.28, 1.03, 1.22, 1.015]) * (1.0 + 0.002 * rng.standard_normal(8))
    behind = Contender("eager@16", 16, tuple(wide), simplicity({"compiler": "eager", "variant": "eager"}),
                       processes=procs)
    v = paired_verdict([tc, behind], margin=0.02)
    (s,) = [s for s in v.standings if s.key == "eager@16"]
    assert s.undecided and s.ratio_ci[1] < 1.0 and s.ratio_ci[1] >= 0.98, s
    assert v.pick == "eager+tcmalloc@16"


class _RecordingRunner(_NoisyRunner):
    """Records the warm-up each slice request asks for."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds, 0.0, 0)
        self.warmups: list[float] = []

    def call(self, message: dict, *, timeout: float) -> dict:
        if message["op"] == "slice":
            self.warmups.append(float(message.get("warmup_seconds") or 0.0))
            assert timeout >= message["seconds"] + self.warmups[-1]  # the warm-up is not taken from the slice's time
        return super().call(message, timeout=timeout)


@pytest.mark.parametrize("quiet", [True, False])
def test_a_continued_worker_is_asked_to_warm_up_before_its_slice_and_a_running_one_is_not(quiet: bool) -> None:
    """Quiet rounds stop the other workers (SIGSTOP) and continue one for its slice: it is then asked for untimed
    calls first (resume_warmup of a round); workers left running never stopped, so they are not."""
    from autotune.showdown import ShowdownSettings, run_showdown

    rows = [_row(0, "eager", 100, 0.01), _row(1, "frozen", 120, 0.01)]
    settings = ShowdownSettings(rounds=3, round_seconds=0.1, margin=0.02, objective="throughput",
                                latency_percentile="p99", timeout_s=10, processes=1, quiet=quiet, resume_warmup=0.2)
    made: list[_RecordingRunner] = []
    speeds = iter([0.01, 0.0083])

    def make() -> _RecordingRunner:
        made.append(_RecordingRunner(next(speeds)))
        return made[-1]

    run_showdown(rows, recipe_data={}, settings=settings, make_runner=make)
    warmups = [w for r in made for w in r.warmups]
    assert warmups and all(w == pytest.approx(0.02 if quiet else 0.0) for w in warmups)


def test_a_slice_warm_up_is_untimed() -> None:
    """time_slice's warm-up calls run before the timed blocks and are not counted in them."""
    import time

    import torch

    from autotune.worker.timing import time_slice

    made: list[float] = []

    def call() -> None:
        made.append(time.perf_counter())
        time.sleep(0.001)

    cold = time_slice(call, device=torch.device("cpu"), seconds=0.03, per_call=False)
    untimed_cold = len(made) - cold.calls
    made.clear()
    warm = time_slice(call, device=torch.device("cpu"), seconds=0.03, per_call=False, warmup_seconds=0.05)
    untimed_warm = len(made) - warm.calls
    assert untimed_cold <= 2  # the probe cycle only
    assert untimed_warm >= untimed_cold + 10  # 0.05 s of 1-ms calls first
    assert made[untimed_warm - 1] - made[0] >= 0.045


class _ShippedRunner(_FakeRunner):
    """Records each stage request; a stage with ``shipped`` reports the artifact traffic's samples per call."""

    def __init__(self, seconds: float, slices: list[int], stages: list[dict]) -> None:
        super().__init__(seconds, slices)
        self.stages = stages

    def call(self, message: dict, *, timeout: float) -> dict:
        if message["op"] == "stage":
            self.stages.append(message)
            return {"status": "ok", "samples_per_call": 3.0} if "shipped" in message else {"status": "ok"}
        return super().call(message, timeout=timeout)


def test_finalists_with_a_file_form_are_staged_from_their_artifact_and_a_failed_save_falls_back(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Orchestration with doubles (the real chain: test_showdown_shipped and the real run above): each file-form
    finalist's artifact is saved once, not once per process; its processes are staged from it and its contender
    counts the artifact traffic's samples per call; a finalist whose save fails is staged built, with a note; eager
    never asks for an artifact."""
    from autotune.showdown import ShowdownSettings, run_showdown
    from autotune.showdown import rounds as rounds_module

    saved: list[str] = []

    def fake_save(recipe_data, row, directory, *, make_runner, timeout):
        saved.append(row["variant"])
        if row["variant"] == "onnx":
            return {"status": "failed", "reason": "the exporter refused"}
        directory.mkdir(parents=True)
        (directory / "load.py").write_text("def load():\n    return lambda x: x\n")
        return {"status": "ok", "kind": "torchscript"}

    monkeypatch.setattr(rounds_module, "write_finalist_artifact", fake_save)
    rows = [_row(0, "frozen", 110, 0.01), _row(1, "onnx", 100, 0.01), _row(2, "eager", 90, 0.01)]
    stages: list[dict] = []
    timeline: list[int] = [10, 11, 12, 13]  # past the double's busy slices
    doc = run_showdown(rows, recipe_data={"inputs": []}, make_runner=lambda: _ShippedRunner(0.01, timeline, stages),
                       settings=ShowdownSettings(rounds=2, round_seconds=0.1, margin=0.02, objective="throughput",
                                                 latency_percentile="p99", timeout_s=10, processes=2,
                                                 shipped_dir=str(tmp_path)))
    assert saved == ["frozen", "onnx"]  # once per finalist with a file form, never for eager
    by_variant: dict[str, list[bool]] = {}
    for message in stages:
        by_variant.setdefault(message["variant"], []).append("shipped" in message)
    assert by_variant == {"frozen": [True, True], "onnx": [False, False], "eager": [False, False]}
    shipped = next(m["shipped"] for m in stages if "shipped" in m)
    assert shipped["loader"].endswith("load.py") and shipped["kind"] == "torchscript"
    assert doc["staged_from"] == {"frozen@1": "artifact", "onnx@1": "build", "eager@1": "build"}
    assert any("onnx@1 was staged built" in n and "the exporter refused" in n for n in doc["notes"])
    # the same seconds per call, but the shipped finalist serves 3 samples per call against 1: it leads
    assert doc["verdict"]["pick"] == "frozen@1" and doc["verdict"]["leader"] == "frozen@1"


def test_the_artifact_checks_tool_side_is_staged_as_the_showdown_staged_the_pick() -> None:
    from autotune.artifact_check import _staged_from_artifact

    rec = {"variant": "trace", "batch_size": 8}
    assert _staged_from_artifact({"showdown": {"staged_from": {"trace@8": "artifact"}}}, rec)
    assert not _staged_from_artifact({"showdown": {"staged_from": {"trace@8": "build"}}}, rec)
    assert not _staged_from_artifact({"showdown": None}, rec)  # no showdown: the search's figure, built
    assert not _staged_from_artifact({"showdown": {"verdict": {}}}, rec)  # a showdown from before the field
