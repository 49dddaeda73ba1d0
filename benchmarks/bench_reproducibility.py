"""Does ``autotune run`` recommend the same thing twice? And beside a busy neighbour?

Runs the real CLI (``autotune run RECIPE``, as ``make demo`` does) several times in a row, each
into its own output folder, optionally with a busy process that spins on one core for
``--busy-seconds`` starting ``--busy-at`` seconds into one of the runs. Then it checks the two
criteria of the trustworthy-numbers issue:

1. **Same pick or a covering tie**: every run recommends the same configuration, or every
   run's tie set (the finalists within the equivalence margin of its leader; just the pick
   when there was no tie) contains every run's pick.
2. **Cross-run value**: each run's pick, as measured in each other run, is within 3% of that
   other run's best. "As measured in run i" is the paired showdown ratio to run i's leader when
   the pick was one of run i's finalists, else its search throughput over run i's best search
   throughput (the weaker, unpaired number; the table says which one was used).

    python benchmarks/bench_reproducibility.py [--recipe recipes/quickstart.toml] [--runs 3]
        [--busy-run 2 --busy-at 40 --busy-seconds 40] [--out bench-out/repro] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.03


def spin(seconds: float) -> None:
    """Burn one core: the busy neighbour."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def run_once(recipe: Path, out: Path, *, busy_at: float | None, busy_seconds: float) -> tuple[dict[str, Any], float]:
    exe = Path(sys.executable).with_name("autotune")
    cmd = [str(exe), "run", str(recipe), "--out", str(out), "--no-progress"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    neighbour: multiprocessing.Process | None = None
    timer = None
    if busy_at is not None:
        def start() -> None:
            nonlocal neighbour
            neighbour = multiprocessing.Process(target=spin, args=(busy_seconds,), daemon=True)
            neighbour.start()
            print(f"  busy neighbour started at {time.monotonic() - t0:.0f} s for {busy_seconds:g} s", flush=True)
        timer = threading.Timer(busy_at, start)
        timer.start()
    output, _ = proc.communicate()
    if timer is not None:
        timer.cancel()
    if neighbour is not None:
        neighbour.join()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"autotune run failed with exit code {proc.returncode}:\n{output[-3000:]}")
    return json.loads((out / "report.json").read_text()), wall


def key(row: dict[str, Any]) -> str:
    return f"{row['variant']}@{row['batch_size']}"


def tie_set(doc: dict[str, Any]) -> set[str]:
    verdict = (doc.get("showdown") or {}).get("verdict")
    if not verdict:
        return {key(doc["recommendation"])}
    return {s["key"] for s in verdict["standings"] if s["tied"]}


def value_in(doc: dict[str, Any], pick: str) -> tuple[float | None, str]:
    """The pick's value relative to the run's best, and how it was obtained."""
    verdict = (doc.get("showdown") or {}).get("verdict")
    if verdict:
        for s in verdict["standings"]:
            if s["key"] == pick:
                return float(s["ratio"]), "paired"
    ok = [r for r in doc["candidates"] if r["status"] == "ok" and r.get("feasible")]
    best = max((r["throughput"] for r in ok), default=None)
    mine = [r["throughput"] for r in ok if key(r) == pick]
    if not best or not mine:
        return None, "not measured"
    return float(mine[0] / best), "search"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "quickstart.toml")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--busy-run", type=int, default=None, help="1-based run that gets the busy neighbour")
    p.add_argument("--busy-at", type=float, default=40.0, help="seconds into that run")
    p.add_argument("--busy-seconds", type=float, default=40.0)
    p.add_argument("--out", type=Path, default=ROOT / "bench-out" / "repro")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()

    docs = []
    for i in range(1, args.runs + 1):
        out = args.out / f"run{i}"
        if out.exists():
            import shutil

            shutil.rmtree(out)
        busy = args.busy_at if args.busy_run == i else None
        print(f"run {i}/{args.runs}{' (busy neighbour)' if busy is not None else ''} ...", flush=True)
        doc, wall = run_once(args.recipe, out, busy_at=busy, busy_seconds=args.busy_seconds)
        rec = doc["recommendation"]
        verdict = (doc.get("showdown") or {}).get("verdict") or {}
        print(f"  {wall:.0f} s: pick {key(rec)} {rec['throughput']:.1f}/s, leader {verdict.get('leader')}, "
              f"tie set {sorted(tie_set(doc))}, stops {doc['search'].get('measurements_stopped_by')}", flush=True)
        docs.append(doc)

    picks = [key(d["recommendation"]) for d in docs]
    same = len(set(picks)) == 1
    covering = all(set(picks) <= tie_set(d) for d in docs)
    print()
    print(f"picks: {picks}")
    print(f"criterion 1 (same pick, or every tie set contains every pick): "
          f"{'PASS' if same or covering else 'FAIL'} (same: {same}, covering tie: {covering})")
    rows = []
    worst = 1.0
    for j, pick in enumerate(picks, start=1):
        for i, doc in enumerate(docs, start=1):
            if i == j:
                continue
            value, how = value_in(doc, pick)
            rows.append({"pick_of_run": j, "pick": pick, "measured_in_run": i, "value_vs_best": value, "by": how})
            if value is not None:
                worst = min(worst, value)
            print(f"  run {j}'s pick {pick} in run {i}: "
                  f"{'-' if value is None else f'{value:.3f}'} of that run's best ({how})")
    ok2 = all(r["value_vs_best"] is not None and r["value_vs_best"] >= 1.0 - TOLERANCE for r in rows)
    print(f"criterion 2 (each pick within {TOLERANCE:.0%} of every other run's best): {'PASS' if ok2 else 'FAIL'} "
          f"(worst {worst:.3f})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"picks": picks, "same": same, "covering_tie": covering, "cross": rows,
                                         "busy_run": args.busy_run, "cpu_count": os.cpu_count()}, indent=2))
    return 0 if (same or covering) and ok2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
