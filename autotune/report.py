"""The report document: validation, report.json / report.md / report.html, plots, console table.

The orchestrator builds one plain JSON-able dict (schema 1, see DESIGN.md) and hands it here;
nothing in this module measures anything. The document is the single source of truth:
``report.json`` is written first and ``autotune report DIR`` re-renders the other files from it,
so every rendering is a pure function of the document.

What a reader of the rendered report should be able to answer, in this order:

1. What should I deploy? (recommendation: variant, batch, throughput with its CI, latency
   percentiles, memory, compile time, warmup)
2. Why, and how sure is it? (speed-up over eager at the same batch size, the runner-up and
   whether its CI overlaps, correctness check, constraints, steady-state classification)
3. What else was tried and why it lost or failed? (every candidate with its status and reason)
4. Where is the memory wall? (batch boundary per variant, probes, fitted memory model)
5. On what machine, and how do I reproduce it? (environment, code, ``autotune measure`` command)

This module never imports torch or optuna; matplotlib is imported inside ``render_plots``
only (and its absence costs the plots, not the report).
"""

from __future__ import annotations

import base64
import html
import json
import keyword
import math
import os
import re
import shlex
import tempfile
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from autotune.candidate import pessimistic_score
from autotune.environment import summary_line
from autotune.errors import InputError

__all__ = [
    "OBJECTIVES",
    "PLOT_NAMES",
    "REPORT_FILES",
    "SCHEMA_VERSION",
    "STATUSES",
    "console_table",
    "load_report",
    "measure_command",
    "normalise_report",
    "rank_candidates",
    "render_html",
    "render_markdown",
    "render_plots",
    "reproduce_code",
    "validate_report",
    "write_reports",
]

SCHEMA_VERSION = 1
REPORT_FILES = ("report.json", "report.md", "report.html")
STATUSES = ("ok", "oom", "rejected", "failed", "pruned")
OBJECTIVES = ("throughput", "latency", "pareto")
#: Plots in the order they appear; each is written to ``plots/<name>.png`` next to report.md.
PLOT_NAMES = ("throughput", "latency", "memory", "trace")
PLOTS_DIR = "plots"

#: Order of statuses that were not measured, after the measured ones.
_UNMEASURED_ORDER = {"rejected": 0, "oom": 1, "pruned": 2, "failed": 3}
#: A CI half-width above this fraction of the mean is worth a warning.
_WIDE_CI = 0.05
_CONSOLE_WIDTH = 100
_DASH = "—"

Checker = Callable[[Any, str], None]

# ==================================================================================== validation


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(predicate: Callable[[Any], bool], description: str) -> Checker:
    def check(value: Any, path: str) -> None:
        if not predicate(value):
            raise InputError(f"{path}: expected {description}, got {_show(value)}")

    return check


_STR = _kind(lambda v: isinstance(v, str), "a string")
_BOOL = _kind(lambda v: isinstance(v, bool), "true or false")
_INT = _kind(_is_int, "an integer")
_POSITIVE_INT = _kind(lambda v: _is_int(v) and v >= 1, "a positive integer")
_NUMBER = _kind(_is_number, "a number")
_ANY_MAPPING = _kind(lambda v: isinstance(v, Mapping), "an object")


def _nullable(check: Checker) -> Checker:
    def nullable(value: Any, path: str) -> None:
        if value is not None:
            check(value, path)

    return nullable


def _one_of(values: Sequence[str]) -> Checker:
    return _kind(lambda v: v in values, "one of " + "|".join(values))


def _list_of(item: Checker, *, length: int | None = None) -> Checker:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, list | tuple):
            raise InputError(f"{path}: expected a list, got {_show(value)}")
        if length is not None and len(value) != length:
            raise InputError(f"{path}: expected a list of {length} items, got {len(value)}")
        for index, element in enumerate(value):
            item(element, f"{path}[{index}]")

    return check


def _dict_of(item: Checker) -> Checker:
    def check(value: Any, path: str) -> None:
        _ANY_MAPPING(value, path)
        for key, element in value.items():
            item(element, f"{path}.{key}")

    return check


def _record(fields: Mapping[str, tuple[Checker, bool]]) -> Checker:
    """An object with known fields: ``{name: (checker, required)}``; extra fields are allowed
    (newer writers may add some; schema 1 readers ignore them)."""

    def check(value: Any, path: str) -> None:
        _ANY_MAPPING(value, path)
        for name, (field_check, required) in fields.items():
            if name not in value:
                if required:
                    raise InputError(f"{path}.{name}: required field missing")
                continue
            field_check(value[name], f"{path}.{name}")

    return check


_PERCENTILES = ("mean", "p50", "p90", "p99")
_LATENCY = _record({name: (_nullable(_NUMBER), False) for name in _PERCENTILES})
_CORRECTNESS = _record(
    {
        "passed": (_nullable(_BOOL), False),
        "max_abs_error": (_nullable(_NUMBER), False),
        "max_rel_error": (_nullable(_NUMBER), False),
        "min_cosine": (_nullable(_NUMBER), False),
        "batches": (_nullable(_INT), False),
        "reason": (_nullable(_STR), False),
    }
)
_CANDIDATE_FIELDS: dict[str, tuple[Checker, bool]] = {
    "trial": (_nullable(_INT), False),
    "variant": (_kind(lambda v: isinstance(v, str) and v != "", "a non-empty string"), True),
    "compiler": (_nullable(_STR), False),
    "compile_mode": (_nullable(_STR), False),
    "precision": (_nullable(_STR), False),
    "memory_format": (_nullable(_STR), False),
    "threads": (_nullable(_POSITIVE_INT), False),
    "batch_size": (_POSITIVE_INT, True),
    "status": (_one_of(STATUSES), True),
    "reason": (_nullable(_STR), False),
    "feasible": (_nullable(_BOOL), False),
    "violations": (_nullable(_list_of(_STR)), False),
    "throughput": (_nullable(_NUMBER), False),
    "throughput_ci": (_nullable(_list_of(_nullable(_NUMBER), length=2)), False),
    "latency_ms": (_nullable(_LATENCY), False),
    "peak_memory_bytes": (_nullable(_NUMBER), False),
    "compile_seconds": (_nullable(_NUMBER), False),
    "warmup_iterations": (_nullable(_INT), False),
    "classification": (_nullable(_STR), False),
    "relative_ci_half_width": (_nullable(_NUMBER), False),
    "samples": (_nullable(_INT), False),
    "stopped_by": (_nullable(_STR), False),
    "recompiles": (_nullable(_INT), False),
    "correctness": (_nullable(_CORRECTNESS), False),
    "trace_ms": (_nullable(_list_of(_nullable(_NUMBER))), False),
    "iterations_per_sample": (_nullable(_POSITIVE_INT), False),
    "notes": (_nullable(_list_of(_STR)), False),
}
_CANDIDATE_RECORD = _record(_CANDIDATE_FIELDS)


def _candidate(value: Any, path: str) -> None:
    _CANDIDATE_RECORD(value, path)
    if value["status"] == "ok" and not _is_number(value.get("throughput")):
        raise InputError(
            f"{path}.throughput: a candidate with status ok needs a number, got "
            f"{_show(value.get('throughput'))}"
        )


_PROBE = _record(
    {
        "batch_size": (_POSITIVE_INT, True),
        "fits": (_BOOL, True),
        "peak_memory_bytes": (_nullable(_NUMBER), False),
        "seconds": (_nullable(_NUMBER), False),
        "error": (_nullable(_STR), False),
    }
)
_BOUNDARY = _record(
    {
        "max_batch_size": (_nullable(_INT), False),
        "usable_max_batch_size": (_nullable(_INT), False),
        "headroom": (_nullable(_NUMBER), False),
        "memory_limit_bytes": (_nullable(_NUMBER), False),
        "memory_measured_by": (_nullable(_STR), False),
        "probes": (_list_of(_PROBE), False),
        "model": (
            _nullable(_record({"intercept_bytes": (_NUMBER, True), "bytes_per_sample": (_NUMBER, True)})),
            False,
        ),
    }
)
_RECIPE = _record(
    {
        "path": (_nullable(_STR), False),
        "name": (_nullable(_STR), False),
        "description": (_nullable(_STR), False),
        "device": (_nullable(_STR), False),
        "model": (
            _nullable(
                _record(
                    {
                        "factory": (_STR, True),
                        "kwargs": (_nullable(_ANY_MAPPING), False),
                        "base_dir": (_nullable(_STR), False),
                    }
                )
            ),
            False,
        ),
        "inputs": (
            _nullable(
                _list_of(
                    _record(
                        {
                            "name": (_nullable(_STR), False),
                            "shape": (_list_of(_POSITIVE_INT), True),
                            "dtype": (_nullable(_STR), False),
                            "vocab_size": (_nullable(_POSITIVE_INT), False),
                        }
                    )
                )
            ),
            False,
        ),
        "objective": (_nullable(_one_of(OBJECTIVES)), False),
        "constraints": (
            _nullable(
                _record(
                    {
                        "max_latency_ms": (_nullable(_NUMBER), False),
                        "latency_percentile": (_nullable(_one_of(_PERCENTILES)), False),
                        "max_memory_bytes": (_nullable(_NUMBER), False),
                    }
                )
            ),
            False,
        ),
        "time_budget_s": (_nullable(_NUMBER), False),
    }
)
_SEARCH = _record(
    {
        "trials": (_nullable(_INT), False),
        "wall_seconds": (_nullable(_NUMBER), False),
        "sampler": (_nullable(_STR), False),
        "objective": (_nullable(_one_of(OBJECTIVES)), False),
        "study_name": (_nullable(_STR), False),
        "storage": (_nullable(_STR), False),
        "stopped_by": (_nullable(_STR), False),
    }
)
_SCHEMA = _kind(lambda v: _is_int(v) and v == SCHEMA_VERSION, f"schema version {SCHEMA_VERSION}")
_DOCUMENT = _record(
    {
        "schema": (_SCHEMA, True),
        "tool": (_nullable(_ANY_MAPPING), False),
        "created": (_nullable(_STR), False),
        "recipe": (_RECIPE, True),
        "environment": (_ANY_MAPPING, True),
        "search": (_SEARCH, True),
        "batch_boundary": (_nullable(_dict_of(_BOUNDARY)), False),
        "candidates": (_list_of(_candidate), True),
        "recommendation": (_nullable(_candidate), True),
        "pareto": (_nullable(_list_of(_INT)), False),
        "notes": (_nullable(_list_of(_STR)), False),
    }
)


def validate_report(doc: Mapping[str, Any]) -> None:
    """Check a report document against schema 1; raise ``InputError`` naming the first bad field.

    Field paths read like ``candidates[3].latency_ms.p99``. Unknown extra fields are accepted
    (forward compatibility within a schema version); an unknown ``schema`` is not, because
    its fields may mean something else.
    """
    if not isinstance(doc, Mapping):
        raise InputError(f"report: expected a JSON object, got {_show(doc)}")
    if "schema" in doc and doc["schema"] != SCHEMA_VERSION:
        raise InputError(
            f"schema: this autotune reads report schema {SCHEMA_VERSION}, the document says "
            f"{_show(doc['schema'])}"
        )
    _DOCUMENT(doc, "report")


# ================================================================================ normalisation


def _plain(value: Any, path: str) -> Any:
    """JSON-able copy: tuples -> lists, numpy scalars/arrays -> Python, non-finite floats -> null."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): _plain(item, f"{path}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays, without importing numpy
    if callable(tolist):
        return _plain(tolist(), path)
    raise InputError(f"{path}: cannot be stored in report.json ({type(value).__name__} {_show(value)})")


def normalise_report(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A validated, JSON-able deep copy with optional sections filled in.

    NaN and infinities become ``null`` (JSON has no spelling for them and a NaN throughput
    means "not measured"); ``batch_boundary`` defaults to ``{}``, ``pareto`` and ``notes`` to
    ``[]``. The input is not modified.
    """
    if not isinstance(doc, Mapping):
        raise InputError(f"report: expected a JSON object, got {_show(doc)}")
    plain = _plain(doc, "report")
    for key, default in (("batch_boundary", {}), ("pareto", []), ("notes", [])):
        if plain.get(key) is None:
            plain[key] = default
    validate_report(plain)
    return plain


# ============================================================================ stable JSON output

_ORDER_TOP = (
    "schema",
    "tool",
    "created",
    "recipe",
    "environment",
    "search",
    "recommendation",
    "candidates",
    "pareto",
    "batch_boundary",
    "notes",
)
_ORDER_CANDIDATE = tuple(_CANDIDATE_FIELDS)
_ORDER_RECIPE = (
    "path",
    "name",
    "description",
    "device",
    "model",
    "inputs",
    "variants",
    "precisions",
    "batch_sizes",
    "objective",
    "constraints",
    "time_budget_s",
)
_ORDER_BOUNDARY = (
    "max_batch_size",
    "usable_max_batch_size",
    "headroom",
    "memory_limit_bytes",
    "memory_measured_by",
    "model",
    "probes",
)
_ORDER_PROBE = ("batch_size", "fits", "peak_memory_bytes", "seconds", "error")
_ORDER_LATENCY = _PERCENTILES
_ORDER_SEARCH = ("trials", "wall_seconds", "sampler", "objective", "study_name", "storage", "stopped_by")


def _ordered(mapping: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """Known keys in their documented order, then any others sorted: the same document always
    serialises to the same bytes, and a human finds ``schema`` first."""
    known = [key for key in order if key in mapping]
    rest = sorted(key for key in mapping if key not in order)
    return {key: mapping[key] for key in [*known, *rest]}


def _canonical(doc: Mapping[str, Any]) -> dict[str, Any]:
    def candidate(c: Any) -> Any:
        if not isinstance(c, Mapping):
            return c
        out = _ordered(c, _ORDER_CANDIDATE)
        if isinstance(out.get("latency_ms"), Mapping):
            out["latency_ms"] = _ordered(out["latency_ms"], _ORDER_LATENCY)
        if isinstance(out.get("correctness"), Mapping):
            out["correctness"] = _ordered(out["correctness"], ())
        return out

    def sorted_deep(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: sorted_deep(value[key]) for key in sorted(value)}
        if isinstance(value, list):
            return [sorted_deep(item) for item in value]
        return value

    out = _ordered(doc, _ORDER_TOP)
    if isinstance(out.get("recipe"), Mapping):
        recipe = {key: sorted_deep(value) for key, value in out["recipe"].items()}
        out["recipe"] = _ordered(recipe, _ORDER_RECIPE)
    if isinstance(out.get("environment"), Mapping):
        out["environment"] = sorted_deep(out["environment"])
    if isinstance(out.get("search"), Mapping):
        out["search"] = _ordered(out["search"], _ORDER_SEARCH)
    if isinstance(out.get("tool"), Mapping):
        out["tool"] = _ordered(out["tool"], ("name", "version"))
    out["candidates"] = [candidate(c) for c in out.get("candidates", [])]
    out["recommendation"] = candidate(out.get("recommendation"))
    boundary = out.get("batch_boundary")
    if isinstance(boundary, Mapping):
        out["batch_boundary"] = {
            variant: {
                **_ordered(entry, _ORDER_BOUNDARY),
                **(
                    {"probes": [_ordered(p, _ORDER_PROBE) for p in entry["probes"]]}
                    if isinstance(entry.get("probes"), list)
                    else {}
                ),
            }
            for variant, entry in sorted(boundary.items())
        }
    return out


def _dumps(value: Any, indent: int = 0) -> str:
    """Pretty JSON that keeps lists of scalars (timing traces, shapes) on one line.

    ``json.dumps(indent=2)`` would put each of a few thousand trace samples on its own line.
    """
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = [
            f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {_dumps(v, indent + 1)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if all(not isinstance(item, Mapping | list) for item in value):
            return json.dumps(value, ensure_ascii=False, allow_nan=False)
        return "[\n" + ",\n".join(inner + _dumps(item, indent + 1) for item in value) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _report_json(doc: Mapping[str, Any]) -> str:
    return _dumps(_canonical(doc)) + "\n"


# ======================================================================================= loading


def load_report(path: Path | str) -> dict[str, Any]:
    """Read and validate a stored report.json (or a directory holding one); errors name the file."""
    file = Path(path)
    if file.is_dir():
        file = file / REPORT_FILES[0]
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{file}: no such report file") from None
    except OSError as error:
        raise InputError(f"{file}: cannot read ({error.strerror or error})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"{file}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    try:
        return normalise_report(doc)
    except InputError as error:
        raise InputError(f"{file}: {error}") from None


# ==================================================================================== formatting


def _fmt_rate(value: Any) -> str:
    if not _is_number(value):
        return _DASH
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _fmt_ms(value: Any) -> str:
    if not _is_number(value):
        return _DASH
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    if value >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2g}"


def _fmt_bytes(value: Any) -> str:
    if not _is_number(value):
        return _DASH
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1000 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _fmt_seconds(value: Any) -> str:
    if not _is_number(value):
        return _DASH
    if value >= 120:
        return f"{value:.0f} s ({value / 60:.1f} min)"
    if value >= 10:
        return f"{value:.1f} s"
    return f"{value:.2f} s"


def _fmt_sci(value: Any) -> str:
    return _DASH if not _is_number(value) else f"{value:.2g}"


def _fmt_percent(fraction: float | None) -> str:
    return _DASH if fraction is None else f"{100 * fraction:.1f}%"


def _latency(c: Mapping[str, Any], key: str) -> float | None:
    lat = c.get("latency_ms")
    value = lat.get(key) if isinstance(lat, Mapping) else None
    return float(value) if _is_number(value) else None


def _relative_half_width(c: Mapping[str, Any]) -> float | None:
    """Half the 95% CI of the throughput as a fraction of it (from ``throughput_ci`` when present)."""
    ci, rate = c.get("throughput_ci"), c.get("throughput")
    if (
        isinstance(ci, list | tuple)
        and len(ci) == 2
        and all(_is_number(x) for x in ci)
        and _is_number(rate)
        and rate
    ):
        return abs(ci[1] - ci[0]) / 2 / rate
    value = c.get("relative_ci_half_width")
    return float(value) if _is_number(value) else None


def _ci_text(c: Mapping[str, Any]) -> str:
    ci = c.get("throughput_ci")
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(_is_number(x) for x in ci):
        return f"{_fmt_rate(ci[0])}–{_fmt_rate(ci[1])}"
    return _DASH


def _no_steady_state(c: Mapping[str, Any]) -> bool:
    return c.get("classification") == "no_steady_state"


def _label(c: Mapping[str, Any]) -> str:
    return f"{c.get('variant')} @ {c.get('batch_size')}"


def _objective(doc: Mapping[str, Any]) -> str:
    for section in ("search", "recipe"):
        value = (doc.get(section) or {}).get("objective")
        if value in OBJECTIVES:
            return str(value)
    return "throughput"


def _latency_key(doc: Mapping[str, Any]) -> str:
    """The latency the search minimises and constrains: the recipe's ``latency_percentile`` (p99)."""
    value = _constraints(doc).get("latency_percentile")
    return str(value) if value in _PERCENTILES else "p99"


def _constraints(doc: Mapping[str, Any]) -> dict[str, Any]:
    constraints = (doc.get("recipe") or {}).get("constraints")
    return dict(constraints) if isinstance(constraints, Mapping) else {}


# ======================================================================================= ranking


def _feasible(c: Mapping[str, Any]) -> bool:
    return c.get("status") == "ok" and c.get("feasible") is not False and not c.get("violations")


def _same(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Is ``a`` the candidate ``b`` (by trial number when both have one)?"""
    if a is None or b is None:
        return False
    if a.get("trial") is not None and b.get("trial") is not None:
        return bool(a["trial"] == b["trial"])
    keys = ("variant", "batch_size", "precision", "memory_format", "threads")
    return all(a.get(key) == b.get(key) for key in keys)


def _rank(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Candidates best first under the study's objective.

    Order: measured and feasible (by the objective), measured but violating a constraint
    (same order), then unmeasured by status (rejected, oom, pruned, failed), each by trial.
    Within the measured groups the order is ``candidate.pessimistic_score`` (the recommendation
    is chosen the same way). Objectives: ``throughput`` - lower 95% CI bound of samples/s
    descending; ``latency`` - the recipe's ``constraints.latency_percentile`` (p99) ascending;
    ``pareto`` - members of the Pareto front first, each group by throughput. Ties: by trial number.
    """
    objective = _objective(doc)
    latency_key = _latency_key(doc)
    front = set(doc.get("pareto") or [])

    def key(c: Mapping[str, Any]) -> tuple[Any, ...]:
        trial = c.get("trial") if _is_int(c.get("trial")) else 1 << 30
        tie = (trial, str(c.get("variant")), c.get("batch_size") or 0)
        if c.get("status") != "ok":
            return (2, _UNMEASURED_ORDER.get(str(c.get("status")), 9), 0, 0.0, *tie)
        group = 0 if _feasible(c) else 1
        # The same rule as the recommendation (autotune.candidate.best_row): the pessimistic end
        # of the CI, so a noisy number cannot outrank a precise one by luck.
        if objective == "pareto":
            score = pessimistic_score(c, objective="throughput")
            return (group, 0 if c.get("trial") in front else 1, 0, score, *tie)
        score = pessimistic_score(c, objective=objective, latency_percentile=latency_key)
        return (group, 0, 0, score, *tie)

    return [dict(c) for c in sorted(doc.get("candidates") or [], key=key)]


def _is_eager(c: Mapping[str, Any]) -> bool:
    """The default PyTorch execution: eager, fp32, contiguous, default threads."""
    if c.get("compiler") is not None or c.get("precision") is not None:
        return (
            c.get("compiler") in (None, "eager")
            and c.get("precision") in (None, "fp32", "float32")
            and c.get("memory_format") in (None, "contiguous", "contiguous_format")
            and c.get("threads") is None
        )
    return c.get("variant") == "eager"


def _best(candidates: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    measured = [c for c in candidates if c.get("status") == "ok" and _is_number(c.get("throughput"))]
    return max(measured, key=lambda c: c["throughput"]) if measured else None


def _eager_comparison(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> str | None:
    """One sentence comparing the recommendation with eager at the same batch size."""
    candidates = doc.get("candidates") or []
    eager = [c for c in candidates if _is_eager(c)]
    if _is_eager(rec):
        return "This is plain eager PyTorch: no variant beat the default execution."
    batch = rec.get("batch_size")
    same_batch = [c for c in eager if c.get("batch_size") == batch]
    baseline = _best(same_batch)
    rate = rec.get("throughput")
    if baseline is not None and _is_number(rate):
        speedup = rate / baseline["throughput"]
        text = (
            f"{speedup:.2f}× the throughput of eager at batch {batch} "
            f"({_fmt_rate(rate)} vs {_fmt_rate(baseline['throughput'])} samples/s)"
        )
        p50_rec, p50_base = _latency(rec, "p50"), _latency(baseline, "p50")
        if p50_rec is not None and p50_base is not None:
            text += f"; p50 latency {_fmt_ms(p50_rec)} ms vs {_fmt_ms(p50_base)} ms"
        mem_rec, mem_base = rec.get("peak_memory_bytes"), baseline.get("peak_memory_bytes")
        if _is_number(mem_rec) and _is_number(mem_base):
            text += f"; peak memory {_fmt_bytes(mem_rec)} vs {_fmt_bytes(mem_base)}"
        return text + "."
    unmeasured = next((c for c in same_batch if c.get("status") != "ok"), None)
    best_eager = _best(eager)
    text = f"Eager was not measured at batch {batch}" + (
        f" ({unmeasured['status']}: {unmeasured.get('reason') or 'no reason given'})"
        if unmeasured
        else " (not tried)"
    )
    if best_eager is not None and _is_number(rate):
        text += (
            f"; against the best eager configuration (batch {best_eager['batch_size']}, "
            f"{_fmt_rate(best_eager['throughput'])} samples/s) it is "
            f"{rate / best_eager['throughput']:.2f}× faster"
        )
    return text + "."


def _runner_up(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> str | None:
    ranked = [c for c in _rank(doc) if _feasible(c) and not _same(c, rec)]
    if not ranked:
        return None
    other = ranked[0]
    objective = _objective(doc)
    if objective == "latency":
        key = _latency_key(doc)
        a, b = _latency(rec, key), _latency(other, key)
        if a is None or b is None or not a:
            return None
        return (
            f"Runner-up: {_label(other)} at {key} {_fmt_ms(b)} ms ({(b / a - 1) * 100:+.1f}% vs "
            f"{_fmt_ms(a)} ms)."
        )
    rate, other_rate = rec.get("throughput"), other.get("throughput")
    if not (_is_number(rate) and _is_number(other_rate)) or not rate:
        return None
    text = (
        f"Runner-up: {_label(other)} at {_fmt_rate(other_rate)} samples/s "
        f"({(other_rate / rate - 1) * 100:+.1f}%)."
    )
    ci_a, ci_b = rec.get("throughput_ci"), other.get("throughput_ci")
    if (
        isinstance(ci_a, list | tuple)
        and isinstance(ci_b, list | tuple)
        and len(ci_a) == len(ci_b) == 2
        and all(_is_number(x) for x in [*ci_a, *ci_b])
    ):
        if ci_a[0] <= ci_b[1] and ci_b[0] <= ci_a[1]:
            text += (
                " Their 95% confidence intervals overlap: on this machine the two are not "
                "distinguishable, prefer the simpler one if that matters."
            )
        else:
            text += " The confidence intervals do not overlap."
    return text


def _why_points(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> list[str]:
    """The reasons to trust (or distrust) the recommendation, in plain text."""
    points: list[str] = []
    comparison = _eager_comparison(doc, rec)
    if comparison:
        points.append(comparison)
    runner = _runner_up(doc, rec)
    if runner:
        points.append(runner)
    correctness = rec.get("correctness")
    if isinstance(correctness, Mapping):
        if correctness.get("passed"):
            details = ", ".join(
                f"{label} {fmt(correctness[key])}"
                for key, label, fmt in (
                    ("max_abs_error", "max abs error", _fmt_sci),
                    ("max_rel_error", "max rel error", _fmt_sci),
                    ("min_cosine", "min cosine", lambda v: f"{v:.6f}"),
                )
                if _is_number(correctness.get(key))
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
    elif not _is_eager(rec):
        points.append("No correctness check was recorded for this configuration.")
    constraints = _constraints(doc)
    checks = []
    if _is_number(constraints.get("max_latency_ms")):
        key = _latency_key(doc)
        checks.append(
            f"{key} {_fmt_ms(_latency(rec, key))} ms (limit {_fmt_ms(constraints['max_latency_ms'])} ms)"
        )
    if _is_number(constraints.get("max_memory_bytes")):
        checks.append(
            f"peak memory {_fmt_bytes(rec.get('peak_memory_bytes'))} "
            f"(limit {_fmt_bytes(constraints['max_memory_bytes'])})"
        )
    if checks:
        verdict = "Meets the constraints" if _feasible(rec) else "Violates the constraints"
        points.append(f"{verdict}: {'; '.join(checks)}.")
    boundary = (doc.get("batch_boundary") or {}).get(rec.get("variant"))
    if isinstance(boundary, Mapping) and _is_int(boundary.get("max_batch_size")):
        usable = boundary.get("usable_max_batch_size")
        points.append(
            f"Largest batch that fits for {rec.get('variant')}: {boundary['max_batch_size']}"
            + (f" (usable with headroom: {usable})" if _is_int(usable) else "")
            + "."
        )
    points.append(_steadiness(rec))
    return points


def _steadiness(c: Mapping[str, Any]) -> str:
    classification = c.get("classification")
    warmup = c.get("warmup_iterations")
    half = _relative_half_width(c)
    samples = c.get("samples")
    precision = (f"95% CI half-width {_fmt_percent(half)}" if half is not None else "no CI recorded") + (
        f" from {samples} samples" + (f" (stopped by {c['stopped_by']})" if c.get("stopped_by") else "")
        if samples
        else ""
    )
    if classification == "no_steady_state":
        return (
            f"No steady state was reached: the timings kept drifting, so the throughput is an "
            f"average of a moving series, not a stable rate ({precision})."
        )
    if classification == "slowdown":
        return f"The timings slowed down after warmup (classification slowdown); {precision}."
    if warmup is not None:
        return (
            f"Steady state after {warmup} warmup iterations (classification {classification}); {precision}."
        )
    return f"Steady state: {classification or 'not classified'}; {precision}."


_MEASURED_VALUE = re.compile(
    r"^(?P<what>.*?)\s+[-+]?[\d.,]+(?:e[-+]?\d+)?\s*(?:ms|B|KiB|MiB|GiB|%)?\s*(?P<op>[<>]=?)"
)


def _violation_kind(violation: str) -> str:
    """``p99 latency 28 ms > SLO 0.5 ms`` -> ``p99 latency > SLO 0.5 ms``: the measured value
    dropped, so that candidates breaking the same limit fall into one group."""
    match = _MEASURED_VALUE.match(violation)
    return f"{match['what']} {violation[match.start('op') :]}" if match else violation


def _failure_groups(candidates: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """Unmeasured or infeasible candidates grouped by (status, reason): why nothing else won.

    Constraint violations are grouped by the limit they break, not by the measured value."""
    groups: dict[tuple[str, str], list[str]] = {}
    for c in candidates:
        if c.get("status") == "ok":
            if _feasible(c):
                continue
            kinds = [_violation_kind(v) for v in c.get("violations") or []]
            status, reason = "violates", "; ".join(kinds) or "infeasible"
        else:
            status, reason = str(c.get("status")), c.get("reason") or "no reason given"
        groups.setdefault((status, reason), []).append(_label(c))
    return [(status, reason, labels) for (status, reason), labels in groups.items()]


def _short_list(labels: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(labels[:limit])
    return shown + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


def _derived_notes(doc: Mapping[str, Any]) -> list[str]:
    """Warnings computed from the candidates, and the candidates' own build notes (each once,
    with the variants it concerns), added after the document's notes."""
    candidates = doc.get("candidates") or []
    measured = [c for c in candidates if c.get("status") == "ok"]
    own = " ".join(doc.get("notes") or []).lower()
    notes = []
    checks: list[tuple[Callable[[Mapping[str, Any]], bool], str, str]] = [
        (
            _no_steady_state,
            "no steady state",
            "never reached a steady state; their numbers are averages of drifting timings",
        ),
        (
            lambda c: c.get("classification") == "slowdown",
            "slowdown",
            "slowed down after warmup (classification slowdown)",
        ),
        (
            lambda c: (_relative_half_width(c) or 0) > _WIDE_CI,
            "ci wider",
            f"have a 95% CI wider than ±{_WIDE_CI:.0%}: the machine was noisy or the budget short",
        ),
        (
            lambda c: _is_int(c.get("recompiles")) and c["recompiles"] > 0,
            "recompile",
            "recompiled during measurement (the timings include compilation)",
        ),
    ]
    for predicate, phrase, message in checks:
        hits = [_label(c) for c in measured if predicate(c)]
        if hits and phrase not in own:  # the orchestrator may have said so already
            notes.append(f"{len(hits)} measured candidate(s) {message}: {_short_list(hits)}.")
    by_note: dict[str, list[str]] = {}
    for c in candidates:
        for note in c.get("notes") or []:
            variants = by_note.setdefault(str(note), [])
            if c.get("variant") not in variants:
                variants.append(str(c.get("variant")))
    for note, variants in by_note.items():
        if note.lower() not in own:
            notes.append(f"{note} ({_short_list(variants)})")
    return notes


def _search_summary(doc: Mapping[str, Any]) -> str:
    search = doc.get("search") or {}
    parts = [
        f"{search['trials']} trials" if _is_int(search.get("trials")) else None,
        f"in {_fmt_seconds(search['wall_seconds'])}" if _is_number(search.get("wall_seconds")) else None,
        f"sampler {search['sampler']}" if search.get("sampler") else None,
        f"objective {_objective(doc)}",
        f"stopped: {search['stopped_by']}" if search.get("stopped_by") else None,
    ]
    return ", ".join(p for p in parts if p)


def _constraints_text(doc: Mapping[str, Any]) -> str | None:
    constraints = _constraints(doc)
    parts = []
    if _is_number(constraints.get("max_latency_ms")):
        parts.append(f"{_latency_key(doc)} latency ≤ {constraints['max_latency_ms']:g} ms")
    if _is_number(constraints.get("max_memory_bytes")):
        parts.append(f"peak memory ≤ {_fmt_bytes(constraints['max_memory_bytes'])}")
    return ", ".join(parts) if parts else None


# ==================================================================================== console


def _truncate(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _ascii(text: str) -> str:
    """Console output stays ASCII: it may go to a log or a terminal without UTF-8."""
    return text.replace("×", "x").replace("±", "+-").replace("≤", "<=").replace("–", "-").replace(_DASH, "-")


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
    ranked = _rank(doc)
    rec = doc.get("recommendation")
    shown = list(enumerate(ranked if top is None else ranked[: max(top, 0)], start=1))
    measured_rows, other_rows = [], []
    for index, c in shown:
        mark = f"{index}{'*' if _same(c, rec) else ''}"
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
        if not _feasible(c):
            note = "violates: " + "; ".join(
                _violation_kind(v) for v in c.get("violations") or ["constraints"]
            )
        elif _no_steady_state(c):
            note = "no steady state"
        half = _relative_half_width(c)
        rate = ("~" if _no_steady_state(c) else "") + _fmt_rate(c.get("throughput"))
        rate += f" +-{100 * half:.1f}%" if half is not None else ""
        measured_rows.append(
            [
                mark,
                variant,
                str(c.get("batch_size")),
                _ascii(rate),
                _ascii(f"{_fmt_ms(_latency(c, 'p50'))}/{_fmt_ms(_latency(c, 'p99'))}"),
                _ascii(_fmt_bytes(c.get("peak_memory_bytes"))),
                _ascii(note),
            ]
        )
    lines = []
    if measured_rows:
        lines.append(
            _fit_table(
                measured_rows,
                ["#", "variant", "batch", "samples/s", "p50/p99 ms", "memory", "note"],
                ("right", "left", "right", "right", "right", "right", "left"),
                tablefmt="simple",
            )
        )
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
    constraints = _constraints_text(doc)
    if constraints:
        violating = sum(1 for c in ranked if c.get("status") == "ok" and not _feasible(c))
        lines.extend(_wrap(f"Constraints: {constraints}; {violating} measured candidate(s) violate them."))
    front = doc.get("pareto") or []
    if front:
        by_trial = {c.get("trial"): c for c in ranked}
        members = [_label(by_trial[t]) if t in by_trial else f"trial {t}" for t in front]
        lines.extend(
            _wrap(f"Pareto front (throughput vs {_latency_key(doc)} latency): {_short_list(members, 6)}.")
        )
    if rec is not None and shown:
        shown_rec = any(_same(c, rec) for _, c in shown)
        lines.append("* = recommended" if shown_rec else "(the recommendation is not among the rows shown)")
    return "\n".join(_ascii(line) for line in lines)


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(_ascii(text), width=_CONSOLE_WIDTH, subsequent_indent="  ") or [""]


def _recommendation_sentence(doc: Mapping[str, Any]) -> str:
    rec = doc.get("recommendation")
    if rec is None:
        groups = _failure_groups(doc.get("candidates") or [])
        if not groups:
            return "No feasible configuration: no candidate was measured."
        reasons = "; ".join(f"{status} ({len(labels)}): {reason}" for status, reason, labels in groups[:4])
        more = f"; and {len(groups) - 4} other reason(s)" if len(groups) > 4 else ""
        return f"No feasible configuration. {reasons}{more}."
    half = _relative_half_width(rec)
    parts = [
        f"{_fmt_rate(rec.get('throughput'))} samples/s"
        + (f" (±{100 * half:.1f}%)" if half is not None else ""),
        f"p50 {_fmt_ms(_latency(rec, 'p50'))} ms, p99 {_fmt_ms(_latency(rec, 'p99'))} ms",
    ]
    if _is_number(rec.get("peak_memory_bytes")):
        parts.append(f"peak {_fmt_bytes(rec['peak_memory_bytes'])}")
    text = f"Recommended: {rec.get('variant')} at batch {rec.get('batch_size')}: {', '.join(parts)}."
    comparison = _eager_comparison(doc, rec)
    if comparison:
        text += " " + comparison
    if _no_steady_state(rec):
        text += " Warning: no steady state was reached."
    return text


# ======================================================================================= reproduce

_FLOAT_DTYPES = {"float32", "float", "float16", "half", "bfloat16", "float64", "double"}
#: Names the generated script defines itself; a factory imported under one of them is renamed.
_RESERVED_NAMES = {
    "torch",
    "time",
    "model",
    "inputs",
    "outputs",
    "device",
    "run",
    "synchronize",
    "BATCH_SIZE",
    "ITERATIONS",
    "importlib",
    "factory",
    "AutocastModel",
}
_REDUCED = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}


def _measure_command(doc: Mapping[str, Any]) -> str | None:
    rec = doc.get("recommendation")
    if rec is None:
        return None
    recipe_path = (doc.get("recipe") or {}).get("path") or "RECIPE.toml"
    return (
        f"autotune measure {shlex.quote(str(recipe_path))} --variant {shlex.quote(str(rec['variant']))} "
        f"--batch-size {int(rec['batch_size'])}"
    )


def _py_call(callee: str, kwargs: Mapping[str, Any] | None) -> str:
    if not kwargs:
        return f"{callee}()"
    if all(isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k) for k in kwargs):
        return f"{callee}(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
    return f"{callee}(**{dict(kwargs)!r})"


def _factory_lines(model_spec: Mapping[str, Any]) -> tuple[list[str], str]:
    """Import lines and the callable's expression for the recipe's factory.

    Mirrors ``autotune.workload.resolve_factory``: ``package.module:attr`` is imported,
    ``path/to/file.py:attr`` is loaded from the file (relative to the recipe's directory).
    """
    factory = model_spec.get("factory")
    if not factory:
        return ["# The recipe names no model factory: build your model here."], "torch.nn.Identity"
    target, _, attr = str(factory).rpartition(":")
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_absolute():
            path = Path(str(model_spec.get("base_dir") or ".")) / path
        return (
            [
                "",
                f"_spec = importlib.util.spec_from_file_location('autotune_model', {str(path)!r})",
                "_module = importlib.util.module_from_spec(_spec)",
                "_spec.loader.exec_module(_module)",
                f"factory = getattr(_module, {attr!r})",
            ],
            "factory",
        )
    if (
        target
        and all(p.isidentifier() for p in target.split("."))
        and attr.isidentifier()
        and not keyword.iskeyword(attr)
    ):
        if attr in _RESERVED_NAMES:
            return [f"from {target} import {attr} as factory_{attr}"], f"factory_{attr}"
        return [f"from {target} import {attr}"], attr
    return (
        ["", f"factory = getattr(importlib.import_module({target!r}), {attr!r})"],
        "factory",
    )


def _variant_tokens(rec: Mapping[str, Any]) -> set[str]:
    return {token.strip().lower() for token in str(rec.get("variant") or "").split("+")}


def _compiler_lines(compiler: str, mode: str | None) -> list[str]:
    """Lines that turn ``model`` into the compiled callable, as ``autotune.variants`` builds it."""
    if compiler == "eager":
        return []
    if compiler == "script":
        return ["model = torch.jit.script(model)"]
    if compiler == "trace":
        return ["model = torch.jit.trace(model, inputs, check_trace=False, strict=False)"]
    if compiler == "frozen":
        return [
            "model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model).eval()))",
            "# (autotune falls back to torch.jit.trace when torch.jit.script cannot compile the model)",
        ]
    if compiler == "compile":
        return [f"model = torch.compile(model, mode={mode or 'default'!r}, dynamic=False)"]
    if compiler == "export":
        return [
            "import torch._inductor",
            "",
            "exported = torch.export.export(model, inputs)",
            'package = torch._inductor.aoti_compile_and_package(exported, package_path="model.pt2")',
            "model = torch._inductor.aoti_load_package(package)",
        ]
    return [f"# compiler {compiler!r} is not known to this report version: apply it here"]


def _reproduce(doc: Mapping[str, Any]) -> str:
    rec = doc.get("recommendation")
    if rec is None:
        raise InputError("recommendation: the report has none, so there is nothing to reproduce")
    recipe = doc.get("recipe") or {}
    model_spec = recipe.get("model") or {}
    device = str(recipe.get("device_resolved") or recipe.get("device") or "cpu")
    batch = int(rec["batch_size"])
    tokens = _variant_tokens(rec)
    compiler = str(
        rec.get("compiler")
        or next(iter(sorted(tokens & {"eager", "script", "trace", "frozen", "export"})), "eager")
    ).lower()
    precision = str(rec.get("precision") or "fp32").lower()
    autocast = precision.startswith("autocast")
    reduced = _REDUCED.get(precision.removeprefix("autocast-"))
    memory_format = str(rec.get("memory_format") or "contiguous").lower()
    cuda_graphs = bool(rec.get("cuda_graphs")) or "cudagraphs" in tokens
    import_lines, callee = _factory_lines(model_spec)
    measured = (
        f"{_fmt_rate(rec.get('throughput'))} samples/s, p50 {_fmt_ms(_latency(rec, 'p50'))} ms, "
        f"p99 {_fmt_ms(_latency(rec, 'p99'))} ms"
    )

    stdlib = [
        statement
        for statement, needle in (
            ("import importlib", "importlib.import_module"),
            ("import importlib.util", "importlib.util"),
        )
        if any(needle in line for line in import_lines)
    ]
    lines = [
        f"# Reproduce autotune's recommendation for {recipe.get('name') or 'this recipe'!s}: "
        f"{rec['variant']} at batch size {batch}.",
        f"# autotune measured {measured}",
        f"# on {summary_line(doc.get('environment') or {})}.",
        "# For a measurement with warmup detection and confidence intervals run:",
        f"#   {_measure_command(doc)}",
        *stdlib,
        "import time",
        "",
        "import torch",
        *import_lines,
        "",
        f"BATCH_SIZE = {batch}",
        "ITERATIONS = 50",
        "",
        "torch.manual_seed(0)",
    ]
    if _is_int(rec.get("threads")):
        lines.append(f"torch.set_num_threads({rec['threads']})")
    if device == "auto":
        lines.append('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")')
    else:
        lines.append(f"device = torch.device({device!r})")
    lines += [
        "",
        "",
        "def synchronize():",
        '    if device.type == "cuda":',
        "        torch.cuda.synchronize(device)",
        "",
        "",
    ]
    if precision not in ("fp32", "bf16", "fp16", "autocast-bf16", "autocast-fp16"):
        lines.append(f"# precision {precision!r} is not known to this report version: apply it here")
    lines += [f"model = {_py_call(callee, model_spec.get('kwargs'))}", "model = model.eval().to(device)"]
    if reduced and not autocast:
        lines.append(f"model = model.to({reduced})  # {precision}: weights and float inputs")
    if memory_format == "channels_last":
        lines.append("model = model.to(memory_format=torch.channels_last)")

    lines += ["", "inputs = ("]
    for spec in recipe.get("inputs") or []:
        shape = ", ".join(["BATCH_SIZE", *(str(int(d)) for d in spec.get("shape") or [])])
        dtype = str(spec.get("dtype") or "float32")
        dtype_expr = f"torch.{dtype}" if dtype.isidentifier() else "torch.float32"
        if dtype in _FLOAT_DTYPES:
            cast = reduced if reduced and not autocast else dtype_expr
            expr = f"torch.randn({shape}, device=device, dtype={cast})"
            if memory_format == "channels_last" and len(spec.get("shape") or []) == 3:
                expr += ".contiguous(memory_format=torch.channels_last)"
        else:
            high = spec.get("vocab_size") or 2
            expr = f"torch.randint(0, {high}, ({shape},), device=device, dtype={dtype_expr})"
        lines.append(f"    {expr},  # {spec.get('name') or 'input'}")
    lines += [")", ""]

    # autocast: eager/script enter it around every call; the graph compilers get it baked in
    # through a wrapper module (as autotune.variants does).
    runtime_autocast = autocast and reduced is not None and compiler in ("eager", "script")
    if autocast and reduced is not None and not runtime_autocast:
        lines += [
            "",
            "class AutocastModel(torch.nn.Module):",
            "    def __init__(self, inner):",
            "        super().__init__()",
            "        self.inner = inner",
            "",
            "    def forward(self, *args):",
            f"        with torch.autocast(device.type, dtype={reduced}):",
            "            return self.inner(*args)",
            "",
            "",
            "model = AutocastModel(model)",
        ]
    context = "torch.inference_mode()" + (
        f", torch.autocast(device.type, dtype={reduced})" if runtime_autocast else ""
    )
    build = _compiler_lines(compiler, rec.get("compile_mode"))
    if any(line and not line.startswith("#") for line in build):
        lines += ["with torch.no_grad():", *("    " + line if line else "" for line in build), ""]
    else:
        lines += [*build, ""] if build else []
    if cuda_graphs:
        lines += [
            "# CUDA graph: capture one call on static inputs, then replay it (outputs are overwritten).",
            "stream = torch.cuda.Stream()",
            "stream.wait_stream(torch.cuda.current_stream())",
            f"with torch.cuda.stream(stream), {context}:",
            "    for _ in range(3):",
            "        model(*inputs)",
            "torch.cuda.current_stream().wait_stream(stream)",
            "graph = torch.cuda.CUDAGraph()",
            f"with torch.cuda.graph(graph), {context}:",
            "    static_outputs = model(*inputs)",
            "",
            "",
            "def run():",
            "    graph.replay()",
            "    return static_outputs",
        ]
    else:
        lines += ["", "def run():", f"    with {context}:", "        return model(*inputs)"]
    lines += [
        "",
        "",
        "start = time.perf_counter()",
        "outputs = run()  # first call: lazy initialisation / compilation, not steady state",
        "synchronize()",
        'print(f"first call: {time.perf_counter() - start:.3f} s")',
        "for _ in range(max(ITERATIONS // 5, 1)):  # warm up",
        "    run()",
        "synchronize()",
        "start = time.perf_counter()",
        "for _ in range(ITERATIONS):",
        "    outputs = run()",
        "synchronize()",
        "elapsed = time.perf_counter() - start",
        'print(f"{BATCH_SIZE * ITERATIONS / elapsed:,.1f} samples/s, '
        '{1000 * elapsed / ITERATIONS:.2f} ms per batch of {BATCH_SIZE}")',
    ]
    return "\n".join(lines) + "\n"


# ========================================================================================= plots


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


def _plot_throughput(doc: Mapping[str, Any], colors: Mapping[str, Any]) -> bytes | None:
    measured = [
        c for c in doc.get("candidates") or [] if c.get("status") == "ok" and _is_number(c.get("throughput"))
    ]
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
            ci = c.get("throughput_ci")
            ok_ci = isinstance(ci, list | tuple) and len(ci) == 2 and all(_is_number(v) for v in ci)
            low.append(max(c["throughput"] - ci[0], 0) if ok_ci else 0)
            high.append(max(ci[1] - c["throughput"], 0) if ok_ci else 0)
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
        hollow = [c for c in points if _no_steady_state(c)]
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
    if rec is not None and _is_number(rec.get("throughput")):
        ax.scatter(
            [rec["batch_size"]],
            [rec["throughput"]],
            marker="*",
            s=260,
            color="gold",
            edgecolors="black",
            zorder=5,
            label="recommended",
        )
    if len({c["batch_size"] for c in measured}) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples / s")
    ax.set_ylim(bottom=0)
    _legend(ax, len(by_variant) + (rec is not None))
    return _png(fig)


def _plot_latency(doc: Mapping[str, Any], colors: Mapping[str, Any]) -> bytes | None:
    measured = [
        c
        for c in doc.get("candidates") or []
        if c.get("status") == "ok" and _is_number(c.get("throughput")) and _latency(c, "p50") is not None
    ]
    if not measured:
        return None
    fig, ax = _new_axes("Latency vs throughput (filled: p50, hollow: p99)")
    labelled: set[str] = set()
    for c in measured:
        variant = str(c["variant"])
        color = colors.get(variant)
        x, p50, p99 = c["throughput"], _latency(c, "p50"), _latency(c, "p99")
        ax.scatter(
            [x], [p50], color=color, s=28, zorder=3, label=variant if variant not in labelled else None
        )
        labelled.add(variant)
        if p99 is not None:
            ax.plot([x, x], [p50, p99], color=color, lw=1, alpha=0.6)
            ax.scatter([x], [p99], facecolors="none", edgecolors=[color], s=28, zorder=3)
    key = _latency_key(doc)
    front = set(doc.get("pareto") or [])
    members = sorted(
        (c for c in measured if c.get("trial") in front and _latency(c, key) is not None),
        key=lambda c: c["throughput"],
    )
    if members:
        ys = [_latency(c, key) for c in members]
        ax.plot(
            [c["throughput"] for c in members], ys, "k--", lw=1.2, zorder=2, label=f"Pareto front ({key})"
        )
        ax.scatter(
            [c["throughput"] for c in members], ys, s=90, facecolors="none", edgecolors="black", zorder=4
        )
    limit = _constraints(doc).get("max_latency_ms")
    if _is_number(limit):
        ax.axhline(limit, color="red", ls=":", lw=1.2, label=f"{key} limit {_fmt_ms(limit)} ms")
    rec = doc.get("recommendation")
    if rec is not None and _is_number(rec.get("throughput")) and _latency(rec, "p50") is not None:
        ax.scatter(
            [rec["throughput"]],
            [_latency(rec, "p50")],
            marker="*",
            s=260,
            color="gold",
            edgecolors="black",
            zorder=5,
            label="recommended",
        )
    values = [v for c in measured for v in (_latency(c, "p50"), _latency(c, "p99")) if v]
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("throughput (samples / s)")
    ax.set_ylabel("latency per batch (ms)")
    _legend(ax, len(labelled) + bool(members) + _is_number(limit) + (rec is not None))
    return _png(fig)


def _plot_memory(doc: Mapping[str, Any], colors: Mapping[str, Any]) -> bytes | None:
    boundary = doc.get("batch_boundary") or {}
    entries = {
        v: e
        for v, e in sorted(boundary.items())
        if any(_is_number(p.get("peak_memory_bytes")) for p in e.get("probes") or [])
    }
    if not entries:
        return None
    peaks = [
        p["peak_memory_bytes"]
        for e in entries.values()
        for p in e.get("probes") or []
        if _is_number(p.get("peak_memory_bytes"))
    ]
    limits = [e["memory_limit_bytes"] for e in entries.values() if _is_number(e.get("memory_limit_bytes"))]
    scale, unit = (2**30, "GiB") if max(peaks + limits) >= 2 * 2**30 else (2**20, "MiB")
    fig, ax = _new_axes("Peak memory of the batch-size probes, fitted model and limit")
    all_batches = []
    for variant, entry in entries.items():
        color = colors.get(variant)
        probes = [p for p in entry.get("probes") or [] if _is_number(p.get("peak_memory_bytes"))]
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
            if not p.get("fits") and (_is_number(p.get("peak_memory_bytes")) or _is_number(limit_here))
        ]
        if fails:
            ax.scatter(
                [p["batch_size"] for p in fails],
                [
                    (p["peak_memory_bytes"] if _is_number(p.get("peak_memory_bytes")) else limit_here) / scale
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
        if _is_int(entry.get("max_batch_size")):
            ax.axvline(entry["max_batch_size"], color=color, ls=":", lw=1, alpha=0.7)
    for limit in sorted(set(limits)):
        ax.axhline(limit / scale, color="red", lw=1.2, ls="-.", label=f"limit {_fmt_bytes(limit)}")
    if len(set(all_batches)) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (dotted: largest that fits; dashed: fitted affine model)")
    ax.set_ylabel(f"peak memory ({unit})")
    ax.set_ylim(bottom=0)
    _legend(ax, 2 * len(entries) + len(set(limits)))
    return _png(fig)


def _plot_trace(doc: Mapping[str, Any]) -> bytes | None:
    rec = doc.get("recommendation")
    trace = rec.get("trace_ms") if rec is not None else None
    if not trace:
        return None
    # trace_ms is the measurement's samples downsampled evenly (autotune.candidate): point i is
    # sample floor(i * samples / len(trace)); a sample is one timed block of
    # iterations_per_sample calls, and warmup_iterations counts calls.
    samples = (
        rec.get("samples") if _is_int(rec.get("samples")) and rec["samples"] > len(trace) else len(trace)
    )
    per_sample = rec.get("iterations_per_sample") or 1
    step = samples / len(trace)
    points = [(math.floor(i * step), v) for i, v in enumerate(trace) if _is_number(v)]
    if not points:
        return None
    fig, ax = _new_axes(
        f"Timing trace of {rec['variant']} at batch {rec['batch_size']} "
        f"({rec.get('classification') or 'unclassified'})"
    )
    ax.plot([x for x, _ in points], [y for _, y in points], lw=0.8, color="tab:blue", label="per-iteration")
    warmup = rec.get("warmup_iterations")
    if _is_int(warmup) and rec.get("iterations_per_sample") is None and warmup > samples:
        # Without iterations_per_sample the warmup end cannot be placed on the sample axis.
        ax.plot([], [], " ", label=f"warmup: {warmup} iterations (position unknown)")
    elif _is_int(warmup):
        end = warmup / per_sample
        ax.axvspan(0, end, color="orange", alpha=0.15)
        ax.axvline(end, color="orange", lw=1.5, label=f"warmup end ({warmup} iterations)")
        steady = [y for x, y in points if x >= end]
        if steady:
            mean = sum(steady) / len(steady)
            ax.axhline(mean, color="black", ls="--", lw=1, label=f"steady mean {_fmt_ms(mean)} ms")
    ax.set_xlabel(
        "timed sample"
        + (f" ({per_sample} iterations each)" if per_sample > 1 else "")
        + (f", {len(trace)} of {samples} shown" if samples > len(trace) else "")
    )
    ax.set_ylabel("ms per batch")
    _legend(ax, 3)
    return _png(fig)


def _plots(doc: Mapping[str, Any]) -> dict[str, bytes]:
    """PNG bytes per plot name (see ``PLOT_NAMES``); plots without data are left out, and all
    of them when matplotlib is not installed. Uses the Agg canvas on a ``Figure`` (no pyplot),
    so it touches no global matplotlib state and needs no display."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return {}
    colors = _variant_colors(doc)
    rendered = {
        "throughput": _plot_throughput(doc, colors),
        "latency": _plot_latency(doc, colors),
        "memory": _plot_memory(doc, colors),
        "trace": _plot_trace(doc),
    }
    return {name: png for name, png in rendered.items() if png is not None}


_PLOT_CAPTIONS = {
    "throughput": "Throughput vs batch size per variant; the star is the recommendation, red rings mark "
    "candidates without a steady state.",
    "latency": "Latency per batch vs throughput: p50 (filled) to p99 (hollow); the dashed line is the "
    "Pareto front.",
    "memory": "Batch-size probes: peak memory, the fitted affine model and the memory limit.",
    "trace": "The recommended candidate's per-iteration timings with the detected warmup end.",
}


# ============================================================================ shared table data


def _candidate_rows(doc: Mapping[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """Headers, rows and the status of each row of the full candidates table (md and html)."""
    rec = doc.get("recommendation")
    headers = [
        "#",
        "trial",
        "variant",
        "batch",
        "status",
        "samples/s",
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
    rows, statuses = [], []
    for index, c in enumerate(_rank(doc), start=1):
        measured = c.get("status") == "ok"
        notes = []
        if c.get("reason"):
            notes.append(str(c["reason"]))
        notes += [f"violates: {v}" for v in c.get("violations") or []]
        if _is_int(c.get("recompiles")) and c["recompiles"] > 0:
            notes.append(f"{c['recompiles']} recompile(s)")
        correctness = c.get("correctness")
        if isinstance(correctness, Mapping):
            correct = "pass" if correctness.get("passed") else "FAIL"
            if not correctness.get("passed") and correctness.get("reason") and not c.get("reason"):
                notes.append(str(correctness["reason"]))
        else:
            correct = _DASH
        warmup = c.get("warmup_iterations")
        rows.append(
            [
                f"{index}{' ★' if _same(c, rec) else ''}",
                str(c.get("trial")) if c.get("trial") is not None else _DASH,
                str(c.get("variant")),
                str(c.get("batch_size")),
                str(c.get("status")) + ("" if not measured or _feasible(c) else " (infeasible)"),
                (("~" if _no_steady_state(c) else "") + _fmt_rate(c.get("throughput")))
                if measured
                else _DASH,
                _ci_text(c) if measured else _DASH,
                _fmt_ms(_latency(c, "p50")),
                _fmt_ms(_latency(c, "p90")),
                _fmt_ms(_latency(c, "p99")),
                _fmt_bytes(c.get("peak_memory_bytes")),
                _fmt_seconds(c.get("compile_seconds")),
                str(warmup) if warmup is not None else _DASH,
                str(c.get("classification") or _DASH),
                correct,
                "; ".join(notes),
            ]
        )
        statuses.append("infeasible" if measured and not _feasible(c) else str(c.get("status")))
    return headers, rows, statuses


def _headline(rec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs of the recommendation."""
    half = _relative_half_width(rec)
    rate = _fmt_rate(rec.get("throughput")) + " samples/s"
    if half is not None:
        rate += f" (±{100 * half:.1f}%, 95% CI {_ci_text(rec)})"
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
        (
            "latency per batch",
            f"p50 {_fmt_ms(_latency(rec, 'p50'))} ms, p90 {_fmt_ms(_latency(rec, 'p90'))} ms, "
            f"p99 {_fmt_ms(_latency(rec, 'p99'))} ms (mean {_fmt_ms(_latency(rec, 'mean'))} ms)",
        ),
        ("peak memory", _fmt_bytes(rec.get("peak_memory_bytes"))),
        ("compile + first call", _fmt_seconds(rec.get("compile_seconds"))),
        (
            "warmup",
            (f"{rec['warmup_iterations']} iterations" if rec.get("warmup_iterations") is not None else _DASH)
            + f", classification {rec.get('classification') or _DASH}",
        ),
    ]
    return pairs


def _environment_rows(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fingerprint flattened to (key, value) rows; GPUs one row each; unknowns left out."""
    rows: list[tuple[str, str]] = []

    def show(value: Any) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) if value else _DASH
        return str(value)

    for key in sorted(env):
        value = env[key]
        if key == "gpus" and isinstance(value, list):
            for index, gpu in enumerate(value):
                if isinstance(gpu, Mapping):
                    parts = [
                        str(gpu.get("name") or "GPU"),
                        _fmt_bytes(gpu.get("memory_total_bytes")),
                        f"capability {gpu.get('capability')}" if gpu.get("capability") else "",
                        f"driver {gpu.get('driver_version')}" if gpu.get("driver_version") else "",
                    ]
                    rows.append((f"gpu {index}", ", ".join(p for p in parts if p and p != _DASH)))
        elif isinstance(value, Mapping):
            for sub in sorted(value):
                if value[sub] is not None:
                    rows.append((f"{key}.{sub}", show(value[sub])))
        elif value is not None:
            rows.append((key, _fmt_bytes(value) if key.endswith("_bytes") else show(value)))
    return rows


def _recipe_rows(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The recipe as (field, value) rows: model call and inputs spelled out, sections flattened
    (``search.variants``, ``batch.headroom``...), then where the study is stored."""
    recipe = doc.get("recipe") or {}
    rows: list[tuple[str, str]] = []

    def show(value: Any) -> str:
        if isinstance(value, list):
            return ", ".join(map(str, value)) if value else _DASH
        return str(value)

    for key in ("path", "name", "device", "device_resolved"):
        if recipe.get(key) is not None:
            rows.append((key, str(recipe[key])))
    model = recipe.get("model")
    if isinstance(model, Mapping):
        rows.append(("model", _py_call(str(model.get("factory")), model.get("kwargs"))))
    for spec in recipe.get("inputs") or []:
        shape = "×".join(str(d) for d in spec.get("shape") or [])
        vocab = f", vocab {spec['vocab_size']}" if spec.get("vocab_size") else ""
        rows.append(
            (f"input {spec.get('name') or ''}".strip(), f"batch×{shape} {spec.get('dtype') or ''}{vocab}")
        )
    rows.append(("constraints", _constraints_text(doc) or "none"))
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


def _boundary_summary(variant: str, entry: Mapping[str, Any]) -> str:
    parts = []
    if _is_int(entry.get("max_batch_size")):
        parts.append(f"largest batch that fits: **{entry['max_batch_size']}**")
    else:
        parts.append("largest batch that fits: unknown")
    if _is_int(entry.get("usable_max_batch_size")):
        headroom = entry.get("headroom")
        parts.append(
            f"usable: {entry['usable_max_batch_size']}"
            + (f" ({headroom:.0%} headroom)" if _is_number(headroom) else "")
        )
    if _is_number(entry.get("memory_limit_bytes")):
        parts.append(f"limit {_fmt_bytes(entry['memory_limit_bytes'])}")
    model = entry.get("model")
    if isinstance(model, Mapping):
        parts.append(
            f"fitted memory ≈ {_fmt_bytes(model['intercept_bytes'])} + "
            f"{_fmt_bytes(model['bytes_per_sample'])} × batch"
        )
    if entry.get("memory_measured_by"):
        parts.append(f"measured as {entry['memory_measured_by']}")
    return "; ".join(parts)


def _probe_rows(entry: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            str(p.get("batch_size")),
            "yes" if p.get("fits") else "no",
            _fmt_bytes(p.get("peak_memory_bytes")),
            _fmt_seconds(p.get("seconds")),
            str(p.get("error") or ""),
        ]
        for p in sorted(entry.get("probes") or [], key=lambda p: p.get("batch_size") or 0)
    ]


_PROBE_HEADERS = ["batch", "fits", "peak memory", "time", "error"]


def _title(doc: Mapping[str, Any]) -> str:
    recipe = doc.get("recipe") or {}
    return f"autotune report: {recipe.get('name') or recipe.get('path') or 'unnamed recipe'}"


def _byline(doc: Mapping[str, Any]) -> str:
    tool = doc.get("tool") or {}
    parts = [
        f"{tool.get('name') or 'autotune'} {tool.get('version') or ''}".strip(),
        f"report schema {doc.get('schema', SCHEMA_VERSION)}",
    ]
    if doc.get("created"):
        parts.insert(0, str(doc["created"]))
    return " · ".join(parts)


def _all_notes(doc: Mapping[str, Any]) -> list[str]:
    return [*(doc.get("notes") or []), *_derived_notes(doc)]


# ====================================================================================== markdown


def _md_cell(value: Any) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = [
        "| " + " | ".join(_md_cell(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _markdown(doc: Mapping[str, Any], plot_files: Mapping[str, str] | None) -> str:
    """report.md: the recommendation and why, candidates, batch boundary, environment, notes,
    reproduce code. ``plot_files`` maps plot names to paths relative to the markdown file
    (``write_reports`` passes ``plots/<name>.png``); without it there are no images."""
    rec = doc.get("recommendation")
    env = doc.get("environment") or {}
    out = [f"# {_title(doc)}", ""]
    description = (doc.get("recipe") or {}).get("description")
    if description:
        out += [str(description), ""]
    out += [f"_{_byline(doc)}_  ", f"Machine: {summary_line(env)}  ", f"Search: {_search_summary(doc)}", ""]

    if rec is not None:
        out += [
            "## Recommendation",
            "",
            _md_table(["", ""], [[f"**{k}**", v] for k, v in _headline(rec)]),
            "",
        ]
        out += ["### Why", ""] + [f"- {point}" for point in _why_points(doc, rec)] + [""]
    else:
        out += [
            "## No feasible configuration",
            "",
            "No candidate was measured successfully within the constraints. Reasons:",
            "",
        ]
        groups = _failure_groups(doc.get("candidates") or [])
        out += [
            f"- **{status}** ({len(labels)}): {reason} — {_short_list(labels)}"
            for status, reason, labels in groups
        ] or ["- no candidate was evaluated"]
        out.append("")

    if plot_files:
        out += ["## Plots", ""]
        for name in PLOT_NAMES:
            if name in plot_files:
                out += [f"![{name}]({plot_files[name]})", "", f"_{_PLOT_CAPTIONS[name]}_", ""]

    headers, rows, _ = _candidate_rows(doc)
    out += [
        "## Candidates",
        "",
        f"Best first by the objective ({_objective(doc)}); ★ marks the recommendation, "
        "~ a throughput without a steady state.",
        "",
    ]
    out += [_md_table(headers, rows) if rows else "No candidates were evaluated.", ""]

    boundary = doc.get("batch_boundary") or {}
    if boundary:
        out += ["## Batch boundary", ""]
        for variant, entry in sorted(boundary.items()):
            out += [f"### {variant}", "", _boundary_summary(variant, entry), ""]
            probes = _probe_rows(entry)
            if probes:
                out += [_md_table(_PROBE_HEADERS, probes), ""]

    out += ["## Environment", "", summary_line(env), ""]
    env_rows = _environment_rows(env)
    if env_rows:
        out += [_md_table(["", ""], env_rows), ""]
    out += ["## Recipe and search", "", _md_table(["", ""], _recipe_rows(doc)), ""]

    notes = _all_notes(doc)
    if notes:
        out += ["## Notes", ""] + [f"- {note}" for note in notes] + [""]

    if rec is not None:
        out += [
            "## Reproduce",
            "",
            "Measure this configuration again with warmup detection and CIs:",
            "",
            "```bash",
            str(_measure_command(doc)),
            "```",
            "",
            "Or run it without autotune:",
            "",
            "```python",
            _reproduce(doc).rstrip(),
            "```",
            "",
        ]
    return "\n".join(out)


# ========================================================================================== html

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
    """Escape, then turn the ``**bold**`` used by shared sentences into <strong>."""
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", _h(text))


def _html(doc: Mapping[str, Any], plots: Mapping[str, bytes]) -> str:
    """report.html: one self-contained page (inline CSS, plots as base64 PNG, no scripts).

    ``plots`` maps plot names to PNG bytes; when omitted they are rendered here.
    """
    rec = doc.get("recommendation")
    env = doc.get("environment") or {}
    description = (doc.get("recipe") or {}).get("description")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(_title(doc))}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{_h(_title(doc))}</h1>",
    ]
    if description:
        parts.append(f"<p>{_h(description)}</p>")
    parts.append(
        f'<p class="muted small">{_h(_byline(doc))}<br>Machine: {_h(summary_line(env))}<br>'
        f"Search: {_h(_search_summary(doc))}</p>"
    )

    if rec is not None:
        half = _relative_half_width(rec)
        metrics = [
            ("recommended", f"{rec.get('variant')} @ batch {rec.get('batch_size')}"),
            (
                "throughput",
                f"{_fmt_rate(rec.get('throughput'))} /s"
                + (f" ±{100 * half:.1f}%" if half is not None else ""),
            ),
            ("p50 / p99 latency", f"{_fmt_ms(_latency(rec, 'p50'))} / {_fmt_ms(_latency(rec, 'p99'))} ms"),
            ("peak memory", _fmt_bytes(rec.get("peak_memory_bytes"))),
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
        parts.append(_html_kv(_headline(rec)))
        parts.append(
            "<h3>Why</h3><ul>"
            + "".join(f"<li>{_h(p)}</li>" for p in _why_points(doc, rec))
            + "</ul></section>"
        )
    else:
        groups = _failure_groups(doc.get("candidates") or [])
        items = (
            "".join(
                f"<li><strong>{_h(status)}</strong> ({len(labels)}): {_h(reason)} — "
                f'<span class="muted">{_h(_short_list(labels))}</span></li>'
                for status, reason, labels in groups
            )
            or "<li>no candidate was evaluated</li>"
        )
        parts.append(
            '<section class="card bad"><h2 style="margin-top:0;border:0">No feasible configuration</h2>'
            f"<p>No candidate was measured successfully within the constraints. Reasons:</p>"
            f"<ul>{items}</ul></section>"
        )

    if plots:
        parts.append('<h2>Plots</h2><div class="plots">')
        for name in PLOT_NAMES:
            if name in plots:
                data = base64.b64encode(plots[name]).decode("ascii")
                parts.append(
                    f'<figure><img alt="{_h(name)} plot" src="data:image/png;base64,{data}">'
                    f"<figcaption>{_h(_PLOT_CAPTIONS[name])}</figcaption></figure>"
                )
        parts.append("</div>")

    headers, rows, statuses = _candidate_rows(doc)
    classes = [
        f"s-{status}" + (" rec" if "★" in row[0] else "") for row, status in zip(rows, statuses, strict=True)
    ]
    parts.append(
        f"<h2>Candidates</h2><p class='muted small'>Best first by the objective "
        f"({_h(_objective(doc))}); ★ marks the recommendation, ~ a throughput without a steady "
        "state.</p>"
    )
    parts.append(
        f'<div class="scroll">{_html_table(headers, rows, classes)}</div>'
        if rows
        else "<p>No candidates were evaluated.</p>"
    )

    boundary = doc.get("batch_boundary") or {}
    if boundary:
        parts.append("<h2>Batch boundary</h2>")
        for variant, entry in sorted(boundary.items()):
            parts.append(f"<h3>{_h(variant)}</h3><p>{_html_inline_md(_boundary_summary(variant, entry))}</p>")
            probes = _probe_rows(entry)
            if probes:
                parts.append(
                    f"<details><summary>{len(probes)} probes</summary>"
                    f"{_html_table(_PROBE_HEADERS, probes)}</details>"
                )

    parts.append(f"<h2>Environment</h2><p>{_h(summary_line(env))}</p>")
    env_rows = _environment_rows(env)
    if env_rows:
        parts.append(f"<details><summary>all {len(env_rows)} facts</summary>{_html_kv(env_rows)}</details>")
    parts.append(f"<h2>Recipe and search</h2>{_html_kv(_recipe_rows(doc))}")

    notes = _all_notes(doc)
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_h(n)}</li>" for n in notes) + "</ul>")

    if rec is not None:
        parts.append(
            "<h2>Reproduce</h2><p>Measure this configuration again with warmup detection and CIs:</p>"
            f"<pre><code>{_h(_measure_command(doc))}</code></pre><p>Or run it without autotune:</p>"
            f"<pre><code>{_h(_reproduce(doc))}</code></pre>"
        )
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


# ======================================================================================= writing


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and ``os.replace``: a reader (or a crash)
    sees the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; reports are ordinary shareable files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_reports(doc: Mapping[str, Any], out_dir: Path | str) -> dict[str, Path | list[Path]]:
    """Validate ``doc`` and write report.json, report.md, report.html and ``plots/*.png``.

    report.json is written first, so the measurements survive a rendering failure and
    ``autotune report DIR`` can try again. Plots left over from an earlier rendering in the same
    directory are removed when this document has no data for them. Returns
    ``{"json": path, "md": path, "html": path, "plots": [paths]}``.
    """
    plain = normalise_report(doc)
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(
            f"{directory}: cannot create the report directory ({error.strerror or error})"
        ) from None
    json_path, md_path, html_path = (directory / name for name in REPORT_FILES)
    _atomic_write(json_path, _report_json(plain).encode("utf-8"))

    plots = _plots(plain)
    plot_dir = directory / PLOTS_DIR
    plot_paths: list[Path] = []
    if plots:
        plot_dir.mkdir(exist_ok=True)
    for name in PLOT_NAMES:
        target = plot_dir / f"{name}.png"
        if name in plots:
            _atomic_write(target, plots[name])
            plot_paths.append(target)
        else:
            target.unlink(missing_ok=True)
    relative = {name: f"{PLOTS_DIR}/{name}.png" for name in plots}
    _atomic_write(md_path, _markdown(plain, relative).encode("utf-8"))
    _atomic_write(html_path, _html(plain, plots).encode("utf-8"))
    return {"json": json_path, "md": md_path, "html": html_path, "plots": plot_paths}


# =================================================================================== public API
# Each entry point normalises (and so validates) the document once, then calls the private
# implementation, which can rely on lists, plain numbers and filled-in optional sections.


def rank_candidates(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Candidates best first under the study's objective.

    Order: measured and feasible (by the objective), measured but violating a constraint
    (same order), then unmeasured by status (rejected, oom, pruned, failed), each by trial.
    Within the measured groups, candidates without a steady state come after the steady ones
    (the recommendation is chosen the same way).
    Objectives: ``throughput`` - samples/s descending; ``latency`` - the recipe's
    ``constraints.latency_percentile`` (p99 unless set) ascending; ``pareto`` - members of the
    Pareto front first, each group by throughput. Ties: by trial number.
    """
    return _rank(normalise_report(doc))


def console_table(doc: Mapping[str, Any], *, top: int | None = 15) -> str:
    """The candidates best first (see ``rank_candidates``) as a table for a 100-column terminal,
    then the recommendation (or why there is none), the constraints and the Pareto front.

    ``top`` limits the rows (``None``: all). Measured rows show throughput with its relative
    95% CI and p50/p99; unmeasured rows show their status and reason in the note column.
    Plain ASCII, so it survives any terminal or log file.
    """
    return _console(normalise_report(doc), top)


def measure_command(doc: Mapping[str, Any]) -> str | None:
    """``autotune measure RECIPE --variant NAME --batch-size N`` for the recommendation (None
    without one)."""
    return _measure_command(normalise_report(doc))


def reproduce_code(doc: Mapping[str, Any]) -> str:
    """Python code that builds the recommended configuration and times it briefly.

    It rebuilds the model from the recipe's factory and kwargs, applies the variant in the
    order autotune does (eval, device, precision, memory format, then the compiler), makes
    random inputs at the recommended batch size and runs a short timed loop. The header
    comment holds the ``autotune measure`` command, which measures properly (warmup
    detection, confidence intervals). Raises ``InputError`` when there is no recommendation.
    """
    return _reproduce(normalise_report(doc))


def render_plots(doc: Mapping[str, Any]) -> dict[str, bytes]:
    """PNG bytes per plot name (see ``PLOT_NAMES``); plots without data are left out, and all
    of them when matplotlib is not installed. Uses the Agg canvas on a ``Figure`` (no pyplot),
    so it touches no global matplotlib state and needs no display."""
    return _plots(normalise_report(doc))


def render_markdown(doc: Mapping[str, Any], *, plot_files: Mapping[str, str] | None = None) -> str:
    """report.md: the recommendation and why, plots, candidates, batch boundary, environment,
    notes, reproduce code. ``plot_files`` maps plot names to paths relative to the markdown
    file (``write_reports`` passes ``plots/<name>.png``); without it there are no images."""
    return _markdown(normalise_report(doc), plot_files)


def render_html(doc: Mapping[str, Any], *, plots: Mapping[str, bytes] | None = None) -> str:
    """report.html: one self-contained page (inline CSS, plots as base64 PNG, no scripts).

    ``plots`` maps plot names to PNG bytes; when omitted they are rendered here.
    """
    plain = normalise_report(doc)
    return _html(plain, _plots(plain) if plots is None else plots)
