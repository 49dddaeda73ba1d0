"""Shared formatting of numbers, and the small accessors of a candidate or document every rendering uses.

All of them take values from a normalised document and never fail on a missing or null field:
what is unknown shows as an em dash, so a partial document still renders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autotune.report.schema import OBJECTIVES, PERCENTILES, is_number

#: What an unknown value shows as (the console turns it into "-").
DASH = "—"


def fmt_rate(value: Any) -> str:
    if not is_number(value):
        return DASH
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def fmt_ms(value: Any) -> str:
    if not is_number(value):
        return DASH
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    if value >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2g}"


def fmt_bytes(value: Any) -> str:
    if not is_number(value):
        return DASH
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1000 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def fmt_seconds(value: Any) -> str:
    if not is_number(value):
        return DASH
    if value >= 120:
        return f"{value:.0f} s ({value / 60:.1f} min)"
    if value >= 10:
        return f"{value:.1f} s"
    return f"{value:.2f} s"


def fmt_sci(value: Any) -> str:
    return DASH if not is_number(value) else f"{value:.2g}"


def fmt_percent(fraction: float | None) -> str:
    return DASH if fraction is None else f"{100 * fraction:.1f}%"


def latency_ms(c: Mapping[str, Any], key: str) -> float | None:
    lat = c.get("latency_ms")
    value = lat.get(key) if isinstance(lat, Mapping) else None
    return float(value) if is_number(value) else None


def ci_bounds(c: Mapping[str, Any]) -> tuple[float, float] | None:
    """The throughput's 95% CI as (low, high), or None unless both ends are numbers (the schema
    lets either be null)."""
    ci = c.get("throughput_ci")
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(is_number(x) for x in ci):
        return ci[0], ci[1]
    return None


def relative_half_width(c: Mapping[str, Any]) -> float | None:
    """Half the 95% CI of the throughput as a fraction of it (from ``throughput_ci`` when present)."""
    ci, rate = ci_bounds(c), c.get("throughput")
    if ci is not None and is_number(rate) and rate:
        return abs(ci[1] - ci[0]) / 2 / rate
    value = c.get("relative_ci_half_width")
    return float(value) if is_number(value) else None


def ci_text(c: Mapping[str, Any]) -> str:
    ci = ci_bounds(c)
    return DASH if ci is None else f"{fmt_rate(ci[0])}–{fmt_rate(ci[1])}"


def measured_candidates(candidates: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The candidates with a throughput: status ok and a number (only those can be compared)."""
    return [c for c in candidates if c.get("status") == "ok" and is_number(c.get("throughput"))]


def no_steady_state(c: Mapping[str, Any]) -> bool:
    return c.get("classification") == "no_steady_state"


def too_few_samples(c: Mapping[str, Any]) -> int | None:
    """The samples of a row called ``no_steady_state`` because its budget held fewer than a verdict needs
    (:data:`autotune.core.warmup.offline.SHORT_MIN`), else None: such a row did not drift, it was not long enough to
    tell (a slow model's calls, or a traffic's passes, in a few seconds)."""
    from autotune.core.warmup.offline import SHORT_MIN

    samples = c.get("samples")
    if no_steady_state(c) and isinstance(samples, int) and not isinstance(samples, bool) and samples < SHORT_MIN:
        return samples
    return None


def bimodal_note(c: Mapping[str, Any]) -> str | None:
    """"bimodal: ..." when the row's warmup analysis found two alternating speeds (its mean is the mixture's)."""
    measurement = c.get("measurement")
    analysis = measurement.get("analysis") if isinstance(measurement, Mapping) else None
    if not isinstance(analysis, Mapping):
        return None
    levels = analysis.get("levels")
    if not isinstance(levels, list) or len(levels) != 2:
        return None
    share = analysis.get("share_high")
    slow = f", {100 * share:.0f}% at the slow one" if isinstance(share, int | float) else ""
    return (f"bimodal: calls alternate between {fmt_ms(1e3 * levels[0])} and {fmt_ms(1e3 * levels[1])} ms{slow}; "
            "the throughput is the mixture's")


def candidate_label(c: Mapping[str, Any]) -> str:
    return f"{c.get('variant')} @ {c.get('batch_size')}"


def short_list(labels: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(labels[:limit])
    return shown + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


def study_objective(doc: Mapping[str, Any]) -> str:
    for section in ("search", "recipe"):
        value = (doc.get(section) or {}).get("objective")
        if value in OBJECTIVES:
            return str(value)
    return "throughput"


def constrained_percentile(doc: Mapping[str, Any]) -> str:
    """The latency the search minimises and constrains: the recipe's ``latency_percentile`` (p99)."""
    value = recipe_constraints(doc).get("latency_percentile")
    return str(value) if value in PERCENTILES else "p99"


def recipe_constraints(doc: Mapping[str, Any]) -> dict[str, Any]:
    constraints = (doc.get("recipe") or {}).get("constraints")
    return dict(constraints) if isinstance(constraints, Mapping) else {}


#: A terminal's escape sequences (CSI ``ESC [ ... final``, OSC ``ESC ] ... BEL``, and a bare ``ESC x``).
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?", re.DOTALL)
#: Control characters but newline and tab (a carriage return rewrites a CI log's line too), C1 included.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe for a terminal or a CI log: escape sequences and control characters (but newline and tab)
    become ``?``. Why: ``compare`` and ``report`` print what a report.json holds (a hostname, a variant name, a
    note), and a report is untrusted: a stored ``ESC [2J`` cleared the screen, a ``\\r`` rewrote a log line."""
    return _CONTROLS.sub("?", _ESCAPES.sub("?", text))


def wander_text(c: Mapping[str, Any]) -> str | None:
    """``level wanders +-6% between blocks (inside its CI)`` for a steady state whose level wanders (the
    analysis's ``wander``, :func:`autotune.core.warmup.offline._wander_start`), else None."""
    analysis = (c.get("measurement") or {}).get("analysis") if isinstance(c.get("measurement"), Mapping) else None
    wander = analysis.get("wander") if isinstance(analysis, Mapping) else None
    if not is_number(wander):
        return None
    return f"level wanders \u00b1{100 * float(wander):.1f}% between blocks (its CI spans it)"

