"""Interrupts and kills: nothing measured is lost, nothing outlives the run (issue 20, items 1-4).

A real ``autotune run`` on the tiny model gets SIGINT (Ctrl-C) or SIGKILL at a point of its run, found from its
progress lines on stderr (or, for validation, from its first worker appearing). After each:

- no worker of that run is left (found by a marker in their environment, which they inherit from the CLI);
- OUT holds a valid report.json of what was measured: exactly the study's measured trials, ``complete: false`` and
  the phase it was in; during validation nothing at all (OUT is made only after it), and never a temporary file;
- ``autotune report OUT`` works on it;
- the same command resumes the run to the end, and no (variant, batch) combination is measured twice.

The default suite runs two points (SIGKILL while measuring, SIGINT during the showdown); the full matrix (five
points, both signals) is ``slow``. Besides: the worker's own guards (it dies with its parent, it ends a request
past its deadline), the report keeping boundary-failure rows when trials are added, the artifact swap and the
cleanup of what killed runs leave.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, tiny_recipe

pytestmark = pytest.mark.worker

#: The environment variable that marks the processes of one run (the CLI and, by inheritance, its workers).
MARK = "AUTOTUNE_INTERRUPT_TEST"


def _recipe(point: str) -> str:
    """One eager variant: two candidates of ~0.6 s each, a two-round showdown; auto batch sizes only when the
    boundary search is the point (it costs fresh worker processes)."""
    text = tiny_recipe(variants='["eager"]', batch_sizes='"auto"' if point == "boundary" else "[1, 2]",
                       max_seconds=0.6, ci_target=0.00001, rounds=2, round_seconds=0.2, time_budget_s=90)
    return text + "[batch]\nmax_batch_size = 2\n"


#: What shows a point has been reached on the CLI's stderr (the progress lines of autotune.cli.ProgressBar).
TRIGGERS = {
    "boundary": "batch boundary of eager",
    "measurement": "| best: eager@",  # the second candidate started: the first is measured, the second is not
    "showdown": "showdown: round 1",
    "artifact": "artifact and profile of",
}
#: The phase report.json says after an interrupt at each point.
PHASES = {"boundary": "boundaries", "measurement": "search", "showdown": "showdown", "artifact": "artifact"}


def _marked(mark: str) -> list[tuple[int, str]]:
    """Live processes (zombies are dead) whose environment holds ``MARK=mark``: pid and command line."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
    return found


def _survivors(mark: str, *, within: float = 10.0) -> list[tuple[int, str]]:
    """The run's processes still alive ``within`` seconds after it ended (the guards need a moment)."""
    deadline = time.monotonic() + within
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _kill_marked(mark: str) -> None:
    for pid, _ in _marked(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _measured(db: Path, *, finished: bool = True) -> list[tuple[str, int]]:
    """The (variant, batch) of every measurement the study holds (repeats told for the sampler left out), in trial
    order: a combination measured twice would be there twice. ``finished=False`` adds a trial a kill caught after
    its row was stored but before it was told: the resumed run fails it as stale and keeps its row."""
    import optuna

    from autotune.study.rows import ROW_ATTR, is_repeat, row_from_attrs

    if not db.exists():
        return []
    try:
        study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{db}")
    except KeyError:  # killed before the study was made
        return []
    rows = [row_from_attrs(t.user_attrs) for t in study.get_trials(deepcopy=False)
            if ROW_ATTR in t.user_attrs and (t.state.is_finished() or not finished)]
    return [(r["variant"], int(r["batch_size"])) for r in rows if not is_repeat(r)]


@contextlib.contextmanager
def _run_until(recipe: Path, out: Path, point: str, sig: signal.Signals) -> Iterator[subprocess.Popen[str]]:
    """Start ``autotune run``, send ``sig`` once ``point`` is reached, wait for the end; yields the process."""
    mark = uuid.uuid4().hex
    env = {**os.environ, MARK: mark}
    # a shell that started us in the background leaves SIGINT ignored, and Python keeps an ignored SIGINT
    # ignored: give the child the default disposition, as a terminal's Ctrl-C would find it
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(recipe), "--out", str(out)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 300
        if point == "validation":  # its first worker is up: validation is under way (OUT is made after it)
            while not any("autotune.worker" in cmd for _, cmd in _marked(mark)):
                assert proc.poll() is None and time.monotonic() < deadline, "no worker started"
                time.sleep(0.05)
        else:
            os.set_blocking(proc.stderr.fileno(), False)
            while TRIGGERS[point].encode() not in seen:
                assert time.monotonic() < deadline, f"{point} not reached: {seen.decode(errors='replace')[-2000:]}"
                chunk = proc.stderr.read()
                if chunk:
                    seen += chunk
                elif proc.poll() is not None:
                    pytest.fail(f"the run ended before {point}: {seen.decode(errors='replace')[-2000:]}")
                else:
                    time.sleep(0.05)
        time.sleep(0.3)  # into the phase: a worker is busy
        proc.send_signal(sig)
        proc.wait(timeout=120)
        proc.mark = mark  # type: ignore[attr-defined]
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_marked(mark)  # never leave a process behind, whatever the assertions said


@pytest.fixture
def short_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial of a killed run is stale after 2 s (not 60): the resumed run, in this process, fails it sooner."""
    from autotune.study import heartbeat as heartbeat_mod

    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_GRACE_S", 2)


def _check_point(point: str, sig: signal.Signals, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main
    from autotune.report import load_report

    recipe = tmp_path / "recipe.toml"
    recipe.write_text(_recipe(point).replace("@MODELS@", str(ROOT / "tests" / "models")))
    out = tmp_path / "out"
    db = out / "study.db"
    with _run_until(recipe, out, point, sig) as proc:
        assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), proc.stderr
        assert _survivors(proc.mark) == []  # type: ignore[attr-defined]
    if sig == signal.SIGINT and out.exists():  # nothing temporary left (after a SIGKILL the next run cleans up)
        assert not [p for p in out.glob(".*") if p.name != ".autotune.lock"]
    before, stored = _measured(db), _measured(db, finished=False)
    if point == "validation":
        assert not (out / "report.json").exists()
    else:
        doc = load_report(out / "report.json")  # valid (validated when loaded)
        assert doc["complete"] is False and doc["phase"] == PHASES[point]
        assert doc["interrupted"] is (sig == signal.SIGINT)
        # what was measured: the study's rows (stored first), less at most one a kill caught between its storing
        # and the report's write, which `autotune report` below brings in
        shown = [(c["variant"], c["batch_size"]) for c in doc["candidates"] if c["status"] == "ok"]
        assert shown == before[: len(shown)] and len(before) - len(shown) <= (1 if sig == signal.SIGKILL else 0)
        if point in ("showdown", "artifact"):
            assert len(before) == 2  # the search was over
        assert not (out / "artifact").exists()  # nothing half-made (this is the first run on OUT)
        assert main(["report", str(out)]) in (0, 1)  # 1: nothing measured yet, so nothing to recommend
        again = load_report(out / "report.json")
        assert [(c["variant"], c["batch_size"]) for c in again["candidates"] if c["status"] == "ok"] == before
        assert again["complete"] is False and again["phase"] == doc["phase"]
        assert "INCOMPLETE" in (out / "report.md").read_text()  # said where a reader looks first
    capsys.readouterr()

    code = main(["run", str(recipe), "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    done = load_report(out / "report.json")
    assert done["complete"] is True and done["phase"] == "done" and done["interrupted"] is False
    after = _measured(db)
    assert sorted(after) == [("eager", 1), ("eager", 2)]  # each combination measured once, over both runs
    assert after[: len(stored)] == stored and done["search"]["measured_this_run"] == 2 - len(stored)
    assert done["artifact"]["status"] == "ok" and (out / "artifact" / "load.py").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".") and p.name != ".autotune.lock"]


@pytest.mark.parametrize(("point", "sig"), [("measurement", signal.SIGKILL),
                                            pytest.param("showdown", signal.SIGINT, marks=pytest.mark.slow)])
def test_an_interrupted_run_leaves_its_report_and_no_worker(point: str, sig: signal.Signals, tmp_path: Path,
                                                            short_heartbeat: None,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _check_point(point, sig, tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
@pytest.mark.parametrize("point", ["validation", "boundary", "measurement", "showdown", "artifact"])
def test_every_point_of_a_run_survives_an_interrupt(point: str, sig: signal.Signals, tmp_path: Path,
                                                    short_heartbeat: None,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _check_point(point, sig, tmp_path, capsys)


# --------------------------------------------------------------------------- the worker's own guards

_HANGING_PARENT = """
import sys
from autotune.client import WorkerClient
from autotune.core.measure_settings import MeasureSettings
from autotune.core.recipe import load_recipe
from autotune.runner import Runner

recipe = load_recipe(sys.argv[1])
runner = Runner()
print(runner._ensure_worker("measure").proc.pid, flush=True)
WorkerClient(runner).measure(recipe.to_dict(), "eager", 4, MeasureSettings.from_recipe(recipe), timeout=1000)
"""


def test_a_worker_dies_with_its_killed_parent_even_mid_request(tmp_path: Path) -> None:
    """SIGKILL the parent while its worker hangs in a candidate (the model sleeps at batch >= 4): the worker goes
    too (PR_SET_PDEATHSIG), instead of running on in a session of its own."""
    mark = uuid.uuid4().hex
    text = tiny_recipe(kwargs='kwargs = { crash = "hang" }').replace("@MODELS@", str(ROOT / "tests" / "models"))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(text)
    parent = subprocess.Popen([sys.executable, "-c", _HANGING_PARENT, str(recipe)], cwd=ROOT,
                              env={**os.environ, MARK: mark}, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        time.sleep(3.0)  # the measure request is sent: the worker builds the model, then hangs in its forward
        assert worker in [pid for pid, _ in _marked(mark)]
        parent.kill()
        parent.wait()
        assert _survivors(mark, within=5.0) == []
    finally:
        _kill_marked(mark)
        if parent.poll() is None:
            parent.kill()


_DEADLINE = """
import os, sys, time
from autotune.worker.lifeline import Lifeline
line = Lifeline(os.getppid(), poll_s=0.05, grace_s=0.2)
line.start()
line.begin(0.1, what="1 (measure)")
time.sleep(30)  # a hung request
"""


def test_a_worker_ends_a_request_past_its_deadline() -> None:
    """The deadline the parent sends (``timeout_s``) is kept by the worker itself, a grace period later."""
    from autotune.worker.lifeline import EXIT_DEADLINE

    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _DEADLINE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_DEADLINE and "overstayed its deadline" in proc.stderr
    assert time.monotonic() - t0 < 25  # not the 30 s of the hang


def test_requests_carry_their_timeout_to_the_worker() -> None:
    """The worker's deadline is the parent's: every request says its ``timeout_s`` (and an idle worker has none)."""
    from autotune.runner import WorkerProcess

    worker = WorkerProcess()
    try:
        sent: list[bytes] = []
        assert worker.proc.stdin is not None
        real = worker.proc.stdin.write
        worker.proc.stdin.write = lambda data: sent.append(data) or real(data)  # type: ignore[method-assign]
        assert worker.request({"op": "hello"}, timeout=42.0)["ok"]
        assert json.loads(sent[0])["timeout_s"] == 42.0
    finally:
        worker.close()


# --------------------------------------------------------------------------- the artifact swap, leftovers


def test_the_artifact_swap_leaves_the_old_or_the_new(tmp_path: Path) -> None:
    from autotune.deployment import swap_in

    final, staging = tmp_path / "artifact", tmp_path / ".artifact.123"
    staging.mkdir()
    (staging / "model.pt").write_text("first")
    swap_in(staging, final)  # no artifact yet: a rename
    assert (final / "model.pt").read_text() == "first" and not staging.exists()
    staging.mkdir()
    (staging / "model.pt").write_text("second")
    swap_in(staging, final)  # an exchange: at no moment is there no artifact/
    assert (final / "model.pt").read_text() == "second" and not staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifact"]


def test_what_killed_runs_left_is_cleaned_when_the_directory_is_locked(tmp_path: Path) -> None:
    """A SIGKILL between the fallback swap's two renames, in the middle of a report write, or of the artifact's
    staging: the next holder of the lock puts the old artifact back and removes the rest; other files stay."""
    from autotune.outdir import hold_out_dir

    (tmp_path / ".artifact.old.77").mkdir()
    (tmp_path / ".artifact.old.77" / "model.pt").write_text("old")
    (tmp_path / ".artifact.88").mkdir()
    (tmp_path / ".report.json.k2j3_x.tmp").write_text("{")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / ".trace.png.abc123.tmp").write_bytes(b"\x89")
    (tmp_path / ".mine.tmp").write_text("the user's")
    (tmp_path / "notes.txt").write_text("the user's")
    with hold_out_dir(tmp_path):
        pass
    assert (tmp_path / "artifact" / "model.pt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".autotune.lock", ".mine.tmp", "artifact", "notes.txt",
                                                          "plots"]
    assert list((tmp_path / "plots").iterdir()) == []


def test_report_takes_the_directory_lock(tmp_path: Path) -> None:
    """``autotune report DIR`` does not write beside a run that holds DIR."""
    from autotune.errors import InputError
    from autotune.outdir import hold_out_dir
    from autotune.report.assemble import rerender

    with hold_out_dir(tmp_path), pytest.raises(InputError, match=r"DIR .*another autotune run or report"):
        rerender(tmp_path)


# --------------------------------------------------------------------------- report rows


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_report_keeps_boundary_failures_when_another_machine_adds_trials(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A variant whose boundary search failed has a row but no trial; the study stores it (not report.json's trial
    numbering, which placed it after the trials of its day), so ``autotune report`` keeps it after more trials."""
    import optuna

    from autotune.cli import main
    from autotune.report import load_report

    recipe = tmp_path / "recipe.toml"
    text = tiny_recipe(kwargs='kwargs = { crash = "trace" }', variants='["eager", "trace"]', batch_sizes='"auto"',
                       rounds=0, max_seconds=0.3)
    recipe.write_text(text.replace("@MODELS@", str(ROOT / "tests" / "models")) + "[batch]\nmax_batch_size = 2\n")
    out = tmp_path / "out"
    assert main(["run", str(recipe), "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    first = load_report(out / "report.json")
    failed = [c for c in first["candidates"] if c["variant"] == "trace"]
    assert [c["status"] for c in failed] == ["failed"] and "probing batch" in str(failed[0]["reason"])

    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}")
    for _ in range(2):  # another machine's trials (they failed: no rows of their own)
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    for _ in range(2):  # and the report is re-rendered more than once
        assert main(["report", str(out)]) == 0
    again = load_report(out / "report.json")
    rows = [c for c in again["candidates"] if c["variant"] == "trace"]
    assert [(c["status"], c["reason"]) for c in rows] == [(c["status"], c["reason"]) for c in failed]
    assert rows[0]["trial"] == len(study.trials)  # numbered after every trial of the study, so it collides with none
    assert len({c["trial"] for c in again["candidates"]}) == len(again["candidates"])


@pytest.mark.slow
def test_four_interrupts_at_four_phases_then_a_resume_measure_nothing_twice(tmp_path: Path, short_heartbeat: None,
                                                                            capsys: pytest.CaptureFixture[str]
                                                                            ) -> None:
    """Issue 32's chain: Ctrl-C in the boundaries, then (resumed) in the search, then in the showdown, then in the
    artifact step, then a resume to the end. The final report has the candidates of an uninterrupted run of the
    same recipe, the study holds each combination once, the boundaries were found once, and the finished
    showdown was reused by the resume after it, not run again."""
    from autotune.cli import main
    from autotune.report import load_report

    recipe = tmp_path / "recipe.toml"
    recipe.write_text(_recipe("boundary").replace("@MODELS@", str(ROOT / "tests" / "models")))
    out, db = tmp_path / "out", tmp_path / "out" / "study.db"
    phases = []
    for point in ("boundary", "measurement", "showdown", "artifact"):
        with _run_until(recipe, out, point, signal.SIGINT) as proc:
            assert proc.returncode == 130, proc.stderr
            assert _survivors(proc.mark) == []  # type: ignore[attr-defined]
        doc = load_report(out / "report.json")
        phases.append(doc["phase"])
        assert doc["complete"] is False and doc["interrupted"] is True
        if point in ("showdown", "artifact"):  # the boundary found by the second run is read back, not probed
            assert doc["batch_boundary"]["eager"].get("reused_from_study") is True
    assert phases == ["boundaries", "search", "showdown", "artifact"]
    interrupted_showdown = load_report(out / "report.json")["showdown"]
    capsys.readouterr()
    assert main(["run", str(recipe), "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    done = load_report(out / "report.json")
    assert done["complete"] is True and done["artifact"]["status"] == "ok"
    measured = _measured(db)
    assert len(measured) == len(set(measured)), measured  # nothing measured twice over five runs
    assert done["search"]["measured_this_run"] == 0  # the last run measured no candidate: all were stored
    # the showdown finished in the run interrupted in its artifact step; the last run read it back
    assert interrupted_showdown is not None and interrupted_showdown.get("verdict") is not None
    assert done["showdown"]["reused"] is True
    assert any("nothing is measured twice" in n for n in done["notes"])

    plain = tmp_path / "plain"  # the same recipe, never interrupted
    assert main(["run", str(recipe), "--out", str(plain), "--no-progress"]) == 0, capsys.readouterr().err
    whole = load_report(plain / "report.json")
    assert sorted((c["variant"], c["batch_size"]) for c in done["candidates"] if c["status"] == "ok") == \
        sorted((c["variant"], c["batch_size"]) for c in whole["candidates"] if c["status"] == "ok")
    assert (done["recommendation"]["variant"], done["recommendation"]["batch_size"]) in \
        {(c["variant"], c["batch_size"]) for c in whole["candidates"] if c["status"] == "ok"}
