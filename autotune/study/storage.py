"""The study's storage: opening it (and the study in it), and what its failures mean to the person running.

A study lives in an RDB through Optuna's ``RDBStorage``: an SQLite file in ``--out`` by default, any
SQLAlchemy URL (PostgreSQL, MySQL) to share it between machines. Opening it configures what a long run on
a shared database needs (connections checked before use, heartbeats, SQLite's lock wait), and every
failure a person can do something about (a locked, full, damaged or read-only database, a missing driver,
a bad URL, a full disk under ``--out``) becomes one :class:`~autotune.errors.InputError` line (exit 2) that
says what to do, with the URL's passwords masked (:mod:`autotune.study.urls`). Failures are classified by
the database driver's own error code (SQLite's error name, PostgreSQL's SQLSTATE), not by message text.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import re
import sqlite3
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.engine
import sqlalchemy.event
import sqlalchemy.exc
from optuna.exceptions import ExperimentalWarning, StorageInternalError

from autotune.candidate import directions
from autotune.errors import InputError
from autotune.study import heartbeat
from autotune.study.fingerprint import verify_fingerprint
from autotune.study.space import SearchSettings, make_sampler, metric_names
from autotune.study.urls import URL_EXAMPLES, display_url, scrub

#: Seconds an SQLite connection waits for another process's lock before giving up (read at call time: a test
#: shortens it by patching it here).
SQLITE_BUSY_TIMEOUT_S = 10.0

def _driver_error(exc: BaseException) -> BaseException | None:
    """The database driver's own exception behind ``exc`` (Optuna and SQLAlchemy wrap it), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.Error) or type(current).__module__.startswith(("psycopg", "pg8000", "pymysql")):
            return current
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return None


#: PostgreSQL error classes (SQLSTATE) that are a storage problem rather than a bug, and what they mean.
_PG_STATES = {"53100": "full", "53": "resources", "25006": "readonly", "55P03": "locked", "40P01": "locked",
              "XX001": "corrupt", "XX002": "corrupt"}


def _storage_kind(exc: BaseException) -> str | None:
    """``locked | full | corrupt | readonly | cantopen | io | resources`` for a known storage failure, else None."""
    driver = _driver_error(exc)
    if isinstance(driver, sqlite3.Error):
        name = str(getattr(driver, "sqlite_errorname", "") or "")
        for prefix, kind in (("SQLITE_BUSY", "locked"), ("SQLITE_LOCKED", "locked"), ("SQLITE_FULL", "full"),
                             ("SQLITE_CORRUPT", "corrupt"), ("SQLITE_NOTADB", "corrupt"),
                             ("SQLITE_READONLY", "readonly"), ("SQLITE_PERM", "readonly"),
                             ("SQLITE_CANTOPEN", "cantopen"), ("SQLITE_IOERR", "io")):
            if name.startswith(prefix):
                return kind
    code = str(getattr(driver, "pgcode", "") or "")
    if code:
        return _PG_STATES.get(code) or _PG_STATES.get(code[:2])
    return None


def _storage_problem(exc: BaseException, kind: str | None = None) -> str:
    """One line on what went wrong with a storage, from the driver's own message where there is one."""
    if isinstance(exc, sqlalchemy.exc.NoSuchModuleError):
        reason = f"unknown database kind ({exc}); expected e.g. {URL_EXAMPLES}"
    elif isinstance(exc, sqlalchemy.exc.ArgumentError | ValueError):
        reason = f"not a valid database URL ({exc}); expected e.g. {URL_EXAMPLES}"
    elif isinstance(exc, ImportError):
        # Optuna re-raises the driver's ModuleNotFoundError as a generic ImportError; the cause names the module.
        cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
        reason = f"the database driver is not installed ({cause}); install it or name an installed driver in the URL"
    else:
        orig = _driver_error(exc) or getattr(exc, "orig", None) or exc.__cause__ or exc
        reason = str(orig)
    reason = " ".join(line.strip() for line in reason.splitlines() if line.strip() and "sqlalche.me" not in line)
    waited = f"waited {SQLITE_BUSY_TIMEOUT_S:g} s; " if isinstance(_driver_error(exc), sqlite3.Error) else ""
    advice = {
        "locked": f"the database is locked by another process ({waited}{reason}): another program holds a "
                  "transaction on it; close that program or wait for it, then run again",
        "full": f"the disk is full ({reason}): free some space and run again; what was measured so far is kept",
        "corrupt": f"the database is damaged or not a database ({reason}); autotune left it as it is: move it "
                   "away (or use another --out or --storage) to start a new study",
        "readonly": f"cannot write to it ({reason}): the file or its directory is read-only; make it writable "
                    "or use another --out or --storage",
        "io": f"an I/O error ({reason}): the disk may be full or failing; what was measured so far is kept",
        "resources": f"the database server is out of resources ({reason}); what was measured so far is kept",
    }
    return advice.get(kind or "", reason)


def _storage_error(url: str, exc: BaseException, *, kind: str | None = None) -> InputError:
    return InputError(f"--storage {display_url(url)}: cannot open the storage: "
                      f"{scrub(_storage_problem(exc, kind or _storage_kind(exc)), url)}")


#: What "cannot open the storage" looks like: a URL SQLAlchemy cannot parse or whose dialect it does not know
#: (ArgumentError, ValueError for e.g. a non-numeric port), a missing driver module (ImportError), a server
#: that is unreachable or refuses the login, a file that cannot be opened or is locked (OperationalError), a
#: file that is not a database (DatabaseError), a schema made by an incompatible Optuna (RuntimeError from its
#: version check; StorageInternalError when reading it failed).
_OPEN_ERRORS = (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.DatabaseError, ImportError, ValueError, RuntimeError,
                StorageInternalError)


def make_storage(url: str) -> optuna.storages.RDBStorage:
    """The study's storage: connections checked before use, and a heartbeat for RUNNING trials.

    ``pool_pre_ping``: a server connection can die while a candidate is being measured for minutes (a
    server restart, an idle-session timeout, a firewall dropping idle TCP between machines). Unchecked, the
    next write (the measurement's row) raised StorageInternalError, the run died with a traceback and the
    trial stayed RUNNING for good. Optuna turns the check on only for MySQL.

    Heartbeat: the storage records heartbeats of RUNNING trials every
    :data:`~autotune.study.heartbeat.HEARTBEAT_INTERVAL_S` and calls a trial stale after
    :data:`~autotune.study.heartbeat.HEARTBEAT_GRACE_S` without one (why, and why these values:
    :mod:`autotune.study.heartbeat`). Both are looked up on that module at call time, so a test can shorten
    them in its own process by patching them there.

    SQLite: a connection waits :data:`SQLITE_BUSY_TIMEOUT_S` for another process's lock, then the operation
    fails with "database is locked" (:func:`storage_errors` makes that exit 2).

    Raises :class:`InputError` naming ``--storage`` (password masked) when the storage cannot be opened.
    """
    if url.startswith("redis"):
        raise InputError(f"--storage {display_url(url)}: Redis storage was removed from Optuna; use an RDB URL "
                         f"such as {URL_EXAMPLES}")
    if re.fullmatch(r"sqlite(\+\w+)?:///?(:memory:)?", url.strip()):
        # an in-memory database: each connection sees its own empty one ("no such table: studies"), and nothing
        # measured would outlive the run
        raise InputError(f"--storage {url}: names no file (SQLite in memory: nothing would be kept); give a file, "
                         f"e.g. {URL_EXAMPLES}")
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": float(SQLITE_BUSY_TIMEOUT_S)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeat_interval is "experimental" since 2.9
            storage = optuna.storages.RDBStorage(
                url,
                heartbeat_interval=heartbeat.HEARTBEAT_INTERVAL_S,
                grace_period=heartbeat.HEARTBEAT_GRACE_S,
                engine_kwargs=engine_kwargs,
            )
    except _OPEN_ERRORS as exc:
        raise _storage_error(url, exc) from None
    if url.startswith("sqlite"):
        serialize_sqlite_transactions(storage.engine)
    return storage


def let_go_of_interrupted_frames(exc: BaseException) -> None:
    """Drop the locals of the frames ``exc`` interrupted, then collect: a storage connection they still held goes.

    Why: Ctrl-C can land while the interrupted code holds a SQLite write transaction (``BEGIN IMMEDIATE`` taken,
    the connection referenced only by the interrupted frames, which the exception's traceback keeps alive).
    What the handler writes next (the trial failed, the report's rows) goes through another connection and waits
    :data:`SQLITE_BUSY_TIMEOUT_S` for that lock, then fails "database is locked" (an interrupt that ended exit 2
    instead of 130, once in about 40 runs of the CLI's interrupt test). A closed connection's transaction is rolled
    back, so its lock goes with it. The frame still running (the handler's own) is left as it is.
    """
    if exc.__traceback__ is not None:
        traceback.clear_frames(exc.__traceback__)
    gc.collect()


def serialize_sqlite_transactions(engine: sqlalchemy.engine.Engine) -> None:
    """Make every SQLite transaction take the write lock when it begins (``BEGIN IMMEDIATE``).

    Why: Optuna hands out a WAITING (enqueued) trial with read-check-update in one transaction, "SELECT ...
    FOR UPDATE; if WAITING: set RUNNING". SQLite has no row locks and Python's driver begins the transaction
    only at the first write, so two processes could both read WAITING, both set RUNNING, and both measure
    the same trial (seen as one combination measured twice by two workers sharing a study). With the lock
    taken at BEGIN, the read and the update are one atomic step; the other process waits (up to
    :data:`SQLITE_BUSY_TIMEOUT_S`) and then reads RUNNING. The cost is that transactions of several processes
    on one file run one at a time, which they nearly did anyway (SQLite has one writer), and Optuna's are short.

    This is SQLAlchemy's documented recipe for pysqlite: turn off the driver's own BEGIN, emit ours. The pool's
    connections made before the listeners existed (Optuna's schema check) are closed so that none escapes it.
    """
    @sqlalchemy.event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sqlalchemy.event.listens_for(engine, "begin")
    def _begin_immediate(connection: sqlalchemy.engine.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()


def open_study(
    settings: SearchSettings,
    *,
    recipe_data: Mapping[str, Any] | None = None,
    storage: optuna.storages.RDBStorage | None = None,
) -> optuna.Study:
    """Create or resume the study; refuse one that was made for a different workload.

    ``storage`` defaults to :func:`make_storage` of ``settings.storage``; pass one to keep a handle on it (the
    search records heartbeats through it). Storage problems raise :class:`InputError` naming ``--storage``.
    """
    if storage is None:
        storage = make_storage(settings.storage)
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=settings.study_name,
            directions=directions(settings.objective),
            sampler=make_sampler(settings.objective, seed=settings.seed),
            load_if_exists=True,
        )
    except ValueError as exc:  # e.g. directions differ from the stored study
        raise InputError(f"--study {settings.study_name}: cannot use the stored study: {exc}") from None
    except StorageInternalError as exc:  # the server went away between connecting and reading the study
        raise _storage_error(settings.storage, exc) from None
    verify_fingerprint(study, settings, recipe_data=recipe_data)
    if study.metric_names is None:  # optuna-dashboard labels the objective axes and columns with these
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names(settings.objective, settings.constraints))
    return study


def sqlite_file(url: str) -> Path | None:
    """The file of an ``sqlite://`` URL (resolved; relative paths are relative to the working directory), None for
    another database or SQLite's in-memory one."""
    from sqlalchemy.engine import make_url

    if not url.startswith("sqlite"):
        return None
    try:
        database = make_url(url).database
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).resolve()


def load_existing_study(url: str, study_name: str) -> optuna.Study:
    """Load a study that must exist (``autotune worker``), with the same storage and errors as :func:`open_study`.

    Raises :class:`InputError` for a storage that cannot be opened and for a study that is not there. An
    SQLite file that does not exist is one: opening it would create an empty database there (a typo, or a path
    from a moved run directory, would leave a stray ``study.db`` behind).
    """
    file = sqlite_file(url)
    if file is not None and not file.is_file():
        raise InputError(f"--storage {display_url(url)}: no such database file {file}; nothing was created")
    storage = make_storage(url)
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise InputError(f"--study: no study named '{study_name}' in {display_url(url)}") from None
    except StorageInternalError as exc:
        raise _storage_error(url, exc) from None


#: OS errors that mean "this directory or disk cannot take the write", and what to do about each.
_OS_ADVICE = {
    errno.ENOSPC: "the disk is full: free some space and run again; what was measured so far is kept",
    errno.EDQUOT: "the disk quota is used up: free some space and run again; what was measured so far is kept",
    errno.EROFS: "the file system is read-only: use another --out",
    errno.EACCES: "no permission to write there: make it writable or use another --out",
    errno.EPERM: "the directory does not allow writing (permissions, or an immutable attribute): make it writable "
                 "or use another --out",
    errno.EIO: "an I/O error: the disk may be failing",
}


@contextlib.contextmanager
def storage_errors(url: str | None, *, out_dir: Path | None = None, out_label: str = "--out") -> Iterator[None]:
    """Make a storage or ``--out`` failure anywhere in the block an :class:`InputError` (exit 2, no traceback).

    Covered: the study database is locked by another process, full, damaged or read-only, its server ran out
    of resources or went away (SQLAlchemy/Optuna errors, by the driver's error code), and writing in
    ``out_dir`` failed with a full disk, a read-only file system or no permission (OSError). What was committed
    before stays as it was: each write is its own transaction, and the reports are replaced atomically.
    Anything else (a programming error such as an IntegrityError) goes on up unchanged.
    """
    try:
        yield
    except (StorageInternalError, sqlalchemy.exc.SQLAlchemyError, sqlite3.Error) as exc:
        kind = _storage_kind(exc)
        driver = _driver_error(exc)
        operational = (isinstance(driver, sqlite3.OperationalError) or
                       type(driver).__name__ in ("OperationalError", "InterfaceError") or
                       isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError))
        if kind is None and not operational:
            raise
        shown = f"--storage {display_url(url)}" if url else "the study's storage"
        reason = _storage_problem(exc, kind)
        raise InputError(f"{shown}: {scrub(reason, url) if url else reason}") from None
    except OSError as exc:
        advice = _OS_ADVICE.get(exc.errno or 0)
        if advice is None:
            raise
        where = f"{out_label} {out_dir}: " if out_dir is not None else ""
        target = f"cannot write {exc.filename}" if exc.filename else "cannot write"
        raise InputError(f"{where}{target}: {exc.strerror or exc} ({advice})") from None

