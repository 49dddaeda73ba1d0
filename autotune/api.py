"""The Python API: tune, find a batch boundary, measure one configuration, analyse a warmup trace.

The CLI is one caller of these functions; a script or a notebook is another (see
``examples/tune_in_python.py``). Every function takes keyword arguments after the recipe and returns
frozen dataclasses; the JSON documents (report.json, the candidate rows) stay available on them for
whoever needs every field.

Why a recipe and not an ``nn.Module``: the model is built and run in worker processes (a crash, a
hang or the kernel's OOM killer must not take the caller down, and timing must happen in a process
with nothing else in it), so the model has to be something a fresh process can build again: a
factory reference, ``"package.module:function"`` or ``"path/file.py:function"``, or a top-level
function (turned into such a reference), with keyword arguments and the input shapes. Build one in
code with :func:`make_recipe`, or read a TOML file with :func:`load_recipe`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.events import Event, OnEvent, emit
from autotune.core.recipe import Recipe, load_recipe, parse_recipe
from autotune.errors import InputError

if TYPE_CHECKING:
    from autotune.core.measurement import Measurement


@dataclass(frozen=True)
class CandidateResult:
    """One measured configuration (a typed view of a candidate row; ``row`` holds every field).

    ``measurement`` is the measurement itself, with its raw samples (``steady_samples``,
    ``latency_samples``, the warmup ``analysis``), from which every number here was derived; None for a
    candidate that was not measured, or a report written before schema 2.
    """

    variant: str
    batch_size: int
    status: str  # ok | failed | rejected | oom | crashed | timeout | skipped
    reason: str | None
    throughput: float | None  # samples per second
    throughput_ci: tuple[float, float] | None
    latency_ms: Mapping[str, float]
    peak_memory_bytes: int | None
    compile_seconds: float | None
    feasible: bool
    row: Mapping[str, Any]
    measurement: Measurement | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CandidateResult:
        from autotune.core.measurement import Measurement

        ci = row.get("throughput_ci")
        record = row.get("measurement")
        return cls(
            variant=str(row["variant"]), batch_size=int(row["batch_size"]), status=str(row["status"]),
            reason=row.get("reason"), throughput=row.get("throughput"),
            throughput_ci=(float(ci[0]), float(ci[1])) if ci else None,
            latency_ms=dict(row.get("latency_ms") or {}), peak_memory_bytes=row.get("peak_memory_bytes"),
            compile_seconds=row.get("compile_seconds"), feasible=bool(row.get("feasible")), row=row,
            measurement=Measurement.from_dict(record) if isinstance(record, Mapping) else None,
        )


@dataclass(frozen=True)
class BoundaryResult:
    """The batch boundary of one variant (a typed view of its report document)."""

    variant: str
    max_batch_size: int
    usable_max_batch_size: int
    granularity: int
    memory_limit_bytes: int | None
    hit_upper_bound: bool
    document: Mapping[str, Any]
    #: what ended the search: memory (exact), upper_bound, or in a run throughput / probe_cap / time_cap
    stopped_by: str = "memory"

    @classmethod
    def from_document(cls, variant: str, doc: Mapping[str, Any]) -> BoundaryResult:
        return cls(variant=variant, max_batch_size=int(doc["max_batch_size"]),
                   usable_max_batch_size=int(doc["usable_max_batch_size"]), granularity=int(doc["granularity"]),
                   memory_limit_bytes=doc.get("memory_limit_bytes"), hit_upper_bound=bool(doc["hit_upper_bound"]),
                   document=doc, stopped_by=str(doc.get("stopped_by") or "memory"))


@dataclass(frozen=True)
class BatchBoundaries:
    """Every variant's boundary, and the variants whose search ended them (status, reason)."""

    boundaries: Mapping[str, BoundaryResult]
    failures: Mapping[str, tuple[str, str]]


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` found; ``report`` is the report.json document written into ``out_dir``."""

    recommendation: CandidateResult | None
    candidates: tuple[CandidateResult, ...]
    boundaries: Mapping[str, BoundaryResult]
    stopped_by: str
    out_dir: Path
    report: Mapping[str, Any]


def _as_recipe(recipe: Recipe | str | Path) -> Recipe:
    return recipe if isinstance(recipe, Recipe) else load_recipe(recipe)


def _with_device(recipe: Recipe, device: str | None) -> Recipe:
    if device is None:
        return recipe
    from autotune.core.device_names import ALLOWED_TEXT, is_device_name

    if not is_device_name(device):
        raise InputError(f"device: '{device}' is not allowed; allowed: {ALLOWED_TEXT}")
    return replace(recipe, device=device)


def factory_reference(factory: str | Callable[..., Any]) -> str:
    """``"module:function"`` for a top-level function (``"path/file.py:function"`` when it lives in a script)."""
    if isinstance(factory, str):
        return factory
    name = getattr(factory, "__qualname__", "")
    if not callable(factory) or not name or "." in name or "<" in name:
        raise InputError(f"model: {factory!r} is not a top-level function; a worker process must be able to "
                         "import it again (give 'package.module:function' or 'path/file.py:function')")
    module = getattr(factory, "__module__", None)
    if module and module != "__main__":
        return f"{module}:{name}"
    source = inspect.getsourcefile(factory)
    if source is None:
        raise InputError(f"model: {name} has no source file a worker could import (defined in a notebook cell?); "
                         "put it in a .py file and pass 'path/file.py:function'")
    return f"{Path(source).resolve()}:{name}"


def make_recipe(*, model: str | Callable[..., Any], inputs: Sequence[Mapping[str, Any]] = (), name: str = "recipe",
                kwargs: Mapping[str, Any] | None = None, device: str = "cpu", variants: Sequence[str] = ("eager",),
                batch_sizes: Sequence[int] | str = "auto", objective: str = "throughput",
                time_budget_s: float | None = None, batch: Mapping[str, Any] | None = None,
                measure: Mapping[str, Any] | None = None, constraints: Mapping[str, Any] | None = None,
                search: Mapping[str, Any] | None = None,
                data: Mapping[str, Any] | str | Callable[..., Any] | None = None,
                accuracy: Mapping[str, Any] | None = None) -> Recipe:
    """A recipe built in code, validated exactly as a TOML file is (the same errors, the same defaults).

    ``inputs``: one mapping per positional argument of ``forward``, as a recipe's ``[[inputs]]``
    (``name``, ``shape`` per sample, optional ``dtype`` and ``vocab_size``). ``batch``, ``measure``,
    ``constraints`` and ``search`` are the recipe tables of those names (extra search fields).
    ``data``: instead of ``inputs``, the user's own batches: a factory reference (``"data.py:batches"``, or a
    module-level function) or a recipe ``[data]`` table (``factory``, ``kwargs``, ``max_batches``, ``buckets``,
    ``pad_values``). Relative ``file.py`` factories are relative to the current directory.
    ``accuracy``: the recipe's ``[accuracy]`` table (``metric``: a reference or a top-level function,
    ``max_drop``: a number or ``"1%"``), the budget of lower-precision variants.
    """
    search_table: dict[str, Any] = {"variants": list(variants), "objective": objective,
                                    "batch_sizes": batch_sizes if isinstance(batch_sizes, str) else list(batch_sizes)}
    if time_budget_s is not None:
        search_table["time_budget_s"] = time_budget_s
    search_table.update(search or {})
    recipe_data: dict[str, Any] = {
        "name": name, "device": device,
        "model": {"factory": factory_reference(model), "kwargs": dict(kwargs or {})},
        "search": search_table,
    }
    if inputs or data is None:
        recipe_data["inputs"] = [dict(i) for i in inputs]
    if data is not None:
        data_table: dict[str, Any] = dict(data) if isinstance(data, Mapping) else {"factory": data}
        data_table["factory"] = factory_reference(data_table["factory"])
        recipe_data["data"] = data_table
    if accuracy is not None:
        accuracy_table = dict(accuracy)
        if "metric" in accuracy_table:
            accuracy_table["metric"] = factory_reference(accuracy_table["metric"])
        recipe_data["accuracy"] = accuracy_table
    for key, table in (("batch", batch), ("measure", measure), ("constraints", constraints)):
        if table:
            recipe_data[key] = dict(table)
    return parse_recipe(recipe_data, path=Path.cwd() / f"{name}.toml")


def tune(recipe: Recipe | str | Path, *, device: str | None = None, time_budget: float | None = None,
         out: str | Path | None = None, storage: str | None = None, study: str | None = None,
         seed: int | None = None, on_event: OnEvent | None = None,
         artifact_check_rounds: int | None = None) -> TuneResult:
    """Run the whole tuning (validate, batch boundaries, search, showdown) and write the reports into ``out``.

    ``storage``: an Optuna RDB URL (default ``sqlite:///OUT/study.db``); running again on the same ``out``
    resumes. ``on_event`` receives :class:`autotune.core.events.Event` values (None: silent).
    ``artifact_check_rounds``: plain processes that time the saved artifact as shipped (None: the default, 3 or
    ``AUTOTUNE_ARTIFACT_CHECK_ROUNDS``; 0: none; :mod:`autotune.artifact_check`).
    """
    from autotune.tuner import RunOptions, run_tuning, with_cli_overrides

    rec = with_cli_overrides(_with_device(_as_recipe(recipe), device), device=None, time_budget=time_budget,
                             seed=seed)
    out_dir = Path(out) if out is not None else Path("out") / rec.name
    doc = run_tuning(rec, RunOptions(out_dir=out_dir, storage=storage, study_name=study, on_event=on_event,
                                     artifact_check_rounds=artifact_check_rounds))
    rows = tuple(CandidateResult.from_row(r) for r in doc.get("candidates") or [])
    rec_row = doc.get("recommendation")
    best = None
    if isinstance(rec_row, Mapping):
        best = next((c for c in rows if c.variant == rec_row.get("variant")
                     and c.batch_size == rec_row.get("batch_size")), None)
    boundaries = {v: BoundaryResult.from_document(v, d) for v, d in (doc.get("batch_boundary") or {}).items()
                  if isinstance(d, Mapping) and d.get("max_batch_size") is not None}
    return TuneResult(recommendation=best, candidates=rows, boundaries=boundaries,
                      stopped_by=str(doc["search"]["stopped_by"]), out_dir=out_dir, report=doc)


def find_batch_boundary(recipe: Recipe | str | Path, *, variant: str | None = None, memory_budget: int | None = None,
                        device: str | None = None, on_event: OnEvent | None = None) -> BatchBoundaries:
    """The largest batch that fits, per variant (or just ``variant``), as a deployment process would see it.

    ``memory_budget`` (bytes) overrides the recipe's ``batch.memory_budget``. See
    :mod:`autotune.variant_boundaries` for the search and the fresh-process confirmation.
    """
    from autotune.runner import Runner
    from autotune.validation import validate
    from autotune.variant_boundaries import find_boundaries, probe_events

    rec = _with_device(_as_recipe(recipe), device)
    if memory_budget is not None:
        rec = replace(rec, batch=replace(rec.batch, memory_budget_bytes=int(memory_budget)))
    with Runner() as runner:
        workload = validate(runner, rec)
        if variant is not None:
            workload = replace(workload, variants=(resolve_variant(variant, workload),))
        outcome = find_boundaries(runner, rec, workload,
                                  on_variant=lambda v: emit(on_event, "boundary", f"probing {v}", variant=v),
                                  on_probe=probe_events(on_event))
    return BatchBoundaries(
        boundaries={v: BoundaryResult.from_document(v, d) for v, d in outcome.documents.items()},
        failures=dict(outcome.failures),
    )


def resolve_variant(name: str, workload: Any) -> str:
    """``name`` if the recipe has it on this device; else an :class:`InputError` that says why not."""
    from autotune.core.recipe import closest

    if name in workload.variants:
        return name
    known = list(workload.variants) + [u["variant"] for u in workload.unavailable]
    for u in workload.unavailable:
        if u["variant"] == name:
            raise InputError(f"variant: '{name}' is not available here: {u['reason']}")
    hint = closest(name, known)
    raise InputError(f"variant: '{name}' is not one of the recipe's variants ({', '.join(workload.variants)})"
                     + (f" (did you mean '{hint}'?)" if hint else ""))


#: Seconds a worker may take to parse and check a variant named by the caller (the model is built already).
PARSE_VARIANT_TIMEOUT = 120.0


def measure(recipe: Recipe | str | Path, *, variant: str, batch_size: int, device: str | None = None
            ) -> CandidateResult:
    """Build, gate and measure one configuration in a worker (any variant name, not only the recipe's)."""
    from autotune.candidate import candidate_row
    from autotune.client import WorkerClient
    from autotune.core.measure_settings import MeasureSettings
    from autotune.runner import Runner
    from autotune.validation import validate

    if batch_size < 1:
        raise InputError(f"batch_size: expected a positive integer, got {batch_size}")
    rec = _with_device(_as_recipe(recipe), device)
    with Runner(fresh_measure=True) as runner:  # timed in a fresh worker: validation leaves no allocator state
        workload = validate(runner, rec)
        client = WorkerClient(runner)
        if variant in workload.specs:
            spec = dict(workload.specs[variant])
        else:
            res = client.parse_variant(rec, variant, timeout=PARSE_VARIANT_TIMEOUT)
            if res["status"] != "ok":
                raise InputError(f"variant: {res['reason']}")
            spec = dict(res["spec"])
        outcome = client.measure(rec, variant, batch_size, MeasureSettings.from_recipe(rec),
                                 timeout=rec.measure.timeout_s)
    return CandidateResult.from_row(candidate_row(trial=0, variant=variant, spec=spec, batch_size=batch_size,
                                                  result=outcome, constraints=rec.constraints))


def analyze_warmup(values: Sequence[float], *, margin: float | None = None) -> Any:
    """Warmup / steady-state analysis of per-iteration timings (:class:`autotune.core.warmup.WarmupAnalysis`)."""
    from autotune.core.warmup import analyze

    return analyze(values) if margin is None else analyze(values, margin=margin)


__all__ = [
    "BatchBoundaries", "BoundaryResult", "CandidateResult", "Event", "TuneResult", "analyze_warmup",
    "factory_reference", "find_batch_boundary", "load_recipe", "make_recipe", "measure", "resolve_variant", "tune",
]
