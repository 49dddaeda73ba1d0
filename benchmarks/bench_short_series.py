"""Short series: what the warmup analysis says of a measurement that its budget ended after 12-29 values.

A measurement of traffic (a data factory's batches of several shapes) takes whole passes over the batches per value,
so a pass of 15 calls at 7 ms is one value and a 3-s budget holds about 25 of them; a slow model's calls are one value
each, and a 3-s budget holds 15-30 of those too. The analysis wants a steady tail of 30 values (``min_steady``), so
every such measurement was called ``no_steady_state`` and its row marked "~ no steady state" with "the timings kept
drifting", though they had not had the chance (BERT-like keyword traffic, session 36: every row with fewer than 30
values, and only those).

Scored here, on data nobody tuned on:

* **real**: every labelled per-call trace of ``tests/data/real-traces`` (the corpus and its held-out captures), its
  first call dropped (the timing loop times it apart), cut into ``m`` consecutive blocks whose means are the values
  (``m`` = 12, 16, 20, 24 and 29), as a budget-ended measurement of passes would push them. A trace labelled steady
  (its late half's four window medians within 2% of their median) should be called steady, its steady median within
  5% of the label's reference (the late half's per-call median; block means carry the spikes, so not 2%); one
  labelled ``no_steady_state`` is reported, not scored (its late half wanders by the label's own definition).
* **synthetic**: ``autotune.traces.synthetic_trace`` of every shape at the seed below (picked once, 2026-11-28, never
  tuned on), n = 200-600 values, block means into ``m`` values as above. Steady shapes (flat, warmup) should be
  called steady with the mean within 2% of the oracle; ``no_steady_state`` and ``slowdown`` shapes should not be
  called a steady warmup (issue 31: >= 95% found).

    python benchmarks/bench_short_series.py [--count 40] [--seed S] [--real DIR]

The defaults are the development set (the constants were chosen looking at them); a held-out score takes another
``--seed`` and a fresh capture (``benchmarks/capture_traces.py --set heldout --out DIR``, then ``--real DIR``).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from autotune.core.warmup import analyze
from autotune.traces import SHAPES, load_trace, synthetic_trace

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "data" / "real-traces"
SEED = 20261128
SIZES = (12, 16, 20, 24, 29)


def blocks(x: np.ndarray, m: int) -> np.ndarray:
    """``x`` cut into ``m`` consecutive blocks (the last ones one longer where it does not divide), their means."""
    return np.array([float(b.mean()) for b in np.array_split(x, m)])


def real(root: Path, sizes: tuple[int, ...] = SIZES) -> dict[str, object]:
    rows: dict[int, list[bool]] = defaultdict(list)
    unlabelled: dict[int, list[str]] = defaultdict(list)
    for labels_path in sorted(root.rglob("labels.json")):
        labels = json.loads(labels_path.read_text())
        for name, meta in sorted(labels.items()):
            x = load_trace(labels_path.parent / name)[1:]
            for m in sizes:
                a = analyze(blocks(x, m))
                if meta["label"] != "steady":
                    unlabelled[m].append(a.classification)
                    continue
                ok = a.steady_median is not None and abs(a.steady_median / meta["reference"] - 1) <= 0.05
                rows[m].append(ok)
    out: dict[str, object] = {}
    for m in sizes:
        got = rows[m]
        print(f"real, {m:2d} values: steady and within 5%: {sum(got)}/{len(got)} ({sum(got) / len(got):.0%}); "
              f"labelled no_steady_state: {dict(sorted(_count(unlabelled[m]).items()))}")
        out[str(m)] = {"steady_within_5": sum(got), "of": len(got), "no_steady_labelled": _count(unlabelled[m])}
    return out


def _count(items: list[str]) -> dict[str, int]:
    c: dict[str, int] = defaultdict(int)
    for i in items:
        c[i] += 1
    return dict(c)


def synthetic(count: int, seed: int, sizes: tuple[int, ...] = SIZES) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    steady_ok: dict[int, list[bool]] = defaultdict(list)
    caught: dict[int, list[bool]] = defaultdict(list)
    by_shape: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for i in range(count * len(SHAPES)):
        shape = SHAPES[i % len(SHAPES)]
        n = int(rng.integers(200, 601))
        trace = synthetic_trace(shape, n=n, level=float(np.exp(rng.uniform(np.log(1e-3), np.log(0.2)))),
                                cv=float(np.exp(rng.uniform(np.log(0.002), np.log(0.04)))),
                                phi=float(rng.uniform(0.0, 0.9)), seed=int(rng.integers(0, 2**31)),
                                skewed=bool(rng.random() < 0.3))
        for m in sizes:
            a = analyze(blocks(trace.values, m))
            if trace.cls in ("no_steady_state", "slowdown"):
                ok = a.classification in ("no_steady_state", "slowdown")
                caught[m].append(ok)
            else:
                start = trace.steady_start or 0
                oracle = float(np.mean(trace.values[start:]))
                ok = a.steady_mean is not None and abs(a.steady_mean / oracle - 1) <= 0.02
                steady_ok[m].append(ok)
            by_shape[(shape, m)].append(ok)
    out: dict[str, object] = {}
    for m in sizes:
        s, c = steady_ok[m], caught[m]
        print(f"synthetic, {m:2d} values: steady shapes steady within 2%: {sum(s)}/{len(s)} ({sum(s) / len(s):.0%}); "
              f"drift/slowdown/no-steady shapes caught: {sum(c)}/{len(c)} ({sum(c) / len(c):.0%})")
        out[str(m)] = {"steady_within_2": sum(s), "of_steady": len(s), "caught": sum(c), "of_drifting": len(c)}
    print("by shape (all sizes): " + "; ".join(
        f"{shape} {sum(v for m in sizes for v in by_shape[(shape, m)])}/{sum(len(by_shape[(shape, m)]) for m in sizes)}"
        for shape in SHAPES))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=40, help="synthetic traces per shape")
    ap.add_argument("--seed", type=int, default=SEED, help="the synthetic traces' seed")
    ap.add_argument("--real", type=Path, default=REAL, help="labelled per-call traces (every labels.json below)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sizes", type=lambda v: tuple(int(x) for x in v.split(",")), default=SIZES,
                    help="values per series, comma-separated (default 12,16,20,24,29; 32,40,48,56 score the series "
                         "between a short one and two minimum tails)")
    args = ap.parse_args()
    result = {"real": real(args.real, args.sizes), "synthetic": synthetic(args.count, args.seed, args.sizes)}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
