"""What the document means: the candidates ranked, and the sentences that explain the recommendation.

Every rendering (console, report.md, report.html) shows the same ranking and the same reasons,
so they are computed here once, as plain text; the renderers only lay them out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from autotune.candidate import pessimistic_score
from autotune.core.budget import SERVING_HOLD_GRACE
from autotune.core.process_env import environment_of_variant
from autotune.core.stats import BATCHES
from autotune.core.warmup.offline import SHORT_MIN
from autotune.report.canonical import normalise_report
from autotune.report.format import (
    candidate_label,
    ci_bounds,
    constrained_percentile,
    fmt_bytes,
    fmt_ms,
    fmt_percent,
    fmt_rate,
    fmt_sci,
    fmt_seconds,
    latency_ms,
    measured_candidates,
    no_steady_state,
    recipe_constraints,
    relative_half_width,
    short_list,
    study_objective,
    too_few_samples,
    wander_text,
)
from autotune.report.precision import cost_sentence, random_data_note
from autotune.report.schema import is_int, is_number

#: Order of statuses that were not measured, after the measured ones.
_UNMEASURED_ORDER = {"rejected": 0, "oom": 1, "pruned": 2, "failed": 3}
#: A CI half-width above this fraction of the mean is worth a warning.
_WIDE_CI = 0.05


def is_feasible(c: Mapping[str, Any]) -> bool:
    return c.get("status") == "ok" and c.get("feasible") is not False and not c.get("violations")


def same_candidate(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Is ``a`` the candidate ``b`` (by trial number when both have one)?"""
    if a is None or b is None:
        return False
    if a.get("trial") is not None and b.get("trial") is not None:
        return bool(a["trial"] == b["trial"])
    keys = ("variant", "batch_size", "precision", "memory_format", "threads")
    return all(a.get(key) == b.get(key) for key in keys)


def rank(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Candidates best first under the study's objective (see ``rank_candidates``)."""
    objective = study_objective(doc)
    latency_key = constrained_percentile(doc)
    front = set(doc.get("pareto") or [])
    verdict = (doc.get("showdown") or {}).get("verdict") or {}
    # the showdown's standing first: the pick, then the other finalists by their paired ratio to the leader
    standing = {str(s["key"]): (0 if s["key"] == verdict.get("pick") else 1, -float(s["ratio"]))
                for s in verdict.get("standings") or []}

    def key(c: Mapping[str, Any]) -> tuple[Any, ...]:
        trial = c.get("trial") if is_int(c.get("trial")) else 1 << 30
        tie = (trial, str(c.get("variant")), c.get("batch_size") or 0)
        if c.get("status") != "ok":
            return (2, _UNMEASURED_ORDER.get(str(c.get("status")), 9), 0, 0.0, *tie)
        group = 0 if is_feasible(c) else 1
        place = standing.get(f"{c.get('variant')}@{c.get('batch_size')}")
        if group == 0 and place is not None and c.get("repeat_of_trial") is None:
            return (-1, *place, 0.0, *tie)
        # The same rule as the recommendation (autotune.candidate.best_row): the pessimistic end
        # of the CI, so a noisy number cannot outrank a precise one by luck.
        if objective == "pareto":
            score = pessimistic_score(c, objective="throughput")
            return (group, 0 if c.get("trial") in front else 1, 0, score, *tie)
        score = pessimistic_score(c, objective=objective, latency_percentile=latency_key)
        return (group, 0, 0, score, *tie)

    return [dict(c) for c in sorted(doc.get("candidates") or [], key=key)]


def is_eager(c: Mapping[str, Any]) -> bool:
    """The default PyTorch execution: eager, fp32, contiguous, default threads."""
    if c.get("compiler") is not None or c.get("precision") is not None:
        return (
            c.get("compiler") in (None, "eager")
            and c.get("precision") in (None, "fp32", "float32")
            and c.get("memory_format") in (None, "contiguous", "contiguous_format")
            and c.get("threads") is None
            and environment_of_variant(str(c.get("variant") or "")).is_default  # eager+jemalloc is not plain
        )
    return c.get("variant") == "eager"


def _best(candidates: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    measured = measured_candidates(candidates)
    return max(measured, key=lambda c: c["throughput"]) if measured else None


def eager_comparison(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> str | None:
    """One sentence comparing the recommendation with eager at the same batch size."""
    candidates = doc.get("candidates") or []
    eager = [c for c in candidates if is_eager(c)]
    if is_eager(rec):
        return "This is plain eager PyTorch: no variant beat the default execution."
    batch = rec.get("batch_size")
    same_batch = [c for c in eager if c.get("batch_size") == batch]
    baseline = _best(same_batch)
    rate = rec.get("throughput")
    sd_value = rec.get("showdown")
    sd: Mapping[str, Any] = sd_value if isinstance(sd_value, Mapping) else {}
    p50_rec = latency_ms(rec, "p50")
    screens = False  # the figures compared are the screens', not the headline above the sentence
    if rec.get("throughput_source") in ("showdown", "artifact") and is_number(sd.get("screen_throughput")):
        # like for like: eager has only its screen, so the recommendation's screen is compared with it (its
        # headline, from the showdown's fresh processes or the artifact's plain ones, is another kind of
        # measurement)
        rate, screens = sd["screen_throughput"], True
    elif rec.get("throughput_source") == "artifact" and is_number(rec.get("measured_throughput")):
        rate, screens = rec["measured_throughput"], True  # decided by the search: its screen, as eager's
    if screens and rec.get("throughput_source") == "artifact":
        # the headline's latency is the artifact's plain processes'; the run's own stands beside eager's screen
        measured = rec.get("measured_latency_ms")
        p50_rec = latency_ms({"latency_ms": measured}, "p50") if isinstance(measured, Mapping) else None
    if baseline is not None and is_number(rate):
        speedup = rate / baseline["throughput"]
        text = (
            f"{speedup:.2f}× the throughput of eager at batch {batch} "
            f"({fmt_rate(rate)} vs {fmt_rate(baseline['throughput'])} samples/s"
            + (", screen against screen)" if screens else ")")
        )
        p50_base = latency_ms(baseline, "p50")
        if p50_rec is not None and p50_base is not None:
            text += f"; p50 latency {fmt_ms(p50_rec)} ms vs {fmt_ms(p50_base)} ms"
        mem_rec, mem_base = rec.get("peak_memory_bytes"), baseline.get("peak_memory_bytes")
        if is_number(mem_rec) and is_number(mem_base):
            text += f"; peak memory {fmt_bytes(mem_rec)} vs {fmt_bytes(mem_base)}"
        return text + "."
    unmeasured = next((c for c in same_batch if c.get("status") != "ok"), None)
    best_eager = _best(eager)
    text = f"Eager was not measured at batch {batch}" + (
        f" ({unmeasured['status']}: {unmeasured.get('reason') or 'no reason given'})"
        if unmeasured
        else " (not tried)"
    )
    if best_eager is not None and is_number(rate):
        text += (
            f"; against the best eager configuration (batch {best_eager['batch_size']}, "
            f"{fmt_rate(best_eager['throughput'])} samples/s) it is "
            f"{rate / best_eager['throughput']:.2f}× faster"
        )
    return text + "."


def compile_payback(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> str | None:
    """How many samples the recommendation must serve before its extra build time is repaid against eager
    at the same batch size, at the measured throughputs (None when there is nothing to compare).

        extra  = build + first call of the recommendation - those of eager
        saving = 1 / eager throughput - 1 / its throughput        (seconds saved per sample)
        payback = extra / saving samples, served in payback / its throughput seconds
    """
    if is_eager(rec):
        return None
    batch = rec.get("batch_size")
    eager = _best([c for c in doc.get("candidates") or [] if is_eager(c) and c.get("batch_size") == batch])
    rate, build = rec.get("throughput"), rec.get("compile_seconds")
    if eager is None or not is_number(rate) or not is_number(build):
        return None
    eager_build = eager.get("compile_seconds")
    base_build = float(eager_build) if is_number(eager_build) else 0.0
    extra = max(0.0, float(build) - base_build)
    saving = 1.0 / eager["throughput"] - 1.0 / rate
    if saving <= 0:
        return (f"Compile payback: never: it is not faster than eager at batch {rec.get('batch_size')}, "
                f"and its build and first call take {extra:.1f} s more.")
    samples = extra / saving
    seconds = samples / rate
    if seconds < 120:
        when = f"{seconds:.1f} s"
    else:
        when = f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
    return (f"Compile payback: its build and first call take {extra:.1f} s more than eager's; at the measured "
            f"throughputs that is repaid after {fmt_rate(samples)} samples ({when} of serving).")


def _runner_up(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> str | None:
    ranked = [c for c in rank(doc) if is_feasible(c) and not same_candidate(c, rec)]
    if not ranked:
        return None
    other = ranked[0]
    objective = study_objective(doc)
    if objective == "latency":
        key = constrained_percentile(doc)
        a, b = latency_ms(rec, key), latency_ms(other, key)
        if a is None or b is None or not a:
            return None
        return (
            f"Runner-up: {candidate_label(other)} at {key} {fmt_ms(b)} ms ({(b / a - 1) * 100:+.1f}% vs "
            f"{fmt_ms(a)} ms)."
        )
    verdict = (doc.get("showdown") or {}).get("verdict") or {}
    standings = {str(s["key"]): s for s in verdict.get("standings") or []}
    theirs = standings.get(f"{other.get('variant')}@{other.get('batch_size')}")
    ours = standings.get(f"{rec.get('variant')}@{rec.get('batch_size')}")
    if rec.get("decided_by") == "showdown" and theirs is not None and ours is not None:
        # both in the showdown: its paired ratios, not the screens, say how they compare
        lo, hi = theirs["ratio_ci"]
        floor = 1.0 - float(verdict.get("margin") or 0.0)
        text = (f"Runner-up in the showdown: {candidate_label(other)} at {theirs['ratio']:.3f}x the leader "
                f"(paired 95% CI {lo:.3f}-{hi:.3f}; the recommendation {ours['ratio']:.3f}x).")
        if lo < floor <= hi:
            text += " Its CI straddles the margin: the rounds could not separate the two."
        elif theirs.get("tied"):
            text += " Within the margin: a tie, broken by the tie-break."
        else:
            text += " Its CI lies below the margin: slower."
        return text
    rate, other_rate = rec.get("throughput"), other.get("throughput")
    if not (is_number(rate) and is_number(other_rate)) or not rate:
        return None
    text = (
        f"Runner-up: {candidate_label(other)} at {fmt_rate(other_rate)} samples/s "
        f"({(other_rate / rate - 1) * 100:+.1f}%)."
    )
    ci_a, ci_b = ci_bounds(rec), ci_bounds(other)
    if ci_a is not None and ci_b is not None:
        if ci_a[0] <= ci_b[1] and ci_b[0] <= ci_a[1]:
            text += (
                " Their 95% confidence intervals overlap: on this machine the two are not "
                "distinguishable, prefer the simpler one if that matters."
            )
        else:
            text += " The confidence intervals do not overlap."
    return text


def why_points(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> list[str]:
    """The reasons to trust (or distrust) the recommendation, in plain text."""
    points: list[str] = []
    comparison = eager_comparison(doc, rec)
    if comparison:
        points.append(comparison)
    payback = compile_payback(doc, rec)
    if payback:
        points.append(payback)
    runner = _runner_up(doc, rec)
    if runner:
        points.append(runner)
    correctness = rec.get("correctness")
    if isinstance(correctness, Mapping) and correctness.get("by") == "accuracy budget":
        pass  # a lower-precision pick: the accuracy budget judged it, and cost_sentence says what it costs
    elif isinstance(correctness, Mapping):
        if correctness.get("passed"):
            details = ", ".join(
                f"{label} {fmt(correctness[key])}"
                for key, label, fmt in (
                    ("max_abs_error", "max abs error", fmt_sci),
                    ("max_rel_error", "max rel error", fmt_sci),
                    ("min_cosine", "min cosine", lambda v: f"{v:.6f}"),
                )
                if is_number(correctness.get(key))
            )
            batches = correctness.get("batches")
            points.append(
                "Outputs match the eager fp32 reference"
                + (f" ({details}" + (f", {batches} batches)" if batches else ")") if details else "")
                + "."
            )
        else:
            points.append(
                f"Correctness check did not pass: {correctness.get('reason') or 'no reason given'}."
            )
    elif not is_eager(rec):
        points.append("No correctness check was recorded for this configuration.")
    constraints = recipe_constraints(doc)
    checks = []
    if is_number(constraints.get("max_latency_ms")):
        key = constrained_percentile(doc)
        checks.append(
            f"{key} {fmt_ms(latency_ms(rec, key))} ms (limit {fmt_ms(constraints['max_latency_ms'])} ms)"
        )
    if is_number(constraints.get("max_memory_bytes")):
        checks.append(
            f"peak memory {fmt_bytes(rec.get('peak_memory_bytes'))} "
            f"(limit {fmt_bytes(constraints['max_memory_bytes'])})"
        )
    if checks:
        verdict = "Meets the constraints" if is_feasible(rec) else "Violates the constraints"
        points.append(f"{verdict}: {'; '.join(checks)}.")
    boundary = (doc.get("batch_boundary") or {}).get(rec.get("variant"))
    if isinstance(boundary, Mapping) and is_int(boundary.get("max_batch_size")):
        usable = boundary.get("usable_max_batch_size")
        points.append(
            f"Largest batch that fits for {rec.get('variant')}: {boundary['max_batch_size']}"
            + (f" (usable with headroom: {usable})" if is_int(usable) else "")
            + "."
        )
    cost = cost_sentence(doc, rec)
    if cost is not None:
        points.append(cost)
    points.append(_steadiness(rec, _screen_of(doc, rec)))
    return points


def _screen_of(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The recommendation's own row among the candidates: its screen, whose figures the showdown or the artifact
    check may have replaced in the recommendation."""
    for c in doc.get("candidates") or []:
        if isinstance(c, Mapping) and all(c.get(k) == rec.get(k) for k in ("trial", "variant", "batch_size")):
            return c
    return None


def _steadiness(c: Mapping[str, Any], screen: Mapping[str, Any] | None = None) -> str:
    """The measurement's steady state and its precision: both of the screen that timed it (its samples, its CI),
    not of the figures the showdown or the artifact check put in the recommendation afterwards."""
    classification = c.get("classification")
    warmup = c.get("warmup_iterations")
    replaced = c.get("throughput_source") not in (None, "search")
    half = relative_half_width(screen) if screen is not None else None if replaced else relative_half_width(c)
    samples = c.get("samples")
    stopped = f" (stopped by {c['stopped_by']})" if c.get("stopped_by") else ""
    if half is not None:
        precision = f"95% CI half-width {fmt_percent(half)}" + (f" from {samples} samples{stopped}" if samples else "")
    elif samples:
        precision = f"{samples} samples{stopped}" + ("" if replaced else ", no CI recorded")
    else:
        precision = "no CI recorded"
    few = too_few_samples(c)
    if few is not None:
        return (f"No steady state could be told: the measurement's budget held {few} samples, fewer than the "
                f"{SHORT_MIN} a verdict needs, so the throughput is an average of the last half of them ({precision}); "
                "a longer measure.max_seconds would say whether they settle.")
    if classification == "no_steady_state":
        return (
            f"No steady state was reached: the timings kept drifting, so the throughput is an "
            f"average of the last half of a moving series, not a stable rate ({precision}"
            + (f"; the interval is of {BATCHES} batch means, so the drift is in it"
               if is_int(samples) and samples >= 4 * BATCHES else "") + ")."  # core.measurement: 2 per batch, half
        )
    if classification == "slowdown":
        return f"The timings slowed down after warmup (classification slowdown); {precision}."
    wander = wander_text(c)
    if wander is not None:
        precision = f"{wander}; {precision}"
    if warmup is not None:
        return (
            f"Steady state after {warmup} warmup iterations (classification {classification}); {precision}."
        )
    return f"Steady state: {classification or 'not classified'}; {precision}."


_MEASURED_VALUE = re.compile(
    r"^(?P<what>.*?)\s+[-+]?[\d.,]+(?:e[-+]?\d+)?\s*(?:ms|B|KiB|MiB|GiB|%)?\s*(?P<op>[<>]=?)"
)


def violation_kind(violation: str) -> str:
    """``p99 latency 28 ms > SLO 0.5 ms`` -> ``p99 latency > SLO 0.5 ms``: the measured value
    dropped, so that candidates breaking the same limit fall into one group."""
    match = _MEASURED_VALUE.match(violation)
    return f"{match['what']} {violation[match.start('op') :]}" if match else violation


def failure_groups(candidates: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """Unmeasured or infeasible candidates grouped by (status, reason): why nothing else won.

    Constraint violations are grouped by the limit they break, not by the measured value."""
    groups: dict[tuple[str, str], list[str]] = {}
    for c in candidates:
        if c.get("status") == "ok":
            if is_feasible(c):
                continue
            kinds = [violation_kind(v) for v in c.get("violations") or []]
            status, reason = "violates", "; ".join(kinds) or "infeasible"
        else:
            status, reason = str(c.get("status")), c.get("reason") or "no reason given"
        groups.setdefault((status, reason), []).append(candidate_label(c))
    return [(status, reason, labels) for (status, reason), labels in groups.items()]


def _derived_notes(doc: Mapping[str, Any]) -> list[str]:
    """Warnings computed from the candidates, and the candidates' own build notes (each once,
    with the variants it concerns), added after the document's notes."""
    candidates = doc.get("candidates") or []
    measured = [c for c in candidates if c.get("status") == "ok"]
    own = " ".join(doc.get("notes") or []).lower()
    notes = []
    checks: list[tuple[Callable[[Mapping[str, Any]], bool], str, str]] = [
        (
            no_steady_state,
            "no steady state",
            "never reached a steady state; their numbers are averages of drifting timings",
        ),
        (
            lambda c: c.get("classification") == "slowdown",
            "slowdown",
            "slowed down after warmup (classification slowdown)",
        ),
        (
            lambda c: (relative_half_width(c) or 0) > _WIDE_CI,
            "ci wider",
            f"have a 95% CI wider than ±{_WIDE_CI:.0%}: the machine was noisy or the budget short",
        ),
        (
            lambda c: is_int(c.get("recompiles")) and c["recompiles"] > 0,
            "recompile",
            "recompiled during measurement (the timings include compilation)",
        ),
    ]
    for predicate, phrase, message in checks:
        hits = [candidate_label(c) for c in measured if predicate(c)]
        if hits and phrase not in own:  # the orchestrator may have said so already
            notes.append(f"{len(hits)} measured candidate(s) {message}: {short_list(hits)}.")
    by_note: dict[str, list[str]] = {}
    for c in candidates:
        for note in c.get("notes") or []:
            variants = by_note.setdefault(str(note), [])
            if c.get("variant") not in variants:
                variants.append(str(c.get("variant")))
    for note, variants in by_note.items():
        if note.lower() not in own:
            notes.append(f"{note} ({short_list(variants)})")
    return notes


def _trials_text(search: Mapping[str, Any]) -> str | None:
    """"6 trials (5 measured this run)": the study's trials, and this run's measured ones when they differ (a trial
    the budget cut, one pruned, or a resumed study's earlier trials)."""
    if not is_int(search.get("trials")):
        return None
    text = f"{search['trials']} trials"
    measured = search.get("measured_this_run")
    if is_int(measured) and measured != search["trials"]:
        text += f" ({measured} measured this run)"
    return text


def search_summary(doc: Mapping[str, Any]) -> str:
    search = doc.get("search") or {}
    incomplete = None
    if doc.get("complete") is False:  # a run's document as it goes (absent: an older report, complete)
        how = "interrupted" if doc.get("interrupted") else "still running or killed"
        incomplete = f"INCOMPLETE ({how} in its {doc.get('phase') or 'unknown'} phase)"
    parts = [
        incomplete,
        _trials_text(search),
        # the search's own seconds: wall_seconds is the whole run's (the serving stage too), and "Search: 6 trials
        # in 229 s" beside "Time: ... search 76 s" read as a contradiction (session 32)
        f"in {fmt_seconds(search['search_seconds'])}" if is_number(search.get("search_seconds"))
        else f"in {fmt_seconds(search['wall_seconds'])}" if is_number(search.get("wall_seconds")) else None,
        f"sampler {search['sampler']}" if search.get("sampler") else None,
        f"objective {study_objective(doc)}",
        f"stopped: {search['stopped_by']}" if search.get("stopped_by") else None,
    ]
    return ", ".join(p for p in parts if p)


def _against_promise(seconds: float, promise: float) -> tuple[str, str, str]:
    """Seconds and promise as printed, and "within" or "OVER": whole seconds, or tenths where whole ones would
    read the same on both sides of the promise (a report said "66 s ... OVER its promise of 66 s")."""
    kept = "within" if seconds <= promise else "OVER"
    digits = 1 if f"{seconds:.0f}" == f"{promise:.0f}" and kept == "OVER" else 0
    return f"{seconds:.{digits}f}", kept, f"{promise:.{digits}f}"


def budget_summary(doc: Mapping[str, Any]) -> str | None:
    """The time budget's line: the run's seconds against its budget and promise, and each phase's (None for a
    report without a ``budget`` section: an older version, or a document rebuilt without a run)."""
    budget = doc.get("budget")
    if not isinstance(budget, Mapping) or not is_number(budget.get("time_budget_s")) \
            or not is_number(budget.get("wall_seconds")):
        return None
    raw = budget.get("phases")
    phases: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    own = ", ".join(f"{name} {v:.0f} s" for name, v in phases.items() if name != "serving" and is_number(v))
    promise = budget.get("promise_s")
    wall, held = f"{budget['wall_seconds']:.0f}", ""
    if is_number(promise):
        wall, kept, said = _against_promise(budget["wall_seconds"], promise)
        held = f" ({kept} its promise of {said} s)"
    line = f"{wall} s of a {budget['time_budget_s']:g}-s budget{held}"
    if own:
        line += f": {own}"
    if is_number(phases.get("serving")):
        recipe = doc.get("recipe")
        serving = recipe.get("serving") if isinstance(recipe, Mapping) else None
        own_budget = serving.get("time_budget_s") if isinstance(serving, Mapping) else None
        if is_number(own_budget) and own_budget > 0:
            promise_s = (1 + SERVING_HOLD_GRACE) * own_budget  # the pick's hold may run past the stage's budget
            took, kept, said = _against_promise(phases["serving"], promise_s)
            line += f"; then serving {took} s of its own {own_budget:g}-s budget ({kept} its promise of {said} s)"
        else:
            line += f"; then serving {phases['serving']:.0f} s (its own budget)"
    return line


def constraints_text(doc: Mapping[str, Any]) -> str | None:
    constraints = recipe_constraints(doc)
    parts = []
    if is_number(constraints.get("max_latency_ms")):
        parts.append(f"{constrained_percentile(doc)} latency ≤ {constraints['max_latency_ms']:g} ms")
    if is_number(constraints.get("max_memory_bytes")):
        parts.append(f"peak memory ≤ {fmt_bytes(constraints['max_memory_bytes'])}")
    return ", ".join(parts) if parts else None


def all_notes(doc: Mapping[str, Any]) -> list[str]:
    """The document's own notes, then the derived ones."""
    random = random_data_note(doc)
    return [*(doc.get("notes") or []), *([random] if random else []), *_derived_notes(doc)]


def rank_candidates(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Candidates best first under the study's objective.

    Order: the showdown's finalists (the pick, then by paired ratio to the leader), measured and feasible
    (by the objective), measured but violating a constraint
    (same order), then unmeasured by status (rejected, oom, pruned, failed), each by trial.
    Within the measured groups the order is ``candidate.pessimistic_score`` (the recommendation
    is chosen the same way). Objectives: ``throughput`` - lower 95% CI bound of samples/s
    descending; ``latency`` - the recipe's ``constraints.latency_percentile`` (p99) ascending;
    ``pareto`` - members of the Pareto front first, each group by throughput. Ties: by trial number.
    """
    return rank(normalise_report(doc))
