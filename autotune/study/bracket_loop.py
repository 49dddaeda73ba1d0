"""The study's loop when ``search.strategy = "bracket"``: :mod:`autotune.study.bracket` decides, Optuna records.

The bracket algorithm is pure (it never sees a trial or a storage); this module is the glue that runs it on
a :class:`~autotune.study.session.StudySession`, so the bracket strategy gets everything the study gives the
``tpe`` loop (resume, several workers, heartbeats). :func:`run_bracket` holds the loop's pseudo-code.
"""

from __future__ import annotations

from typing import Any

from optuna.distributions import CategoricalDistribution

from autotune.core.budget import worth_starting
from autotune.study.bracket import Arm, BracketSearch
from autotune.study.rows import measured_rows, stored_rows
from autotune.study.session import IN_FLIGHT_POLL_S, StudySession
from autotune.study.space import SearchOutcome
from autotune.study.storage import let_go_of_interrupted_frames

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
                  fidelity=float(row.get("fidelity") or 1.0), batch_specific=bool(row.get("batch_specific")))


def run_bracket(search: StudySession) -> SearchOutcome:
    """The study's loop when ``search.strategy = "bracket"``: :mod:`autotune.study.bracket` decides, Optuna records.

    The strategy is pure logic; this loop keeps everything the study gives the ``tpe`` loop
    (:meth:`autotune.study.loop.Search.run`): each measurement is an Optuna trial (enqueued with the strategy's
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
    arms = [Arm(v, tuple(search.space.batch_sizes.get(v, ())), dict(search.specs.get(v) or {}),
                preferred=search.space.preferred.get(v))
            for v in search.space.variants]
    strategy = BracketSearch(arms, objective=s.objective, screen_fraction=SCREEN_FRACTION,
                             full_measure_seconds=s.measure_seconds)
    told: set[int] = set()
    t0 = search.clock()
    measured_now = 0
    spent: list[float] = []  # seconds per candidate measured by this run (worth_starting)
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
        search.fail_stale()
        while True:
            search.fail_stale()
            sync()
            if not worth_starting(s.time_budget_s - (search.clock() - t0), spent):
                stopped_by = "time_budget"
                break
            if s.max_trials and measured_now >= s.max_trials:
                stopped_by = "max_trials"
                break
            in_flight = {c for c in search.in_flight() if c[0] is not None}
            strategy.pending = {(str(v), int(b)) for v, b in in_flight if b is not None}
            proposal = strategy.next()
            if proposal is None:
                if in_flight:  # others are measuring: their results may change what is worth doing
                    left = s.time_budget_s - (search.clock() - t0)
                    search.sleep(max(0.0, min(IN_FLIGHT_POLL_S, left)))
                    continue
                measured = search.measured()
                everything = all(c in measured for c in search.space.combos())
                stopped_by = "exhausted" if everything else "converged"
                break
            combo = (proposal.variant, proposal.batch_size)
            search.study.enqueue_trial({"variant": combo[0], "batch_size": combo[1]})
            trial = search.ask(_distributions(search, combo))
            try:
                with search.heartbeat(trial):
                    got = (trial.params["variant"], int(trial.params["batch_size"]))
                    race = proposal.action == "race" and got == combo
                    row = None if race else search.row_without_running(trial.number, got)
                    if row is not None:
                        search.tell(trial, row)
                        told.add(trial.number)
                        if "repeat_of_trial" not in row:
                            tell_row(strategy, row, objective=s.objective, percentile=pct)
                        continue
                    fidelity = proposal.fidelity if got == combo else SCREEN_FRACTION
                    start = search.clock()
                    row = search.evaluate(trial.number, *got, fidelity=fidelity)
                    spent.append(search.clock() - start)
                    row = {**row, "fidelity": round(fidelity, 4), "search_action": proposal.action
                           if got == combo else "screen", "search_seconds": round(search.clock() - start, 3)}
                    search.tell(trial, row)
                    told.add(trial.number)
            except BaseException as exc:
                let_go_of_interrupted_frames(exc)  # a transaction an interrupt left open (storage.py)
                search.fail(trial)
                raise
            tell_row(strategy, row, objective=s.objective, percentile=pct)
            measured_now += 1
            if search.on_row is not None:
                search.on_row(row)
    except KeyboardInterrupt as exc:
        let_go_of_interrupted_frames(exc)
        stopped_by = "interrupted"
    return SearchOutcome(rows=measured_rows(search.study), stopped_by=stopped_by,
                         wall_seconds=search.clock() - t0, sampler="BracketSearch", measured_this_run=measured_now,
                         trials=len(search.study.trials),
                         extra={"strategy": "bracket", "screen_fraction": SCREEN_FRACTION},
                         candidate_seconds=tuple(spent))


def _distributions(search: StudySession, combo: tuple[str, int]) -> dict[str, Any]:
    """The space's distributions, with the proposed batch among the choices (a refinement point may not be)."""
    dists = dict(search.space.distributions())
    sizes = list(dists["batch_size"].choices)
    if combo[1] not in sizes:
        dists["batch_size"] = CategoricalDistribution(sorted({*(int(str(x)) for x in sizes), combo[1]}))
    return dists
