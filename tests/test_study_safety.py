"""A study you can share safely: the fingerprint, the worker's trust model, storage failures, one run per
--out, masked passwords and trials that never had a heartbeat.

Everything runs for real: `autotune run` / `autotune worker` processes, real SQLite files that are damaged,
locked (``BEGIN EXCLUSIVE`` from another connection), full (SQLite's own page limit, and a small tmpfs where
this machine lets us mount one) or read-only (an immutable directory or a read-only mount as root, where
chmod stops nobody; chmod otherwise), and an flock held by a second process that is then SIGKILLed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib.metadata
import json
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.core.recipe import Constraints, load_recipe
from autotune.errors import InputError
from autotune.outdir import LOCK_NAME, hold_out_dir
from autotune.study import (
    FINGERPRINT_ATTR,
    Search,
    SearchSettings,
    SearchSpace,
    display_url,
    fingerprint_digest,
    make_storage,
    storage_errors,
    study_fingerprint,
)
from autotune.study import heartbeat as heartbeat_mod
from autotune.study import storage as storage_mod
from autotune.study.model_identity import model_identity
from autotune.study.urls import scrub
from tests.support import ROOT, run_cli

pytestmark = pytest.mark.worker  # starts worker or CLI processes: not in `make test-fast`

MODEL = """
from torch import nn


def tiny() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 2))
"""

#: A model file that leaves a mark when it is imported: a study's stored recipe pointing at it must never run.
EVIL = """
from pathlib import Path

Path(__file__).with_name("EXECUTED").write_text("the stored recipe was executed")


def tiny():
    raise SystemExit("never")
"""


def recipe_text(*, batch_sizes: str = "[1]", variants: str = '["eager"]', max_trials: int = 0,
                max_seconds: float = 0.3, ci_target: float = 0.05) -> str:
    return f"""
name = "safe"
device = "cpu"
[model]
factory = "model.py:tiny"
[[inputs]]
name = "x"
shape = [3, 8, 8]
[search]
variants = {variants}
batch_sizes = {batch_sizes}
time_budget_s = 60
max_trials = {max_trials}
[measure]
max_seconds = {max_seconds}
ci_target = {ci_target}
rounds = 0
"""


def project(where: Path, **kw: Any) -> Path:
    """A recipe and its model file (``model.py``, relative to the recipe) in ``where``; returns the recipe."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "model.py").write_text(MODEL)
    recipe = where / "recipe.toml"
    recipe.write_text(recipe_text(**kw))
    return recipe


def run(recipe: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli("run", str(recipe), "--out", str(out), "--no-progress", *extra)


def trials(db: Path) -> list[tuple[int, str, str]]:
    """(number, state, row JSON) of every trial, read with sqlite3 itself."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        return con.execute("SELECT t.number, t.state, a.value_json FROM trials t LEFT JOIN trial_user_attributes a "
                           "ON a.trial_id = t.trial_id AND a.key = 'row' ORDER BY t.number").fetchall()


def measured_rows(db: Path) -> list[dict[str, Any]]:
    """The rows of measured trials (not the repeats told to the sampler), in trial order."""
    rows = [json.loads(r) for _, _, r in trials(db) if r]
    return [r for r in rows if "repeat_of_trial" not in r]


def integrity(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])


def assert_clean_exit_2(code: int, err: str, *patterns: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    for p in patterns:
        assert p in err, err


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose `autotune run` measured one of its two combinations: ``recipe.toml`` (max_trials = 1),
    ``rest.toml`` (the same study without max_trials), ``model.py`` and ``out/`` (study.db, reports).
    Tests copy it (:func:`copy_of`) instead of measuring again. (A resume cannot change the batch sizes:
    Optuna refuses another categorical space.)"""
    base = tmp_path_factory.mktemp("measured")
    recipe = project(base, batch_sizes="[1, 2]", max_trials=1)  # one of two measured: a resume has work left
    (base / "rest.toml").write_text(recipe_text(batch_sizes="[1, 2]"))  # the same study, no max_trials
    code, _, err = run(recipe, base / "out")
    assert code == 0, err
    return base


def copy_of(measured: Path, tmp_path: Path) -> Path:
    target = tmp_path / "project"
    shutil.copytree(measured, target)
    return target


# ----------------------------------------------------------------------------- fingerprint


def test_fingerprint_covers_the_factory_file_contents_not_only_its_name(tmp_path: Path) -> None:
    recipe = project(tmp_path)
    before = model_identity(load_recipe(recipe))
    assert before["model.factory"] == "model.py:tiny" and before["model.factory_package"] is None
    with (tmp_path / "model.py").open("a") as fh:
        fh.write("# an edit\n")
    after = model_identity(load_recipe(recipe))
    assert after["model.factory_file_sha256"] != before["model.factory_file_sha256"]
    assert {k: v for k, v in after.items() if k != "model.factory_file_sha256"} == {
        k: v for k, v in before.items() if k != "model.factory_file_sha256"}
    # a package factory: the providing package's version, read from its metadata
    (tmp_path / "pkg.toml").write_text(recipe_text().replace('"model.py:tiny"', '"torchvision.models:resnet18"'))
    parts = model_identity(load_recipe(tmp_path / "pkg.toml"))
    assert parts["model.factory_file_sha256"] is None
    assert parts["model.factory_package"] == f"torchvision {importlib.metadata.version('torchvision')}"


def test_study_fingerprint_has_the_resolved_device_torch_and_stable_hardware(tmp_path: Path) -> None:
    import torch

    recipe = load_recipe(project(tmp_path))
    first, second = study_fingerprint(recipe, "cpu"), study_fingerprint(recipe, "cpu")
    assert first == second  # nothing volatile in it
    assert first["device"] == "cpu" and first["torch"] == torch.__version__
    hardware = {k: first[k] for k in ("machine", "cpu_model", "cpu_cores", "gpus")}
    assert hardware["cpu_cores"] == os.cpu_count() and isinstance(hardware["gpus"], list)
    assert not {"memory_available_bytes", "hostname", "cpu_affinity_cores", "driver_version"} & set(first)
    assert study_fingerprint(recipe, "cuda:0")["device"] == "cuda:0"


def _set_stored_fingerprint(db: Path, study: str, **changes: Any) -> None:
    """What a study made on another machine or with another torch holds: its own parts and their digest."""
    loaded = optuna.load_study(study_name=study, storage=f"sqlite:///{db}")
    parts = {**loaded.user_attrs[FINGERPRINT_ATTR], **changes}
    loaded.set_user_attr(FINGERPRINT_ATTR, parts)
    loaded.set_user_attr("recipe_fingerprint", fingerprint_digest(parts))


def test_resume_with_another_model_file_device_torch_or_hardware_is_exit_2(measured: Path, tmp_path: Path
                                                                           ) -> None:
    base = copy_of(measured, tmp_path)
    out, db = base / "out", base / "out" / "study.db"
    report, stored = (out / "report.json").read_bytes(), trials(db)

    with (base / "model.py").open("a") as fh:
        fh.write("# edited after the study was made\n")
    code, _, err = run(base / "recipe.toml", out)
    assert_clean_exit_2(code, err, "--study safe: the study in sqlite:///", "made for another setup",
                        "what differs: model.factory_file_sha256: study ")
    assert "torch" not in err.split("what differs:")[1].split(".")[0]
    (base / "model.py").write_text(MODEL)

    import torch

    torch_version = torch.__version__
    _set_stored_fingerprint(db, "safe", device="cuda:0", torch="1.0.0", cpu_model="Some Other CPU", gpus=["H100"])
    code, _, err = run(base / "recipe.toml", out)
    assert_clean_exit_2(code, err, "device: study cuda:0, here cpu", f"torch: study 1.0.0, here {torch_version}",
                        "cpu_model: study Some Other CPU, here ", "gpus: study [\"H100\"], here ")
    assert "model.factory" not in err
    assert (out / "report.json").read_bytes() == report and trials(db) == stored  # nothing measured or written


# its kind stays in make test (issue 31):
# test_resume_with_another_model_file_device_torch_or_hardware_is_exit_2, test_worker_join
@pytest.mark.slow
def test_worker_runs_its_local_recipe_never_the_stored_one_and_refuses_another_fingerprint(tmp_path: Path
                                                                                          ) -> None:
    base = tmp_path / "creator"
    recipe = project(base, batch_sizes="[1, 2]", max_trials=1)
    out, db = base / "out", base / "out" / "study.db"
    code, _, err = run(recipe, out)
    assert code == 0, err
    storage = f"sqlite:///{db}"
    study = optuna.load_study(study_name="safe", storage=storage)
    assert len([r for _, _, r in trials(db) if r]) == 1  # max_trials = 1: one combination left for the worker
    # Someone with write access to the storage plants a recipe (and variant specs) that would run their code.
    (tmp_path / "evil.py").write_text(EVIL)
    planted = {**study.user_attrs["recipe"], "model": {"factory": str(tmp_path / "evil.py") + ":tiny",
                                                       "kwargs": {}, "base_dir": str(tmp_path)}}
    study.set_user_attr("recipe", planted)
    study.set_user_attr("specs", {"eager": {"name": "eager", "compiler": str(tmp_path / "evil.py")}})

    worker = tmp_path / "worker"  # the joining machine: its own copy of the recipe and model
    local = project(worker, batch_sizes="[1, 2]", max_trials=1)
    code, stdout, err = run_cli("worker", str(local), "--storage", storage, "--no-progress")
    assert code == 0, err
    assert "measured 1 candidates for study safe; stopped by" in stdout
    assert not (tmp_path / "EXECUTED").exists()
    rows = [json.loads(r) for _, _, r in trials(db) if r]
    assert {(r["variant"], r["batch_size"], r["status"]) for r in rows} == {("eager", 1, "ok"), ("eager", 2, "ok")}

    before = trials(db)
    with (worker / "model.py").open("a") as fh:
        fh.write("# not the model the study measured\n")
    code, _, err = run_cli("worker", str(local), "--storage", storage, "--study", "safe", "--no-progress")
    assert_clean_exit_2(code, err, "refusing to join", "what differs: model.factory_file_sha256: study ")
    (worker / "model.py").write_text(MODEL)
    # same fingerprint, but the study searches a variant this recipe does not have
    (worker / "other.toml").write_text(recipe_text(variants='["frozen"]'))
    code, _, err = run_cli("worker", str(worker / "other.toml"), "--storage", storage, "--no-progress")
    assert_clean_exit_2(code, err, "searches variants this recipe does not have here (eager)")
    # a study made before fingerprints had parts: resumable by `autotune run`, never joined
    study.set_user_attr(FINGERPRINT_ATTR, None)
    code, _, err = run_cli("worker", str(local), "--storage", storage, "--no-progress")
    assert_clean_exit_2(code, err, "made by an older autotune", "refusing to join")
    assert trials(db) == before
    assert not (tmp_path / "EXECUTED").exists()


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_an_older_study_is_adopted_on_resume(measured: Path, tmp_path: Path) -> None:
    """A study that holds only the old fingerprint (model, inputs, device as written) resumes and gets the parts."""
    from autotune.study import recipe_fingerprint

    base = copy_of(measured, tmp_path)
    db = base / "out" / "study.db"
    study = optuna.load_study(study_name="safe", storage=f"sqlite:///{db}")
    parts = study.user_attrs[FINGERPRINT_ATTR]
    study.set_user_attr("recipe_fingerprint", recipe_fingerprint(study.user_attrs["recipe"]))
    study.set_user_attr(FINGERPRINT_ATTR, None)
    code, _, err = run(base / "recipe.toml", base / "out")
    assert code == 0, err
    attrs = optuna.load_study(study_name="safe", storage=f"sqlite:///{db}").user_attrs
    assert attrs[FINGERPRINT_ATTR] == parts and attrs["recipe_fingerprint"] == fingerprint_digest(parts)


# ----------------------------------------------------------------------------- storage failures


@pytest.mark.parametrize("damage", ["garbage", "damaged pages"])
def test_a_corrupt_study_db_is_exit_2_and_left_as_it_is(measured: Path, tmp_path: Path, damage: str) -> None:
    base = copy_of(measured, tmp_path)
    out, db = base / "out", base / "out" / "study.db"
    data = bytearray(db.read_bytes())
    if damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    else:  # the header page intact, every other page overwritten: SQLite opens it and then finds it malformed
        data[4096:] = os.urandom(len(data) - 4096)
    db.write_bytes(bytes(data))
    report = (out / "report.json").read_bytes()
    code, _, err = run(base / "recipe.toml", out)
    assert_clean_exit_2(code, err, f"--storage sqlite:///{db}", "the database is damaged or not a database",
                        "autotune left it as it is")
    assert db.read_bytes() == bytes(data) and (out / "report.json").read_bytes() == report


# slow; its kind stays in make test (issue 31): test_a_lock_taken_during_the_search_is_exit_2_with_the_rows_kept
@pytest.mark.slow
def test_a_locked_study_db_is_exit_2_and_a_resume_keeps_what_was_measured(
        measured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main

    base = copy_of(measured, tmp_path)
    out, db = base / "out", base / "out" / "study.db"
    stored = trials(db)
    monkeypatch.setattr(storage_mod, "SQLITE_BUSY_TIMEOUT_S", 0.5)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another program holds a write transaction on the file
        code = main(["run", str(base / "rest.toml"), "--out", str(out), "--no-progress"])
        err = capsys.readouterr().err
        assert_clean_exit_2(code, err, f"--storage sqlite:///{db}", "the database is locked by another process",
                            "waited 0.5 s", "database is locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert trials(db) == stored and integrity(db) == "ok"
    code = main(["run", str(base / "rest.toml"), "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "report.json").read_text())
    assert doc["search"]["measured_this_run"] == 1  # the one left: the one measured before was kept


def fake_row(trial: int, variant: str, batch: int, *, padding: int = 0) -> dict[str, Any]:
    return {"trial": trial, "variant": variant, "batch_size": batch, "status": "ok", "reason": None,
            "feasible": True, "violations": [], "throughput": 100.0 * batch, "classification": "flat",
            "latency_ms": {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0}, "padding": "x" * padding}


SPACE = SearchSpace(variants=("eager",), batch_sizes={"eager": (1, 2, 4, 8)})


def settings(db: Path, **kw: Any) -> SearchSettings:
    base: dict[str, Any] = dict(objective="throughput", constraints=Constraints(), storage=f"sqlite:///{db}",
                                study_name="t", recipe_fingerprint="abc", time_budget_s=120.0)
    base.update(kw)
    return SearchSettings(**base)


def test_a_lock_taken_during_the_search_is_exit_2_with_the_rows_kept(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    monkeypatch.setattr(storage_mod, "SQLITE_BUSY_TIMEOUT_S", 0.3)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    calls: list[int] = []

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        calls.append(b)
        if len(calls) == 2:
            holder.execute("BEGIN EXCLUSIVE")  # taken while the second candidate is measured
        return fake_row(trial, v, b)

    try:
        with pytest.raises(InputError, match=r"^--storage sqlite:///.*: the database is locked by another process"):
            with storage_errors(f"sqlite:///{db}"):
                Search(SPACE, settings(db), evaluate).run()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r["batch_size"] for r in measured_rows(db)] == calls[:1] and integrity(db) == "ok"


def test_a_full_database_is_exit_2_with_the_rows_kept(tmp_path: Path) -> None:
    """SQLite's own page limit: the same "database or disk is full" (SQLITE_FULL) a full disk gives."""
    from sqlalchemy import event

    db = tmp_path / "s.db"
    search = Search(SPACE, settings(db), lambda t, v, b: fake_row(t, v, b))
    calls: list[int] = []

    def limit(dbapi_connection: Any, _record: Any) -> None:
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    def evaluate(trial: int, v: str, b: int) -> dict[str, Any]:
        calls.append(b)
        if len(calls) < 3:
            return fake_row(trial, v, b)
        event.listen(search._storage.engine, "connect", limit)  # the disk is full from now on
        search._storage.engine.dispose()
        return fake_row(trial, v, b, padding=200_000)  # a row that needs new pages

    search.evaluate = evaluate
    with pytest.raises(InputError) as info, storage_errors(f"sqlite:///{db}"):
        search.run()
    assert str(info.value).startswith(f"--storage sqlite:///{db}: the disk is full (database or disk is full)")
    assert "what was measured so far is kept" in str(info.value)
    assert [r["batch_size"] for r in measured_rows(db)] == calls[:2] and integrity(db) == "ok"


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted on ``where`` (root with CAP_SYS_ADMIN only), unmounted afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(directory: Path) -> Path:
    """Write a file until the file system says ENOSPC; returns it."""
    filler = directory / "filler"
    # unbuffered: a buffered file would flush its tail again on close and raise ENOSPC there
    with filler.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_disk_is_exit_2_and_keeps_what_was_measured(measured: Path, tmp_path: Path) -> None:
    base = copy_of(measured, tmp_path)
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        shutil.copytree(base / "out", disk / "out")
        out, db = disk / "out", disk / "out" / "study.db"
        report, stored = (out / "report.json").read_bytes(), trials(db)
        filler = fill(disk)
        code, _, err = run(base / "rest.toml", out)
        assert_clean_exit_2(code, err)
        assert "the disk is full" in err or "No space left on device" in err, err
        filler.unlink()
        assert integrity(db) == "ok" and trials(db)[:len(stored)] == stored
        assert (out / "report.json").read_bytes() == report


def _immutable(directory: Path) -> Any:
    res = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {res.stderr.strip()}")
    return lambda: subprocess.run(["chattr", "-i", str(directory)], check=False)


@pytest.mark.parametrize("mechanism", ["chmod", "immutable", "read-only mount"])
def test_a_read_only_out_is_exit_2(measured: Path, tmp_path: Path, mechanism: str) -> None:
    base = copy_of(measured, tmp_path)
    out = base / "out"
    undo = None
    with contextlib.ExitStack() as stack:
        if mechanism == "chmod":
            if os.geteuid() == 0:
                pytest.skip("running as root: chmod does not stop root from writing (the immutable and read-only "
                            "mount cases cover root)")
            out.chmod(0o555)
            undo = lambda: out.chmod(0o755)  # noqa: E731
            expected = "Permission denied"
        elif mechanism == "immutable":
            if os.geteuid() != 0 or shutil.which("chattr") is None:
                pytest.skip("chattr +i needs root (CAP_LINUX_IMMUTABLE) and chattr(1)")
            undo = _immutable(out)
            expected = "Operation not permitted"
        else:
            disk = stack.enter_context(small_tmpfs(tmp_path / "ro", "8m"))
            shutil.copytree(out, disk / "out")
            out = disk / "out"
            res = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True,
                                 check=False)
            if res.returncode != 0:
                pytest.skip(f"cannot remount read-only: {res.stderr.strip()}")
            expected = "Read-only file system"
        try:
            report, stored = (out / "report.json").read_bytes(), trials(out / "study.db")
            code, _, err = run(base / "recipe.toml", out)
            # the lock file (read-only mount) or a test file beside it (an existing lock file is writable in an
            # immutable directory): refused before anything is measured, not when the reports are written
            assert_clean_exit_2(code, err, f"--out {out}: cannot write {out}/", f": {expected} (")
            assert (out / "report.json").read_bytes() == report and trials(out / "study.db") == stored
        finally:
            if undo is not None:
                undo()


@pytest.mark.parametrize(("code", "strerror", "advice"), [
    (errno.EROFS, "Read-only file system", "the file system is read-only"),
    (errno.EACCES, "Permission denied", "no permission to write there"),
    (errno.ENOSPC, "No space left on device", "the disk is full"),
])
def test_os_errors_writing_out_are_input_errors(tmp_path: Path, code: int, strerror: str, advice: str) -> None:
    with pytest.raises(InputError) as info, storage_errors("sqlite:///x.db", out_dir=tmp_path):
        raise OSError(code, strerror, str(tmp_path / "report.json"))
    assert str(info.value).startswith(f"--out {tmp_path}: cannot write {tmp_path / 'report.json'}: {strerror} "
                                      f"({advice}")
    with pytest.raises(ConnectionResetError), storage_errors("sqlite:///x.db", out_dir=tmp_path):
        raise ConnectionResetError(errno.ECONNRESET, "not a storage problem")  # other OS errors go on up


def test_a_real_os_error_is_mapped(tmp_path: Path) -> None:
    """An error the OS itself raises, not one made by the test: /sys takes no new directory, not even from root
    (EPERM; EROFS where /sys is mounted read-only, EACCES for anyone else)."""
    target = Path("/sys/autotune-test")
    with pytest.raises(InputError) as info, storage_errors(None, out_dir=target):
        target.mkdir()
        target.rmdir()
        pytest.skip("/sys took a new directory here")
    assert str(info.value).startswith(f"--out {target}: cannot write {target}: ")
    assert any(e in str(info.value) for e in ("Operation not permitted", "Read-only file system", "Permission denied"))


# ----------------------------------------------------------------------------- one run per --out


def test_the_out_lock_is_exclusive_and_names_the_holder(tmp_path: Path) -> None:
    with hold_out_dir(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
        with pytest.raises(InputError, match=rf"^--out {tmp_path}: another autotune run \(pid {os.getpid()}\) is "
                                             r"using this directory"):
            with hold_out_dir(tmp_path):
                pass
    with hold_out_dir(tmp_path):  # released at the end of the block
        pass


def _lock_is_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            out += [int(p) for p in task.read_text().split()]
    return out


def test_a_second_run_on_the_same_out_is_refused_and_a_killed_run_leaves_no_lock(tmp_path: Path) -> None:
    slow = project(tmp_path, batch_sizes="[1, 2, 4, 8]", max_seconds=4, ci_target=0.00001)
    out, lock = tmp_path / "out", tmp_path / "out" / LOCK_NAME
    first = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(slow), "--out", str(out), "--no-progress"],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    children: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None, first.communicate()[1]
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.1)
        code, _, err = run(slow, out)
        assert_clean_exit_2(code, err, f"--out {out}: another autotune run (pid {first.pid}) is using this directory")
        assert first.poll() is None, "the first run must still be running: the refusal has to come from the lock"
        children = _children(first.pid)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert lock.exists() and _lock_is_free(lock)  # the file stays, the lock died with its process
    with hold_out_dir(out):  # what the next run does first
        pass


# ----------------------------------------------------------------------------- passwords


@pytest.mark.parametrize(("url", "shown", "secrets"), [
    ("postgresql+psycopg2://u@db.example/x?password=s3cret&sslmode=require",
     "postgresql+psycopg2://u@db.example/x?password=***&sslmode=require", ["s3cret"]),
    ("postgresql://u@h/x?sslmode=require&PASSWORD=p%40ss", "postgresql://u@h/x?sslmode=require&PASSWORD=***",
     ["p%40ss", "p@ss"]),
    ("postgresql://u:p@ss@db.example:5432/x", "postgresql://u:***@db.example:5432/x", ["p@ss", "ss@"]),
    ("postgresql://u:p%40ss@db.example/x", "postgresql://u:***@db.example/x", ["p%40ss"]),
    ("postgresql://u:top:secret/x@db.example/x", "postgresql://u:***@db.example/x", ["top:secret/x"]),
])
def test_passwords_in_the_query_string_or_containing_at_are_masked(url: str, shown: str, secrets: list[str]
                                                                   ) -> None:
    assert display_url(url) == shown
    for secret in secrets:
        assert secret not in display_url(url)
    message = scrub(f"could not connect to {url} with password {' or '.join(secrets)}; host ss@db.example", url)
    for secret in secrets:
        assert secret not in message, message


@pytest.mark.parametrize("url", ["postgresql+psycopg2://u@127.0.0.1:1/x?password=s3cret",
                                 "postgresql+psycopg2://u:p@ss@127.0.0.1:1/x"])
def test_a_storage_error_does_not_show_the_password(url: str) -> None:
    with pytest.raises(InputError) as info:
        make_storage(url)
    message = str(info.value)
    assert message.startswith("--storage postgresql+psycopg2://u") and "cannot open the storage" in message
    assert "s3cret" not in message and "p@ss" not in message and "ss@" not in message, message


# ----------------------------------------------------------------------------- trials without a heartbeat row


@pytest.fixture
def short_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_GRACE_S", 2)


SMALL = SearchSpace(variants=("eager",), batch_sizes={"eager": (1, 8)})


def _beat_rows(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return int(con.execute("SELECT COUNT(*) FROM trial_heartbeats").fetchone()[0])


def _finish_after_a_beatless_trial(db: Path, beatless: int) -> None:
    calls: list[tuple[str, int]] = []
    t0 = time.monotonic()
    out = Search(SMALL, settings(db, time_budget_s=60.0),
                 lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert out.stopped_by == "exhausted"  # not "time_budget": it did not wait for the beatless trial for good
    assert time.monotonic() - t0 >= 2  # ... but for the grace period
    assert sorted(calls) == [("eager", 1), ("eager", 8)]
    trial = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").trials[beatless]
    assert trial.state.name == "FAIL" and "row" not in trial.user_attrs


def test_a_running_trial_left_by_an_older_version_is_failed_after_the_grace(tmp_path: Path,
                                                                            short_heartbeat: None) -> None:
    db = tmp_path / "s.db"
    Search(SMALL, settings(db, time_budget_s=0.0), lambda t, v, b: fake_row(t, v, b)).run()  # the study, priors
    older = optuna.load_study(study_name="t", storage=f"sqlite:///{db}")  # no heartbeat: as an older autotune
    older.enqueue_trial({"variant": "eager", "batch_size": 8})
    trial = older.ask()
    assert _beat_rows(db) == 0
    _finish_after_a_beatless_trial(db, trial.number)


def _die_between_ask_and_the_first_beat(db: str) -> None:
    def die(self: Any) -> None:
        os._exit(137)

    heartbeat_mod.Heartbeat.__enter__ = die  # type: ignore[method-assign]
    Search(SMALL, settings(Path(db)), lambda t, v, b: fake_row(t, v, b)).run()


def test_a_process_killed_between_ask_and_its_first_beat_is_failed_after_the_grace(tmp_path: Path,
                                                                                  short_heartbeat: None) -> None:
    db = tmp_path / "s.db"
    proc = mp.get_context("spawn").Process(target=_die_between_ask_and_the_first_beat, args=(str(db),))
    proc.start()
    proc.join(timeout=120)
    assert proc.exitcode == 137
    running = [t for t in optuna.load_study(study_name="t", storage=f"sqlite:///{db}").trials
               if t.state.name == "RUNNING"]
    assert len(running) == 1 and _beat_rows(db) == 0
    _finish_after_a_beatless_trial(db, running[0].number)
