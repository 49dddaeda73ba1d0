"""Benchmark: probes used by the batch-boundary search vs two common methods, on a fake probe.

Run: ``.venv/bin/python benchmarks/bench_batch.py`` (``--trials N``, ``--seed S``, ``--noise X``).
Takes about a second; no torch, no model runs.

Each trial draws a boundary log-uniformly across granularity..65,536 (memory boundaries span
orders of magnitude, so every scale gets the same weight), a memory limit of 1-80 GiB, a fixed
part (weights, workspace) of 2-60% of it, and the per-sample bytes that put the boundary there;
fitting probes report peaks with 1% normal noise on the per-sample part (autotune.batch.
SyntheticProbe). Methods, all run on the same trials:

* ``model-guided``: autotune.batch.find_max_batch_size, given the limit or not;
* ``double+bisect``: double from the granularity until a failure, then bisect (PyTorch
  Lightning's ``binsearch`` mode, without its 25-trial cap, starting at the granularity);
* ``+1 until OOM``: the tutorial method, one granularity step at a time from the smallest
  batch. Its count is computed, not run (the answer / granularity, plus the failing probe
  unless the answer is the upper bound): up to 65,537 probes a trial, exact by construction.

Target: the exact boundary every time, and median probes <= 8 with a known limit. Without the
limit no method can use memory (fit/fail bits are the only information about where the limit
is), so the table prints the entropy of the boundary distribution: no method's mean can be lower.
A second table shows how the model-guided search degrades as the fake's noise grows and when
the true boundary sits below the model's (fragmentation).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from tabulate import tabulate

from autotune.batch import ProbeResult, SyntheticProbe, find_max_batch_size

MAX_BATCH = 65536
GIB = 1024**3
HEADERS = ["scenario", "method", "median probes", "p90", "max", "mean", "exact"]


@dataclass(frozen=True)
class Trial:
    probe: SyntheticProbe
    expected: int


def draw_trial(seed: int, *, granularity: int, noise: float, fragmentation: float) -> Trial:
    rng = random.Random(f"trial:{seed}:{granularity}")
    boundary = int(math.exp(rng.uniform(math.log(granularity), math.log(MAX_BATCH + 1))))
    boundary = min(max(boundary, granularity), MAX_BATCH)
    limit = rng.uniform(1, 80) * GIB
    intercept = rng.uniform(0.02, 0.6) * limit
    position = rng.random()
    frag = rng.uniform(0, fragmentation)
    per_sample = (limit - intercept) / ((boundary + position) * (1 + frag))
    probe = SyntheticProbe(
        boundary=boundary,
        intercept_bytes=intercept,
        bytes_per_sample=per_sample,
        noise=noise,
        fragmentation=frag,
        position=position,
        seed=seed,
    )
    return Trial(probe=probe, expected=boundary // granularity * granularity)


def double_then_bisect(probe: Callable[[int], ProbeResult], *, granularity: int) -> tuple[int, int]:
    """Lightning-style binsearch on the granularity lattice; returns (answer, probes used)."""
    top = MAX_BATCH // granularity
    count = 0

    def fits(k: int) -> bool:
        nonlocal count
        count += 1
        return probe(k * granularity).fits

    if not fits(1):
        raise RuntimeError("the smallest batch does not fit")
    lo, hi = 1, top + 1
    while hi > top and lo < top:
        k = min(2 * lo, top)
        if fits(k):
            lo = k
        else:
            hi = k
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * granularity, count


def plus_one_count(expected: int, *, granularity: int) -> int:
    steps = expected // granularity
    return steps if steps == MAX_BATCH // granularity else steps + 1


def summarize(counts: list[int], exact: list[bool]) -> list[object]:
    ordered = sorted(counts)
    p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
    share = f"{100 * sum(exact) / len(exact):.0f}%"
    return [statistics.median(ordered), p90, ordered[-1], f"{statistics.mean(ordered):.1f}", share]


def boundary_entropy_bits(granularity: int) -> float:
    """Entropy of the lattice boundary floor(B / g) for the log-uniform B drawn above."""
    span = math.log(MAX_BATCH + 1) - math.log(granularity)
    masses: dict[int, float] = {}
    for b in range(granularity, MAX_BATCH + 1):
        mass = (math.log(b + 1) - math.log(b)) / span
        masses[b // granularity] = masses.get(b // granularity, 0.0) + mass
    return -sum(p * math.log2(p) for p in masses.values() if p > 0)


@dataclass(frozen=True)
class Scenario:
    rows: list[list[object]]
    model_guided: list[int]
    exact: bool


def run_scenario(
    trials: int, seed: int, *, granularity: int, known_limit: bool, noise: float, fragmentation: float
) -> Scenario:
    ours: list[int] = []
    ours_exact: list[bool] = []
    base: list[int] = []
    base_exact: list[bool] = []
    plus: list[int] = []
    for i in range(trials):
        trial = draw_trial(seed + i, granularity=granularity, noise=noise, fragmentation=fragmentation)
        limit = trial.probe.memory_limit_bytes if known_limit else None
        result = find_max_batch_size(trial.probe, granularity=granularity, memory_limit_bytes=limit)
        ours.append(len(result.probes))
        ours_exact.append(result.max_batch_size == trial.expected)
        answer, count = double_then_bisect(trial.probe, granularity=granularity)
        base.append(count)
        base_exact.append(answer == trial.expected)
        plus.append(plus_one_count(trial.expected, granularity=granularity))
    name = f"g={granularity}, limit {'known' if known_limit else 'unknown'}"
    rows = [
        [name, "model-guided", *summarize(ours, ours_exact)],
        [name, "double+bisect", *summarize(base, base_exact)],
        [name, "+1 until OOM (computed)", *summarize(plus, [True] * len(plus))],
    ]
    return Scenario(rows=rows, model_guided=ours, exact=all(ours_exact) and all(base_exact))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=0.01, help="relative peak noise (default 0.01)")
    args = parser.parse_args()

    rows: list[list[object]] = []
    ok = True
    for granularity in (1, 8):
        for known_limit in (True, False):
            scenario = run_scenario(
                args.trials,
                args.seed,
                granularity=granularity,
                known_limit=known_limit,
                noise=args.noise,
                fragmentation=0.0,
            )
            rows.extend(scenario.rows)
            ok = ok and scenario.exact
            if known_limit:
                ok = ok and statistics.median(scenario.model_guided) <= 8
    print(
        f"batch boundary search: {args.trials} seeded boundaries per scenario, log-uniform in "
        f"granularity..65536, peak noise {args.noise:.1%}"
    )
    print(tabulate(rows, headers=HEADERS))
    entropy = ", ".join(f"g={g}: {boundary_entropy_bits(g):.1f}" for g in (1, 8))
    print(f"entropy of the boundary (bits; the least mean probes without memory information): {entropy}")
    print(f"target (exact every time; median probes <= 8 with a known limit): {'PASS' if ok else 'FAIL'}")

    print("\nmodel-guided search, g=1, limit known, as the fake gets harder:")
    sensitivity: list[list[object]] = []
    for noise, fragmentation in ((0.0, 0.0), (0.001, 0.0), (0.01, 0.0), (0.03, 0.0), (0.01, 0.05)):
        scenario = run_scenario(
            args.trials, args.seed, granularity=1, known_limit=True, noise=noise, fragmentation=fragmentation
        )
        stats = scenario.rows[0][2:]
        sensitivity.append([f"{noise:.1%}", f"up to {fragmentation:.0%}", *stats])
    headers = ["peak noise", "fragmentation", *HEADERS[2:]]
    print(tabulate(sensitivity, headers=headers))


if __name__ == "__main__":
    main()
