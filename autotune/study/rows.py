"""The rows of a study: what each finished trial carries, and reading them back (this run, earlier ones, others).

The study's storage is the one place a result lives: a trial stores its candidate row
(:mod:`autotune.candidate`) in its user attributes before it leaves RUNNING, and every process reads the
rows back from there, so a resumed run and the workers on other machines see the same results. Not every
told row is a measurement: a repeated or out-of-space suggestion is told a copy (``repeat_of_trial``) only
so the sampler learns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

#: Trial user attribute holding the candidate row (a JSON object) the trial was told.
ROW_ATTR = "row"
#: Scalar trial attributes beside the full row (ROW_ATTR): what optuna-dashboard's trial table can show
#: as columns (a JSON row is one long string there).
SUMMARY_ATTRS = ("status", "throughput", "peak_memory_bytes", "stopped_by")


def stored_rows(study: optuna.Study) -> dict[int, dict[str, Any]]:
    """Trial number → row, for every finished trial that carries one (this run and earlier)."""
    rows = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished() and ROW_ATTR in t.user_attrs:
            rows[t.number] = dict(t.user_attrs[ROW_ATTR])
    return rows


def is_repeat(row: Mapping[str, Any]) -> bool:
    """Rows told only so the sampler learns (a repeated or out-of-space suggestion), not measurements."""
    return "repeat_of_trial" in row


def measured_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per measured (or pruned) combination, in trial order: what the report lists.

    A combination measured again at a higher fidelity (the bracket strategy's racing) keeps its latest
    row, in the place of its first one.
    """
    latest: dict[tuple[Any, Any], dict[str, Any]] = {}
    for _, r in sorted(stored_rows(study).items()):
        if not is_repeat(r):
            key = (r.get("variant"), r.get("batch_size"))
            latest[key] = r  # a dict keeps the first insertion's place
    return list(latest.values())


def state_for(row: Mapping[str, Any]) -> TrialState:
    """The state a trial is told with its row: COMPLETE with values when measured ok, else PRUNED or FAIL."""
    if row["status"] == "ok":
        return TrialState.COMPLETE
    if row["status"] == "pruned":
        return TrialState.PRUNED
    return TrialState.FAIL


def planned_combo(trial: optuna.trial.FrozenTrial) -> tuple[str | None, int | None]:
    """The (variant, batch) a WAITING or RUNNING trial is for.

    A trial taken from the queue has no ``params`` until it is suggested them (a WAITING one
    never has): what it will run is in its ``fixed_params`` system attribute. Reading only
    ``params`` missed those, so every joining process enqueued the priors again, and another
    worker's just-started trial did not count as in flight.
    """
    fixed = trial.params or trial.system_attrs.get("fixed_params", {})
    return fixed.get("variant"), fixed.get("batch_size")

