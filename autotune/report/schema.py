"""Report schema 2 (and 1, which it extends): its constants and the validation of a document against it.

Schema 2 adds one field, a candidate's ``measurement`` (:class:`autotune.core.measurement.MeasurementRecord`:
the raw samples and their warmup analysis), and makes it the source of the candidate's statistics. A
schema 1 document is a schema 2 document without it, so both are read; only 2 is written.

Validation is data-driven: every section is a ``Checker`` built from small combinators, so an
error can name the exact field (``report.candidates[3].latency_ms.p99``) and the expected kind.
The value predicates (``is_number``, ``is_int``) live here because the schema defines what a
number is: a bool is not one, although Python says it is an int.

Longer than most modules (~600 lines): it is one field table per section of the document, which reads best
side by side (and ``tests/test_report_types.py`` pairs each with its TypedDict).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeGuard

from autotune.core.measurement import STOPPED_BY, decode_seconds
from autotune.core.vocab import (
    ARRIVALS,
    DATA_SOURCES,
    MODES,
    OBJECTIVES,
    PERCENTILES,
    SERVING_KNOBS,
    SERVING_PERCENTILES,
    SERVING_ROLES,
    SERVING_STATUSES,
    SHAPE_POLICIES,
    STATUSES,
)
from autotune.core.warmup import CLASSIFICATIONS
from autotune.errors import InputError

#: The version written; :data:`READ_VERSIONS` are the ones read (older reports stay readable).
SCHEMA_VERSION: Final = 2
READ_VERSIONS = (1, 2)
REPORT_FILES = ("report.json", "report.md", "report.html")
#: The phases a run's document may say it was written in (``done``: complete); see ``report.assemble.RunDocument``.
RUN_PHASES = ("boundaries", "search", "showdown", "artifact", "serving", "done")

Checker = Callable[[Any, str], None]


def show(value: Any) -> str:
    """A value as an error message quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(predicate: Callable[[Any], bool], description: str) -> Checker:
    def check(value: Any, path: str) -> None:
        if not predicate(value):
            raise InputError(f"{path}: expected {description}, got {show(value)}")

    return check


_STR = _kind(lambda v: isinstance(v, str), "a string")
_BOOL = _kind(lambda v: isinstance(v, bool), "true or false")
_INT = _kind(is_int, "an integer")
_POSITIVE_INT = _kind(lambda v: is_int(v) and v >= 1, "a positive integer")
_NUMBER = _kind(is_number, "a number")
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
            raise InputError(f"{path}: expected a list, got {show(value)}")
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


_LATENCY = _record({name: (_nullable(_NUMBER), False) for name in PERCENTILES})
_NUMBER_OR_TEXT = _kind(lambda v: is_number(v) or v in ("inf", "-inf", "nan"), "a number or 'inf'/'nan'")
_CORRECTNESS = _record(  # errors of a gate that compared nothing (a structure mismatch, a NaN reference): 'inf'
    {
        "passed": (_nullable(_BOOL), False),
        "max_abs_error": (_nullable(_NUMBER_OR_TEXT), False),
        "max_rel_error": (_nullable(_NUMBER_OR_TEXT), False),
        "min_cosine": (_nullable(_NUMBER_OR_TEXT), False),
        "batches": (_nullable(_INT), False),
        "reason": (_nullable(_STR), False),
    }
)
_NN_INT = _nullable(_INT)
_NN_NUMBER = _nullable(_NUMBER)
#: A candidate measured on ``[data]`` traffic (optional within schema 1): per input shape after its shape policy.
TRAFFIC_BUCKET_FIELDS: dict[str, tuple[Checker, bool]] = {
    "shape": (_STR, True),
    "calls": (_NN_INT, False),
    "samples": (_NN_INT, False),
    "throughput": (_nullable(_NUMBER), False),
    "p50_ms": (_nullable(_NUMBER), False),
    "p99_ms": (_nullable(_NUMBER), False),
}
TRAFFIC_FIELDS: dict[str, tuple[Checker, bool]] = {
    "batches": (_NN_INT, False),
    "samples_per_call": (_nullable(_NUMBER), False),
    "shape_policy": (_nullable(_one_of(SHAPE_POLICIES)), False),
    "recompiles": (_NN_INT, False),
    "buckets": (_nullable(_list_of(_record(TRAFFIC_BUCKET_FIELDS))), False),
    "dynamic_dims": (_nullable(_list_of(_STR)), False),
    "first_pass_seconds": (_nullable(_NUMBER), False),
}


def _encoded_seconds(value: Any, path: str) -> None:
    """EncodedSeconds whose data decodes to ``count`` finite values (a corrupt one is named on load)."""
    try:
        decode_seconds(value)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


_ANALYSIS = _record(
    {
        "classification": (_one_of(CLASSIFICATIONS), True),
        # >= 0: a negative start indexed the trace from its end and moved compare's ratio (issue 32)
        "steady_start": (_nullable(_kind(lambda v: is_int(v) and v >= 0, "an integer >= 0")), True),
        "steady_mean": (_nullable(_NUMBER), False),
        "steady_median": (_nullable(_NUMBER), False),
        "ci": (_nullable(_list_of(_NUMBER, length=2)), False),
        "changepoints": (_list_of(_INT), False),
        "outliers": (_list_of(_INT), False),
        "one_off": (_list_of(_INT), False),
        "n": (_INT, True),
        "levels": (_list_of(_NUMBER), False),
        "share_high": (_nullable(_NUMBER), False),
        "wander": (_nullable(_NUMBER), False),
        "median_ci": (_nullable(_list_of(_NUMBER, length=2)), False),
    }
)
#: A candidate's measurement record (schema 2): ``autotune.core.measurement.MeasurementRecord``.
MEASUREMENT_FIELDS: dict[str, tuple[Checker, bool]] = {
    "batch_size": (_POSITIVE_INT, True),
    "mode": (_one_of(MODES), True),
    "iterations_per_sample": (_POSITIVE_INT, True),
    "first_call_seconds": (_NUMBER, True),
    "stopped_by": (_one_of(STOPPED_BY), True),
    "analysis": (_ANALYSIS, True),
    "samples": (_encoded_seconds, True),
    "latency_samples": (_encoded_seconds, True),
    "extra": (_ANY_MAPPING, False),
}
#: The recommendation's standing in the showdown (``autotune.showdown.paired.recommendation``).
_STANDING_OF_PICK = _record({
    "ratio_to_leader": (_NUMBER, True),
    "ratio_ci": (_list_of(_NUMBER, length=2), True),
    "rounds": (_INT, True),
    "margin": (_NUMBER, True),
    "tie": (_nullable(_BOOL), False),
    "tied_with": (_nullable(_list_of(_STR)), False),
    "leader": (_nullable(_STR), False),
    "round_spread": (_NN_NUMBER, False),
    "screen_throughput": (_NN_NUMBER, False),
})
#: A number, or "inf"/"nan" as text (JSON has neither): a drop of a variant whose outputs had no finite score.
#: A candidate's accuracy against eager fp32 (``autotune.worker.accuracy.AccuracyResult.to_dict``; optional within
#: schema 2): the kind of budget, its verdict, the value, eager fp32's, the drop and the budget.
def _ordered_pair(value: Any, path: str) -> None:
    """``[low, high]``: two numbers, low <= high (a drop's interval: negative where the variant scored higher)."""
    _list_of(_NUMBER, length=2)(value, path)
    if value[0] > value[1]:
        raise InputError(f"{path}: expected [low, high] with low <= high, got {show(list(value))}")


ACCURACY_FIELDS: dict[str, tuple[Checker, bool]] = {
    "kind": (_one_of(("metric", "agreement", "closeness")), True),
    "passed": (_BOOL, True),
    "gating": (_nullable(_BOOL), False),
    "metric": (_nullable(_STR), False),
    "value": (_nullable(_NUMBER_OR_TEXT), False),
    "reference": (_nullable(_NUMBER_OR_TEXT), False),
    "drop": (_nullable(_NUMBER_OR_TEXT), False),
    "max_drop": (_nullable(_NUMBER), False),
    "relative": (_nullable(_BOOL), False),
    "budget": (_nullable(_STR), False),
    "batches": (_NN_INT, False),
    "samples": (_NN_INT, False),
    "data": (_nullable(_one_of(("factory", "random"))), False),
    "rel_error": (_nullable(_NUMBER_OR_TEXT), False),
    "cosine": (_nullable(_NUMBER_OR_TEXT), False),
    "max_abs_error": (_nullable(_NUMBER_OR_TEXT), False),
    "reason": (_nullable(_STR), False),
    "verdict": (_nullable(_one_of(("within", "exceeds", "undecided"))), False),
    "drop_interval": (_nullable(_ordered_pair), False),
    "needed": (_nullable(_kind(lambda v: is_int(v) and v >= 1, "a positive integer")), False),
    "needed_unit": (_nullable(_one_of(("predictions", "batches"))), False),
    "uncertainty": (_nullable(_STR), False),
}
CANDIDATE_FIELDS: dict[str, tuple[Checker, bool]] = {
    "trial": (_nullable(_INT), False),
    "showdown": (_nullable(_STANDING_OF_PICK), False),
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
    "latency_source": (_nullable(_one_of(("per_call", "block_means"))), False),
    "decided_by": (_nullable(_one_of(("showdown", "search"))), False),
    "throughput_source": (_nullable(_one_of(("showdown", "artifact"))), False),
    "measured_throughput": (_nullable(_NUMBER), False),  # the run's own figure, when the headline is the artifact's
    "measured_throughput_ci": (_nullable(_list_of(_nullable(_NUMBER), length=2)), False),
    "measured_throughput_source": (_nullable(_one_of(("showdown", "search"))), False),
    "measured_latency_ms": (_nullable(_LATENCY), False),
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
    "traffic": (_nullable(_record(TRAFFIC_FIELDS)), False),
    "model_bytes": (_nullable(_NUMBER), False),  # the model's size as the variant stores it
    "batch_specific": (_nullable(_BOOL), False),  # failed above batch 1 only; batch 1 still tried
    "accuracy": (_nullable(_record(ACCURACY_FIELDS)), False),  # lower precision: the accuracy budget
    "measurement": (_nullable(_record(MEASUREMENT_FIELDS)), False),  # schema 2
}
_CANDIDATE_RECORD = _record(CANDIDATE_FIELDS)


def _candidate(value: Any, path: str) -> None:
    """A candidate row; an ok one has a positive finite throughput, and a CI is [low, high] with 0 <= low <= high
    (whether it holds the throughput is not checked: the writer validates with the same schema, and a run must
    not fail over a CI computed another way than its value, as a no-steady-state mean's). Why: an ok row with
    throughput 0 or -5 dropped out of `compare` as "measured in A only" and the gate passed on a corrupt report
    (issue 32)."""
    _CANDIDATE_RECORD(value, path)
    tput = value.get("throughput")
    if value["status"] == "ok" and not (is_number(tput) and math.isfinite(tput) and tput > 0):
        raise InputError(f"{path}.throughput: a candidate with status ok needs a positive number, got {show(tput)}")
    ci = value.get("throughput_ci")
    if ci is not None and is_number(ci[0]) and is_number(ci[1]):
        lo, hi = float(ci[0]), float(ci[1])
        if not (0 <= lo <= hi):
            raise InputError(f"{path}.throughput_ci: expected [low, high] with 0 <= low <= high, got {show(ci)}")


PROBE_FIELDS: dict[str, tuple[Checker, bool]] = {
    "batch_size": (_POSITIVE_INT, True),
    "fits": (_BOOL, True),
    "peak_memory_bytes": (_nullable(_NUMBER), False),
    "seconds": (_nullable(_NUMBER), False),
    "error": (_nullable(_STR), False),
    "step_seconds": (_nullable(_NUMBER), False),
}
_PROBE = _record(PROBE_FIELDS)
BOUNDARY_FIELDS: dict[str, tuple[Checker, bool]] = {
    "max_batch_size": (_nullable(_INT), False),
    "usable_max_batch_size": (_nullable(_INT), False),
    "headroom": (_nullable(_NUMBER), False),
    "memory_limit_bytes": (_nullable(_NUMBER), False),
    "memory_measured_by": (_nullable(_STR), False),
    "footprint": (_nullable(_STR), False),
    "granularity_source": (_nullable(_STR), False),
    "limit_source": (_nullable(_STR), False),
    "probes": (_list_of(_PROBE), False),
    "model": (
        _nullable(_record({"intercept_bytes": (_NUMBER, True), "bytes_per_sample": (_NUMBER, True)})),
        False,
    ),
    "stopped_by": (_nullable(_STR), False),
    "summary": (_nullable(_STR), False),
    "predicted_limit": (_nullable(_record({"low": (_NUMBER, True), "center": (_NUMBER, True)})), False),
    "crashed_at": (_list_of(_INT), False),
}
_BOUNDARY = _record(BOUNDARY_FIELDS)
RECIPE_FIELDS: dict[str, tuple[Checker, bool]] = {
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
                    "latency_percentile": (_nullable(_one_of(PERCENTILES)), False),
                    "max_memory_bytes": (_nullable(_NUMBER), False),
                }
            )
        ),
        False,
    ),
    "time_budget_s": (_nullable(_NUMBER), False),
}
_RECIPE = _record(RECIPE_FIELDS)
SEARCH_FIELDS: dict[str, tuple[Checker, bool]] = {
    "trials": (_nullable(_INT), False),
    "wall_seconds": (_nullable(_NUMBER), False),
    "sampler": (_nullable(_STR), False),
    "objective": (_nullable(_one_of(OBJECTIVES)), False),
    "study_name": (_nullable(_STR), False),
    "storage": (_nullable(_STR), False),
    "stopped_by": (_nullable(_STR), False),
    "measurements_stopped_by": (_nullable(_dict_of(_INT)), False),
    "space": (_nullable(_INT), False),
    "untried": (_nullable(_list_of(_STR)), False),
}
_SEARCH = _record(SEARCH_FIELDS)
#: The deployable artifact's kinds (``autotune.worker.artifact.KINDS``' values) and the sections' statuses.
ARTIFACT_KINDS = ("torchscript", "aoti", "onnx", "openvino", "code")
SECTION_STATUSES = ("ok", "failed")
ARTIFACT_FIELDS: dict[str, tuple[Checker, bool]] = {
    "status": (_one_of(SECTION_STATUSES), True),
    "reason": (_nullable(_STR), False),
    "variant": (_nullable(_STR), False),
    "batch_size": (_nullable(_POSITIVE_INT), False),
    "kind": (_nullable(_one_of(ARTIFACT_KINDS)), False),
    "format": (_nullable(_STR), False),
    "dir": (_nullable(_STR), False),
    "loader": (_nullable(_STR), False),
    "loader_code": (_nullable(_STR), False),
    "files": (_nullable(_list_of(_record({"name": (_STR, True), "bytes": (_INT, True)}))), False),
    "size_bytes": (_NN_NUMBER, False),
    "build_seconds": (_NN_NUMBER, False),
    "save_seconds": (_NN_NUMBER, False),
    "wall_seconds": (_NN_NUMBER, False),
    "threads": (_nullable(_POSITIVE_INT), False),
    "runtime": (_nullable(_ANY_MAPPING), False),
    "interface": (_nullable(_ANY_MAPPING), False),
    "notes": (_nullable(_list_of(_STR)), False),
    "environment": (_nullable(_ANY_MAPPING), False),
    "reused": (_nullable(_BOOL), False),  # the last run's on this --out (deployment.reusable_deployment)
}
_ARTIFACT = _record(ARTIFACT_FIELDS)
#: The artifact timed as shipped (``autotune.artifact_check.check_artifact``).
ARTIFACT_CHECK_FIELDS: dict[str, tuple[Checker, bool]] = {
    "status": (_one_of(("ok", "failed", "skipped")), True),
    "reason": (_nullable(_STR), False),
    "rounds": (_POSITIVE_INT, True),
    "seconds": (_kind(lambda v: is_number(v) and v > 0, "a positive number"), False),
    "tolerance": (_NN_NUMBER, False),
    "method": (_nullable(_STR), False),
    "throughputs": (_nullable(_list_of(_kind(lambda v: is_number(v) and v > 0, "a positive number"))), False),
    "throughput": (_nullable(_kind(lambda v: is_number(v) and v > 0, "a positive number")), False),
    "ci": (_nullable(_list_of(_NUMBER, length=2)), False),
    "p50_ms": (_NN_NUMBER, False),
    "p99_ms": (_NN_NUMBER, False),
    "calls": (_NN_INT, False),
    "reported": (_NN_NUMBER, False),
    "ratio": (_NN_NUMBER, False),
    "verdict": (_nullable(_one_of(("agrees", "slower", "faster", "undecided"))), False),
    "tool_throughputs": (_nullable(_list_of(_kind(lambda v: is_number(v) and v > 0, "a positive number"))), False),
    "paired_ratio": (_NN_NUMBER, False),
    "paired_ci": (_nullable(_list_of(_NUMBER, length=2)), False),
    "tool_note": (_nullable(_STR), False),
    "reused": (_nullable(_BOOL), False),
    "wall_seconds": (_NN_NUMBER, False),
    # fewer rounds than asked for, or none (status skipped): the time budget (autotune.core.budget)
    "rounds_requested": (_nullable(_POSITIVE_INT), False),
    "budget_note": (_nullable(_STR), False),
    # per round: another process used CPU while one side was timed (autotune.core.contention); the headline is then
    # the median of the "compared" undisturbed rounds (autotune.artifact_check.compared_rounds)
    "disturbed": (_nullable(_list_of(_BOOL)), False),
    "compared": (_nullable(_NN_INT), False),
    "foreign_cores": (_nullable(_list_of(_nullable(_NN_NUMBER))), False),
    "consumers": (_nullable(_list_of(_record({"name": (_STR, True), "pid": (_NN_INT, False),
                                              "round": (_NN_INT, False), "side": (_STR, False),
                                              "cores": (_NN_NUMBER, False)}))), False),
}
_PROFILE_ROW = _record(
    {
        "name": (_STR, True),
        "calls": (_NN_NUMBER, False),
        "self_cpu_ms": (_NN_NUMBER, False),
        "self_device_ms": (_NN_NUMBER, False),
    }
)
_PROFILE_TABLE = _record(
    {
        "role": (_STR, True),
        "variant": (_STR, True),
        "source": (_nullable(_STR), False),
        "iterations": (_nullable(_POSITIVE_INT), False),
        "total_self_cpu_ms": (_NN_NUMBER, False),
        "total_self_device_ms": (_NN_NUMBER, False),
        "rows": (_list_of(_PROFILE_ROW), True),
        "note": (_nullable(_STR), False),
    }
)
PROFILE_FIELDS: dict[str, tuple[Checker, bool]] = {
    "status": (_one_of(SECTION_STATUSES), True),
    "reason": (_nullable(_STR), False),
    "batch_size": (_nullable(_POSITIVE_INT), False),
    "tables": (_list_of(_PROFILE_TABLE), False),
}
_PROFILE = _record(PROFILE_FIELDS)
#: The traffic the candidates were measured on (optional within schema 1): its source and the shapes it had.
DATA_SHAPE_FIELDS: dict[str, tuple[Checker, bool]] = {"shape": (_STR, True), "batches": (_NN_INT, False)}
DATA_FIELDS: dict[str, tuple[Checker, bool]] = {
    "source": (_one_of(DATA_SOURCES), True),
    "factory": (_nullable(_STR), False),
    "kwargs": (_nullable(_ANY_MAPPING), False),
    "batches": (_NN_INT, False),
    "keyword_inputs": (_nullable(_list_of(_STR)), False),
    "dynamic_dims": (_nullable(_list_of(_STR)), False),
    "shapes": (_nullable(_list_of(_record(DATA_SHAPE_FIELDS))), False),
    "buckets": (_nullable(_list_of(_POSITIVE_INT)), False),
    "samples": (_NN_INT, False),
    "form": (_nullable(_STR), False),
    "inputs": (_nullable(_list_of(_STR)), False),
    "dtypes": (_nullable(_list_of(_STR)), False),
}
#: The serving stage (optional within schema 2; recipe ``[serving]``): numbers that cannot be negative, intervals
#: whose low end is not above the high one.
_NON_NEGATIVE = _kind(lambda v: is_number(v) and v >= 0, "a number >= 0")
_NON_NEGATIVE_INT = _kind(lambda v: is_int(v) and v >= 0, "an integer >= 0")
_POSITIVE = _kind(lambda v: is_number(v) and v > 0, "a positive number")
_FRACTION = _kind(lambda v: is_number(v) and 0 < v <= 1, "a fraction in (0, 1]")
_REQUEST_SAMPLES = _kind(lambda v: (is_int(v) and v >= 1) or v == "batch", "a positive integer or 'batch'")


def _interval(value: Any, path: str) -> None:
    """``[low, high]``: two numbers >= 0, low <= high (a confidence interval of a rate or a latency)."""
    _list_of(_NON_NEGATIVE, length=2)(value, path)
    if value[0] > value[1]:
        raise InputError(f"{path}: expected [low, high] with low <= high, got {show(list(value))}")


_COUNTS: dict[str, tuple[Checker, bool]] = {name: (_NON_NEGATIVE_INT, False)
                                             for name in ("sent", "ok", "failed", "timed_out", "dropped")}
#: The server's own account of a load point (its /stats): the calls, their mean rows, the median call.
_SERVED_CALLS: dict[str, tuple[Checker, bool]] = {
    "calls": (_nullable(_NON_NEGATIVE_INT), False),
    "rows_per_call": (_nullable(_NON_NEGATIVE), False),
    "call_p50_ms": (_nullable(_NON_NEGATIVE), False),
}
SERVING_POINT_FIELDS: dict[str, tuple[Checker, bool]] = {
    "rate": (_NON_NEGATIVE, True),
    "p50_ms": (_nullable(_NON_NEGATIVE), False),
    "p99_ms": (_nullable(_NON_NEGATIVE), False),
    "p99_ci_ms": (_nullable(_interval), False),
    **_COUNTS,
    "achieved_rate": (_nullable(_NON_NEGATIVE), False),
    "passed": (_nullable(_BOOL), False),
    "kept": (_nullable(_NON_NEGATIVE_INT), False),
    **_SERVED_CALLS,
}
SERVING_FRACTION_FIELDS: dict[str, tuple[Checker, bool]] = {
    "fraction": (_FRACTION, True),
    "rate": (_NON_NEGATIVE, True),
    "p50_ms": (_nullable(_NON_NEGATIVE), False),
    "p90_ms": (_nullable(_NON_NEGATIVE), False),
    "p99_ms": (_nullable(_NON_NEGATIVE), False),
    "p99_ci_ms": (_nullable(_interval), False),
    **_COUNTS,
    "achieved_rate": (_nullable(_NON_NEGATIVE), False),
    **_SERVED_CALLS,
}
_KNOBS: dict[str, tuple[Checker, bool]] = {
    "variant": (_STR, True),
    "environment": (_nullable(_STR), False),
    "instances": (_POSITIVE_INT, True),
    "threads": (_POSITIVE_INT, True),
    "max_batch": (_POSITIVE_INT, True),
    "max_delay_ms": (_NON_NEGATIVE, True),
}
SERVING_CONFIG_FIELDS: dict[str, tuple[Checker, bool]] = {
    **_KNOBS,
    "predicted_max_rate": (_nullable(_NON_NEGATIVE), False),
    "max_rate": (_nullable(_NON_NEGATIVE), False),
    "max_rate_ci": (_nullable(_interval), False),
    "role": (_one_of(SERVING_ROLES), True),
    "pruned_reason": (_nullable(_STR), False),
    "held": (_nullable(_BOOL), False),
    "bisected_max_rate": (_nullable(_NON_NEGATIVE), False),
    "points": (_nullable(_list_of(_record(SERVING_POINT_FIELDS))), False),
}
_SERVING_CONFIG = _record(SERVING_CONFIG_FIELDS)
SERVING_RECOMMENDATION_FIELDS: dict[str, tuple[Checker, bool]] = {
    **_KNOBS,
    "max_rate": (_NON_NEGATIVE, True),
    "max_rate_ci": (_nullable(_interval), False),
    "p50_ms": (_nullable(_NON_NEGATIVE), False),
    "p99_ms": (_nullable(_NON_NEGATIVE), False),
    "p99_ci_ms": (_nullable(_interval), False),
    "goodput": (_nullable(_NON_NEGATIVE), False),
    "floor": (_nullable(_BOOL), False),
    "bound_requests": (_nullable(_NON_NEGATIVE_INT), False),
}
SERVING_KNOB_FIELDS: dict[str, tuple[Checker, bool]] = {
    "knob": (_one_of(SERVING_KNOBS), True),
    "text": (_STR, True),
    "ratio": (_nullable(_NON_NEGATIVE), False),
}
SERVING_BASELINE_FIELDS: dict[str, tuple[Checker, bool]] = {
    "naive": (_nullable(_SERVING_CONFIG), False),
    "batch_loop": (_nullable(_SERVING_CONFIG), False),
}
SERVING_CALLS_FIELDS: dict[str, tuple[Checker, bool]] = {
    "calibration_s": (_nullable(_NON_NEGATIVE), False),
    "load_s": (_nullable(_NON_NEGATIVE), False),
    "hold_s": (_nullable(_NON_NEGATIVE), False),
    "baseline_hold_s": (_nullable(_NON_NEGATIVE), False),
    "curve_s": (_nullable(_NON_NEGATIVE), False),
    "warm_s": (_nullable(_NON_NEGATIVE), False),
}
SERVING_SERVER_FIELDS: dict[str, tuple[Checker, bool]] = {"stack": (_STR, False), "command": (_STR, False)}
SERVING_FIELDS: dict[str, tuple[Checker, bool]] = {
    "status": (_one_of(SERVING_STATUSES), True),
    "reason": (_nullable(_STR), False),
    "slo_ms": (_POSITIVE, False),
    "percentile": (_one_of(SERVING_PERCENTILES), False),
    "model_name": (_STR, False),
    "arrivals": (_one_of(ARRIVALS), False),
    "request_samples": (_REQUEST_SAMPLES, False),
    "rate_target": (_nullable(_POSITIVE), False),
    "cores": (_POSITIVE_INT, False),
    "device": (_STR, False),
    "recommendation": (_nullable(_record(SERVING_RECOMMENDATION_FIELDS)), False),
    "at_fraction": (_nullable(_list_of(_record(SERVING_FRACTION_FIELDS))), False),
    "configs": (_nullable(_list_of(_SERVING_CONFIG)), False),
    "baselines": (_nullable(_record(SERVING_BASELINE_FIELDS)), False),
    "knobs": (_nullable(_list_of(_record(SERVING_KNOB_FIELDS))), False),
    "seconds": (_nullable(_NON_NEGATIVE), False),
    "share_of_run": (_nullable(_NON_NEGATIVE), False),
    "hold_discount": (_nullable(_NON_NEGATIVE), False),
    "calls": (_nullable(_record(SERVING_CALLS_FIELDS)), False),
    "server": (_nullable(_record(SERVING_SERVER_FIELDS)), False),
    "files": (_nullable(_list_of(_STR)), False),
    "interrupted": (_nullable(_BOOL), False),
}
_SERVING_RECORD = _record(SERVING_FIELDS)


def _serving(value: Any, path: str) -> None:
    """The serving section: its records (each interval ``[low, high]`` with low <= high, no negative rate or
    count), and a stage that ran (``ok``) says under which SLO."""
    _SERVING_RECORD(value, path)
    if value["status"] == "ok" and not is_number(value.get("slo_ms")):
        raise InputError(f"{path}.slo_ms: a serving section with status ok needs its SLO, got "
                         f"{show(value.get('slo_ms'))}")


_STANDING = _record({
    "key": (_STR, True),
    "ratio": (_NUMBER, True),
    "ratio_ci": (_list_of(_NUMBER, length=2), True),
    "tied": (_BOOL, True),
    "round_spread": (_NUMBER, True),
    "round_perf": (_nullable(_list_of(_NUMBER)), False),
})
_VERDICT_FIELDS = _record({
    "leader": (_STR, True),
    "pick": (_STR, True),
    "tie": (_BOOL, True),
    "margin": (_NUMBER, True),
    "rounds": (_INT, True),
    "tie_break": (_nullable(_STR), False),
    "standings": (_list_of(_STANDING), True),
})


def _verdict(value: Any, path: str) -> None:
    """The showdown's verdict (``autotune.showdown.paired.Verdict.to_dict``): its pick is one of its standings."""
    _VERDICT_FIELDS(value, path)
    if value["pick"] not in {s["key"] for s in value["standings"]}:
        raise InputError(f"{path}.pick: {show(value['pick'])} is not the key of one of the standings")


#: What the report reads of the showdown (``autotune.showdown.rounds``'s document); the rest is kept as it is.
_SHOWDOWN = _record({
    "verdict": (_nullable(_verdict), False),
    "round_seconds": (_NN_NUMBER, False),
    "rounds_run": (_NN_INT, False),
    "disturbed_rounds": (_nullable(_list_of(_INT)), False),
    "rounds_compared": (_nullable(_list_of(_INT)), False),
    "dropped": (_nullable(_dict_of(_STR)), False),
    "objective": (_nullable(_STR), False),
    "quiet": (_nullable(_BOOL), False),
    # read by `compare` (autotune.compare_rounds: the rounds by process) and the report's summary
    "processes": (_nullable(_POSITIVE_INT), False),
    "processes_used": (_nullable(_POSITIVE_INT), False),
    # measure.processes where the time left staged fewer (autotune.showdown.rounds.fitted)
    "processes_asked": (_nullable(_POSITIVE_INT), False),
    "round_process": (_nullable(_list_of(_NON_NEGATIVE_INT)), False),
    "seconds_per_call": (_nullable(_dict_of(_list_of(_nullable(_NUMBER)))), False),
    "burn_in_rounds": (_nullable(_NON_NEGATIVE_INT), False),
    # what ended the rounds (autotune.showdown.rounds): settled, the run's deadline, the round cap, finalists dropped
    "stopped_by": (_nullable(_one_of(("settled", "deadline", "round_cap", "dropped"))), False),
    "rounds": (_nullable(_NON_NEGATIVE_INT), False),
    # per finalist: timed from its saved artifact, or built from the recipe (autotune.showdown.rounds)
    "staged_from": (_nullable(_dict_of(_one_of(("artifact", "build")))), False),
    # the processes the workers saw using CPU in disturbed slices (autotune.showdown.rounds.disturbers)
    "disturbed_by": (_nullable(_list_of(_record({"name": (_STR, True), "pid": (_NON_NEGATIVE_INT, False),
                                                 "rounds": (_NON_NEGATIVE_INT, False),
                                                 "cores": (_NN_NUMBER, False)}))), False),
})
_BUDGET = _record({
    "time_budget_s": (_NN_NUMBER, True),
    "promise_s": (_NN_NUMBER, True),
    "artifact_reserve_s": (_NN_NUMBER, False),
    "phases": (_dict_of(_NN_NUMBER), True),
    "wall_seconds": (_NN_NUMBER, True),
    "within_promise": (_BOOL, False),
})
_SCHEMA = _kind(lambda v: is_int(v) and v in READ_VERSIONS, "schema version " + " or ".join(map(str, READ_VERSIONS)))
DOCUMENT_FIELDS: dict[str, tuple[Checker, bool]] = {
    "schema": (_SCHEMA, True),
    "tool": (_nullable(_ANY_MAPPING), False),
    "created": (_nullable(_STR), False),
    "recipe": (_RECIPE, True),
    "environment": (_ANY_MAPPING, True),
    "search": (_SEARCH, True),
    "batch_boundary": (_nullable(_dict_of(_BOUNDARY)), False),
    "candidates": (_list_of(_candidate), True),
    "recommendation": (_nullable(_candidate), True),
    "showdown": (_nullable(_SHOWDOWN), False),
    # optional additions within schema 1 (readers of schema 1 ignore unknown fields; older reports lack them)
    "artifact": (_nullable(_ARTIFACT), False),
    "artifact_check": (_nullable(_record(ARTIFACT_CHECK_FIELDS)), False),
    "profile": (_nullable(_PROFILE), False),
    "pareto": (_nullable(_list_of(_INT)), False),
    "notes": (_nullable(_list_of(_STR)), False),
    "data": (_nullable(_record(DATA_FIELDS)), False),
    "serving": (_nullable(_serving), False),  # the serving stage (recipe [serving])
    # a run's document as it goes (autotune.report.assemble.RunDocument); absent in older reports: complete
    "complete": (_nullable(_BOOL), False),
    "phase": (_nullable(_one_of(RUN_PHASES)), False),
    "interrupted": (_nullable(_BOOL), False),
    "budget": (_nullable(_BUDGET), False),  # the time budget's plan (autotune.core.budget); absent in older reports
}
_DOCUMENT = _record(DOCUMENT_FIELDS)


def validate_report(doc: Mapping[str, Any]) -> None:
    """Check a report document against its schema (1 or 2); raise ``InputError`` naming the first bad field.

    Field paths read like ``candidates[3].latency_ms.p99``. Unknown extra fields are accepted
    (forward compatibility within a schema version); an unknown ``schema`` is not, because
    its fields may mean something else.
    """
    if not isinstance(doc, Mapping):
        raise InputError(f"report: expected a JSON object, got {show(doc)}")
    if "schema" in doc and (not is_int(doc["schema"]) or doc["schema"] not in READ_VERSIONS):
        raise InputError(
            f"schema: this autotune reads report schema {' and '.join(map(str, READ_VERSIONS))}, the document "
            f"says {show(doc['schema'])}"
        )
    _DOCUMENT(doc, "report")

