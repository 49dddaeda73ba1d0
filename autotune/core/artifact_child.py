"""The code that runs a saved artifact the way a deployment does: its own ``load.py``, its traffic in predict's form.

Two processes run these lines, and they must be the same lines:

- the *plain process* (:data:`CHILD`, started by :mod:`autotune.artifact_timing` with ``python -c``): the artifact
  check's and ``compare --rerun``'s deployment stand-in; it never imports autotune, and checks that it did not;
- the showdown's worker staged *as shipped* (:func:`load_calls`, op ``stage`` with ``shipped``): a finalist timed
  from its saved artifact in a worker that built nothing. A worker that builds the model and the variant before it
  times has freed large blocks, glibc has raised its mmap threshold, and a call's tensors come from the heap: a
  Hugging Face DistilBERT's ``trace@8`` ran 3,215 samples/s in such a worker and 1,621 as its artifact in a
  plain process (BENCHMARKS "A worker's build history"), and the showdown ranked it ahead of ONNX Runtime, which
  the plain processes had 1.08x ahead.

So this module imports nothing but the standard library, and the lines are strings: ``LOAD_CALLS`` (load the
artifact, read its traffic or ``make_inputs()``, put each batch in predict's form) and ``TIME_PASSES`` (the plain
process's warm-up and timed passes). The spec (``spec``) is :func:`autotune.artifact_timing.target_of`'s child
dict: ``loader`` (load.py's path), ``kind`` (the artifact's kind), optionally ``traffic`` (traffic.npz) and
``max_batches``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.core import contention

__all__ = ["CHILD", "CONTENTION", "LOAD_CALLS", "TIME_PASSES", "ShippedCalls", "load_calls"]

#: Given ``spec``: ``predict`` (load.py's ``load()``), ``calls`` (each batch as (args, kwargs) in predict's form)
#: and ``rows`` (each batch's samples).
LOAD_CALLS = r"""
import re, runpy
ns = runpy.run_path(spec["loader"])
predict = ns["load"]()
kind = spec["kind"]
def call_of(f):  # (args, kwargs) of one batch in the form predict takes it (the loader's _form / make_inputs)
    if isinstance(f, dict):
        return (), f
    if isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], tuple) and isinstance(f[1], dict):
        return f
    if isinstance(f, (tuple, list)):
        return tuple(f), {}
    return (f,), {}
if spec.get("traffic"):
    import numpy as np
    found = {}
    with np.load(spec["traffic"], allow_pickle=False) as z:
        for key in z.files:
            m = re.fullmatch(r"b(\d+)\.(.+)", key)
            if m:
                found.setdefault(int(m.group(1)), {})[m.group(2)] = z[key]
    first = found[min(found)]
    names = list(ns.get("INPUTS") or first)  # an older loader without INPUTS: the traffic's order, as saved
    if kind in ("onnx", "openvino"):
        conv = lambda a: a
    else:
        import torch
        conv = torch.from_numpy
    order = sorted(found)[:spec["max_batches"]]
    calls = [call_of(ns["_form"](xs) if "_form" in ns else tuple(xs))
             for xs in ([conv(found[i][n]) for n in names] for i in order)]
    rows = [int(found[i][names[0]].shape[0]) for i in order]
else:
    args, kwargs = call_of(ns["make_inputs"]())  # predict's form: a tuple, a dict of keyword inputs, or both
    calls = [(args, kwargs)]
    rows = [int([*args, *kwargs.values()][0].shape[0])]
"""

#: The plain process's timing: 3 warm passes, ``warm_s`` more, then whole passes for ``seconds``; prints JSON.
#: On an accelerator (``sync``: the device module's name, e.g. ``"cuda"``) launches return before the device is done,
#: so the timing is the tool's: the throughput from whole passes launched back to back, the window closed by a
#: synchronise (the worker's event-timed blocks), then a second window of calls each synchronised for the per-call
#: percentiles (the worker's ``per_call``).
#: On a CPU one window gives both. Around the timed window it reads what else used the CPU (:data:`CONTENTION`):
#: ``foreign_cores``, ``disturbed`` and, when disturbed, the ``consumers``.
TIME_PASSES = r"""
import time
clock = time.perf_counter
sync = getattr(__import__("torch"), spec["sync"]).synchronize if spec.get("sync") else None
lat = []
def one_pass(keep):
    for a, k in calls:
        s = clock()
        predict(*a, **k)
        if keep:
            if sync is not None:
                sync()
            lat.append(clock() - s)
def timed(keep):
    t0 = clock(); n = 0
    while True:
        one_pass(keep); n += 1
        if clock() - t0 >= spec["seconds"]:
            break
    if sync is not None:
        sync()
    return n, clock() - t0
for _ in range(3):
    one_pass(False)
end = clock() + spec.get("warm_s", 1.0)
while clock() < end:
    one_pass(False)
if sync is not None:
    sync()
ticks0 = process_ticks()  # outside the window, as the worker's slice reads them
window = CpuWindow.start()
n, t = timed(sync is None)
load = window.stop()
consumers = top_consumers(ticks0, process_ticks(), load.wall_seconds, exclude={os.getpid()}) if load.disturbed else []
if sync is not None:
    timed(True)
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
print(json.dumps({"throughput": n * sum(rows) / t, "passes": n, "calls": len(lat), "p50_ms": q(0.5),
                  "p90_ms": q(0.9), "p99_ms": q(0.99), "mean_ms": sum(lat) / len(lat) * 1e3,
                  "rows_per_call": sum(rows) / len(rows), "synchronised": sync is not None,
                  "foreign_cores": load.foreign_cores, "disturbed": load.disturbed, "consumers": consumers}))
"""

#: What else used the CPU while the plain process timed: :mod:`autotune.core.contention`'s own functions, their
#: source put into the child (which must not import autotune), so the plain process and a worker read the kernel the
#: same way. Why: a demo's check on a 2-core AVX2 EPYC read 260, 407, 410 and 320 samples/s (the tool's worker beside
#: it 329, 401, 413, 343: the machine, not the artifact), so its headline, the median, came out 363 where a plain
#: process a minute later ran 430 (session 40).
CONTENTION = ("import os, time\nfrom dataclasses import dataclass\nfrom typing import Any, Self\n"
              f"PROC_STAT = {contention.PROC_STAT!r}\nPROC = {contention.PROC!r}\n"
              f"CONSUMER_CORES = {contention.CONSUMER_CORES!r}\nDISTURBED_CORES = {contention.DISTURBED_CORES!r}\n"
              '_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100\n'
              + "".join(inspect.getsource(f) for f in (contention.busy, contention.machine_busy_seconds,
                                                       contention.CpuLoad, contention.CpuWindow,
                                                       contention.process_ticks, contention.top_consumers)))

#: The plain process: the artifact's loader and, for a ``[data]`` recipe, the traffic saved beside it; never
#: autotune, and no code but the loader's.
CHILD = ("import json, sys\nspec = json.loads(sys.argv[1])\n" + LOAD_CALLS
         + 'assert "autotune" not in sys.modules, "the plain process imported autotune"\n' + CONTENTION + TIME_PASSES)


@dataclass(frozen=True)
class ShippedCalls:
    """An artifact loaded by its own ``load.py``: ``predict`` and each traffic batch as (args, kwargs)."""

    predict: Any
    calls: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...]
    rows: tuple[int, ...]

    @property
    def samples_per_call(self) -> float:
        return sum(self.rows) / len(self.rows)


def load_calls(spec: Mapping[str, Any]) -> ShippedCalls:
    """Run :data:`LOAD_CALLS` on ``spec`` in a namespace of its own: the plain process's lines, in this process."""
    ns: dict[str, Any] = {"spec": dict(spec)}
    exec(compile(LOAD_CALLS, str(spec.get("loader") or "<artifact>"), "exec"), ns)
    return ShippedCalls(predict=ns["predict"], calls=tuple(ns["calls"]), rows=tuple(int(r) for r in ns["rows"]))
