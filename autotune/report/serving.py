"""The serving stage in the report: the document's ``serving`` section as sentences and table rows.

A recipe with ``[serving]`` ends with a serving search: how the recommended model is served (instances x threads,
the dynamic batcher's max batch and max delay) for the most requests per second within a latency SLO, measured
under real load. The report says how to serve in one sentence, what the recommendation does at 50/80/100% of its
max rate, how it compares to the two naive ways of serving (one instance without batching; the search's batch
size in a loop), every configuration the search considered, what each knob was worth, how to start the server
and configure the others, and what the stage cost. A stage that failed, was skipped or could not decide says so
with the reason.

Shared by report.md, report.html and the console, like :mod:`autotune.report.traffic`. The section is optional:
every function here returns nothing for a document without it, so such reports render exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.report.format import DASH, fmt_seconds
from autotune.report.schema import is_int, is_number

AT_FRACTION_HEADERS = ["load", "offered/s", "answered/s", "p50 ms", "p90 ms", "p99 ms", "p99 95% CI", "sent",
                       "failed", "timed out", "dropped"]
BASELINE_HEADERS = ["server", "configuration", "max requests/s", "95% CI", "recommendation x"]
CONFIG_HEADERS = ["role", "variant", "instances x threads", "max batch", "max delay ms", "predicted max/s",
                  "measured max/s", "95% CI", "note"]
#: The intro under the configurations table.
CONFIGS_INTRO = ("Every configuration the serving search considered: predicted from measured service times by "
                 "the simulation, measured under real load where it was promising (max/s: the highest offered rate "
                 "within the SLO); pruned ones were ruled out without load, with the reason.")


def serving_of(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The document's ``serving`` section (None for a run without ``[serving]``, or an older report)."""
    section = doc.get("serving")
    return section if isinstance(section, Mapping) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _rate(value: Any) -> str:
    if not is_number(value):
        return DASH
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _ms(value: Any) -> str:
    if not is_number(value):
        return DASH
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def _interval(value: Any, fmt: Any) -> str | None:
    if isinstance(value, list | tuple) and len(value) == 2 and all(is_number(v) for v in value):
        return f"{fmt(value[0])}-{fmt(value[1])}"
    return None


def _count(n: Any, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def slo_text(section: Mapping[str, Any]) -> str:
    """``p99 <= 40 ms``."""
    return f"{section.get('percentile') or 'p99'} <= {_ms(section.get('slo_ms'))} ms"


def knobs_text(config: Mapping[str, Any]) -> str:
    """``2 instances x 1 thread, max batch 8, max delay 2 ms``."""
    delay = config.get("max_delay_ms")
    return (f"{_count(config.get('instances'), 'instance', 'instances')} x "
            f"{_count(config.get('threads'), 'thread', 'threads')}, max batch {config.get('max_batch')}, "
            f"max delay {f'{delay:g}' if is_number(delay) else DASH} ms")


def serving_status_text(doc: Mapping[str, Any]) -> str | None:
    """Why there is no serving recommendation: failed, skipped or undecided, with the reason (None when there is
    one, or no section)."""
    section = serving_of(doc)
    if section is None:
        return None
    status, reason = section.get("status"), section.get("reason")
    if status in ("failed", "skipped"):
        return f"Serving {status}: {reason or 'no reason given'}."
    if not isinstance(section.get("recommendation"), Mapping):
        return (f"Serving undecided: {reason or 'no configuration served a rate within the SLO'} "
                f"(SLO {slo_text(section)}).")
    return None


def _batches_formed(section: Mapping[str, Any], rec: Mapping[str, Any]) -> str:
    """" The server's calls at that rate held 2.6 requests on average (up to 8), in 3.1 ms each at the median." from
    the recommendation's point at its max rate, where it may batch and the server said (its /stats)."""
    full = next((p for p in section.get("at_fraction") or [] if isinstance(p, Mapping) and p.get("fraction") == 1.0),
                None)
    if full is None or not is_number(full.get("rows_per_call")) or not is_int(rec.get("max_batch")) \
            or rec["max_batch"] < 2:
        return ""
    samples = section.get("request_samples")
    each = samples if is_int(samples) and samples > 0 else None  # ("batch": a request is a whole batch of rows)
    per = float(full["rows_per_call"]) / (each or 1)
    text = (f" The server's calls at that rate held {per:.1f} {'requests' if each else 'rows'} on average (up to "
            f"{rec['max_batch'] // (each or 1)})")
    if is_number(full.get("call_p50_ms")):
        text += f", each {_ms(full['call_p50_ms'])} ms at the median"
    return text + "."


def serving_sentence(doc: Mapping[str, Any]) -> str | None:
    """How to serve, in one sentence: "Serve with 2 instances x 1 thread, max batch 8, max delay 2 ms: 412
    requests/s (CI 398-425) within p99 <= 40 ms; p50 6.1 ms, p99 31 ms at that rate" (None without a
    recommendation)."""
    section = serving_of(doc)
    rec = section.get("recommendation") if section is not None else None
    if section is None or not isinstance(rec, Mapping):
        return None
    ci = _interval(rec.get("max_rate_ci"), _rate)
    if rec.get("bracketed") is False:  # no rate above it failed: a lower bound
        rate = f"at least {_rate(rec.get('max_rate'))} requests/s (no higher rate was tried)"
    elif rec.get("floor") is True:  # the failure above it rested on too few requests to bound the percentile
        few = f" of {rec['bound_requests']} requests" if is_int(rec.get("bound_requests")) else ""
        rate = (f"at least {_rate(rec.get('max_rate'))} requests/s (the failure above it came from points{few}, too "
                "few to resolve the percentile: see the notes)")
    else:
        rate = f"{_rate(rec.get('max_rate'))} requests/s" + (f" (CI {ci})" if ci else "")
    if "held_s" in rec and rec["held_s"] is None and not section.get("interrupted"):
        # said where the rate is, not only in the notes: an unheld rate rests on 2-8-s points, and LayoutLM's
        # (337.8 requests/s, never held) missed its SLO under tritonclient at 90% of it (session 45)
        unheld = "not held on a fresh server: see the notes"
        rate = f"{rate[:-1]}; {unheld})" if rate.endswith(")") else f"{rate} ({unheld})"
    latency = f"p50 {_ms(rec.get('p50_ms'))} ms, p99 {_ms(rec.get('p99_ms'))} ms at that rate"
    target = section.get("rate_target")
    if is_number(target):
        cores = ""
        if is_int(rec.get("instances")) and is_int(rec.get("threads")):
            used = rec["instances"] * rec["threads"]
            of = f" of {section['cores']}" if is_int(section.get("cores")) else ""
            cores = f" ({_count(used, 'core', 'cores')}{of})"
        text = (f"Serve {_rate(target)} requests/s with {knobs_text(rec)}{cores}, the fewest cores within "
                f"{slo_text(section)}: it sustains up to {rate}; {latency}")
    else:
        text = f"Serve with {knobs_text(rec)}: {rate} within {slo_text(section)}; {latency}"
    extra = []
    environment = rec.get("environment")
    if isinstance(environment, str) and environment and environment != "glibc":
        extra.append(f"process environment {environment}")
    picked = (doc.get("recommendation") or {}).get("variant")
    if rec.get("variant") and rec.get("variant") != picked:
        extra.append(f"variant {rec.get('variant')}" + (f", not the search's pick {picked}" if picked else ""))
    if extra:
        text += f" ({'; '.join(extra)})"
    text += "."
    if is_number(rec.get("goodput")):
        text += f" Goodput at that rate: {_rate(rec['goodput'])} requests/s answered within the SLO."
    text += _batches_formed(section, rec)
    if section.get("interrupted"):
        text += " The serving stage was interrupted: this is the best configuration measured before it stopped."
    notes = [str(n) for n in section.get("notes") or [] if isinstance(n, str)]
    if notes:
        text += " Notes: " + "; ".join(notes) + "."
    return text


def serving_at_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """The recommendation at fractions of its max rate (``AT_FRACTION_HEADERS``)."""
    section = serving_of(doc) or {}
    rows = []
    for point in section.get("at_fraction") or []:
        if not isinstance(point, Mapping):
            continue
        fraction = point.get("fraction")
        rows.append([
            f"{100 * fraction:.0f}%" if is_number(fraction) else DASH,
            _rate(point.get("rate")), _rate(point.get("achieved_rate")),
            _ms(point.get("p50_ms")), _ms(point.get("p90_ms")), _ms(point.get("p99_ms")),
            _interval(point.get("p99_ci_ms"), _ms) or DASH,
            *(str(point[k]) if is_int(point.get(k)) else DASH for k in ("sent", "failed", "timed_out", "dropped")),
        ])
    return rows


def serving_at_intro(doc: Mapping[str, Any]) -> str:
    """The sentence under the fractions table: what a point's p99 interval is, and what it is not.

    Why: each point is one window of a few seconds, and its interval a block bootstrap of that window's requests.
    On the shared 2-core machine, 30-s windows at the same rate, on the same server and client, read 1.0-3.2x the
    median 6-s window's p99 and differed from each other by up to 3x; the 6-s intervals covered the next 30-s p99 in
    6 of 20 (BENCHMARKS.md, bench_serving_windows.py). A reader must not take the interval as a prediction of a
    longer window."""
    section = serving_of(doc) or {}
    secs = [float(p["seconds"]) for p in section.get("at_fraction") or []
            if isinstance(p, Mapping) and is_number(p.get("seconds"))]
    span = (f"{min(secs):.0f} s" if round(min(secs)) == round(max(secs)) else f"{min(secs):.0f}-{max(secs):.0f} s") \
        if secs else "a few seconds"
    return ("The recommendation loaded below its max rate: the headroom that buys latency. Each row is one window of "
            f"{span}; its p99 interval is for that window's requests (a block bootstrap), not for a longer one: a "
            "rare stall (a neighbour, a collection) is often missing from a few seconds and present in minutes, so "
            "a longer window on a shared machine can read a higher p99.")


def _ratio(rec: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    mine, theirs = rec.get("max_rate"), other.get("max_rate")
    if is_number(mine) and is_number(theirs) and theirs > 0:
        return f"{mine / theirs:.2f}x"
    return DASH


def _held_mark(held: Any) -> str:
    """A baseline's rate as its hold left it: held for 10 s, lowered after a failed hold, or bisected only."""
    if held is True:
        return " (held 10 s)"
    return " (a hold failed above it)" if held is False else " (not held)"


def serving_baseline_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """The recommendation and the naive baselines side by side (``BASELINE_HEADERS``): their max rates, and how
    many times the baseline's the recommendation serves."""
    section = serving_of(doc) or {}
    rec = section.get("recommendation")
    baselines = section.get("baselines")
    if not isinstance(rec, Mapping) or not isinstance(baselines, Mapping):
        return []
    rows = [["recommended", knobs_text(rec), _rate(rec.get("max_rate")) + _held_mark(bool(rec.get("held_s")) or None),
             _interval(rec.get("max_rate_ci"), _rate) or DASH, "1.00x"]]
    for key, label in (("naive", "naive: one instance, no batching"),
                       ("batch_loop", "batch loop: the search's batch size in a loop")):
        base = baselines.get(key)
        if isinstance(base, Mapping):
            rows.append([label, knobs_text(base), _rate(base.get("max_rate")) + _held_mark(base.get("held")),
                         _interval(base.get("max_rate_ci"), _rate) or DASH, _ratio(rec, base)])
    return rows if len(rows) > 1 else []


def _same_knobs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    keys = ("variant", "environment", "instances", "threads", "max_batch", "max_delay_ms")
    return all(a.get(k) == b.get(k) for k in keys)


def serving_config_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """Every configuration considered (``CONFIG_HEADERS``), in the writer's order; the recommendation marked."""
    section = serving_of(doc) or {}
    rec = section.get("recommendation")
    rows = []
    for c in section.get("configs") or []:
        if not isinstance(c, Mapping):
            continue
        recommended = isinstance(rec, Mapping) and _same_knobs(c, rec)
        environment = c.get("environment")
        variant = str(c.get("variant")) + (f" ({environment})" if environment and environment != "glibc" else "")
        delay = c.get("max_delay_ms")
        note = "recommended" if recommended else str(c.get("pruned_reason") or "")
        rows.append([
            str(c.get("role")) + (" ★" if recommended else ""), variant,
            f"{c.get('instances')} x {c.get('threads')}", str(c.get("max_batch")),
            f"{delay:g}" if is_number(delay) else DASH,
            _rate(c.get("predicted_max_rate")), _rate(c.get("max_rate")),
            _interval(c.get("max_rate_ci"), _rate) or DASH, note,
        ])
    return rows


def serving_knob_lines(doc: Mapping[str, Any]) -> list[str]:
    """What each knob was worth: ``max_batch: batching 8 ... (2.10x)``."""
    section = serving_of(doc) or {}
    lines = []
    for knob in section.get("knobs") or []:
        if isinstance(knob, Mapping) and knob.get("text"):
            ratio = knob.get("ratio")
            lines.append(f"{knob.get('knob')}: {knob['text']}" + (f" ({ratio:.2f}x)" if is_number(ratio) else ""))
    return lines


def serving_server_lines(doc: Mapping[str, Any]) -> tuple[str | None, str | None, list[str]]:
    """(the command that starts the server, its stack, the files for it and for other servers)."""
    section = serving_of(doc) or {}
    server = _mapping(section.get("server"))
    command = server.get("command") if isinstance(server.get("command"), str) else None
    stack = server.get("stack") if isinstance(server.get("stack"), str) else None
    files = [str(f) for f in section.get("files") or [] if isinstance(f, str)]
    return command, stack, files


def serving_cost_text(doc: Mapping[str, Any]) -> str | None:
    """``The serving stage took 95 s, 12% of the run (calibration 20 s, load 70 s; the pick's hold 10 s and its
    curve 12 s of it).``"""
    section = serving_of(doc) or {}
    seconds = section.get("seconds")
    if not is_number(seconds):
        return None
    text = f"The serving stage took {fmt_seconds(seconds)}"
    share = section.get("share_of_run")
    if is_number(share):
        text += f", {100 * share:.0f}% of the run"
    calls = _mapping(section.get("calls"))
    parts = [f"{label} {fmt_seconds(calls[key])}" for key, label in (("calibration_s", "calibration"),
                                                                     ("load_s", "load"))
             if is_number(calls.get(key))]
    within = [f"{label} {fmt_seconds(calls[key])}" for key, label in (("warm_s", "fresh servers' warm-up"),
                                                                      ("baseline_hold_s", "the baselines' holds"),
                                                                      ("hold_s", "the pick's hold"),
                                                                      ("curve_s", "its curve"))
              if is_number(calls.get(key)) and calls[key] > 0]
    if within and parts:
        listed = ", ".join(within[:-1]) + " and " + within[-1] if len(within) > 1 else within[0]
        parts[-1] += f"; {listed} of it"
    return text + (f" ({', '.join(parts)})" if parts else "") + "."


def serving_setup_text(doc: Mapping[str, Any]) -> str | None:
    """How the load was made: ``Poisson arrivals, 1 sample per request, model resnet on 16 cores.``"""
    section = serving_of(doc)
    if section is None or section.get("status") != "ok":
        return None
    arrivals = {"poisson": "open-loop Poisson arrivals", "closed": "a closed loop of clients",
                "replay": "the recipe's arrival times replayed"}.get(str(section.get("arrivals")), "arrivals")
    samples = section.get("request_samples")
    per_request = "one of the data's batches per request" if samples == "batch" else \
        f"{_count(samples, 'sample', 'samples')} per request" if is_int(samples) else None
    parts = [arrivals, *([per_request] if per_request else [])]
    if section.get("model_name"):
        parts.append(f"model name {section['model_name']}")
    if is_int(section.get("cores")):
        parts.append(f"{_count(section['cores'], 'core', 'cores')} available")
    return "Load: " + ", ".join(parts) + "."


def serving_console_line(doc: Mapping[str, Any]) -> str | None:
    """The serving stage in one line for the console: the sentence and the naive baseline's ratio, or why there
    is no recommendation."""
    status = serving_status_text(doc)
    if status is not None:
        return status
    sentence = serving_sentence(doc)
    if sentence is None:
        return None
    section = serving_of(doc) or {}
    rec, naive = section.get("recommendation"), _mapping(section.get("baselines")).get("naive")
    if isinstance(rec, Mapping) and isinstance(naive, Mapping) and _ratio(rec, naive) != DASH:
        held = _held_mark(naive.get("held")).strip(" ()")
        sentence += f" {_ratio(rec, naive)} the naive server ({_rate(naive.get('max_rate'))} requests/s, {held})."
    return "Serving: " + sentence


def serving_files_text(files: Sequence[str]) -> str | None:
    """``Files in the artifact: the server's own: serve.py, serving.json; for other servers: triton/...``."""
    others = [f for f in files if "/" in f]
    own = [f for f in files if "/" not in f]
    parts = []
    if own:
        parts.append("the server's own: " + ", ".join(own))
    if others:
        parts.append("for other servers: " + ", ".join(others))
    return ("Files in the artifact: " + "; ".join(parts) + ".") if parts else None


@dataclass(frozen=True)
class ServingView:
    """The Serving section's content in the order both files show it; the renderers only lay it out."""

    headline: str  # the recommendation sentence, or why there is none
    recommended: bool  # the headline is a recommendation (shown in bold)
    setup: str | None
    #: (title, headers, rows, intro) of each table: at fractions, against the naive servers
    tables: list[tuple[str, list[str], list[list[str]], str | None]]
    knobs: list[str]
    #: the configurations table, after the plot
    configs: tuple[list[str], list[list[str]], str] | None
    command: str | None
    stack: str | None
    files: str | None
    cost: str | None


def serving_view(doc: Mapping[str, Any]) -> ServingView | None:
    """The Serving section of report.md and report.html (None for a document without one)."""
    if serving_of(doc) is None:
        return None
    sentence = serving_sentence(doc)
    tables = []
    for title, headers, rows, intro in (
            ("At fractions of the max rate", AT_FRACTION_HEADERS, serving_at_rows(doc), serving_at_intro(doc)),
            ("Against the naive servers", BASELINE_HEADERS, serving_baseline_rows(doc), None)):
        if rows:
            tables.append((title, headers, rows, intro))
    configs = serving_config_rows(doc)
    command, stack, files = serving_server_lines(doc)
    return ServingView(
        headline=sentence or serving_status_text(doc) or "Serving: no recommendation.",
        recommended=sentence is not None, setup=serving_setup_text(doc), tables=tables,
        knobs=serving_knob_lines(doc), configs=(CONFIG_HEADERS, configs, CONFIGS_INTRO) if configs else None,
        command=command, stack=stack, files=serving_files_text(files), cost=serving_cost_text(doc))
