"""Warmup detector benchmark: accuracy of the steady-state mean, classes, cost.

Scores the offline analysis (``autotune.core.warmup.analyze``), the online detector
(``OnlineDetector``, values fed one at a time) and two fixed-count baselines (discard 3 then
average 300 iterations; discard 100 then average 300) on

* the labelled traces in ``--traces`` (default: ``tests/data/warmup-traces``, a copy of ``../shared/warmup-traces``),
* the held-out set (``autotune.traces.held_out_suite``, seed ``HELD_OUT_SEED`` = 8675309, picked
  once and never tuned on): change positions drawn uniformly up to 3,000 *iterations*, per-
  iteration times log-uniform 10 us - 10 ms, values are block means of k = ceil(5 ms / call)
  iterations as in the timing loop, and the online detector is told k; its online score is
  also split by the time of the true change (before or after the 1.5 s time cap the timing
  loop puts on the iteration horizon for the shipped 3 s budget), with and without that cap,
* the synthetic suite (``synthetic_suite``, seed 20240607): every phenomenon with random
  length, level (1 us - 1 s per value, k = 1), noise, AR(1) autocorrelation and skew, and
* the real corpus (``--real``, default ``tests/data/real-traces``: per-call traces of the shipped
  recipes on this machine, labelled by a detector-free protocol): share steady, share whose
  steady median is within the margin (2%) of the late-half reference, and whether the real
  traces, replayed as the timing loop would push them, stop on precision (ci_target 0.02)
  within 3 s.

The oracle is the mean of all iterations from the true steady start. Metrics: median and P90
relative error of the steady mean (traces with a steady state; a method that reports none
counts as an infinite error), share within 1% and 2%, four-class accuracy, false-steady rate
on ``no_steady_state`` traces, values consumed (online: when the detector would stop;
baselines: their fixed count) and beyond the true warmup, misses (error > 2%) and how many of
them stopped before the true steady start (the change came after the stop: invisible to any
method that stops there), and analysis time for 2,000 values. The held-out set also gets a
per-shape table of the offline and the default online detector.

    python benchmarks/bench_warmup.py [--traces DIR] [--real DIR] [--held-out N] [--synthetic N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.warmup import OnlineDetector, analyze, budget_floor_seconds, replay  # noqa: E402
from autotune.traces import (  # noqa: E402
    HELD_OUT_SEED,
    REAL_MARGIN,
    SHAPES,
    held_out_suite,
    load_trace,
    synthetic_suite,
    synthetic_trace,
)

#: max_seconds of the shipped recipe with the shortest per-candidate budget (quickstart).
SHORTEST_SHIPPED_BUDGET_S = 3.0


@dataclass(frozen=True)
class Trace:
    name: str
    values: np.ndarray
    cls: str
    steady_start: int | None
    shape: str
    k: int = 1  # iterations per value (the held-out set's blocks)

    @property
    def change_seconds(self) -> float:
        """Wall seconds at the true steady start (0 without one): where a causal method must still watch."""
        if not self.steady_start:
            return 0.0
        return float(self.values[: self.steady_start].sum()) * self.k

    @property
    def oracle(self) -> float | None:
        return None if self.steady_start is None else float(self.values[self.steady_start :].mean())


@dataclass(frozen=True)
class Outcome:
    mean: float | None  # reported steady mean (None: no steady state claimed)
    cls: str | None  # reported class (None: the method has no classes)
    consumed: int
    seconds: float


def load_shared(directory: Path) -> list[Trace]:
    labels = json.loads((directory / "labels.json").read_text())
    out = []
    for name, lab in sorted(labels.items()):
        out.append(Trace(name, load_trace(directory / name), lab["cls"], lab["steady_start"], lab.get("shape", "?")))
    return out


def load_held_out(count: int, seed: int) -> list[Trace]:
    return [
        Trace(f"{t.shape}-{i}", t.values, t.cls, t.steady_start, t.shape, t.iterations_per_value)
        for i, t in enumerate(held_out_suite(count, seed=seed))
    ]


def load_synthetic(count: int, seed: int) -> list[Trace]:
    return [
        Trace(f"{t.shape}-{i}", t.values, t.cls, t.steady_start, t.shape)
        for i, t in enumerate(synthetic_suite(count, seed=seed))
    ]


# -- methods -------------------------------------------------------------------------------------


def offline(t: Trace) -> Outcome:
    t0 = time.perf_counter()
    a = analyze(t.values)
    return Outcome(a.steady_mean, a.classification, t.values.size, time.perf_counter() - t0)


def online(t: Trace, **kw: float) -> Outcome:
    t0 = time.perf_counter()
    det = replay(t.values, **{"iterations_per_value": t.k, **kw})
    a = det.result()
    return Outcome(a.steady_mean, a.classification, det.consumed, time.perf_counter() - t0)


def fixed(discard: int, average: int) -> Callable[[Trace], Outcome]:
    def run(t: Trace) -> Outcome:
        t0 = time.perf_counter()
        window = t.values[discard : discard + average]
        return Outcome(float(window.mean()), None, discard + average, time.perf_counter() - t0)

    return run


# -- scoring -------------------------------------------------------------------------------------


def score(traces: list[Trace], outcomes: list[Outcome]) -> dict[str, float | None]:
    errors, beyond, consumed = [], [], []
    nss = false_steady = correct = classified = unseen = 0
    for t, o in zip(traces, outcomes, strict=True):
        if o.cls is not None:
            classified += 1
            correct += o.cls == t.cls
        if t.steady_start is None:
            nss += 1
            false_steady += o.mean is not None
            continue
        oracle = t.oracle
        assert oracle is not None
        errors.append(math.inf if o.mean is None else abs(o.mean - oracle) / oracle)
        beyond.append(o.consumed - t.steady_start)
        consumed.append(o.consumed)
        unseen += o.consumed <= t.steady_start and errors[-1] > 0.02
    err = np.asarray(errors)
    has = err.size > 0
    return {
        "median_err_%": float(np.median(err)) * 100 if has else None,
        "p90_err_%": float(np.percentile(err, 90)) * 100 if has else None,  # inf when > 10% missed
        "within_1%": float(np.mean(err <= 0.01)) if has else None,
        "within_2%": float(np.mean(err <= 0.02)) if has else None,
        "class_acc": correct / classified if classified else None,
        "false_steady": false_steady / nss if nss else None,
        "consumed_med": float(np.median(consumed)) if has else None,
        "beyond_warmup_med": float(np.median(beyond)) if has else None,
        # misses (> 2%) where the method stopped before the true steady start: no causal method
        # that stops there can see the change
        "missed_unseen": float(unseen) if has else None,
        "missed_total": float(np.sum(err > 0.02)) if has else None,
    }


def time_2000(traces: list[Trace], repeats: int = 3) -> tuple[float, float]:
    """Median and P90 over 2,000-value traces of the per-trace median analysis time (ms)."""
    per_trace = []
    for t in traces:
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            analyze(t.values)
            runs.append(time.perf_counter() - t0)
        per_trace.append(float(np.median(runs)) * 1e3)
    return float(np.median(per_trace)), float(np.percentile(per_trace, 90))


def fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    if math.isinf(v):
        return "inf"
    return f"{v:.3f}" if not pct else f"{v:.3f}%"


def report(title: str, traces: list[Trace], online_variants: dict[str, dict[str, float]]) -> dict[str, dict]:
    methods: dict[str, Callable[[Trace], Outcome]] = {"autotune offline": offline}
    for label, kw in online_variants.items():
        methods[label] = lambda t, kw=kw: online(t, **kw)
    methods["discard 3, average 300"] = fixed(3, 300)
    methods["discard 100, average 300"] = fixed(100, 300)
    results: dict[str, dict] = {}
    for name, method in methods.items():
        outs = [method(t) for t in traces]
        results[name] = score(traces, outs)
        results[name]["seconds_med_ms"] = float(np.median([o.seconds for o in outs])) * 1e3
    n_steady = sum(t.steady_start is not None for t in traces)
    print(f"\n## {title}: {len(traces)} traces ({n_steady} with a steady state, {len(traces) - n_steady} without)\n")
    headers = [
        "method", "median err", "P90 err", "within 1%", "within 2%", "class acc", "false steady",
        "consumed (med)", "beyond warmup (med)", "misses > 2% (change after stop)", "time/trace (med)",
    ]
    rows = []
    for name, r in results.items():
        rows.append([
            name, fmt(r["median_err_%"], True), fmt(r["p90_err_%"], True), fmt(r["within_1%"]),
            fmt(r["within_2%"]), fmt(r["class_acc"]), fmt(r["false_steady"]), f"{r['consumed_med']:.0f}",
            f"{r['beyond_warmup_med']:.0f}", f"{r['missed_total']:.0f} ({r['missed_unseen']:.0f})",
            f"{r['seconds_med_ms']:.1f} ms",
        ])
    print(tabulate(rows, headers=headers, tablefmt="github"))
    return results


def per_shape(traces: list[Trace], online_kw: dict[str, float]) -> None:
    rows = []
    for shape in sorted({t.shape for t in traces}):
        sub = [t for t in traces if t.shape == shape]
        r = score(sub, [offline(t) for t in sub])
        o = score(sub, [online(t, **online_kw) for t in sub])
        rows.append([
            shape, len(sub), fmt(r["class_acc"]), fmt(r["within_1%"]), fmt(r["false_steady"]),
            fmt(o["class_acc"]), fmt(o["within_2%"]), fmt(o["false_steady"]),
            "-" if o["beyond_warmup_med"] is None else f"{o['beyond_warmup_med']:.0f}",
            "-" if o["missed_total"] is None else f"{o['missed_total']:.0f} ({o['missed_unseen']:.0f})",
        ])
    headers = [
        "shape", "traces", "offline class acc", "offline within 1%", "offline false steady",
        "online class acc", "online within 2%", "online false steady", "online beyond (med)",
        "online misses (change after stop)",
    ]
    print(tabulate(rows, headers=headers, tablefmt="github"))


def targets(title: str, res: dict[str, dict], t2000: tuple[float, float], online_label: str) -> None:
    off, on = res["autotune offline"], res[online_label]
    checks = [
        ("offline share within 1%", off["within_1%"], ">=", 0.98),
        ("offline P90 error (%)", off["p90_err_%"], "<=", 0.5),
        ("offline false-steady rate", off["false_steady"], "<=", 0.05),
        ("offline four-class accuracy", off["class_acc"], ">=", 0.95),
        ("analysis of 2,000 values, median (ms)", t2000[0], "<=", 20.0),
        (f"online share within 2% ({online_label})", on["within_2%"], ">=", 0.95),
        (f"online values beyond the true warmup, median ({online_label})", on["beyond_warmup_med"], "<=", 400),
    ]
    rows = []
    for name, value, op, bound in checks:
        if value is None:
            verdict = "n/a"
        else:
            verdict = "PASS" if (value <= bound if op == "<=" else value >= bound) else "FAIL"
        rows.append([name, fmt(value), f"{op} {bound:g}", verdict])
    print(f"\n### Targets, {title}\n")
    print(tabulate(rows, headers=["target", "value", "required", "result"], tablefmt="github"))


# -- the real corpus ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RealTrace:
    name: str
    values: np.ndarray
    reference: float
    label: str
    recipe: str = ""


def load_real(directory: Path) -> list[RealTrace]:
    labels = json.loads((directory / "labels.json").read_text())
    return [
        RealTrace(name, load_trace(directory / name), float(lab["reference"]), str(lab["label"]),
                  str(lab.get("recipe", "")))
        for name, lab in sorted(labels.items())
    ]


def recipe_measure(recipe: str) -> tuple[float, float]:
    """(ci_target, max_seconds) of a shipped recipe's [measure] table, with the recipe defaults (0.01, 10)."""
    path = ROOT / "recipes" / f"{recipe}.toml"
    if not recipe or not path.exists():
        return 0.01, 10.0
    m = tomllib.loads(path.read_text()).get("measure", {})
    return float(m.get("ci_target", 0.01)), float(m.get("max_seconds", 10.0))


def real_report(traces: list[RealTrace], margin: float) -> dict[str, float]:
    """Offline and online (per-call values, k = 1) against the late-half reference.

    The online detector is replayed on the whole trace at ``ci_target`` = 0.02 (the shipped
    recipes' target); where it stops its median is compared with the late-half reference of
    the full trace (a stop that comes before a later level change is a miss).
    """
    rows = []
    res: dict[str, float] = {}
    for label, fn in (
        ("autotune offline", lambda x: analyze(x, margin=margin, with_ci=False)),
        ("autotune online", lambda x: replay(x, margin=margin, ci_target=0.02).result()),
    ):
        steady = within = steady_l = within_l = agree = 0
        n_label = sum(t.label == "steady" for t in traces)
        one_off = 0
        for t in traces:
            a = fn(t.values)
            ok = a.steady_median is not None and abs(a.steady_median / t.reference - 1.0) <= margin
            steady += a.steady
            within += ok
            one_off += len(a.one_off)
            agree += a.steady == (t.label == "steady")
            if t.label == "steady":
                steady_l += a.steady
                within_l += ok
        n = len(traces)
        rows.append([label, n, f"{steady / n:.3f}", f"{within / n:.3f}", n_label,
                     f"{steady_l / max(n_label, 1):.3f}", f"{within_l / max(n_label, 1):.3f}",
                     f"{agree / n:.3f}", one_off])
        res[f"{label} steady"] = steady / n
        res[f"{label} within"] = within / n
        res[f"{label} within (label steady)"] = within_l / max(n_label, 1)
    print(f"\n## Real corpus: {len(traces)} per-call traces of the shipped recipes on this machine"
          f" (margin {margin:g})\n")
    print(tabulate(rows, headers=[
        "method", "traces", "steady", f"median within {margin:.0%} of late-half ref", "labelled steady",
        "steady (of labelled steady)", "within (of labelled steady)", "agrees with label", "one-off spikes",
    ], tablefmt="github"))
    return res


def precision_stop(traces: list[RealTrace], *, budget: float | None, ci_target: float | None, margin: float,
                   block: float = 0.005) -> None:
    """Would candidates of the shipped recipes stop on precision within ``budget`` seconds?

    Each real trace (value 0, the first call, dropped: the timing loop times it apart) is
    turned into what the timing loop's throughput mode would push: means of blocks of
    k = ceil(block / median call) consecutive calls. The detector gets k as
    ``iterations_per_value``; the replay stops at the first of precision and ``budget``
    seconds of the trace's own time. Latency mode (k = 1) is the per-call trace itself.
    ``budget`` / ``ci_target`` None: each trace's recipe's own ``max_seconds`` / ``ci_target``
    (a replay that runs out of trace before its budget counts as not stopped).
    """
    rows = []
    for mode in ("throughput", "latency"):
        stops, secs = [], []
        for t in traces:
            x = t.values[1:]
            k = 1 if mode == "latency" else max(1, math.ceil(block / float(np.median(x))))
            m = x.size // k
            v = x[: m * k].reshape(m, k).mean(axis=1)
            own_ci, own_budget = recipe_measure(t.recipe)
            limit = own_budget if budget is None else budget
            det = OnlineDetector(ci_target=own_ci if ci_target is None else ci_target, margin=margin,
                                 iterations_per_value=k, floor_seconds=budget_floor_seconds(limit))
            stopped = False
            for val in v:
                if det.push(float(val)):
                    stopped = det.stopped_by == "precision"
                    break
                if det.seconds() >= limit:
                    break
            stops.append(stopped)
            secs.append(det.seconds())
        rows.append([mode, len(traces), f"{np.mean(stops):.3f}", f"{np.median(secs):.2f} s",
                     f"{np.percentile(secs, 90):.2f} s"])
    what = (f"within {budget:g} s (ci_target {ci_target:g}" if budget is not None and ci_target is not None
            else "within each recipe's own max_seconds (its own ci_target")
    print(f"\n### Stop on precision {what}, real traces replayed as the timing loop would push them)\n")
    print(tabulate(rows, headers=["mode", "traces", "stopped on precision", "seconds at stop (med)",
                                  "seconds (P90)"], tablefmt="github"))


def held_out_by_change_time(traces: list[Trace], floor_seconds: float) -> None:
    """Online within 2% split by when the true change happens: before the time cap or after.

    Two detectors: the defaults (the risk model alone: the 3,000-iteration horizon, no time cap)
    and the timing loop's detector for a 3 s budget (the horizon capped at ``floor_seconds``).
    """
    rows = []
    for title, sub in (
        ("change <= floor_seconds", [t for t in traces if t.steady_start and t.change_seconds <= floor_seconds]),
        ("change > floor_seconds", [t for t in traces if t.steady_start and t.change_seconds > floor_seconds]),
        ("no change (flat, periodic, compile_first...)", [t for t in traces if t.steady_start == 0]),
    ):
        if not sub:
            continue
        r = score(sub, [online(t) for t in sub])
        c = score(sub, [online(t, floor_seconds=floor_seconds) for t in sub])
        rows.append([title, len(sub), fmt(r["within_2%"]), f"{r['missed_total']:.0f} ({r['missed_unseen']:.0f})",
                     fmt(c["within_2%"]), f"{c['missed_total']:.0f} ({c['missed_unseen']:.0f})"])
    print("\nOnline detector on the held-out set by the time of the true change (the change counts as late"
          f" after {floor_seconds:g} s, the cap for a 3 s budget):\n")
    print(tabulate(rows, headers=["traces", "count", "within 2% (defaults: no cap)", "misses (change after stop)",
                                  f"within 2% (cap {floor_seconds:g} s)", "misses (change after stop)"],
                   tablefmt="github"))


def online_options(text: str) -> dict[str, float]:
    """``"floor_seconds=3.0,min_iterations=1000"`` -> keyword arguments of OnlineDetector."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{part!r}: expected KEY=VALUE")
        out[key.strip()] = float(value) if "." in value else int(value)
    return out


def online_label(kw: dict[str, float]) -> str:
    inner = ", ".join(f"{k}={v}" for k, v in kw.items()) or "defaults"
    return f"autotune online ({inner})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=Path, default=ROOT / "tests" / "data" / "warmup-traces",
                   help="directory with *.csv traces and labels.json")
    p.add_argument("--real", type=Path, default=ROOT / "tests" / "data" / "real-traces",
                   help="the real corpus (labels.json from benchmarks/capture_traces.py)")
    p.add_argument("--synthetic", type=int, default=240, help="synthetic suite traces (0: none)")
    p.add_argument("--seed", type=int, default=20240607, help="seed of the synthetic suite")
    p.add_argument("--held-out", type=int, default=240, help="held-out traces, changes up to 3,000 iterations")
    p.add_argument("--held-out-seed", type=int, default=HELD_OUT_SEED, help="seed of the held-out set (fixed)")
    p.add_argument("--online", type=online_options, nargs="*",
                   default=[{}, {"floor_seconds": budget_floor_seconds(SHORTEST_SHIPPED_BUDGET_S)}],
                   metavar="K=V[,K=V]",
                   help="OnlineDetector option sets to score ('' = the defaults); the first is checked "
                        "against the targets")
    args = p.parse_args(argv)

    variants = {online_label(kw): kw for kw in args.online}
    first_online = next(iter(variants))
    print("# Warmup detection benchmark\n")
    print(f"numpy {np.__version__}; timings on this machine, shared and noisy: compare rows of one run.")

    if (args.traces / "labels.json").exists():
        shared = load_shared(args.traces)
        res = report(f"labelled traces ({args.traces})", shared, variants)
        t2000 = time_2000([t for t in shared if t.values.size == 2000] or shared)
        print(f"\nanalysis time, 2,000-value traces: median {t2000[0]:.1f} ms, P90 {t2000[1]:.1f} ms")
        targets("labelled traces", res, t2000, first_online)
    else:
        print(f"\n(no labels.json in {args.traces}; skipping the labelled traces)")

    if args.held_out > 0:
        held = load_held_out(args.held_out, args.held_out_seed)
        res = report(f"held-out set (seed {args.held_out_seed}, changes up to 3,000 iterations)", held, variants)
        held_out_by_change_time(held, budget_floor_seconds(SHORTEST_SHIPPED_BUDGET_S))
        print()
        per_shape(held, variants[first_online])
        t2000 = time_2000([Trace(t.name, t.values[:2000], "", None, t.shape) for t in held if t.values.size >= 2000])
        targets("held-out set", res, t2000, first_online)

    if args.synthetic > 0:
        syn = load_synthetic(args.synthetic, args.seed)
        res = report(f"synthetic suite (seed {args.seed}, per-iteration values)", syn, variants)
        timing_set = [Trace(s, synthetic_trace(s, n=2000, seed=i).values, "", None, s) for i, s in enumerate(SHAPES)]
        t2000 = time_2000(timing_set)
        print(f"\nanalysis time, 2,000-value synthetic traces (one per shape): median {t2000[0]:.1f} ms,"
              f" P90 {t2000[1]:.1f} ms\n")
        per_shape(syn, variants[first_online])
        targets("synthetic suite", res, t2000, first_online)

    if (args.real / "labels.json").exists():
        real = load_real(args.real)
        res_real = real_report(real, REAL_MARGIN)
        rows = [
            ["offline: share steady with median within 2% of the late-half reference",
             fmt(res_real["autotune offline within"]), ">= 0.9",
             "PASS" if res_real["autotune offline within"] >= 0.9 else "FAIL"],
        ]
        print("\n### Targets, real corpus\n")
        print(tabulate(rows, headers=["target", "value", "required", "result"], tablefmt="github"))
        precision_stop(real, budget=3.0, ci_target=0.02, margin=REAL_MARGIN)
        precision_stop(real, budget=None, ci_target=None, margin=REAL_MARGIN)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
