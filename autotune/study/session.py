"""One process's session on a shared study: asking a trial, telling it a row, what is measured and in flight.

Several processes (a resumed run, ``autotune worker`` on other machines) can work on one study at once,
and any of them can die at any moment. So nothing is kept in memory that the storage does not also hold:
what is measured is read back from the stored rows (:mod:`autotune.study.rows`) before each decision, a
combination is "in flight" while a RUNNING trial (here or elsewhere) is planned for it, and a trial is
never left RUNNING by this process: it beats from ask to tell (:mod:`autotune.study.heartbeat`) and is told
FAIL without a row when anything goes wrong in between, so its combination is measured again later.

A suggestion that needs no measurement (measured already, being measured elsewhere, above the variant's
boundary, a variant whose build failed) is told a row that says so (:meth:`StudySession.row_without_running`)
instead of being run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from autotune.candidate import constraint_values, objective_values, skipped_record
from autotune.study.heartbeat import Heartbeat, fail_stale_trials, quiet_heartbeat, start_heartbeats_of_beatless_trials
from autotune.study.rows import SUMMARY_ATTRS, is_repeat, planned_combo, row_attrs, state_for, stored_rows
from autotune.study.space import Evaluate, SearchSettings, SearchSpace
from autotune.study.storage import make_storage, open_study

#: A variant whose build failed or whose outputs were wrong is not tried at other batch sizes.
TERMINAL_VARIANT_STATUSES = ("failed", "rejected")
#: Seconds between looks at the study while every unmeasured combination is being measured elsewhere.
IN_FLIGHT_POLL_S = 1.0


class StudySession:
    """One process's part in a study: the study opened (or resumed, or joined), the trials it asks and tells.

    The loops (:class:`~autotune.study.loop.Search` for ``tpe``, :func:`~autotune.study.bracket_loop.run_bracket`
    for ``bracket``) decide what to measure; this is what both do with a trial once decided, so resume,
    several workers and heartbeats behave the same whichever strategy runs.
    """

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

    # -- bookkeeping -------------------------------------------------------------------
    def measured(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Latest row per combination, from storage (sees other workers' results too)."""
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for _, row in sorted(stored_rows(self.study).items()):
            if not is_repeat(row):
                out[(row["variant"], int(row["batch_size"]))] = row
        return out

    def in_flight(self, *, besides: int | None = None) -> set[tuple[str | None, int | None]]:
        """Combinations another trial (here or on another machine) is measuring right now."""
        return {
            planned_combo(t)
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number != besides
        }

    # -- one trial, from ask to tell ------------------------------------------------------
    def tell(self, trial: optuna.Trial, row: dict[str, Any]) -> None:
        """Store ``row`` in ``trial`` and tell it: COMPLETE with objective and constraint values, else PRUNED/FAIL."""
        try:
            self._tell_unguarded(trial, row)
        except UpdateFinishedTrialError:
            # SQLite has no row locks: two workers can pop the same enqueued trial. The other one
            # finished it first; this measurement is dropped (``skip_if_finished`` below covers the other
            # side of the race: finished between our row write and our tell, when our row replaced its
            # equivalent one). The same happens when this process was stalled past the heartbeat grace
            # (suspended, say) and another one failed the trial as stale: that one measures it again.
            pass

    def fail(self, trial: optuna.Trial) -> None:
        """Tell ``trial`` FAIL without a row, best effort, while an exception or an interrupt propagates.

        Without a row the combination counts as neither measured nor in flight, so it is measured again
        later. Should the storage itself be what failed, this is skipped: the trial's heartbeat stops with
        this process and other processes fail it after the grace period.
        """
        with contextlib.suppress(Exception):
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)

    def ask(self, distributions: Mapping[str, CategoricalDistribution]) -> optuna.Trial:
        """A new trial (the sampler's suggestion, or the next enqueued one) over ``distributions``."""
        with quiet_heartbeat():
            return self.study.ask(dict(distributions))

    def fail_stale(self) -> None:
        """Fail the stale RUNNING trials, then start the grace period of those that never had a heartbeat."""
        fail_stale_trials(self.study)
        start_heartbeats_of_beatless_trials(self._storage, self._study_id)

    def heartbeat(self, trial: optuna.Trial) -> Heartbeat:
        """The context manager that keeps ``trial`` beating while it is measured."""
        trial_id = self._storage.get_trial_id_from_study_id_trial_number(self._study_id, trial.number)
        return Heartbeat(self._storage, trial_id)

    def _tell_unguarded(self, trial: optuna.Trial, row: dict[str, Any]) -> None:
        for key, value in row_attrs(row).items():
            trial.set_user_attr(key, value)
        for key in SUMMARY_ATTRS:
            if row.get(key) is not None:
                trial.set_user_attr(key, row[key])
        p = self.settings.constraints.latency_percentile
        if (row.get("latency_ms") or {}).get(p) is not None:
            trial.set_user_attr(f"{p}_ms", row["latency_ms"][p])
        state = state_for(row)
        if state == TrialState.COMPLETE:
            for name, value in constraint_values(row, self.settings.constraints).items():
                trial.set_constraint(name, value)
            values = objective_values(row, objective=self.settings.objective, constraints=self.settings.constraints)
            self.study.tell(trial, values, skip_if_finished=True)
        else:
            self.study.tell(trial, state=state, skip_if_finished=True)

    def row_without_running(self, number: int, combo: tuple[str, int]) -> dict[str, Any] | None:
        """A row for a suggestion that needs no measurement (repeat, out of bounds, dead variant)."""
        variant, batch = combo
        base = {"trial": number, "variant": variant, "batch_size": batch}
        # Order matters with other workers: ask who is running first, then read the results. A trial stores
        # its row before it leaves RUNNING, so a combination another worker is measuring or has just finished
        # is seen by one of the two reads. Results read before this trial was asked for (the loop's) would let
        # a combination finished in between pass both checks and be measured twice.
        in_flight = combo in self.in_flight(besides=number)
        measured = self.measured()
        if combo in measured:
            previous = measured[combo]
            return {**previous, "trial": number, "repeat_of_trial": previous["trial"]}
        if in_flight:
            return {**base, "status": "pruned", "repeat_of_trial": None,
                    "reason": "being measured by another worker"}
        if not self.space.allows(variant, batch):
            return {**base, "status": "pruned", "repeat_of_trial": None,
                    "reason": f"batch {batch} is above {variant}'s boundary minus headroom"}
        dead = [r for (v, _), r in measured.items() if v == variant and r["status"] in TERMINAL_VARIANT_STATUSES
                and (not r.get("batch_specific") or batch > 1)]  # an export specialised to its batch: 1 is left
        if dead:
            first = dead[0]
            return skipped_record(first, trial=number, batch_size=batch, status="pruned",
                                  reason=f"variant {first['status']} at batch {first['batch_size']}: {first['reason']}")
        return None
