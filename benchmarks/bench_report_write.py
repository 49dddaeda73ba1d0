"""What writing a run's report costs: report.json alone against the full set (json, md, html, plots).

Why: a run writes its report as it goes (``autotune.report.assemble.RunDocument``): report.json after every
boundary, trial and showdown round, the full set when a phase ends. This measures both writes on a real
report.json (a finished run's) grown to ``--candidates`` rows by copying its rows with fresh trial numbers, so the
choice (json per trial, the full set per phase) rests on numbers.

Run: .venv/bin/python benchmarks/bench_report_write.py REPORT.json [--candidates 10,50,200] [--repeats 5]
     (seconds; REPORT.json: any finished run's, e.g. OUT/report.json of examples' quickstart)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.report import load_report, write_reports
from autotune.report.write import write_report_json


def grown(doc: dict[str, Any], n: int) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    rows = doc["candidates"]
    out["candidates"] = [{**copy.deepcopy(rows[i % len(rows)]), "trial": i} for i in range(n)]
    out["pareto"] = []
    return out


def timed(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path)
    parser.add_argument("--candidates", default="10,50,200")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = dict(load_report(args.report))
    print(f"{'candidates':>10}  {'json (s)':>9}  {'full (s)':>9}  {'json bytes':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.candidates.split(",")):
            doc = grown(base, n)
            json_s = timed(lambda d=doc: write_report_json(d, tmp), args.repeats)
            full_s = timed(lambda d=doc: write_reports(d, tmp), args.repeats)
            size = (Path(tmp) / "report.json").stat().st_size
            print(f"{n:>10}  {json_s:>9.3f}  {full_s:>9.3f}  {size:>10,}")


if __name__ == "__main__":
    main()
