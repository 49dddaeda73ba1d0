"""Worker start-up cost vs reuse: why the runner keeps a healthy worker across candidates.

Starts fresh workers (python -m autotune.worker: interpreter + torch import + hello), then
measures the protocol round trip and a small candidate on one reused worker.

Run: .venv/bin/python benchmarks/bench_worker.py [--starts 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabulate import tabulate

from autotune.client import WorkerClient
from autotune.core.measure_settings import MeasureSettings
from autotune.core.protocol import HELLO
from autotune.core.recipe import load_recipe
from autotune.runner import Runner, WorkerProcess

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=5)
    args = ap.parse_args()
    starts, imports = [], []
    for _ in range(args.starts):
        w = WorkerProcess()
        starts.append(w.startup_seconds)
        imports.append(w.hello["import_seconds"])
        w.close()
    w = WorkerProcess()
    t0 = time.perf_counter()
    n = 200
    for _ in range(n):
        w.request(HELLO, timeout=30)
    rtt = (time.perf_counter() - t0) / n
    w.close()

    recipe = load_recipe(ROOT / "recipes" / "mlp.toml")
    settings = MeasureSettings(mode="throughput", ci_target=0.05, max_seconds=0.5)
    per_candidate = {}
    for reuse in (True, False):
        with Runner(reuse=reuse) as runner:
            client = WorkerClient(runner)
            client.validate(recipe, timeout=300)
            t0 = time.perf_counter()
            for b in (1, 8, 32, 64):
                res = client.measure(recipe, "eager", b, settings, timeout=300)
                assert res["status"] == "ok", res
            per_candidate[reuse] = (time.perf_counter() - t0) / 4
    print(tabulate([
        ["fresh worker start (spawn + torch import + hello), median", f"{statistics.median(starts):.2f} s"],
        ["  of which `import torch` and autotune modules in the worker", f"{statistics.median(imports):.2f} s"],
        ["protocol round trip on a live worker (hello)", f"{rtt * 1e6:.0f} µs"],
        ["mlp eager candidate (0.5 s budget), reused worker", f"{per_candidate[True]:.2f} s"],
        ["mlp eager candidate (0.5 s budget), fresh worker each", f"{per_candidate[False]:.2f} s"],
    ], headers=["worker cost", "value"]))


if __name__ == "__main__":
    main()
