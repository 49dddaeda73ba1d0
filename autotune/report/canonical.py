"""The stored document: normalisation, the canonical report.json text, and loading it back.

The orchestrator builds one plain JSON-able dict and hands it to the report; this module turns it
into the single source of truth. ``report.json`` is written first and ``autotune report DIR``
re-renders the other files from it, so every rendering is a pure function of the document.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotune.core.limits import MAX_REPORT_BYTES, check_depth, read_text_limited, too_deep
from autotune.errors import InputError
from autotune.report.schema import (
    CANDIDATE_FIELDS,
    DATA_FIELDS,
    DATA_SHAPE_FIELDS,
    MEASUREMENT_FIELDS,
    PERCENTILES,
    REPORT_FILES,
    SERVING_BASELINE_FIELDS,
    SERVING_CALLS_FIELDS,
    SERVING_CONFIG_FIELDS,
    SERVING_FIELDS,
    SERVING_FRACTION_FIELDS,
    SERVING_KNOB_FIELDS,
    SERVING_POINT_FIELDS,
    SERVING_RECOMMENDATION_FIELDS,
    SERVING_SERVER_FIELDS,
    TRAFFIC_BUCKET_FIELDS,
    TRAFFIC_FIELDS,
    show,
    validate_report,
)

if TYPE_CHECKING:
    from autotune.report.types import ReportDocument


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
    raise InputError(f"{path}: cannot be stored in report.json ({type(value).__name__} {show(value)})")


def normalise_report(doc: Mapping[str, Any]) -> ReportDocument:
    """A validated, JSON-able deep copy with optional sections filled in.

    NaN and infinities become ``null`` (JSON has no spelling for them and a NaN throughput
    means "not measured"); ``batch_boundary`` defaults to ``{}``, ``pareto`` and ``notes`` to
    ``[]``. The input is not modified.
    """
    if not isinstance(doc, Mapping):
        raise InputError(f"report: expected a JSON object, got {show(doc)}")
    plain = _plain(doc, "report")
    for key, default in (("batch_boundary", {}), ("pareto", []), ("notes", [])):
        if plain.get(key) is None:
            plain[key] = default
    validate_report(plain)
    # Validated against its schema, which requires less than ReportDocument declares: a report written by an
    # older version may lack fields added since, so readers .get() what the schema does not require.
    return cast("ReportDocument", plain)



_ORDER_TOP = (
    "schema",
    "tool",
    "created",
    "complete",
    "phase",
    "interrupted",
    "recipe",
    "data",
    "environment",
    "search",
    "recommendation",
    "artifact",
    "profile",
    "serving",
    "candidates",
    "pareto",
    "batch_boundary",
    "notes",
)
_ORDER_CANDIDATE = tuple(CANDIDATE_FIELDS)
_ORDER_MEASUREMENT = tuple(MEASUREMENT_FIELDS)
_ORDER_ANALYSIS = ("classification", "steady_start", "steady_mean", "steady_median", "ci", "changepoints",
                   "outliers", "one_off", "n", "levels", "share_high", "wander", "median_ci")
_ORDER_SECONDS = ("format", "count", "data")
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
    "footprint",
    "granularity_source",
    "limit_source",
    "model",
    "probes",
)
_ORDER_PROBE = ("batch_size", "fits", "peak_memory_bytes", "seconds", "error")
_ORDER_LATENCY = PERCENTILES
_ORDER_SEARCH = ("trials", "wall_seconds", "sampler", "objective", "study_name", "storage", "stopped_by")


def _ordered(mapping: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """Known keys in their documented order, then any others sorted: the same document always
    serialises to the same bytes, and a human finds ``schema`` first."""
    known = [key for key in order if key in mapping]
    rest = sorted(key for key in mapping if key not in order)
    return {key: mapping[key] for key in [*known, *rest]}


def _records(value: Any, order: Sequence[str]) -> Any:
    """Each mapping of a list in ``order`` (anything else as it is)."""
    if not isinstance(value, list):
        return value
    return [_ordered(item, order) if isinstance(item, Mapping) else item for item in value]


def _serving_config(config: Any) -> Any:
    if not isinstance(config, Mapping):
        return config
    out = _ordered(config, tuple(SERVING_CONFIG_FIELDS))
    if "points" in out:
        out["points"] = _records(out["points"], tuple(SERVING_POINT_FIELDS))
    return out


def _serving(section: Mapping[str, Any]) -> dict[str, Any]:
    """The serving section in its documented order, each of its records too."""
    out = _ordered(section, tuple(SERVING_FIELDS))
    for key, order in (("recommendation", SERVING_RECOMMENDATION_FIELDS), ("calls", SERVING_CALLS_FIELDS),
                       ("server", SERVING_SERVER_FIELDS)):
        if isinstance(out.get(key), Mapping):
            out[key] = _ordered(out[key], tuple(order))
    for key, order in (("at_fraction", SERVING_FRACTION_FIELDS), ("knobs", SERVING_KNOB_FIELDS)):
        if key in out:
            out[key] = _records(out[key], tuple(order))
    if isinstance(out.get("configs"), list):
        out["configs"] = [_serving_config(c) for c in out["configs"]]
    if isinstance(out.get("baselines"), Mapping):
        baselines = _ordered(out["baselines"], tuple(SERVING_BASELINE_FIELDS))
        out["baselines"] = {key: _serving_config(value) for key, value in baselines.items()}
    return out


def _canonical(doc: Mapping[str, Any]) -> dict[str, Any]:
    def candidate(c: Any) -> Any:
        if not isinstance(c, Mapping):
            return c
        out = _ordered(c, _ORDER_CANDIDATE)
        if isinstance(out.get("latency_ms"), Mapping):
            out["latency_ms"] = _ordered(out["latency_ms"], _ORDER_LATENCY)
        if isinstance(out.get("correctness"), Mapping):
            out["correctness"] = _ordered(out["correctness"], ())
        if isinstance(out.get("traffic"), Mapping):
            out["traffic"] = _ordered(out["traffic"], tuple(TRAFFIC_FIELDS))
            if isinstance(out["traffic"].get("buckets"), list):
                out["traffic"]["buckets"] = [_ordered(b, tuple(TRAFFIC_BUCKET_FIELDS)) if isinstance(b, Mapping) else b
                                             for b in out["traffic"]["buckets"]]
        if "measurement" in out:  # last, after the fields the schema does not know too: it is long
            out["measurement"] = out.pop("measurement")
        if isinstance(out.get("measurement"), Mapping):
            record = _ordered(out["measurement"], _ORDER_MEASUREMENT)
            if isinstance(record.get("analysis"), Mapping):
                record["analysis"] = _ordered(record["analysis"], _ORDER_ANALYSIS)
            for key in ("samples", "latency_samples"):
                if isinstance(record.get(key), Mapping):
                    record[key] = _ordered(record[key], _ORDER_SECONDS)
            out["measurement"] = record
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
    if isinstance(out.get("data"), Mapping):
        data = _ordered(out["data"], tuple(DATA_FIELDS))
        if isinstance(data.get("kwargs"), Mapping):
            data["kwargs"] = sorted_deep(data["kwargs"])
        if isinstance(data.get("shapes"), list):
            data["shapes"] = [_ordered(s, tuple(DATA_SHAPE_FIELDS)) if isinstance(s, Mapping) else s
                              for s in data["shapes"]]
        out["data"] = data
    if isinstance(out.get("serving"), Mapping):
        out["serving"] = _serving(out["serving"])
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


def report_json(doc: Mapping[str, Any]) -> str:
    """The report.json text of a normalised document: canonical key order, one trailing newline."""
    return _dumps(_canonical(doc)) + "\n"




def load_report(path: Path | str) -> ReportDocument:
    """Read and validate a stored report.json (or a directory holding one); errors name the file.

    A report.json may come from anywhere (``compare`` in CI, a copied run directory), so it is read as untrusted
    input: at most :data:`~autotune.core.limits.MAX_REPORT_BYTES`, UTF-8, nested at most
    :data:`~autotune.core.limits.MAX_DEPTH` levels; every problem is an :class:`InputError` naming the file.
    """
    file = Path(path)
    try:
        if file.is_dir():
            file = file / REPORT_FILES[0]
        text = read_text_limited(file, MAX_REPORT_BYTES, what="a report.json written by autotune")
    except FileNotFoundError:
        raise InputError(f"{file}: no such report file") from None
    except OSError as error:
        raise InputError(f"{file}: cannot read ({error.strerror or error})") from None
    except ValueError as error:  # a NUL character in the path
        raise InputError(f"{str(file)!r}: cannot read ({error})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"{file}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    except RecursionError:
        raise too_deep(str(file)) from None
    check_depth(doc, where=str(file))
    try:
        return normalise_report(doc)
    except InputError as error:
        raise InputError(f"{file}: {error}") from None

