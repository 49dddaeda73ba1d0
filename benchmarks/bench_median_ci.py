"""Issue 31's coverage question on the real traces: does the printed 95% interval of the steady median cover the
late-half median of plainly steady traces?

    python benchmarks/bench_median_ci.py tests/data/real-traces tests/data/real-traces/contended \
        tests/data/real-traces/heldout

"Plainly steady" (issue 31): the medians of the trace's third and fourth quarters within 5%. Per folder:

- called steady with the steady median within 5% of the late-half median (issue 31's first measure);
- for each plainly steady trace the detector calls steady, over its steady segment, whether each interval covers
  the late-half median:
  - printed: ``WarmupAnalysis.median_ci``, what ``autotune warmup`` prints (batch medians over independent
    batches, ``core.stats.batch_statistics_ci``);
  - block bootstrap of the median, block length from the lag-1 autocorrelation (``core.stats``, as the serving
    percentiles), and batch medians at a fixed K = 8, for comparison;
  - the printed CI of the mean, against the same reference;
- the same coverage on the traces whose steady state begins in the first half: where it begins later, the late-half
  median mixes in calls the detector called transient, and is not the steady level the interval is of.

No constant here is fitted to the traces. ``heldout/`` was captured (``capture_traces.py --set heldout``) after the
interval was chosen on the first two folders and on synthetic series, and scored once. ``heldout3/`` (session 31)
was captured after the wander's checks were changed on the other four folders (which are a development set since),
and scored once.
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

FIXED_K = 8


def batch_median_ci(t: np.ndarray, k: int = FIXED_K) -> tuple[float, float]:
    meds = np.array([np.median(b) for b in np.array_split(t, k)])
    half = t_quantile_975(k - 1) * float(meds.std(ddof=1)) / np.sqrt(k)
    m = float(np.median(t))
    return m - half, m + half


def score(folder: Path) -> None:
    plain = within = 0
    names = ("printed median CI (4 batch medians)", "block bootstrap of the median",
             f"batch medians, K={FIXED_K}", "printed CI of the mean")
    covered = {k: [0, 0] for k in names}  # [all, early start]
    widths: dict[str, list[float]] = {k: [] for k in names}
    n = early = 0
    for path in sorted(folder.glob("*.txt")):
        x = np.asarray(load_trace(path), dtype=float)
        size = len(x)
        if abs(np.median(x[size // 2:3 * size // 4]) / np.median(x[3 * size // 4:]) - 1) > 0.05:
            continue  # not plainly steady
        plain += 1
        a = analyze(x)
        ref = float(np.median(x[size // 2:]))
        if a.steady_start is None or a.steady_median is None:
            continue
        within += int(abs(a.steady_median / ref - 1) <= 0.05)
        n += 1
        first_half = a.steady_start <= size // 2
        early += int(first_half)
        t = x[a.steady_start:]
        intervals = {
            names[0]: a.median_ci,
            names[1]: replicate_interval(bootstrap_percentiles(t, 50, n_boot=2000, seed=1)),
            names[2]: batch_median_ci(t),
            names[3]: a.ci,
        }
        for name, ci in intervals.items():
            if ci is None:
                continue
            lo, hi = ci
            hit = int(lo <= ref <= hi)
            covered[name][0] += hit
            covered[name][1] += hit * int(first_half)
            widths[name].append((hi - lo) / 2 / float(np.median(t)))
    print(f"{folder}: {plain} plainly steady traces; called steady with the median within 5% of the late-half "
          f"median: {within}/{plain} ({within / max(plain, 1):.0%})")
    print(f"  coverage of the late-half median, {n} called steady ({early} steady from the first half):")
    for name, (c, ce) in covered.items():
        print(f"  {name:42s} {c}/{n} ({c / max(n, 1):.0%}); steady from the first half {ce}/{early} "
              f"({ce / max(early, 1):.0%}); half-width median {100 * float(np.median(widths[name])):.2f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    for folder in ap.parse_args().folders:
        score(folder)


if __name__ == "__main__":
    main()
