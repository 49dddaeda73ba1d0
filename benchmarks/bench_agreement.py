"""Agreement with a plain process: does the tool time what a deployment would see?

For every model and variant, each round runs two separate processes, in a seeded random order:

* **tool** — the real CLI, ``autotune measure RECIPE --variant V --batch-size B --json`` (a measure
  worker builds the variant, gates it, times it); time per call = batch / throughput, i.e. the
  steady-state mean the tool reports (and its p50 for the median column);
* **plain** — ``python -c PLAIN`` importing only torch (+ torchvision, or the recipe's model file):
  the same factory, kwargs and seed, the same input shape/dtype, the variant built the way a
  deployment builds it (eager: the eval module; frozen: ``optimize_for_inference(freeze(script))``,
  trace if script fails; compile: ``torch.compile(model)``; onnx: ``torch.onnx.export`` (dynamo, the
  TorchScript exporter if it fails) and an ``onnxruntime.InferenceSession`` (ORT_ENABLE_ALL,
  intra-op threads = torch's) fed numpy arrays; openvino: ``openvino.convert_model``, static shapes,
  ``compile_model(..., "CPU", LATENCY hint, f32)`` and one infer request), torch's default thread
  count, calls in ``inference_mode``, warmed up, then ``torch.utils.benchmark.Timer.blocked_autorange``.
  The plain onnx/openvino sides import torch (to build and export the model) and the runtime, never
  autotune.

With ``--environments`` (names of :mod:`autotune.core.process_env`: ``glibc``, ``glibc-tuned``, ``jemalloc``,
``tcmalloc``, or ``auto``) every row is run in each process environment: the tool measures ``VARIANT+ENV`` (its
worker started with that allocator) and the plain process is started with the same variables (``LD_PRELOAD``,
``GLIBC_TUNABLES``), so each environment's row compares like with like. The ``bert`` model
(benchmarks/agreement/bert_fixed.toml, issue 23) is the one whose speed the allocator moves most.

Per round the ratio tool/plain of the mean time per call is printed; the verdict is on the median
over rounds: PASS when it lies in [0.95, 1.05]. The median/median ratio is shown too. The machine may
be shared: a side during which other processes used the CPUs (/proc/stat minus our child's CPU time)
is re-run, and a round still noisy after that is left out of the median (and printed as such).
Single rounds scatter by about 5% (plain processes differ in how often glibc hands the heap top back
and faults it in again), so use 5 rounds for a verdict at +-5%.

Run: .venv/bin/python benchmarks/bench_agreement.py [--models quickstart,mlp] [--variants eager,frozen]
     [--rounds 5] [--seed 0] [--plain-seconds 3] [--json out.json]     (about 22 min for everything)
     .venv/bin/python benchmarks/bench_agreement.py --models bert --variants eager --environments auto
     .venv/bin/python benchmarks/bench_agreement.py --summarize out.json   (the table again)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LOW, HIGH = 0.95, 1.05

#: model -> (recipe, batch size: a middle one of the recipe's list; 64 for the "auto" MLP)
MODELS: dict[str, tuple[str, int]] = {
    "quickstart": ("recipes/quickstart.toml", 16),
    "mobilenet_v3_large": ("recipes/mobilenet_v3_large.toml", 4),
    "transformer": ("recipes/transformer.toml", 8),
    "mlp": ("recipes/mlp.toml", 64),
    "bert": ("benchmarks/agreement/bert_fixed.toml", 8),
}
VARIANTS = ("eager", "frozen", "compile")

#: The plain deployment process. Imports torch (and the model's module) only: no autotune.
PLAIN = r"""
import importlib, importlib.util, json, resource, sys, time
cfg = json.loads(sys.argv[1])
import torch
import torch.utils.benchmark as tb

target, _, attr = cfg["factory"].rpartition(":")
if target.endswith(".py"):
    spec = importlib.util.spec_from_file_location("recipe_models", target)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
else:
    mod = importlib.import_module(target)
torch.manual_seed(cfg["seed"])
model = getattr(mod, attr)(**cfg["kwargs"]).eval()
model.requires_grad_(False)

gen = torch.Generator().manual_seed(0)
inputs = []
for inp in cfg["inputs"]:
    shape = (cfg["batch"], *inp["shape"])
    dtype = getattr(torch, inp["dtype"])
    if dtype.is_floating_point:
        inputs.append(torch.randn(shape, generator=gen).to(dtype))
    else:
        inputs.append(torch.randint(0, inp["vocab_size"], shape, generator=gen, dtype=dtype))
inputs = tuple(inputs)

t0 = time.perf_counter()
with torch.no_grad():
    if cfg["variant"] == "eager":
        fn = model
    elif cfg["variant"] == "frozen":
        try:
            ts = torch.jit.script(model)
        except Exception:
            ts = torch.jit.trace(model, inputs, check_trace=False, strict=False)
        fn = torch.jit.optimize_for_inference(torch.jit.freeze(ts.eval()))
    elif cfg["variant"] == "compile":
        fn = torch.compile(model)
    elif cfg["variant"] == "onnx":
        # a deployment: export once, then an InferenceSession fed numpy arrays
        import os, tempfile
        import onnxruntime as ort
        path = os.path.join(tempfile.mkdtemp(prefix="plain-onnx-"), "model.onnx")
        try:
            torch.onnx.export(model, inputs, path, dynamo=True, verbose=False)
        except Exception:
            torch.onnx.export(model, inputs, path, dynamo=False, opset_version=17)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = torch.get_num_threads()
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        feeds = {n: a.numpy() for n, a in zip(names, inputs)}
        inputs = ()
        fn = lambda: sess.run(None, feeds)
    elif cfg["variant"] == "openvino":
        # a deployment: convert, fix the shapes, compile for the CPU with the latency hint
        import openvino as ov
        ovm = ov.convert_model(model, example_input=inputs)
        ovm.reshape({i: ov.PartialShape(list(x.shape)) for i, x in enumerate(inputs)})
        compiled = ov.Core().compile_model(ovm, "CPU", {"PERFORMANCE_HINT": "LATENCY",
                                                        "INFERENCE_NUM_THREADS": torch.get_num_threads(),
                                                        "INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        arrays = [x.numpy() for x in inputs]
        inputs = ()
        fn = lambda: request.infer(arrays, share_inputs=True)
    else:
        raise SystemExit("unknown variant " + cfg["variant"])

with torch.inference_mode():
    fn(*inputs)
    first = time.perf_counter() - t0
    w0, n = time.perf_counter(), 0
    while n < 5 or time.perf_counter() - w0 < cfg["warmup_seconds"]:
        fn(*inputs)
        n += 1
    timer = tb.Timer("fn(*x)", globals={"fn": fn, "x": inputs}, num_threads=torch.get_num_threads())
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    m = timer.blocked_autorange(min_run_time=cfg["seconds"])
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
print(json.dumps({
    "mean_s": m.mean, "median_s": m.median, "iqr_s": m.iqr, "blocks": len(m.times),
    "number_per_run": m.number_per_run, "warmup_calls": n,
    "page_faults_per_call": faults / (len(m.times) * m.number_per_run), "build_and_first_call_s": first,
    "threads": torch.get_num_threads(), "torch": torch.__version__,
    "autotune_imported": any(k == "autotune" or k.startswith("autotune.") for k in sys.modules),
}))
"""


def plain_config(recipe_path: Path, variant: str, batch: int, *, seconds: float,
                 warmup_seconds: float) -> dict[str, Any]:
    data = tomllib.loads(recipe_path.read_text())
    factory = data["model"]["factory"]
    target, _, attr = factory.rpartition(":")
    if target.endswith(".py"):
        factory = f"{(recipe_path.parent / target).resolve()}:{attr}"
    inputs = [{"shape": list(i["shape"]), "dtype": i.get("dtype", "float32"), "vocab_size": i.get("vocab_size")}
              for i in data["inputs"]]
    return {"factory": factory, "kwargs": dict(data["model"].get("kwargs", {})), "inputs": inputs,
            "seed": int(data.get("search", {}).get("seed", 0)), "batch": batch, "variant": variant,
            "seconds": seconds, "warmup_seconds": warmup_seconds}


def _last_json(text: str) -> dict[str, Any]:
    """The JSON document a child printed (the tool prints one indented object; plain prints one line)."""
    start = text.find("{")
    if start < 0:
        raise ValueError(f"no JSON in output: {text[-500:]!r}")
    return json.loads(text[start:])


def _cpu_busy() -> tuple[float, float]:
    """(busy seconds of all CPUs, this process's children's CPU seconds), from /proc/stat and getrusage."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # user..steal, guest is inside user
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy, ru.ru_utime + ru.ru_stime


def wait_quiet(threshold: float, max_wait: float) -> float:
    """Wait (up to ``max_wait`` s) until the other processes use under ``threshold`` of the CPUs for 1 s."""
    t0 = time.perf_counter()
    while True:
        b0, _ = _cpu_busy()
        time.sleep(1.0)
        b1, _ = _cpu_busy()
        load = (b1 - b0) / (os.cpu_count() or 1)
        if load < threshold or time.perf_counter() - t0 > max_wait:
            return load


def measured_quietly(body: Any, *, threshold: float, attempts: int, max_wait: float) -> dict[str, Any]:
    """Run one side; repeat it (up to ``attempts``) when other processes used the CPUs meanwhile.

    "Other" = CPU busy time of the whole machine minus the CPU time of our own child, as a share of
    the window's CPU capacity: on 2 cores one foreign busy process halves what a 2-thread model gets.
    """
    for attempt in range(1, attempts + 1):
        wait_quiet(threshold, max_wait=max_wait)
        (b0, c0), t0 = _cpu_busy(), time.perf_counter()
        out = body()
        (b1, c1), wall = _cpu_busy(), time.perf_counter() - t0
        other = max(0.0, ((b1 - b0) - (c1 - c0)) / (wall * (os.cpu_count() or 1)))
        out.update(foreign_cpu_share=other, attempt=attempt)
        if other < threshold:
            break
    return out


def tool_variant(variant: str, environment: str) -> str:
    """The variant name the tool measures in ``environment`` (``eager+jemalloc``; the default adds nothing)."""
    from autotune.core.process_env import ProcessEnvironment

    return "+".join((variant, *ProcessEnvironment.parse(environment).modifiers))


def run_tool(recipe: Path, variant: str, batch: int) -> dict[str, Any]:
    cmd = [str(VENV_BIN / "autotune"), "measure", str(recipe), "--variant", variant, "--batch-size", str(batch),
           "--device", "cpu", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    wall = time.perf_counter() - t0
    row = _last_json(proc.stdout)
    if row.get("status") != "ok":
        raise RuntimeError(f"tool: {variant} @ {batch}: {row.get('status')}: {row.get('reason')}")
    return {"mean_s": batch / row["throughput"], "median_s": row["latency_ms"]["p50"] / 1e3,
            "samples": row["samples"], "iterations_per_sample": row.get("iterations_per_sample"),
            "stopped_by": row["stopped_by"], "classification": row["classification"],
            "compile_seconds": row["compile_seconds"], "wall_s": wall}


def run_plain(cfg: dict[str, Any], environment: str = "glibc") -> dict[str, Any]:
    """The plain process, started in ``environment`` (its allocator preload / tunables, as a deployment would)."""
    from autotune.core.process_env import ENV_MARKER, ProcessEnvironment

    env = {k: v for k, v in ProcessEnvironment.parse(environment).apply(os.environ).items()
           if not k.startswith("AUTOTUNE") or k == ENV_MARKER}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PLAIN, json.dumps(cfg)], capture_output=True, text=True,
                          cwd=ROOT / "recipes", env=env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"plain process failed ({proc.returncode}): {proc.stderr[-800:]}")
    out = _last_json(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t0
    return out


def _quiet(res: dict[str, Any], threshold: float) -> bool:
    return all(res[side].get("foreign_cpu_share", 0.0) < threshold for side in ("tool", "plain"))


def summarize(rounds: dict[tuple[str, str, str], list[dict[str, Any]]], args: argparse.Namespace,
              t_start: float | None) -> list[bool]:
    """Print the table of what has been measured so far; return the verdict of each model/variant."""
    from tabulate import tabulate

    table, verdicts = [], []
    for (model, variant, environment), all_rs in rounds.items():
        if not all_rs:
            continue
        # a round in which other processes used the CPUs (after every retry) measured them, not us
        rs = [x for x in all_rs if _quiet(x, args.quiet_threshold)] or all_rs
        dropped = [f"{x['ratio_mean']:.3f}" for x in all_rs if not _quiet(x, args.quiet_threshold)]
        ratios = [x["ratio_mean"] for x in rs]
        med = statistics.median(ratios)
        ok = LOW <= med <= HIGH
        verdicts.append(ok)
        table.append([
            model, variant, environment, MODELS[model][1],
            f"{statistics.median(x['tool']['mean_s'] for x in rs) * 1e3:.3f}",
            f"{statistics.median(x['plain']['mean_s'] for x in rs) * 1e3:.3f}",
            " ".join(f"{x:.3f}" for x in ratios) + (f" (noisy, left out: {' '.join(dropped)})" if dropped else ""),
            f"{med:.3f}", f"{min(ratios):.3f}-{max(ratios):.3f}",
            f"{statistics.median(x['ratio_median'] for x in rs):.3f}",
            "PASS" if ok else "FAIL",
        ])
    import torch  # only for the header line, after every child has run

    done = min(len(rs) for rs in rounds.values())
    total = "" if t_start is None else f", total {time.perf_counter() - t_start:.0f} s"
    print(f"\ntorch {torch.__version__}, {os.cpu_count()} CPUs, rounds={done}/{args.rounds}, order seed {args.seed}"
          f"{total}")
    print(tabulate(table, headers=["model", "variant", "environment", "batch", "tool ms/call", "plain ms/call",
                                   "per-round ratios", "median ratio", "min-max", "median/median",
                                   f"in {LOW}-{HIGH}"]))
    print(f"\n{sum(verdicts)}/{len(verdicts)} within {LOW}-{HIGH} (ratio = tool mean / plain mean time per call, "
          f"median over the rounds in which other processes used < {args.quiet_threshold:.0%} of the CPUs)")
    return verdicts


def write_json(args: argparse.Namespace, rounds: dict[tuple[str, str, str], list[dict[str, Any]]]) -> None:
    args.json.write_text(json.dumps({
        "rounds": args.rounds, "seed": args.seed, "plain_seconds": args.plain_seconds,
        "results": [{"model": m, "variant": v, "environment": e, "batch_size": MODELS[m][1], "rounds": rs}
                    for (m, v, e), rs in rounds.items()],
    }, indent=2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--environments", default="glibc",
                    help="comma-separated process environments (glibc, glibc-tuned, jemalloc, tcmalloc, "
                         "+omp-passive...), or auto: every allocator found here")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="seed of the per-round tool/plain order")
    ap.add_argument("--plain-seconds", type=float, default=3.0, help="blocked_autorange min_run_time")
    ap.add_argument("--plain-warmup", type=float, default=1.5, help="seconds of warm-up calls before timing")
    ap.add_argument("--quiet-threshold", type=float, default=0.10,
                    help="share of the CPUs other processes may use while a side runs; above it the side is "
                         "repeated")
    ap.add_argument("--max-wait", type=float, default=60.0, help="seconds to wait for a quiet machine per try")
    ap.add_argument("--attempts", type=int, default=2, help="tries per side before a noisy one is kept")
    ap.add_argument("--json", type=Path, default=None, help="write every round's numbers here")
    ap.add_argument("--summarize", type=Path, default=None, metavar="JSON",
                    help="print the table of an earlier run's --json file (no measuring)")
    args = ap.parse_args()
    if args.summarize:
        data = json.loads(args.summarize.read_text())
        args.rounds, args.seed = data["rounds"], data["seed"]
        done = {(r["model"], r["variant"], r.get("environment", "glibc")): r["rounds"] for r in data["results"]}
        return 0 if all(summarize(done, args, None)) else 1
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or args.rounds < 1:
        ap.error(f"unknown models {unknown}" if unknown else "--rounds must be >= 1")

    from autotune.core.process_env import resolve_environments

    envs, missing = resolve_environments("auto" if args.environments.strip() == "auto"
                                         else [e.strip() for e in args.environments.split(",") if e.strip()])
    for name, reason in missing:
        print(f"environment {name} left out: {reason}")
    environments = [e.name for e in envs]
    rng = random.Random(args.seed)
    rounds: dict[tuple[str, str, str], list[dict[str, Any]]] = {
        (m, v, e): [] for m in models for v in variants for e in environments}
    t_start = time.perf_counter()
    print(f"order seed {args.seed}; {args.rounds} rounds; plain: blocked_autorange(min_run_time="
          f"{args.plain_seconds}) after {args.plain_warmup} s of warm-up", flush=True)
    for r in range(args.rounds):
        for model in models:
            recipe_rel, batch = MODELS[model]
            recipe = ROOT / recipe_rel
            for variant, environment in ((v, e) for v in variants for e in environments):
                order = ["tool", "plain"]
                rng.shuffle(order)
                res: dict[str, Any] = {"order": order}
                for side in order:
                    if side == "tool":
                        res["tool"] = measured_quietly(functools.partial(run_tool, recipe,
                                                                         tool_variant(variant, environment), batch),
                                                       threshold=args.quiet_threshold, attempts=args.attempts,
                                                       max_wait=args.max_wait)
                    else:
                        cfg = plain_config(recipe, variant, batch, seconds=args.plain_seconds,
                                           warmup_seconds=args.plain_warmup)
                        res["plain"] = measured_quietly(functools.partial(run_plain, cfg, environment),
                                                        threshold=args.quiet_threshold, attempts=args.attempts,
                                                        max_wait=args.max_wait)
                res["ratio_mean"] = res["tool"]["mean_s"] / res["plain"]["mean_s"]
                res["ratio_median"] = res["tool"]["median_s"] / res["plain"]["median_s"]
                rounds[(model, variant, environment)].append(res)
                print(f"round {r + 1} {model:<18} {variant:<8} {environment:<12} order {'/'.join(order):<10} "
                      f"tool {res['tool']['mean_s'] * 1e3:9.3f} ms ({res['tool']['samples']} samples, "
                      f"{res['tool']['stopped_by']})  plain {res['plain']['mean_s'] * 1e3:9.3f} ms "
                      f"(threads {res['plain']['threads']}, {res['plain']['page_faults_per_call']:.0f} faults/call)  "
                      f"ratio {res['ratio_mean']:.3f}  foreign CPU "
                      f"{res['tool']['foreign_cpu_share']:.0%}/{res['plain']['foreign_cpu_share']:.0%} "
                      f"tries {res['tool']['attempt']}/{res['plain']['attempt']}  "
                      f"[{time.perf_counter() - t_start:.0f} s]", flush=True)
        if args.json:
            write_json(args, rounds)
        if r + 1 < args.rounds:
            print(f"\nafter round {r + 1}:")
            summarize(rounds, args, t_start)
            print(flush=True)

    verdicts = summarize(rounds, args, t_start)
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
