"""Why the winner is fast: top-10 operator tables for the recommendation and for eager at the same batch.

Runs in a worker process (:func:`autotune.worker.artifact.deploy` calls it after the artifact is saved), on the
variant already built there, so nothing is compiled twice. What each table is, and why:

* **torch variants** (eager, TorchScript, compile, export): ``torch.profiler`` over a few calls after a
  short warmup, operators grouped by name (``key_averages``), the top 10 by self CPU time (by self device
  time when the device has a profiler activity, e.g. CUDA), with their calls. Times are per forward (the
  totals divided by the profiled calls), so the recommendation's table and eager's read side by side.
* **ONNX Runtime**: torch.profiler sees only the tensor conversion at the boundary, so the table comes
  from ORT's own node profiler (``SessionOptions.enable_profiling``): a second session on the artifact's
  ``.onnx`` with the measured options, kernel time per ONNX op type. Cheap: one more session build.
* **OpenVINO**: the plugin's own per-node counters (``PERF_COUNT``, ``InferRequest.get_profiling_info``),
  real time per node type, from the artifact's ``ov.Model`` compiled with the measured configuration. In
  throughput mode one request is profiled (the measured call runs several at once).

The profiler adds its own overhead per operator (most visible on small ops), so the tables say where
time goes, not how fast the variant is: the measured throughput is in the candidates table.
Pseudo-code::

    call() x warmup; synchronize
    n = clamp(budget_seconds / seconds of one call, 3, iterations)
    profile n calls; group by operator; sort by self time; keep the top 10; divide by n
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Rows per table.
TOP = 10
#: Calls profiled at most, and the wall time the profiled calls of one table aim for.
ITERATIONS = 10
BUDGET_SECONDS = 2.0
WARMUP = 3


def _iterations(call: Callable[[], Any], synchronize: Callable[[], None], *, iterations: int,
                warmup: int) -> int:
    """Warm up, then pick how many calls to profile so one table costs about ``BUDGET_SECONDS``."""
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        call()
    synchronize()
    per_call = (time.perf_counter() - t0) / max(1, warmup)
    return max(3, min(iterations, int(BUDGET_SECONDS / max(per_call, 1e-6))))


def _table(source: str, n: int, rows: Sequence[dict[str, Any]], total_ms: float, *,
           total_device_ms: float | None = None, note: str | None = None) -> dict[str, Any]:
    return {"source": source, "iterations": n, "total_self_cpu_ms": total_ms,
            "total_self_device_ms": total_device_ms, "rows": list(rows), "note": note}


def torch_table(call: Callable[[], Any], *, device_type: str, synchronize: Callable[[], None],
                iterations: int = ITERATIONS, warmup: int = WARMUP, top: int = TOP) -> dict[str, Any]:
    """``torch.profiler`` top-``top`` operators of ``call`` (per forward: self CPU ms, self device ms, calls)."""
    from torch.profiler import ProfilerActivity, profile

    n = _iterations(call, synchronize, iterations=iterations, warmup=warmup)
    activities = [ProfilerActivity.CPU]
    # the accelerator's activity by the device type's name (CUDA, XPU, ...): no device-specific branch here
    device_activity = getattr(ProfilerActivity, device_type.upper(), None) if device_type != "cpu" else None
    if device_activity is not None:
        activities.append(device_activity)
    with profile(activities=activities) as prof:
        for _ in range(n):
            call()
        synchronize()
    events = list(prof.key_averages())

    def device_us(e: Any) -> float:
        return float(getattr(e, "self_device_time_total", 0.0) or 0.0)

    key = device_us if device_activity is not None else (lambda e: float(e.self_cpu_time_total))
    ranked = sorted(events, key=key, reverse=True)[:top]
    rows = [{"name": str(e.key), "calls": e.count / n, "self_cpu_ms": e.self_cpu_time_total / 1000.0 / n,
             "self_device_ms": device_us(e) / 1000.0 / n if device_activity is not None else None}
            for e in ranked]
    total = sum(float(e.self_cpu_time_total) for e in events) / 1000.0 / n
    total_device = sum(device_us(e) for e in events) / 1000.0 / n if device_activity is not None else None
    return _table("torch.profiler", n, rows, total, total_device_ms=total_device)


def onnx_table(path: str, options: Any, arrays: Sequence[Any], *, providers: Sequence[Any],
               iterations: int = ITERATIONS, warmup: int = WARMUP, top: int = TOP) -> dict[str, Any]:
    """ONNX Runtime's node profiler on a second session of the artifact: kernel time per ONNX op type."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="autotune-ortprof-") as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(path, options, providers=list(providers))
        feeds = {i.name: a for i, a in zip(session.get_inputs(), arrays, strict=True)}
        n = _iterations(lambda: session.run(None, feeds), lambda: None, iterations=iterations, warmup=warmup)
        for _ in range(n):
            session.run(None, feeds)
        with open(session.end_profiling(), encoding="utf-8") as fh:
            events = json.load(fh)
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])[-n:]
    start = runs[0]["ts"] if runs else 0
    per_op: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time") and e.get("ts", 0) >= start:
            op = str((e.get("args") or {}).get("op_name") or e["name"])
            entry = per_op.setdefault(op, [0.0, 0.0])
            entry[0] += float(e.get("dur", 0))
            entry[1] += 1
    rows = [{"name": op, "calls": calls / n, "self_cpu_ms": us / 1000.0 / n, "self_device_ms": None}
            for op, (us, calls) in sorted(per_op.items(), key=lambda kv: kv[1][0], reverse=True)[:top]]
    total = sum(us for us, _ in per_op.values()) / 1000.0 / n
    return _table("onnxruntime profiling (kernel time per op type)", n, rows, total)


def openvino_table(model: Any, config: dict[str, Any], arrays: Sequence[Any], *, iterations: int = ITERATIONS,
                   warmup: int = WARMUP, top: int = TOP) -> dict[str, Any]:
    """OpenVINO's per-node counters (``PERF_COUNT``): real time per node type over the profiled requests."""
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {**config, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    # the largest batch one request takes (a dynamic dim: its upper bound, -1 when unbounded)
    shapes = [tuple(int(d.get_length() if d.is_static else d.get_max_length()) for d in i.get_partial_shape())
              for i in compiled.inputs]
    feeds = [a[: s[0]] if len(s) and s[0] > 0 and a.ndim and a.shape[0] > s[0] else a
             for a, s in zip(arrays, shapes, strict=True)]
    n = _iterations(lambda: request.infer(feeds), lambda: None, iterations=iterations, warmup=warmup)
    per_type: dict[str, list[float]] = {}
    for _ in range(n):
        request.infer(feeds)
        for info in request.get_profiling_info():
            if "EXECUTED" not in str(info.status):
                continue
            entry = per_type.setdefault(str(info.node_type), [0.0, 0.0])
            entry[0] += info.real_time.total_seconds()
            entry[1] += 1
    rows = [{"name": op, "calls": calls / n, "self_cpu_ms": s * 1000.0 / n, "self_device_ms": None}
            for op, (s, calls) in sorted(per_type.items(), key=lambda kv: kv[1][0], reverse=True)[:top]]
    total = sum(s for s, _ in per_type.values()) * 1000.0 / n
    note = None
    if shapes and arrays and shapes[0] and arrays[0].ndim and 0 < shapes[0][0] < arrays[0].shape[0]:
        note = (f"one request of {shapes[0][0]} samples profiled; the measured call runs the batch of "
                f"{arrays[0].shape[0]} as several requests at once")
    return _table("openvino PERF_COUNT (real time per node type)", n, rows, total, note=note)


__all__ = ["BUDGET_SECONDS", "ITERATIONS", "TOP", "WARMUP", "onnx_table", "openvino_table", "torch_table"]
