"""Measurement harness vs torch.utils.benchmark, and the harness's own overhead.

1. Agreement: on the same callables, in one run, autotune's steady-state median per-call time
   (``measure_callable``, throughput mode) against ``Timer.adaptive_autorange``'s median.
   Rounds are interleaved (ours, theirs, ours, theirs...) so machine noise hits both alike;
   the ratio of medians over the rounds is reported. Target: within 3%.
2. Overhead: a no-op callable measured by the harness; what it reports per iteration is the
   harness's own cost (loop + timer + detector). Target: at most 2 µs on CPU.

Run: .venv/bin/python benchmarks/bench_measure.py [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.utils.benchmark as tub
from tabulate import tabulate

from autotune.worker.timing import MeasureSettings, measure_callable


def workloads(quick: bool) -> dict[str, Callable[[], Any]]:
    import torchvision

    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 10)).eval()
    x_mlp = torch.randn(64, 512)
    cnn = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    x_cnn = torch.randn(4, 3, 64, 64)
    out: dict[str, Callable[[], Any]] = {
        "matmul 256x256": lambda: torch.mm(a, b),
        "mlp 512-2048-10, batch 64": lambda: mlp(x_mlp),
    }
    if not quick:
        out["resnet18 4x3x64x64"] = lambda: cnn(x_cnn)
    return out


def ours(fn: Callable[[], Any], seconds: float) -> float:
    with torch.inference_mode():
        m = measure_callable(fn, batch_size=1, device=torch.device("cpu"),
                             settings=MeasureSettings(mode="throughput", ci_target=0.005, max_seconds=seconds))
    return m.median_seconds


def theirs(fn: Callable[[], Any], seconds: float) -> float:
    with torch.inference_mode():
        timer = tub.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
        return timer.adaptive_autorange(threshold=0.01, max_run_time=seconds).median


def overhead(mode: str, seconds: float) -> tuple[float, float]:
    """(timed seconds per iteration, wall seconds per iteration) for a no-op callable.

    Timed: what the harness reports (loop + timer reads inside the timed region). Wall: the
    whole measure_callable call, the detector's re-analyses included, per iteration run.
    """
    t0 = time.perf_counter()
    m = measure_callable(lambda: None, batch_size=1, device=torch.device("cpu"),
                         settings=MeasureSettings(mode=mode, ci_target=0.01, max_seconds=seconds))
    wall = time.perf_counter() - t0
    return m.mean_seconds, wall / (len(m.samples) * m.iterations_per_sample + 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="budget per measurement")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, rounds={args.rounds}, "
          f"{args.seconds:g} s per measurement")
    rows = []
    for name, fn in workloads(args.quick).items():
        with torch.inference_mode():
            for _ in range(3):
                fn()
        a, b = [], []
        for _ in range(args.rounds):
            a.append(ours(fn, args.seconds))
            b.append(theirs(fn, args.seconds))
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        ratio = statistics.median(a) / statistics.median(b)
        rows.append([name, f"{statistics.median(a) * 1e6:.1f}", f"{statistics.median(b) * 1e6:.1f}",
                     f"{ratio:.4f}", f"{min(ratios):.3f}-{max(ratios):.3f}",
                     "PASS" if abs(ratio - 1) <= 0.03 else "FAIL"])
    print(tabulate(rows, headers=["callable", "autotune median µs", "adaptive_autorange median µs",
                                  "ratio of medians", "per-round ratios", "within 3%"]))
    print()
    t0 = time.perf_counter()
    rows = []
    for mode, label in (("throughput", "throughput (timed blocks)"), ("latency", "latency (one timed call/sample)")):
        got = [overhead(mode, 1.0) for _ in range(args.rounds)]
        timed = statistics.median(g[0] for g in got)
        wall = statistics.median(g[1] for g in got)
        rows.append([label, f"{timed * 1e9:.0f}", f"{wall * 1e9:.0f}", "PASS" if timed <= 2e-6 else "FAIL"])
    print(tabulate(rows, headers=["harness overhead, no-op callable", "timed ns/iteration",
                                  "wall ns/iteration (detector included)", "timed <= 2 µs"]))
    print(f"(overhead rounds took {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
