"""Does ``autotune compare`` cry wolf, and does it catch a real slowdown?

Runs the real CLI three times on the quickstart recipe, each into its own folder (its own study):

* ``A`` and ``A2``: the quickstart as it is, one after the other (the same code on the same machine);
* ``S``: the quickstart with its model slowed by about 10% (``benchmarks/recipes/slowed.py``: one more
  resnet BasicBlock, tensor work every variant keeps);

then ``autotune compare A A2`` and ``autotune compare A S`` (``--json``). The criteria (issue 23):

1. **No false alarm**: ``compare A A2`` reports no regression beyond the threshold (5%).
2. **The slowdown is flagged**: ``compare A S`` reports a regression, and its B/A is about 0.9.

With ``--rerun N`` (default 5) both comparisons are ``compare --rerun N``: the two runs' artifacts timed side by
side in fresh plain processes, which decides (:mod:`autotune.artifact_timing`); ``--rerun 0`` judges the report
rows as before (fresh-process rows where both showdowns timed a configuration). ``--reuse`` keeps run directories
already in ``--out``.

It prints, for each comparison, what it compared on (fresh processes or screens) and every row's B/A with its
CI; ``--json FILE`` writes it all. The run order is A, S, A2, so the two same-code runs are not neighbours in
time (a drift of the machine would show up as a false alarm, not be hidden).

    python benchmarks/bench_compare.py [--recipe recipes/quickstart.toml] [--out bench-out/compare]
        [--budget SECONDS] [--variants eager,script] [--batch-sizes 16] [--rounds N] [--extra-blocks 1]
        [--json FILE]

A small proof that it works (a few minutes on 2 cores): ``--budget 40 --variants eager,script,trace
--batch-sizes 16``; the full run is without those options.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLOWED = ROOT / "benchmarks" / "recipes" / "slowed.py"


def recipe_text(base: str, *, name: str, slowed: bool, budget: float | None, variants: list[str] | None,
                batch_sizes: list[int] | None, rounds: int | None, extra_blocks: int = 1) -> str:
    """The quickstart recipe's text with the name, the model (slowed or not) and the small-run overrides."""
    text = re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', base, count=1)  # the recipe's, not an input's
    if slowed:
        text = text.replace('factory = "torchvision.models:resnet18"', f'factory = "{SLOWED}:resnet18_slowed"')
        text = text.replace("kwargs = { num_classes = 10 }",
                            f"kwargs = {{ num_classes = 10, extra_blocks = {extra_blocks} }}")
        if "resnet18_slowed" not in text:
            raise SystemExit("the recipe does not name torchvision.models:resnet18: cannot slow it")
    if budget is not None:
        text = re.sub(r"(?m)^time_budget_s = .*$", f"time_budget_s = {budget:g}", text)
    if variants is not None:
        text = re.sub(r"(?m)^variants = .*$", "variants = [" + ", ".join(f'"{v}"' for v in variants) + "]", text)
    if batch_sizes is not None:
        text = re.sub(r"(?m)^batch_sizes = .*$", f"batch_sizes = {batch_sizes}", text)
    if rounds is not None:
        text = re.sub(r"(?m)^\[measure\]$", f"[measure]\nrounds = {rounds}", text)
    return text


def run(recipe: Path, out: Path) -> float:
    if out.exists():
        shutil.rmtree(out)
    exe = Path(sys.executable).with_name("autotune")
    t0 = time.monotonic()
    proc = subprocess.run([str(exe), "run", str(recipe), "--out", str(out), "--no-progress"], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"autotune run {recipe} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return time.monotonic() - t0


def compare(a: Path, b: Path, threshold: str, rerun: int = 0) -> dict[str, Any]:
    exe = Path(sys.executable).with_name("autotune")
    extra = ["--rerun", str(rerun)] if rerun else []
    proc = subprocess.run([str(exe), "compare", str(a), str(b), "--json", "--threshold", threshold, *extra],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"autotune compare failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout))


def show(title: str, data: dict[str, Any]) -> None:
    print(f"\n{title}: {data['sources']}")
    for r in data["rows"]:
        ci = r["throughput_ratio_ci"]
        ci_text = f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "no CI"
        print(f"  {r['label']:<24} {r['source']:<9} B/A {r['throughput_ratio']:.3f} ({ci_text})  {r['verdict']}")
    print(f"  regressions: {data['regressions'] or 'none'}")
    again = data.get("rerun")
    if again:
        ci = again["ci"]
        rounds = ", ".join(f"{x:.1f}/{y:.1f}" for x, y in zip(again["a_throughput"], again["b_throughput"],
                                                               strict=True))
        print(f"  re-run side by side ({again['rounds']} rounds): {again['a']} vs {again['b']}: "
              f"B/A {again['ratio']:.3f} ({ci[0]:.3f}-{ci[1]:.3f})  {again['verdict']}  [A/B per round: {rounds}]")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "quickstart.toml")
    p.add_argument("--out", type=Path, default=ROOT / "bench-out" / "compare")
    p.add_argument("--budget", type=float, default=None, help="time_budget_s of each run (default: the recipe's)")
    p.add_argument("--variants", default=None, help="comma-separated variants (default: the recipe's)")
    p.add_argument("--batch-sizes", default=None, help="comma-separated batch sizes (default: the recipe's)")
    p.add_argument("--rounds", type=int, default=None, help="measure.rounds of the showdown (default: the recipe's)")
    p.add_argument("--threshold", default="5%")
    p.add_argument("--extra-blocks", type=int, default=1,
                   help="BasicBlocks added to the slowed model (1: ~12.7%% more multiply-adds, about 10%% slower)")
    p.add_argument("--rerun", type=int, default=5,
                   help="rounds of `compare --rerun` (the artifacts side by side; it decides); 0: reports only")
    p.add_argument("--reuse", action="store_true", help="keep the run directories already in --out (no new runs)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()

    base = args.recipe.read_text()
    variants = args.variants.split(",") if args.variants else None
    batches = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else None
    args.out.mkdir(parents=True, exist_ok=True)
    outs: dict[str, Path] = {}
    walls: dict[str, float] = {}
    for name, slowed in (("A", False), ("S", True), ("A2", False)):
        recipe = args.out / f"{name}.toml"
        recipe.write_text(recipe_text(base, name=f"compare-{name}", slowed=slowed, budget=args.budget,
                                      variants=variants, batch_sizes=batches, rounds=args.rounds,
                                      extra_blocks=args.extra_blocks))
        outs[name] = args.out / name
        print(f"run {name}{' (model slowed ~10%)' if slowed else ''} ...", flush=True)
        if args.reuse and (outs[name] / "report.json").exists():
            walls[name] = float("nan")
        else:
            walls[name] = run(recipe, outs[name])
        rec = json.loads((outs[name] / "report.json").read_text())["recommendation"]
        print(f"  {walls[name]:.0f} s: {rec['variant']}@{rec['batch_size']} {rec['throughput']:.1f}/s "
              f"({rec.get('throughput_source') or 'screen'})", flush=True)
    same = compare(outs["A"], outs["A2"], args.threshold, args.rerun)
    slow = compare(outs["A"], outs["S"], args.threshold, args.rerun)
    show("compare A A2 (same code)", same)
    show("compare A S (model slowed ~10%)", slow)
    if args.rerun:  # the side-by-side re-run decides (autotune.artifact_timing)
        ok1 = same["rerun"]["verdict"] != "regression"
        ok2 = slow["rerun"]["verdict"] == "regression"
        what = "the artifacts re-run side by side"
    else:
        fresh_slow = [r for r in slow["rows"] if r["source"] == "showdown"]
        ok1 = not same["regressions"]
        ok2 = bool(fresh_slow) and all(r["verdict"] == "regression" for r in fresh_slow)
        what = f"every fresh-process row, {len(fresh_slow)} row(s)"
    print(f"\ncriterion 1 (same code: no regression beyond {args.threshold}): {'PASS' if ok1 else 'FAIL'}")
    print(f"criterion 2 (slowed model flagged, {what}): {'PASS' if ok2 else 'FAIL'}")
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "same": same, "slowed": slow,
                                         "criteria": {"no_false_alarm": ok1, "slowdown_flagged": ok2}}, indent=2))
    return 0 if ok1 and ok2 else 1


if __name__ == "__main__":
    sys.exit(main())
