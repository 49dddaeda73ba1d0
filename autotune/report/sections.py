"""The content report.md and report.html share: the tables' rows and the short texts around them.

Both files show the same facts in the same order; building the rows here keeps the two
renderers to layout only (markdown pipes versus HTML cells and badges).

Why one module (~450 lines): it is the report's table of contents. Each function is one section
(headline, candidates, environment, recipe, boundaries, showdown, artifact, profile), in the order both
files show them, and none calls another's. Splitting it by section would give each renderer a dozen
imports and gain no concept. The traffic's sections (the ``data`` section, candidates by input shape) are
in :mod:`autotune.report.traffic`, which the console shares too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from autotune.core.contention import busy
from autotune.core.variant_names import VariantSpec
from autotune.errors import InputError
from autotune.report.analysis import constraints_text, is_feasible, rank, same_candidate
from autotune.report.format import (
    DASH,
    bimodal_note,
    ci_text,
    fmt_bytes,
    fmt_ms,
    fmt_rate,
    fmt_seconds,
    latency_ms,
    no_steady_state,
    relative_half_width,
    wander_text,
)
from autotune.report.precision import accuracy_cell, cost_sentence, has_precision_facts, size_cell
from autotune.report.reproduce import py_call
from autotune.report.schema import SCHEMA_VERSION, is_int, is_number
from autotune.report.shipped import shipped_sentence
from autotune.report.traffic import shapes_cell, traffic_of, traffic_summary
from autotune.showdown.verdict import busy_text, undecided_keys, verdict_text


def _decided_by(rec: Mapping[str, Any]) -> str:
    sd = rec.get("showdown")
    if rec.get("decided_by") != "showdown" or not isinstance(sd, Mapping):
        return "the search's ranking (lower CI bound of each single measurement)"
    lo, hi = sd["ratio_ci"]
    text = (f"showdown over {sd['rounds']} interleaved rounds: {sd['ratio_to_leader']:.3f}x the leader "
            f"(95% CI {lo:.3f}-{hi:.3f})")
    if sd.get("undecided"):
        text = (f"undecided: {', '.join(sd['undecided'])} could not be separated from the leader "
                f"{sd.get('leader')} at {sd['margin']:.0%} when the rounds ran out; picked by "
                f"{sd.get('how_picked') or 'the tie-break'} ({text})")
    elif sd.get("tied_with"):
        text += f"; tie within {sd['margin']:.0%} with {', '.join(sd['tied_with'])}, broken by the tie-break"
    if rec.get("throughput_source") == "showdown" and is_number(sd.get("screen_throughput")):
        text += (f"; throughput is the median of its rounds in fresh processes (the search's screen in a "
                 f"reused worker: {fmt_rate(sd['screen_throughput'])})")
    elif rec.get("throughput_source") == "artifact" and is_number(rec.get("measured_throughput")):
        where = ("the showdown's fresh processes" if rec.get("measured_throughput_source") == "showdown"
                 else "the run")
        text += (f"; throughput is the artifact's in plain processes ({where}: "
                 f"{fmt_rate(rec['measured_throughput'])}"
                 + (f", the search's screen: {fmt_rate(sd['screen_throughput'])}" if is_number(
                     sd.get("screen_throughput")) else "") + ")")
    return text


def showdown_standings(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The showdown's standing of each finalist by ``variant@batch`` (empty without a verdict)."""
    verdict = (doc.get("showdown") or {}).get("verdict") or {}
    return {str(s["key"]): s for s in verdict.get("standings") or []}


def showdown_cell(c: Mapping[str, Any], standings: Mapping[str, Mapping[str, Any]]) -> str:
    """A candidate's showdown ratio to the leader with its paired CI ("" for a row not in the showdown)."""
    s = standings.get(f"{c.get('variant')}@{c.get('batch_size')}")
    if s is None or c.get("status") != "ok":
        return ""
    lo, hi = s["ratio_ci"]
    return f"{s['ratio']:.3f} ({lo:.3f}-{hi:.3f})" + (" ?" if s.get("undecided") else "")


def decided_cell(c: Mapping[str, Any], standings: Mapping[str, Mapping[str, Any]]) -> str:
    """Which number placed the row: the showdown's ratio (finalists) or the screen (everyone else)."""
    if c.get("status") != "ok":
        return DASH
    return "showdown" if f"{c.get('variant')}@{c.get('batch_size')}" in standings else "screen"


def candidate_rows(doc: Mapping[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """Headers, rows and the status of each row of the full candidates table (md and html).

    A ``shapes`` column (shape policy, shapes served, recompiles) follows ``batch`` when some candidate was
    measured on ``[data]`` traffic; its per-shape numbers are :func:`autotune.report.traffic.traffic_rows`.
    """
    rec = doc.get("recommendation")
    ranked = rank(doc)
    traffic = any(traffic_of(c) is not None for c in ranked)
    standings = showdown_standings(doc)
    headers = [
        "#",
        "trial",
        "variant",
        "batch",
        "status",
        *(["showdown vs leader (95% CI)", "decided by"] if standings else []),
        "samples/s" + (" (screen)" if standings else ""),
        "95% CI",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "peak memory",
        "compile",
        "warmup",
        "steady state",
        "correct",
        "notes",
    ]
    if traffic:
        headers.insert(headers.index("batch") + 1, "shapes")
    precision = has_precision_facts(doc)  # lower precision or an [accuracy] recipe: model size and accuracy
    if precision:
        headers[headers.index("correct") + 1:headers.index("correct") + 1] = ["model size", "accuracy"]
    rows, statuses = [], []
    for index, c in enumerate(ranked, start=1):
        measured = c.get("status") == "ok"
        notes = []
        if c.get("reason"):
            notes.append(str(c["reason"]))
        notes += [f"violates: {v}" for v in c.get("violations") or []]
        if is_int(c.get("recompiles")) and c["recompiles"] > 0:
            notes.append(f"{c['recompiles']} recompile(s)")
        if busy(c.get("foreign_cores")):
            notes.append(f"other processes used {c['foreign_cores']:.1f} core(s) while it was measured")
        if bimodal_note(c):
            notes.append(str(bimodal_note(c)))
        correctness = c.get("correctness")
        if isinstance(correctness, Mapping):
            correct = "pass" if correctness.get("passed") else "FAIL"
            if not correctness.get("passed") and correctness.get("reason") and not c.get("reason"):
                notes.append(str(correctness["reason"]))
        else:
            correct = DASH
        warmup = c.get("warmup_iterations")
        rows.append(
            [
                f"{index}{' ★' if same_candidate(c, rec) else ''}",
                str(c.get("trial")) if c.get("trial") is not None else DASH,
                str(c.get("variant")),
                str(c.get("batch_size")),
                *([shapes_cell(c)] if traffic else []),
                str(c.get("status")) + ("" if not measured or is_feasible(c) else " (infeasible)"),
                *([showdown_cell(c, standings) or DASH, decided_cell(c, standings)] if standings else []),
                (("~" if no_steady_state(c) else "") + fmt_rate(c.get("throughput")))
                if measured
                else DASH,
                ci_text(c) if measured else DASH,
                fmt_ms(latency_ms(c, "p50")),
                fmt_ms(latency_ms(c, "p90")),
                fmt_ms(latency_ms(c, "p99")),
                fmt_bytes(c.get("peak_memory_bytes")),
                fmt_seconds(c.get("compile_seconds")),
                str(warmup) if warmup is not None else DASH,
                str(c.get("classification") or DASH),
                correct,
                *([size_cell(c), accuracy_cell(c)] if precision else []),
                "; ".join(notes),
            ]
        )
        statuses.append("infeasible" if measured and not is_feasible(c) else str(c.get("status")))
    return headers, rows, statuses


def headline(rec: Mapping[str, Any], doc: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(label, value) pairs of the recommendation (with ``doc``: what it costs in accuracy, where the run has
    precision facts to tell)."""
    half = relative_half_width(rec)
    rate = fmt_rate(rec.get("throughput")) + " samples/s"
    if half is not None:
        rate += f" (±{100 * half:.1f}%, 95% CI {ci_text(rec)})"
    defaults = {
        "compiler": str(rec.get("variant")).partition("+")[0].partition(":")[0],
        "compile_mode": "default",
        "precision": "fp32",
        "memory_format": "contiguous",
    }
    settings = ", ".join(
        f"{label} {rec[key]}"
        for key, label in (
            ("compiler", "compiler"),
            ("compile_mode", "mode"),
            ("precision", "precision"),
            ("memory_format", "memory format"),
            ("threads", "threads"),
        )
        if rec.get(key) is not None and rec.get(key) != defaults.get(key)
    )
    pairs = [
        ("variant", str(rec.get("variant")) + (f" ({settings})" if settings else "")),
        ("batch size", str(rec.get("batch_size"))),
        ("throughput", rate),
        *([("as shipped", shipped)] if (shipped := shipped_sentence(doc) if doc is not None else None) else []),
        (
            "latency per batch",
            f"p50 {fmt_ms(latency_ms(rec, 'p50'))} ms, p90 {fmt_ms(latency_ms(rec, 'p90'))} ms, "
            f"p99 {fmt_ms(latency_ms(rec, 'p99'))} ms (mean {fmt_ms(latency_ms(rec, 'mean'))} ms)"
            + (f"; {latency_label(rec)}" if latency_label(rec) else ""),
        ),
        ("peak memory", fmt_bytes(rec.get("peak_memory_bytes"))),
        ("decided by", _decided_by(rec)),
        ("compile + first call", fmt_seconds(rec.get("compile_seconds"))),
        (
            "warmup",
            (f"{rec['warmup_iterations']} iterations" if rec.get("warmup_iterations") is not None else DASH)
            + f", classification {rec.get('classification') or DASH}"
            + (f"; {wander_text(rec)}" if wander_text(rec) else ""),
        ),
    ]
    traffic = traffic_summary(rec)
    if traffic is not None:
        pairs.append(("traffic", traffic))
    cost = cost_sentence(doc, rec) if doc is not None else None
    if cost is not None:
        pairs.append(("accuracy", cost))
        if rec.get("model_bytes") is not None:
            pairs.append(("model size", size_cell(rec)))
    return pairs


def environment_rows(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fingerprint flattened to (key, value) rows; GPUs one row each; unknowns left out."""
    rows: list[tuple[str, str]] = []

    def show(value: Any) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) if value else DASH
        return str(value)

    for key in sorted(env):
        value = env[key]
        if key == "gpus" and isinstance(value, list):
            for index, gpu in enumerate(value):
                if isinstance(gpu, Mapping):
                    parts = [
                        str(gpu.get("name") or "GPU"),
                        fmt_bytes(gpu.get("memory_total_bytes")),
                        f"capability {gpu.get('capability')}" if gpu.get("capability") else "",
                        f"driver {gpu.get('driver_version')}" if gpu.get("driver_version") else "",
                    ]
                    rows.append((f"gpu {index}", ", ".join(p for p in parts if p and p != DASH)))
        elif isinstance(value, Mapping):
            for sub in sorted(value):
                if value[sub] is not None:
                    rows.append((f"{key}.{sub}", show(value[sub])))
        elif value is not None:
            rows.append((key, fmt_bytes(value) if key.endswith("_bytes") else show(value)))
    return rows


def recipe_rows(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The recipe as (field, value) rows: model call and inputs spelled out, sections flattened
    (``search.variants``, ``batch.headroom``...), then where the study is stored."""
    recipe = doc.get("recipe") or {}
    rows: list[tuple[str, str]] = []

    def show(value: Any) -> str:
        if isinstance(value, list):
            return ", ".join(map(str, value)) if value else DASH
        return str(value)

    for key in ("path", "name", "device", "device_resolved"):
        if recipe.get(key) is not None:
            rows.append((key, str(recipe[key])))
    model = recipe.get("model")
    if isinstance(model, Mapping):
        rows.append(("model", py_call(str(model.get("factory")), model.get("kwargs"))))
    for spec in recipe.get("inputs") or []:
        shape = "×".join(str(d) for d in spec.get("shape") or [])
        vocab = f", vocab {spec['vocab_size']}" if spec.get("vocab_size") else ""
        rows.append(
            (f"input {spec.get('name') or ''}".strip(), f"batch×{shape} {spec.get('dtype') or ''}{vocab}")
        )
    rows.append(("constraints", constraints_text(doc) or "none"))
    skip = {"path", "name", "device", "device_resolved", "model", "inputs", "description", "constraints"}
    for key in sorted(k for k in recipe if k not in skip):
        value = recipe[key]
        if isinstance(value, Mapping):
            rows += [(f"{key}.{sub}", show(value[sub])) for sub in sorted(value) if value[sub] is not None]
        elif value is not None:
            rows.append((key, show(value)))
    workload = doc.get("workload")
    if isinstance(workload, Mapping):  # what the worker found when it built the model
        rows += [
            (f"workload.{key}", show(workload[key])) for key in sorted(workload) if workload[key] is not None
        ]
    search = doc.get("search") or {}
    for key in ("study_name", "storage"):
        if search.get(key):
            rows.append((f"study {key.removeprefix('study_')}", str(search[key])))
    return rows


def boundary_summary(variant: str, entry: Mapping[str, Any]) -> str:
    parts = []
    if entry.get("stopped_by") in ("throughput", "probe_cap", "time_cap") and entry.get("summary"):
        parts.append(str(entry["summary"]))  # a limited search: what was probed, what only the model predicts
    elif is_int(entry.get("max_batch_size")):
        parts.append(f"largest batch that fits: **{entry['max_batch_size']}**")
    else:
        parts.append("largest batch that fits: unknown")
    if is_int(entry.get("usable_max_batch_size")):
        headroom = entry.get("headroom")
        parts.append(
            f"usable: {entry['usable_max_batch_size']}"
            + (f" ({headroom:.0%} headroom)" if is_number(headroom) else "")
        )
    if is_number(entry.get("memory_limit_bytes")):
        parts.append(f"limit {fmt_bytes(entry['memory_limit_bytes'])}")
    model = entry.get("model")
    if isinstance(model, Mapping):
        parts.append(
            f"fitted memory ≈ {fmt_bytes(model['intercept_bytes'])} + "
            f"{fmt_bytes(model['bytes_per_sample'])} × batch"
        )
    if entry.get("memory_measured_by"):
        parts.append(f"measured as {entry['memory_measured_by']}")
    if is_int(entry.get("granularity")) and entry.get("granularity_source"):
        parts.append(f"granularity {entry['granularity']} ({entry['granularity_source']})")
    if entry.get("footprint"):
        parts.append(str(entry["footprint"]))
    return "; ".join(parts)


def probe_rows(entry: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            str(p.get("batch_size")),
            "yes" if p.get("fits") else "no",
            fmt_bytes(p.get("peak_memory_bytes")),
            fmt_seconds(p.get("seconds")),
            str(p.get("error") or ""),
        ]
        for p in sorted(entry.get("probes") or [], key=lambda p: p.get("batch_size") or 0)
    ]


PROBE_HEADERS = ["batch", "fits", "peak memory", "time", "error"]


def title(doc: Mapping[str, Any]) -> str:
    recipe = doc.get("recipe") or {}
    return f"autotune report: {recipe.get('name') or recipe.get('path') or 'unnamed recipe'}"


def byline(doc: Mapping[str, Any]) -> str:
    tool = doc.get("tool") or {}
    parts = [
        f"{tool.get('name') or 'autotune'} {tool.get('version') or ''}".strip(),
        f"report schema {doc.get('schema', SCHEMA_VERSION)}",
    ]
    if doc.get("created"):
        parts.insert(0, str(doc["created"]))
    return " · ".join(parts)



SHOWDOWN_HEADERS = ["finalist", "vs leader", "95% CI (paired)", "tie", "between rounds", "between processes",
                    "within window"]


def showdown_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """One row per finalist of the showdown: its paired ratio to the leader, the tie, the spreads.

    "between rounds" is the coefficient of variation of the finalist's per-round result within a process;
    "between processes" that of its processes' means (what one fresh process's luck does to all its rounds);
    "within window" the relative 95% CI half-width of its single search measurement. The first two are what
    the paired CI is made of, the last what one window can see. "tie" says "undecided" for a finalist whose
    CI still straddled 1 - margin when the rounds ran out.
    """
    showdown = doc.get("showdown") or {}
    verdict = showdown.get("verdict") or {}
    by_key = {f"{c.get('variant')}@{c.get('batch_size')}": c for c in doc.get("candidates") or []
              if c.get("status") == "ok"}
    open_keys = set(undecided_keys(verdict)) if verdict else set()
    rows = []
    for s in verdict.get("standings") or []:
        c = by_key.get(s["key"], {})
        half = relative_half_width(c) if c else None
        mark = " ★" if s["key"] == verdict.get("pick") else ""
        lo, hi = s["ratio_ci"]
        between = s.get("process_spread")
        rows.append([
            s["key"] + mark,
            f"{s['ratio']:.3f}",
            f"{lo:.3f}-{hi:.3f}",
            "undecided" if s["key"] in open_keys else ("yes" if s["tied"] else "no"),
            f"±{100 * s['round_spread']:.1f}%",
            f"±{100 * between:.1f}%" if is_number(between) else DASH,
            f"±{100 * half:.1f}%" if half is not None else DASH,
        ])
    for key, reason in (showdown.get("dropped") or {}).items():
        rows.append([key, DASH, DASH, DASH, DASH, DASH, f"dropped: {reason}"])
    return rows


def candidates_caption(doc: Mapping[str, Any], objective: str) -> str:
    """The sentence above the candidates table: its order, and which numbers decided."""
    if showdown_standings(doc):
        return ("The showdown's finalists first, the pick then the others by their paired ratio to the leader "
                "(fresh processes, interleaved rounds: these numbers decided among them; ? = undecided), then the "
                f"rest by the objective ({objective}) on the search's screen (one window in a reused worker: "
                "these numbers chose the finalists). ★ marks the recommendation, ~ a throughput without a "
                "steady state.")
    return (f"Best first by the objective ({objective}); ★ marks the recommendation, ~ a throughput without a "
            "steady state.")


def showdown_summary(doc: Mapping[str, Any], *, busy: bool = True) -> str | None:
    """How the recommendation was decided (None when there was no showdown): a busy machine first, then how the
    finalists were compared, then the verdict (:func:`autotune.showdown.verdict_text`, the text stored in
    report.json). ``busy=False``: without the busy-machine warning (the console has said it first already)."""
    showdown = doc.get("showdown") or {}
    verdict = showdown.get("verdict")
    if not verdict:
        return None
    n = len(verdict.get("standings") or [])
    processes = int(showdown.get("processes_used") or showdown.get("processes") or 1)
    parts = [t for t in (busy_text(showdown) if busy else None,) if t]
    text = (f"Showdown: {n} finalist{'s' if n != 1 else ''} compared over {verdict['rounds']} randomized interleaved "
            f"rounds of {showdown.get('round_seconds') or 0:g} s in {processes} fresh process"
            f"{'es' if processes != 1 else ''} each; winner by a paired ratio over rounds, its CI resampling "
            "processes, then rounds.")
    if showdown.get("quiet"):
        text += " While one finalist was timed, every other staged worker was stopped (SIGSTOP)."
    text += _staged_from_text(showdown.get("staged_from"))
    asked = showdown.get("processes_asked")
    if processes < 3:
        cut = isinstance(asked, int) and asked > processes
        why = f"the time left did not cover measure.processes = {asked}" if cut else "measure.processes"
        text += f" The spread between processes was not measured ({processes} per finalist, {why}; 3 or more see it)."
    elif processes > int(showdown.get("processes") or processes):
        text += f" Processes were added (from {showdown['processes']}) while their spread was comparable to the margin."
    bad = showdown.get("disturbed_rounds") or []
    if bad:
        run = int(showdown.get("rounds_run") or 0)
        left_out = len(showdown.get("rounds_compared") or []) == run - len(bad)
        who = "processes outside autotune" if showdown.get("quiet") else "other processes"
        text += f" {len(bad)} of {run} rounds ran while {who} used more than 0.1 core"
        seen = [d for d in showdown.get("disturbed_by") or [] if isinstance(d, Mapping)][:3]
        if seen:
            text += " (seen using CPU meanwhile: " + ", ".join(
                f"{d.get('name')} (pid {d.get('pid')}) in {d.get('rounds')} round{'s' if d.get('rounds') != 1 else ''}"
                + (f", up to {float(d['cores']):.2f} core" if is_number(d.get("cores")) else "") for d in seen) + ")"
        text += "; " + ("they were left out." if left_out else "too few quiet rounds, so all were compared.")
    text += _cut_short_text(showdown)
    parts.append(text)
    body = verdict_text(showdown, busy=False)
    if body:
        parts.append(body)
    return " ".join(parts)


def _cut_short_text(showdown: Mapping[str, Any]) -> str:
    """A sentence when the run's deadline ended the rounds before the undisturbed compared rounds asked for
    (``measure.rounds``; the progress lines counted toward them), else ''."""
    wanted, burn_in = showdown.get("rounds"), int(showdown.get("burn_in_rounds") or 0)
    if showdown.get("stopped_by") != "deadline" or not is_int(wanted):
        return ""
    bad = set(showdown.get("disturbed_rounds") or [])
    calm = sum(1 for i in range(burn_in, int(showdown.get("rounds_run") or 0)) if i not in bad)
    if calm >= int(wanted):
        return ""
    return (f" The run's time budget ended the rounds after {calm} undisturbed compared round"
            f"{'s' if calm != 1 else ''} of the {wanted} asked for (measure.rounds), so the intervals are as wide "
            "as those rounds leave them.")


def _staged_from_text(staged: Any) -> str:
    """How the finalists were staged (``staged_from``): as shipped (each one's saved artifact loaded by its own
    load.py in workers that built nothing) or built from the recipe; empty for a showdown that did not record it."""
    if not isinstance(staged, Mapping) or not staged:
        return ""
    shipped = sorted(str(k) for k, v in staged.items() if v == "artifact")
    if not shipped:
        return ""
    if len(shipped) == len(staged):
        who, rest = "Every finalist was", ""
    else:
        who = ", ".join(shipped) + (" was" if len(shipped) == 1 else " were")
        rest = " (the others built from the recipe, as the search measured them)"
    return (f" {who} timed as shipped: saved as its artifact and loaded by its own load.py in workers that built "
            f"nothing, as a deployment does{rest}.")


def _compiler_of(variant: str) -> str:
    """A variant's compiler or runtime (``compile`` of ``compile:max-autotune+bf16``), by the recipe's grammar."""
    try:
        return VariantSpec.parse(variant).compiler
    except InputError:  # (a name from an older document): its first part
        return variant.split("+")[0].split(":")[0]


def untried_summary(doc: Mapping[str, Any]) -> str | None:
    """What the search never tried, by runtime (the variant's first part), e.g. "Not tried: 32 of 64 combinations:
    onnx (none of its 16), openvino (none of its 16)" (None when it tried everything, or the space is unknown).

    Why: a ViT's run with three runtimes, three precisions and four environments measured twelve eager rows in its
    budget and recommended eager+bf16 as 1.49x eager; nothing said that onnx and openvino were never tried, and the
    report read as if they had lost (session 37)."""
    search = doc.get("search") or {}
    untried, space = search.get("untried") or [], search.get("space")
    if not untried or not is_int(space):
        return None
    counts = Counter(_compiler_of(str(key).rpartition("@")[0]) for key in untried)
    tried = {_compiler_of(str(c.get("variant"))) for c in doc.get("candidates") or []}
    parts = [f"{n} more of {r}" if r in tried else f"{r} (none of its {n})" for r, n in counts.items()]
    why = ("the search's budget ran out: a larger search.time_budget_s would try them"
           if search.get("stopped_by") == "time_budget" else f"the search stopped: {search.get('stopped_by')}")
    return f"Not tried: {len(untried)} of {space} combinations ({why}): {', '.join(parts)}."


def stop_summary(doc: Mapping[str, Any]) -> str | None:
    """How the measurements stopped, e.g. ``precision 12, budget 3`` (None when unknown)."""
    counts = (doc.get("search") or {}).get("measurements_stopped_by") or {}
    if not counts:
        return None
    return "Measurements stopped on: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + "."


def latency_label(c: Mapping[str, Any]) -> str:
    """How a row's latency percentiles were obtained, for the reader."""
    if c.get("latency_source") == "block_means":
        return "percentiles of block means (several calls averaged; per-call tails hidden)"
    if c.get("latency_source") == "per_call":
        return "per-call timings"
    return ""


# ---- the deployable artifact and the profiler tables ---------------------------------------------


def artifact_summary(doc: Mapping[str, Any]) -> str | None:
    """What was saved for the recommendation, where, and how big (None when the run made no artifact)."""
    section = doc.get("artifact")
    if not isinstance(section, Mapping):
        return None
    where = f"{section.get('dir') or 'artifact'}/"
    if section.get("status") != "ok":
        return f"No artifact was written: {section.get('reason') or 'unknown reason'}. Everything measured stands."
    files = [f for f in section.get("files") or [] if f.get("name") != section.get("loader")]
    listing = ", ".join(f"{f['name']} ({fmt_bytes(f['bytes'])})" for f in files) or "no model file"
    text = (f"{section.get('variant')} at batch size {section.get('batch_size')}, saved as "
            f"{section.get('format') or section.get('kind')} in `{where}`: {listing}")
    if section.get("kind") != "code":
        text += f"; size on disk {fmt_bytes(section.get('size_bytes'))}"
    if is_number(section.get("build_seconds")):
        text += f"; built in {fmt_seconds(section['build_seconds'])} (build and first call)"
    if is_number(section.get("save_seconds")):
        text += f", saved in {fmt_seconds(section['save_seconds'])}"
    text += f". `{where}{section.get('loader') or 'load.py'}` loads it and runs one batch"
    text += " (it imports no autotune)."
    rec = doc.get("recommendation") or {}
    if (section.get("variant"), section.get("batch_size")) != (rec.get("variant"), rec.get("batch_size")):
        text += (f" Note: the recommendation is now {rec.get('variant')} at batch {rec.get('batch_size')} "
                 "(re-rendered with more trials); run `autotune run` again to rebuild the artifact.")
    return text


PROFILE_HEADERS = ["operator", "self CPU ms/forward", "% of self CPU", "calls/forward"]


def _calls(value: Any) -> str:
    if not is_number(value):
        return DASH
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def profile_tables(doc: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]], str]]:
    """(title, headers, rows, caption) of each profiler table (the recommendation's, then eager's)."""
    profile = doc.get("profile")
    if not isinstance(profile, Mapping):
        return []
    out = []
    for table in profile.get("tables") or []:
        device = is_number(table.get("total_self_device_ms"))
        headers = PROFILE_HEADERS + (["self device ms/forward"] if device else [])
        total = table.get("total_self_cpu_ms")
        rows = []
        for r in table.get("rows") or []:
            share = f"{100 * r['self_cpu_ms'] / total:.1f}" if is_number(r.get("self_cpu_ms")) and is_number(
                total) and total > 0 else DASH
            row = [str(r.get("name")), f"{r['self_cpu_ms']:.3f}" if is_number(r.get("self_cpu_ms")) else DASH,
                   share, _calls(r.get("calls"))]
            if device:
                row.append(f"{r['self_device_ms']:.3f}" if is_number(r.get("self_device_ms")) else DASH)
            rows.append(row)
        caption = (f"{table.get('source') or 'profiler'}, {table.get('iterations')} calls after warmup at batch "
                   f"{profile.get('batch_size')}; total self time {fmt_ms(total)} ms per forward"
                   + (f", device {fmt_ms(table.get('total_self_device_ms'))} ms" if device else "")
                   + (f". {table['note']}" if table.get("note") else "") + ".")
        title = f"{table.get('role')}: {table.get('variant')}"
        out.append((title, headers, rows, caption))
    return out


def profile_summary(doc: Mapping[str, Any]) -> str | None:
    """The sentence above the profiler tables: what they are, and what failed."""
    profile = doc.get("profile")
    if not isinstance(profile, Mapping):
        return None
    text = ("Top 10 operators by self time, for the recommendation and for eager at the same batch (same "
            "threads). The profiler adds overhead per operator: these tables say where time goes, the "
            "candidates table says how fast. ONNX Runtime and OpenVINO are profiled by their own profilers "
            "(torch.profiler sees only the tensor conversion at their boundary).")
    if profile.get("status") != "ok":
        text = f"No profile: {profile.get('reason') or 'unknown reason'}."
    elif profile.get("reason"):
        text += f" Not shown: {profile['reason']}."
    return text
