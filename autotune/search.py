"""The Optuna study: search space, objectives, constraints, persistence, resume, several workers.

Why Optuna and not a grid: the space (variants × precisions × memory formats × threads ×
batch sizes) grows multiplicatively, while a tuning has a time budget. TPE (NSGA-II for the
Pareto objective) with constraint handling spends that budget where the good configurations
are, and the study's storage (SQLite by default, any RDB URL such as PostgreSQL) makes a run
resumable and lets identical machines share the work.

Algorithm::

    study = create or load (storage, name); refuse one whose fingerprint differs (saying which parts)
    fail stale trials (a process that died while measuring: its heartbeat stopped, or it never beat)
    enqueue priors: every variant at its largest allowed batch (throughput) or its smallest
                    (latency), eager first; both for pareto
    loop until time budget spent | max_trials measured | every combination measured:
        fail stale trials, so what a dead process was measuring is measured again
        everything unmeasured is being measured by other workers → wait for them, ask nothing
        trial = study.ask({variant: categorical, batch_size: categorical})
        (v, b) measured before, here or by another worker → tell the stored result again
               (the sampler learns, nothing is re-run); after a few repeats enqueue an
               unmeasured combination instead
        b above v's boundary, or v already failed/rejected → tell PRUNED with the reason
        else row = evaluate(v, b); tell COMPLETE(objective values, constraint values)
             or FAIL (oom / rejected / failed), the row stored in the trial's user attributes
        (from ask to tell a background thread records the trial's heartbeat; an exception or an
         interrupt tells the trial FAIL without a row, so it is neither "measured" nor "in flight")
    rows = every trial's row (this run and earlier ones), in trial order

Liveness: a trial is RUNNING from ask to tell. A process killed in between (SIGKILL, the OOM killer, a
reboot) cannot tell it anything, and a RUNNING trial counts as "being measured elsewhere", so without a
heartbeat every later run or worker would skip that combination and wait for it until its time budget.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import importlib.util
import json
import random
import re
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

import optuna
import sqlalchemy.exc
from optuna.distributions import CategoricalDistribution
from optuna.exceptions import ExperimentalWarning, StorageInternalError, UpdateFinishedTrialError
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from autotune.candidate import constraint_values, directions, objective_values, skipped_record
from autotune.errors import InputError
from autotune.recipe import Constraints
from autotune.strategy import Arm, BracketSearch

if TYPE_CHECKING:
    from autotune.recipe import Recipe

ROW_ATTR = "row"
#: Repeated suggestions tolerated before an unmeasured combination is enqueued by hand.
MAX_REPEATS = 3
#: A variant whose build failed or whose outputs were wrong is not tried at other batch sizes.
TERMINAL_VARIANT_STATUSES = ("failed", "rejected")
#: Seconds between looks at the study while every unmeasured combination is being measured elsewhere.
IN_FLIGHT_POLL_S = 1.0
#: Seconds between heartbeats of a RUNNING trial (integer: Optuna's RDBStorage accepts nothing else).
HEARTBEAT_INTERVAL_S = 10
#: Seconds without a heartbeat after which another process fails a RUNNING trial as stale (integer).
HEARTBEAT_GRACE_S = 60
#: Seconds an SQLite connection waits for another process's lock before giving up (read at call time).
SQLITE_BUSY_TIMEOUT_S = 10.0
#: Study attribute holding the fingerprint's parts (what a study measures, on what, with which torch).
FINGERPRINT_ATTR = "fingerprint"
#: What the heartbeat adds to Optuna's messages: noise for a user of ask/tell (see :func:`_quiet_heartbeat`).
_HEARTBEAT_WARNING = "Heartbeat of storage is supposed to be used with Study.optimize"

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class SearchSpace:
    """Variants and, per variant, the batch sizes it may run (within its memory boundary)."""

    variants: tuple[str, ...]
    batch_sizes: Mapping[str, tuple[int, ...]]

    @property
    def all_batch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted({b for v in self.variants for b in self.batch_sizes.get(v, ())}))

    def combos(self) -> list[tuple[str, int]]:
        return [(v, b) for v in self.variants for b in self.batch_sizes.get(v, ())]

    def allows(self, variant: str, batch_size: int) -> bool:
        return batch_size in self.batch_sizes.get(variant, ())

    def distributions(self) -> dict[str, CategoricalDistribution]:
        return {
            "variant": CategoricalDistribution(list(self.variants)),
            "batch_size": CategoricalDistribution(list(self.all_batch_sizes)),
        }


@dataclass(frozen=True)
class SearchSettings:
    objective: str
    constraints: Constraints
    storage: str
    study_name: str
    #: Digest of ``fingerprint`` (what a study is matched on); any string where there are no parts.
    recipe_fingerprint: str
    time_budget_s: float
    max_trials: int = 0
    seed: int = 0
    #: The parts the digest was made of (:func:`study_fingerprint`): stored with a new study, and compared
    #: part by part with a stored one so that a mismatch says what differs.
    fingerprint: Mapping[str, Any] | None = None
    #: ``tpe`` (Optuna's sampler over (variant, batch)) or ``bracket`` (:mod:`autotune.strategy` decides).
    strategy: str = "tpe"
    #: Seconds of a full measurement (the recipe's ``measure.max_seconds``): the bracket strategy's
    #: cost model and the unit of its fidelities.
    measure_seconds: float = 10.0


@dataclass
class SearchOutcome:
    rows: list[dict[str, Any]]
    stopped_by: str
    wall_seconds: float
    sampler: str
    measured_this_run: int
    trials: int
    extra: dict[str, Any] = field(default_factory=dict)


#: ``evaluate(trial, variant, batch)``; the bracket strategy also passes ``fidelity=`` (share of the full
#: measurement time), so an evaluator used with it must accept that keyword.
Evaluate = Callable[..., dict[str, Any]]


def recipe_fingerprint(recipe_data: Mapping[str, Any]) -> str:
    """The fingerprint of studies made before :func:`study_fingerprint`: model, inputs, device as written.

    It did not cover the factory file's contents, the resolved device, torch or the hardware. A study that
    carries only this one is accepted on resume when it matches, and then gets the full fingerprint.
    """
    key = {k: recipe_data[k] for k in ("model", "inputs", "device") if k in recipe_data}
    key["model"] = {k: v for k, v in dict(key.get("model", {})).items() if k != "base_dir"}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _torch_version() -> str | None:
    """``torch.__version__`` (with its build tag, e.g. ``2.14.1+cu130``) without importing torch in this process:
    read from ``torch/version.py`` where the package is found, else from its metadata (no build tag)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        spec = importlib.util.find_spec("torch")  # a top-level package: found, not imported
        for location in (spec.submodule_search_locations or []) if spec else []:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", (Path(location) / "version.py").read_text(),
                          re.M)
            if m:
                return m[1]
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def study_fingerprint(recipe: Recipe, device: str) -> dict[str, Any]:
    """What a study's measurements depend on, part by part (JSON values, so a stored copy compares equal).

    The model (the factory reference, the factory file's contents or the factory package's version, the
    kwargs), the inputs, the resolved device (``cpu``, ``cuda:0``; never ``auto``), torch's version and the
    stable hardware facts (architecture, CPU model, core count, GPU names: nothing that changes while the
    machine runs, such as free memory, clocks or the driver). Budgets and search knobs are not in it: a
    resume may change them.
    """
    from autotune.environment import hardware_fingerprint
    from autotune.recipe import fingerprint_parts

    parts = {**fingerprint_parts(recipe), "device": device, "torch": _torch_version(), **hardware_fingerprint()}
    return dict(json.loads(json.dumps(parts)))


def fingerprint_digest(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _shown(value: Any) -> str:
    text = "none" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fingerprint_differences(stored: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """One ``part: study X, here Y`` per part that differs, in the order of ``here``'s parts."""
    keys = list(here) + [k for k in stored if k not in here]
    return [f"{k}: study {_shown(stored.get(k))}, here {_shown(here.get(k))}"
            for k in keys if stored.get(k) != here.get(k)]


def make_sampler(objective: str, *, seed: int) -> optuna.samplers.BaseSampler:
    """TPE for one objective, NSGA-II for the Pareto pair; both honour ``Trial.set_constraint`` values."""
    if objective == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=5)


#: ``scheme://user:password@host...``: the password runs to the last ``@`` that is followed by a host (a
#: password may contain ``@``, ``/`` or ``:``; SQLAlchemy's parser stops at its first ``@`` and would show
#: the rest as the host).
_USERINFO = re.compile(r"(?P<head>[^:/?#]+://[^:/?#@]*:)(?P<password>.*)(?P<tail>@[^@/?#]*(?:[/?#].*)?)\Z", re.S)
#: Query-string keys whose values are secrets (``?password=``, ``sslpassword``, ``passwd``, ``pwd``, tokens).
_SECRET_KEY = re.compile(r"pass|pwd|secret|token", re.I)
_QUERY_SECRET = re.compile(r"(?P<key>[?&][^=&#]*)=(?P<value>[^&#]*)")


def display_url(url: str) -> str:
    """``url`` with its passwords masked, for messages and reports (a storage URL may carry credentials).

    Masked: the password after ``user:`` (also one containing ``@``) and the value of every query-string
    key that names a secret (``?password=...``). Done on the text as written, so a URL SQLAlchemy cannot
    parse is still shown (the message about a bad URL must name it) without what it contains.
    """
    text = str(url)
    m = _USERINFO.match(text)
    if m and m["password"]:
        text = f"{m['head']}***{m['tail']}"

    def mask(q: re.Match[str]) -> str:
        return f"{q['key']}=***" if _SECRET_KEY.search(q["key"]) and q["value"] else q[0]

    return _QUERY_SECRET.sub(mask, text)


def _secrets(url: str) -> set[str]:
    """Every password in ``url``, as written and %-decoded, and as SQLAlchemy parses it (a driver quotes that)."""
    found: set[str] = set()
    m = _USERINFO.match(url)
    if m:
        found |= {m["password"], unquote_plus(m["password"]), *m["password"].split("@")}
    for q in _QUERY_SECRET.finditer(url):
        if _SECRET_KEY.search(q["key"]):
            found |= {q["value"], unquote_plus(q["value"])}
    with contextlib.suppress(sqlalchemy.exc.ArgumentError, ValueError, TypeError):
        parsed = make_url(url)
        found.add(str(parsed.password or ""))
        if parsed.host and "@" in parsed.host:  # "user:p@ss@host": SQLAlchemy's host is "ss@host"
            found.add(parsed.host.rpartition("@")[0])
    return {s for s in found if s}


def _scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message) without the passwords of ``url``, should the driver quote them.

    Only whole occurrences are masked (not inside a longer word): a short password must not mangle the
    rest of the message, e.g. "p" in "pg8000". Longer secrets first, so a part does not leave the rest.
    """
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    return text


URL_EXAMPLES = "sqlite:///path/study.db or postgresql+psycopg2://user:password@host:5432/db"


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
                      f"{_scrub(_storage_problem(exc, kind or _storage_kind(exc)), url)}")


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

    Heartbeat: a RUNNING trial whose process was killed would otherwise count as "being measured elsewhere"
    forever. The trial's process records a heartbeat every :data:`HEARTBEAT_INTERVAL_S` from a background
    thread (:class:`_Heartbeat`; ask/tell does not do it, only ``Study.optimize`` does), and any process of the
    study fails a RUNNING trial whose last heartbeat is older than :data:`HEARTBEAT_GRACE_S`
    (``fail_stale_trials``, at the top of the search loop). The times are the database's own clock (SQL
    ``now()``), so machines with skewed clocks agree. The interval is cheap (one small write per running
    trial); the grace is six missed beats, so a live process survives a slow disk, an SQLite lock held by
    another writer or a reconnect after a dropped connection, while a dead process holds its combination
    back for about a minute, not for the rest of everyone's time budget. Both are read at call time so a test
    can shorten them in its own process.

    SQLite: a connection waits :data:`SQLITE_BUSY_TIMEOUT_S` for another process's lock, then the operation
    fails with "database is locked" (:func:`storage_errors` makes that exit 2).

    Raises :class:`InputError` naming ``--storage`` (password masked) when the storage cannot be opened.
    """
    if url.startswith("redis"):
        raise InputError(f"--storage {display_url(url)}: Redis storage was removed from Optuna; use an RDB URL "
                         f"such as {URL_EXAMPLES}")
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": float(SQLITE_BUSY_TIMEOUT_S)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeat_interval is "experimental" since 2.9
            return optuna.storages.RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=HEARTBEAT_GRACE_S,
                engine_kwargs=engine_kwargs,
            )
    except _OPEN_ERRORS as exc:
        raise _storage_error(url, exc) from None


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
    _verify_fingerprint(study, settings, recipe_data=recipe_data)
    if study.metric_names is None:  # optuna-dashboard labels the objective axes and columns with these
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names(settings.objective, settings.constraints))
    return study


def metric_names(objective: str, constraints: Constraints) -> list[str]:
    """Names of the study's objective values, as optuna-dashboard shows them."""
    latency = f"{constraints.latency_percentile} latency (ms)"
    return {"throughput": ["throughput (samples/s)"], "latency": [latency],
            "pareto": ["throughput (samples/s)", latency]}[objective]


#: Scalar trial attributes beside the full row (ROW_ATTR): what optuna-dashboard's trial table can show
#: as columns (a JSON row is one long string there).
SUMMARY_ATTRS = ("status", "throughput", "peak_memory_bytes", "stopped_by")


def _verify_fingerprint(study: optuna.Study, settings: SearchSettings, *,
                        recipe_data: Mapping[str, Any] | None = None, joining: bool = False) -> None:
    """Store the fingerprint in a new study; refuse (:class:`InputError`, saying what differs) a study whose
    fingerprint is not this one.

    A study made before the fingerprint had parts (only ``recipe_fingerprint``, of model, inputs and device as
    written) is resumed when that old fingerprint matches ``recipe_data``, and then gets the new one; a worker
    cannot join it (there is nothing to compare the factory file, torch or hardware with).
    """
    attrs = study.user_attrs
    stored = attrs.get("recipe_fingerprint")
    here = settings.fingerprint
    where = f"--study {settings.study_name}: the study in {display_url(settings.storage)}"
    if stored is None:
        if joining:
            raise InputError(f"{where} was not created by `autotune run` (it has no fingerprint); "
                             "refusing to join it")
        study.set_user_attr("recipe_fingerprint", settings.recipe_fingerprint)
        if here is not None:
            study.set_user_attr(FINGERPRINT_ATTR, dict(here))
        study.set_user_attr("objective", settings.objective)
        if recipe_data is not None:
            study.set_user_attr("recipe", dict(recipe_data))
        return
    stored_parts = attrs.get(FINGERPRINT_ATTR)
    if joining and here is not None and stored_parts is None:
        raise InputError(f"{where} was made by an older autotune whose fingerprint has no parts to compare (factory "
                         "file contents, torch, hardware); refusing to join it: resume it once with `autotune run` "
                         "where it was made, then join")
    if stored == settings.recipe_fingerprint:
        return
    if (stored_parts is None and here is not None and recipe_data is not None and not joining
            and stored == recipe_fingerprint(recipe_data)):
        study.set_user_attr("recipe_fingerprint", settings.recipe_fingerprint)  # an older study: adopt it
        study.set_user_attr(FINGERPRINT_ATTR, dict(here))
        return
    if stored_parts is not None and here is not None:
        what = "; ".join(fingerprint_differences(stored_parts, here)) or "the fingerprint"
    else:
        what = "model, inputs or device"
    if joining:
        raise InputError(f"{where} was made for another setup; refusing to join it: what differs: {what}. "
                         "Join with the same recipe and model file, device, torch and hardware as the study")
    raise InputError(f"{where} was made for another setup; what differs: {what}. "
                     "Pick another --study NAME or --out directory, or run where the study was made")


def verify_join(study: optuna.Study, settings: SearchSettings) -> None:
    """``autotune worker``: refuse (:class:`InputError`) to join a study whose fingerprint is not ``settings``'s."""
    _verify_fingerprint(study, settings, joining=True)


def load_existing_study(url: str, study_name: str) -> optuna.Study:
    """Load a study that must exist (``autotune worker``), with the same storage and errors as :func:`open_study`.

    Raises :class:`InputError` for a storage that cannot be opened and for a study that is not there.
    """
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
        raise InputError(f"{shown}: {_scrub(reason, url) if url else reason}") from None
    except OSError as exc:
        advice = _OS_ADVICE.get(exc.errno or 0)
        if advice is None:
            raise
        where = f"{out_label} {out_dir}: " if out_dir is not None else ""
        target = f"cannot write {exc.filename}" if exc.filename else "cannot write"
        raise InputError(f"{where}{target}: {exc.strerror or exc} ({advice})") from None


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail the RUNNING trials whose heartbeat stopped: their process is dead (see :func:`make_storage`).

    The trial becomes FAIL without a row, so its combination counts neither as measured nor as in flight,
    and is measured again. Two processes failing the same trial at once is handled by Optuna.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


#: RUNNING trials of a study that have no heartbeat row at all (Optuna never considers those stale).
_BEATLESS = sqlalchemy.text(
    "SELECT t.trial_id FROM trials t WHERE t.study_id = :study AND t.state = 'RUNNING' "
    "AND NOT EXISTS (SELECT 1 FROM trial_heartbeats h WHERE h.trial_id = t.trial_id)")


def start_heartbeats_of_beatless_trials(storage: optuna.storages.RDBStorage, study_id: int) -> list[int]:
    """Record one heartbeat for every RUNNING trial that has none; returns their ids.

    Optuna fails a RUNNING trial as stale only by its last heartbeat, and a trial without any is never stale:
    one whose process was killed between ask and its first beat, or one left by an older autotune that did
    not beat, would count as "being measured elsewhere" forever. One beat recorded on its behalf starts the
    grace period on the database's clock: a live owner (about to write its first beat) simply goes on beating,
    a dead one is failed by :func:`fail_stale_trials` after :data:`HEARTBEAT_GRACE_S`, like any other stale
    trial. Two processes doing this at once is harmless (Optuna ignores the duplicate heartbeat row).
    """
    with storage.engine.connect() as con:
        ids = [int(row[0]) for row in con.execute(_BEATLESS, {"study": study_id})]
    for trial_id in ids:
        storage.record_heartbeat(trial_id)
    return ids


class _Heartbeat:
    """Records one trial's heartbeat now and then every interval from a daemon thread, until the block ends.

    Why a thread: a candidate is measured for minutes in a worker process while this process waits on its
    pipe; ``Study.optimize`` runs the same kind of thread, but ask/tell records nothing. The first beat is
    written at once, in the caller's thread: a trial with no heartbeat at all is never considered stale by
    Optuna, so a process killed before the first interval would otherwise leave its trial RUNNING forever.
    A failed beat (a dropped connection, a locked SQLite file) is skipped: the next one reconnects, and the
    grace period allows several misses.
    """

    def __init__(self, storage: optuna.storages.RDBStorage, trial_id: int) -> None:
        self._storage = storage
        self._trial_id = trial_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> None:
        self._storage.record_heartbeat(self._trial_id)
        interval = self._storage.get_heartbeat_interval()
        if interval is None:
            return
        self._thread = threading.Thread(target=self._beat, args=(float(interval),), daemon=True,
                                        name=f"autotune-heartbeat-{self._trial_id}")
        self._thread.start()

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with contextlib.suppress(Exception):
                self._storage.record_heartbeat(self._trial_id)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@contextlib.contextmanager
def _quiet_heartbeat() -> Iterator[None]:
    """Silence Optuna's warning that a heartbeat is meant for ``Study.optimize``: here ask/tell is paired
    with :class:`_Heartbeat`, which does what optimize does."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(_HEARTBEAT_WARNING))
        yield


def stored_rows(study: optuna.Study) -> dict[int, dict[str, Any]]:
    """Trial number → row, for every finished trial that carries one (this run and earlier)."""
    rows = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished() and ROW_ATTR in t.user_attrs:
            rows[t.number] = dict(t.user_attrs[ROW_ATTR])
    return rows


def _is_repeat(row: Mapping[str, Any]) -> bool:
    """Rows told only so the sampler learns (a repeated or out-of-space suggestion), not measurements."""
    return "repeat_of_trial" in row


def measured_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per measured (or pruned) combination, in trial order: what the report lists.

    A combination measured again at a higher fidelity (the bracket strategy's racing) keeps its latest
    row, in the place of its first one.
    """
    latest: dict[tuple[Any, Any], dict[str, Any]] = {}
    for _, r in sorted(stored_rows(study).items()):
        if not _is_repeat(r):
            key = (r.get("variant"), r.get("batch_size"))
            latest[key] = r  # a dict keeps the first insertion's place
    return list(latest.values())


def _state_for(row: Mapping[str, Any]) -> TrialState:
    if row["status"] == "ok":
        return TrialState.COMPLETE
    if row["status"] == "pruned":
        return TrialState.PRUNED
    return TrialState.FAIL


def _planned_combo(trial: optuna.trial.FrozenTrial) -> tuple[str | None, int | None]:
    """The (variant, batch) a WAITING or RUNNING trial is for.

    A trial taken from the queue has no ``params`` until it is suggested them (a WAITING one
    never has): what it will run is in its ``fixed_params`` system attribute. Reading only
    ``params`` missed those, so every joining process enqueued the priors again, and another
    worker's just-started trial did not count as in flight.
    """
    fixed = trial.params or trial.system_attrs.get("fixed_params", {})
    return fixed.get("variant"), fixed.get("batch_size")


class Search:
    """Runs the ask/tell loop over a :class:`SearchSpace` with a caller-supplied evaluator."""

    def __init__(
        self,
        space: SearchSpace,
        settings: SearchSettings,
        evaluate: Evaluate,
        *,
        recipe_data: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_row: Callable[[dict[str, Any]], None] | None = None,
        specs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.space = space
        self.specs = dict(specs or {})
        self.settings = settings
        self.evaluate = evaluate
        self.clock = clock
        self.sleep = sleep
        self.on_row = on_row
        self._storage = make_storage(settings.storage)
        self.study = open_study(settings, recipe_data=recipe_data, storage=self._storage)
        self._study_id = self._storage.get_study_id_from_name(settings.study_name)
        self._rng = random.Random(settings.seed)

    # -- bookkeeping -------------------------------------------------------------------
    def _measured(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Latest row per combination, from storage (sees other workers' results too)."""
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for _, row in sorted(stored_rows(self.study).items()):
            if not _is_repeat(row):
                out[(row["variant"], int(row["batch_size"]))] = row
        return out

    def _in_flight(self, *, besides: int | None = None) -> set[tuple[str | None, int | None]]:
        """Combinations another trial (here or on another machine) is measuring right now."""
        return {
            _planned_combo(t)
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number != besides
        }

    def _enqueue_priors(self, measured: Mapping[tuple[str, int], Any]) -> None:
        waiting = {_planned_combo(t) for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))}
        picks: list[tuple[str, int]] = []
        for v in self.space.variants:
            sizes = self.space.batch_sizes.get(v, ())
            if not sizes:
                continue
            if self.settings.objective in ("throughput", "pareto"):
                picks.append((v, max(sizes)))
            if self.settings.objective in ("latency", "pareto"):
                picks.append((v, min(sizes)))
        for combo in dict.fromkeys(picks):
            if combo not in measured and combo not in waiting:
                self.study.enqueue_trial({"variant": combo[0], "batch_size": combo[1]})

    def _enqueue_unmeasured(self, measured: Mapping[tuple[str, int], Any]) -> bool:
        todo = [c for c in self.space.combos() if c not in measured and c not in self._in_flight()]
        if not todo:
            return False
        v, b = self._rng.choice(todo)
        self.study.enqueue_trial({"variant": v, "batch_size": b})
        return True

    def _tell(self, trial: optuna.Trial, row: dict[str, Any]) -> None:
        try:
            self._tell_unguarded(trial, row)
        except UpdateFinishedTrialError:
            # SQLite has no row locks: two workers can pop the same enqueued trial. The other one
            # finished it first; this measurement is dropped (``skip_if_finished`` below covers the other
            # side of the race: finished between our row write and our tell, when our row replaced its
            # equivalent one). The same happens when this process was stalled past the heartbeat grace
            # (suspended, say) and another one failed the trial as stale: that one measures it again.
            pass

    def _fail(self, trial: optuna.Trial) -> None:
        """Tell ``trial`` FAIL without a row, best effort, while an exception or an interrupt propagates.

        Without a row the combination counts as neither measured nor in flight, so it is measured again
        later. Should the storage itself be what failed, this is skipped: the trial's heartbeat stops with
        this process and other processes fail it after the grace period.
        """
        with contextlib.suppress(Exception):
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)

    def _ask(self, distributions: Mapping[str, CategoricalDistribution]) -> optuna.Trial:
        with _quiet_heartbeat():
            return self.study.ask(dict(distributions))

    def _fail_stale(self) -> None:
        """Fail the stale RUNNING trials, then start the grace period of those that never had a heartbeat."""
        fail_stale_trials(self.study)
        start_heartbeats_of_beatless_trials(self._storage, self._study_id)

    def _heartbeat(self, trial: optuna.Trial) -> _Heartbeat:
        trial_id = self._storage.get_trial_id_from_study_id_trial_number(self._study_id, trial.number)
        return _Heartbeat(self._storage, trial_id)

    def _handle(self, trial: optuna.Trial) -> dict[str, Any] | None:
        """Tell ``trial`` its row: measured (returned) or one that needs no measurement (None)."""
        combo = (trial.params["variant"], int(trial.params["batch_size"]))
        row = self._row_without_running(trial.number, combo)
        if row is not None:
            self._tell(trial, row)
            return None
        row = self.evaluate(trial.number, *combo)
        self._tell(trial, row)
        return row

    def _tell_unguarded(self, trial: optuna.Trial, row: dict[str, Any]) -> None:
        trial.set_user_attr(ROW_ATTR, row)
        for key in SUMMARY_ATTRS:
            if row.get(key) is not None:
                trial.set_user_attr(key, row[key])
        p = self.settings.constraints.latency_percentile
        if (row.get("latency_ms") or {}).get(p) is not None:
            trial.set_user_attr(f"{p}_ms", row["latency_ms"][p])
        state = _state_for(row)
        if state == TrialState.COMPLETE:
            for name, value in constraint_values(row, self.settings.constraints).items():
                trial.set_constraint(name, value)
            values = objective_values(row, objective=self.settings.objective, constraints=self.settings.constraints)
            self.study.tell(trial, values, skip_if_finished=True)
        else:
            self.study.tell(trial, state=state, skip_if_finished=True)

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        if self.settings.strategy == "bracket":
            return run_bracket(self)
        t0 = self.clock()
        self._fail_stale()
        measured = self._measured()
        self._enqueue_priors(measured)
        measured_now = 0
        repeats = 0
        stopped_by = "exhausted"
        distributions = self.space.distributions()
        try:
            while True:
                self._fail_stale()
                measured = self._measured()
                remaining = [c for c in self.space.combos() if c not in measured]
                if not remaining:
                    stopped_by = "exhausted"
                    break
                if self.clock() - t0 >= self.settings.time_budget_s:
                    stopped_by = "time_budget"
                    break
                if self.settings.max_trials and measured_now >= self.settings.max_trials:
                    stopped_by = "max_trials"
                    break
                if set(remaining) <= self._in_flight():
                    # Everything left is being measured by other workers. Asking now could only yield repeats,
                    # told at full speed: hundreds of bookkeeping trials per minute in the shared study, each
                    # making the sampler slower. Wait for them instead (or for their heartbeats to go stale).
                    left = self.settings.time_budget_s - (self.clock() - t0)
                    self.sleep(max(0.0, min(IN_FLIGHT_POLL_S, left)))
                    continue
                trial = self._ask(distributions)
                try:
                    with self._heartbeat(trial):
                        row = self._handle(trial)
                except BaseException:
                    # Whatever ``evaluate`` (or the storage) raised goes on up, Ctrl-C included, but the trial
                    # must not stay RUNNING.
                    self._fail(trial)
                    raise
                if row is None:
                    repeats += 1
                    if repeats >= MAX_REPEATS and self._enqueue_unmeasured(measured):
                        repeats = 0
                    continue
                repeats = 0
                measured_now += 1
                if self.on_row is not None:
                    self.on_row(row)
        except KeyboardInterrupt:
            # Ctrl-C anywhere in the loop (a measurement, ask, the wait for other workers): stop and report
            # what was measured; the CLI exits 130.
            stopped_by = "interrupted"
        rows = measured_rows(self.study)
        return SearchOutcome(
            rows=rows,
            stopped_by=stopped_by,
            wall_seconds=self.clock() - t0,
            sampler=type(self.study.sampler).__name__,
            measured_this_run=measured_now,
            trials=len(self.study.trials),
        )

    def _row_without_running(self, number: int, combo: tuple[str, int]) -> dict[str, Any] | None:
        """A row for a suggestion that needs no measurement (repeat, out of bounds, dead variant)."""
        variant, batch = combo
        base = {"trial": number, "variant": variant, "batch_size": batch}
        # Order matters with other workers: ask who is running first, then read the results. A trial stores
        # its row before it leaves RUNNING, so a combination another worker is measuring or has just finished
        # is seen by one of the two reads. Results read before this trial was asked for (the loop's) would let
        # a combination finished in between pass both checks and be measured twice.
        in_flight = combo in self._in_flight(besides=number)
        measured = self._measured()
        if combo in measured:
            previous = measured[combo]
            return {**previous, "trial": number, "repeat_of_trial": previous["trial"]}
        if in_flight:
            return {**base, "status": "pruned", "repeat_of_trial": None,
                    "reason": "being measured by another worker"}
        if not self.space.allows(variant, batch):
            return {**base, "status": "pruned", "repeat_of_trial": None,
                    "reason": f"batch {batch} is above {variant}'s boundary minus headroom"}
        dead = [r for (v, _), r in measured.items() if v == variant and r["status"] in TERMINAL_VARIANT_STATUSES]
        if dead:
            first = dead[0]
            return skipped_record(first, trial=number, batch_size=batch, status="pruned",
                                  reason=f"variant {first['status']} at batch {first['batch_size']}: {first['reason']}")
        return None


# -- the bracket strategy's loop (search.strategy = "bracket") ------------------------------------------

#: Share of the full measurement time a first measurement (a screen) gets.
SCREEN_FRACTION = 0.25


def _value(row: dict[str, Any], objective: str, percentile: str) -> float | None:
    if row.get("status") != "ok":
        return None
    if objective == "latency":
        v = (row.get("latency_ms") or {}).get(percentile)
    else:
        v = row.get("throughput")
    return float(v) if v is not None else None


def _ci(row: dict[str, Any], objective: str, value: float | None) -> tuple[float, float] | None:
    ci = row.get("throughput_ci")
    tp = row.get("throughput")
    if not ci or ci[0] is None or ci[1] is None or not tp or value is None:
        return None
    if objective == "latency":  # the same relative width on the latency percentile
        lo, hi = float(ci[0]) / tp, float(ci[1]) / tp
        return (value / hi, value / lo) if lo > 0 else None
    return float(ci[0]), float(ci[1])


def tell_row(strategy: BracketSearch, row: dict[str, Any], *, objective: str, percentile: str) -> None:
    value = _value(row, objective, percentile)
    ci = _ci(row, objective, value)
    cost = row.get("search_seconds")
    status = row["status"] if row["status"] != "pruned" else "pruned"
    strategy.tell(row["variant"], int(row["batch_size"]), status=status, value=value, ci=ci,
                  feasible=bool(row.get("feasible")) if row["status"] == "ok" else False,
                  cost_seconds=float(cost) if cost is not None else None,
                  fidelity=float(row.get("fidelity") or 1.0))


def run_bracket(search: Search) -> SearchOutcome:
    """The study's loop when ``search.strategy = "bracket"``: :mod:`autotune.strategy` decides, Optuna records.

    The strategy is pure logic; this loop keeps everything the study gives the ``tpe`` loop
    (:meth:`autotune.search.Search.run`): each measurement is an Optuna trial (enqueued with the strategy's
    (variant, batch), then asked, so the study's parameters stay ``variant`` and ``batch_size`` and a resumed
    or joining run reads them as before), a heartbeat from ask to tell, stale trials failed, the row in the
    trial's user attributes, results of earlier runs and of other workers read back from the storage and
    told to the strategy before each decision, combinations in flight elsewhere left alone.

    Algorithm::

        strategy = BracketSearch(arms: the space's variants with their batch sizes and dimensions)
        loop:
            fail stale trials; tell the strategy every stored row it has not seen (this run, earlier, others)
            stop on the time budget / max_trials
            mark combinations RUNNING elsewhere as pending in the strategy
            proposal = strategy.next()        (screen | step | refine | race | explore, with a fidelity)
            none: wait while others measure, else stop ("exhausted": every combination measured and no
                  contender left to race; "converged" only if some combination was never proposable)
            enqueue (variant, batch); ask; heartbeat;
            a combination stored already and not a race -> a repeat, told as such (no measurement)
            else row = evaluate(trial, variant, batch, fidelity=...); row["fidelity"], row["search_action"]
            tell the row (COMPLETE with values and constraints, or FAIL/PRUNED), tell the strategy

    Several workers on one storage each run this loop with their own strategy, fed from the shared rows,
    so they avoid each other's in-flight combinations and learn from each other's results; what one
    proposes is what its own strategy judges best given everything stored, not a shared plan.
    """
    s = search.settings
    arms = [Arm(v, tuple(search.space.batch_sizes.get(v, ())), dict(search.specs.get(v) or {}))
            for v in search.space.variants]
    strategy = BracketSearch(arms, objective=s.objective, screen_fraction=SCREEN_FRACTION,
                             full_measure_seconds=s.measure_seconds)
    told: set[int] = set()
    t0 = search.clock()
    measured_now = 0
    stopped_by = "converged"
    pct = s.constraints.latency_percentile

    def sync() -> None:
        for number, row in sorted(stored_rows(search.study).items()):
            if number in told or "repeat_of_trial" in row:
                continue
            told.add(number)
            if row["variant"] in strategy.arms:
                tell_row(strategy, row, objective=s.objective, percentile=pct)

    try:
        search._fail_stale()
        while True:
            search._fail_stale()
            sync()
            if search.clock() - t0 >= s.time_budget_s:
                stopped_by = "time_budget"
                break
            if s.max_trials and measured_now >= s.max_trials:
                stopped_by = "max_trials"
                break
            in_flight = {c for c in search._in_flight() if c[0] is not None}
            strategy.pending = {(str(v), int(b)) for v, b in in_flight if b is not None}
            proposal = strategy.next()
            if proposal is None:
                if in_flight:  # others are measuring: their results may change what is worth doing
                    left = s.time_budget_s - (search.clock() - t0)
                    search.sleep(max(0.0, min(IN_FLIGHT_POLL_S, left)))
                    continue
                measured = search._measured()
                everything = all(c in measured for c in search.space.combos())
                stopped_by = "exhausted" if everything else "converged"
                break
            combo = (proposal.variant, proposal.batch_size)
            search.study.enqueue_trial({"variant": combo[0], "batch_size": combo[1]})
            trial = search._ask(_distributions(search, combo))
            try:
                with search._heartbeat(trial):
                    got = (trial.params["variant"], int(trial.params["batch_size"]))
                    race = proposal.action == "race" and got == combo
                    row = None if race else search._row_without_running(trial.number, got)
                    if row is not None:
                        search._tell(trial, row)
                        told.add(trial.number)
                        if "repeat_of_trial" not in row:
                            tell_row(strategy, row, objective=s.objective, percentile=pct)
                        continue
                    fidelity = proposal.fidelity if got == combo else SCREEN_FRACTION
                    start = search.clock()
                    row = search.evaluate(trial.number, *got, fidelity=fidelity)
                    row = {**row, "fidelity": round(fidelity, 4), "search_action": proposal.action
                           if got == combo else "screen", "search_seconds": round(search.clock() - start, 3)}
                    search._tell(trial, row)
                    told.add(trial.number)
            except BaseException:
                search._fail(trial)
                raise
            tell_row(strategy, row, objective=s.objective, percentile=pct)
            measured_now += 1
            if search.on_row is not None:
                search.on_row(row)
    except KeyboardInterrupt:
        stopped_by = "interrupted"
    return SearchOutcome(rows=measured_rows(search.study), stopped_by=stopped_by,
                         wall_seconds=search.clock() - t0, sampler="BracketSearch", measured_this_run=measured_now,
                         trials=len(search.study.trials),
                         extra={"strategy": "bracket", "screen_fraction": SCREEN_FRACTION})


def _distributions(search: Search, combo: tuple[str, int]) -> dict[str, Any]:
    """The space's distributions, with the proposed batch among the choices (a refinement point may not be)."""
    dists = dict(search.space.distributions())
    sizes = list(dists["batch_size"].choices)
    if combo[1] not in sizes:
        dists["batch_size"] = CategoricalDistribution(sorted({*(int(str(x)) for x in sizes), combo[1]}))
    return dists
