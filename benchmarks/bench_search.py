"""Replay recorded landscapes: how fast does each search find (within 3%) what trying everything finds?

A landscape (``benchmarks/landscapes/*.json``, made by ``benchmarks/record_landscape.py``) holds every
(variant, batch) of a space measured with the tool's real measurement, and what each cost. The replay
treats the recorded values as the truth and the recorded costs as the price of a measurement:

- measuring a point at fidelity ``f`` (a share of the recorded measurement time) costs
  ``build + first call + gate + f x measure seconds`` and returns ``value x exp(N(0, sd/sqrt(f)))``, where
  ``sd`` is the recorded 95% CI's half-width on the log scale / 1.96 (the noise of a full measurement);
  the CI returned is the one that noise implies; a latency objective gets the same relative noise on its
  percentile, and feasibility (the latency SLO, the memory limit) is judged on the noisy value;
- a point recorded failed/rejected makes the variant dead (the tool prunes its other batches for free);
  an ``oom`` point is a failure at that batch.

Methods, each given the same seeds:

- ``exhaustive``: every point at full fidelity in the recorder's order (variant-major, batch ascending);
  its total cost is the denominator of every "fraction of exhaustive cost";
- ``random``: every point at full fidelity in a random order (random search without replacement);
- ``tpe``: today's default before this benchmark: ``autotune.study.make_sampler`` (TPE, multivariate,
  5 startup trials, seeded) over the pre-crossed categoricals ``variant`` x ``batch_size`` in an in-memory
  study, with the priors ``autotune.study.Search`` enqueues (every variant at its largest batch for
  throughput, its smallest for latency), a repeat told again for free and an unmeasured point enqueued
  after 3 repeats, as ``Search`` does;
- ``tpe-dims``: the same TPE, priors and repeat rule, but over separate parameters, one per dimension that
  varies in the landscape (compiler, compile mode, precision, memory format, threads) and ``batch_size``,
  so the sampler can learn per dimension (issue 11 asks whether it should). A proposed combination that is
  not in the space (none here: the recorded spaces are full products) is told as pruned, like a batch above
  a variant's boundary;
- ``bracket``: :class:`autotune.study.bracket.BracketSearch` (screens at 25% fidelity, races contenders up).

Each method's recommendation after every measurement is the tool's rule (the feasible point with the
best lower 95% bound). Its regret is ``1 - true(pick) / true(best)`` (``1 - best / pick`` for latency),
1.0 while nothing feasible was found. Reported per landscape: the median and P90 over seeds of the
cost to reach regret <= 3% and stay there (as a fraction of the exhaustive cost; a method that never
gets there counts as infinity), and the median regret at 10/20/30/50% of the exhaustive cost.

Seeds: the strategy's constants were set looking at seeds 0-9 only (``--seeds 0:10``); the numbers in
BENCHMARKS.md are seeds 1000-1049 (the default), never used while tuning.

Usage::

    python benchmarks/bench_search.py [--landscapes benchmarks/landscapes/*.json] [--seeds 1000:1050]
                                      [--methods exhaustive,random,tpe,tpe-dims,bracket] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.study.bracket import Arm, BracketSearch  # noqa: E402

REGRET_TARGET = 0.03
#: An interior point better than both batch neighbours by more than this factor is an isolated outlier.
SPIKE = 1.5
FRACTIONS = (0.1, 0.2, 0.3, 0.5)
_Z95 = 1.959964


@dataclass(frozen=True)
class Point:
    variant: str
    batch: int
    status: str
    value: float | None  # the objective's value: throughput or the latency percentile (ms)
    sd: float  # log-scale sd of a full measurement
    feasible: bool
    latency: float | None
    memory: int | None
    fixed_cost: float  # build + first call + gate (seconds)
    measure_cost: float  # measurement seconds at full fidelity
    dims: dict[str, Any]


@dataclass
class Landscape:
    name: str
    objective: str
    max_latency_ms: float | None
    latency_percentile: str
    max_memory: int | None
    points: dict[tuple[str, int], Point]
    variants: list[str]
    batches: dict[str, list[int]]

    @property
    def minimize(self) -> bool:
        return self.objective == "latency"

    def best_key(self) -> str:
        ok = [(k, p.value) for k, p in self.points.items() if p.status == "ok" and p.feasible and p.value]
        k = (min if self.minimize else max)(ok, key=lambda kv: kv[1])[0]
        return f"{k[0]}@{k[1]}"

    def true_best(self) -> float:
        vals = [p.value for p in self.points.values() if p.status == "ok" and p.feasible and p.value]
        return min(vals) if self.minimize else max(vals)

    def spikes(self) -> list[tuple[str, int]]:
        """Isolated points: better than both batch neighbours of their variant by more than ``SPIKE`` x.

        A real throughput curve does not jump up by 1.5x at one batch and back at the next; on a contended
        machine a single measurement does. Edge points are never called spikes (a curve still rising at
        the boundary is expected)."""
        out = []
        for v in self.variants:
            bs = self.batches[v]
            for a, b, c in zip(bs, bs[1:], bs[2:], strict=False):
                va, vb, vc = (self.points[(v, x)].value for x in (a, b, c))
                if not (va and vb and vc) or not self.points[(v, b)].feasible:
                    continue
                ratios = (va / vb, vc / vb) if self.minimize else (vb / va, vb / vc)
                if min(ratios) > SPIKE:
                    out.append((v, b))
        return out

    def robust_best(self) -> float:
        """The best true value when the isolated single-point outliers (:meth:`spikes`) are left out."""
        spikes = set(self.spikes())
        vals = [p.value for k, p in self.points.items()
                if p.status == "ok" and p.feasible and p.value and k not in spikes]
        return min(vals) if self.minimize else max(vals)

    def regret(self, pick: tuple[str, int] | None, best: float | None = None) -> float:
        """``1 - true(pick) / best`` (``best``: the true best unless given), 1.0 while nothing feasible is picked."""
        if pick is None:
            return 1.0
        p = self.points[pick]
        if p.status != "ok" or not p.feasible or not p.value:
            return 1.0
        best = self.true_best() if best is None else best
        return max(0.0, 1 - best / p.value) if self.minimize else max(0.0, 1 - p.value / best)

    def exhaustive_cost(self) -> float:
        return sum(p.fixed_cost + p.measure_cost for p in self.points.values())


def load(path: Path) -> Landscape:
    doc = json.loads(path.read_text())
    cons = doc.get("constraints") or {}
    objective = doc.get("objective", "throughput")
    pct = cons.get("latency_percentile") or "p99"
    points: dict[tuple[str, int], Point] = {}
    sizes = set(doc["space"]["batch_sizes"])
    for r in doc["points"]:
        if r["batch_size"] not in sizes:
            continue
        cost = r.get("cost") or {}
        ci = r.get("throughput_ci")
        tp = r.get("throughput")
        sd = 0.05
        if ci and tp and ci[0] and ci[1] and ci[0] > 0:
            sd = max(1e-3, (math.log(ci[1]) - math.log(ci[0])) / (2 * _Z95))
        lat = (r.get("latency_ms") or {}).get(pct)
        value = tp if objective != "latency" else lat
        measure = float(cost.get("measure_seconds") or 0.0)
        fixed = float(cost.get("wall_seconds") or 0.0) - measure
        points[(r["variant"], r["batch_size"])] = Point(
            variant=r["variant"], batch=r["batch_size"], status=r["status"], value=value, sd=sd,
            feasible=bool(r.get("feasible")) if r["status"] == "ok" else False, latency=lat,
            memory=r.get("peak_memory_bytes"), fixed_cost=max(0.05, fixed), measure_cost=measure,
            dims={k: r.get(k) for k in ("compiler", "compile_mode", "precision", "memory_format", "threads")})
    # a recording cut short: only the variants whose whole batch curve was recorded take part
    variants = [v for v in dict.fromkeys(v for v, _ in points) if all((v, b) in points for b in sizes)]
    points = {k: p for k, p in points.items() if k[0] in variants}
    batches = {v: sorted(b for w, b in points if w == v) for v in variants}
    return Landscape(doc["landscape"], objective, cons.get("max_latency_ms"), pct, cons.get("max_memory_bytes"),
                     points, variants, batches)


SYNTHETIC_BATCHES = (1, 2, 4, 8, 16, 24, 32, 64)
SYNTHETIC_DIMS = {"compiler": ("eager", "trace", "frozen", "compile"), "memory_format": ("contiguous", "channels_last"),
                  "threads": (1, 2)}


def synthetic(seed: int, recorded: Sequence[Landscape]) -> Landscape:
    """A SYNTHETIC landscape (not a measurement): structured, without contention artifacts.

    16 variants (compiler x memory format x threads) x batches 1-64 (with 24), objective throughput:

    - per-dimension effects on the peak log-throughput: each dimension value draws N(0, 0.3) (compiler),
      N(0, 0.15) (memory format), N(0, 0.25) (threads), plus N(0, 0.08) per variant (interactions);
    - per variant a unimodal curve on x = log2(b): peak at x* (a landscape-wide U(2, 7), so the peak may
      lie past the largest batch, + N(0, 0.5) per compiler, + N(0, 0.3) per variant), rising as
      ``-r (x* - x)^1.3`` below it (r ~ U(0.08, 0.2): 2-8x from batch 1 to the peak) and saturating or
      falling as ``-f (x - x*)^2`` above it (f ~ U(0.02, 0.15));
    - noise: each point's full-measurement sd drawn from the recorded landscapes' sds (at least 0.005);
    - costs drawn from the recorded landscapes: a variant's fixed costs (build + first call + gate) per
      batch are those of one recorded variant of the same compiler (any recorded variant when none),
      at the same batch index; the measurement seconds those of a recorded point;
    - a variant fails (every batch ``failed``, its fixed cost charged) with probability 0.05.
    """
    rng = random.Random(f"synthetic-{seed}")
    rec_points = [p for land in recorded for p in land.points.values()]
    sds = [max(0.005, p.sd) for p in rec_points if p.status == "ok"]
    by_compiler: dict[str, list[list[float]]] = {}
    for land in recorded:
        for v in land.variants:
            comp = str(land.points[(v, land.batches[v][0])].dims.get("compiler"))
            by_compiler.setdefault(comp, []).append([land.points[(v, b)].fixed_cost for b in land.batches[v]])
    any_costs = [c for cs in by_compiler.values() for c in cs]
    effects = {(d, val): rng.gauss(0.0, {"compiler": 0.3, "memory_format": 0.15, "threads": 0.25}[d])
               for d, vals in SYNTHETIC_DIMS.items() for val in vals}
    x_base = rng.uniform(2.0, 7.0)
    x_shift = {c: rng.gauss(0.0, 0.5) for c in SYNTHETIC_DIMS["compiler"]}
    points: dict[tuple[str, int], Point] = {}
    variants: list[str] = []
    for comp in SYNTHETIC_DIMS["compiler"]:
        for fmt_ in SYNTHETIC_DIMS["memory_format"]:
            for th in SYNTHETIC_DIMS["threads"]:
                dims = {"compiler": comp, "compile_mode": "default" if comp == "compile" else None,
                        "precision": "fp32", "memory_format": fmt_, "threads": th}
                name = f"{comp}+{fmt_}+threads={th}"
                variants.append(name)
                u_peak = math.log(100.0) + sum(effects[(d, dims[d])] for d in SYNTHETIC_DIMS) + rng.gauss(0.0, 0.08)
                x_star = x_base + x_shift[comp] + rng.gauss(0.0, 0.3)
                r, f = rng.uniform(0.08, 0.2), rng.uniform(0.02, 0.15)
                fixed = rng.choice(by_compiler.get(comp) or any_costs)
                failed = rng.random() < 0.05
                for i, b in enumerate(SYNTHETIC_BATCHES):
                    x = math.log2(b)
                    u = u_peak - (r * (x_star - x) ** 1.3 if x < x_star else f * (x - x_star) ** 2)
                    points[(name, b)] = Point(
                        variant=name, batch=b, status="failed" if failed else "ok",
                        value=None if failed else math.exp(u), sd=rng.choice(sds), feasible=not failed,
                        latency=None, memory=None, fixed_cost=fixed[min(i, len(fixed) - 1)],
                        measure_cost=rng.choice(rec_points).measure_cost, dims=dims)
    if all(p.status != "ok" for p in points.values()):  # keep at least one live variant
        return synthetic(seed + 100_000, recorded)
    return Landscape(f"synthetic (seed {seed})", "throughput", None, "p99", None, points, variants,
                     {v: list(SYNTHETIC_BATCHES) for v in variants})


@dataclass
class Observed:
    """What one measurement returned (noisy), as the tool would see it."""

    status: str
    value: float | None
    low: float | None  # pessimistic end of the 95% CI (lower throughput / higher latency)
    ci: tuple[float, float] | None
    feasible: bool
    sd: float
    cost: float


@dataclass
class Replay:
    """Measures points of a landscape with noise, and keeps the cost and the regret trajectory."""

    land: Landscape
    rng: random.Random
    spent: float = 0.0
    trajectory: list[tuple[float, float]] = field(default_factory=list)  # (cost so far, regret)
    robust: list[tuple[float, float]] = field(default_factory=list)  # (cost so far, regret vs the robust best)
    measured: dict[tuple[str, int], Observed] = field(default_factory=dict)

    def measure(self, key: tuple[str, int], fidelity: float = 1.0) -> Observed:
        p = self.land.points[key]
        cost = p.fixed_cost + fidelity * p.measure_cost
        self.spent += cost
        if p.status != "ok" or not p.value:
            obs = Observed(p.status, None, None, None, False, 0.0, cost)
        else:
            sd = p.sd / math.sqrt(max(fidelity, 1e-3))
            v = p.value * math.exp(self.rng.gauss(0.0, sd))
            ci = (v * math.exp(-_Z95 * sd), v * math.exp(_Z95 * sd))
            feasible = True
            if self.land.max_latency_ms is not None and p.latency is not None:
                lat = p.latency * math.exp(self.rng.gauss(0.0, sd)) if self.land.objective != "latency" else v
                feasible = lat <= self.land.max_latency_ms
            if self.land.max_memory is not None and p.memory is not None and p.memory > self.land.max_memory:
                feasible = False
            low = ci[1] if self.land.minimize else ci[0]
            obs = Observed("ok", v, low, ci, feasible, sd, cost)
        self.measured[key] = obs
        return obs

    def record(self, pick: tuple[str, int] | None) -> None:
        self.trajectory.append((self.spent, self.land.regret(pick)))
        self.robust.append((self.spent, self.land.regret(pick, self.land.robust_best())))

    def pessimistic_pick(self) -> tuple[str, int] | None:
        ok = [(k, o) for k, o in self.measured.items() if o.status == "ok" and o.feasible and o.low]
        if not ok:
            return None
        key = min if self.land.minimize else max
        return key(ok, key=lambda ko: ko[1].low or 0.0)[0]


def run_grid(land: Landscape, rng: random.Random, order: Sequence[tuple[str, int]]) -> Replay:
    rep = Replay(land, rng)
    dead: set[str] = set()
    for key in order:
        if key[0] in dead:
            continue
        obs = rep.measure(key)
        if obs.status in ("failed", "rejected"):
            dead.add(key[0])
        rep.record(rep.pessimistic_pick())
    return rep


def run_exhaustive(land: Landscape, seed: int) -> Replay:
    return run_grid(land, random.Random(seed), [(v, b) for v in land.variants for b in land.batches[v]])


def run_random(land: Landscape, seed: int) -> Replay:
    rng = random.Random(seed)
    order = [(v, b) for v in land.variants for b in land.batches[v]]
    random.Random(seed + 7919).shuffle(order)
    return run_grid(land, rng, order)


def _dimension_params(land: Landscape) -> tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]:
    """The dimensions that vary across the landscape's variants (values as strings: Optuna's categoricals
    need one type) and each variant's values on them."""
    dims = {v: land.points[(v, land.batches[v][0])].dims for v in land.variants}
    keys = [k for k in ("compiler", "compile_mode", "precision", "memory_format", "threads")
            if len({str(d.get(k)) for d in dims.values()}) > 1]
    of = {v: {k: str(dims[v].get(k)) for k in keys} for v in land.variants}
    return {k: sorted({of[v][k] for v in land.variants}) for k in keys}, of


def run_tpe(land: Landscape, seed: int, *, budget: float, per_dimension: bool = False) -> Replay:
    """Today's TPE over pre-crossed (variant, batch) categoricals, as ``autotune.study.Search`` drives it;
    with ``per_dimension``, over one categorical per varying dimension instead of ``variant``."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    from autotune.study import MAX_REPEATS, make_sampler

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rep = Replay(land, random.Random(seed))
    direction = "minimize" if land.minimize else "maximize"
    study = optuna.create_study(direction=direction, sampler=make_sampler(land.objective, seed=seed))
    all_b = sorted({b for v in land.variants for b in land.batches[v]})
    if per_dimension:
        values, of = _dimension_params(land)
        dists = {k: CategoricalDistribution(vals) for k, vals in values.items()}
        by_dims = {tuple(sorted(of[v].items())): v for v in land.variants}

        def params(v: str, b: int) -> dict[str, Any]:
            return {**of[v], "batch_size": b}

        def variant_of(p: dict[str, Any]) -> str | None:
            return by_dims.get(tuple(sorted((k, p[k]) for k in values)))
    else:
        dists = {"variant": CategoricalDistribution(land.variants)}

        def params(v: str, b: int) -> dict[str, Any]:
            return {"variant": v, "batch_size": b}

        def variant_of(p: dict[str, Any]) -> str | None:
            return str(p["variant"])
    dists["batch_size"] = CategoricalDistribution(all_b)
    for v in land.variants:
        study.enqueue_trial(params(v, min(land.batches[v]) if land.minimize else max(land.batches[v])))
    dead: set[str] = set()
    combos = [(v, b) for v in land.variants for b in land.batches[v]]
    repeats = 0
    order_rng = random.Random(seed + 1)
    while rep.spent < budget and len(rep.measured) < len(combos):
        trial = study.ask(dists)
        variant = variant_of(trial.params)
        key = (variant or "", int(trial.params["batch_size"]))
        if key in rep.measured or key not in land.points or key[0] in dead:
            obs = rep.measured.get(key)
            if obs is not None and obs.status == "ok" and obs.value:
                study.tell(trial, obs.value)
            else:
                study.tell(trial, state=TrialState.PRUNED if key not in rep.measured else TrialState.FAIL)
            repeats += 1
            if repeats >= MAX_REPEATS:
                todo = [c for c in combos if c not in rep.measured and c[0] not in dead]
                if todo:
                    v, b = order_rng.choice(todo)
                    study.enqueue_trial(params(v, b))
                repeats = 0
            continue
        repeats = 0
        obs = rep.measure(key)
        if obs.status in ("failed", "rejected"):
            dead.add(key[0])
        if obs.status == "ok" and obs.value and obs.feasible:
            study.tell(trial, obs.value)
        else:
            study.tell(trial, state=TrialState.FAIL)
        rep.record(rep.pessimistic_pick())
        if all(c in rep.measured or c[0] in dead for c in combos):
            break
    return rep


def run_bracket(land: Landscape, seed: int, *, budget: float, **kwargs: Any) -> Replay:
    rep = Replay(land, random.Random(seed))
    arms = [Arm(v, tuple(land.batches[v]), land.points[(v, land.batches[v][0])].dims) for v in land.variants]
    # the full measurement time the strategy reasons with: the landscape's typical one
    full = sorted(p.measure_cost for p in land.points.values())[len(land.points) // 2] or 1.0
    search = BracketSearch(arms, objective=land.objective, full_measure_seconds=full, **kwargs)
    while rep.spent < budget:
        prop = search.next()
        if prop is None:
            break
        key = (prop.variant, prop.batch_size)
        obs = rep.measure(key, prop.fidelity)
        search.tell(prop.variant, prop.batch_size, status=obs.status, value=obs.value, relative_sd=obs.sd or None,
                    feasible=obs.feasible, cost_seconds=obs.cost, fidelity=prop.fidelity)
        rep.record(search.recommendation())
    return rep


METHODS: dict[str, Callable[..., Replay]] = {
    "exhaustive": lambda land, seed, budget: run_exhaustive(land, seed),
    "random": lambda land, seed, budget: run_random(land, seed),
    "tpe": lambda land, seed, budget: run_tpe(land, seed, budget=budget),
    "tpe-dims": lambda land, seed, budget: run_tpe(land, seed, budget=budget, per_dimension=True),
    "bracket": lambda land, seed, budget: run_bracket(land, seed, budget=budget),
}


def time_to_target(traj: Sequence[tuple[float, float]], target: float = REGRET_TARGET) -> float:
    """Cost from which the regret stays <= target to the end of the run (inf if it never gets there)."""
    reached = math.inf
    for cost, regret in traj:
        if regret <= target:
            if math.isinf(reached):
                reached = cost
        else:
            reached = math.inf
    return reached


def regret_at(traj: Sequence[tuple[float, float]], cost: float) -> float:
    r = 1.0
    for c, regret in traj:
        if c > cost:
            break
        r = regret
    return r


def quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    i = q * (len(s) - 1)
    lo, hi = int(math.floor(i)), int(math.ceil(i))
    if math.isinf(s[hi]) or math.isinf(s[lo]):
        return s[hi] if math.isinf(s[hi]) else s[lo]
    return s[lo] + (s[hi] - s[lo]) * (i - lo)


def fmt(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.0%}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--landscapes", nargs="*", type=Path,
                   default=sorted((ROOT / "benchmarks/landscapes").glob("*.json")))
    p.add_argument("--synthetic", action="store_true",
                   help="also replay SYNTHETIC landscapes (one per seed, see synthetic()), costs and noise "
                        "drawn from the recorded ones")
    p.add_argument("--seeds", default="1000:1050", help="START:STOP (Python range)")
    p.add_argument("--methods", default="exhaustive,random,tpe,tpe-dims,bracket")
    p.add_argument("--json", type=Path, default=None, help="write the per-seed results here")
    args = p.parse_args(argv)
    a, b = (int(x) for x in args.seeds.split(":"))
    seeds = range(a, b)
    methods = args.methods.split(",")
    results: dict[str, Any] = {}
    recorded = [load(path) for path in args.landscapes]
    print(f"seeds {a}..{b - 1} ({len(seeds)}); regret target {REGRET_TARGET:.0%}; cost as a fraction of exhaustive")
    sources: list[tuple[str, Callable[[int], Landscape]]] = [(land.name, lambda seed, land=land: land)
                                                             for land in recorded]
    if args.synthetic:
        sources.append(("synthetic", lambda seed: synthetic(seed, recorded)))
    for name, land_for in sources:
        if name == "synthetic":
            land0 = land_for(a)
            print(f"\n## SYNTHETIC (generated, not measured; one landscape per seed): {len(land0.variants)} "
                  f"variants, {len(land0.points)} points, objective throughput, unimodal curves, per-dimension "
                  f"effects, costs and noise drawn from the recorded landscapes")
        else:
            land = land_for(a)
            spikes = land.spikes()
            print(f"\n## {land.name}: {len(land.variants)} variants, {len(land.points)} points, objective "
                  f"{land.objective}, exhaustive cost {land.exhaustive_cost():.0f} s; best {land.true_best():.4g} "
                  f"({'ms' if land.minimize else 'samples/s'}) at {land.best_key()}; without the {len(spikes)} "
                  f"isolated spikes (> {SPIKE}x both batch neighbours: "
                  f"{', '.join(f'{v}@{bb}' for v, bb in spikes) or 'none'}) best {land.robust_best():.4g}")
        print(f"{'method':<11} {'to<=3% median':>14} {'P90':>6} {'reached':>8} {'excl.spikes med':>16} {'P90':>6} "
              + " ".join(f"{'regret@' + format(f, '.0%'):>11}" for f in FRACTIONS)
              + f" {'measurements':>13} {'s/run':>6}")
        results[name] = {}
        for m in methods:
            t0 = time.perf_counter()
            ttt, ttr, regs, counts = [], [], {f: [] for f in FRACTIONS}, []
            for seed in seeds:
                land = land_for(seed)
                total = land.exhaustive_cost()
                rep = METHODS[m](land, seed, total)
                ttt.append(time_to_target(rep.trajectory) / total)
                ttr.append(time_to_target(rep.robust) / total)
                for f in FRACTIONS:
                    regs[f].append(regret_at(rep.trajectory, f * total))
                counts.append(len(rep.trajectory))
            el = (time.perf_counter() - t0) / len(seeds)
            reached = sum(1 for x in ttt if not math.isinf(x)) / len(ttt)
            results[name][m] = {"time_to_target": ttt, "time_to_target_excl_spikes": ttr,
                                "regret_at": {str(f): v for f, v in regs.items()}, "measurements": counts}
            print(f"{m:<11} {fmt(quantile(ttt, 0.5)):>14} {fmt(quantile(ttt, 0.9)):>6} {reached:>8.0%} "
                  f"{fmt(quantile(ttr, 0.5)):>16} {fmt(quantile(ttr, 0.9)):>6} "
                  + " ".join(f"{quantile(regs[f], 0.5):>11.1%}" for f in FRACTIONS)
                  + f" {quantile(counts, 0.5):>13.0f} {el:>6.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
