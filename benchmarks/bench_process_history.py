"""A saved artifact in plain processes whose allocator history differs: does glibc's dynamic mmap threshold make the
tool's worker faster than the deployment?

    .venv/bin/python benchmarks/bench_process_history.py RUN_DIR [RUN_DIR ...] [--rounds 5] [--seconds 3]

For each ``autotune run --out`` directory, each round runs its artifact's own ``load.py`` in fresh plain processes
(``autotune.artifact_timing``'s plain process: no autotune imported, the run's traffic or ``make_inputs()``), in a
seeded random order, three ways:

- ``as shipped``: run.sh's environment (glibc's defaults: a dynamic mmap threshold starting at 128 KiB);
- ``after a 16 MiB free``: the same, but the process first mallocs, touches and frees one 16 MiB block, as a process
  that built the model (a deepcopy, a state dict, a big embedding) has: glibc then raises its mmap threshold to
  16 MiB and its trim threshold to 32 MiB, and a call's tensors come from the heap without fresh page faults;
- ``glibc-tuned``: the thresholds pinned by ``GLIBC_TUNABLES`` (``autotune.core.process_env``'s ``glibc-tuned``).

It prints each way's samples/s per round, the median, the ratio to ``as shipped`` and the page faults per call
(``getrusage(RUSAGE_CHILDREN)`` around each process, over its calls), and the run's own figure for the
recommendation (the worker's screen, ``measured_throughput`` when the artifact check replaced it).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.artifact_timing import CHILD, ArtifactTarget, artifact_target
from autotune.core.process_env import TUNED_TUNABLES

#: Run before the plain process's own code: one 16 MiB block malloc'ed, written and freed (ctypes, no torch).
FREED_BLOCK = """
import ctypes
_libc = ctypes.CDLL("libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_p = _libc.malloc(16 << 20)
ctypes.memset(_p, 1, 16 << 20)
_libc.free(_p)
"""
WAYS = ("as shipped", "after a 16 MiB free", "glibc-tuned")


def one(target: ArtifactTarget, way: str, seconds: float) -> tuple[float, float]:
    """(samples/s, page faults per call) of one fresh plain process run ``way``."""
    env = dict(target.environment)
    code = CHILD
    if way == "after a 16 MiB free":
        code = FREED_BLOCK + CHILD
    elif way == "glibc-tuned":
        env["GLIBC_TUNABLES"] = TUNED_TUNABLES
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    proc = subprocess.run([sys.executable, "-c", code, json.dumps({**target.child, "seconds": seconds,
                                                                   "warm_s": 1.0})],
                          capture_output=True, text=True, cwd=target.run_dir, env=env, timeout=600, check=False)
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before
    if proc.returncode != 0:
        raise SystemExit(f"{target.run_dir}: {way}: the plain process failed: {proc.stderr.strip()[-400:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(out["throughput"]), faults / max(1, int(out["calls"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    for run in args.runs:
        target = artifact_target(run)
        doc = json.loads((run / "report.json").read_text())
        rec = doc["recommendation"]
        worker = rec.get("measured_throughput") or rec.get("throughput")
        got: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
        for _ in range(args.rounds):
            order = list(WAYS)
            rng.shuffle(order)
            for way in order:
                got[way].append(one(target, way, args.seconds))
        print(f"{run}: {target.label} ({doc['artifact'].get('kind')}); the run's worker measured "
              f"{float(worker):,.0f} samples/s")
        base = statistics.median(t for t, _ in got["as shipped"])
        for way in WAYS:
            rates = [t for t, _ in got[way]]
            med = statistics.median(rates)
            ratios = [t / s for (t, _), (s, _) in zip(got[way], got["as shipped"], strict=True)]
            faults = statistics.median(f for _, f in got[way])
            print(f"  {way:20s} median {med:8,.0f} samples/s ({med / base:.2f}x as shipped; per round "
                  f"{min(ratios):.2f}-{max(ratios):.2f}x), {faults:,.0f} page faults per call; rounds: "
                  f"{', '.join(f'{t:,.0f}' for t in rates)}")


if __name__ == "__main__":
    main()
