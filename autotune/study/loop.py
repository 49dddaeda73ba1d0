"""The search's loop: :class:`Search` runs the ``tpe`` strategy (Optuna's sampler proposes, the loop measures).

TPE (NSGA-II for the Pareto objective) sees only the two categoricals of the space; the loop around it
adds what a sampler cannot know: priors (every variant at the batch the objective favours) first, no
re-measurement of a combination measured before (a repeat is told the stored result so the sampler
learns), no measurement of a combination another worker is measuring, no batch above a variant's boundary,
no second try of a variant whose build failed. The per-trial mechanics (heartbeat, failure, the row) are
:class:`~autotune.study.session.StudySession`'s, which :class:`Search` extends.

Algorithm::

    study = create or load (storage, name); refuse one whose fingerprint differs (saying which parts)
    fail stale trials (a process that died while measuring: its heartbeat stopped, or it never beat)
    priors: every variant at its largest allowed batch (throughput; the probes' throughput peak instead
            where the batch-boundary search saw one: SearchSpace.preferred) or its smallest (latency); both
            for pareto; breadth first, a tier at a time (SearchSpace.screen_tiers: every runtime plain, then
            one precision, format or environment at a time, then combinations), a tier's variants ordered by
            how their runtime ranks so far (its best row), then by the kind of their modifier (a precision
            first, a process environment last: space.modifier_kind), the recipe's order among equals
    loop until time budget spent | max_trials measured | every combination measured:
        fail stale trials, so what a dead process was measuring is measured again
        everything unmeasured is being measured by other workers → wait for them, ask nothing
        nothing enqueued is waiting → the next tier of priors with a combination neither measured nor in
            flight; with none left, climb: enqueue the leader's unmeasured neighbours in its batch grid
            (the next smaller and the next larger batch; throughput and latency objectives)
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

Why the climb: throughput against batch size rises, peaks and (on a CPU, caches) falls again, but TPE sees
``batch_size`` as an unordered categorical; with time for a dozen trials it spent them on other corners (the
timm CNN: onnx@1, onnx@4, onnx@1024 after the prior onnx@171, while onnx@64 was 10% faster). Climbing from the
leader to a local optimum of its grid takes a few trials (one per grid step) and is done before TPE explores.

Liveness (why a heartbeat runs from ask to tell, and how a dead process's trial is measured again):
:mod:`autotune.study.heartbeat`.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.candidate import best_row, pessimistic_score
from autotune.core.budget import worth_starting
from autotune.study.bracket_loop import run_bracket
from autotune.study.rows import measured_rows
from autotune.study.session import IN_FLIGHT_POLL_S, StudySession
from autotune.study.space import SearchOutcome, modifier_kind, plain_name
from autotune.study.storage import let_go_of_interrupted_frames

#: Repeated suggestions tolerated before an unmeasured combination is enqueued by hand.
MAX_REPEATS = 3


class Search(StudySession):
    """Runs the ask/tell loop over a :class:`~autotune.study.space.SearchSpace` with a caller-supplied evaluator.

    ``search.strategy = "tpe"`` (the default) runs the loop of the module docstring; ``"bracket"`` hands the
    session to :func:`~autotune.study.bracket_loop.run_bracket`.
    """

    @functools.cached_property
    def _rng(self) -> random.Random:
        """Picks the unmeasured combination enqueued after repeats (seeded: a run is reproducible)."""
        return random.Random(self.settings.seed)

    # -- the tpe strategy's priors and repeats ----------------------------------------------
    def _priors_of(self, v: str) -> list[tuple[str, int]]:
        sizes = self.space.batch_sizes.get(v, ())
        if not sizes:
            return []
        picks = []
        if self.settings.objective in ("throughput", "pareto"):
            picks.append((v, self.space.throughput_start(v)))
        if self.settings.objective in ("latency", "pareto"):
            picks.append((v, min(sizes)))
        return picks

    def _enqueue_priors(self, measured: Mapping[tuple[str, int], Mapping[str, Any]]) -> bool:
        """Enqueue the next tier of priors (module docstring) once nothing enqueued is waiting; False when every
        prior is measured or in flight (the climb's turn).

        Why a tier at a time, ranked: with the priors enqueued at once in the recipe's order, an EfficientNet whose
        onnx ran 3.8x eager screened eager's five precisions and environments after the plain runtimes, and its
        92-s budget ended before onnx or openvino got a modifier (session 39). What the plain screens showed
        decides whose modifiers go first."""
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return True
        busy = self.in_flight()
        for tier in self.space.screen_tiers():
            todo = [c for v in tier for c in self._priors_of(v) if c not in measured and c not in busy]
            if not todo:
                continue
            rank = self._runtime_rank(measured)
            for combo in sorted(dict.fromkeys(todo),
                                key=lambda c: (rank.get(plain_name(c[0]), float("inf")), modifier_kind(c[0]))):
                self.study.enqueue_trial({"variant": combo[0], "batch_size": combo[1]})
            return True
        return False

    def _runtime_rank(self, measured: Mapping[tuple[str, int], Mapping[str, Any]]) -> dict[str, float]:
        """Per runtime (:func:`plain_name`), the best :func:`pessimistic_score` of its ok, feasible rows so far
        (lower is better); a runtime without one is absent."""
        rank: dict[str, float] = {}
        for row in measured.values():
            if row.get("status") != "ok" or not row.get("feasible"):
                continue
            score = pessimistic_score(row, objective=self.settings.objective,
                                      latency_percentile=self.settings.constraints.latency_percentile)
            name = plain_name(str(row["variant"]))
            rank[name] = min(score, rank.get(name, float("inf")))
        return rank

    def _enqueue_neighbours(self, measured: Mapping[tuple[str, int], Mapping[str, Any]]) -> None:
        """Enqueue the leader's unmeasured grid neighbours (the climb of the module docstring).

        Only while nothing enqueued is waiting (the priors first, then one step at a time, so each step
        starts from the leader the last one left), and not for the Pareto objective (no single leader).
        """
        if self.settings.objective not in ("throughput", "latency"):
            return
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        best = best_row(list(measured.values()), objective=self.settings.objective,
                        constraints=self.settings.constraints)
        if best is None:
            return
        variant, batch = str(best["variant"]), int(best["batch_size"])
        sizes = sorted(self.space.batch_sizes.get(variant, ()))
        if batch not in sizes:
            return
        i = sizes.index(batch)
        busy = self.in_flight()
        todo = [(variant, sizes[j]) for j in (i - 1, i + 1)
                if 0 <= j < len(sizes) and (variant, sizes[j]) not in measured and (variant, sizes[j]) not in busy]
        for v, b in todo:
            self.study.enqueue_trial({"variant": v, "batch_size": b})

    def _enqueue_unmeasured(self, measured: Mapping[tuple[str, int], Any]) -> bool:
        todo = [c for c in self.space.combos() if c not in measured and c not in self.in_flight()]
        if not todo:
            return False
        v, b = self._rng.choice(todo)
        self.study.enqueue_trial({"variant": v, "batch_size": b})
        return True

    def _handle(self, trial: optuna.Trial) -> dict[str, Any] | None:
        """Tell ``trial`` its row: measured (returned) or one that needs no measurement (None)."""
        combo = (trial.params["variant"], int(trial.params["batch_size"]))
        row = self.row_without_running(trial.number, combo)
        if row is not None:
            self.tell(trial, row)
            return None
        row = self.evaluate(trial.number, *combo)
        self.tell(trial, row)
        return row

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        if self.settings.strategy == "bracket":
            return run_bracket(self)
        t0 = self.clock()
        self.fail_stale()
        # the first tier now, even with no time to measure it: another worker sees what the study starts with
        self._enqueue_priors(self.measured())
        measured_now = 0
        spent: list[float] = []  # seconds per candidate measured by this run (worth_starting)
        repeats = 0
        stopped_by = "exhausted"
        distributions = self.space.distributions()
        try:
            while True:
                self.fail_stale()
                measured = self.measured()
                remaining = [c for c in self.space.combos() if c not in measured]
                if not remaining:
                    stopped_by = "exhausted"
                    break
                if not worth_starting(self.settings.time_budget_s - (self.clock() - t0), spent):
                    stopped_by = "time_budget"
                    break
                if self.settings.max_trials and measured_now >= self.settings.max_trials:
                    stopped_by = "max_trials"
                    break
                if set(remaining) <= self.in_flight():
                    # Everything left is being measured by other workers. Asking now could only yield repeats,
                    # told at full speed: hundreds of bookkeeping trials per minute in the shared study, each
                    # making the sampler slower. Wait for them instead (or for their heartbeats to go stale).
                    left = self.settings.time_budget_s - (self.clock() - t0)
                    self.sleep(max(0.0, min(IN_FLIGHT_POLL_S, left)))
                    continue
                if not self._enqueue_priors(measured):
                    self._enqueue_neighbours(measured)
                trial = self.ask(distributions)
                began = self.clock()
                try:
                    with self.heartbeat(trial):
                        row = self._handle(trial)
                except BaseException as exc:
                    # Whatever ``evaluate`` (or the storage) raised goes on up, Ctrl-C included, but the trial
                    # must not stay RUNNING.
                    let_go_of_interrupted_frames(exc)
                    self.fail(trial)
                    raise
                if row is None:
                    repeats += 1
                    if repeats >= MAX_REPEATS and self._enqueue_unmeasured(measured):
                        repeats = 0
                    continue
                repeats = 0
                measured_now += 1
                spent.append(self.clock() - began)
                if self.on_row is not None:
                    self.on_row(row)
        except KeyboardInterrupt as exc:
            # Ctrl-C anywhere in the loop (a measurement, ask, the wait for other workers): stop and report
            # what was measured; the CLI exits 130.
            let_go_of_interrupted_frames(exc)
            stopped_by = "interrupted"
        rows = measured_rows(self.study)
        return SearchOutcome(
            rows=rows,
            stopped_by=stopped_by,
            wall_seconds=self.clock() - t0,
            sampler=type(self.study.sampler).__name__,
            measured_this_run=measured_now,
            trials=len(self.study.trials),
            candidate_seconds=tuple(spent),
        )
