"""The renderings of a ``[generate]`` run's report: the sentence, the tables, the console lines and the plot.

A generate run's report.json is its own document (``"kind": "generate"``): its rows are configurations at a
concurrency, not forward-pass candidates, so it is written and rendered here (report.json, report.md, the
``generate.png`` plot) and not by the batch pipeline's assembly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core.contention import busy
from autotune.report.plots import _mark_recommended, _png

GENERATE_PLOT = "generate.png"
#: Said in every report: a static batch is not continuous batching (issue 33's honesty rule).
ENGINE_NOTE = ("These figures are for static batches: one generate() call decodes its sequences together until "
               "the longest is done, and a new request waits for the next call. A server that admits requests "
               "between decode steps (continuous batching: vLLM, TGI, transformers' generate_batch) keeps the "
               "batch full and is what to use for online traffic; the concurrency boundary here still says how "
               "many sequences of this length fit in memory.")


def _ms(v: Any) -> str:
    return "-" if not isinstance(v, int | float) else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _q(q: Mapping[str, Any] | None) -> str:
    if not isinstance(q, Mapping):
        return "-"
    return f"{_ms(q.get('p50_ms'))} / {_ms(q.get('p99_ms'))}"


def _rate(p: Mapping[str, Any]) -> str:
    r, ci = p.get("tokens_per_s"), p.get("tokens_per_s_ci")
    if not isinstance(r, int | float):
        return "-"
    return f"{r:,.0f}" + (f" ({ci[0]:,.0f}-{ci[1]:,.0f})" if isinstance(ci, Sequence) and len(ci) == 2 else "")


def _mib(v: Any) -> str:
    return "-" if not isinstance(v, int | float) else f"{v / 2**20:,.0f} MiB"


def sentence(section: Mapping[str, Any]) -> str:
    rec = section.get("recommendation")
    if not isinstance(rec, Mapping):
        return f"No configuration to recommend: {section.get('reason') or 'none passed its checks'}."
    c = rec["concurrency"]
    screen = (f"{rec['tokens_per_s']:,.0f} useful tokens/s (95% CI {rec['tokens_per_s_ci'][0]:,.0f}-"
              f"{rec['tokens_per_s_ci'][1]:,.0f})")
    head = rec.get("headline")
    from_rounds = isinstance(head, Mapping) and isinstance(head.get("tokens_per_s"), int | float) \
        and isinstance(head.get("tokens_per_s_ci"), Sequence) and len(head["tokens_per_s_ci"]) == 2
    rate = screen
    if from_rounds:
        assert isinstance(head, Mapping)
        lo, hi = head["tokens_per_s_ci"]
        rate = (f"{head['tokens_per_s']:,.0f} useful tokens/s (median of {head.get('rounds')} fresh-process "
                f"side-by-side rounds, 95% CI {lo:,.0f}-{hi:,.0f}; its screen: {screen.replace(' useful', '')})")
    return (f"Run generate() with {rec['config']} at {c} sequence{'s' if c != 1 else ''} per call: {rate}, "
            f"{rec['per_sequence_tokens_per_s']:,.0f} tokens/s per sequence; "
            f"TTFT p50 {_ms(rec['ttft']['p50_ms'])} ms, p99 {_ms(rec['ttft']['p99_ms'])} ms; ITL p50 "
            f"{_ms(rec['itl']['p50_ms'])} ms, p99 {_ms(rec['itl']['p99_ms'])} ms"
            f"{' (per sequence, TTFT and ITL from its screen)' if from_rounds else ''}.")


def console_lines(section: Mapping[str, Any]) -> list[str]:
    lines = [sentence(section)]
    boundary = section.get("boundary")
    if isinstance(boundary, Mapping):
        lines.append(f"Boundary: {boundary.get('sentence')}.")
    for comp in (section.get("rounds") or {}).get("comparisons") or []:
        lines.append(comparison_text(comp))
    for text in (rounds_cut_text(section.get("rounds")), rounds_disturbed_text(section.get("rounds"))):
        if text:
            lines.append(text)
    return lines


def rounds_disturbed_text(rounds: Any) -> str | None:
    """Which side-by-side rounds ran on a busy machine (another process used CPU while one of their points was timed)
    and whether they were left out; None when none did (or an older report that did not look)."""
    if not isinstance(rounds, Mapping) or not isinstance(rounds.get("disturbed_rounds"), list) \
            or not rounds["disturbed_rounds"]:
        return None
    n, run = len(rounds["disturbed_rounds"]), rounds.get("rounds_run")
    text = f"{n} of the {run} side-by-side rounds ran while other processes used CPU: "
    if rounds.get("disturbed_left_out"):
        return text + (f"{'it was' if n == 1 else 'they were'} left out (each configuration kept two quiet rounds "
                       "or more).")
    return text + "too few quiet rounds were left to leave them out, so the figures above include a busy machine's."


def rounds_cut_text(rounds: Any) -> str | None:
    """What the budget left of the side-by-side rounds, when it cut them short; None when they all ran.

    Why: with fewer than two rounds per configuration there is no comparison, and the pick then rests on its own
    screen. Saying nothing read as if the rounds had backed it (a Qwen2 run's one round had the reference 1.56x the
    pick, and no word of it reached the report)."""
    if not isinstance(rounds, Mapping):
        return None
    run, asked = rounds.get("rounds_run"), rounds.get("rounds_asked")
    if not isinstance(run, int) or not isinstance(asked, int) or run >= asked:
        return None
    text = (f"The time budget (generate.time_budget_s) ended the side-by-side rounds after {run} of the {asked} asked "
            "for (generate.rounds)")
    if not rounds.get("comparisons"):
        return text + ": too few to compare (two per configuration are needed), so the pick rests on its screen."
    return text + ", so the intervals above are as wide as those rounds leave them."


def comparison_text(comp: Mapping[str, Any]) -> str:
    ci = comp.get("ratio_ci") or [float("nan"), float("nan")]
    verdict = {"faster": "faster", "slower": "slower", "undecided": "undecided (the interval holds 1)"}.get(
        str(comp.get("verdict")), str(comp.get("verdict")))
    text = (f"{comp['config']} vs {comp['against']}: {comp['ratio']:.2f}x tokens/s (95% CI {ci[0]:.2f}-{ci[1]:.2f}, "
            f"{comp.get('rounds')} fresh-process rounds each), {verdict}")
    if comp.get("payback"):
        text += f"; {comp['payback']}"
    return text + "."


def markdown(doc: Mapping[str, Any]) -> str:
    section = doc.get("generate") or {}
    model = section.get("model") or {}
    out = [f"# autotune generate report: {doc.get('recipe', {}).get('name', '')}", ""]
    if not doc.get("complete"):
        out += [f"*Incomplete: {'interrupted' if doc.get('interrupted') else 'in progress'} (phase "
                f"{doc.get('phase')}); what was measured so far.*", ""]
    out += [sentence(section), ""]
    out += [f"Model: {model.get('class', '?')} ({model.get('model_type', '?')}, {model.get('layers', '?')} layers, "
            f"{model.get('parameters', 0):,} parameters, vocabulary {model.get('vocab_size', '?')}). Workload: "
            f"{section.get('workload', {}).get('text', '')}", ""]
    boundary = section.get("boundary")
    if isinstance(boundary, Mapping):
        out += ["## Concurrency boundary", "", f"{boundary.get('sentence')} ({boundary.get('config')}; limit from "
                f"{boundary.get('limit_source')}; {len(boundary.get('probes') or [])} probes, each a fresh process).",
                "", "| sequences | fits | peak | seconds |", "|---|---|---|---|"]
        out += [f"| {p.get('batch_size')} | {'yes' if p.get('fits') else 'no'} | {_mib(p.get('peak_memory_bytes'))} "
                f"| {p.get('seconds', 0):.1f} |" for p in boundary.get("probes") or []]
        out.append("")
    out += ["## Configurations", "", "Each row one fresh process: a first call (compile, if any), then timed calls. "
            "tokens/s counts each prompt's own new tokens; TTFT and ITL are ms, p50 / p99 (ITL after the "
            "decode steps' warmup).", "",
            "| configuration | sequences | tokens/s (95% CI) | TTFT p50 / p99 | ITL p50 / p99 | peak | first call s "
            "| recompiles | status |", "|---|---|---|---|---|---|---|---|---|"]
    for p in section.get("points") or []:
        status = p.get("status", "?") + (f": {p['reason']}" if p.get("reason") else "")
        foreign = p.get("foreign_cores")
        if busy(foreign):
            status += f" (busy machine: other processes used {foreign:.2f} cores)"
        first = p.get("first_call_seconds")
        out.append(f"| {p.get('config')} | {p.get('concurrency')} | {_rate(p)} | {_q(p.get('ttft'))} | "
                   f"{_q(p.get('itl'))} | {_mib(p.get('peak_memory_bytes'))} | "
                   f"{'-' if not isinstance(first, int | float) else f'{first:.2f}'} | {p.get('recompiles', '-')} | "
                   f"{status} |")
    out.append("")
    rounds = section.get("rounds")
    said = [s for s in (rounds_cut_text(rounds), rounds_disturbed_text(rounds)) if s]
    if isinstance(rounds, Mapping) and (rounds.get("comparisons") or said):
        out += ["## Side by side", "", f"At {rounds.get('concurrency')} sequences, each configuration again in "
                "fresh processes, interleaved:", ""]
        out += [f"- {comparison_text(c)}" for c in rounds.get("comparisons") or []]
        out += ["", *said, ""] if said else [""]
    if section.get("notes"):
        out += ["## Notes", ""] + [f"- {n}" for n in section["notes"]] + [""]
    out += [ENGINE_NOTE, ""]
    art = doc.get("artifact")
    if isinstance(art, Mapping) and art.get("status") == "ok":
        out += ["## Artifact", "", "`artifact/load.py` returns a ready `generate` callable with the chosen settings "
                "(`generate.json`); `artifact/run.sh` runs one batch in its environment.", "", "```python",
                "from load import load", "generate = load()", "out = generate(input_ids, attention_mask)", "```", ""]
    elif isinstance(art, Mapping):
        out += ["## Artifact", "", f"Not written: {art.get('reason')}", ""]
    return "\n".join(out)


def plot(section: Mapping[str, Any]) -> bytes | None:
    """Tokens/s against concurrency per configuration (top) and p99 TTFT / ITL (bottom), the pick starred."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    lines: dict[str, list[Mapping[str, Any]]] = {}
    for p in section.get("points") or []:
        if p.get("status") == "ok" and isinstance(p.get("tokens_per_s"), int | float):
            lines.setdefault(str(p["config"]), []).append(p)
    if not lines:
        return None
    fig = Figure(figsize=(7.5, 6.4), layout="constrained")
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2, sharex=None)
    top.set_title("generate(): useful tokens/s and p99 latencies vs concurrent sequences", fontsize=11)
    for label, pts in sorted(lines.items()):
        pts = sorted(pts, key=lambda p: p["concurrency"])
        xs = [p["concurrency"] for p in pts]
        line = top.plot(xs, [p["tokens_per_s"] for p in pts], marker="o", ms=3, label=label)[0]
        bottom.plot(xs, [p["itl"]["p99_ms"] for p in pts], marker="o", ms=3, color=line.get_color(),
                    label=f"{label} ITL p99")
        bottom.plot(xs, [p["ttft"]["p99_ms"] for p in pts], marker="s", ms=3, ls="--", color=line.get_color(),
                    alpha=0.6, label=f"{label} TTFT p99")
    rec = section.get("recommendation")
    if isinstance(rec, Mapping):
        _mark_recommended(top, rec["concurrency"], rec["tokens_per_s"])
    for ax in (top, bottom):
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3, which="both")
    top.set_ylabel("useful tokens / s")
    bottom.set_ylabel("p99 (ms)")
    bottom.set_xlabel("concurrent sequences per generate() call")
    bottom.set_yscale("log")
    top.legend(fontsize=7, loc="best")
    bottom.legend(fontsize=6, loc="best", ncols=2)
    return _png(fig)
