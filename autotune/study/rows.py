"""The rows of a study: what each finished trial carries, and reading them back (this run, earlier ones, others).

The study's storage is the one place a result lives: a trial stores its candidate row
(:mod:`autotune.candidate`) in its user attributes before it leaves RUNNING, and every process reads the
rows back from there, so a resumed run and the workers on other machines see the same results. Not every
told row is a measurement: a repeated or out-of-space suggestion is told a copy (``repeat_of_trial``) only
so the sampler learns.

A measured row carries its measurement record (``measurement``: the raw samples, encoded, a few to some
hundred kB). It is stored beside the row rather than in it (:func:`row_attrs`), as JSON text cut into
pieces of :data:`ATTR_PIECE` characters: Optuna keeps each user attribute as JSON text in one ``TEXT``
column, unbounded in SQLite (1e9 bytes) and PostgreSQL (1 GB), but 65,535 bytes in MySQL, where a longer
value fails the write (strict mode) or is cut (otherwise). The row itself stays small, and readable as a
column in optuna-dashboard.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

#: Trial user attribute holding the candidate row (a JSON object) the trial was told.
ROW_ATTR = "row"
#: Scalar trial attributes beside the full row (ROW_ATTR): what optuna-dashboard's trial table can show
#: as columns (a JSON row is one long string there).
SUMMARY_ATTRS = ("status", "throughput", "peak_memory_bytes", "stopped_by")
#: Prefix of the trial user attributes holding a row's measurement record: ``measurement.0``, ``measurement.1``...
MEASUREMENT_ATTR = "measurement"
#: Characters of JSON text per piece: ASCII, and Optuna's JSON encoding of the piece at most doubles it
#: (escaped quotes), so a piece stays under MySQL's 65,535-byte TEXT.
ATTR_PIECE = 32_000


def row_attrs(row: Mapping[str, Any]) -> dict[str, Any]:
    """The user attributes a told row is stored as, in the order to write them.

    The measurement record's pieces come first and the row (without its record) last: a row present means
    its pieces are too, even if the process died between the writes. A repeat (a copy of a stored row, told
    only so the sampler learns) stores no record; its original has it.
    """
    plain = dict(row)
    record = plain.pop(MEASUREMENT_ATTR, None)
    attrs: dict[str, Any] = {}
    if record is not None and not is_repeat(row):
        text = json.dumps(record, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        for index, start in enumerate(range(0, len(text), ATTR_PIECE)):
            attrs[f"{MEASUREMENT_ATTR}.{index}"] = text[start:start + ATTR_PIECE]
    attrs[ROW_ATTR] = plain
    return attrs


def row_from_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The row :func:`row_attrs` stored (``attrs`` holds ROW_ATTR), its measurement record joined back.

    A record whose pieces do not join into JSON (a study edited by hand) is left out: the row's own
    statistics stand, only the raw samples are missing, as in a row of a study from before they were stored.
    """
    row = dict(attrs[ROW_ATTR])
    pieces: list[Any] = []
    while f"{MEASUREMENT_ATTR}.{len(pieces)}" in attrs:
        pieces.append(attrs[f"{MEASUREMENT_ATTR}.{len(pieces)}"])
    if pieces and all(isinstance(p, str) for p in pieces):
        try:
            row[MEASUREMENT_ATTR] = json.loads("".join(pieces))
        except ValueError:
            pass
    return row


def stored_rows(study: optuna.Study) -> dict[int, dict[str, Any]]:
    """Trial number → row, for every finished trial that carries one (this run and earlier)."""
    rows = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished() and ROW_ATTR in t.user_attrs:
            rows[t.number] = row_from_attrs(t.user_attrs)
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

