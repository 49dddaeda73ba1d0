"""Issue 31's coverage question on the real traces: does a 95% interval of the steady *median* cover the late-half
median of plainly steady traces? (The CI `autotune warmup` prints is labelled "of the mean"; throughput is samples
over mean time, and right-skewed per-call times put the mean above the median.)

    python benchmarks/bench_median_ci.py tests/data/real-traces tests/data/real-traces/contended

"Plainly steady" (issue 31): the medians of the trace's third and fourth quarters within 5%. For each such trace
that the detector calls steady, over its steady segment:

- block bootstrap: the percentile interval of the circular block bootstrap of the median, block length from the
  lag-1 autocorrelation (``core.stats.bootstrap_percentiles``, the method the serving percentiles use);
- batch medians: the median +- t(K-1) x sd(K block medians) / sqrt(K), K = 8 (the detector's WANDER_BLOCKS,
  fixed before looking);
- the printed CI of the mean, against the same reference, for comparison.

No constant here is fitted to the traces: both intervals are scored as they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.core.stats import bootstrap_percentiles, replicate_interval, t_quantile_975
from autotune.core.warmup import analyze
from autotune.traces import load_trace

BATCHES = 8


def batch_median_ci(t: np.ndarray, k: int = BATCHES) -> tuple[float, float]:
    meds = np.array([np.median(b) for b in np.array_split(t, k)])
    half = t_quantile_975(k - 1) * float(meds.std(ddof=1)) / np.sqrt(k)
    m = float(np.median(t))
    return m - half, m + half


def score(folder: Path) -> None:
    n = 0
    covered = {"block bootstrap of the median": 0, f"batch medians, K={BATCHES}": 0, "printed CI of the mean": 0}
    widths: dict[str, list[float]] = {k: [] for k in covered}
    for path in sorted(folder.glob("*.txt")):
        x = np.asarray(load_trace(path), dtype=float)
        size = len(x)
        if abs(np.median(x[size // 2:3 * size // 4]) / np.median(x[3 * size // 4:]) - 1) > 0.05:
            continue  # not plainly steady
        a = analyze(x)
        if a.steady_start is None:
            continue
        n += 1
        ref = float(np.median(x[size // 2:]))
        t = x[a.steady_start:]
        intervals = {
            "block bootstrap of the median": replicate_interval(bootstrap_percentiles(t, 50, n_boot=2000, seed=1)),
            f"batch medians, K={BATCHES}": batch_median_ci(t),
            "printed CI of the mean": a.ci,
        }
        for name, (lo, hi) in intervals.items():
            covered[name] += int(lo <= ref <= hi)
            widths[name].append((hi - lo) / 2 / float(np.median(t)))
    print(f"{folder}: {n} plainly steady traces called steady")
    for name, c in covered.items():
        print(f"  {name:32s} covers the late-half median on {c}/{n} ({c / max(n, 1):.0%}), "
              f"half-width median {100 * float(np.median(widths[name])):.2f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    for folder in ap.parse_args().folders:
        score(folder)


if __name__ == "__main__":
    main()
