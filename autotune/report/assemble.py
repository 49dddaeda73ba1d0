"""The document of a run: assembled when a run ends, and again from the stored study.

``autotune run`` builds it once from what it measured (:func:`build_document`, called by
:mod:`autotune.tuner`); ``autotune report DIR`` rebuilds it from the study, which also holds the trials of
every worker that joined (:func:`rerender`). One module so both ways pick the recommendation, the Pareto
front and the stop counts by the same rules. No torch import.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotune.candidate import best_row, pareto_front
from autotune.core.recipe import Recipe
from autotune.errors import InputError
from autotune.report.schema import SCHEMA_VERSION
from autotune.study import SearchOutcome, display_url, load_existing_study, sqlite_file, storage_errors
from autotune.validation import ValidatedWorkload
from autotune.version import __version__

if TYPE_CHECKING:
    from autotune.candidate import CandidateRow
    from autotune.report.types import (
        BoundarySection,
        DataSection,
        RecipeSection,
        Recommendation,
        ReportDocument,
        WorkerStats,
    )

#: Study attribute holding the last showdown (written by ``autotune run``, read back by ``autotune report``).
SHOWDOWN_ATTR = "showdown"


def rerender(out_dir: Path, *, storage: str | None = None) -> ReportDocument:
    """``autotune report DIR``: rebuild the document from the stored study (all workers' trials).

    The study is read from ``storage`` (``--storage``) or from ``DIR/study.db``, never from the URL report.json
    names (:func:`report_storage`). A storage that fails while it is read, or a DIR that cannot be written, is an
    :class:`InputError`.
    """
    with storage_errors(storage, out_dir=out_dir, out_label="DIR"):
        return _rerender(out_dir, storage=storage)


def report_storage(out_dir: Path, recorded: str | None, explicit: str | None) -> str | None:
    """The storage ``autotune report DIR`` reads: ``explicit`` (``--storage``), else ``DIR/study.db``; None when
    the directory's own study is gone (the report is re-rendered as stored).

    Why not report.json's own ``search.storage``: report.json is a file that travels (a copied run directory, an
    attachment from someone else). Following it re-rendered a copied directory from the original's study, created
    an empty database at a dead SQLite path, and connected to a server a stranger's file named with the local
    credentials (``PGPASSWORD``, ``~/.pgpass``). So a report.json naming a storage other than ``DIR/study.db`` is
    refused with a message, unless ``--storage`` says where the study is::

        explicit given        -> explicit
        DIR/study.db exists   -> sqlite:///DIR/study.db   (a run directory, copied or not, renders its own study)
        recorded is absent, or an SQLite file named study.db (this DIR's, moved or deleted) -> None
        else                  -> InputError (a server, or an SQLite file elsewhere: pass --storage)
    """
    if explicit:
        return explicit
    own = out_dir / "study.db"
    if own.is_file():
        return f"sqlite:///{own.resolve()}"
    recorded_file = sqlite_file(recorded) if recorded else None
    if not recorded or (recorded_file is not None and recorded_file.name == "study.db"):
        return None
    raise InputError(f"{out_dir / 'report.json'}: its study is stored in {display_url(recorded)}, not in "
                     f"{own}; autotune report reads only DIR/study.db unless told otherwise: pass --storage URL "
                     "to read that storage")


def _rerender(out_dir: Path, *, storage: str | None = None) -> ReportDocument:
    from autotune.report import load_report, write_reports
    from autotune.showdown import recommendation
    from autotune.study import measured_rows

    doc = load_report(out_dir / "report.json")
    name = doc["search"]["study_name"]
    url = report_storage(out_dir, doc["search"].get("storage"), storage)
    if url is None:  # the run directory's study.db is gone: re-render what report.json has
        _note(doc, f"study {name} not found ({out_dir / 'study.db'} is missing); re-rendered report.json as "
                   "stored (`autotune report DIR --storage URL` reads a moved study)")
        write_reports(doc, out_dir)
        return doc
    try:
        study = load_existing_study(url, name)
    except InputError as exc:
        if storage:  # the storage the person named: say what is wrong with it
            raise
        _note(doc, f"study {name} not readable ({exc}); re-rendered report.json as stored "
                   "(`autotune report DIR --storage URL` reaches a moved study)")
        write_reports(doc, out_dir)
        return doc
    recipe_data = {k: v for k, v in doc["recipe"].items() if k != "device_resolved"}
    recipe = Recipe.from_dict(recipe_data)
    extra = [r for r in doc["candidates"] if r["trial"] >= len(study.trials)]  # boundary failures
    rows: list[Mapping[str, Any]] = [*measured_rows(study), *extra]
    best = best_row(rows, objective=recipe.search.objective, constraints=recipe.constraints)
    showdown = study.user_attrs.get(SHOWDOWN_ATTR) or doc.get("showdown")
    # the study's rows are plain dicts read back from its JSON (autotune.candidate.candidate_record)
    doc["schema"] = SCHEMA_VERSION  # the rows are this version's now (an older report's rows had no measurement)
    doc["candidates"] = cast("list[CandidateRow]", rows)
    doc["recommendation"] = cast("Recommendation | None", recommendation(rows, showdown, best))
    doc["showdown"] = showdown
    doc["pareto"] = pareto_front(rows, recipe.constraints)
    doc["search"]["trials"] = len(study.trials)
    doc["search"]["measurements_stopped_by"] = stop_counts(rows)
    write_reports(doc, out_dir)
    return doc


def _note(doc: ReportDocument, note: str) -> None:
    """Add ``note`` once: rendering the same directory again must not repeat it."""
    notes = doc.setdefault("notes", [])
    if note not in notes:
        notes.append(note)


def build_document(recipe: Recipe, workload: ValidatedWorkload, rows: list[dict[str, Any]], outcome: SearchOutcome,
                   boundaries: Mapping[str, Any], *, notes: list[str], storage: str, study_name: str,
                   wall_seconds: float, worker_stats: WorkerStats,
                   showdown: Mapping[str, Any] | None = None) -> ReportDocument:
    from autotune.environment import machine_facts
    from autotune.showdown import recommendation

    objective = recipe.search.objective
    # Per-candidate notes (no steady state, speed-up over eager, CI width) are derived by the report itself.
    best = best_row(rows, objective=objective, constraints=recipe.constraints)
    # Recipe.to_dict() and the study's rows are plain dicts (autotune.core.recipe, autotune.candidate.candidate_record),
    # the recommendation showdown.recommendation's copy of one: their shapes are the types named here.
    recipe_doc = cast("RecipeSection", {**recipe.to_dict(), "device_resolved": workload.device})
    doc: ReportDocument = {
        "schema": SCHEMA_VERSION,
        "tool": {"name": "autotune", "version": __version__},
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "recipe": recipe_doc,
        "workload": {k: v for k, v in workload.info.items() if k != "data"},
        "environment": machine_facts(workload.torch_facts),
        "search": {
            "trials": outcome.trials, "measured_this_run": outcome.measured_this_run,
            "wall_seconds": round(wall_seconds, 3), "search_seconds": round(outcome.wall_seconds, 3),
            "sampler": outcome.sampler, "objective": objective, "study_name": study_name,
            "storage": display_url(storage), "stopped_by": outcome.stopped_by, "workers": worker_stats.copy(),
            "measurements_stopped_by": stop_counts(rows),
        },
        "batch_boundary": cast("dict[str, BoundarySection]", dict(boundaries)),
        "candidates": cast("list[CandidateRow]", rows),
        "showdown": dict(showdown) if showdown else None,
        "recommendation": cast("Recommendation | None", recommendation(rows, showdown, best)),
        "pareto": pareto_front(rows, recipe.constraints),
        "notes": notes,
    }
    if workload.info.get("data"):
        doc["data"] = cast("DataSection", workload.info["data"])
    return doc


def stop_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How the measured candidates stopped: on precision (the CI target), the budget, or max samples."""
    counts: dict[str, int] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("stopped_by"):
            counts[r["stopped_by"]] = counts.get(r["stopped_by"], 0) + 1
    return dict(sorted(counts.items()))
