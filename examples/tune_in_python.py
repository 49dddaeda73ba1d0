"""Tune a model from Python (a script or a notebook cell), print the result and read the batch boundary.

Run: ``.venv/bin/python examples/tune_in_python.py [OUT_DIR]`` (about a minute on 2 CPU cores).

The model is a top-level function in this file: the tuning builds it again in worker processes, so
it is passed as a function (or as ``"package.module:function"``), never as an ``nn.Module``.
"""

from __future__ import annotations

import sys

import optuna
import torch
from torch import nn

import autotune


def small_cnn(channels: int = 16) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10),
    )


def main(out: str) -> autotune.TuneResult:
    recipe = autotune.make_recipe(
        name="small_cnn", model=small_cnn, kwargs={"channels": 16},
        inputs=[{"name": "images", "shape": [3, 32, 32]}],
        variants=["eager", "frozen"], batch_sizes=[1, 8], time_budget_s=60,
        measure={"max_seconds": 0.5, "ci_target": 0.05, "rounds": 2, "round_seconds": 0.1, "processes": 1},
        batch={"max_batch_size": 4096},
    )

    def on_event(event: autotune.Event) -> None:
        if event.kind in ("validated", "candidate_done", "done"):
            print(f"[{event.kind}] {event.message}", flush=True)

    # autotune leaves Optuna's logging to its caller (the CLI turns its per-trial lines off the same way)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    result = autotune.tune(recipe, out=out, on_event=on_event)
    best = result.recommendation
    assert best is not None, "nothing feasible"
    print(f"recommended: {best.variant} at batch {best.batch_size}: {best.throughput:,.0f} samples/s "
          f"(95% CI {best.throughput_ci[0]:,.0f}-{best.throughput_ci[1]:,.0f}), "
          f"p50 {best.latency_ms.get('p50', float('nan')):.3f} ms")
    for c in result.candidates:
        print(f"  {c.variant:>8} @ {c.batch_size:<3} {c.status:<8} "
              + (f"{c.throughput:,.0f}/s" if c.throughput else (c.reason or "")))

    bounds = autotune.find_batch_boundary(recipe, variant="eager", memory_budget=4 << 30)
    eager = bounds.boundaries["eager"]
    print(f"eager batch boundary under 4 GiB: {eager.max_batch_size}"
          f"{' (the upper bound: no limit reached)' if eager.hit_upper_bound else ''}; "
          f"usable {eager.usable_max_batch_size}")
    print(f"torch {torch.__version__}; reports in {result.out_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/small_cnn")
