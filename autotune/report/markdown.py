"""report.md: the report as GitHub-flavoured markdown, with the plots as linked PNG files."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.environment import summary_line
from autotune.report.analysis import all_notes, budget_summary, failure_groups, search_summary, why_points
from autotune.report.canonical import normalise_report
from autotune.report.format import short_list, study_objective
from autotune.report.plots import PLOT_CAPTIONS, PLOT_NAMES, SERVING_PLOT
from autotune.report.precision import PRECISION_HEADERS, PRECISION_INTRO, precision_rows
from autotune.report.reproduce import measure_line, reproduce_script
from autotune.report.sections import (
    PROBE_HEADERS,
    SHOWDOWN_HEADERS,
    artifact_summary,
    boundary_summary,
    byline,
    candidate_rows,
    candidates_caption,
    environment_rows,
    headline,
    probe_rows,
    profile_summary,
    profile_tables,
    recipe_rows,
    showdown_rows,
    showdown_summary,
    stop_summary,
    title,
    untried_summary,
)
from autotune.report.serving import serving_view
from autotune.report.traffic import (
    BUCKET_HEADERS,
    DATA_SHAPE_HEADERS,
    TRAFFIC_HEADERS,
    bucket_rows,
    data_rows,
    data_shape_rows,
    traffic_rows,
)


def _md_text(value: Any) -> str:
    """Text from the document as one line of markdown, HTML escaped: a recipe's strings (name, description,
    variant names, reasons) come from whoever wrote the recipe or report.json, and GitHub renders raw HTML. Every
    ``<`` is written as ``&lt;`` (no tag, comment or script can start; it still reads as "<"); ``>`` and ``&``
    alone start nothing and stay as they are."""
    return " ".join(str(value).split()).replace("<", "&lt;")


def _md_cell(value: Any) -> str:
    return _md_text(value).replace("|", "\\|")


def _fenced(code: Any, lang: str) -> list[str]:
    """``code`` in a fence longer than any run of backticks inside it, so the code cannot close it."""
    text = str(code).rstrip()
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", text, fence]


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = [
        "| " + " | ".join(_md_cell(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _artifact_md(doc: Mapping[str, Any]) -> list[str]:
    summary = artifact_summary(doc)
    if summary is None:
        return []
    out = ["## Deployable artifact", "", _md_text(summary), ""]
    code = (doc.get("artifact") or {}).get("loader_code")
    if code:
        out += [*_fenced(code, "python"), ""]
    return out


def _profile_md(doc: Mapping[str, Any]) -> list[str]:
    summary = profile_summary(doc)
    if summary is None:
        return []
    out = ["## Profile: where the time goes", "", _md_text(summary), ""]
    for title_text, headers, rows, caption in profile_tables(doc):
        out += [f"### {_md_text(title_text)}", "", _md_table(headers, rows) if rows else "No operators recorded.", "",
                f"_{caption}_", ""]
    return out


def _data_md(doc: Mapping[str, Any]) -> list[str]:
    rows = data_rows(doc)
    if not rows:
        return []
    out = ["## Data", "", "The traffic every candidate was measured on.", "", _md_table(["", ""], rows), ""]
    shapes = data_shape_rows(doc)
    if shapes:
        out += [_md_table(DATA_SHAPE_HEADERS, shapes), ""]
    return out


def _serving_md(doc: Mapping[str, Any], plot_files: Mapping[str, str] | None) -> list[str]:
    view = serving_view(doc)
    if view is None:
        return []
    out = ["## Serving", "", f"**{_md_text(view.headline)}**" if view.recommended else _md_text(view.headline), ""]
    if view.setup:
        out += [_md_text(view.setup), ""]
    for title_text, headers, rows, intro in view.tables:
        out += [f"### {title_text}", "", *([_md_text(intro), ""] if intro else []), _md_table(headers, rows), ""]
    if view.knobs:
        out += ["### What each knob was worth", "", *(f"- {_md_text(k)}" for k in view.knobs), ""]
    if plot_files and SERVING_PLOT in plot_files:
        out += [f"![{SERVING_PLOT}]({plot_files[SERVING_PLOT]})", "", f"_{PLOT_CAPTIONS[SERVING_PLOT]}_", ""]
    if view.configs:
        headers, rows, intro = view.configs
        out += ["### Configurations", "", intro, "", _md_table(headers, rows), ""]
    if view.command:
        out += [(f"Server: {_md_text(view.stack)}. " if view.stack else "") + "Start it with:", "",
                *_fenced(view.command, "bash"), ""]
    out += [line for text in (view.files, view.cost) if text for line in (_md_text(text), "")]
    return out


def markdown_text(doc: Mapping[str, Any], plot_files: Mapping[str, str] | None) -> str:
    """report.md for a normalised document (see ``render_markdown``)."""
    rec = doc.get("recommendation")
    env = doc.get("environment") or {}
    out = [f"# {_md_text(title(doc))}", ""]
    description = (doc.get("recipe") or {}).get("description")
    if description:
        out += [_md_text(description), ""]
    time_line = budget_summary(doc)
    out += [f"_{_md_text(byline(doc))}_  ", f"Machine: {_md_text(summary_line(env))}  ",
            f"Search: {_md_text(search_summary(doc))}" + ("  " if time_line else "")]
    if time_line:
        out.append(f"Time: {_md_text(time_line)}")
    out.append("")

    if rec is not None:
        out += [
            "## Recommendation",
            "",
            _md_table(["", ""], [[f"**{k}**", v] for k, v in headline(rec, doc)]),
            "",
        ]
        buckets = bucket_rows(rec)
        if buckets:
            out += ["### By input shape", "", _md_table(BUCKET_HEADERS, buckets), ""]
        out += ["### Why", ""] + [f"- {_md_text(point)}" for point in why_points(doc, rec)] + [""]
        out += _artifact_md(doc)
    else:
        out += [
            "## No feasible configuration",
            "",
            "No candidate was measured successfully within the constraints. Reasons:",
            "",
        ]
        groups = failure_groups(doc.get("candidates") or [])
        out += [
            f"- **{_md_text(status)}** ({len(labels)}): {_md_text(reason)} — {_md_text(short_list(labels))}"
            for status, reason, labels in groups
        ] or ["- no candidate was evaluated"]
        out.append("")

    out += _serving_md(doc, plot_files)

    showdown = showdown_rows(doc)
    if showdown:
        out += ["## Showdown", "", _md_text(showdown_summary(doc)), "", _md_table(SHOWDOWN_HEADERS, showdown), ""]

    out += _profile_md(doc)

    if plot_files and any(name in plot_files for name in PLOT_NAMES):
        out += ["## Plots", ""]
        for name in PLOT_NAMES:
            if name in plot_files:
                out += [f"![{name}]({plot_files[name]})", "", f"_{PLOT_CAPTIONS[name]}_", ""]

    out += _data_md(doc)
    precision = precision_rows(doc)
    if precision:
        out += ["## Precision and accuracy", "", PRECISION_INTRO, "", _md_table(PRECISION_HEADERS, precision), ""]

    headers, rows, _ = candidate_rows(doc)
    out += [
        "## Candidates",
        "",
        candidates_caption(doc, study_objective(doc)),
        "",
    ]
    out += [_md_table(headers, rows) if rows else "No candidates were evaluated.", ""]
    for line in (stop_summary(doc), untried_summary(doc)):
        if line:
            out += [_md_text(line), ""]
    traffic = traffic_rows(doc)
    if traffic:
        out += ["### Candidates by input shape", "",
                "Each candidate's traffic by input shape, after its shape policy; # as in the table above.", "",
                _md_table(TRAFFIC_HEADERS, traffic), ""]

    boundary = doc.get("batch_boundary") or {}
    if boundary:
        out += ["## Batch boundary", ""]
        for variant, entry in sorted(boundary.items()):
            out += [f"### {_md_text(variant)}", "", _md_text(boundary_summary(variant, entry)), ""]
            probes = probe_rows(entry)
            if probes:
                out += [_md_table(PROBE_HEADERS, probes), ""]

    out += ["## Environment", "", _md_text(summary_line(env)), ""]
    env_rows = environment_rows(env)
    if env_rows:
        out += [_md_table(["", ""], env_rows), ""]
    out += ["## Recipe and search", "", _md_table(["", ""], recipe_rows(doc)), ""]

    notes = all_notes(doc)
    if notes:
        out += ["## Notes", ""] + [f"- {_md_text(note)}" for note in notes] + [""]

    if rec is not None:
        out += [
            "## Reproduce",
            "",
            "Measure this configuration again with warmup detection and CIs:",
            "",
            *_fenced(measure_line(doc), "bash"),
            "",
            "Or run it without autotune:",
            "",
            *_fenced(reproduce_script(doc), "python"),
            "",
        ]
    return "\n".join(out)


def render_markdown(doc: Mapping[str, Any], *, plot_files: Mapping[str, str] | None = None) -> str:
    """report.md: the recommendation and why, plots, candidates, batch boundary, environment,
    notes, reproduce code. ``plot_files`` maps plot names to paths relative to the markdown
    file (``write_reports`` passes ``plots/<name>.png``); without it there are no images."""
    return markdown_text(normalise_report(doc), plot_files)
