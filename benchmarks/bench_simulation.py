"""The serving simulation against what a run measured: each configuration the run loaded for real, predicted again
by today's simulation from that run's own calibration and per-request overhead, beside its measured max rate.

    python benchmarks/bench_simulation.py RUN/report.json [...]
    python benchmarks/bench_simulation.py benchmarks/data/h200_quickstart_serving.json   # session 47's GPU run

The run's own prediction (report.json's ``predicted_max_rate``, the simulation of its day) is printed too, so a
change to :mod:`autotune.serving.simulate` shows as a column that moved toward (or away from) the measured one.
Nothing is measured here: the model is scored on runs it was not fitted to (the GPU run is the only one with a
front end on cores of its own so far).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autotune.serving.processes import Calibration
from autotune.serving.search import ServingConfig, ServingSearch, Target


def rescore(doc: dict[str, Any], seed: int = 0) -> list[dict[str, Any]]:
    serving = doc["serving"]
    device = str((doc.get("recipe") or {}).get("device_resolved") or serving.get("device") or "cpu")
    spec = SimpleNamespace(slo_ms=float(serving["slo_ms"]), percentile=serving["percentile"], time_budget_s=60.0,
                           arrivals=serving.get("arrivals", "poisson"),
                           request_samples=serving.get("request_samples", 1), rate=serving.get("rate_target"))
    target = Target(artifact=Path("."), variant="x", environment="glibc", batch_size=1, threads=1, model_name="m",
                    input_names=("x",), device=device)
    search = ServingSearch(spec, target, cores=int(serving["cores"]), seed=seed)
    search.request_rows = int(spec.request_samples) if isinstance(spec.request_samples, int) else 1
    search.overhead_s = float(serving.get("overhead_ms") or 0.0) / 1000
    for layout, cal in (serving.get("calibration") or {}).items():
        n, t = (int(x) for x in layout.split("x"))
        search.calibrations[(n, t)] = Calibration(
            n, t, {int(b): v / 1000 for b, v in cal["service_ms"].items()},
            {int(b): float(v) for b, v in cal["p90_over_p50"].items()}, 0.0)
    rows = []
    for c in serving.get("configs") or []:
        if c.get("max_rate") is None or c.get("role") == "pruned":
            continue
        config = ServingConfig(int(c["instances"]), int(c["threads"]), int(c["max_batch"]), float(c["max_delay_ms"]))
        search._simulate([config])
        rows.append({"config": config.label(), "role": c["role"], "measured": float(c["max_rate"]),
                     "then": c.get("predicted_max_rate"), "now": search.predicted.get(config)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.reports:
        doc = json.loads(path.read_text())
        print(f"{path} (cores {doc['serving']['cores']}, overhead {doc['serving'].get('overhead_ms')} ms, "
              f"SLO {doc['serving']['percentile']} <= {doc['serving']['slo_ms']} ms)")
        for r in rescore(doc):
            then = f"{r['then']:.0f} ({r['then'] / r['measured']:.2f}x)" if r["then"] else "-"
            now = f"{r['now']:.0f} ({r['now'] / r['measured']:.2f}x)" if r["now"] else "-"
            print(f"  {r['role']:10s} {r['config']:40s} measured {r['measured']:8.1f}   predicted then {then:16s} "
                  f"now {now}")


if __name__ == "__main__":
    main()
