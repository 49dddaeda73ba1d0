"""The time budget as a promise (issue 32): whole ``autotune run`` wall times against ``--time-budget``, quiet and
beside a busy neighbour (a process spinning one core throughout), with what each phase took and what was cut.

    .venv/bin/python benchmarks/bench_budget.py [--recipe recipes/quickstart.toml] [--budgets 20,60]
                                                [--neighbour both|on|off] [--out /tmp/bench-budget]

The promise (``autotune.core.budget``): the run ends within ``time_budget_s`` + 25%, everything but a
``[serving]`` stage included. Each run's wall time is the process's, from start to exit; the phases are the
report's (``budget.phases``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPIN = "while True:\n    pass\n"


def one_run(recipe: Path, budget: float, out: Path, *, neighbour: bool) -> dict[str, object]:
    shutil.rmtree(out, ignore_errors=True)
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if neighbour else None
    try:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "autotune", "run", str(recipe), "--time-budget", f"{budget:g}",
                               "--out", str(out), "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                              check=False)
        wall = time.monotonic() - t0
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    doc = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    plan = doc.get("budget") or {}
    check = doc.get("artifact_check") or {}
    cut = [n for n in doc.get("notes") or [] if "budget" in n]
    return {"budget": budget, "neighbour": neighbour, "exit": proc.returncode, "wall": wall,
            "promise": budget * 1.25, "phases": plan.get("phases") or {}, "reserve": plan.get("artifact_reserve_s"),
            "measured": (doc.get("search") or {}).get("measured_this_run"),
            "check": f"{check.get('status')}, {len(check.get('throughputs') or [])} rounds" if check else "none",
            "cut": cut, "stderr": proc.stderr[-400:] if proc.returncode else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "quickstart.toml"))
    ap.add_argument("--budgets", default="20,60")
    ap.add_argument("--neighbour", choices=("both", "on", "off"), default="both")
    ap.add_argument("--out", default="/tmp/bench-budget")
    args = ap.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    sides = {"both": (False, True), "on": (True,), "off": (False,)}[args.neighbour]
    rows = []
    for budget in budgets:
        for neighbour in sides:
            row = one_run(Path(args.recipe), budget, Path(args.out) / f"b{budget:g}-{'busy' if neighbour else 'quiet'}",
                          neighbour=neighbour)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print("| `--time-budget` | neighbour | wall | promise (1.25x) | held | phases (s) | artifact reserve | "
          "candidates | artifact check | what was cut |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        phases = ", ".join(f"{k} {v:.0f}" for k, v in r["phases"].items())  # type: ignore[attr-defined]
        cut = "; ".join(str(c)[:160] for c in r["cut"]) or "nothing"  # type: ignore[attr-defined]
        held = "yes" if float(r["wall"]) <= float(r["promise"]) else "**no**"  # type: ignore[arg-type]
        print(f"| {r['budget']:g} s | {'1 core spinning' if r['neighbour'] else 'none'} | {r['wall']:.1f} s | "
              f"{r['promise']:.0f} s | {held} | {phases} | {r['reserve']} s | {r['measured']} | {r['check']} | "
              f"{cut} |")


if __name__ == "__main__":
    main()
