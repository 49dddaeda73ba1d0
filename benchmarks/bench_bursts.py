"""Bursts: a level that a neighbour slows for a moment is still one level, and its steady state starts after the warmup.

A burst has a duration in seconds (a neighbour's slice, an interrupt storm, a page-cache flush), so the faster the
iterations the more values it spans: 50 ms is 100 values of 0.5 ms. The offline analysis used to absorb a run of
values off the level only when it was at most ``max(5, n // 200)`` values long, so a 90-value burst in a
4,000-value trace of 0.5-ms calls moved the steady start past it: `tests/test_measure.py`'s stepped callable (59 slow
calls, then one level) was reported with a warmup of 1,986 iterations in CI (session 40's stop), and 2 of 20 times on
a quiet machine. A burst is now absorbed when it lasts at most ``TRANSIENT_SHARE`` (a quarter) of the shorter of the
level before it and the tail after it.

Scored here:

* **synthetic**: ``synthetic_trace("burst")`` at the seed below (picked once, 2026-11-29, before any score): one
  level, after a warmup step half of the time, slowed 1.05-1.5x by 1-3 bursts of 0.5-4% of the trace, each after the
  level held at least as long as the burst lasts (not four times: the label does not follow the rule), none in the
  last 20%. Right: the class (``flat`` or ``warmup``), the steady start within ``max(5, 2% of n)`` values of the
  label, and the steady median within 1% of the level.
* **live** (``--live K``): the stepped callable of ``tests/test_measure.py`` measured K times by the timing loop in
  latency mode; right when the reported warmup is 59 +- 21 iterations. ``--neighbour``: beside a process that copies
  64-MiB buffers for 50 ms every 1.3 s (real bursts, of the length that broke session 40's CI).

    python benchmarks/bench_bursts.py [--count 200] [--seed S] [--live 20 [--neighbour]]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time

import numpy as np

from autotune.core.warmup import analyze
from autotune.traces import synthetic_trace

SEED = 20261129


def synthetic(count: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    cls_ok = start_ok = median_ok = 0
    late = 0
    for i in range(count):
        n = int(math.exp(rng.uniform(math.log(300), math.log(5000))))
        level = float(math.exp(rng.uniform(math.log(1e-5), math.log(1e-1))))
        cv = float(rng.uniform(0.005, 0.05))
        phi = float(rng.uniform(0.0, 0.6))
        t = synthetic_trace("burst", n=n, level=level, cv=cv, phi=phi, seed=seed + i)
        a = analyze(t.values)
        assert t.steady_start is not None
        cls_ok += a.classification == t.cls
        if a.steady_start is not None:
            err = a.steady_start - t.steady_start
            start_ok += abs(err) <= max(5, 0.02 * n)
            late += err > max(5, 0.02 * n)
            assert a.steady_median is not None
            median_ok += abs(a.steady_median - level) / level <= 0.01
    return {"traces": count, "class right": cls_ok / count, "start within 2%": start_ok / count,
            "start later": late / count, "median within 1%": median_ok / count}


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


_NEIGHBOUR = """
import sys, time
burst, period = float(sys.argv[1]), float(sys.argv[2])
a = bytearray(64 << 20)
while True:
    end = time.perf_counter() + burst
    while time.perf_counter() < end:
        b = bytes(a)  # memory traffic: what slows the other core a few percent, not a stolen core
    time.sleep(period - burst)
"""


def _stepped(times: int) -> list[int | None]:
    """The stepped callable measured ``times`` times: each measurement's reported warmup."""
    import torch

    from autotune.worker.timing import MeasureSettings, measure_callable

    found: list[int | None] = []
    for _ in range(times):
        calls = [0]

        def fn(calls: list[int] = calls) -> None:
            calls[0] += 1
            _busy(0.05 if calls[0] == 1 else 0.002 if calls[0] <= 60 else 0.0005)

        m = measure_callable(fn, batch_size=4, device=torch.device("cpu"),
                             settings=MeasureSettings(mode="latency", ci_target=0.02, max_seconds=5.0))
        found.append(m.warmup_iterations)
    return found


def live(times: int, neighbour: bool = False) -> dict[str, object]:
    spinners = []
    if neighbour:  # one process copying 64 MiB buffers for 50 ms every 1.3 s: short slow stretches, a core kept
        spinners = [subprocess.Popen([sys.executable, "-c", _NEIGHBOUR, "0.05", "1.3"])]
    try:
        found = _stepped(times)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    right = sum(w is not None and abs(w - 59) <= 21 for w in found)
    return {"runs": times, "right": right, "warmups": found}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--live", type=int, default=0, help="measure the stepped callable this many times")
    ap.add_argument("--neighbour", action="store_true",
                    help="with --live: a process copying memory for 50 ms every 1.3 s beside the measured loop")
    args = ap.parse_args()
    if args.count > 0:
        print(f"synthetic bursts, seed {args.seed}:")
        for k, v in synthetic(args.count, args.seed).items():
            print(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}")
    if args.live:
        print("live, the stepped callable of tests/test_measure.py" + (" beside a bursting neighbour" if
              args.neighbour else "") + ":", live(args.live, args.neighbour))


if __name__ == "__main__":
    main()
