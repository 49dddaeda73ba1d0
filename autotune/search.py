"""The Optuna study: search space, objectives, constraints, persistence, resume, several workers.

Why Optuna and not a grid: the space (variants × precisions × memory formats × threads ×
batch sizes) grows multiplicatively, while a tuning has a time budget. TPE (NSGA-II for the
Pareto objective) with constraint handling spends that budget where the good configurations
are, and the study's storage (SQLite by default, any RDB URL such as PostgreSQL) makes a run
resumable and lets identical machines share the work.

Algorithm::

    study = create or load (storage, name); refuse a study made for another recipe
    enqueue priors: every variant at its largest allowed batch (throughput) or its smallest
                    (latency), eager first; both for pareto
    loop until time budget spent | max_trials measured | every combination measured:
        everything unmeasured is being measured by other workers → wait for them, ask nothing
        trial = study.ask({variant: categorical, batch_size: categorical})
        (v, b) measured before, here or by another worker → tell the stored result again
               (the sampler learns, nothing is re-run); after a few repeats enqueue an
               unmeasured combination instead
        b above v's boundary, or v already failed/rejected → tell PRUNED with the reason
        else row = evaluate(v, b); tell COMPLETE(objective values, constraint values)
             or FAIL (oom / rejected / failed), the row stored in the trial's user attributes
    rows = every trial's row (this run and earlier ones), in trial order
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

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


def make_storage(url: str) -> optuna.storages.BaseStorage | str:
    """The study's storage, with connections checked before use (``pool_pre_ping``).

    A server connection can die while a candidate is being measured for minutes: a server restart, an
    idle-session timeout, a firewall dropping idle TCP between machines. Unchecked, the next write (the
    measurement's row) raised StorageInternalError, the run died with a traceback and the trial stayed
    RUNNING for good. Optuna turns the check on only for MySQL.
    """
    if url.startswith("redis"):  # not an RDB URL: leave the error message to Optuna
        return url
    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def open_study(settings: SearchSettings, *, recipe_data: Mapping[str, Any] | None = None) -> optuna.Study:
    """Create or resume the study; refuse one that was made for a different workload."""
    try:
        study = optuna.create_study(
            storage=make_storage(settings.storage),
            study_name=settings.study_name,
            directions=directions(settings.objective),
            sampler=make_sampler(settings.objective, seed=settings.seed),
            load_if_exists=True,
        )
    except ValueError as exc:  # e.g. directions differ from the stored study
        raise InputError(f"--study {settings.study_name}: cannot use the stored study: {exc}") from None
    stored = study.user_attrs.get("recipe_fingerprint")
    if stored is None:
        study.set_user_attr("recipe_fingerprint", settings.recipe_fingerprint)
        study.set_user_attr("objective", settings.objective)
        if recipe_data is not None:
            study.set_user_attr("recipe", dict(recipe_data))
    elif stored != settings.recipe_fingerprint:
        raise InputError(
            f"--study {settings.study_name}: the study in {settings.storage} was made for another model, inputs "
            "or device; pick another --study NAME or --out directory"
        )
    return study


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
        self.study = open_study(settings, recipe_data=recipe_data)
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
            (t.params.get("variant"), t.params.get("batch_size"))
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number != besides
        }

    def _enqueue_priors(self, measured: Mapping[tuple[str, int], Any]) -> None:
        # A WAITING trial has no params yet: what it will run is in its "fixed_params" system attribute.
        # Reading ``params`` found nothing, so every run and worker joining a study enqueued the priors again.
        waiting = set()
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            fixed = t.system_attrs.get("fixed_params", t.params)
            waiting.add((fixed.get("variant"), fixed.get("batch_size")))
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
        except optuna.exceptions.UpdateFinishedTrialError:
            # SQLite has no row locks: two workers can pop the same enqueued trial. The other one
            # finished it first; its row stands and this measurement is dropped.
            pass

    def _tell_unguarded(self, trial: optuna.Trial, row: dict[str, Any]) -> None:
        trial.set_user_attr(ROW_ATTR, row)
        state = _state_for(row)
        if state == TrialState.COMPLETE:
            for name, value in constraint_values(row, self.settings.constraints).items():
                trial.set_constraint(name, value)
            values = objective_values(row, objective=self.settings.objective, constraints=self.settings.constraints)
            self.study.tell(trial, values)
        else:
            self.study.tell(trial, state=state)

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        t0 = self.clock()
        measured = self._measured()
        self._enqueue_priors(measured)
        measured_now = 0
        repeats = 0
        stopped_by = "exhausted"
        distributions = self.space.distributions()
        while True:
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
                # making the sampler slower. Wait for them instead.
                left = self.settings.time_budget_s - (self.clock() - t0)
                self.sleep(max(0.0, min(IN_FLIGHT_POLL_S, left)))
                continue
            trial = self.study.ask(distributions)
            combo = (trial.params["variant"], int(trial.params["batch_size"]))
            row = self._row_without_running(trial.number, combo)
            if row is not None:
                self._tell(trial, row)
                repeats += 1
                if repeats >= MAX_REPEATS and self._enqueue_unmeasured(measured):
                    repeats = 0
                continue
            repeats = 0
            try:
                row = self.evaluate(trial.number, *combo)
            except KeyboardInterrupt:
                self.study.tell(trial, state=TrialState.FAIL)
                stopped_by = "interrupted"
                break
            measured_now += 1
            self._tell(trial, row)
            if self.on_row is not None:
                self.on_row(row)
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
