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
from autotune.study import SearchOutcome, display_url, load_existing_study, storage_errors
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

    report.json keeps the storage URL with its password masked, so a password-protected study is
    reached again through ``storage`` (``--storage``); without it, the stored URL is tried. A storage that
    fails while it is read, or a DIR that cannot be written, is an :class:`InputError`.
    """
    with storage_errors(storage, out_dir=out_dir, out_label="DIR"):
        return _rerender(out_dir, storage=storage)


def _rerender(out_dir: Path, *, storage: str | None = None) -> ReportDocument:
    from autotune.report import load_report, write_reports
    from autotune.showdown import recommendation
    from autotune.study import measured_rows

    doc = load_report(out_dir / "report.json")
    name = doc["search"]["study_name"]
    url = storage or doc["search"]["storage"]
    try:
        study = load_existing_study(url, name)
    except InputError as exc:  # the study database moved or is gone: re-render what report.json has
        doc.setdefault("notes", []).append(f"study {name} not readable ({exc}); re-rendered report.json as "
                                           "stored (`autotune report DIR --storage URL` reaches a moved study)")
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
