"""The Optuna study: search space, objectives, constraints, persistence, resume, several workers.

Why Optuna and not a grid: the space (variants × precisions × memory formats × threads ×
batch sizes) grows multiplicatively, while a tuning has a time budget. TPE (NSGA-II for the
Pareto objective) with constraint handling spends that budget where the good configurations
are, and the study's storage (SQLite by default, any RDB URL such as PostgreSQL) makes a run
resumable and lets identical machines share the work.

Algorithm::

    study = create or load (storage, name); refuse a study made for another recipe
    fail stale trials (a process that died while measuring: its heartbeat stopped)
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
import hashlib
import json
import random
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.distributions import CategoricalDistribution
from optuna.exceptions import ExperimentalWarning, StorageInternalError, UpdateFinishedTrialError
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from autotune.candidate import constraint_values, directions, objective_values, skipped_record
from autotune.errors import InputError
from autotune.recipe import Constraints

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
    recipe_fingerprint: str
    time_budget_s: float
    max_trials: int = 0
    seed: int = 0


@dataclass
class SearchOutcome:
    rows: list[dict[str, Any]]
    stopped_by: str
    wall_seconds: float
    sampler: str
    measured_this_run: int
    trials: int
    extra: dict[str, Any] = field(default_factory=dict)


Evaluate = Callable[[int, str, int], dict[str, Any]]


def recipe_fingerprint(recipe_data: Mapping[str, Any]) -> str:
    """Identity of what a study measures: model, inputs, device (not budgets or search knobs)."""
    key = {k: recipe_data[k] for k in ("model", "inputs", "device") if k in recipe_data}
    key["model"] = {k: v for k, v in dict(key.get("model", {})).items() if k != "base_dir"}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def make_sampler(objective: str, *, seed: int) -> optuna.samplers.BaseSampler:
    """TPE for one objective, NSGA-II for the Pareto pair; both honour ``Trial.set_constraint`` values."""
    if objective == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=5)


def display_url(url: str) -> str:
    """``url`` with its password masked, for messages and reports (a storage URL may carry credentials).

    A string SQLAlchemy cannot parse is still shown, with anything that looks like ``user:password@``
    masked: the message about a bad URL must name it, and must not leak what it contains.
    """
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError, TypeError):
        return re.sub(r"(://[^/@:]*:)[^@/]*@", r"\1***@", str(url))


def _scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message) without the password of ``url``, should the driver quote it.

    Only whole occurrences are masked (not inside a longer word): a short password must not mangle the
    rest of the message, e.g. "p" in "pg8000".
    """
    try:
        password = make_url(url).password
    except (sqlalchemy.exc.ArgumentError, ValueError, TypeError):
        return text
    if not password:
        return text
    raw = re.match(r"[^:]*://[^/@:]*:([^@/]*)@", url)  # as written in the URL, maybe %-encoded
    for secret in {str(password), raw[1] if raw else ""} - {""}:
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    return text


URL_EXAMPLES = "sqlite:///path/study.db or postgresql+psycopg2://user:password@host:5432/db"


def _storage_problem(exc: BaseException) -> str:
    """One line on why a storage could not be opened, from the driver's own message where there is one."""
    if isinstance(exc, sqlalchemy.exc.NoSuchModuleError):
        reason = f"unknown database kind ({exc}); expected e.g. {URL_EXAMPLES}"
    elif isinstance(exc, sqlalchemy.exc.ArgumentError | ValueError):
        reason = f"not a valid database URL ({exc}); expected e.g. {URL_EXAMPLES}"
    elif isinstance(exc, ImportError):
        # Optuna re-raises the driver's ModuleNotFoundError as a generic ImportError; the cause names the module.
        cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
        reason = f"the database driver is not installed ({cause}); install it or name an installed driver in the URL"
    else:
        orig = getattr(exc, "orig", None) or getattr(exc.__cause__, "orig", None) or exc.__cause__ or exc
        reason = str(orig)
    return " ".join(line.strip() for line in reason.splitlines() if line.strip() and "sqlalche.me" not in line)


def _storage_error(url: str, exc: BaseException) -> InputError:
    return InputError(f"--storage {display_url(url)}: cannot open the storage: {_scrub(_storage_problem(exc), url)}")


#: What "cannot open the storage" looks like: a URL SQLAlchemy cannot parse or whose dialect it does not know
#: (ArgumentError, ValueError for e.g. a non-numeric port), a missing driver module (ImportError), a server
#: that is unreachable or refuses the login, a file that cannot be opened (OperationalError), a schema made by
#: an incompatible Optuna (RuntimeError from its version check).
_OPEN_ERRORS = (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.OperationalError, ImportError, ValueError, RuntimeError)


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

    Raises :class:`InputError` naming ``--storage`` (password masked) when the storage cannot be opened.
    """
    if url.startswith("redis"):
        raise InputError(f"--storage {display_url(url)}: Redis storage was removed from Optuna; use an RDB URL "
                         f"such as {URL_EXAMPLES}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeat_interval is "experimental" since 2.9
            return optuna.storages.RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=HEARTBEAT_GRACE_S,
                engine_kwargs={"pool_pre_ping": True},
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
    stored = study.user_attrs.get("recipe_fingerprint")
    if stored is None:
        study.set_user_attr("recipe_fingerprint", settings.recipe_fingerprint)
        study.set_user_attr("objective", settings.objective)
        if recipe_data is not None:
            study.set_user_attr("recipe", dict(recipe_data))
    elif stored != settings.recipe_fingerprint:
        raise InputError(
            f"--study {settings.study_name}: the study in {display_url(settings.storage)} was made for another "
            "model, inputs or device; pick another --study NAME or --out directory"
        )
    return study


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


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail the RUNNING trials whose heartbeat stopped: their process is dead (see :func:`make_storage`).

    The trial becomes FAIL without a row, so its combination counts neither as measured nor as in flight,
    and is measured again. Two processes failing the same trial at once is handled by Optuna.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


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
    """One row per measured (or pruned) combination, in trial order: what the report lists."""
    return [r for _, r in sorted(stored_rows(study).items()) if not _is_repeat(r)]


def _state_for(row: Mapping[str, Any]) -> TrialState:
    if row["status"] == "ok":
        return TrialState.COMPLETE
    if row["status"] == "pruned":
        return TrialState.PRUNED
    return TrialState.FAIL


def _planned_combo(trial: optuna.trial.FrozenTrial) -> tuple[str, int]:
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
    ) -> None:
        self.space = space
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

    def _in_flight(self, *, besides: int | None = None) -> set[tuple[str, int]]:
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
        t0 = self.clock()
        fail_stale_trials(self.study)
        measured = self._measured()
        self._enqueue_priors(measured)
        measured_now = 0
        repeats = 0
        stopped_by = "exhausted"
        distributions = self.space.distributions()
        try:
            while True:
                fail_stale_trials(self.study)
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
