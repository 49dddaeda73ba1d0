"""Candidate records: a worker's result turned into one row of report.json.

Pure logic (numpy via :mod:`autotune.core.stats`, no torch): the parent builds these rows, checks
them against the recipe's constraints and extracts the objective values the search optimises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict, cast

from autotune.core.measurement import Measurement, MeasurementRecord
from autotune.core.recipe import Constraints
from autotune.core.vocab import STATUSES as STATUSES
from autotune.core.vocab import RowStatus, ShapePolicy

#: Points kept of a candidate's timing trace in ``trace_ms`` (enough to plot warmup; the full samples are
#: in ``measurement``).
TRACE_POINTS = 400


class TrafficBucket(TypedDict):
    """One input shape of a candidate's traffic (after its shape policy) and how the candidate served it."""

    shape: str  # every input's shape, e.g. "input_ids 8x32, attention_mask 8x32"
    calls: int
    samples: int
    throughput: float | None  # samples/s over the calls of this shape
    p50_ms: float | None
    p99_ms: float | None


class TrafficSummary(TypedDict):
    """A candidate measured on the recipe's ``[data]`` traffic: the batches, the shape policy, per shape."""

    batches: int  # batches of the traffic used per measurement
    samples_per_call: float  # below the batch size when the last batch is partial
    shape_policy: ShapePolicy
    recompiles: int | None  # while warming every shape of the traffic (torch.compile variants)
    buckets: list[TrafficBucket]
    dynamic_dims: NotRequired[list[str]]  # "input_ids[1]": the dims that vary between batches
    first_pass_seconds: NotRequired[float | None]  # one call per batch, every shape's first: compiles land here


class AccuracySummary(TypedDict):
    """A candidate's accuracy against eager fp32 and the budget's verdict (``autotune.worker.accuracy``; numbers
    that are not finite are the strings ``"inf"``/``"nan"``)."""

    kind: Literal["metric", "agreement", "closeness"]
    passed: bool
    gating: NotRequired[bool]  # False: information on an fp32 row, which the strict gate judged
    metric: NotRequired[str]  # the user's metric reference, "top-1 agreement" or "closeness"
    value: NotRequired[float | str | None]
    reference: NotRequired[float | str | None]  # eager fp32's value
    drop: NotRequired[float | str | None]  # reference - value (relative: over |reference|); closeness: rel. error
    max_drop: NotRequired[float | None]
    relative: NotRequired[bool]
    budget: NotRequired[str]
    batches: NotRequired[int]
    samples: NotRequired[int]
    data: NotRequired[Literal["factory", "random"]]
    rel_error: NotRequired[float | str | None]
    cosine: NotRequired[float | str | None]
    max_abs_error: NotRequired[float | str | None]
    reason: NotRequired[str | None]
    verdict: NotRequired[Literal["within", "exceeds", "undecided"] | None]  # the drop's 95% interval vs max_drop
    drop_interval: NotRequired[list[float] | None]
    needed: NotRequired[int | None]  # undecided: samples (or batches) at the observed rate that would decide it
    needed_unit: NotRequired[Literal["predictions", "batches"] | None]
    uncertainty: NotRequired[str | None]  # how sure the verdict is, in one sentence


class CandidateRow(TypedDict):
    """One row of report.json's ``candidates`` (``CANDIDATE_FIELDS`` in :mod:`autotune.report.schema`
    validates it): the variant's fields, what was measured, and the verdict. Keys are in the order the
    row is written; measured fields are None until a measurement fills them.

    ``measurement`` is the measurement itself (:class:`autotune.core.measurement.MeasurementRecord`: the raw
    samples and their warmup analysis); the measured fields before it are its statistics, copied from
    :class:`~autotune.core.measurement.Measurement` once here so the search and the renderers read plain numbers.
    Rows written before report schema 2 (and rows of studies from then) have no ``measurement``."""

    trial: int
    variant: str
    compiler: str | None
    compile_mode: str | None
    precision: str
    memory_format: str
    threads: int | None
    batch_size: int
    status: RowStatus
    reason: str | None
    feasible: bool
    violations: list[str]
    throughput: float | None
    throughput_ci: list[float] | None
    latency_ms: dict[str, float] | None  # by Percentile
    latency_source: str | None
    peak_memory_bytes: int | None
    compile_seconds: float | None
    warmup_iterations: int | None
    classification: str | None
    relative_ci_half_width: float | None
    samples: int
    stopped_by: str | None
    recompiles: int | None
    correctness: dict[str, Any] | None
    notes: list[str]
    trace_ms: list[float] | None
    foreign_cores: float | None
    measurement: MeasurementRecord | None
    #: set with a measurement
    iterations_per_sample: NotRequired[int]
    #: set by the search on a row told only so the sampler learns: the trial it repeats, or None for a
    #: combination outside the space (such rows never reach the report: ``autotune.study.measured_rows``)
    repeat_of_trial: NotRequired[int | None]
    #: set by the bracket strategy on the rows it measures (:mod:`autotune.study.bracket`)
    fidelity: NotRequired[float]
    search_action: NotRequired[str]
    search_seconds: NotRequired[float]
    #: set when the candidate was timed over a traffic of several batches (a ``[data]`` factory): samples per
    #: call, the shape policy, recompiles while warming every shape, per-shape-bucket statistics
    traffic: NotRequired[TrafficSummary]
    #: the model's size as the variant stores it (bytes; None where the worker could not tell)
    model_bytes: NotRequired[int | None]
    #: a lower-precision variant's accuracy budget (and every candidate's score with an ``[accuracy]`` recipe)
    accuracy: NotRequired[AccuracySummary]
    #: ``failed`` because an export specialised its batch: every batch above 1 fails, batch 1 is still tried
    batch_specific: NotRequired[bool]


def _downsample(values: Sequence[float], points: int = TRACE_POINTS) -> list[float]:
    if len(values) <= points:
        return list(values)
    step = len(values) / points
    return [values[int(i * step)] for i in range(points)]


def candidate_row(
    *,
    trial: int,
    variant: str,
    spec: Mapping[str, Any],
    batch_size: int,
    result: Mapping[str, Any],
    constraints: Constraints,
) -> CandidateRow:
    """One report row from a worker result (any status)."""
    row: CandidateRow = {
        "trial": trial,
        "variant": variant,
        "compiler": spec.get("compiler"),
        "compile_mode": spec.get("compile_mode"),
        "precision": spec.get("precision", "fp32"),
        "memory_format": spec.get("memory_format", "contiguous"),
        "threads": spec.get("threads"),
        "batch_size": batch_size,
        "status": result.get("status", "failed"),
        "reason": result.get("reason") or None,
        "feasible": False,
        "violations": [],
        "throughput": None,
        "throughput_ci": None,
        "latency_ms": None,
        "latency_source": None,
        "peak_memory_bytes": result.get("peak_memory_bytes"),
        "compile_seconds": result.get("compile_seconds"),
        "warmup_iterations": None,
        "classification": None,
        "relative_ci_half_width": None,
        "samples": 0,
        "stopped_by": None,
        "recompiles": result.get("recompiles"),
        "correctness": result.get("correctness"),
        "notes": list(result.get("notes", [])),
        "trace_ms": None,
        "foreign_cores": (result.get("load") or {}).get("foreign_cores"),
        "measurement": None,
    }
    if "model_bytes" in result:
        row["model_bytes"] = result["model_bytes"]
    if result.get("batch_specific"):
        row["batch_specific"] = True
    if result.get("accuracy"):
        row["accuracy"] = cast(AccuracySummary, dict(result["accuracy"]))
    if row["compile_seconds"] is None and result.get("first_call_seconds") is not None:
        row["compile_seconds"] = (result.get("build_seconds") or 0.0) + result["first_call_seconds"]
    if row["status"] == "ok" and result.get("measurement"):
        m = Measurement.from_dict(result["measurement"])
        row.update({
            "throughput": m.throughput,
            "throughput_ci": list(m.throughput_ci) if m.throughput_ci else None,
            "latency_ms": dict(m.latency_ms),
            "latency_source": m.latency_source,
            "warmup_iterations": m.warmup_iterations,
            "classification": m.classification,
            "relative_ci_half_width": m.relative_ci_half_width,
            "samples": len(m.samples),
            "iterations_per_sample": m.iterations_per_sample,
            "stopped_by": m.stopped_by,
            "trace_ms": [s * 1e3 for s in _downsample(m.samples)],
            "measurement": m.to_dict(),
        })
        traffic = traffic_summary(m)
        if traffic is not None:
            row["traffic"] = traffic
        row["violations"] = violations(row, constraints)
        row["feasible"] = not row["violations"]
    return row


def traffic_summary(m: Measurement) -> TrafficSummary | None:
    """The row's ``traffic``: what the measurement's traffic was and how each shape bucket fared."""
    batches = m.extra.get("traffic_batches")
    if not batches:
        return None
    summary: TrafficSummary = {
        "batches": len(batches),
        "samples_per_call": m.samples_per_call,
        "shape_policy": m.extra.get("shape_policy", "dynamic"),
        "dynamic_dims": list(m.extra.get("dynamic_dims") or []),
        "recompiles": m.extra.get("warmup_recompiles"),
        "first_pass_seconds": m.extra.get("first_pass_seconds"),
        "buckets": cast("list[TrafficBucket]", m.bucket_stats()),
    }
    return summary


def candidate_record(
    *,
    trial: int,
    variant: str,
    spec: Mapping[str, Any],
    batch_size: int,
    result: Mapping[str, Any],
    constraints: Constraints,
) -> dict[str, Any]:
    """:func:`candidate_row` as the plain dict the search and the report keep in their row lists.

    Plain on purpose: the study stores rows as JSON (Optuna user attributes) and the report's rows are
    read back from it, so a row list holds plain dicts a :class:`CandidateRow` was written as, plus
    the strategy's keys; nothing re-checks them until the report is validated (:mod:`autotune.report.schema`).
    """
    return cast("dict[str, Any]", candidate_row(trial=trial, variant=variant, spec=spec, batch_size=batch_size,
                                                result=result, constraints=constraints))


def violations(row: Mapping[str, Any], constraints: Constraints) -> list[str]:
    """Human-readable constraint violations of a measured row (empty: feasible)."""
    out = []
    if constraints.max_latency_ms is not None and row.get("latency_ms"):
        value = row["latency_ms"][constraints.latency_percentile]
        if value > constraints.max_latency_ms:
            pct = constraints.latency_percentile
            out.append(f"{pct} latency {value:.3g} ms > SLO {constraints.max_latency_ms:g} ms")
    if constraints.max_memory_bytes is not None and row.get("peak_memory_bytes") is not None:
        if row["peak_memory_bytes"] > constraints.max_memory_bytes:
            out.append(f"peak memory {row['peak_memory_bytes']} B > limit {constraints.max_memory_bytes} B")
    return out


def constraint_values(row: Mapping[str, Any], constraints: Constraints) -> dict[str, float]:
    """Optuna's convention, one value per constraint: <= 0 means satisfied."""
    values = {}
    if constraints.max_latency_ms is not None:
        lat = (row.get("latency_ms") or {}).get(constraints.latency_percentile, math.inf)
        values["latency_ms"] = lat - constraints.max_latency_ms
    if constraints.max_memory_bytes is not None:
        peak = row.get("peak_memory_bytes")
        values["memory_bytes"] = float(peak - constraints.max_memory_bytes) if peak is not None else 0.0
    return values


def latency_value(row: Mapping[str, Any], constraints: Constraints) -> float:
    """The latency the objective minimises: the constrained percentile (p99 by default), in ms."""
    return float(row["latency_ms"][constraints.latency_percentile])


def objective_values(row: Mapping[str, Any], *, objective: str, constraints: Constraints) -> list[float]:
    if objective == "throughput":
        return [float(row["throughput"])]
    if objective == "latency":
        return [latency_value(row, constraints)]
    return [float(row["throughput"]), latency_value(row, constraints)]


def directions(objective: str) -> list[Literal["minimize", "maximize"]]:
    table: dict[str, list[Literal["minimize", "maximize"]]] = {
        "throughput": ["maximize"], "latency": ["minimize"], "pareto": ["maximize", "minimize"]}
    return table[objective]


def pareto_front(rows: Sequence[Mapping[str, Any]], constraints: Constraints) -> list[int]:
    """Trial numbers of feasible ok rows not dominated in (throughput up, latency down)."""
    pts = [r for r in rows if r["status"] == "ok" and r["feasible"]]
    front = []
    for r in pts:
        t, lat = r["throughput"], latency_value(r, constraints)
        dominated = any(
            (o["throughput"] >= t and latency_value(o, constraints) <= lat)
            and (o["throughput"] > t or latency_value(o, constraints) < lat)
            for o in pts
        )
        if not dominated:
            front.append(r["trial"])
    return sorted(front)


def pessimistic_score(row: Mapping[str, Any], *, objective: str, latency_percentile: str = "p99") -> float:
    """Sort key, lower is better: the worse end of what was measured.

    Throughput ranks by the lower bound of its 95% CI, so a noisy number (wide CI, typically a
    candidate without a steady state) cannot win by luck, while a clearly faster one still
    wins even if the detector never declared steady state (the report flags it). Latency ranks
    by the constrained percentile, itself already a tail statistic.
    """
    if objective == "latency":
        return float((row.get("latency_ms") or {}).get(latency_percentile, math.inf))
    ci = row.get("throughput_ci")
    low = ci[0] if ci and ci[0] is not None and math.isfinite(ci[0]) else row.get("throughput")
    return -float(low) if low is not None else math.inf


def best_row(
    rows: Sequence[Mapping[str, Any]], *, objective: str, constraints: Constraints
) -> Mapping[str, Any] | None:
    """The recommendation: the feasible ok row with the best :func:`pessimistic_score`.

    For ``pareto`` the recommendation is the highest-throughput point (by the same pessimistic
    rule) and the front itself is reported; for ``latency`` the lowest constrained percentile.
    """
    ok = [r for r in rows if r["status"] == "ok" and r["feasible"]]
    if not ok:
        return None
    return min(ok, key=lambda r: pessimistic_score(r, objective=objective,
                                                   latency_percentile=constraints.latency_percentile))


#: Fields that describe a measurement, cleared when a row is derived for a combination not run.
_MEASURED_FIELDS = (
    "throughput", "throughput_ci", "latency_ms", "latency_source", "peak_memory_bytes", "compile_seconds",
    "warmup_iterations", "classification", "relative_ci_half_width", "stopped_by", "recompiles", "correctness",
    "trace_ms", "foreign_cores", "measurement",
)


def skipped_record(template: Mapping[str, Any], *, trial: int, batch_size: int, status: str, reason: str
                   ) -> dict[str, Any]:
    """A row for a combination decided without running it (same variant fields as ``template``).

    A plain dict like :func:`candidate_record`'s: ``template`` is a row read back from the study.
    """
    row = dict(template)
    row.update({k: None for k in _MEASURED_FIELDS})
    row.update(trial=trial, batch_size=batch_size, status=status, reason=reason, feasible=False, violations=[],
               samples=0)
    row.pop("repeat_of_trial", None)
    for key in ("traffic", "accuracy", "model_bytes", "batch_specific"):
        row.pop(key, None)  # measured, like the fields above, but absent (not None) when not measured
    return row
