"""The ops a worker serves (:data:`OPS`): validate a workload, measure a candidate, probe memory, stage and time
showdown slices. Each takes the :class:`~autotune.worker.state.WorkerState` and its request
(:mod:`autotune.core.protocol`) and returns its result.

Importing this module is the worker's start-up, and it is timed: ``_T0`` is taken before torch is
imported and the tool's own modules after it, so :data:`IMPORT_SECONDS` (reported by ``hello``) and
:data:`TOOL_IMPORT_BYTES` (taken off host-memory probes) cover them. Hence the imports after code
(``noqa: E402``); :mod:`autotune.worker.serve` imports this module before anything that imports torch.

Why one module (~420 lines): its import is the timed start-up, so every op's imports must follow the
torch import in one file; the ops share the guard, the seeds and the thread handling.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

_T0 = time.perf_counter()

import torch  # noqa: E402  (timed: the import is the dominant start-up cost)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


_RSS_AFTER_TORCH = _rss_bytes()

from autotune.core.contention import CpuWindow, process_ticks, top_consumers  # noqa: E402
from autotune.core.protocol import (  # noqa: E402
    ArtifactRequest,
    ArtifactResult,
    DeviceMemoryRequest,
    DeviceMemoryResult,
    GenerateOutcome,
    GenerateRequest,
    HelloRequest,
    HelloResult,
    MeasureOutcome,
    MeasureRequest,
    OpName,
    Outcome,
    ParseVariantRequest,
    ParseVariantResult,
    ProbeOutcome,
    ProbeRequest,
    Result,
    SliceOutcome,
    SliceRequest,
    StageOutcome,
    StageRequest,
    UnavailableVariant,
    ValidateRequest,
    ValidateResult,
)
from autotune.core.recipe import Recipe  # noqa: E402
from autotune.core.stats import percentiles  # noqa: E402
from autotune.errors import (  # noqa: E402
    AutotuneError,
    BatchSpecificError,
    InputError,
    UnsupportedSettingError,
    VariantError,
)
from autotune.worker import devices  # noqa: E402
from autotune.worker.accuracy import AccuracyResult, judge, judged_by_budget, run_outputs  # noqa: E402
from autotune.worker.correctness import check_variant  # noqa: E402
from autotune.worker.metric import check_metric, resolve_metric  # noqa: E402
from autotune.worker.model import make_inputs, one_line  # noqa: E402
from autotune.worker.model_size import model_bytes  # noqa: E402
from autotune.worker.state import LoadedWorkload, Staged, WorkerState, _trim_heap  # noqa: E402
from autotune.worker.timing import MeasureSettings, measure_callable, time_first_call, time_slice  # noqa: E402
from autotune.worker.torch_facts import torch_facts  # noqa: E402
from autotune.worker.traffic import (  # noqa: E402
    BucketPlan,
    Traffic,
    TrafficCall,
    adapt,
    bucket_plan,
    iterate_all,
    load_traffic,
    shape_text,
)
from autotune.worker.variants import (  # noqa: E402
    BuiltVariant,
    VariantSpec,
    available,
    build_variant,
    expand_variants,
    recompile_count,
    reset_compiler_state,
    thread_counts,
)
from autotune.worker.variants.quantize import calibration_for  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - _T0
#: Resident memory the tool's own modules added beyond torch (measured once at start-up): a
#: deployment process does not import them, so a host-memory probe takes it off its peak.
TOOL_IMPORT_BYTES = max(0, _rss_bytes() - _RSS_AFTER_TORCH)
#: Seeds: the variant is built on the example batch; the gate uses other, fresh batches.
BUILD_SEED = 0
GATE_SEED = 1000
#: Fresh batches the gate compares: a trace that froze a 50/50 data-dependent branch slips past
#: n batches with probability 2^-n (3 batches let it through at some batch sizes; 6: 1.6%).
GATE_BATCHES = 6


#: The outcome type of an op's body (a subtype of :class:`Outcome` with the op's own fields).
_O = TypeVar("_O", MeasureOutcome, StageOutcome, ProbeOutcome, GenerateOutcome)


def _guarded(backend: devices.DeviceBackend, body: Callable[[], _O]) -> _O | Outcome:
    """Run a candidate's work; map OOM and variant failures to statuses (one place, not many).

    The cache is emptied only after the ``except`` block has ended: until then the exception's
    traceback holds the failed call's frames, and with them its tensors.
    """
    try:
        return body()
    except VariantError as exc:
        failed = Outcome(status="failed", reason=str(exc))
        if isinstance(exc, BatchSpecificError):  # batch 1 may work: not pruned there
            failed["batch_specific"] = True
        if isinstance(exc, UnsupportedSettingError):  # the model lacks the setting: other settings may run
            failed["unsupported"] = True
        return failed
    except Exception as exc:
        kind = devices.oom_kind(exc)
        if kind is None:
            raise
        reason = devices.oom_reason(exc)
    backend.release_memory()  # the traceback is gone: the failed call's tensors can be freed now
    return Outcome(status="oom", reason=reason, dirty=True, oom_kind=kind)


def _with_threads(spec: VariantSpec, state: WorkerState) -> None:
    torch.set_num_threads(spec.threads or state.default_threads)


@dataclass
class _Candidate:
    """A variant built for a batch size's traffic: the call the timing loop makes, and what the gate needs."""

    traffic: Traffic
    model: torch.nn.Module  # the eager model as the builders saw it (keyword inputs adapted)
    built: BuiltVariant  # ``fn`` includes the bucket padding of a ``+buckets`` variant
    prepared: list[tuple[Any, ...]]
    call: Callable[[], Any]
    plan: BucketPlan | None = None


def _candidate_inputs(lw: LoadedWorkload, spec: VariantSpec, batch: int, *, model: torch.nn.Module | None = None
                      ) -> tuple[Traffic, torch.nn.Module, BucketPlan | None, tuple[torch.Tensor, ...]]:
    """The traffic of ``batch``, the eager model as the builders see it, the bucket plan of a ``+buckets``
    variant and the example it is built on (the largest batch, padded to its bucket): what the measurement
    and the deployed artifact are both built from."""
    traffic = load_traffic(lw.recipe, batch_size=batch, device=lw.device, seed=BUILD_SEED)
    eager = adapt(model if model is not None else lw.model, traffic.layout)
    if spec.buckets and not traffic.has_dynamic_dims:
        raise VariantError(f"{spec.name}: the traffic has no dynamic dimension to pad to buckets")
    plan = bucket_plan(eager, traffic) if spec.buckets else None
    example = plan.pad(traffic.example)[0] if plan is not None else traffic.example
    return traffic, eager, plan, example


def _build_candidate(lw: LoadedWorkload, spec: VariantSpec, batch: int, *, model: torch.nn.Module | None = None,
                     keep_artifact: bool = False) -> _Candidate:
    """Load the traffic of ``batch``, build ``spec`` on its largest batch, prepare every batch (untimed).

    The call cycles through the prepared batches (:class:`~autotune.worker.traffic.TrafficCall`); with one batch it
    is a plain closure, exactly what was timed before traffic existed. ``+buckets``: the build example is
    padded to its bucket, and ``fn`` pads every call's batch (timed: the padding is part of the strategy).
    """
    device = lw.device
    traffic, eager, plan, example = _candidate_inputs(lw, spec, batch, model=model)
    built = build_variant(spec, eager, example, device=str(device), keep_artifact=keep_artifact,
                          dynamic_dims=traffic.build_dims(), input_names=traffic.layout.names,
                          calibration=calibration_for(spec, lw.recipe, traffic, batch_size=batch, device=device))
    if plan is not None:
        built = dataclasses.replace(built, fn=plan.wrap(built.fn),
                                    notes=(*built.notes, f"inputs padded to buckets {list(plan.buckets)} "
                                           "(dynamic dims), outputs sliced back"))
    prepared = [built.prepare_inputs(b) for b in traffic.batches]
    fn = built.fn
    if len(prepared) == 1:
        only = prepared[0]

        def call() -> Any:
            return fn(*only)
    else:
        call = TrafficCall(fn, prepared)
    return _Candidate(traffic=traffic, model=eager, built=built, prepared=prepared, call=call, plan=plan)


def _traffic_extra(traffic: Traffic, plan: BucketPlan | None) -> dict[str, Any]:
    """What a measurement records about its traffic (:meth:`Measurement.bucket_stats` reads it): each batch's
    shape as the variant runs it (a ``+buckets`` variant's padded shape: its buckets are its shapes)."""
    if len(traffic.batches) == 1 and traffic.source == "inputs":
        return {}
    keys = [shape_text(traffic.layout, plan.pad(b)[0] if plan is not None else b) for b in traffic.batches]
    return {"samples_per_call": traffic.samples_per_call,
            "traffic_batches": [[k, r] for k, r in zip(keys, traffic.rows, strict=True)],
            "dynamic_dims": traffic.dynamic_dim_names()}


def op_hello(state: WorkerState, req: HelloRequest) -> HelloResult:
    return {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "import_seconds": IMPORT_SECONDS,
        "threads": state.default_threads,
    }


def op_validate(state: WorkerState, req: ValidateRequest) -> ValidateResult:
    """Build the model, run one forward, and expand the recipe's variants for this device; and say what torch
    knows about the machine (read first, before the model is built, for the report's ``environment``)."""
    t0 = time.perf_counter()
    facts = torch_facts()
    lw = state.workload(req["recipe"])
    recipe = lw.recipe
    if recipe.accuracy is not None and recipe.accuracy.metric:  # a broken metric is bad input, found before measuring
        traffic = load_traffic(recipe, batch_size=2, device=lw.device, seed=BUILD_SEED)
        check_metric(recipe, adapt(lw.model, traffic.layout), traffic)
    specs = expand_variants(
        recipe.search.variants,
        device=lw.device.type,
        precisions=recipe.search.precisions,
        memory_formats=recipe.search.memory_formats,
        threads=thread_counts(recipe.search.threads, device=lw.device.type),
        shapes=recipe.search.shapes,
        input_ndims=lw.info.input_ndims,
    )
    dynamic = bool((lw.info.data or {}).get("dynamic_dims"))
    variants: list[str] = []
    unavailable: list[UnavailableVariant] = []
    spec_dicts: dict[str, dict[str, Any]] = {}
    for spec in specs:
        spec_dicts[spec.name] = spec.to_dict()
        avail = available(spec, device=lw.device.type, input_ndims=lw.info.input_ndims,
                          input_is_float=lw.info.input_is_float)
        if spec.buckets and not dynamic:
            unavailable.append({"variant": spec.name, "reason": "no dynamic dimension in the data to pad to buckets "
                                "(every batch has the same shape apart from the batch size)"})
        elif avail.ok:
            variants.append(spec.name)
        else:
            unavailable.append({"variant": spec.name, "reason": avail.reason})
    method = lw.backend.memory_method()
    return {
        "device": str(lw.device),
        "workload": lw.info.to_dict(),
        "variants": variants,
        "unavailable": unavailable,
        "specs": spec_dicts,
        "memory_method": method.description,
        "host_memory_available": devices.available_host_memory_bytes(),
        "device_memory_capacity": lw.backend.total_memory_bytes(),
        "seconds": time.perf_counter() - t0,
        "torch_facts": facts,
    }


def op_measure(state: WorkerState, req: MeasureRequest) -> MeasureOutcome | Outcome:
    """Build a variant, time it, then gate it against eager fp32 (a rejected variant's timing is dropped).

    Why time first: the timing should see the process a deployment has, one that built the model and serves
    it. The gate (eager reference runs, float64 copies, every traffic shape) ran first until issue 23's check
    showed it leaking into the timing through glibc's heap. A wrong variant now costs its timing too.
    """
    lw = state.workload(req["recipe"])
    spec = VariantSpec.parse(req["variant"])
    batch = int(req["batch_size"])
    settings = MeasureSettings.from_dict(req["settings"])
    device, backend = lw.device, lw.backend

    def body() -> MeasureOutcome:
        _with_threads(spec, state)
        backend.release_memory()
        _trim_heap()
        backend.reset_peak_memory()
        with torch.inference_mode():
            cand = _build_candidate(lw, spec, batch)
            built, call, traffic = cand.built, cand.call, cand.traffic
            recompiles_before = recompile_count()
            try:
                # the first call of every shape: compiles / specialises, timed apart from the steady state
                first = time_first_call(call, device=device)
                first_pass = first
                if isinstance(call, TrafficCall):
                    first_pass = time_first_call(lambda: iterate_all(call), device=device)
            except Exception as exc:
                if devices.is_oom(exc):
                    raise
                raise VariantError(f"{spec.name}: first call failed: {one_line(exc)}") from None
            build_peak = backend.peak_memory_bytes()  # the build and the first call
            # timed before the gate: a deployment process builds, calls and serves; the gate's eager reference
            # runs and float64 copies left glibc's heap in a state no such process has (BERT-like model with
            # pinned malloc thresholds: 8% slower than a plain process when timed after the gate)
            backend.release_memory()
            _trim_heap()
            backend.reset_peak_memory()
            first_recompiles = recompile_count() - recompiles_before
            window = CpuWindow.start()
            m = measure_callable(call, batch_size=batch, device=device, settings=settings,
                                 first_call_seconds=first)
            load = window.stop()
            recompiles = recompile_count() - recompiles_before
            loop_peak = backend.peak_memory_bytes()
            gate_inputs, gate_count = _gate_inputs(lw, traffic, batch)
            size = model_bytes(built, cand.model)
            accuracy = _accuracy(lw, cand, gate_inputs, gate_count, spec.precision)
            correctness: dict[str, Any]
            if judged_by_budget(spec.precision):  # lower precision: the accuracy budget replaces the strict gate
                assert accuracy is not None
                correctness = accuracy.correctness()
                passed, why = accuracy.passed, accuracy.reason
            else:
                gate = check_variant(cand.model, built, gate_inputs, batches=gate_count)
                correctness, passed, why = gate.to_dict(), gate.passed, gate.reason
            if not passed:  # its timing is dropped: a wrong variant has no throughput
                rejected = MeasureOutcome(status="rejected", reason=why or "outputs differ from eager fp32",
                                          correctness=correctness, build_seconds=built.build_seconds,
                                          first_call_seconds=first, notes=list(built.notes), model_bytes=size)
                if accuracy is not None:
                    rejected["accuracy"] = accuracy.to_dict()
                return rejected
        extra = _traffic_extra(traffic, cand.plan)
        if extra:
            extra.update(first_pass_seconds=first_pass, warmup_recompiles=first_recompiles,
                         shape_policy="buckets" if spec.buckets else "dynamic")
            m = dataclasses.replace(m, extra={**m.extra, **extra})
        outcome = MeasureOutcome(
            status="ok", reason="",
            measurement=m.to_dict(),
            build_seconds=built.build_seconds,
            first_call_seconds=first,
            # over a traffic, every shape's first call compiles / specialises: it is part of the cost
            compile_seconds=built.build_seconds + first + (first_pass if isinstance(call, TrafficCall) else 0.0),
            peak_memory_bytes=max(build_peak, loop_peak),
            peak_memory_scope="build, first call and steady loop of the candidate (correctness gate excluded)",
            recompiles=recompiles,
            load=load.to_dict(),
            correctness=correctness,
            notes=list(built.notes),
            model_bytes=size,
        )
        if accuracy is not None:
            outcome["accuracy"] = accuracy.to_dict()
        return outcome

    try:
        return _guarded(backend, body)
    finally:
        torch.set_num_threads(state.default_threads)
        if spec.compiler in ("compile", "export"):
            reset_compiler_state()


def op_stage(state: WorkerState, req: StageRequest) -> StageOutcome | Outcome:
    """Build a showdown finalist (already gated in the search), make its first call, warm it up.

    Warmup runs for ``warmup_seconds`` and at least the screening's warmup iterations + 10, so
    every slice that follows times the steady state the search found.
    """
    spec = VariantSpec.parse(req["variant"])
    shipped = req.get("shipped")
    if shipped is not None:
        return _stage_shipped(state, req, spec, shipped)
    lw = state.workload(req["recipe"])
    batch = int(req["batch_size"])
    device = lw.device

    def body() -> StageOutcome:
        _with_threads(spec, state)
        with torch.inference_mode():
            call = _build_candidate(lw, spec, batch).call
            first, done = _warm(call, req, device=device, backend=lw.backend)
        state.staged = Staged(spec=spec, device=device, call=call)
        return StageOutcome(status="ok", reason="", first_call_seconds=first, warmup_calls=done)

    result = _guarded(lw.backend, body)
    torch.set_num_threads(state.default_threads)
    return result


def _warm(call: Callable[[], Any], req: StageRequest, *, device: torch.device, backend: devices.DeviceBackend
          ) -> tuple[float, int]:
    """A staged call's first call (timed) and warm-up: every shape once, then at least the screening's warm-up
    iterations + 10 calls and ``warmup_seconds``."""
    first = time_first_call(call, device=device)
    if isinstance(call, TrafficCall):
        iterate_all(call)  # every shape compiled / specialised before the warmup proper
    need = int(req.get("warmup_iterations") or 0) + 10
    end = time.perf_counter() + float(req.get("warmup_seconds") or 0.0)
    done = 0
    while done < need or time.perf_counter() < end:
        call()
        done += 1
    backend.synchronize()
    return first, done


def _stage_shipped(state: WorkerState, req: StageRequest, spec: VariantSpec, shipped: dict[str, Any]
                   ) -> StageOutcome | Outcome:
    """Stage a finalist as shipped: its saved artifact loaded by its own ``load.py``, fed the artifact's traffic in
    predict's form (:func:`autotune.core.artifact_child.load_calls`: the plain process's lines), in this worker,
    which builds nothing: no recipe model, no variant build, so its allocator has the history a deployment's has
    (:mod:`autotune.core.artifact_child` says why that matters). CPU only: the plain loop does not synchronise a
    device."""
    from autotune.core.artifact_child import load_calls

    device = torch.device("cpu")
    backend = devices.backend_for(device)

    def body() -> StageOutcome:
        _with_threads(spec, state)
        try:
            loaded = load_calls(shipped)
        except Exception as exc:  # the artifact's own code failed: say so, as the artifact check would
            raise VariantError(f"{spec.name}: its artifact's load.py failed: {one_line(exc)}") from None
        predict = loaded.predict
        if len(loaded.calls) == 1:
            args, kwargs = loaded.calls[0]

            def call() -> Any:
                return predict(*args, **kwargs)
        else:
            call = TrafficCall(lambda a, k: predict(*a, **k), list(loaded.calls))
        with torch.inference_mode():
            first, done = _warm(call, req, device=device, backend=backend)
        state.staged = Staged(spec=spec, device=device, call=call)
        return StageOutcome(status="ok", reason="", first_call_seconds=first, warmup_calls=done,
                            samples_per_call=loaded.samples_per_call)

    result = _guarded(backend, body)
    torch.set_num_threads(state.default_threads)
    return result


def op_slice(state: WorkerState, req: SliceRequest) -> SliceOutcome:
    """Time the staged finalist for ``seconds``: one round of the showdown."""
    st = state.staged
    if st is None:
        raise AutotuneError("slice: nothing staged in this worker (send op 'stage' first)")
    _with_threads(st.spec, state)
    try:
        with torch.inference_mode():
            before = process_ticks()  # outside the window: which processes disturbed it, if one did
            window = CpuWindow.start()
            sl = time_slice(st.call, device=st.device, seconds=float(req["seconds"]),
                            per_call=bool(req.get("per_call")), warmup_seconds=float(req.get("warmup_seconds") or 0))
            load = window.stop()
            after = process_ticks()
    finally:
        torch.set_num_threads(state.default_threads)
    load_doc = load.to_dict()
    if load.disturbed:
        load_doc["consumers"] = top_consumers(before, after, load.wall_seconds, exclude={os.getpid()})
    latency = None
    if sl.latency_samples:
        q = float(str(req.get("percentile") or "p99").lstrip("p"))
        latency = percentiles(sl.latency_samples, (q,))[q]
    return SliceOutcome(status="ok", reason="", calls=sl.calls, seconds_per_call=sl.seconds_per_call,
                        latency_seconds=latency, load=load_doc)


def op_device_memory(state: WorkerState, req: DeviceMemoryRequest) -> DeviceMemoryResult:
    """Memory this process may use on the recipe's device, read before any model exists here.

    On an accelerator this is the boundary's limit: what is free to a fresh process once its
    runtime context exists (other processes, the context and the driver's reserve are taken).
    """
    recipe = Recipe.from_dict(req["recipe"])
    device = devices.resolve_device(recipe.device)
    backend = devices.backend_for(device)
    backend.activate()
    if backend.device_memory:
        torch.empty(1, device=device)  # create the context first: it is not free to the model
        backend.release_memory()
    return {"device": str(device), "free_bytes": backend.free_memory_bytes(),
            "total_bytes": backend.total_memory_bytes(), "device_memory": backend.device_memory}


#: Timed forward passes after a probe's own: the fastest is its step time (the parent's cost and saturation rules).
STEP_CALLS = 2


def op_probe(state: WorkerState, req: ProbeRequest) -> ProbeOutcome:
    """Does ``batch_size`` fit? The peak a deployment process would hold at that batch.

    The *deployment footprint*: torch, one copy of the weights as the variant holds them, the
    inputs and the forward pass at b; not the tool's master copy, its correctness gate or its
    own modules. Pseudo-code::

        master = the recipe's model, built on the host (on an accelerator only the variant's
                 copy goes to the device)
        x      = inputs at b, on the device
        built  = build_variant(spec, master, x)               # the variant's own copy of the weights
        if req.fresh: drop the master (del, gc, malloc_trim): this process then holds what a
                      deployment holds; else (a reused search worker) its bytes are taken off below
        release cached blocks; reset the peak
        accelerator: cap the allocator at the limit, so going over is the allocator's own OOM
        run probe_calls forward passes at b
        peak = backend peak
        STEP_CALLS more forward passes, timed: step_seconds, the fastest (the steady cost of a step at b)
        host memory: peak -= the tool's imports beyond torch, the master if still held, and
                     the drift of this worker's baseline since its first probe
        fits = no OOM and (host memory: peak <= budget)
    """
    spec = VariantSpec.parse(req["variant"])
    batch = int(req["batch_size"])
    budget = req.get("memory_budget_bytes")
    fresh = bool(req.get("fresh"))
    master = state.master(req["recipe"])
    device, backend = master.device, master.backend

    def body() -> ProbeOutcome:
        _with_threads(spec, state)
        # the footprint at b is the traffic's largest batch (the one variants are built from)
        traffic = load_traffic(master.recipe, batch_size=batch, device=device, seed=BUILD_SEED)
        example = traffic.example
        input_bytes = sum(int(x.untyped_storage().nbytes()) for x in example)
        assert master.model is not None
        with torch.inference_mode():
            built = build_variant(spec, adapt(master.model, traffic.layout), example, device=str(device),
                                  dynamic_dims=traffic.build_dims(), input_names=traffic.layout.names,
                                  calibration=calibration_for(spec, master.recipe, traffic, batch_size=batch,
                                                              device=device))
            prepared = built.prepare_inputs(example)
        held = 0 if backend.device_memory else master.weight_bytes()
        if fresh:
            master.model = None  # nothing else holds it: the process keeps only the variant's copy
            held = 0
        backend.release_memory()
        _trim_heap()
        backend.reset_peak_memory()
        baseline = backend.current_memory_bytes() - input_bytes  # runtime and the variant, no batch
        capped = backend.device_memory and backend.limit_memory(budget)
        try:
            with torch.inference_mode():
                for _ in range(backend.probe_calls):
                    out = built.fn(*prepared)
                    backend.synchronize()
                    del out
            raw_peak = backend.peak_memory_bytes()
        finally:
            if capped:
                backend.limit_memory(None)
        # one more call, timed: the steady cost of a step at b (the calls above pay first-call costs), which
        # the parent's boundary search uses to predict a probe's cost and see throughput saturate
        steps = []
        for _ in range(STEP_CALLS):
            started = time.perf_counter()
            with torch.inference_mode():
                out = built.fn(*prepared)
                backend.synchronize()
                del out
            steps.append(time.perf_counter() - started)
        step_seconds = min(steps)  # the least disturbed of the calls: one reading decides how far to probe
        del built, prepared, example, traffic
        correction = 0 if backend.device_memory else TOOL_IMPORT_BYTES + held
        baseline -= correction
        # A reused worker's baseline creeps up (allocator caches, interned graphs: ~1 MB per probe
        # measured on resnet18); a deployment starts fresh, so the drift is taken off. It is counted
        # from the second probe's baseline, not the first's: what the first forward pages in for good
        # (library code, thread pools, kernel caches: ~20 MiB on the wide MLP) a deployment pays
        # too, and taking it off made the search land 21 MiB over the fresh processes' answer.
        early = state.early_baselines.setdefault(req["variant"] + json.dumps(req["recipe"], sort_keys=True), [])
        if len(early) < 2:
            early.append(baseline)
        drift = max(0, baseline - early[-1])
        peak = raw_peak - correction - drift
        fits = budget is None or capped or peak <= budget  # capped: going over was the allocator's OOM
        reason = "" if fits else f"over budget: peak {peak} bytes > budget {budget} bytes"
        return ProbeOutcome(status="ok" if fits else "oom", reason=reason, fits=fits,
                            peak_memory_bytes=peak, baseline_bytes=baseline - drift, raw_peak_memory_bytes=raw_peak,
                            drift_bytes=drift, excluded_bytes=correction, step_seconds=step_seconds,
                            forward_calls=backend.probe_calls + STEP_CALLS)

    try:
        result = _guarded(backend, body)
    finally:
        torch.set_num_threads(state.default_threads)
        backend.release_memory()
        if spec.compiler in ("compile", "export"):
            reset_compiler_state()
    out = ProbeOutcome(**result)  # a failure's outcome gets the verdict fields too
    out.setdefault("fits", False)
    out.setdefault("peak_memory_bytes", None)
    return out


def _gate_inputs(lw: LoadedWorkload, traffic: Traffic, batch: int
                 ) -> tuple[Callable[[int], tuple[torch.Tensor, ...]], int]:
    """The gate's batches and how many: the user's own (one of every shape, then the rest), else
    ``GATE_BATCHES`` fresh random ones."""
    if traffic.source == "factory":
        chosen = traffic.gate_batches(GATE_BATCHES)
        return (lambda s: chosen[s]), len(chosen)
    return (lambda s: make_inputs(lw.recipe.inputs, batch_size=batch, device=lw.device, seed=GATE_SEED + s)), \
        GATE_BATCHES


def _accuracy(lw: LoadedWorkload, cand: _Candidate, gate_inputs: Callable[[int], tuple[torch.Tensor, ...]],
              gate_count: int, precision: str) -> AccuracyResult | None:
    """The accuracy budget's verdict (:mod:`autotune.worker.accuracy`) for a lower-precision variant, and for every
    variant when the recipe has ``[accuracy]`` (information on fp32 rows); None otherwise. Over every batch of
    the traffic (the factory's), else the gate's random batches."""
    recipe = lw.recipe
    if not judged_by_budget(precision) and recipe.accuracy is None:
        return None
    traffic = cand.traffic
    if traffic.source == "factory":
        flat = list(traffic.batches)
    else:
        flat = [gate_inputs(s) for s in range(gate_count)]
    outs = run_outputs(cand.model, cand.built, flat, traffic.layout,
                       data="factory" if traffic.source == "factory" else "random")
    metric = resolve_metric(recipe) if recipe.accuracy is not None and recipe.accuracy.metric else None
    return judge(outs, precision=precision, recipe=recipe, metric=metric)


def op_parse_variant(state: WorkerState, req: ParseVariantRequest) -> ParseVariantResult:
    """Validate a variant named on the command line against this device and workload."""
    lw = state.workload(req["recipe"])
    spec = VariantSpec.parse(req["variant"], field="--variant")
    avail = available(spec, device=lw.device.type, input_ndims=lw.info.input_ndims,
                      input_is_float=lw.info.input_is_float)
    if not avail.ok:
        raise InputError(f"--variant: '{req['variant']}' is not available here: {avail.reason}")
    return {"status": "ok", "spec": spec.to_dict(), "name": spec.name}


def op_artifact(state: WorkerState, req: ArtifactRequest) -> ArtifactResult:
    """Save the recommendation's deployable artifact into ``directory`` and profile it and eager at its batch
    (:func:`autotune.worker.artifact.deploy`; one build serves both, each part reports its own failure)."""
    from autotune.worker.artifact import deploy

    lw = state.workload(req["recipe"])
    spec = VariantSpec.parse(req["variant"])
    _with_threads(spec, state)
    try:
        # built exactly as the measurement built it: same example, dynamic dims, input names and buckets
        traffic, eager, plan, example = _candidate_inputs(lw, spec, int(req["batch_size"]))
        result = deploy(eager, example, spec=spec, device=lw.device,
                        backend=lw.backend, directory=req.get("directory"), profile=bool(req.get("profile", True)),
                        iterations=int(req.get("iterations") or 10), traffic=traffic, plan=plan,
                        calibration=calibration_for(spec, lw.recipe, traffic, batch_size=int(req["batch_size"]),
                                                    device=lw.device))
        return cast(ArtifactResult, result)
    finally:
        torch.set_num_threads(state.default_threads)
        reset_compiler_state()


def op_generate(state: WorkerState, req: GenerateRequest) -> GenerateOutcome | Outcome:
    """A ``[generate]`` configuration at a concurrency: measured, probed or saved
    (:func:`autotune.worker.generation.run.run_generate`); an OOM is the ``oom`` status, as for a forward."""
    from autotune.worker.generation.run import run_generate

    device = devices.resolve_device(str(req["recipe"].get("device", "auto")))
    backend = devices.backend_for(device)
    backend.activate()
    try:
        return _guarded(backend, lambda: run_generate(req, device=device, backend=backend,
                                                      tool_bytes=TOOL_IMPORT_BYTES))
    finally:
        reset_compiler_state()
        cache = os.environ.pop("TORCHINDUCTOR_CACHE_DIR", "")  # the cold compile's own cache (generation.run)
        if "autotune-inductor-" in cache:
            shutil.rmtree(cache, ignore_errors=True)


#: Each op's function; a request's ``op`` picks one (the request's type is the op's: see the signatures).
OPS: dict[OpName, Callable[[WorkerState, Any], Result]] = {
    "artifact": op_artifact,
    "hello": op_hello,
    "validate": op_validate,
    "measure": op_measure,
    "probe": op_probe,
    "device_memory": op_device_memory,
    "parse_variant": op_parse_variant,
    "stage": op_stage,
    "slice": op_slice,
    "generate": op_generate,
}
