"""report.html: one self-contained page (inline CSS, plots as base64 PNG, no scripts).

A single file can be mailed, attached to a ticket or opened from an artifact store without its
``plots/`` directory; without scripts it renders the same everywhere.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.environment import summary_line
from autotune.report.analysis import all_notes, budget_summary, failure_groups, search_summary, why_points
from autotune.report.canonical import normalise_report
from autotune.report.format import (
    fmt_bytes,
    fmt_ms,
    fmt_rate,
    latency_ms,
    relative_half_width,
    short_list,
    study_objective,
)
from autotune.report.plots import PLOT_CAPTIONS, PLOT_NAMES, SERVING_PLOT, plot_pngs
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

_CSS = """
body{margin:0;color:#1d2330;background:#f6f7f9;
  font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:19px;margin:32px 0 10px;border-bottom:1px solid #dde1e7;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.muted{color:#5d6778}
.small{font-size:12px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:16px 20px;margin:12px 0}
.headline{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:12px}
.metric{flex:1 1 150px;background:#f0f4fa;border-radius:6px;padding:10px 12px}
.metric .v{font-size:20px;font-weight:600}
.metric .k{font-size:12px;color:#5d6778;text-transform:uppercase;letter-spacing:.03em}
.bad{border-left:4px solid #c62828}
.good{border-left:4px solid #2e7d32}
table{border-collapse:collapse;font-size:13px;background:#fff}
th,td{border:1px solid #e1e5eb;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#eef1f5;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.scroll{overflow-x:auto;max-height:640px;overflow-y:auto;border:1px solid #dde1e7}
tr.s-rejected td,tr.s-failed td{background:#fdf0f0}
tr.s-oom td{background:#fff6e5}
tr.s-pruned td{color:#7a8394}
tr.s-infeasible td{background:#f6f0fb}
tr.rec td{background:#fff9d6;font-weight:600}
.badge{display:inline-block;padding:0 6px;border-radius:9px;font-size:12px;background:#e3e7ee}
.b-ok{background:#d8f0dc}
.b-oom{background:#ffe2b3}
.b-rejected,.b-failed{background:#f7cccc}
.b-infeasible{background:#e7d7f5}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:14px}
figure{margin:0;background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:8px}
figure img{width:100%;height:auto}
figcaption{font-size:12px;color:#5d6778;padding:4px 4px 0}
pre{background:#1e2430;color:#e8ecf2;padding:12px 14px;border-radius:6px;overflow-x:auto;font-size:12.5px}
ul{padding-left:22px}
li{margin:3px 0}
details{margin:6px 0}
summary{cursor:pointer}
"""


def _h(value: Any) -> str:
    return html.escape(str(value), quote=True)


_NUMERIC_HEADERS = {
    "#",
    "trial",
    "batch",
    "samples/s",
    "95% CI",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "peak memory",
    "compile",
    "warmup",
    "time",
    "self CPU ms/forward",
    "% of self CPU",
    "calls/forward",
    "self device ms/forward",
    "batches",
    "calls",
    "samples",
    "offered/s",
    "answered/s",
    "p99 95% CI",
    "sent",
    "failed",
    "timed out",
    "dropped",
    "max requests/s",
    "recommendation x",
    "max batch",
    "max delay ms",
    "predicted max/s",
    "measured max/s",
}


def _html_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], row_classes: Sequence[str] | None = None
) -> str:
    head = "".join(f"<th>{_h(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        cls = f' class="{_h(row_classes[index])}"' if row_classes and row_classes[index] else ""
        cells = []
        for header, value in zip(headers, row, strict=False):
            text = _h(value)
            if header == "status":
                status = str(value).split(" ")[0]
                kind = "infeasible" if "infeasible" in str(value) else status
                text = f'<span class="badge b-{_h(kind)}">{text}</span>'
            cells.append(f'<td class="num">{text}</td>' if header in _NUMERIC_HEADERS else f"<td>{text}</td>")
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _html_kv(rows: Sequence[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{_h(k)}</th><td>{_h(v)}</td></tr>" for k, v in rows) + "</table>"


def _html_inline_md(text: str) -> str:
    """Escape, then turn the ``**bold**`` and ```code``` used by shared sentences into <strong> and <code>."""
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", _h(text))
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def _figure(name: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{_h(name)} plot" src="data:image/png;base64,{data}">'
            f"<figcaption>{_h(PLOT_CAPTIONS[name])}</figcaption></figure>")


def _serving_html(doc: Mapping[str, Any], plots: Mapping[str, bytes]) -> list[str]:
    view = serving_view(doc)
    if view is None:
        return []
    card = "good" if view.recommended else "bad"
    parts = [f'<section class="card {card}"><h2 style="margin-top:0;border:0">Serving</h2>'
             f"<p>{'<strong>' + _h(view.headline) + '</strong>' if view.recommended else _h(view.headline)}</p>"]
    if view.setup:
        parts.append(f"<p class='muted small'>{_h(view.setup)}</p>")
    for title_text, headers, rows, intro in view.tables:
        parts.append(f"<h3>{_h(title_text)}</h3>" + (f"<p class='muted small'>{_h(intro)}</p>" if intro else "")
                     + _html_table(headers, rows))
    if view.knobs:
        parts.append("<h3>What each knob was worth</h3><ul>" + "".join(f"<li>{_h(k)}</li>" for k in view.knobs)
                     + "</ul>")
    if SERVING_PLOT in plots:
        parts.append(f'<div class="plots">{_figure(SERVING_PLOT, plots[SERVING_PLOT])}</div>')
    if view.configs:
        headers, rows, intro = view.configs
        parts.append(f"<details><summary>{len(rows)} configurations</summary><p class='muted small'>{_h(intro)}</p>"
                     f'<div class="scroll">{_html_table(headers, rows)}</div></details>')
    if view.command:
        parts.append("<p>" + (f"Server: {_h(view.stack)}. " if view.stack else "") + "Start it with:</p>"
                     f"<pre><code>{_h(view.command)}</code></pre>")
    parts += [f"<p class='muted small'>{_h(text)}</p>" for text in (view.files, view.cost) if text]
    parts.append("</section>")
    return parts


def html_page(doc: Mapping[str, Any], plots: Mapping[str, bytes]) -> str:
    """report.html for a normalised document and the PNG bytes of its plots (see ``render_html``)."""
    rec = doc.get("recommendation")
    env = doc.get("environment") or {}
    description = (doc.get("recipe") or {}).get("description")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(title(doc))}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{_h(title(doc))}</h1>",
    ]
    if description:
        parts.append(f"<p>{_h(description)}</p>")
    time_line = budget_summary(doc)
    parts.append(
        f'<p class="muted small">{_h(byline(doc))}<br>Machine: {_h(summary_line(env))}<br>'
        f"Search: {_h(search_summary(doc))}"
        + (f"<br>Time: {_h(time_line)}" if time_line else "") + "</p>"
    )

    if rec is not None:
        half = relative_half_width(rec)
        metrics = [
            ("recommended", f"{rec.get('variant')} @ batch {rec.get('batch_size')}"),
            (
                "throughput",
                f"{fmt_rate(rec.get('throughput'))} /s"
                + (f" ±{100 * half:.1f}%" if half is not None else ""),
            ),
            ("p50 / p99 latency", f"{fmt_ms(latency_ms(rec, 'p50'))} / {fmt_ms(latency_ms(rec, 'p99'))} ms"),
            ("peak memory", fmt_bytes(rec.get("peak_memory_bytes"))),
        ]
        parts.append(
            '<section class="card good"><h2 style="margin-top:0;border:0">Recommendation</h2>'
            '<div class="headline">'
            + "".join(
                f'<div class="metric"><div class="k">{_h(k)}</div><div class="v">{_h(v)}</div></div>'
                for k, v in metrics
            )
            + "</div>"
        )
        parts.append(_html_kv(headline(rec, doc)))
        buckets = bucket_rows(rec)
        if buckets:
            parts.append(f"<h3>By input shape</h3>{_html_table(BUCKET_HEADERS, buckets)}")
        parts.append(
            "<h3>Why</h3><ul>"
            + "".join(f"<li>{_h(p)}</li>" for p in why_points(doc, rec))
            + "</ul></section>"
        )
        summary = artifact_summary(doc)
        if summary is not None:
            parts.append(f"<h2>Deployable artifact</h2><p>{_html_inline_md(summary)}</p>")
            code = (doc.get("artifact") or {}).get("loader_code")
            if code:
                parts.append(f"<pre><code>{_h(code)}</code></pre>")
    else:
        groups = failure_groups(doc.get("candidates") or [])
        items = (
            "".join(
                f"<li><strong>{_h(status)}</strong> ({len(labels)}): {_h(reason)} — "
                f'<span class="muted">{_h(short_list(labels))}</span></li>'
                for status, reason, labels in groups
            )
            or "<li>no candidate was evaluated</li>"
        )
        parts.append(
            '<section class="card bad"><h2 style="margin-top:0;border:0">No feasible configuration</h2>'
            f"<p>No candidate was measured successfully within the constraints. Reasons:</p>"
            f"<ul>{items}</ul></section>"
        )

    parts += _serving_html(doc, plots)

    showdown = showdown_rows(doc)
    if showdown:
        parts.append(f"<h2>Showdown</h2><p>{_h(showdown_summary(doc))}</p>"
                     f'<div class="scroll">{_html_table(SHOWDOWN_HEADERS, showdown)}</div>')

    summary = profile_summary(doc)
    if summary is not None:
        parts.append(f"<h2>Profile: where the time goes</h2><p>{_h(summary)}</p>")
        for title_text, headers, rows, caption in profile_tables(doc):
            table = _html_table(headers, rows) if rows else "<p>No operators recorded.</p>"
            parts.append(f"<h3>{_h(title_text)}</h3>{table}<p class='muted small'>{_h(caption)}</p>")

    if any(name in plots for name in PLOT_NAMES):
        parts.append('<h2>Plots</h2><div class="plots">')
        parts += [_figure(name, plots[name]) for name in PLOT_NAMES if name in plots]
        parts.append("</div>")

    traffic_source = data_rows(doc)
    if traffic_source:
        parts.append(f"<h2>Data</h2><p>The traffic every candidate was measured on.</p>{_html_kv(traffic_source)}")
        shapes = data_shape_rows(doc)
        if shapes:
            parts.append(f"<details><summary>{len(shapes)} shapes</summary>"
                         f"{_html_table(DATA_SHAPE_HEADERS, shapes)}</details>")

    precision = precision_rows(doc)
    if precision:
        parts.append(f"<h2>Precision and accuracy</h2><p>{_h(PRECISION_INTRO)}</p>"
                     f'<div class="scroll">{_html_table(PRECISION_HEADERS, precision)}</div>')

    headers, rows, statuses = candidate_rows(doc)
    classes = [
        f"s-{status}" + (" rec" if "★" in row[0] else "") for row, status in zip(rows, statuses, strict=True)
    ]
    parts.append(
        f"<h2>Candidates</h2><p class='muted small'>{_h(candidates_caption(doc, study_objective(doc)))}</p>"
    )
    parts.append(
        f'<div class="scroll">{_html_table(headers, rows, classes)}</div>'
        if rows
        else "<p>No candidates were evaluated.</p>"
    )
    for line in (stop_summary(doc), untried_summary(doc)):
        if line:
            parts.append(f"<p class='muted small'>{_h(line)}</p>")
    traffic = traffic_rows(doc)
    if traffic:
        parts.append(
            "<details><summary>Candidates by input shape</summary><p class='muted small'>Each candidate's traffic "
            "by input shape, after its shape policy; # as in the table above.</p>"
            f'<div class="scroll">{_html_table(TRAFFIC_HEADERS, traffic)}</div></details>'
        )

    boundary = doc.get("batch_boundary") or {}
    if boundary:
        parts.append("<h2>Batch boundary</h2>")
        for variant, entry in sorted(boundary.items()):
            parts.append(f"<h3>{_h(variant)}</h3><p>{_html_inline_md(boundary_summary(variant, entry))}</p>")
            probes = probe_rows(entry)
            if probes:
                parts.append(
                    f"<details><summary>{len(probes)} probes</summary>"
                    f"{_html_table(PROBE_HEADERS, probes)}</details>"
                )

    parts.append(f"<h2>Environment</h2><p>{_h(summary_line(env))}</p>")
    env_rows = environment_rows(env)
    if env_rows:
        parts.append(f"<details><summary>all {len(env_rows)} facts</summary>{_html_kv(env_rows)}</details>")
    parts.append(f"<h2>Recipe and search</h2>{_html_kv(recipe_rows(doc))}")

    notes = all_notes(doc)
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_h(n)}</li>" for n in notes) + "</ul>")

    if rec is not None:
        parts.append(
            "<h2>Reproduce</h2><p>Measure this configuration again with warmup detection and CIs:</p>"
            f"<pre><code>{_h(measure_line(doc))}</code></pre><p>Or run it without autotune:</p>"
            f"<pre><code>{_h(reproduce_script(doc))}</code></pre>"
        )
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def render_html(doc: Mapping[str, Any], *, plots: Mapping[str, bytes] | None = None) -> str:
    """report.html: one self-contained page (inline CSS, plots as base64 PNG, no scripts).

    ``plots`` maps plot names to PNG bytes; when omitted they are rendered here.
    """
    plain = normalise_report(doc)
    return html_page(plain, plot_pngs(plain) if plots is None else plots)
