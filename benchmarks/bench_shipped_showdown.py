"""Does the showdown rank finalists as their artifacts run? Built in the worker against staged as shipped, scored on
plain processes.

    .venv/bin/python benchmarks/bench_shipped_showdown.py benchmarks/recipes/hf_distilbert.toml \\
        [--repeats 3] [--truth-rounds 8] [--seconds 2]

The recipe's first two ``search.variants`` at its first batch size are the two finalists (A, B). Then, in a seeded
random order per repeat, the same showdown (:func:`autotune.showdown.run_showdown`, the recipe's measure settings,
no deadline) runs two ways:

- ``built``: every finalist built from the recipe in its staged workers (before issue 30's fix: the worker has built
  the model and the variant, and glibc's raised mmap threshold with it);
- ``shipped``: a finalist with a file form saved as its artifact and loaded by its own ``load.py`` in workers that
  built nothing (``measure.as_shipped``, the default on a CPU).

Each gives B/A: the paired median over its compared rounds of B's throughput over A's (the showdown's own rounds),
and which it picked. The truth: both finalists' artifacts (saved once, as the run would ship them) in fresh plain
processes (:func:`autotune.artifact_timing.rerun`: no autotune imported, ``run.sh``'s environment, A and B in every
round in a seeded random order), ``--truth-rounds`` rounds: B/A with its 95% t interval. The table says, per way, the
B/A of each repeat and whether the truth's interval holds it.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.artifact_timing import rerun
from autotune.core.recipe import load_recipe
from autotune.runner import Runner
from autotune.showdown import ShowdownSettings, candidate_key, run_showdown
from benchmarks.bench_plain_truth import saved_target


def showdown_ratio(doc: dict[str, Any], a: str, b: str) -> float:
    """B/A: the paired median over the compared rounds of throughput B over throughput A."""
    spc = doc["seconds_per_call"]
    used = doc["rounds_compared"]
    return math.exp(statistics.median(math.log(spc[a][i] / spc[b][i]) for i in used))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--truth-rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds each plain process is timed")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    recipe = load_recipe(args.recipe)
    data = recipe.to_dict()
    batch = int(recipe.search.batch_sizes[0]) if not isinstance(recipe.search.batch_sizes, str) else 8
    rows = [{"variant": v, "batch_size": batch, "trial": i} for i, v in enumerate(recipe.search.variants[:2])]
    a, b = (candidate_key(r) for r in rows)
    m = recipe.measure
    results: dict[str, list[tuple[float, str]]] = {"built": [], "shipped": []}
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-shipped-") as tmp:
        for rep in range(args.repeats):
            ways = ["built", "shipped"]
            rng.shuffle(ways)
            for way in ways:
                settings = ShowdownSettings(rounds=m.rounds, round_seconds=m.round_seconds,
                                            margin=recipe.search.equivalence_margin, objective="throughput",
                                            latency_percentile="p99", timeout_s=m.timeout_s, seed=args.seed + rep,
                                            processes=m.processes, quiet=True,
                                            shipped_dir=str(Path(tmp) / f"sd{rep}") if way == "shipped" else None)
                doc = run_showdown(rows, recipe_data=data, settings=settings, make_runner=Runner)
                if doc.get("dropped"):
                    raise SystemExit(f"{way}: a finalist dropped out: {doc['dropped']}")
                ratio = showdown_ratio(doc, a, b)
                pick = (doc.get("verdict") or {}).get("pick", "-")
                results[way].append((ratio, pick))
                print(f"repeat {rep + 1} {way:8s}: {b}/{a} = {ratio:.3f}, pick {pick}, staged_from "
                      f"{doc.get('staged_from')}, {doc['rounds_run']} rounds", flush=True)
        targets = [saved_target(data, row, Path(tmp) / f"truth-{row['variant']}", timeout=m.timeout_s)
                   for row in rows]
        truth = rerun(targets[0], targets[1], rounds=args.truth_rounds, seconds=args.seconds, threshold=0.05,
                      seed=args.seed)
    ci = truth.ci or (truth.ratio, truth.ratio)
    print()
    print(f"truth (plain processes, {args.truth_rounds} rounds of {args.seconds:g} s): {b}/{a} = {truth.ratio:.3f} "
          f"(95% CI {ci[0]:.3f}-{ci[1]:.3f}); {a} {statistics.median(truth.a_throughput):,.0f}/s, "
          f"{b} {statistics.median(truth.b_throughput):,.0f}/s")
    print()
    print(f"| showdown staged | {b}/{a} per repeat | picks | within the truth's CI |")
    print("|---|---|---|---|")
    for way, got in results.items():
        inside = sum(ci[0] <= r <= ci[1] for r, _ in got)
        print(f"| {way} | {', '.join(f'{r:.2f}' for r, _ in got)} | {', '.join(p for _, p in got)} | "
              f"{inside}/{len(got)} |")


if __name__ == "__main__":
    main()
