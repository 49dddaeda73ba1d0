"""Study storage on a real PostgreSQL server: `run`, a `worker` sharing the study, and resume.

SQLite is what every other test uses; PostgreSQL is what several machines share in practice, and
it differs where it matters here: real row locks, concurrent writers from separate processes, a
connection pool per process. So these tests start a throwaway cluster (initdb + pg_ctl, trust auth
on 127.0.0.1, a free port) and drive real ``python -m autotune`` processes against it. Without the
PostgreSQL binaries or the psycopg2 driver the whole module skips with the reason.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, FakeRow, largest_measurement_record, run_cli, tiny_recipe

pytestmark = pytest.mark.worker  # starts worker or CLI processes: not in `make test-fast`

PG_PROGRAMS = ("initdb", "pg_ctl", "postgres")
#: application_name of this test process's own connections (the ones not to drop on purpose).
TEST_APP = "autotune-pytest"
#: Seconds allowed for initdb / pg_ctl start / stop.
PG_TIMEOUT = 120
DB_NAME = "autotune_test"
#: URL → the one Optuna storage this test process reads studies through (closed with the server).
_STORAGES: dict[str, Any] = {}



def recipe_text(*, variants: list[str], batch_sizes: list[int], max_seconds: float = 0.4,
                ci_target: float = 0.05) -> str:
    return tiny_recipe(name="tiny_pg", variants=json.dumps(variants), batch_sizes=json.dumps(batch_sizes),
                       time_budget_s=150, max_seconds=max_seconds, ci_target=ci_target)


# ----------------------------------------------------------------------------- the server


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.name))


def find_pg_bin() -> dict[str, Path] | None:
    """initdb, pg_ctl and postgres from one installation: PATH first, then /usr/lib/postgresql/*/bin (newest)."""
    on_path = {name: shutil.which(name) for name in PG_PROGRAMS}
    if all(on_path.values()):
        return {name: Path(str(p)) for name, p in on_path.items()}
    for bindir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True):
        programs = {name: bindir / name for name in PG_PROGRAMS}
        if all(p.is_file() and os.access(p, os.X_OK) for p in programs.values()):
            return programs
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A throwaway cluster in a temp directory, run as the ``postgres`` user when we are root.

    PostgreSQL refuses to run as root, so as root every server program runs with that user's uid
    and gid (and the directory is handed to it); as anyone else it runs as ourselves.
    """

    def __init__(self, programs: dict[str, Path], base: Path, user: pwd.struct_passwd | None) -> None:
        self.programs = programs
        self.base = base
        self.data = base / "data"
        self.sockets = base / "sockets"
        self.log = base / "server.log"
        self.user = user
        self.port = 0

    def _run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        ids: dict[str, Any] = {}
        if self.user is not None:
            ids = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C",
               "HOME": str(self.base)}
        return subprocess.run([str(self.programs[name]), *args], cwd=self.base, env=env, capture_output=True,
                              text=True, timeout=PG_TIMEOUT, check=False, **ids)

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def init(self) -> None:
        self.sockets.mkdir()
        if self.user is not None:
            for path in (self.base, self.sockets):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        res = self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                        "--locale=C", "--no-sync", "--no-instructions")
        if res.returncode != 0:
            raise RuntimeError(f"initdb failed ({res.returncode}): {res.stdout}{res.stderr}")

    def start(self) -> None:
        """Start on a free port; retry with another one if the port was taken meanwhile."""
        for _ in range(3):
            self.port = free_port()
            options = f"-k {self.sockets} -p {self.port} -c listen_addresses=127.0.0.1 -F"
            res = self._run("pg_ctl", "start", "-D", str(self.data), "-w", "-t", str(PG_TIMEOUT),
                            "-l", str(self.log), "-o", options)
            if res.returncode == 0:
                return
        raise RuntimeError(f"pg_ctl start failed ({res.returncode}): {res.stdout}{res.stderr}\n{self._log_tail()}")

    def stop(self) -> None:
        res = self._run("pg_ctl", "stop", "-D", str(self.data), "-w", "-m", "fast")
        if res.returncode != 0:
            self._run("pg_ctl", "stop", "-D", str(self.data), "-w", "-m", "immediate")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """URL of a fresh database on a throwaway PostgreSQL server, removed after the module."""
    try:
        import psycopg2
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install 'psycopg2-binary>=2.9')")
    programs = find_pg_bin()
    if programs is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or in /usr/lib/postgresql")
    user = None
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the PostgreSQL server as")
    base = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # not under pytest's 0700 tmp: the server user reads it
    cluster = Cluster(programs, base, user)
    started = False
    try:
        cluster.init()
        cluster.start()
        started = True
        con = psycopg2.connect(host="127.0.0.1", port=cluster.port, user="postgres", dbname="postgres")
        try:
            con.autocommit = True  # CREATE DATABASE cannot run inside a transaction
            with con.cursor() as cur:
                cur.execute(f"CREATE DATABASE {DB_NAME}")
        finally:
            con.close()
        yield cluster.url(DB_NAME)
    finally:
        for storage in _STORAGES.values():
            storage.engine.dispose()
        _STORAGES.clear()
        if started:
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


# ----------------------------------------------------------------------------- helpers


def load_study(url: str, name: str) -> Any:
    """Through one storage per URL: a storage per call leaves its pooled connections open until collected,
    and the polling below would run the server out of connections."""
    import optuna

    if url not in _STORAGES:
        _STORAGES[url] = optuna.storages.RDBStorage(
            url, engine_kwargs={"connect_args": {"application_name": TEST_APP}})
    return optuna.load_study(study_name=name, storage=_STORAGES[url])


def connect(url: str) -> Any:
    """A plain psycopg2 connection to the database of ``url`` (autocommit)."""
    import psycopg2

    m = re.fullmatch(r"postgresql\+psycopg2://(\w+)@([\d.]+):(\d+)/(\w+)", url)
    assert m, url
    con = psycopg2.connect(user=m[1], host=m[2], port=int(m[3]), dbname=m[4], application_name=TEST_APP)
    con.autocommit = True
    return con


def measured_trials(url: str, name: str) -> list[Any]:
    """Finished trials that carry a measurement (not a repeat or an in-flight skip told to the sampler)."""
    from autotune.study import ROW_ATTR

    return [t for t in load_study(url, name).get_trials(deepcopy=False)
            if t.state.is_finished() and ROW_ATTR in t.user_attrs and "repeat_of_trial" not in t.user_attrs[ROW_ATTR]]


def sql_count_complete(url: str, name: str) -> int:
    """COMPLETE trials of the study, counted by PostgreSQL itself (not through Optuna's storage layer)."""
    con = connect(url)
    try:
        with con.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                        "WHERE s.study_name = %s AND t.state = 'COMPLETE'", (name,))
            row = cur.fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0])


def run_args(recipe: Path, out: Path, url: str, study: str) -> list[str]:
    return ["run", str(recipe), "--out", str(out), "--storage", url, "--study", study, "--no-progress"]


def has_space(url: str, name: str) -> bool:
    """True once `autotune run` has stored the search space, i.e. a worker can join."""
    try:
        return "space" in load_study(url, name).user_attrs
    except KeyError:  # the study does not exist yet
        return False


# ----------------------------------------------------------------------------- tests


@pytest.mark.slow  # its kind stays in make test (issue 31): the real-PostgreSQL study tests below, and the SQLite runs
def test_run_stores_the_study_in_postgres(pg_url: str, write_recipe, tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = write_recipe(recipe_text(variants=["eager", "frozen"], batch_sizes=[1, 4]))
    # trust auth ignores the password, so it can stand for a real one: it must not reach the reports
    with_password = pg_url.replace("//postgres@", "//postgres:s3cret@")
    assert with_password != pg_url
    code, stdout, err = run_cli(*run_args(path, out, with_password, "s1"))
    assert code == 0, err
    assert "Recommend" in stdout
    assert not (out / "study.db").exists()  # the default SQLite file is not used
    for name in ("report.json", "report.md", "report.html"):
        assert "s3cret" not in (out / name).read_text(), name
    doc = json.loads((out / "report.json").read_text())
    assert doc["search"]["storage"] == pg_url.replace("//postgres@", "//postgres:***@")
    assert doc["search"]["study_name"] == "s1"
    assert doc["search"]["stopped_by"] == "exhausted"

    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert {(c["variant"], c["batch_size"]) for c in ok} == {(v, b) for v in ("eager", "frozen") for b in (1, 4)}
    assert doc["search"]["measured_this_run"] == len(ok)
    study = load_study(pg_url, "s1")
    assert len(study.trials) == doc["search"]["trials"]
    by_number = {t.number: t for t in study.trials}
    for c in ok:
        trial = by_number[c["trial"]]
        assert trial.state.name == "COMPLETE"
        assert (trial.params["variant"], trial.params["batch_size"]) == (c["variant"], c["batch_size"])
        assert trial.values == [pytest.approx(c["throughput"])]
        assert trial.user_attrs["row"]["throughput"] == c["throughput"]
    assert study.user_attrs["recipe"]["name"] == "tiny_pg"
    assert sorted(study.user_attrs["space"]) == ["eager", "frozen"]
    assert {(t.params["variant"], t.params["batch_size"]) for t in measured_trials(pg_url, "s1")} == {
        (c["variant"], c["batch_size"]) for c in ok}
    # Repeats told to the sampler are COMPLETE too, so PostgreSQL holds at least the measured ones.
    assert sql_count_complete(pg_url, "s1") >= len(ok)

    code, stdout, err = run_cli("report", str(out), "--storage", with_password)  # re-render from the server
    assert code == 0, err
    assert "s3cret" not in (out / "report.json").read_text()
    assert json.loads((out / "report.json").read_text())["search"]["trials"] == len(load_study(pg_url, "s1").trials)


# slow (~60 s): resume itself is tested on SQLite by test_cli's test_resume_does_not_remeasure; storing in
# PostgreSQL by test_run_stores_the_study_in_postgres, which stays in the default suite.
@pytest.mark.slow
def test_resume_from_postgres_does_not_remeasure(pg_url: str, write_recipe, tmp_path: Path) -> None:
    path = write_recipe(recipe_text(variants=["eager"], batch_sizes=[1, 4]))
    code, _, err = run_cli(*run_args(path, tmp_path / "first", pg_url, "s3"))
    assert code == 0, err
    first = json.loads((tmp_path / "first" / "report.json").read_text())
    assert first["search"]["measured_this_run"] == 2
    before = sql_count_complete(pg_url, "s3")

    # Another --out directory: the study on the server is what carries the state, not local files.
    code, _, err = run_cli(*run_args(path, tmp_path / "second", pg_url, "s3"))
    assert code == 0, err
    second = json.loads((tmp_path / "second" / "report.json").read_text())
    assert second["search"]["measured_this_run"] == 0
    assert second["search"]["stopped_by"] == "exhausted"
    assert [c["throughput"] for c in second["candidates"]] == [c["throughput"] for c in first["candidates"]]
    assert sql_count_complete(pg_url, "s3") == before
    assert len(measured_trials(pg_url, "s3")) == 2


# slow (~80 s, the run is made to last while the worker joins): joining a study with a real worker is tested
# on SQLite by tests/test_worker_join.py in the default suite.
@pytest.mark.slow
def test_run_and_worker_share_a_study(pg_url: str, write_recipe, tmp_path: Path) -> None:
    variants, sizes = ["eager", "frozen", "script", "trace"], [1, 2, 4, 8]
    space = {(v, b) for v in variants for b in sizes}
    # ci_target unreachably tight: every candidate takes its full max_seconds, so the run lasts long
    # enough for the worker to start and join it.
    path = write_recipe(recipe_text(variants=variants, batch_sizes=sizes, max_seconds=1.0, ci_target=0.0001))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "autotune"]
    run = subprocess.Popen([*cmd, *run_args(path, out, pg_url, "s2")], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        deadline = time.monotonic() + 90
        while not has_space(pg_url, "s2"):
            assert run.poll() is None, run.communicate()[1]
            assert time.monotonic() < deadline, "the run never stored its search space"
            time.sleep(0.3)
        # the worker's own copy of the recipe (it never runs the one stored in the study)
        worker = subprocess.Popen([*cmd, "worker", str(path), "--storage", pg_url, "--study", "s2", "--no-progress"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        w_out, w_err = worker.communicate(timeout=240)
        _, r_err = run.communicate(timeout=240)
    finally:
        for proc in (run, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert worker.returncode == 0, w_err
    assert run.returncode == 0, r_err

    trials = measured_trials(pg_url, "s2")
    counts = Counter((t.params["variant"], t.params["batch_size"]) for t in trials)
    assert {c: n for c, n in counts.items() if n > 1} == {}, "measured twice"
    assert set(counts) == space
    assert all(t.state.name == "COMPLETE" and t.user_attrs["row"]["status"] == "ok" for t in trials)

    m = re.search(r"measured (\d+) candidates for study s2; stopped by (\w+)", w_out)
    assert m, w_out
    by_worker = int(m[1])
    doc = json.loads((out / "report.json").read_text())
    by_run = doc["search"]["measured_this_run"]
    assert by_worker >= 1 and by_run >= 1, (by_run, by_worker)
    assert by_run + by_worker == len(space)  # nothing measured twice and then dropped at tell time
    # The run's report lists the worker's measurements too.
    assert {(c["variant"], c["batch_size"]) for c in doc["candidates"] if c["status"] == "ok"} == space


# ----------------------------------------------------------------------------- the search loop, two workers
# Deterministic interleavings of two workers on one PostgreSQL study, with a fake evaluator: the races
# the end-to-end test above can only hit by chance.


def search_settings(url: str, study: str, *, time_budget_s: float = 60.0) -> Any:
    from autotune.core.recipe import Constraints
    from autotune.study import SearchSettings

    return SearchSettings(objective="throughput", constraints=Constraints(), storage=url, study_name=study,
                          recipe_fingerprint="pg-test", time_budget_s=time_budget_s)


def small_space() -> Any:
    from autotune.study import SearchSpace

    return SearchSpace(variants=("eager",), batch_sizes={"eager": (1, 8)})


def start_elsewhere(search: Any, variant: str, batch: int) -> Any:
    """Another worker starts measuring (variant, batch): a RUNNING trial with those params."""
    search.study.enqueue_trial({"variant": variant, "batch_size": batch})
    trial = search.ask(search.space.distributions())  # without Optuna's warning that ask/tell has no heartbeat
    assert (trial.params["variant"], trial.params["batch_size"]) == (variant, batch)
    return trial


def test_a_combination_finished_elsewhere_meanwhile_is_not_measured_again(pg_url: str, fake_row: FakeRow) -> None:
    """Worker A finishes (eager, 8) after B read the results and before B's suggestion is checked."""
    from autotune.study import Search
    calls: dict[str, list[tuple[str, int]]] = {"A": [], "B": []}
    a = Search(small_space(), search_settings(pg_url, "race"), lambda t, v, b: fake_row(t, v, b))
    b = Search(small_space(), search_settings(pg_url, "race"),
               lambda t, v, b_: calls["B"].append((v, b_)) or fake_row(t, v, b_))
    ask = b.study.ask
    done = []

    def ask_after_a_finishes(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            trial = start_elsewhere(a, "eager", 8)
            calls["A"].append(("eager", 8))
            a.tell(trial, fake_row(trial.number, "eager", 8))
        return ask(*args, **kwargs)

    b.study.ask = ask_after_a_finishes  # B's first suggestion is its prior, (eager, 8)
    out = b.run()
    assert calls == {"A": [("eager", 8)], "B": [("eager", 1)]}
    assert out.stopped_by == "exhausted"


def test_waits_while_others_measure_what_is_left(pg_url: str, fake_row: FakeRow) -> None:
    """Nothing left but what another worker is measuring: poll the study, do not churn out repeat trials."""
    from autotune.study import Search
    a = Search(small_space(), search_settings(pg_url, "wait"), lambda t, v, b: fake_row(t, v, b))
    running = start_elsewhere(a, "eager", 8)
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # fake time: A finishes after B has waited three times
        slept.append(seconds)
        if len(slept) == 3:
            a.tell(running, fake_row(running.number, "eager", 8))

    calls: list[tuple[str, int]] = []
    b = Search(small_space(), search_settings(pg_url, "wait", time_budget_s=20.0),
               lambda t, v, b_: calls.append((v, b_)) or fake_row(t, v, b_),
               clock=lambda: time.monotonic() + sum(slept), sleep=sleep)
    out = b.run()
    assert calls == [("eager", 1)]
    assert out.stopped_by == "exhausted"
    assert len(slept) == 3 and all(0 < s <= 1.0 for s in slept)
    assert out.trials <= 6, out.trials  # a handful, not one per spin of the loop


def test_the_largest_measurement_record_is_stored_and_read_back_whole(pg_url: str, fake_row: FakeRow) -> None:
    """~100 kB of raw samples per row (the timing loop's maximum) through PostgreSQL's storage and back."""
    from autotune.study import Search, measured_rows

    record = largest_measurement_record(seed=1)
    out = Search(small_space(), search_settings(pg_url, "samples"),
                 lambda t, v, b: {**fake_row(t, v, b), "measurement": record}).run()
    assert out.stopped_by == "exhausted" and [r["measurement"] for r in out.rows] == [record, record]
    assert [r["measurement"] for r in measured_rows(load_study(pg_url, "samples"))] == [record, record]


def test_a_second_worker_does_not_enqueue_the_priors_again(pg_url: str, fake_row: FakeRow) -> None:
    from autotune.study import Search
    for _ in range(2):  # zero budget: each enqueues what it would start with, then stops
        out = Search(small_space(), search_settings(pg_url, "priors", time_budget_s=0.0),
                     lambda t, v, b: fake_row(t, v, b)).run()
        assert out.stopped_by == "time_budget"
    waiting = [t for t in load_study(pg_url, "priors").trials if t.state.name == "WAITING"]
    assert [t.system_attrs["fixed_params"] for t in waiting] == [{"variant": "eager", "batch_size": 8}]


def drop_other_connections(url: str) -> int:
    """What a server restart or an idle-session timeout does to the other processes: their connections die.

    Waits until the backends are gone: pg_terminate_backend only sends the signal.
    """
    con = connect(url)
    try:
        with con.cursor() as cur:
            cur.execute("SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> %s",
                        (TEST_APP,))
            pids = [pid for pid, _ in cur.fetchall()]
            deadline = time.monotonic() + 10
            while pids and time.monotonic() < deadline:
                cur.execute("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,))
                row = cur.fetchone()
                if row is not None and row[0] == 0:
                    break
                time.sleep(0.05)
    finally:
        con.close()
    return len(pids)


def test_a_connection_dropped_during_a_measurement_is_replaced(pg_url: str, fake_row: FakeRow) -> None:
    """The search's pooled connections die while a candidate is measured; its result must still be stored."""
    from autotune.study import Search
    dropped: list[int] = []

    def evaluate(trial: int, variant: str, batch: int) -> dict[str, Any]:
        dropped.append(drop_other_connections(pg_url))
        return fake_row(trial, variant, batch)

    out = Search(small_space(), search_settings(pg_url, "dropped"), evaluate).run()
    assert dropped and all(n >= 1 for n in dropped), dropped  # the search's own connections were cut
    assert out.stopped_by == "exhausted"
    assert sorted((t.params["variant"], t.params["batch_size"]) for t in measured_trials(pg_url, "dropped")) == [
        ("eager", 1), ("eager", 8)]


# ----------------------------------------------------------------------------- stale trials, storage errors


def _die_while_measuring(url: str, study: str) -> None:
    """A process hard-killed in the middle of a measurement: no tell, no cleanup, its heartbeat thread gone."""
    from autotune.study import Search

    def evaluate(trial: int, variant: str, batch: int) -> dict[str, Any]:
        os._exit(137)

    Search(small_space(), search_settings(url, study), evaluate).run()


def test_a_trial_of_a_dead_process_is_failed_and_measured_again(pg_url: str, monkeypatch: pytest.MonkeyPatch
                                                                 , fake_row: FakeRow) -> None:
    import multiprocessing as mp

    from autotune.study import Search
    from autotune.study import heartbeat as heartbeat_mod
    proc = mp.get_context("spawn").Process(target=_die_while_measuring, args=(pg_url, "stale"))
    proc.start()
    proc.join(timeout=120)
    assert proc.exitcode == 137
    dead = [t for t in load_study(pg_url, "stale").trials if t.state.name == "RUNNING"]
    assert [(t.params["variant"], t.params["batch_size"]) for t in dead] == [("eager", 8)]  # its prior

    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(heartbeat_mod, "HEARTBEAT_GRACE_S", 2)
    calls: list[tuple[str, int]] = []
    out = Search(small_space(), search_settings(pg_url, "stale", time_budget_s=60.0),
                 lambda t, v, b: calls.append((v, b)) or fake_row(t, v, b)).run()
    assert out.stopped_by == "exhausted"  # it waited for the grace period, not for its whole budget
    assert sorted(calls) == [("eager", 1), ("eager", 8)]
    trial = load_study(pg_url, "stale").trials[dead[0].number]
    assert trial.state.name == "FAIL" and "row" not in trial.user_attrs
    assert sorted((t.params["variant"], t.params["batch_size"]) for t in measured_trials(pg_url, "stale")) == [
        ("eager", 1), ("eager", 8)]


def test_a_database_that_does_not_exist_is_an_input_error(pg_url: str) -> None:
    from autotune.errors import InputError
    from autotune.study import open_study

    url = pg_url.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(InputError, match=r'^--storage postgresql\+psycopg2://postgres@127\.0\.0\.1:\d+/no_such_db: '
                                         r'cannot open the storage: .*"no_such_db" does not exist'):
        open_study(search_settings(url, "x"))


# ----------------------------------------------------------------------------- passwords outside the URL


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_pgpassword_pgpass_and_a_query_string_password(pg_url: str, write_recipe, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A role that must log in with a password (scram over TCP): libpq finds it in PGPASSWORD or a .pgpass
    file, so the URL (and `ps`) need not carry it; one in the URL's query string works and is masked."""
    from urllib.parse import quote

    from autotune.errors import InputError
    from autotune.study import make_storage

    password = "p@ss:w?rd"
    con = connect(pg_url)
    try:
        with con.cursor() as cur:
            cur.execute("CREATE ROLE pwuser LOGIN PASSWORD %s", (password,))
            cur.execute("CREATE DATABASE pwdb OWNER pwuser")
            cur.execute("SHOW hba_file")
            row = cur.fetchone()
            assert row is not None
            hba = Path(row[0])
            hba.write_text("host all pwuser 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
            cur.execute("SELECT pg_reload_conf()")
    finally:
        con.close()
    port = re.search(r":(\d+)/", pg_url)[1]  # type: ignore[index]
    url = f"postgresql+psycopg2://pwuser@127.0.0.1:{port}/pwdb"
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))

    def opens(storage_url: str) -> bool:
        try:
            make_storage(storage_url).engine.dispose()
        except InputError as exc:
            assert password not in str(exc) and "w?rd" not in str(exc), exc
            return False
        return True

    time.sleep(0.5)  # the reload is asynchronous
    assert not opens(url)  # no password anywhere: refused, so the next three really use theirs
    monkeypatch.setenv("PGPASSWORD", password)
    assert opens(url)
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / ".pgpass"
    pgpass.write_text(f"127.0.0.1:{port}:pwdb:pwuser:{password.replace(':', chr(92) + ':')}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert opens(url)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    assert opens(f"{url}?password={quote(password, safe='')}")
    assert not opens(f"{url}?password=wrong")

    # the whole CLI, the password in the environment only
    path = write_recipe(recipe_text(variants=["eager"], batch_sizes=[1]))
    env = {**os.environ, "PGPASSWORD": password}
    proc = subprocess.run([sys.executable, "-m", "autotune", *run_args(path, tmp_path / "out", url, "pw")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["search"]["storage"] == url and doc["search"]["measured_this_run"] == 1
    shown = f"{url}?password={quote(password, safe='')}"
    code, _, err = run_cli("report", str(tmp_path / "out"), "--storage", shown)
    assert code == 0, err
    assert "w%3Frd" not in (tmp_path / "out" / "report.json").read_text()
