"""The plain truth about a few candidates: each one's artifact, run by its own load.py in fresh plain processes.

    .venv/bin/python benchmarks/bench_plain_truth.py recipes/quickstart.toml \\
        --candidates frozen@16,onnx@16,openvino@16 [--rounds 8] [--seconds 2] [--seed 0]

Each candidate (variant@batch) is saved once as the run would ship it
(:func:`autotune.deployment.write_finalist_artifact`: the artifact and the ``load.py`` the deployment step writes),
then timed in ``--rounds`` rounds, every candidate once per round in a seeded random order, each timing a fresh Python
process that never imports autotune (:func:`autotune.artifact_timing.time_artifact`, in ``run.sh``'s process
environment). Printed: each candidate's median throughput, and its ratio to the fastest by the paired median over
rounds with a 95% t interval of the mean log ratio. Use it to score what a run chose (its finalists, its pick) against
what deployment processes see.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.artifact_timing import ArtifactTarget, child_spec, time_artifact
from autotune.core.process_env import environment_of_variant
from autotune.core.recipe import load_recipe
from autotune.core.stats import t_quantile_975
from autotune.deployment import write_finalist_artifact
from autotune.runner import Runner


def saved_target(data: dict[str, Any], row: dict[str, Any], directory: Path, *, timeout: float) -> ArtifactTarget:
    """``row``'s artifact saved into ``directory`` as a run ships it, as a target for plain processes (in
    ``run.sh``'s process environment); exits on a failed save (also used by bench_shipped_showdown.py)."""
    label = f"{row['variant']}@{row['batch_size']}"
    section = write_finalist_artifact(data, row, directory, make_runner=Runner, timeout=timeout)
    if section.get("status") != "ok":
        raise SystemExit(f"{label}: its artifact failed: {section.get('reason')}")
    return ArtifactTarget(run_dir=directory, label=label, reported=0.0,
                          child=child_spec(directory, kind=str(section["kind"]), batch_size=int(row["batch_size"]),
                                           recipe=data, why="the benchmark"),
                          environment=environment_of_variant(str(row["variant"])).apply(os.environ))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--candidates", required=True, help="comma-separated variant@batch, e.g. frozen@16,onnx@16")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds each plain process is timed")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    recipe = load_recipe(args.recipe)
    data = recipe.to_dict()
    rows = []
    for item in args.candidates.split(","):
        variant, _, batch = item.strip().rpartition("@")
        if not variant or not batch.isdigit():
            raise SystemExit(f"--candidates: {item!r} is not variant@batch")
        rows.append({"variant": variant, "batch_size": int(batch), "trial": len(rows)})
    got: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-truth-") as tmp:
        targets: list[ArtifactTarget] = []
        for row in rows:
            label = f"{row['variant']}@{row['batch_size']}"
            targets.append(saved_target(data, row, Path(tmp) / label.replace("@", "-").replace("+", "_"),
                                        timeout=recipe.measure.timeout_s))
            got[label] = []
        rng = random.Random(args.seed)
        for r in range(args.rounds):
            order = list(targets)
            rng.shuffle(order)
            for target in order:
                got[target.label].append(time_artifact(target, seconds=args.seconds))
            print(f"round {r + 1}: " + ", ".join(f"{t.label} {got[t.label][-1]:,.0f}/s" for t in targets), flush=True)
    best = max(got, key=lambda k: statistics.median(got[k]))
    print(f"\nplain processes, {args.rounds} rounds of {args.seconds:g} s, {recipe.name}:")
    print("| candidate | median samples/s | / the fastest, paired median | 95% CI |")
    print("|---|---|---|---|")
    for label, values in sorted(got.items(), key=lambda kv: -statistics.median(kv[1])):
        logs = [math.log(v / b) for v, b in zip(values, got[best], strict=True)]
        if label == best:
            ratio, ci = "1", "-"
        else:
            mean, sd = statistics.mean(logs), statistics.stdev(logs)
            half = t_quantile_975(len(logs) - 1) * sd / math.sqrt(len(logs))
            ratio = f"{math.exp(statistics.median(logs)):.3f}"
            ci = f"{math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}"
        print(f"| {label} | {statistics.median(values):,.1f} | {ratio} | {ci} |")


if __name__ == "__main__":
    main()
