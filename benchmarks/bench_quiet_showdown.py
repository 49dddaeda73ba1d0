"""Issue 31's showdown check: rounds with the other staged workers stopped (``measure.quiet_rounds``, the default)
against rounds with them left running, on the same finalists, interleaved.

    python benchmarks/bench_quiet_showdown.py recipes/quickstart.toml --finalists onnx@16,openvino@16,eager@16
    python benchmarks/bench_quiet_showdown.py recipes/quickstart.toml --finalists eager@16,frozen@16 --repeats 3

Each repeat runs the showdown twice, quiet and not (the order alternating from one repeat to the next), on the
recipe's own settings (rounds, round seconds, processes per finalist, margin) and without its search: the
finalists are staged in fresh workers as the tuner stages them (:func:`autotune.showdown.run_showdown`, real
``Runner`` workers). What is read: the share of rounds after the burn-in that no process disturbed (more than 0.1
core of foreign CPU during a slice, `autotune/core/contention.py`), the foreign CPU the slices saw, and the
verdict's paired-ratio CI widths (the comparison's precision on the same number of rounds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def showdown(recipe_path: str, finalists: list[str], *, quiet: bool, rounds: int | None,
             resume_warmup: float = 0.0) -> dict[str, Any]:
    from autotune.core.recipe import load_recipe
    from autotune.runner import Runner
    from autotune.showdown import ShowdownSettings, run_showdown

    recipe = load_recipe(recipe_path)
    m = recipe.measure
    rows = [{"variant": k.split("@")[0], "batch_size": int(k.split("@")[1]), "trial": i}
            for i, k in enumerate(finalists)]
    settings = ShowdownSettings(rounds=rounds or m.rounds, round_seconds=m.round_seconds,
                                margin=recipe.search.equivalence_margin, objective="throughput",
                                latency_percentile=recipe.constraints.latency_percentile, timeout_s=m.timeout_s,
                                processes=m.processes, quiet=quiet, resume_warmup=resume_warmup)
    t0 = time.monotonic()
    doc = run_showdown(rows, recipe_data=recipe.to_dict(), settings=settings, make_runner=Runner)
    burn = int(doc["burn_in_rounds"])
    counted = [i for i in range(burn, int(doc["rounds_run"]))]
    disturbed = [i for i in doc["disturbed_rounds"] if i >= burn]
    foreign = [f for v in doc["foreign_cores"].values() for f in v[burn:] if f is not None]
    verdict = doc.get("verdict") or {}
    widths = {s["key"]: s["ratio_ci"][1] - s["ratio_ci"][0] for s in verdict.get("standings") or []
              if s.get("ratio_ci") and s["key"] != verdict.get("pick")}
    return {"quiet": quiet, "resume_warmup": resume_warmup, "seconds": round(time.monotonic() - t0, 1),
            "rounds_after_burn_in": len(counted),
            "undisturbed": len(counted) - len(disturbed),
            "foreign_median": statistics.median(foreign) if foreign else None,
            "foreign_max": max(foreign) if foreign else None, "pick": verdict.get("pick"),
            "ci_widths": widths, "rounds_compared": len(doc["rounds_compared"]), "dropped": doc["dropped"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("--finalists", required=True, help="variant@batch,... (as the report names them)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rounds", type=int, help="undisturbed rounds wanted (default: the recipe's measure.rounds)")
    ap.add_argument("--resume-warmup", type=float, default=None, metavar="SHARE",
                    help="also run quiet rounds whose continued worker first makes untimed calls for SHARE of a "
                         "round (a third arm)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    finalists = args.finalists.split(",")
    arms: list[tuple[bool, float]] = [(True, 0.0), (False, 0.0)]
    if args.resume_warmup is not None:
        arms.insert(1, (True, args.resume_warmup))
    runs = []
    for r in range(args.repeats):
        for quiet, warm in arms[r % len(arms):] + arms[:r % len(arms)]:  # each arm leads in turn
            got = showdown(args.recipe, finalists, quiet=quiet, rounds=args.rounds, resume_warmup=warm)
            runs.append(got)
            print(json.dumps(got), flush=True)
    print(f"\n## {Path(args.recipe).stem}: {', '.join(finalists)} ({args.repeats} repeats)\n")
    print("| rounds | runs | undisturbed after burn-in | foreign cores per slice (median / max) | "
          "ratio CI width (median) | picks |")
    print("|---|---|---|---|---|---|")
    for quiet, warm in arms:
        mine = [x for x in runs if x["quiet"] is quiet and x["resume_warmup"] == warm]
        total = sum(x["rounds_after_burn_in"] for x in mine)
        calm = sum(x["undisturbed"] for x in mine)
        fm = [x["foreign_median"] for x in mine if x["foreign_median"] is not None]
        fx = [x["foreign_max"] for x in mine if x["foreign_max"] is not None]
        widths = [w for x in mine for w in x["ci_widths"].values()]
        name = ("quiet (others stopped)" + (f", {warm:g} of a round warm-up after SIGCONT" if warm else "")
                if quiet else "others left running")
        print(f"| {name} | {len(mine)} | {calm} of {total} "
              f"({calm / total:.0%}) | {statistics.median(fm):.2f} / {max(fx):.2f} | "
              f"{statistics.median(widths) if widths else float('nan'):.3f} | "
              f"{', '.join(str(x['pick']) for x in mine)} |")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
