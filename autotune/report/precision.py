"""Precision and accuracy in the reports: the candidates' accuracy against eager fp32, their model size, the
per-precision table, the throughput-versus-accuracy points, and what the recommendation costs in accuracy.

A candidate's ``accuracy`` (``autotune.worker.accuracy.AccuracyResult.to_dict``) is in one of three kinds: the
user's ``[accuracy] metric`` (value, eager fp32's reference, the drop), top-1 ``agreement`` with eager fp32 (drop =
disagreement) or ``closeness`` (drop = norm-wise relative error). All candidates of one run share the kind (it
follows the recipe and the output's shape), so their drops are comparable. An fp32 candidate without one was
judged by the strict gate: its outputs equal eager fp32's within fp32 rounding, which the table and the plot
show as no drop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.report.format import DASH, fmt_bytes, fmt_rate
from autotune.report.schema import is_number

PRECISION_HEADERS = ["precision", "best samples/s", "vs best fp32", "model size", "accuracy", "drop", "budget",
                     "candidates"]


def accuracy_of(c: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    acc = (c or {}).get("accuracy")
    return acc if isinstance(acc, Mapping) else None


def number(value: Any) -> float | None:
    """A stored number, with ``"inf"``/``"nan"`` (JSON has neither) read back; None when absent."""
    if is_number(value):
        return float(value)
    if value in ("inf", "-inf", "nan"):
        return float(value)
    return None


def has_precision_facts(doc: Mapping[str, Any]) -> bool:
    """Whether the reports show precision facts: some candidate has an accuracy, or a precision other than fp32."""
    return any(accuracy_of(c) is not None or (c.get("precision") or "fp32") != "fp32"
               for c in doc.get("candidates") or [])


def drop_text(acc: Mapping[str, Any]) -> str:
    drop = number(acc.get("drop"))
    if drop is None:
        return DASH
    if not math.isfinite(drop):
        return "no score"
    if acc.get("kind") == "closeness":
        return f"rel. error {drop:.2g}"
    if acc.get("relative") or acc.get("kind") == "agreement":
        return f"{100 * drop:.2f}%"
    return f"{drop:.4g}"


def value_text(acc: Mapping[str, Any]) -> str:
    value = number(acc.get("value"))
    if value is None:
        return DASH
    kind = acc.get("kind")
    if kind == "agreement":
        return f"{100 * value:.2f}% top-1 agreement"
    if kind == "closeness":
        return f"cosine {value:.6f}"
    return f"{acc.get('metric') or 'metric'} {value:.4g}"


def accuracy_cell(c: Mapping[str, Any]) -> str:
    """The candidates table's ``accuracy`` cell: value and drop, or why there is none."""
    acc = accuracy_of(c)
    if acc is None:
        if (c.get("precision") or "fp32") == "fp32" and c.get("status") in ("ok", "rejected"):
            return "fp32 (strict gate)"
        return DASH
    text = f"{value_text(acc)}, drop {drop_text(acc)}"
    if acc.get("gating") and not acc.get("passed"):
        text += " (undecided, rejected)" if acc.get("verdict") == "undecided" else " (over budget)"
    elif acc.get("gating") and acc.get("verdict") == "undecided":
        needed = acc.get("needed")
        text += (f" (undecided: ~{needed:,} {acc.get('needed_unit') or 'samples'} would decide)"
                 if isinstance(needed, int) else " (undecided)")
    return text


def size_cell(c: Mapping[str, Any]) -> str:
    return fmt_bytes(c.get("model_bytes"))


def cost_sentence(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> str | None:
    """What the recommendation costs in accuracy (None when the run has no precision facts to tell)."""
    acc = accuracy_of(rec)
    if acc is None:
        if not has_precision_facts(doc) or (rec.get("precision") or "fp32") != "fp32":
            return None
        return ("Costs no accuracy: it runs in fp32 and its outputs match eager fp32's within fp32 rounding "
                "(the strict gate).")
    where = "the data" if acc.get("data") == "factory" else "random inputs"
    scope = f"{acc.get('batches')} batches of {where} ({acc.get('samples')} samples)"
    kind = acc.get("kind")
    if kind == "metric":
        ref = number(acc.get("reference"))
        text = (f"Accuracy cost: {value_text(acc)} against eager fp32's {ref:.4g} on {scope}, a drop of "
                f"{drop_text(acc)}" if ref is not None else f"Accuracy: {value_text(acc)} on {scope}")
    elif kind == "agreement":
        text = f"Accuracy cost: {value_text(acc)} with eager fp32 on {scope}, a drop of {drop_text(acc)}"
    else:
        text = (f"Accuracy cost: outputs within {drop_text(acc)} of eager fp32 (norm-wise), {value_text(acc)}, "
                f"on {scope}")
    if acc.get("budget"):
        text += f" (budget: {acc['budget']})"
    text += "."
    if acc.get("uncertainty") and acc.get("kind") in ("agreement", "metric"):
        text += f" How sure: {acc['uncertainty']}."
        if acc.get("verdict") == "undecided":
            text += (" Undecided is not a rejection ([accuracy] undecided = \"accept\"): more [data] batches "
                     "would say whether it keeps the budget.")
    if acc.get("data") != "factory":
        text += " Not measured on real data: the recipe has no [data] factory."
    return text


def random_data_note(doc: Mapping[str, Any]) -> str | None:
    """The warning that accuracy was scored on random inputs (no ``[data]``), naming the candidates."""
    hits = [str(c.get("variant")) for c in doc.get("candidates") or []
            if (acc := accuracy_of(c)) is not None and acc.get("data") == "random"]
    if not hits:
        return None
    variants = sorted(set(hits))
    shown = ", ".join(variants[:4]) + (f" and {len(variants) - 4} more" if len(variants) > 4 else "")
    return ("Accuracy was not measured on real data: without a [data] factory the lower-precision variants "
            f"({shown}) were compared with eager fp32 on random inputs, which says how far their outputs move, not "
            "what a task loses. Give [data] (and an [accuracy] metric with your labels) for that.")


def precision_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """Per precision: its best feasible candidate's throughput and ratio to the best fp32 one, model size,
    accuracy and drop, the budget, and how many candidates were measured or rejected."""
    by_precision: dict[str, list[Mapping[str, Any]]] = {}
    for c in doc.get("candidates") or []:
        by_precision.setdefault(str(c.get("precision") or "fp32"), []).append(c)
    if not by_precision or not has_precision_facts(doc):
        return []

    def best(cands: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        ok = [c for c in cands if c.get("status") == "ok" and c.get("feasible") is not False
              and is_number(c.get("throughput"))]
        return max(ok, key=lambda c: float(c["throughput"])) if ok else None

    fp32 = best(by_precision.get("fp32", []))
    order = sorted(by_precision, key=lambda p: (p != "fp32", p))
    rows = []
    for precision in order:
        cands = by_precision[precision]
        top = best(cands)
        shown = top or next((c for c in cands if accuracy_of(c) is not None), cands[0])
        acc = accuracy_of(shown)
        ratio = DASH
        if top is not None and fp32 is not None and is_number(fp32.get("throughput")) and fp32["throughput"] > 0:
            ratio = f"{float(top['throughput']) / float(fp32['throughput']):.2f}x"
        ok = sum(1 for c in cands if c.get("status") == "ok")
        rejected = sum(1 for c in cands if c.get("status") == "rejected")
        count = f"{ok} measured" + (f", {rejected} rejected" if rejected else "")
        rows.append([
            precision,
            fmt_rate(top.get("throughput")) + f" ({top.get('variant')} @ {top.get('batch_size')})" if top else DASH,
            ratio,
            size_cell(shown),
            value_text(acc) if acc is not None else ("= eager fp32" if precision == "fp32" else DASH),
            drop_text(acc) if acc is not None else ("0 (strict gate)" if precision == "fp32" else DASH),
            (str(acc.get("budget")) if acc.get("gating", True) else "strict gate") if acc is not None and
            acc.get("budget") else ("strict gate" if precision == "fp32" else DASH),
            count,
        ])
    return rows


#: What the "Precision and accuracy" section says above its table (md and html).
PRECISION_INTRO = ("Per precision, its fastest feasible candidate: the ratio to the fastest fp32 one (single "
                   "measurements, not the showdown's paired ratio), the model's size as the variant stores it, its "
                   "accuracy against eager fp32 on the traffic and the drop. Lower-precision variants are judged by "
                   "the accuracy budget, fp32 ones by the strict gate.")


def accuracy_points(doc: Mapping[str, Any]) -> tuple[str, list[tuple[Mapping[str, Any], float]], float | None]:
    """The plot's axis label, (candidate, drop) for every candidate that has one (fp32 rows judged by the strict
    gate count as 0), and the budget's max_drop (None when the candidates disagree on it)."""
    kinds = {str(acc.get("kind")) for c in doc.get("candidates") or [] if (acc := accuracy_of(c)) is not None}
    if not kinds:
        return "", [], None
    kind = kinds.pop() if len(kinds) == 1 else "mixed"
    label = {"agreement": "top-1 disagreement with eager fp32",
             "closeness": "relative error against eager fp32 (norm-wise)",
             "metric": "metric drop against eager fp32"}.get(kind, "accuracy drop against eager fp32")
    points: list[tuple[Mapping[str, Any], float]] = []
    budgets: set[float] = set()
    for c in doc.get("candidates") or []:
        acc = accuracy_of(c)
        if acc is None:
            if (c.get("precision") or "fp32") == "fp32" and c.get("status") == "ok":
                points.append((c, 0.0))
            continue
        drop = number(acc.get("drop"))
        if drop is not None:
            points.append((c, drop))
        if acc.get("gating") and is_number(acc.get("max_drop")):
            budgets.add(float(acc["max_drop"]))
    if any((acc := accuracy_of(c)) is not None and acc.get("relative") for c, _ in points):
        label += " (fraction of its value)"
    return label, points, budgets.pop() if len(budgets) == 1 else None


def accuracy_front(points: Sequence[tuple[Mapping[str, Any], float]]) -> list[tuple[float, float]]:
    """(drop, throughput) of the measured feasible points no other beats on both (lower drop, higher throughput),
    by drop: the throughput-versus-accuracy Pareto front."""
    pts = [(drop, float(c["throughput"])) for c, drop in points
           if c.get("status") == "ok" and c.get("feasible") is not False and is_number(c.get("throughput"))
           and math.isfinite(drop)]
    front = [p for p in pts if not any(o[0] <= p[0] and o[1] >= p[1] and o != p for o in pts)]
    return sorted(set(front))


__all__ = [
    "PRECISION_HEADERS",
    "PRECISION_INTRO",
    "accuracy_cell",
    "accuracy_front",
    "accuracy_of",
    "accuracy_points",
    "cost_sentence",
    "drop_text",
    "has_precision_facts",
    "number",
    "precision_rows",
    "random_data_note",
    "size_cell",
    "value_text",
]
