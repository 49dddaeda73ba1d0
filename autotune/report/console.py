"""The console summary: ranked candidates in a 100-column table, then the recommendation in one sentence.

``autotune run`` and ``autotune report`` print it; it is plain ASCII so that it survives any
terminal or log file, and the last column is shortened until every line fits.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from autotune.core import contention
from autotune.report.analysis import (
    budget_summary,
    constraints_text,
    eager_comparison,
    failure_groups,
    is_feasible,
    rank,
    same_candidate,
    violation_kind,
)
from autotune.report.canonical import normalise_report
from autotune.report.format import (
    DASH,
    candidate_label,
    constrained_percentile,
    fmt_bytes,
    fmt_ms,
    fmt_rate,
    latency_ms,
    no_steady_state,
    relative_half_width,
    short_list,
    too_few_samples,
)
from autotune.report.precision import cost_sentence
from autotune.report.schema import is_int, is_number
from autotune.report.sections import (
    showdown_cell,
    showdown_standings,
    showdown_summary,
    stop_summary,
    untried_summary,
)
from autotune.report.serving import serving_console_line
from autotune.report.shipped import shipped_sentence
from autotune.report.traffic import data_line, traffic_line, traffic_of
from autotune.showdown.verdict import busy_text, undecided_keys

_CONSOLE_WIDTH = 100


def _truncate(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _ascii(text: str) -> str:
    """Console output stays ASCII: it may go to a log or a terminal without UTF-8."""
    return text.replace("×", "x").replace("±", "+-").replace("≤", "<=").replace("–", "-").replace(DASH, "-")


def _fit_table(
    rows: list[list[str]], headers: Sequence[str] | None, colalign: Sequence[str], *, tablefmt: str
) -> str:
    """tabulate ``rows`` and shorten the last column until every line fits the console width."""
    width = max((len(row[-1]) for row in rows), default=0)
    while True:
        cells = [[*row[:-1], _truncate(row[-1], width)] for row in rows]
        text = tabulate(
            cells, headers=headers or (), tablefmt=tablefmt, disable_numparse=True, colalign=colalign
        )
        excess = max(len(line) for line in text.splitlines()) - _CONSOLE_WIDTH
        if excess <= 0 or width <= 12:
            return text
        width = max(width - excess, 12)


def _console(doc: Mapping[str, Any], top: int | None) -> str:
    ranked = rank(doc)
    rec = doc.get("recommendation")
    shown = list(enumerate(ranked if top is None else ranked[: max(top, 0)], start=1))
    standings = showdown_standings(doc)
    measured_rows, other_rows = [], []
    for index, c in shown:
        mark = f"{index}{'*' if same_candidate(c, rec) else ''}"
        variant = _truncate(str(c.get("variant")), 24)
        if c.get("status") != "ok":
            other_rows.append(
                [
                    mark,
                    variant,
                    str(c.get("batch_size")),
                    str(c.get("status")),
                    _ascii(str(c.get("reason") or "no reason given")),
                ]
            )
            continue
        note = ""
        if not is_feasible(c):
            note = "violates: " + "; ".join(
                violation_kind(v) for v in c.get("violations") or ["constraints"]
            )
        elif too_few_samples(c) is not None:
            note = f"too few samples ({too_few_samples(c)})"
        elif no_steady_state(c):
            note = "no steady state"
        if contention.busy(c.get("foreign_cores")):
            note = (note + "; " if note else "") + f"busy machine ({c['foreign_cores']:.1f} core)"
        recompiles = (traffic_of(c) or {}).get("recompiles")
        if is_int(recompiles) and recompiles > 0:
            note = (note + "; " if note else "") + f"{recompiles} recompile{'s' if recompiles > 1 else ''}"
        half = relative_half_width(c)
        rate = ("~" if no_steady_state(c) else "") + fmt_rate(c.get("throughput"))
        rate += f" +-{100 * half:.1f}%" if half is not None else ""
        measured_rows.append(
            [
                mark,
                variant,
                str(c.get("batch_size")),
                *([showdown_cell(c, standings) or "-"] if standings else []),
                _ascii(rate),
                _ascii(f"{fmt_ms(latency_ms(c, 'p50'))}/{fmt_ms(latency_ms(c, 'p99'))}"),
                _ascii(fmt_bytes(c.get("peak_memory_bytes"))),
                _ascii(note),
            ]
        )
    lines = []
    busy = busy_text(doc.get("showdown") or {})
    if busy:  # a verdict of a busy machine is said before anything else
        lines.extend(_wrap(busy))
        lines.append("")
    if measured_rows:
        showdown_col = ["showdown x leader"] if standings else []
        lines.append(
            _fit_table(
                measured_rows,
                ["#", "variant", "batch", *showdown_col, "samples/s" + (" screen" if standings else ""),
                 "p50/p99 ms", "memory", "note"],
                ("right", "left", "right", *(["right"] if standings else []), "right", "right", "right", "left"),
                tablefmt="simple",
            )
        )
        if standings:
            lines.append("Showdown finalists first, ranked by their paired ratio to the leader (95% CI; ? = "
                         "undecided), which decided among them; samples/s is the search's screen, which chose "
                         "the finalists.")
    if other_rows:
        if measured_rows:
            lines.append("")
        lines.append("Not measured:")
        lines.append(
            _fit_table(other_rows, None, ("right", "left", "right", "left", "left"), tablefmt="plain")
        )
    if not ranked:
        lines.append("No candidates were evaluated.")
    if len(ranked) > len(shown):
        lines.append(f"... {len(ranked) - len(shown)} more candidate(s) in report.md")
    lines.append("")
    lines.extend(_wrap(_recommendation_sentence(doc)))
    time_line = budget_summary(doc)
    for extra in (traffic_line(rec) if rec is not None else None, data_line(doc), showdown_summary(doc, busy=not busy),
                  stop_summary(doc), untried_summary(doc), serving_console_line(doc),
                  f"Time: {time_line}." if time_line else None):
        if extra:
            lines.extend(_wrap(extra))
    constraints = constraints_text(doc)
    if constraints:
        violating = sum(1 for c in ranked if c.get("status") == "ok" and not is_feasible(c))
        lines.extend(_wrap(f"Constraints: {constraints}; {violating} measured candidate(s) violate them."))
    front = doc.get("pareto") or []
    if front:
        by_trial = {c.get("trial"): c for c in ranked}
        members = [candidate_label(by_trial[t]) if t in by_trial else f"trial {t}" for t in front]
        lines.extend(
            _wrap(f"Pareto front (throughput vs {constrained_percentile(doc)} latency): {short_list(members, 6)}.")
        )
    if rec is not None and shown:
        shown_rec = any(same_candidate(c, rec) for _, c in shown)
        lines.append("* = recommended" if shown_rec else "(the recommendation is not among the rows shown)")
    return "\n".join(_ascii(line) for line in lines)


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(_ascii(text), width=_CONSOLE_WIDTH, subsequent_indent="  ") or [""]


def _recommendation_sentence(doc: Mapping[str, Any]) -> str:
    rec = doc.get("recommendation")
    if rec is None:
        groups = failure_groups(doc.get("candidates") or [])
        if not groups:
            return "No feasible configuration: no candidate was measured."
        reasons = "; ".join(f"{status} ({len(labels)}): {reason}" for status, reason, labels in groups[:4])
        more = f"; and {len(groups) - 4} other reason(s)" if len(groups) > 4 else ""
        return f"No feasible configuration. {reasons}{more}."
    half = relative_half_width(rec)
    parts = [
        f"{fmt_rate(rec.get('throughput'))} samples/s"
        + (f" (±{100 * half:.1f}%)" if half is not None else ""),
        f"p50 {fmt_ms(latency_ms(rec, 'p50'))} ms, p99 {fmt_ms(latency_ms(rec, 'p99'))} ms",
    ]
    if is_number(rec.get("peak_memory_bytes")):
        parts.append(f"peak {fmt_bytes(rec['peak_memory_bytes'])}")
    text = f"Recommended: {rec.get('variant')} at batch {rec.get('batch_size')}: {', '.join(parts)}."
    shipped = shipped_sentence(doc)
    if shipped is not None:
        text += " " + shipped
    verdict = (doc.get("showdown") or {}).get("verdict") or {}
    open_keys = undecided_keys(verdict)
    if rec.get("decided_by") == "showdown" and open_keys:
        # against the others: when the pick is itself one the rounds could not separate from the leader (picked as
        # the simplest), it is undecided against the leader ("Undecided against eager+bf16@8" named the pick itself)
        others = [k for k in dict.fromkeys([str(verdict.get("leader") or ""), *open_keys])
                  if k and k != verdict.get("pick")]
        text += (f" Undecided against {', '.join(others)} (CI straddles the margin when the rounds ran out): "
                 "see the showdown line.")
    comparison = eager_comparison(doc, rec)
    if comparison:
        text += " " + comparison
    cost = cost_sentence(doc, rec)
    if cost is not None:
        text += " " + cost
    if too_few_samples(rec) is not None:
        text += (f" Warning: its measurement held {too_few_samples(rec)} samples, too few to tell a steady state "
                 "(a longer measure.max_seconds would).")
    elif no_steady_state(rec):
        text += " Warning: no steady state was reached."
    raw = doc.get("workload")
    workload: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}  # report.json is untrusted
    weights: Mapping[str, Any] = workload["weights"] if isinstance(workload.get("weights"), Mapping) else {}
    if weights.get("native") is False:
        text += (f" Warning: the model's weights are {weights.get('dtype')}, which this CPU only emulates (often an "
                 "order of magnitude slower than float32; see the notes).")
    rows: Mapping[str, Any] = workload["batch_rows"] if isinstance(workload.get("batch_rows"), Mapping) else {}
    if rows.get("independent") is False and int(rec.get("batch_size") or 1) > 1:
        text += (f" Warning: the rows of a batch are not independent samples, so at batch {rec.get('batch_size')} the "
                 f"model answers otherwise than one sample per call: {rows.get('why')}.")
    return text


def console_table(doc: Mapping[str, Any], *, top: int | None = 15) -> str:
    """The candidates best first (see ``rank_candidates``) as a table for a 100-column terminal,
    then the recommendation (or why there is none), the constraints and the Pareto front.

    ``top`` limits the rows (``None``: all). Measured rows show throughput with its relative
    95% CI and p50/p99; unmeasured rows show their status and reason in the note column.
    Plain ASCII, so it survives any terminal or log file.
    """
    return _console(normalise_report(doc), top)
