"""The traffic in the report: the document's ``data`` section, and each candidate's ``traffic`` by input shape.

A recipe with a ``[data]`` factory is measured on its batches, whose non-batch dimensions may vary; one
throughput then averages over shapes that a deployment may see in other proportions. So the report shows
where the traffic came from and which shapes it had (``data``), and for each candidate how it served each
shape after its shape policy (``traffic.buckets``: every batch as it came, ``dynamic``, or padded up to the
recipe's buckets, ``buckets``), with the recompiles that policy cost.

Shared by report.md, report.html and the console, like :mod:`autotune.report.sections`. Both fields are
optional in schema 1: every function here returns nothing for a document or row without them, so older
reports render exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.report.analysis import rank, same_candidate
from autotune.report.format import DASH, fmt_ms, fmt_rate
from autotune.report.reproduce import py_call
from autotune.report.schema import is_int, is_number

DATA_SHAPE_HEADERS = ["shape", "batches"]
BUCKET_HEADERS = ["shape", "calls", "samples", "samples/s", "p50 ms", "p99 ms"]
#: The candidates' traffic table: the candidates table's rank and variant, then one row per shape.
TRAFFIC_HEADERS = ["#", "variant", "batch", "shape policy", *BUCKET_HEADERS]


def traffic_of(c: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A row's ``traffic`` (None for a row measured without ``[data]`` traffic, or an older report's row)."""
    traffic = c.get("traffic") if isinstance(c, Mapping) else None
    return traffic if isinstance(traffic, Mapping) else None


def _count(value: Any, one: str, many: str) -> str:
    return f"{value} {one if value == 1 else many}"


def traffic_summary(c: Mapping[str, Any]) -> str | None:
    """``16 batches per measurement, 7.5 samples per call; shape policy buckets, 3 shapes, 2 recompiles``."""
    traffic = traffic_of(c)
    if traffic is None:
        return None
    served = []
    if is_int(traffic.get("batches")):
        served.append(_count(traffic["batches"], "batch", "batches") + " per measurement")
    if is_number(traffic.get("samples_per_call")):
        served.append(f"{traffic['samples_per_call']:.3g} samples per call")
    policy = []
    if traffic.get("shape_policy"):
        policy.append(f"shape policy {traffic['shape_policy']}")
    if isinstance(traffic.get("buckets"), list):
        policy.append(_count(len(traffic["buckets"]), "shape", "shapes"))
    if is_int(traffic.get("recompiles")):
        policy.append(_count(traffic["recompiles"], "recompile", "recompiles"))
    return "; ".join(part for part in (", ".join(served), ", ".join(policy)) if part) or None


def shapes_cell(c: Mapping[str, Any]) -> str:
    """The candidates table's ``shapes`` cell: ``buckets, 3 shapes, 2 recompiles`` (a dash without traffic)."""
    traffic = traffic_of(c)
    if traffic is None:
        return DASH
    parts = [str(traffic.get("shape_policy") or DASH)]
    if isinstance(traffic.get("buckets"), list):
        parts.append(_count(len(traffic["buckets"]), "shape", "shapes"))
    if is_int(traffic.get("recompiles")) and traffic["recompiles"] > 0:
        parts.append(_count(traffic["recompiles"], "recompile", "recompiles"))
    return ", ".join(parts)


def bucket_rows(c: Mapping[str, Any]) -> list[list[str]]:
    """One row per input shape a candidate served (``BUCKET_HEADERS``), in the writer's order."""
    traffic = traffic_of(c)
    rows = []
    for bucket in (traffic or {}).get("buckets") or []:
        rows.append([
            str(bucket.get("shape")),
            str(bucket["calls"]) if is_int(bucket.get("calls")) else DASH,
            str(bucket["samples"]) if is_int(bucket.get("samples")) else DASH,
            fmt_rate(bucket.get("throughput")),
            fmt_ms(bucket.get("p50_ms")),
            fmt_ms(bucket.get("p99_ms")),
        ])
    return rows


def traffic_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """Every candidate's :func:`bucket_rows` (``TRAFFIC_HEADERS``), best first as in the candidates table."""
    rec = doc.get("recommendation")
    rows = []
    for index, c in enumerate(rank(doc), start=1):
        traffic = traffic_of(c)
        if traffic is None:
            continue
        prefix = [f"{index}{' ★' if same_candidate(c, rec) else ''}", str(c.get("variant")),
                  str(c.get("batch_size")), str(traffic.get("shape_policy") or DASH)]
        rows += [prefix + row for row in bucket_rows(c)]
    return rows


def data_rows(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``data`` section as (field, value) rows; empty for a document without one."""
    data = doc.get("data")
    if not isinstance(data, Mapping):
        return []
    if data.get("source") == "factory":
        source = f"data factory {py_call(str(data.get('factory')), data.get('kwargs'))}, with batch_size=b"
    else:
        source = "random inputs (the recipe's [[inputs]])"
    rows = [("source", source)]
    if is_int(data.get("batches")):
        rows.append(("batches per measurement", str(data["batches"])))
    if isinstance(data.get("keyword_inputs"), list):
        rows.append(("keyword inputs", ", ".join(data["keyword_inputs"]) or "none: positional"))
    if isinstance(data.get("dynamic_dims"), list):
        rows.append(("dynamic dims", ", ".join(data["dynamic_dims"]) or "none: every batch has the same shape"))
    shapes = data.get("shapes")
    if isinstance(shapes, list) and shapes:
        counted = [s["batches"] for s in shapes if is_int(s.get("batches"))]
        rows.append(("shapes seen", _count(len(shapes), "shape", "shapes")
                     + (f" in {_count(sum(counted), 'batch', 'batches')}" if len(counted) == len(shapes) else "")))
    if isinstance(data.get("buckets"), list):
        rows.append(("buckets", ", ".join(map(str, data["buckets"]))
                     + " (what the +buckets variants pad the dynamic dims up to)"))
    return rows


def data_shape_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """The shapes the traffic had and in how many batches (``DATA_SHAPE_HEADERS``), in the writer's order."""
    data = doc.get("data")
    shapes = data.get("shapes") if isinstance(data, Mapping) else None
    return [[str(s.get("shape")), str(s["batches"]) if is_int(s.get("batches")) else DASH]
            for s in shapes or []]


def data_line(doc: Mapping[str, Any]) -> str | None:
    """The ``data`` section in one sentence, for the console (None without one)."""
    rows = data_rows(doc)
    if not rows:
        return None
    return "Data: " + "; ".join(value if key == "source" else f"{key} {value}" for key, value in rows) + "."


def traffic_line(c: Mapping[str, Any], *, shapes: int = 4) -> str | None:
    """A candidate's traffic and its first ``shapes`` shapes in one sentence, for the console."""
    summary = traffic_summary(c)
    if summary is None:
        return None
    rows = bucket_rows(c)
    text = f"Traffic: {summary}."
    if rows:
        parts = [f"{shape}: {rate}/s, p50 {p50} ms, p99 {p99} ms" for shape, _, _, rate, p50, p99 in rows[:shapes]]
        more = f"; {_count(len(rows) - shapes, 'more shape', 'more shapes')} in report.md" if len(rows) > shapes else ""
        text += " By shape: " + "; ".join(parts) + more + "."
    return text
