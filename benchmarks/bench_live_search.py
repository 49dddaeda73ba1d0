"""Live check of the search strategies: the tool's pick on a space too large to measure within the budget,
judged against the recorded exhaustive landscape of the same space.

``benchmarks/landscapes/quickstart.json`` measured every one of the 128 combinations of
``benchmarks/recipes/quickstart_space.toml`` (``record_landscape.py``, same measurement settings). This runs the
real ``autotune run`` on that recipe once per strategy (``search.strategy`` = tpe, bracket; the recipe is copied
with the field set), under the recipe's time budget, and reports:

- how many combinations the run measured (of 128), and its search and wall seconds;
- its recommendation, and that configuration's recorded throughput over the recorded best: the pick is
  "within 3% of the live exhaustive best" when this is >= 0.97.

The recorded landscape is the exhaustive reference because measuring all 128 live takes ~15 minutes on this
2-core machine; it was recorded on the same (quiet) machine the same day. Run it quiet (nothing else running).

    python benchmarks/bench_live_search.py [--strategies tpe,bracket] [--out bench-out/live-search]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "benchmarks" / "recipes" / "quickstart_space.toml"
LANDSCAPE = ROOT / "benchmarks" / "landscapes" / "quickstart.json"
TOLERANCE = 0.03


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategies", default="tpe,bracket")
    p.add_argument("--out", type=Path, default=ROOT / "bench-out" / "live-search")
    args = p.parse_args(argv)
    land = json.loads(LANDSCAPE.read_text())
    recorded = {(pt["variant"], pt["batch_size"]): pt["throughput"] for pt in land["points"]
                if pt["status"] == "ok" and pt["throughput"]}
    best_key = max(recorded, key=lambda k: recorded[k])
    best = recorded[best_key]
    print(f"recorded exhaustive best: {best_key[0]}@{best_key[1]} {best:.1f}/s ({len(land['points'])} points, "
          f"{land['date']})")
    print(f"{'strategy':<9} {'measured':>8} {'search s':>8} {'wall s':>7}  {'recommendation':<34} "
          f"{'recorded/s':>10} {'of best':>7}  within 3%")
    ok = True
    for strategy in args.strategies.split(","):
        out = args.out / strategy
        out.mkdir(parents=True, exist_ok=True)
        recipe = out / "recipe.toml"
        recipe.write_text(RECIPE.read_text().replace("[search]\n", f'[search]\nstrategy = "{strategy}"\n', 1))
        run_out = out / "run"
        subprocess.run(["rm", "-rf", str(run_out)], check=True)
        t0 = time.monotonic()
        proc = subprocess.run([str(Path(sys.executable).with_name("autotune")), "run", str(recipe), "--out",
                               str(run_out), "--no-progress"], cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            print(f"{strategy}: exit {proc.returncode}: {proc.stderr[-500:]}")
            ok = False
            continue
        doc = json.loads((run_out / "report.json").read_text())
        rec = doc["recommendation"]
        measured = len({(c["variant"], c["batch_size"]) for c in doc["candidates"] if c["status"] == "ok"})
        key = (rec["variant"], rec["batch_size"])
        value = recorded.get(key)
        share = value / best if value else float("nan")
        within = bool(value) and share >= 1 - TOLERANCE
        ok &= within
        print(f"{strategy:<9} {measured:>8} {doc['search']['search_seconds']:>8.0f} {wall:>7.0f}  "
              f"{key[0] + '@' + str(key[1]):<34} {value or float('nan'):>10.1f} {share:>7.3f}  "
              f"{'yes' if within else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
