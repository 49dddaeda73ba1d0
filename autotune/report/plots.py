"""The report's plots as PNG bytes: throughput, latency, accuracy, memory boundary, timing trace, and the serving
stage's latency against throughput (shown in the report's Serving section rather than with the others).

matplotlib is imported inside the functions only, so the report (and ``autotune`` itself) works
without it; each figure is drawn on its own ``Figure`` with the Agg canvas (no pyplot), which
touches no global matplotlib state and needs no display. The PNGs carry no "Software" metadata,
so the same document gives the same bytes. Somewhat over 400 lines: one function per plot, none calling another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.report.canonical import normalise_report
from autotune.report.format import (
    ci_bounds,
    constrained_percentile,
    fmt_bytes,
    fmt_ms,
    latency_ms,
    measured_candidates,
    no_steady_state,
    recipe_constraints,
)
from autotune.report.precision import accuracy_front, accuracy_points
from autotune.report.schema import is_int, is_number

#: Plots in the order the Plots section shows them; each is written to ``plots/<name>.png`` next to report.md.
PLOT_NAMES = ("throughput", "latency", "accuracy", "memory", "trace")
#: The serving stage's plot, shown in the Serving section.
SERVING_PLOT = "serving"
#: Every plot file written, in this order.
PLOT_FILES = (*PLOT_NAMES, SERVING_PLOT)
#: Under each plot in report.md and report.html: what to read in it.
PLOT_CAPTIONS = {
    "throughput": "Throughput vs batch size per variant; the star is the recommendation, red rings mark "
    "candidates without a steady state.",
    "latency": "Latency per batch vs throughput: p50 (filled) to p99 (hollow); the dashed line is the "
    "Pareto front.",
    "accuracy": "Throughput vs accuracy drop against eager fp32, per candidate (fp32 under the strict gate at 0); "
    "the dashed line is the Pareto front, the dotted one the accuracy budget, red crosses the candidates the "
    "budget rejected (not timed).",
    "memory": "Batch-size probes: peak memory, the fitted affine model and the memory limit.",
    "trace": "The recommended candidate's per-iteration timings with the detected warmup end.",
    "serving": "Serving: p99 latency vs requests/s answered, one line per configuration loaded (its offered rates); "
    "the dotted line is the SLO, the star the recommendation at its max rate.",
}


def _variant_colors(doc: Mapping[str, Any]) -> dict[str, Any]:
    from matplotlib import colormaps

    names = sorted(
        {str(c.get("variant")) for c in doc.get("candidates") or []}
        | set((doc.get("batch_boundary") or {}).keys())
    )
    palette = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: palette(index % palette.N) for index, name in enumerate(names)}


def _png(fig: Any) -> bytes:
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _new_axes(title: str) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.4), layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3, which="both")
    return fig, ax


def _legend(ax: Any, count: int) -> None:
    if count:
        ax.legend(fontsize=8, loc="best", ncols=1 if count <= 6 else 2, framealpha=0.85)


def _mark_recommended(ax: Any, x: float, y: float) -> None:
    """The gold star every plot uses for the recommendation."""
    ax.scatter([x], [y], marker="*", s=260, color="gold", edgecolors="black", zorder=5, label="recommended")


def _plot_throughput(doc: Mapping[str, Any], colors: Mapping[str, Any]) -> bytes | None:
    measured = measured_candidates(doc.get("candidates") or [])
    if not measured:
        return None
    fig, ax = _new_axes("Throughput vs batch size (error bars: 95% CI)")
    by_variant: dict[str, list[Mapping[str, Any]]] = {}
    for c in measured:
        by_variant.setdefault(str(c["variant"]), []).append(c)
    for variant in sorted(by_variant):
        points = sorted(by_variant[variant], key=lambda c: c["batch_size"])
        xs = [c["batch_size"] for c in points]
        ys = [c["throughput"] for c in points]
        low, high = [], []
        for c in points:
            ci = ci_bounds(c)
            low.append(max(c["throughput"] - ci[0], 0) if ci is not None else 0)
            high.append(max(ci[1] - c["throughput"], 0) if ci is not None else 0)
        ax.errorbar(
            xs,
            ys,
            yerr=[low, high],
            marker="o",
            ms=4,
            capsize=3,
            lw=1.4,
            color=colors.get(variant),
            label=variant,
        )
        hollow = [c for c in points if no_steady_state(c)]
        if hollow:
            ax.scatter(
                [c["batch_size"] for c in hollow],
                [c["throughput"] for c in hollow],
                s=90,
                facecolors="none",
                edgecolors="red",
                zorder=4,
            )
    rec = doc.get("recommendation")
    if rec is not None and is_number(rec.get("throughput")):
        _mark_recommended(ax, rec["batch_size"], rec["throughput"])
    if len({c["batch_size"] for c in measured}) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples / s")
    ax.set_ylim(bottom=0)
    _legend(ax, len(by_variant) + (rec is not None))
    return _png(fig)


def _plot_latency(doc: Mapping[str, Any], colors: Mapping[str, Any]) -> bytes | None:
    measured = [c for c in measured_candidates(doc.get("candidates") or []) if latency_ms(c, "p50") is not None]
    if not measured:
        return None
    fig, ax = _new_axes("Latency vs throughput (filled: p50, hollow: p99)")
    labelled: set[str] = set()
    for c in measured:
        variant = str(c["variant"])
        color = colors.get(variant)
        x, p50, p99 = c["throughput"], latency_ms(c, "p50"), latency_ms(c, "p99")
        ax.scatter(
            [x], [p50], color=color, s=28, zorder=3, label=variant if variant not in labelled else None
        )
        labelled.add(variant)
        if p99 is not None:
            ax.plot([x, x], [p50, p99], color=color, lw=1, alpha=0.6)
            ax.scatter([x], [p99], facecolors="none", edgecolors=[color], s=28, zorder=3)
    key = constrained_percentile(doc)
    front = set(doc.get("pareto") or [])
    members = sorted(
        (c for c in measured if c.get("trial") in front and latency_ms(c, key) is not None),
        key=lambda c: c["throughput"],
    )
    if members:
        ys = [latency_ms(c, key) for c in members]
        ax.plot(
            [c["throughput"] for c in members], ys, "k--", lw=1.2, zorder=2, label=f"Pareto front ({key})"
        )
        ax.scatter(
            [c["throughput"] for c in members], ys, s=90, facecolors="none", edgecolors="black", zorder=4
        )
    limit = recipe_constraints(doc).get("max_latency_ms")
    if is_number(limit):
        ax.axhline(limit, color="red", ls=":", lw=1.2, label=f"{key} limit {fmt_ms(limit)} ms")
    rec = doc.get("recommendation")
    rec_p50 = latency_ms(rec, "p50") if rec is not None else None
    if rec is not None and is_number(rec.get("throughput")) and rec_p50 is not None:
        _mark_recommended(ax, rec["throughput"], rec_p50)
    values = [v for c in measured for v in (latency_ms(c, "p50"), latency_ms(c, "p99")) if v]
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("throughput (samples / s)")
    ax.set_ylabel("latency per batch (ms)")
    _legend(ax, len(labelled) + bool(members) + is_number(limit) + (rec is not None))
    return _png(fig)


def _plot_memory(doc: Mapping[str, Any], colors: Mapping[str, Any]) -> bytes | None:
    boundary = doc.get("batch_boundary") or {}
    entries = {
        v: e
        for v, e in sorted(boundary.items())
        if any(is_number(p.get("peak_memory_bytes")) for p in e.get("probes") or [])
    }
    if not entries:
        return None
    peaks = [
        p["peak_memory_bytes"]
        for e in entries.values()
        for p in e.get("probes") or []
        if is_number(p.get("peak_memory_bytes"))
    ]
    limits = [e["memory_limit_bytes"] for e in entries.values() if is_number(e.get("memory_limit_bytes"))]
    scale, unit = (2**30, "GiB") if max(peaks + limits) >= 2 * 2**30 else (2**20, "MiB")
    fig, ax = _new_axes("Peak memory of the batch-size probes, fitted model and limit")
    all_batches = []
    for variant, entry in entries.items():
        color = colors.get(variant)
        probes = [p for p in entry.get("probes") or [] if is_number(p.get("peak_memory_bytes"))]
        fits = [p for p in probes if p.get("fits")]
        all_batches += [p["batch_size"] for p in probes]
        ax.scatter(
            [p["batch_size"] for p in fits],
            [p["peak_memory_bytes"] / scale for p in fits],
            color=color,
            s=30,
            zorder=3,
            label=f"{variant}: fits",
        )
        # Probes that did not fit often have no peak (the worker was killed): draw them on the limit.
        limit_here = entry.get("memory_limit_bytes")
        fails = [
            p
            for p in entry.get("probes") or []
            if not p.get("fits") and (is_number(p.get("peak_memory_bytes")) or is_number(limit_here))
        ]
        if fails:
            ax.scatter(
                [p["batch_size"] for p in fails],
                [
                    (p["peak_memory_bytes"] if is_number(p.get("peak_memory_bytes")) else limit_here) / scale
                    for p in fails
                ],
                color=color,
                marker="x",
                s=45,
                zorder=3,
                label=f"{variant}: does not fit",
            )
        model = entry.get("model")
        if isinstance(model, Mapping) and probes:
            top = max(max(p["batch_size"] for p in probes), entry.get("max_batch_size") or 1) * 1.15
            xs = [1 + (top - 1) * i / 100 for i in range(101)]
            ax.plot(
                xs,
                [(model["intercept_bytes"] + model["bytes_per_sample"] * x) / scale for x in xs],
                color=color,
                ls="--",
                lw=1,
                alpha=0.8,
            )
        if is_int(entry.get("max_batch_size")):
            ax.axvline(entry["max_batch_size"], color=color, ls=":", lw=1, alpha=0.7)
    for limit in sorted(set(limits)):
        ax.axhline(limit / scale, color="red", lw=1.2, ls="-.", label=f"limit {fmt_bytes(limit)}")
    if len(set(all_batches)) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (dotted: largest that fits; dashed: fitted affine model)")
    ax.set_ylabel(f"peak memory ({unit})")
    ax.set_ylim(bottom=0)
    _legend(ax, 2 * len(entries) + len(set(limits)))
    return _png(fig)


def _trace_from_measurement(rec: Mapping[str, Any]) -> tuple[list[tuple[int, float]], int, float | None, float] | None:
    """(points, samples, warmup end in samples or None, steady mean ms) from a schema-2 row's raw samples."""
    from autotune.core.measurement import Measurement

    record = rec.get("measurement")
    if not isinstance(record, Mapping):
        return None
    m = Measurement.from_dict(record)
    points = [(i, s * 1e3) for i, s in enumerate(m.samples)]
    start = m.analysis.steady_start
    return points, len(m.samples), None if start is None else float(start), m.mean_seconds * 1e3


def _plot_trace(doc: Mapping[str, Any]) -> bytes | None:
    rec = doc.get("recommendation")
    if rec is None:
        return None
    per_sample = rec.get("iterations_per_sample") or 1
    warmup = rec.get("warmup_iterations")
    from_samples = _trace_from_measurement(rec)
    end: float | None = None
    steady_mean: float | None = None
    if from_samples is not None:
        # schema 2: every sample, and the steady mean the measurement itself reports (no recomputation here)
        points, samples, end, steady_mean = from_samples
        shown = samples
    else:
        trace = rec.get("trace_ms")
        if not trace:
            return None
        # trace_ms is the measurement's samples downsampled evenly (autotune.candidate): point i is
        # sample floor(i * samples / len(trace)); a sample is one timed block of
        # iterations_per_sample calls, and warmup_iterations counts calls.
        samples = (
            rec.get("samples") if is_int(rec.get("samples")) and rec["samples"] > len(trace) else len(trace)
        )
        shown = len(trace)
        step = samples / len(trace)
        points = [(math.floor(i * step), v) for i, v in enumerate(trace) if is_number(v)]
        if is_int(warmup) and not (rec.get("iterations_per_sample") is None and warmup > samples):
            end = warmup / per_sample
    if not points:
        return None
    fig, ax = _new_axes(
        f"Timing trace of {rec['variant']} at batch {rec['batch_size']} "
        f"({rec.get('classification') or 'unclassified'})"
    )
    ax.plot([x for x, _ in points], [y for _, y in points], lw=0.8, color="tab:blue", label="per-iteration")
    if is_int(warmup) and end is None and from_samples is None:
        # Without iterations_per_sample the warmup end cannot be placed on the sample axis.
        ax.plot([], [], " ", label=f"warmup: {warmup} iterations (position unknown)")
    elif end is not None:
        ax.axvspan(0, end, color="orange", alpha=0.15)
        ax.axvline(end, color="orange", lw=1.5, label=f"warmup end ({warmup} iterations)")
        if steady_mean is None:  # schema 1: the mean of the shown steady points
            steady = [y for x, y in points if x >= end]
            steady_mean = sum(steady) / len(steady) if steady else None
        if steady_mean is not None:
            ax.axhline(steady_mean, color="black", ls="--", lw=1, label=f"steady mean {fmt_ms(steady_mean)} ms")
    ax.set_xlabel(
        "timed sample"
        + (f" ({per_sample} iterations each)" if per_sample > 1 else "")
        + (f", {shown} of {samples} shown" if samples > shown else "")
    )
    ax.set_ylabel("ms per batch")
    _legend(ax, 3)
    return _png(fig)


def _plot_accuracy(doc: Mapping[str, Any], colors: Mapping[str, Any]) -> bytes | None:
    """Throughput (y) against the accuracy drop (x) of every candidate that has one, the Pareto front (lower drop,
    higher throughput), the budget, and the rejected candidates as red crosses on the x axis."""
    label, points, budget = accuracy_points(doc)
    timed = [(c, d) for c, d in points if c.get("status") == "ok" and is_number(c.get("throughput"))]
    if not timed or not any(c.get("accuracy") for c, _ in points):
        return None
    fig, ax = _new_axes("Throughput vs accuracy")
    # the axis spans the timed candidates and the budget; a rejected candidate far beyond sits at its right edge
    finite = [d for _, d in timed if math.isfinite(d)]
    right = max([*finite, budget or 0.0, 1e-6]) * 1.6
    seen: set[str] = set()
    for c, drop in timed:
        variant = str(c["variant"])
        ax.scatter([drop], [c["throughput"]], s=36, color=colors.get(variant), zorder=3,
                   label=None if variant in seen else variant)
        seen.add(variant)
    rejected = [(c, d) for c, d in points if c.get("status") == "rejected"]
    if rejected:
        ax.scatter([min(d, right) for _, d in rejected], [0.0] * len(rejected), marker="x", s=50, color="red",
                   zorder=4, clip_on=False, label="rejected by the budget (at the edge: beyond it)")
    front = accuracy_front(points)
    if len(front) > 1:
        ax.plot([d for d, _ in front], [t for _, t in front], ls="--", lw=1.2, color="black", alpha=0.7,
                label="Pareto front")
    if budget is not None:
        ax.axvline(budget, ls=":", lw=1.4, color="crimson", label="budget (max drop)")
    rec = doc.get("recommendation")
    if isinstance(rec, Mapping) and is_number(rec.get("throughput")):
        for c, drop in timed:
            if c.get("variant") == rec.get("variant") and c.get("batch_size") == rec.get("batch_size"):
                _mark_recommended(ax, drop, float(rec["throughput"]))
                break
    ax.set_xlim(left=-right * 0.03, right=right)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(label)
    ax.set_ylabel("samples/s")
    if "disagreement" in label or "fraction" in label:
        from matplotlib.ticker import PercentFormatter

        ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    _legend(ax, len(seen) + 3)
    return _png(fig)


#: How each role of a serving configuration is drawn: color, line width, alpha, legend label.
_SERVING_STYLE = {
    "naive": ("tab:red", 1.6, 0.9, "naive: one instance, no batching"),
    "batch-loop": ("tab:orange", 1.6, 0.9, "batch loop"),
    "search": ("tab:gray", 0.9, 0.55, "configurations tried"),
    "pruned": ("tab:gray", 0.9, 0.55, "configurations tried"),
}


def _plot_serving(doc: Mapping[str, Any]) -> bytes | None:
    """Each loaded configuration's points (answered requests/s, p99) as a line, the SLO, the recommendation."""
    section = doc.get("serving")
    if not isinstance(section, Mapping):
        return None
    baselines = section.get("baselines")
    configs = [c for c in [*(section.get("configs") or []),
                           *(baselines.values() if isinstance(baselines, Mapping) else [])] if isinstance(c, Mapping)]
    lines: list[tuple[Mapping[str, Any], list[tuple[float, float]]]] = []
    for c in configs:
        points: list[tuple[float, float]] = []
        for p in c.get("points") or []:
            if not isinstance(p, Mapping):
                continue
            x = p.get("achieved_rate") if is_number(p.get("achieved_rate")) else p.get("rate")
            y = p.get("p99_ms")
            if is_number(x) and is_number(y):
                points.append((float(x), float(y)))
        if points and all(c != other for other, _ in lines):  # a baseline may be listed among the configs too
            lines.append((c, sorted(points)))
    if not lines:
        return None
    rec = section.get("recommendation") if isinstance(section.get("recommendation"), Mapping) else None
    fig, ax = _new_axes("Serving: p99 latency vs throughput per configuration")
    labelled: set[str] = set()
    for c, points in lines:
        is_rec = rec is not None and all(c.get(k) == rec.get(k) for k in
                                         ("variant", "instances", "threads", "max_batch", "max_delay_ms"))
        color, width, alpha, label = _SERVING_STYLE.get(str(c.get("role")), _SERVING_STYLE["search"])
        if is_rec:
            color, width, alpha = "tab:green", 2.2, 1.0
            delay = c.get("max_delay_ms")
            label = (f"{c.get('instances')} x {c.get('threads')}, batch {c.get('max_batch')}, delay "
                     f"{f'{delay:g}' if is_number(delay) else '?'} ms")
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", ms=3, lw=width, alpha=alpha,
                color=color, label=None if label in labelled else label, zorder=3 if is_rec else 2)
        labelled.add(label)
    slo = section.get("slo_ms")
    if is_number(slo):
        ax.axhline(slo, color="red", ls=":", lw=1.4, label=f"SLO {section.get('percentile') or 'p99'} <= "
                   f"{fmt_ms(slo)} ms")
    if rec is not None and is_number(rec.get("max_rate")) and is_number(rec.get("p99_ms")):
        _mark_recommended(ax, rec["max_rate"], rec["p99_ms"])
    values = [y for _, points in lines for _, y in points if y > 0] + ([float(slo)] if is_number(slo) and slo > 0
                                                                      else [])
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("requests / s answered")
    ax.set_ylabel("p99 latency per request (ms)")
    ax.set_xlim(left=0)
    _legend(ax, len(labelled) + is_number(slo) + (rec is not None))
    return _png(fig)


def plot_pngs(doc: Mapping[str, Any]) -> dict[str, bytes]:
    """PNG bytes per plot name for a normalised document (see ``render_plots``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return {}
    colors = _variant_colors(doc)
    rendered = {
        "throughput": _plot_throughput(doc, colors),
        "latency": _plot_latency(doc, colors),
        "accuracy": _plot_accuracy(doc, colors),
        "memory": _plot_memory(doc, colors),
        "trace": _plot_trace(doc),
        SERVING_PLOT: _plot_serving(doc),
    }
    return {name: png for name, png in rendered.items() if png is not None}


def render_plots(doc: Mapping[str, Any]) -> dict[str, bytes]:
    """PNG bytes per plot name (see ``PLOT_FILES``); plots without data are left out, and all
    of them when matplotlib is not installed. Uses the Agg canvas on a ``Figure`` (no pyplot),
    so it touches no global matplotlib state and needs no display."""
    return plot_pngs(normalise_report(doc))
