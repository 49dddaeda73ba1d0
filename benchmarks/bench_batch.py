"""Benchmark: probes used by the batch-boundary search vs two common methods; fake and real probes.

``--deployment eager,frozen,compile``: the deployment-footprint check alone (the wide MLP of
benchmarks/recipes/wide_mlp.toml against 1536 MiB; the product's boundary, then an independent
torch-only process, benchmarks/plain_footprint.py, at b and b + g).

Run: ``.venv/bin/python benchmarks/bench_batch.py`` (``--trials N``, ``--seed S``, ``--noise X``): fake
probes only, about ten seconds, no torch. ``--real`` also runs the search on real CPU models in
real worker processes (``--models mlp,resnet18`` picks; ``efficientnet_b0`` is the case that
motivated the CPU scenario and takes minutes) and checks each answer in fresh processes.

Fake probes (autotune.testing.SyntheticProbe). Each trial draws a boundary log-uniformly across
granularity..65,536 (memory boundaries span orders of magnitude, so every scale gets the same
weight) and the per-sample bytes that put the boundary there, in one of two worlds:

* ``clean`` (the original scenario): a limit of 1-80 GiB, a fixed part of 2-60% of it, peaks
  with 1% normal noise on the per-sample part, no baseline reading, no peak for a failure (an
  out-of-memory error stops the run part-way), as on a GPU;
* ``cpu`` (the failure mode found on real CPU models): a budget of 1-32 GiB, a baseline (runtime
  and model) of 20-70% of it that probes report with their own error, a per-probe overhead of
  0-5% of it above the baseline, *absolute* noise of 1-8 MiB on every reading (independent of
  the batch) on top of the 1% relative noise, and failures that report their full peak (a budget
  check runs to the end).

Methods, all run on the same trials:

* ``model-guided``: autotune.batch.find_max_batch_size, given the limit or not;
* ``double+bisect``: double from the granularity until a failure, then bisect (PyTorch
  Lightning's ``binsearch`` mode, without its 25-trial cap, starting at the granularity);
* ``+1 until OOM``: the tutorial method, one granularity step at a time from the smallest
  batch. Its count is computed, not run (the answer / granularity, plus the failing probe
  unless the answer is the upper bound): up to 65,537 probes a trial, exact by construction.

Columns: probes (median, p90, max, mean); ``overshoot p90/max``: the largest batch probed over
the boundary + granularity, the confirming probe every exact method needs (a probe above it is
the slowest one and, on a real machine, the one that risks the kernel's OOM killer); ``work``:
the median sum of the batch sizes probed over the boundary (probe time grows with the batch, so
this is the search's time in units of one probe at the boundary); ``exact``: share of trials
that found the true boundary.

Target: the exact boundary every time, and median probes <= 8 with a known limit. Without the
limit no method can use memory (fit/fail bits are the only information about where the limit
is), so the table prints the entropy of the boundary distribution: no method's mean can be lower.
A last table shows how the model-guided search degrades as the clean fake's noise grows and when
the true boundary sits below the model's (fragmentation).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tabulate import tabulate

from autotune.batch import ProbeResult, find_max_batch_size
from autotune.core.recipe import InputSpec, ModelSpec, Recipe, load_recipe
from autotune.runner import Runner
from autotune.testing import SyntheticProbe
from autotune.validation import validate
from autotune.variant_boundaries import find_boundaries, probe_function

MAX_BATCH = 65536
GIB = 1024**3
MIB = 1024**2
HEADERS = ["scenario", "method", "median probes", "p90", "max", "mean", "overshoot p90/max", "work", "exact"]


@dataclass(frozen=True)
class Trial:
    probe: SyntheticProbe
    expected: int


def draw_trial(
    seed: int, *, granularity: int, noise: float, fragmentation: float, world: str = "clean"
) -> Trial:
    rng = random.Random(f"trial:{seed}:{granularity}")
    boundary = int(math.exp(rng.uniform(math.log(granularity), math.log(MAX_BATCH + 1))))
    boundary = min(max(boundary, granularity), MAX_BATCH)
    extra: dict[str, object] = {}
    if world == "clean":
        limit = rng.uniform(1, 80) * GIB
        intercept = rng.uniform(0.02, 0.6) * limit
    else:
        limit = rng.uniform(1, 32) * GIB
        baseline = rng.uniform(0.2, 0.7) * limit
        intercept = baseline + rng.uniform(0.0, 0.05) * limit
        extra = {"baseline_bytes": baseline, "noise_bytes": rng.uniform(1, 8) * MIB, "failure_peaks": True}
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
        **extra,  # type: ignore[arg-type]
    )
    return Trial(probe=probe, expected=boundary // granularity * granularity)


def double_then_bisect(probe: Callable[[int], ProbeResult], *, granularity: int) -> tuple[int, list[int]]:
    """Lightning-style binsearch on the granularity lattice; returns (answer, batch sizes probed)."""
    top = MAX_BATCH // granularity
    probed: list[int] = []

    def fits(k: int) -> bool:
        probed.append(k * granularity)
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
    return lo * granularity, probed


def plus_one_probed(expected: int, *, granularity: int) -> list[int]:
    steps = expected // granularity
    last = steps if steps == MAX_BATCH // granularity else steps + 1
    return [k * granularity for k in range(1, last + 1)]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(share * len(ordered)) - 1]


@dataclass
class Tally:
    """Per-method results over the trials of one scenario."""

    counts: list[int]
    overshoot: list[float]
    work: list[float]
    exact: list[bool]

    @classmethod
    def empty(cls) -> Tally:
        return cls([], [], [], [])

    def add(self, probed: list[int], *, answer: int, expected: int, granularity: int) -> None:
        self.counts.append(len(probed))
        self.overshoot.append(max(probed) / (expected + granularity))
        self.work.append(sum(probed) / expected)
        self.exact.append(answer == expected)

    def row(self) -> list[object]:
        counts = [float(c) for c in self.counts]
        share = f"{100 * sum(self.exact) / len(self.exact):.0f}%"
        over = f"{percentile(self.overshoot, 0.9):.2f} / {max(self.overshoot):.2f}"
        return [
            statistics.median(counts),
            int(percentile(counts, 0.9)),
            int(max(counts)),
            f"{statistics.mean(counts):.1f}",
            over,
            f"{statistics.median(self.work):.1f}",
            share,
        ]


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
    trials: int,
    seed: int,
    *,
    granularity: int,
    known_limit: bool,
    noise: float,
    fragmentation: float,
    world: str = "clean",
    baselines: bool = True,
) -> Scenario:
    ours, base, plus = Tally.empty(), Tally.empty(), Tally.empty()
    for i in range(trials):
        trial = draw_trial(
            seed + i, granularity=granularity, noise=noise, fragmentation=fragmentation, world=world
        )
        probe: Callable[[int], ProbeResult] = trial.probe
        if not baselines:
            probe = _without_baseline(trial.probe)
        limit = trial.probe.memory_limit_bytes if known_limit else None
        result = find_max_batch_size(probe, granularity=granularity, memory_limit_bytes=limit)
        probed = [record.batch_size for record in result.probes]
        ours.add(probed, answer=result.max_batch_size, expected=trial.expected, granularity=granularity)
        answer, probed = double_then_bisect(trial.probe, granularity=granularity)
        base.add(probed, answer=answer, expected=trial.expected, granularity=granularity)
        plus.add(
            plus_one_probed(trial.expected, granularity=granularity),
            answer=trial.expected,
            expected=trial.expected,
            granularity=granularity,
        )
    name = f"{world}, g={granularity}, limit {'known' if known_limit else 'unknown'}"
    if not baselines:
        name += ", no baseline"
    rows = [
        [name, "model-guided", *ours.row()],
        [name, "double+bisect", *base.row()],
        [name, "+1 until OOM (computed)", *plus.row()],
    ]
    return Scenario(rows=rows, model_guided=ours.counts, exact=all(ours.exact) and all(base.exact))


def _without_baseline(probe: SyntheticProbe) -> Callable[[int], ProbeResult]:
    def blind(batch_size: int) -> ProbeResult:
        result = probe(batch_size)
        return ProbeResult(fits=result.fits, peak_memory_bytes=result.peak_memory_bytes, error=result.error)

    return blind


def fake_benchmark(trials: int, seed: int, noise: float) -> bool:
    rows: list[list[object]] = []
    ok = True
    for world in ("clean", "cpu"):
        for granularity in (1, 8):
            for known_limit in (True, False):
                scenario = run_scenario(
                    trials,
                    seed,
                    granularity=granularity,
                    known_limit=known_limit,
                    noise=noise,
                    fragmentation=0.0,
                    world=world,
                )
                rows.extend(scenario.rows if known_limit else scenario.rows[:1])
                ok = ok and scenario.exact
                if known_limit:
                    ok = ok and statistics.median(scenario.model_guided) <= 8
    scenario = run_scenario(
        trials,
        seed,
        granularity=1,
        known_limit=True,
        noise=noise,
        fragmentation=0.0,
        world="cpu",
        baselines=False,
    )
    rows.append(scenario.rows[0])
    ok = ok and scenario.exact
    print(
        f"batch boundary search: {trials} seeded boundaries per scenario, log-uniform in "
        f"granularity..65536, relative peak noise {noise:.1%} (cpu: plus 1-8 MiB absolute)"
    )
    print(tabulate(rows, headers=HEADERS, disable_numparse=True))
    entropy = ", ".join(f"g={g}: {boundary_entropy_bits(g):.1f}" for g in (1, 8))
    print("(without the limit the model-guided search is double+bisect; rows of the other methods omitted)")
    print(f"entropy of the boundary (bits; the least mean probes without memory information): {entropy}")
    print(f"target (exact every time; median probes <= 8 with a known limit): {'PASS' if ok else 'FAIL'}")

    print("\nmodel-guided search, clean world, g=1, limit known, as the fake gets harder:")
    sensitivity: list[list[object]] = []
    for level, fragmentation in ((0.0, 0.0), (0.001, 0.0), (0.01, 0.0), (0.03, 0.0), (0.01, 0.05)):
        scenario = run_scenario(
            trials, seed, granularity=1, known_limit=True, noise=level, fragmentation=fragmentation
        )
        stats = scenario.rows[0][2:]
        sensitivity.append([f"{level:.1%}", f"up to {fragmentation:.0%}", *stats])
    headers = ["peak noise", "fragmentation", *HEADERS[2:]]
    print(tabulate(sensitivity, headers=headers, disable_numparse=True))
    return ok


# --- real models ---------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
#: Worker environment that fixes glibc's mmap threshold (no dynamic raise after large frees); see --mmap-fix.
MMAP_FIX = {"MALLOC_MMAP_THRESHOLD_": "131072"}


@dataclass(frozen=True)
class RealCase:
    name: str
    recipe: Recipe
    budget: int


def real_case(name: str) -> RealCase:
    """A real CPU workload (eager only) with a budget that puts the boundary inside the range."""
    mlp = load_recipe(ROOT / "recipes" / "mlp.toml")
    if name == "mlp":
        # The recipe with a small budget, and granularity 64 instead of 8: at ~33 KB a sample, 8
        # samples (0.26 MB) are below the run-to-run noise of a peak RSS (~0.3 MB), so a fresh
        # process could not confirm a boundary at that resolution.
        return _cpu_case("mlp", mlp, budget_mib=600, granularity=64)
    if name == "resnet18":
        recipe = replace(
            mlp,
            name="resnet18-64px",
            model=ModelSpec(factory="torchvision.models:resnet18"),
            inputs=(InputSpec(name="images", shape=(3, 64, 64)),),
        )
        return _cpu_case("resnet18 @ 64x64", recipe, budget_mib=900, max_batch_size=1024, granularity=1)
    if name == "efficientnet_b0":  # the case that motivated the CPU scenario (minutes)
        recipe = load_recipe(ROOT / "recipes" / "efficientnet_b0.toml")
        return _cpu_case("efficientnet_b0 @ 224x224", recipe, budget_mib=2048)
    raise SystemExit(f"--models: unknown model {name!r} (mlp, resnet18, efficientnet_b0)")


def _cpu_case(
    name: str,
    recipe: Recipe,
    *,
    budget_mib: int,
    max_batch_size: int | None = None,
    granularity: int | None = None,
) -> RealCase:
    budget = budget_mib * MIB
    batch = replace(
        recipe.batch,
        memory_budget_bytes=budget,
        max_batch_size=max_batch_size or recipe.batch.max_batch_size,
        granularity=granularity or recipe.batch.granularity,
    )
    recipe = replace(recipe, device="cpu", batch=batch, search=replace(recipe.search, variants=("eager",)))
    return RealCase(name=name, recipe=recipe, budget=budget)


def fresh_probe(case: RealCase, variant: str, env: dict[str, str] | None) -> Callable[[int], ProbeResult]:
    """``probe(b)`` in a worker process of its own each time (nothing left over from earlier probes)."""

    def probe(batch_size: int) -> ProbeResult:
        with Runner(env=env, reuse=False) as runner:
            return probe_function(runner, case.recipe, variant, budget=case.budget, fresh=True)(batch_size)

    return probe


def run_real(
    case: RealCase, *, mode: str, env: dict[str, str] | None
) -> tuple[list[object], list[list[object]], bool]:
    """Search the boundary, then probe b and b + g again, each in a fresh worker process.

    ``mode`` ``reused``: the product's path (``boundaries.find_boundaries``: the search in one reused
    worker, then the answer confirmed and fixed by fresh-process probes, as ``autotune run`` does);
    ``fresh``: every probe of the search in a new worker.
    """
    with Runner(env=env) as runner:
        workload = validate(runner, case.recipe)
        variant = workload.variants[0]
        t1 = time.perf_counter()
        if mode == "reused":
            outcome = find_boundaries(runner, case.recipe, workload)
            if variant not in outcome.documents:
                raise SystemExit(f"{case.name}: the search failed: {outcome.failures.get(variant)}")
            doc = outcome.documents[variant]
    if mode == "fresh":
        batch = case.recipe.batch
        doc = find_max_batch_size(
            fresh_probe(case, variant, env),
            granularity=batch.granularity,
            max_batch_size=batch.max_batch_size,
            memory_limit_bytes=case.budget,
        ).to_dict()
    t2 = time.perf_counter()
    found, g = int(doc["max_batch_size"]), int(doc["granularity"])
    checks = [(found, True)] + ([] if doc["hit_upper_bound"] else [(found + g, False)])
    check = fresh_probe(case, variant, env)
    fresh = [(size, expected, check(size)) for size, expected in checks]
    confirmed = all(result.fits == expected for _, expected, result in fresh)
    during = {p["batch_size"]: p["peak_memory_bytes"] for p in doc["probes"]}

    def mib(value: float | None) -> str:
        return "-" if value is None else f"{value / MIB:.1f}"

    fresh_text = "; ".join(
        f"{size} {'fits' if r.fits else 'fails'} {mib(r.peak_memory_bytes)} ({mib(during.get(size))})"
        for size, _, r in fresh
    )
    probes = doc["probes"]
    row: list[object] = [
        case.name,
        mode,
        f"{case.budget / MIB:.0f} MiB",
        f"{found} (g={g})",
        len(probes),
        max(p["batch_size"] for p in probes),
        f"{t2 - t1:.1f}",
        fresh_text,
        "yes" if confirmed else "NO",
    ]
    trace = [
        [
            case.name,
            mode,
            p["batch_size"],
            "yes" if p["fits"] else "no",
            mib(p["peak_memory_bytes"]),
            mib(p.get("baseline_bytes")),
            f"{p['seconds']:.2f}",
        ]
        for p in probes
    ]
    return row, trace, confirmed


def real_benchmark(names: list[str], *, modes: list[str], mmap_fix: bool) -> bool:
    env = dict(os.environ, **MMAP_FIX) if mmap_fix else None
    rows: list[list[object]] = []
    traces: list[list[object]] = []
    confirmed = True
    t0 = time.perf_counter()
    for name in names:
        case = real_case(name.strip())
        for mode in modes:
            row, trace, ok = run_real(case, mode=mode, env=env)
            rows.append(row)
            traces.extend(trace)
            confirmed = confirmed and ok
    fix = ", worker env " + " ".join(f"{k}={v}" for k, v in MMAP_FIX.items()) if mmap_fix else ""
    print(
        f"\nreal CPU models (eager; peak RSS of the worker vs the budget{fix}; "
        f"{time.perf_counter() - t0:.0f} s in all):"
    )
    headers = [
        "model",
        "worker",
        "budget",
        "boundary",
        "probes",
        "largest",
        "search s",
        "fresh check: batch verdict peak MiB (peak during the search)",
        "confirmed",
    ]
    print(tabulate(rows, headers=headers, disable_numparse=True))
    print(
        "fresh: every probe (search and check) in a new worker; reused: the product's path (search in one\n"
        "reused worker, then probes in fresh workers confirm and fix the answer; the 'probes' column counts both).\n"
        "Target: every row confirmed by independent fresh-process probes: "
        + ("PASS" if confirmed else "FAIL")
    )
    print("\nprobes in order:")
    print(
        tabulate(
            traces,
            headers=["model", "worker", "batch", "fits", "peak MiB", "baseline MiB", "seconds"],
            disable_numparse=True,
        )
    )
    return confirmed


# --- deployment footprint: the tool's boundary against an independent plain process ----------------

PLAIN = Path(__file__).resolve().parent / "plain_footprint.py"
WIDE_MLP = Path(__file__).resolve().parent / "recipes" / "wide_mlp.toml"
#: Agreement required: at b the plain process stays within the budget, at b + g it exceeds it, each
#: within this share of the budget.
AGREEMENT = 0.03


def plain_peak(recipe: Recipe, variant: str, batch: int, *, device: str = "cpu", limit: int | None = None
               ) -> dict[str, object]:
    """Run benchmarks/plain_footprint.py (imports torch only) at ``batch``; its JSON line."""
    import json
    import subprocess
    import sys

    factory = recipe.model.factory
    target, _, attr = factory.rpartition(":")
    if target.endswith(".py"):
        factory = f"{(Path(recipe.model.base_dir) / target).resolve()}:{attr}"
    shape = [str(d) for d in recipe.inputs[0].shape]
    cmd = [sys.executable, str(PLAIN), factory, "--kwargs", json.dumps(dict(recipe.model.kwargs)),
           "--shape", *shape, "--batch", str(batch), "--variant", variant, "--device", device]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


def product_boundary(recipe: Recipe, variant: str) -> tuple[dict[str, object] | None, float]:
    """The product's path (``autotune batch``): validate, search in a reused worker, confirm in fresh ones;
    the variant's boundary document (None when its search failed, said on stderr) and the seconds it took."""
    import sys

    t0 = time.perf_counter()
    with Runner() as runner:
        workload = validate(runner, recipe)
        outcome = find_boundaries(runner, recipe, workload)
    if variant not in outcome.documents:
        print(f"{recipe.name} {variant}: {outcome.failures.get(variant)}", file=sys.stderr)
        return None, time.perf_counter() - t0
    return dict(outcome.documents[variant]), time.perf_counter() - t0


def deployment_benchmark(variants: list[str], *, recipe_path: Path = WIDE_MLP) -> bool:
    """The product's boundary (search in a reused worker, confirmation in fresh ones) for each variant,
    then a plain torch-only process at b and b + g: its peak over the budget must be <= 1 + 3% at b
    and >= 1 - 3% at b + g."""
    base = load_recipe(recipe_path)
    budget = base.batch.memory_budget_bytes
    assert budget is not None
    rows: list[list[object]] = []
    ok = True
    t0 = time.perf_counter()
    for variant in variants:
        recipe = replace(base, search=replace(base.search, variants=(variant,)))
        doc, seconds = product_boundary(recipe, variant)
        if doc is None:
            rows.append([variant, "-", "-", f"{seconds:.0f}", "-", "-", "failed"])
            ok = False
            continue
        b, g = int(doc["max_batch_size"]), int(doc["granularity"])
        at_b = int(plain_peak(recipe, variant, b)["peak_bytes"]) / budget
        above = int(plain_peak(recipe, variant, b + g)["peak_bytes"]) / budget
        passed = at_b <= 1 + AGREEMENT and above >= 1 - AGREEMENT
        ok = ok and passed
        search = sum(1 for p in doc["probes"] if p["phase"] == "search")
        confirm = len(doc["probes"]) - search
        rows.append([variant, f"{b} (g={g})", f"{search} + {confirm}", f"{seconds:.0f}", f"{at_b:.4f}",
                     f"{above:.4f}", "PASS" if passed else "FAIL"])
    print(f"\ndeployment footprint: {base.description}; budget {budget / MIB:.0f} MiB "
          f"({time.perf_counter() - t0:.0f} s in all)")
    print(tabulate(rows, headers=["variant", "boundary b", "probes search + confirm", "seconds",
                                  "plain peak at b / budget", "plain peak at b+g / budget", "agreement"],
                   disable_numparse=True))
    print(f"plain: benchmarks/plain_footprint.py, a process that imports only torch, builds the model and the "
          f"variant, drops the original where the variant holds its own weights, runs one forward.\n"
          f"Target: at b <= {1 + AGREEMENT:.2f} and at b+g >= {1 - AGREEMENT:.2f} of the budget for every variant: "
          + ("PASS" if ok else "FAIL"))
    return ok


GPU_CASES = (  # (recipe, budget in MiB or None for the memory free to a fresh process)
    ("recipes/mlp.toml", 256),
    ("recipes/quickstart.toml", 512),
    ("recipes/resnet50.toml", None),
)


def gpu_benchmark(variants: list[str], models: list[str] | None = None) -> bool:
    """Real CUDA boundaries: the product's path under an allocator cap (a budget, or all the memory free
    to a fresh process), confirmed in fresh processes; then a plain torch-only process under the same cap
    must fit at b and run out of memory at b + g."""
    rows: list[list[object]] = []
    ok = True
    root = Path(__file__).resolve().parents[1]
    for path, budget_mib in GPU_CASES:
        base = load_recipe(root / path)
        if models and base.name not in models:
            continue
        for variant in (variants if budget_mib is not None else variants[:1]):
            batch = replace(base.batch, memory_budget_bytes=budget_mib * MIB if budget_mib else None,
                            granularity=None, max_batch_size=65536)
            recipe = replace(base, device="cuda", batch=batch,
                             search=replace(base.search, variants=(variant,), batch_sizes="auto"))
            doc, seconds = product_boundary(recipe, variant)
            if doc is None:
                rows.append([base.name, variant, "-", "-", "-", f"{seconds:.0f}", "-", "-", "FAIL"])
                ok = False
                continue
            b, g, limit = int(doc["max_batch_size"]), int(doc["granularity"]), int(doc["memory_limit_bytes"])
            at_b = plain_peak(recipe, variant, b, device="cuda", limit=limit)
            above = plain_peak(recipe, variant, b + g, device="cuda", limit=limit)
            passed = bool(at_b["fits"]) and not above["fits"]
            ok = ok and passed
            search = sum(1 for p in doc["probes"] if p["phase"] == "search")
            rows.append([base.name, variant, f"{limit / MIB:.0f} MiB ({doc['limit_source']})", f"{b} (g={g})",
                         f"{search} + {len(doc['probes']) - search}", f"{seconds:.0f}",
                         "fits" if at_b["fits"] else "OOM", "fits" if above["fits"] else "OOM",
                         "PASS" if passed else "FAIL"])
            print("  ".join(map(str, rows[-1])), flush=True)
    import torch

    print(f"\nreal CUDA boundaries on {torch.cuda.get_device_name(0)} (torch {torch.__version__}):")
    print(tabulate(rows, headers=["model", "variant", "limit", "boundary b", "probes search + confirm", "seconds",
                                  "plain at b", "plain at b+g", "agreement"], disable_numparse=True))
    print("plain: benchmarks/plain_footprint.py under torch.cuda.set_per_process_memory_fraction(limit / total).\n"
          "Target: the plain process fits at b and runs out of memory at b+g: " + ("PASS" if ok else "FAIL"))
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=0.01, help="relative peak noise (default 0.01)")
    parser.add_argument("--real", action="store_true", help="also search real CPU models in worker processes")
    parser.add_argument(
        "--models", default="mlp,resnet18", help="real models (mlp, resnet18, efficientnet_b0)"
    )
    parser.add_argument(
        "--workers", default="reused,fresh", help="real: reused (as autotune run), fresh, or both"
    )
    parser.add_argument(
        "--mmap-fix", action="store_true", help="real: fix glibc's mmap threshold in the workers"
    )
    parser.add_argument("--deployment", default=None, metavar="VARIANTS",
                        help="only the deployment-footprint check of the wide MLP for these variants, "
                             "e.g. eager,frozen,compile (minutes each)")
    parser.add_argument("--gpu", default=None, metavar="VARIANTS",
                        help="only the real CUDA boundaries (needs a GPU), e.g. eager,frozen,compile")
    parser.add_argument("--gpu-models", default=None, help="--gpu: only these recipes (mlp, quickstart, resnet50)")
    args = parser.parse_args()
    if args.gpu:
        models = args.gpu_models.split(",") if args.gpu_models else None
        raise SystemExit(0 if gpu_benchmark(args.gpu.split(","), models) else 1)
    if args.deployment:
        raise SystemExit(0 if deployment_benchmark(args.deployment.split(",")) else 1)
    ok = fake_benchmark(args.trials, args.seed, args.noise)
    if args.real:
        ok = (
            real_benchmark(args.models.split(","), modes=args.workers.split(","), mmap_fix=args.mmap_fix)
            and ok
        )
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
