"""The tuning pipeline behind ``autotune run``: validate → batch boundary → search → report.

This module wires the pieces together and owns nothing clever itself: the worker processes are in
:mod:`autotune.runner`, the requests in :mod:`autotune.client` (the measure settings:
:mod:`autotune.core.measure_settings`), the batch boundaries in :mod:`autotune.variant_boundaries`, the study in
:mod:`autotune.study`, the report document in :mod:`autotune.report.assemble` (which also rebuilds it
for ``autotune report DIR``), its renderings in :mod:`autotune.report`. :func:`join_study` is the same
search joined from another machine (``autotune worker``). No torch import: everything that touches
torch happens in the worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotune.candidate import best_row, candidate_record
from autotune.client import WorkerClient
from autotune.core.budget import OVERRUN, ROUND_OVERHEAD_S, BudgetPlan, artifact_reserve
from autotune.core.device_names import is_accelerator
from autotune.core.events import OnEvent, emit
from autotune.core.measure_settings import MeasureSettings
from autotune.core.recipe import SEED_RANGE_TEXT, Recipe, valid_seed
from autotune.core.variant_names import VariantSpec
from autotune.deployment import finalists_dir
from autotune.errors import AutotuneError, InputError
from autotune.outdir import hold_out_dir
from autotune.report.assemble import SHOWDOWN_ATTR, RunDocument
from autotune.runner import Runner
from autotune.study import (
    Search,
    SearchOutcome,
    SearchSettings,
    SearchSpace,
    display_url,
    fingerprint_digest,
    let_go_of_interrupted_frames,
    load_existing_study,
    open_study,
    refined_batch_sizes,
    storage_errors,
    study_fingerprint,
    verify_join,
)
from autotune.validation import VALIDATE_TIMEOUT, ValidatedWorkload, validate
from autotune.variant_boundaries import (
    STATE_ATTR,
    BoundaryOutcome,
    find_boundaries,
    preferred_batches,
    probe_events,
)

if TYPE_CHECKING:
    from autotune.report.types import ArtifactCheckSection, ArtifactSection, ProfileSection, ReportDocument

@dataclass(frozen=True)
class RunOptions:
    out_dir: Path
    storage: str | None = None
    study_name: str | None = None
    #: Progress events (autotune.core.events); None: silent. The CLI passes its tqdm bar.
    on_event: OnEvent | None = None
    #: Save the recommendation's deployable artifact into ``out_dir/artifact`` and profile it against eager
    #: (:mod:`autotune.deployment`); after the reports are written once, so a failure here loses nothing.
    artifact: bool = True
    #: Plain processes that time the saved artifact as shipped (:mod:`autotune.artifact_check`); None: the default
    #: (``AUTOTUNE_ARTIFACT_CHECK_ROUNDS`` or 5); 0: no check.
    artifact_check_rounds: int | None = None


def run_tuning(recipe: Recipe, options: RunOptions) -> ReportDocument:
    """Run the whole tuning and write the reports; returns the report document.

    ``--out`` is locked from when it exists to the end (one run per directory: :mod:`autotune.outdir`), and
    a storage or ``--out`` failure anywhere (locked, full, damaged, read-only) is an :class:`InputError`
    that leaves what was measured so far in the study (:func:`autotune.study.storage.storage_errors`).
    """
    storage = options.storage or f"sqlite:///{(options.out_dir / 'study.db').resolve()}"
    with contextlib.ExitStack() as held, storage_errors(storage, out_dir=options.out_dir):
        return _run_tuning(recipe, options, storage, held)


def _run_tuning(recipe: Recipe, options: RunOptions, storage: str, held: contextlib.ExitStack) -> ReportDocument:
    """The phases, each written into the report as it goes (:class:`autotune.report.assemble.RunDocument`).

    Ctrl-C (or SIGTERM, which the CLI turns into one) in any phase after validation ends the run with the
    report of what was measured, marked ``interrupted`` and incomplete; the workers are killed on the way out
    (:class:`autotune.runner.Runner`), and a SIGKILL leaves the last report written, whose workers die with us
    (:mod:`autotune.worker.lifeline`). During validation nothing is written yet.
    """
    t0 = time.monotonic()
    from autotune.artifact_check import default_rounds

    # resolved first: a bad AUTOTUNE_ARTIFACT_CHECK_ROUNDS is an input error before anything is measured
    check_rounds = options.artifact_check_rounds if options.artifact_check_rounds is not None else default_rounds()
    from autotune.deployment import previous_report

    previous = previous_report(options.out_dir)  # before this run rewrites it: its artifact may be reused
    out = options.out_dir
    study_name = options.study_name or recipe.name
    progress: RunDocument | None = None
    try:
        with Runner(fresh_measure=True) as runner:  # each candidate timed in a fresh process (ARCHITECTURE.md)
            workload = validate(runner, recipe)  # first: a model that cannot run leaves no study or --out behind
            emit(options.on_event, "validated",
                 f"{recipe.name} on {workload.device}: {len(workload.variants)} variants",
                 device=workload.device, variants=workload.variants)
            out.mkdir(parents=True, exist_ok=True)
            held.enter_context(hold_out_dir(out))  # a second run on this --out is refused from here on
            plan = budget_plan(recipe, t0, runner.stats.startup_seconds,
                               check_rounds=check_rounds if options.artifact else 0, artifact=options.artifact)
            fingerprint = study_fingerprint(recipe, workload.device)
            # then the study, before any probing: a bad --storage or a --study made for another model
            # fails in seconds, and a resumed run takes the boundaries it already found
            # (autotune.variant_boundaries: reuse rule)
            study = open_study(_settings(recipe, storage=storage, study_name=study_name, time_budget=0.0,
                                         fingerprint=fingerprint), recipe_data=recipe.to_dict())
            stats = runner.stats
            progress = RunDocument(recipe, workload, out, study=study, storage=storage, study_name=study_name,
                                   started=t0, plan=plan,
                                   worker_stats=lambda: {"workers_started": stats.workers_started,
                                                         "startup_seconds": stats.startup_seconds,
                                                         "crashes": stats.crashes})
            progress.start("boundaries")
            boundary = BoundaryOutcome({}, {}, {})
            if recipe.search.batch_sizes == "auto":
                boundary = find_boundaries(  # per base variant: its process environments share the boundary
                    runner, recipe, workload.bases(), stored_state=study.user_attrs.get(STATE_ATTR), limited=True,
                    on_variant=lambda v: emit(options.on_event, "boundary", f"batch boundary of {v}", variant=v),
                    on_probe=probe_events(options.on_event),
                    on_found=lambda v, found: _found(progress, study, v, found, options.on_event))
                runner.recycle("probe")  # its memory back before timing starts
                batch_sizes = workload.spread(boundary.batch_sizes)
                if recipe.search.strategy == "bracket":  # points between powers of two for its refinement
                    batch_sizes = {v: refined_batch_sizes(
                        b, granularity=_granularity(boundary, workload.base_of.get(v, v)))
                        for v, b in batch_sizes.items()}
            else:
                fixed = tuple(recipe.search.batch_sizes)
                batch_sizes = {v: fixed for v in workload.variants}
            # a base variant's failure is every environment's of it (they share the build and the memory)
            progress.boundary(boundary.documents, workload.spread(boundary.failures))
            progress.store_failures()
            variants = tuple(v for v in workload.variants if batch_sizes.get(v))
            space = SearchSpace(variants=variants, batch_sizes=batch_sizes,
                                preferred=preferred_batches(boundary.documents, batch_sizes, workload.base_of))
            settings = _settings(recipe, storage=storage, study_name=study_name,
                                 time_budget=plan.search_seconds(time.monotonic(),
                                                                 showdown=recipe.measure.rounds >= 2),
                                 fingerprint=fingerprint)
            search = Search(space, settings, _evaluator(runner, recipe, workload.specs),
                            recipe_data=recipe.to_dict(), specs=workload.specs, on_row=progress.trial)
            search.study.set_user_attr("space", {v: list(b) for v, b in batch_sizes.items() if v in variants})
            search.study.set_user_attr("preferred", dict(space.preferred))
            search.study.set_user_attr("specs", {v: dict(workload.specs[v]) for v in variants})
            if boundary.key is not None:  # the documents and what decided them, for the next resume
                search.study.set_user_attr(STATE_ATTR, boundary.state())
            progress.start("search")
            outcome = _run_search(search, recipe, on_event=options.on_event)
            progress.searched(outcome)
            unmeasured = unmeasured_note(variants, outcome)
            if unmeasured is not None:
                progress.run_notes.append(unmeasured)
        if outcome.stopped_by == "interrupted":  # Ctrl-C means stop now, with what was measured
            return progress.finish(interrupted=True)
        progress.start("showdown")
        staging = _staging_estimate(recipe, outcome)
        showdown = final_showdown(recipe, outcome.rows, left=plan.before_artifact(time.monotonic()),
                                  startup_s=staging,
                                  on_event=options.on_event, on_round=progress.showdown_round,
                                  stored=search.study.user_attrs.get(SHOWDOWN_ATTR), notes=progress.run_notes,
                                  shipped_dir=finalists_dir(out) if _ships_files(recipe, workload.device) else None)
        progress.showdown = showdown
        if showdown is not None or SHOWDOWN_ATTR in search.study.user_attrs:  # an earlier run's would be read back
            search.study.set_user_attr(SHOWDOWN_ATTR, showdown)
        doc = progress.document()
        rec = doc["recommendation"]
        if options.artifact and rec is not None:
            progress.start("artifact")  # the reports without the artifact, should it fail or be interrupted
            assert progress.doc is not None
            _deploy(recipe, progress.doc, out, previous=previous, check_rounds=check_rounds, plan=plan,
                    # a plain process of the check costs what a worker's start did, or (a busy machine) what this
                    # run's candidates said a process's staging costs
                    startup_s=max(_mean_startup(runner.stats.startup_seconds), staging - ROUND_OVERHEAD_S),
                    on_event=options.on_event,
                    notes=progress.run_notes)
            serving = getattr(recipe, "serving", None)
            if serving is not None:
                from autotune.serving.stage import run_serving

                progress.start("serving")  # its own serving.time_budget_s, outside the run's promise
                emit(options.on_event, "serving", f"serving search on {rec['variant']}")
                section = run_serving(serving, cast("dict[str, Any]", progress.doc), out, run_started=t0,
                                      say=lambda text: emit(options.on_event, "serving", text),
                                      seed=recipe.search.seed)
                if section.get("interrupted"):
                    return progress.finish(interrupted=True)
        doc = progress.finish()
    except KeyboardInterrupt as exc:
        if progress is None:  # during validation: nothing written, nothing to keep
            raise
        let_go_of_interrupted_frames(exc)  # a storage transaction the interrupt left open (study/storage.py)
        return progress.finish(interrupted=True)
    emit(options.on_event, "done", f"reports written to {out}", out_dir=str(out))
    return doc


#: A worker's start-up before one has been measured (a 2-core machine: 2-3 s, mostly ``import torch``).
STARTUP_GUESS_S = 3.0


def _mean_startup(seconds: Sequence[float]) -> float:
    return sum(seconds) / len(seconds) if seconds else STARTUP_GUESS_S


def budget_plan(recipe: Recipe, started: float, startup_seconds: Sequence[float], *, check_rounds: int,
                artifact: bool) -> BudgetPlan:
    """The run's budget split once validation has started workers (:mod:`autotune.core.budget`): the artifact
    step's reserve from their measured start-up, the rest for the boundaries, the search and the showdown."""
    from autotune.artifact_check import SECONDS, WARM_SECONDS

    total = recipe.search.time_budget_s
    reserve = artifact_reserve(total, startup_s=_mean_startup(startup_seconds), check_rounds=check_rounds,
                               seconds=SECONDS, warm_s=WARM_SECONDS) if artifact else 0.0
    return BudgetPlan(total_s=total, started=started, artifact_s=reserve)


def _deploy(recipe: Recipe, doc: ReportDocument, out: Path, *, previous: Mapping[str, Any] | None,
            check_rounds: int, plan: BudgetPlan, startup_s: float, on_event: OnEvent | None,
            notes: list[str]) -> None:
    """The artifact, its profile and its check as shipped, into ``doc``: the last run's when it built the same
    (:func:`autotune.deployment.reusable_deployment`: a resumed run builds and times nothing twice), else built
    now (:func:`autotune.deployment.write_deployment`) and timed (:func:`autotune.artifact_check.check_artifact`)."""
    from autotune.deployment import reusable_deployment, write_deployment

    rec = doc["recommendation"]
    assert rec is not None
    reused = reusable_deployment(previous, doc, out)
    if reused is not None:
        emit(on_event, "artifact", f"artifact of {rec['variant']}: the last run's (same configuration)")
        doc["artifact"] = cast("ArtifactSection", reused["artifact"])
        if "profile" in reused:
            doc["profile"] = cast("ProfileSection", reused["profile"])
        if "artifact_check" in reused:
            doc["artifact_check"] = cast("ArtifactCheckSection", reused["artifact_check"])
        notes.append("The artifact, its profile and its check are the last run's on this --out: the same "
                     "recommendation, recipe, autotune and machine (delete artifact/ to build it again).")
    else:
        emit(on_event, "artifact", f"artifact and profile of {rec['variant']}")
        write_deployment(recipe.to_dict(), doc, out, make_runner=Runner, timeout=recipe.measure.timeout_s)
    if check_rounds and "artifact_check" not in doc:
        checked = _check(recipe, doc, out, wanted=check_rounds, plan=plan, startup_s=startup_s, on_event=on_event,
                         notes=notes)
        if checked is not None:
            doc["artifact_check"] = cast("ArtifactCheckSection", checked)


def _check(recipe: Recipe, doc: ReportDocument, out: Path, *, wanted: int, plan: BudgetPlan, startup_s: float,
           on_event: OnEvent | None, notes: list[str]) -> dict[str, Any] | None:
    """The artifact check, its rounds sized to what is left of the run's promise
    (:func:`autotune.core.budget.check_rounds_that_fit`): all of them, fewer, plain ones without the tool's
    staged side, or none, and a note says which when not all."""
    from autotune.artifact_check import SECONDS, WARM_SECONDS, check_artifact, skipped_section, unchecked_device
    from autotune.core.budget import BUILD_GUESS_S, check_round_seconds, check_rounds_that_fit

    rec = doc["recommendation"]
    assert rec is not None
    left = plan.last_phase_end - time.monotonic()
    staging = startup_s + float(rec.get("compile_seconds") or BUILD_GUESS_S)
    # an artifact that is the code building the model (torch.compile) compiles again in each plain process
    artifact: Mapping[str, Any] = doc.get("artifact") or {}
    load_s = float(rec.get("compile_seconds") or 0.0) if artifact.get("kind") == "code" else 0.0
    rounds, paired = check_rounds_that_fit(
        left, wanted=wanted, staging_s=staging,
        round_s=check_round_seconds(startup_s, seconds=SECONDS, warm_s=WARM_SECONDS, paired=True, load_s=load_s))
    if rounds == 0:
        reason = (f"the time budget had {max(left, 0.0):.0f} s left of its promise "
                  f"({plan.total_s:g} s + {OVERRUN:.0%}): too little for {wanted} rounds")
        notes.append(f"The artifact was not timed as shipped: {reason}; the headline is the run's own figure.")
        emit(on_event, "artifact", f"the artifact check skipped: {reason}")
        return skipped_section(wanted, reason)
    not_here = unchecked_device(doc)
    how = "paired with the tool's worker" if paired else "plain processes alone"
    emit(on_event, "artifact", f"the artifact check skipped: {not_here}" if not_here is not None
         else f"the artifact as shipped: {rounds} plain processes ({how})")
    checked = check_artifact(doc, out, rounds=rounds, recipe_data=recipe.to_dict(),
                             make_runner=Runner if paired else None, timeout=recipe.measure.timeout_s,
                             seed=recipe.search.seed, deadline=plan.last_phase_end)
    if checked is not None and (rounds < wanted or not paired):
        checked["rounds_requested"] = wanted
        ran = checked.get("compared", len(checked.get("throughputs") or []))
        cut = f"{ran} of {wanted} rounds" if rounds < wanted else f"{wanted} rounds"
        checked["budget_note"] = (f"{cut}{'' if paired else ', without the tool side by side'}: the time budget "
                                  f"had {max(left, 0.0):.0f} s left of its promise ({plan.total_s:g} s + "
                                  f"{OVERRUN:.0%})")
        notes.append(f"The artifact check ran {checked['budget_note']}.")
    return checked


def _found(progress: RunDocument | None, study: Any, variant: str, found: BoundaryOutcome,
           on_event: OnEvent | None) -> None:
    """A variant's boundary is known: stored in the study, then in the report written as the run goes."""
    store_found(study, variant, found, on_event)
    if progress is not None:
        progress.boundary(found.documents, progress.workload.spread(found.failures))


def store_found(study: Any, variant: str, found: BoundaryOutcome, on_event: OnEvent | None) -> None:
    """Store the boundaries found so far in the study at once (an interrupt keeps them; the next run reuses
    them), and tell ``on_event`` about ``variant``'s, the one just found."""
    study.set_user_attr(STATE_ATTR, found.state())
    if variant in found.documents:
        emit(on_event, "boundary_found", f"  {variant}: {found.documents[variant].get('summary', '')}",
             variant=variant, document=found.documents[variant])
    elif variant in found.failures:
        status, reason = found.failures[variant]
        emit(on_event, "boundary_found", f"  {variant}: {status}: {reason}", variant=variant,
             failure=[status, reason])


#: The showdown may overrun the time left before the artifact reserve by this share of ``time_budget_s`` (its
#: staging is estimated, not known): the run's promise is its budget + this share (:mod:`autotune.core.budget`).
#: A showdown estimated to need more is skipped, and the report says so.
SHOWDOWN_OVERRUN = OVERRUN


def unmeasured_note(variants: tuple[str, ...], outcome: SearchOutcome) -> str | None:
    """A note naming the searched variants with no row at all when the search's budget ran out, or None.

    Why: the search screens each variant first, in the recipe's order, and a budget that ends before the last
    leaves it out without a word (a segmentation model's six variants in 76 s: OpenVINO, listed last, was never
    measured, and the report's tables simply lacked it; session 32). A variant that failed or was rejected has a
    row and is reported there."""
    if outcome.stopped_by != "time_budget":
        return None
    seen = {str(r.get("variant")) for r in outcome.rows}
    missing = [v for v in variants if v not in seen]
    if not missing:
        return None
    shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    return (f"never measured: {shown} (the search's time budget ran out before "
            f"{'it' if len(missing) == 1 else 'they'} came up; the search screens every runtime plain first, then "
            "one precision, format or environment at a time, the leading runtime's first: raise "
            "search.time_budget_s, or leave out of search.variants what you expect to lose)")


def _staging_estimate(recipe: Recipe, outcome: SearchOutcome) -> float:
    """A showdown process's staging cost beyond its build, from this run's candidates (core.budget)."""
    from autotune.core.budget import staging_seconds

    builds = [float(r["compile_seconds"]) for r in outcome.rows
              if r.get("status") == "ok" and isinstance(r.get("compile_seconds"), int | float)]
    return staging_seconds(outcome.candidate_seconds, builds, max_seconds=recipe.measure.max_seconds)


def final_showdown(recipe: Recipe, rows: list[dict[str, Any]], *, left: float, on_event: OnEvent | None = None,
                   startup_s: float = 5.0,
                   on_round: Callable[[dict[str, Any]], None] | None = None,
                   stored: Mapping[str, Any] | None = None, notes: list[str] | None = None,
                   shipped_dir: Path | None = None) -> dict[str, Any] | None:
    """Re-measure the finalists in interleaved rounds (autotune.showdown); None when there is nothing to decide,
    or when the time budget cannot cover it (a line in ``notes`` says so). ``shipped_dir``: finalists with a file
    form are saved there and staged from their artifacts (removed after the showdown).

    Finalists are dropped from the end of the ranking while the showdown's estimated cost exceeds
    the time left; two compete when the time left covers two (within SHOWDOWN_OVERRUN of the budget),
    else there is no showdown: a budget is a promise (issue 32: the showdown staged its finalists, about 130 s,
    with the budget already spent). A single finalist still gets its rounds: they are fresh processes, so they
    give the headline throughput a deployment sees (a screen in a reused worker can be off by several percent:
    its allocation history).

    ``stored``: the study's showdown from an earlier run on this ``--out``. A complete one whose finalists are
    this ranking's leading finalists is reused, not run again (a resume measures nothing twice).
    """
    from autotune.showdown import ShowdownSettings, candidate_key, fitted, run_showdown, select_finalists

    if recipe.measure.rounds < 2:
        return None
    objective = "latency" if recipe.search.objective == "latency" else "throughput"
    finalists = select_finalists(rows, objective=objective,
                                 latency_percentile=recipe.constraints.latency_percentile)
    if recipe.search.environments:
        finalists = _with_default_environment(finalists, rows)
    settings = ShowdownSettings(rounds=recipe.measure.rounds, round_seconds=recipe.measure.round_seconds,
                                margin=recipe.search.equivalence_margin, objective=objective,
                                latency_percentile=recipe.constraints.latency_percentile,
                                timeout_s=recipe.measure.timeout_s, seed=recipe.search.seed,
                                processes=recipe.measure.processes, deadline=time.monotonic() + max(left, 0.0),
                                quiet=quiet_rounds(recipe.measure.quiet_rounds, finalists),
                                shipped_dir=str(shipped_dir) if shipped_dir is not None else None)
    keys = [candidate_key(r) for r in finalists]
    if _reusable(stored, keys):
        assert stored is not None
        emit(on_event, "showdown", f"showdown: reused this study's ({', '.join(stored['finalists'])})")
        if notes is not None:
            notes.append("the showdown was run by an earlier run on this output directory and is reused "
                         f"({len(stored['finalists'])} finalists, {stored.get('rounds_run')} rounds): nothing is "
                         "measured twice")
        return {**stored, "reused": True}
    if not finalists:
        return None
    asked = settings.processes
    allowance = left + SHOWDOWN_OVERRUN * recipe.search.time_budget_s  # left < 0: the allowance is partly spent
    finalists, settings, cost = fitted(finalists, settings, left=left, allowance=allowance, startup_s=startup_s)
    if cost > allowance:
        if notes is not None:
            notes.append(f"no showdown: the time budget had {max(left, 0.0):.0f} s left and staging and timing "
                         f"{len(finalists)} finalist{'s' if len(finalists) != 1 else ''} (one process each) was "
                         f"estimated at {cost:.0f} s; the recommendation is the search's ranking (raise "
                         "search.time_budget_s for a showdown)")
        emit(on_event, "showdown", f"showdown skipped: {max(left, 0.0):.0f} s left, about {cost:.0f} s needed")
        return None
    if settings.processes < asked and notes is not None:
        notes.append(f"the showdown staged {settings.processes} process{'es' if settings.processes != 1 else ''} per "
                     f"finalist, not measure.processes = {asked}: the time budget had {max(left, 0.0):.0f} s left, "
                     f"and {asked} each were estimated beyond what the run's promise allows")

    def say(text: str) -> None:
        emit(on_event, "showdown", f"showdown: {text}")

    t0 = time.monotonic()
    try:
        doc = run_showdown(finalists, recipe_data=recipe.to_dict(), settings=settings, make_runner=Runner,
                           on_progress=say, on_round=on_round)
    finally:
        if shipped_dir is not None:
            shutil.rmtree(shipped_dir, ignore_errors=True)
    doc["wall_seconds"] = round(time.monotonic() - t0, 3)
    doc["estimated_seconds"] = round(cost, 3)  # what the fit assumed (staging and rounds), beside what it took
    if settings.processes < asked:
        doc["processes_asked"] = asked
    return doc


def _ships_files(recipe: Recipe, device: str) -> bool:
    """Whether the showdown stages finalists from their artifacts (``measure.as_shipped``): on a CPU, where the plain
    loop that serves an artifact needs no device synchronisation."""
    return recipe.measure.as_shipped and not is_accelerator(device)


def quiet_rounds(setting: bool | str, finalists: Sequence[Mapping[str, Any]]) -> bool:
    """``measure.quiet_rounds``: true / false as given; "auto" stops the other staged workers when a finalist runs
    on ONNX Runtime or OpenVINO (their idle pools spin: 0.05 cores taken from the timed finalist, a fifth to a
    quarter of the rounds disturbed), and leaves torch finalists running: their idle pools barely spin (every round
    undisturbed either way), and stopped and continued their ratio CIs once came out about twice as wide (0.19
    against 0.08, session 23); with the continued worker's warm-up (``RESUME_WARMUP``) 0.107 against 0.119
    running, overlapping runs (BENCHMARKS "Quiet rounds")."""
    if isinstance(setting, bool):
        return setting
    return any(VariantSpec.parse(str(r["variant"])).is_runtime for r in finalists)


def _reusable(stored: Mapping[str, Any] | None, keys: Sequence[str]) -> bool:
    """Whether a stored showdown is complete (a verdict, not a partial ``complete: false`` document) and its
    finalists are the leading ones of ``keys``: the same candidates, measured once, already compared."""
    if not isinstance(stored, Mapping) or not stored.get("verdict") or stored.get("complete") is False:
        return False
    theirs = stored.get("finalists")
    if not isinstance(theirs, list) or not theirs:
        return False
    return len(theirs) >= min(2, len(keys)) and list(keys[:len(theirs)]) == theirs


def _with_default_environment(finalists: list[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
                              ) -> list[Mapping[str, Any]]:
    """The leader's twin in another process environment competes second, so that the showdown's paired ratio
    says what the environment is worth, with its CI, and the twin survives the trimming to the time left.

    The twin of a leader in another environment (``frozen+jemalloc``) is its run in glibc's default (``frozen``
    at the same batch); that of a leader in the default, the best of its runs in the other environments (the
    allocator that came closest). Only rows measured, feasible and of the same base variant and batch count.
    """
    if not finalists:
        return finalists
    leader = finalists[0]
    spec = VariantSpec.parse(str(leader["variant"]))
    base, default = spec.base_name, spec.process_environment.is_default

    def twin_of(r: Mapping[str, Any]) -> bool:
        if r.get("batch_size") != leader["batch_size"] or r.get("variant") == leader["variant"]:
            return False
        other = VariantSpec.parse(str(r.get("variant")))
        return other.base_name == base and other.process_environment.is_default != default

    if any(twin_of(r) for r in finalists):
        return finalists
    twins = [r for r in rows if twin_of(r) and r.get("status") == "ok" and r.get("feasible")
             and isinstance(r.get("throughput"), (int, float))]
    if not twins:
        return finalists
    twin = max(twins, key=lambda r: float(r["throughput"]))
    return [leader, twin, *finalists[1:]]


def _evaluator(runner: Runner, recipe: Recipe, specs: Mapping[str, Mapping[str, Any]]
               ) -> Callable[[int, str, int], dict[str, Any]]:
    """``evaluate(trial, variant, batch)``: measure one candidate in the worker, return its row."""
    client, recipe_data = WorkerClient(runner), recipe.to_dict()
    settings = MeasureSettings.from_recipe(recipe)

    def evaluate(trial: int, variant: str, batch_size: int, *, fidelity: float = 1.0) -> dict[str, Any]:
        # fidelity: share of the full measurement time (the bracket strategy screens short, races longer)
        res = client.measure(recipe_data, variant, batch_size, settings.at_fidelity(fidelity),
                             timeout=recipe.measure.timeout_s)
        return candidate_record(trial=trial, variant=variant, spec=specs[variant], batch_size=batch_size,
                                result=res, constraints=recipe.constraints)

    return evaluate


def _run_search(search: Search, recipe: Recipe, *, on_event: OnEvent | None) -> SearchOutcome:
    """Run the study's loop, telling ``on_event`` about each candidate (started, done, best so far)."""
    total = len(search.space.combos())
    rows: list[dict[str, Any]] = []
    evaluate = search.evaluate

    def tracked(trial: int, variant: str, batch_size: int, **kwargs: Any) -> dict[str, Any]:
        emit(on_event, "candidate_start", f"{variant}@{batch_size}", variant=variant, batch_size=batch_size,
             total=total)
        row = evaluate(trial, variant, batch_size, **kwargs)
        rows.append(row)
        best = best_row(rows, objective=recipe.search.objective, constraints=recipe.constraints)
        emit(on_event, "candidate_done", f"{variant}@{batch_size}: {row['status']}", variant=variant,
             batch_size=batch_size, total=total, row=row, best=best)
        return row

    search.evaluate = tracked
    try:
        if not search.space.variants:
            return SearchOutcome(rows=[], stopped_by="exhausted", wall_seconds=0.0, sampler="none",
                                 measured_this_run=0, trials=len(search.study.trials))
        return dataclasses.replace(search.run(), space=tuple(search.space.combos()))
    finally:
        search.evaluate = evaluate


#: Seconds between looks at a study whose creating run has not stored its search space yet.
SPACE_POLL_S = 2.0


def join_study(recipe: Recipe, storage: str, study_name: str | None = None, *, time_budget: float | None,
               on_event: OnEvent | None = None, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> SearchOutcome:
    """``autotune worker``: measure candidates of a study another machine created, with the local ``recipe``.

    Trust: the storage is data. Nothing read from it is executed: the model is built from the local recipe
    (its factory is imported here, as by ``autotune run``), and the worker refuses to join unless the study's
    fingerprint (:func:`autotune.study.fingerprint.study_fingerprint`: model file contents, inputs, resolved device,
    torch, hardware) is this recipe's on this machine. From the study it takes only the search space (variant
    names and batch sizes), and only variants the local recipe has.

    The creating ``autotune run`` stores its fingerprint when it opens the study but the search space only
    after its batch-boundary search, which can take minutes: a worker started in between waits for the space
    (within its time budget) instead of failing. Storage failures are :class:`InputError`.
    """
    with storage_errors(storage):
        return _join_study(recipe, storage, study_name or recipe.name, time_budget=time_budget, on_event=on_event,
                           clock=clock, sleep=sleep)


def _join_study(recipe: Recipe, storage: str, study_name: str, *, time_budget: float | None,
                on_event: OnEvent | None,
                clock: Callable[[], float], sleep: Callable[[float], None]) -> SearchOutcome:
    t0 = clock()
    study = load_existing_study(storage, study_name)
    shown = display_url(storage)
    budget = recipe.search.time_budget_s if time_budget is None else time_budget
    with Runner(fresh_measure=True) as runner:
        workload = validate(runner, recipe)
        fingerprint = study_fingerprint(recipe, workload.device)
        verify_join(study, _settings(recipe, storage=storage, study_name=study_name, time_budget=budget,
                                     fingerprint=fingerprint))
        attrs = study.user_attrs
        while "space" not in attrs:
            if clock() - t0 >= budget:
                raise InputError(f"--study: '{study_name}' in {shown} has no search space yet after {budget:g} s: "
                                 "the `autotune run` that created it is still finding batch boundaries, or it died "
                                 "before storing them; start the worker later or with a larger --time-budget")
            sleep(min(SPACE_POLL_S, max(0.0, budget - (clock() - t0))))
            attrs = study.user_attrs
        space = SearchSpace(variants=tuple(attrs["space"]),
                            batch_sizes={v: tuple(b) for v, b in attrs["space"].items()},
                            preferred={str(v): int(b) for v, b in (attrs.get("preferred") or {}).items()})
        unknown = [v for v in space.variants if v not in workload.specs]
        if unknown:
            raise InputError(f"{recipe.path}: the study '{study_name}' searches variants this recipe does not have "
                             f"here ({', '.join(unknown)}); join with the recipe the study was made with")
        budget -= clock() - t0
        recipe = replace(recipe, search=replace(recipe.search, time_budget_s=budget))
        settings = _settings(recipe, storage=storage, study_name=study_name, time_budget=budget,
                             fingerprint=fingerprint)
        search = Search(space, settings, _evaluator(runner, recipe, workload.specs),
                        specs=workload.specs)
        return _run_search(search, recipe, on_event=on_event)


def _settings(recipe: Recipe, *, storage: str, study_name: str, time_budget: float,
              fingerprint: Mapping[str, Any]) -> SearchSettings:
    return SearchSettings(
        objective=recipe.search.objective, constraints=recipe.constraints, storage=storage,
        study_name=study_name, recipe_fingerprint=fingerprint_digest(fingerprint), fingerprint=fingerprint,
        time_budget_s=max(0.0, time_budget), max_trials=recipe.search.max_trials, seed=recipe.search.seed,
        strategy=recipe.search.strategy, measure_seconds=recipe.measure.max_seconds,
    )


def _granularity(boundary: BoundaryOutcome, variant: str) -> int:
    return int((boundary.documents.get(variant) or {}).get("granularity") or 1)


def with_cli_overrides(recipe: Recipe, *, device: str | None, time_budget: float | None, seed: int | None
                       ) -> Recipe:
    changes: dict[str, Any] = {}
    if device is not None:
        changes["device"] = device
    search = recipe.search
    if time_budget is not None:
        if not (isinstance(time_budget, int | float) and math.isfinite(time_budget) and time_budget > 0):
            raise InputError(f"time_budget: expected a positive finite number of seconds, got {time_budget!r}")
        search = replace(search, time_budget_s=float(time_budget))
    if seed is not None:
        if not valid_seed(seed):
            raise InputError(f"seed: expected an integer {SEED_RANGE_TEXT}, got {seed!r}")
        search = replace(search, seed=seed)
    changes["search"] = search
    return replace(recipe, **changes)


#: ``VALIDATE_TIMEOUT``, ``ValidatedWorkload`` and ``validate`` are re-exported for callers that imported them
#: from here; they live in :mod:`autotune.validation`.
__all__ = ["VALIDATE_TIMEOUT", "AutotuneError", "RunOptions", "ValidatedWorkload", "run_tuning", "validate",
           "with_cli_overrides"]
