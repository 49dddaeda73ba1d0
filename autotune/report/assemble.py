"""The document of a run: assembled when a run ends, and again from the stored study.

``autotune run`` builds it from what it measured (:func:`build_document`), and writes it as it goes
(:class:`RunDocument`: after every phase and every trial, marked incomplete until the end, so an interrupt
anywhere leaves a valid report); ``autotune report DIR`` rebuilds it from the study, which also holds the trials
of every worker that joined (:func:`rerender`). One module so both ways pick the recommendation, the Pareto
front and the stop counts by the same rules. No torch import.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotune.candidate import best_row, candidate_record, pareto_front
from autotune.core.recipe import Recipe
from autotune.errors import InputError
from autotune.report.schema import SCHEMA_VERSION
from autotune.study import SearchOutcome, display_url, load_existing_study, sqlite_file, storage_errors
from autotune.validation import ValidatedWorkload
from autotune.version import __version__

if TYPE_CHECKING:
    from autotune.candidate import CandidateRow
    from autotune.core.budget import BudgetPlan
    from autotune.report.types import (
        BoundarySection,
        BudgetSection,
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
    from autotune.outdir import hold_out_dir

    with storage_errors(storage, out_dir=out_dir, out_label="DIR"):
        if not out_dir.is_dir():  # the lock needs the directory; load_report says what is missing
            return _rerender(out_dir, storage=storage)
        with hold_out_dir(out_dir, label="DIR"):  # never beside a run (or another report) writing there
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
    name = doc["search"].get("study_name")
    if not isinstance(name, str) or not name:  # optional in the schema: no study to read back
        _note(doc, "report.json names no study (search.study_name); re-rendered report.json as stored")
        write_reports(doc, out_dir)
        return doc
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
    measured = measured_rows(study)
    rows: list[Mapping[str, Any]] = [*measured, *numbered(_boundary_failures(study, doc, measured),
                                                         len(study.trials))]
    best = best_row(rows, objective=recipe.search.objective, constraints=recipe.constraints)
    showdown = study.user_attrs.get(SHOWDOWN_ATTR) or doc.get("showdown")
    # the study's rows are plain dicts read back from its JSON (autotune.candidate.candidate_record)
    doc["schema"] = SCHEMA_VERSION  # the rows are this version's now (an older report's rows had no measurement)
    doc["candidates"] = cast("list[CandidateRow]", rows)
    doc["recommendation"] = cast("Recommendation | None", recommendation(rows, showdown, best))
    if doc["recommendation"] is not None:  # the headline stays the artifact's when it is this pick's
        from autotune.artifact_check import as_shipped

        as_shipped(cast("dict[str, Any]", doc["recommendation"]), doc.get("artifact_check"), doc.get("artifact") or {})
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
def _boundary_failures(study: Any, doc: Mapping[str, Any], measured: Sequence[Mapping[str, Any]]
                       ) -> list[Mapping[str, Any]]:
    """The rows of variants whose boundary search ended them: as the study stores them (:data:`FAILED_ROWS_ATTR`),
    or, for a study an older autotune wrote, report.json's rows that no trial of the study holds (their trial
    numbers were placed after the study's trials then, and collide with trials added since)."""
    stored = study.user_attrs.get(FAILED_ROWS_ATTR)
    if isinstance(stored, list):
        return [r for r in stored if isinstance(r, Mapping)]
    in_study = {(r.get("trial"), r.get("variant"), r.get("batch_size")) for r in measured}
    return [r for r in doc.get("candidates") or []
            if (r.get("trial"), r.get("variant"), r.get("batch_size")) not in in_study]


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
    if outcome.space:
        tried = {(str(r.get("variant")), r.get("batch_size")) for r in rows}
        doc["search"]["space"] = len(outcome.space)
        doc["search"]["untried"] = [f"{v}@{b}" for v, b in outcome.space if (v, b) not in tried]
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


# ----------------------------------------------------------------------------- the run's document as it goes

#: Study attribute holding the rows of variants whose batch-boundary search ended them (no trial measured them):
#: stored explicitly, so ``autotune report DIR`` keeps them whatever trials other machines add.
FAILED_ROWS_ATTR = "boundary_failure_rows"
#: Seconds after which a report.json-only write also renders report.md, report.html and the plots again.
FULL_WRITE_EVERY_S = 60.0
#: A note of the document when a TorchScript variant is among its rows.
TORCHSCRIPT_NOTE = (
    "torch.jit (script/trace/frozen) is deprecated upstream in favour of torch.compile and torch.export; "
    "TorchScript variants are measured here because they still win on some CPU workloads."
)


def batch_rows_note(workload: Mapping[str, Any] | None) -> str | None:
    """The note of a workload whose dim 0 is not a batch of independent rows (``workload.batch_rows``, found at
    validation by :mod:`autotune.worker.batch_rows`), or None."""
    rows = (workload or {}).get("batch_rows")
    if not isinstance(rows, Mapping) or rows.get("independent") is not False:
        return None
    return ("the rows of a batch are not independent samples: " + str(rows.get("why") or "a row's answer depends on "
            "the others") + ". A batch of B gives other answers than B calls of one, so samples/s at different batch "
            "sizes compare different computations, and a server merging requests would change their answers "
            "(the served artifact checks this at start and then serves each request alone).")


def weights_note(workload: Mapping[str, Any] | None) -> str | None:
    """The note of a model whose weights are in a reduced precision this CPU only emulates (``workload.weights``,
    :func:`autotune.worker.model.weights_precision`), or None."""
    weights = (workload or {}).get("weights")
    if not isinstance(weights, Mapping) or weights.get("native") is not False:
        return None
    dtype = str(weights.get("dtype"))
    need = "AVX512_FP16 or AMX_FP16" if dtype == "float16" else "AVX512_BF16 or AMX_BF16"
    return (f"the model's weights are {dtype}, which this CPU has no instructions for ({need}): torch emulates its "
            "arithmetic, often an order of magnitude slower than float32 (resnet18 at batch 4: 237 ms a call in "
            "float16 against 15.5 ms in float32 on an AVX-512 EPYC), and every variant measured here inherits it; "
            "build the model in float32 (the factory without .half()/.bfloat16()) and let the search try reduced "
            "precision where the CPU has it (variants such as eager+bf16, under an accuracy budget)")


def numbered(rows: Sequence[Mapping[str, Any]], first_trial: int) -> list[dict[str, Any]]:
    """Boundary-failure rows numbered after the study's trials (they ran in none)."""
    return [{**r, "trial": first_trial + i} for i, r in enumerate(rows)]


def incomplete_note(phase: str, *, interrupted: bool) -> str:
    how = "was interrupted" if interrupted else "had not finished (or was killed)"
    return (f"incomplete: the run {how} in its {phase} phase; this report holds what was measured until then "
            "(the same command resumes it and measures nothing twice)")


class RunDocument:
    """The report of one ``autotune run`` as it goes: valid after every phase and every trial, marked incomplete.

    Why: a run stopped anywhere (Ctrl-C, SIGTERM, ``timeout``, SIGKILL, a lost machine) must leave a valid report
    of what it measured, not nothing. The tuner tells this object each thing as it is found and it writes the
    document each time, every file replaced atomically (a kill between two writes leaves the previous one):

    - report.json alone after every boundary, measured trial and showdown round (its cost is validation and
      serialisation, milliseconds to tens of milliseconds; ``benchmarks/bench_report_write.py``);
    - the full set (report.md, report.html and the plots, which cost most of a second: matplotlib) when a phase
      ends, and with report.json once :data:`FULL_WRITE_EVERY_S` passed since the last full write.

    Until :meth:`finish` the document says ``complete: false``, the ``phase`` it was written in and
    ``interrupted``; its rows are the study's (written there before this is told), so a resumed run measures
    nothing twice. Pseudo-code::

        phase(p):        self.phase = p; write(full)
        boundary(o):     self.boundaries = o; write(json)
        trial():         write(json, full if last full write > FULL_WRITE_EVERY_S ago)
        showdown_round(d): self.showdown = d; into the study; write(json)
        finish(interrupted): write(full, complete = not interrupted)
    """

    def __init__(self, recipe: Recipe, workload: ValidatedWorkload, out_dir: Path, *, study: Any, storage: str,
                 study_name: str, started: float, worker_stats: Callable[[], WorkerStats],
                 clock: Callable[[], float] = time.monotonic, plan: BudgetPlan | None = None) -> None:
        self.recipe, self.workload, self.out_dir, self.study = recipe, workload, out_dir, study
        self.storage, self.study_name, self.started, self._worker_stats = storage, study_name, started, worker_stats
        self.clock = clock
        self.plan = plan
        self.phase = "boundaries"
        #: Seconds per phase (validation: from the run's start to the first phase), for report.json's ``budget``.
        self.phase_seconds: dict[str, float] = {}
        self._phase_at: float | None = None
        #: Notes of the run itself (a skipped or reused showdown), in report.json's ``notes``.
        self.run_notes: list[str] = []
        self.boundaries: Mapping[str, Any] = {}
        self.failures: Mapping[str, tuple[str, str]] = {}
        self.outcome: SearchOutcome | None = None
        self.measured_this_run = 0
        self.search_started: float | None = None
        self.showdown: dict[str, Any] | None = None
        self.doc: ReportDocument | None = None
        self._full_at = -1e18

    # -- what the tuner tells it ------------------------------------------------------------------
    def start(self, phase: str) -> None:
        """A phase begins: the full set, so report.md says where the run is."""
        now = self.clock()
        if self._phase_at is None:
            self.phase_seconds["validation"] = now - self.started
        else:
            self.phase_seconds[self.phase] = self.phase_seconds.get(self.phase, 0.0) + now - self._phase_at
        self.phase, self._phase_at = phase, now
        if phase == "search":
            self.search_started = now
        self.write(full=True)

    def budget(self) -> dict[str, Any] | None:
        """report.json's ``budget``: the plan and the phases' seconds so far (the current one until now); the
        promise is judged without the serving stage, which has a budget of its own."""
        if self.plan is None:
            return None
        phases = dict(self.phase_seconds)
        if self._phase_at is not None:
            phases[self.phase] = phases.get(self.phase, 0.0) + self.clock() - self._phase_at
        wall = sum(v for k, v in phases.items() if k != "serving")
        return self.plan.to_dict(phases, wall)

    def boundary(self, documents: Mapping[str, Any], failures: Mapping[str, tuple[str, str]]) -> None:
        self.boundaries, self.failures = dict(documents), dict(failures)
        self.write(full=False)

    def store_failures(self) -> None:
        """The boundary failures' rows into the study (:data:`FAILED_ROWS_ATTR`), replacing an earlier run's."""
        self.study.set_user_attr(FAILED_ROWS_ATTR, self.failure_rows())

    def trial(self, row: Mapping[str, Any] | None = None) -> None:
        """A trial was told to the study (its row is there already)."""
        self.measured_this_run += 1
        self.write(full=self.clock() - self._full_at > FULL_WRITE_EVERY_S)

    def searched(self, outcome: SearchOutcome) -> None:
        self.outcome = outcome

    def showdown_round(self, doc: dict[str, Any]) -> None:
        """A round of the showdown ended: its rounds so far into the study (``autotune report`` reads them there)
        and the report."""
        self.showdown = doc
        self.study.set_user_attr(SHOWDOWN_ATTR, doc)
        self.write(full=False)

    def finish(self, *, interrupted: bool = False) -> ReportDocument:
        """The last write of the run: complete unless ``interrupted``."""
        return self.write(full=True, complete=not interrupted, interrupted=interrupted)

    # -- the document -------------------------------------------------------------------------
    def failure_rows(self) -> list[dict[str, Any]]:
        """Rows for variants whose boundary search ended them (numbered 0..; :func:`numbered` places them)."""
        return [candidate_record(trial=i, variant=v, spec=self.workload.specs[v], batch_size=1,
                                 result={"status": status, "reason": reason}, constraints=self.recipe.constraints)
                for i, (v, (status, reason)) in enumerate(self.failures.items())]

    def document(self, *, complete: bool = False, interrupted: bool = False) -> ReportDocument:
        from autotune.study import measured_rows

        outcome = self.outcome
        if outcome is None:  # still searching, or before the search: the study's rows so far
            since = self.search_started
            outcome = SearchOutcome(
                rows=measured_rows(self.study), stopped_by="interrupted" if interrupted else "running",
                wall_seconds=0.0 if since is None else self.clock() - since,
                sampler="none" if since is None else type(self.study.sampler).__name__,
                measured_this_run=self.measured_this_run, trials=len(self.study.trials))
        rows = outcome.rows + numbered(self.failure_rows(), outcome.trials)
        notes = [] if complete else [incomplete_note(self.phase, interrupted=interrupted)]
        if any(r.get("compiler") in ("script", "trace", "frozen") for r in rows):
            notes.append(TORCHSCRIPT_NOTE)
        notes += [f"{u['variant']} not available here: {u['reason']}" for u in self.workload.unavailable]
        notes += [n for n in (batch_rows_note(self.workload.info), weights_note(self.workload.info)) if n is not None]
        notes += self.run_notes
        doc = build_document(self.recipe, self.workload, rows, outcome, self.boundaries, notes=notes,
                             showdown=self.showdown, storage=self.storage, study_name=self.study_name,
                             wall_seconds=self.clock() - self.started, worker_stats=self._worker_stats())
        doc["complete"] = complete
        doc["phase"] = "done" if complete else self.phase
        doc["interrupted"] = interrupted
        budget = self.budget()
        if budget is not None:
            doc["budget"] = cast("BudgetSection", budget)
        if self.doc is not None:  # the deployment's and the serving stage's sections, once written, stay
            if "artifact" in self.doc:
                doc["artifact"] = self.doc["artifact"]
            if "artifact_check" in self.doc:
                doc["artifact_check"] = self.doc["artifact_check"]
                if doc.get("recommendation") is not None:  # the headline is the artifact's (artifact_check)
                    from autotune.artifact_check import as_shipped

                    as_shipped(cast("dict[str, Any]", doc["recommendation"]), doc["artifact_check"],
                               doc.get("artifact") or {})
            if "profile" in self.doc:
                doc["profile"] = self.doc["profile"]
            if "serving" in self.doc:
                doc["serving"] = self.doc["serving"]
        return doc

    def write(self, *, full: bool, complete: bool = False, interrupted: bool = False) -> ReportDocument:
        from autotune.report import write_reports
        from autotune.report.write import write_report_json

        self.doc = self.document(complete=complete, interrupted=interrupted)
        if full:
            write_reports(self.doc, self.out_dir)
            self._full_at = self.clock()
        else:
            write_report_json(self.doc, self.out_dir)
        return self.doc
