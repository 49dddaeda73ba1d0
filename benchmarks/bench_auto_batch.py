"""Benchmark: ``batch_sizes = "auto"`` on a CPU finishes, and recommends as well as the best fixed batch list.

Issue 22's check. Runs the real CLI twice on ``recipes/timm_cnn_auto.toml`` (timm mobilenetv3_small_100 on
96x96 images, seven variants; copied with the fields below set):

1. ``autotune run`` with ``batch_sizes = "auto"``: its wall time (the whole run, validation, boundaries,
   search, showdown and artifact included) against 1.5x ``search.time_budget_s``; each variant's boundary
   (what stopped it: throughput, probe_cap, time_cap or memory; the batch probed to; the probes' seconds);
2. ``autotune run`` with a fixed list (``--fixed``, default 1,8,32,64,128,256) and the same budget: its
   recommendation is the best fixed-batch configuration;
3. both recommendations measured side by side (``--rounds`` alternating ``autotune measure`` calls, fresh
   processes each), their median throughputs compared: the auto pick is "within 3%" when
   auto / fixed >= 0.97.

Run it on a quiet machine (nothing else running). The full check (about 15 minutes on 2 cores)::

    .venv/bin/python benchmarks/bench_auto_batch.py

A small run that proves the script works (two variants, 60 s budgets, one round; about 5 minutes)::

    .venv/bin/python benchmarks/bench_auto_batch.py --variants eager,onnx --time-budget 60 --fixed 1,8,32 \\
        --rounds 1 --out bench-out/auto-batch-small
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "timm_cnn_auto.toml"
TOLERANCE = 0.03
WALL_FACTOR = 1.5


def recipe_copy(out: Path, *, name: str, batch_sizes: str, variants: list[str] | None) -> Path:
    """The shipped recipe with ``batch_sizes`` (TOML text) and, if given, the variants replaced."""
    text = RECIPE.read_text()
    text = re.sub(r'^name = ".*"$', f'name = "{name}"', text, count=1, flags=re.M)
    text = re.sub(r"^batch_sizes = .*$", f"batch_sizes = {batch_sizes}", text, count=1, flags=re.M)
    if variants:
        text = re.sub(r"^variants = .*$", f"variants = {json.dumps(variants)}", text, count=1, flags=re.M)
    text = text.replace('"data.py:', f'"{RECIPE.parent / "data.py"}:')  # the copy lives elsewhere
    path = out / f"{name}.toml"
    path.write_text(text)
    return path


def cli(*args: str) -> tuple[int, float, str, str]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, cwd=ROOT)
    return proc.returncode, time.monotonic() - t0, proc.stdout, proc.stderr


def run(recipe: Path, out: Path, budget: float | None) -> tuple[dict[str, Any], float, str]:
    extra = ["--time-budget", f"{budget:g}"] if budget is not None else []
    code, wall, _, err = cli("run", str(recipe), "--out", str(out), "--no-progress", *extra)
    if code not in (0, 1) or not (out / "report.json").exists():  # 1: no recommendation (said below)
        raise SystemExit(f"autotune run {recipe} failed ({code}):\n{err[-3000:]}")
    return json.loads((out / "report.json").read_text()), wall, err


def throughput(recipe: Path, variant: str, batch: int) -> float:
    code, _, out, err = cli("measure", str(recipe), "--variant", variant, "--batch-size", str(batch), "--json")
    if code != 0:
        raise SystemExit(f"autotune measure {variant}@{batch} failed ({code}):\n{err[-2000:]}")
    return float(json.loads(out)["throughput"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="", help="comma-separated (default: the recipe's seven)")
    p.add_argument("--time-budget", type=float, default=None, help="both runs' time_budget_s (default: the recipe's)")
    p.add_argument("--fixed", default="1,8,32,64,128,256", help="the fixed batch list of the comparison run")
    p.add_argument("--rounds", type=int, default=3, help="side-by-side measurements of each recommendation")
    p.add_argument("--out", type=Path, default=ROOT / "bench-out" / "auto-batch")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    variants = [v for v in args.variants.split(",") if v] or None
    fixed = [int(b) for b in args.fixed.split(",")]

    auto_recipe = recipe_copy(args.out, name="auto", batch_sizes='"auto"', variants=variants)
    fixed_recipe = recipe_copy(args.out, name="fixed", batch_sizes=json.dumps(fixed), variants=variants)
    for d in ("auto", "fixed"):
        subprocess.run(["rm", "-rf", str(args.out / d)], check=True)  # fresh studies: nothing reused

    auto_doc, auto_wall, auto_err = run(auto_recipe, args.out / "auto", args.time_budget)
    budget = float(auto_doc["recipe"]["search"]["time_budget_s"])
    probe_lines = [line for line in auto_err.splitlines() if " probe b=" in line]
    verdict = "ok" if auto_wall <= WALL_FACTOR * budget else "OVER"
    print(f"auto run: {auto_wall:.0f} s wall for time_budget_s = {budget:g} "
          f"({auto_wall / budget:.2f}x; target <= {WALL_FACTOR}x: {verdict})"
          f"; {len(probe_lines)} probe lines printed with --no-progress")
    for variant, b in (auto_doc.get("batch_boundary") or {}).items():
        probes = b.get("probes") or []
        print(f"  {variant:9s} {b.get('stopped_by', '?'):11s} up to {b.get('max_batch_size')}, usable "
              f"{b.get('usable_max_batch_size')}; {len(probes)} probes, {sum(p['seconds'] for p in probes):.0f} s")
    fixed_doc, fixed_wall, _ = run(fixed_recipe, args.out / "fixed", args.time_budget)
    picks = {"auto": auto_doc["recommendation"], "fixed": fixed_doc["recommendation"]}
    if picks["auto"] is None or picks["fixed"] is None:
        print(f"no recommendation: auto {picks['auto']}, fixed {picks['fixed']}")
        return 1
    print(f"fixed run ({fixed}): {fixed_wall:.0f} s wall")
    for label, rec in picks.items():
        print(f"  {label:5s} pick: {rec['variant']}@{rec['batch_size']} ({rec['throughput']:.1f}/s in its run)")
    samples: dict[str, list[float]] = {"auto": [], "fixed": []}
    for _ in range(args.rounds):  # alternating: drift on the machine hits both alike
        for label, recipe in (("auto", auto_recipe), ("fixed", fixed_recipe)):
            samples[label].append(throughput(recipe, picks[label]["variant"], int(picks[label]["batch_size"])))
    auto_t, fixed_t = statistics.median(samples["auto"]), statistics.median(samples["fixed"])
    ratio = auto_t / fixed_t
    print(f"side by side ({args.rounds} rounds): auto {auto_t:.1f}/s, fixed {fixed_t:.1f}/s, ratio {ratio:.3f} "
          f"({'within' if ratio >= 1 - TOLERANCE else 'NOT within'} {TOLERANCE:.0%})")
    summary = {"auto_wall_s": auto_wall, "time_budget_s": budget, "fixed_wall_s": fixed_wall, "picks": picks,
               "samples": samples, "ratio": ratio, "probe_lines": probe_lines,
               "boundaries": {v: {k: b.get(k) for k in ("stopped_by", "max_batch_size", "usable_max_batch_size",
                                                          "summary")}
                              for v, b in (auto_doc.get("batch_boundary") or {}).items()}}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    ok = auto_wall <= WALL_FACTOR * budget and ratio >= 1 - TOLERANCE
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
