"""Lower precision on this CPU: the best fp32, bf16 and int8 configuration per runtime, with the paired speed-up
over the best fp32 and the accuracy it costs on a labelled set (issue 19's table).

For each model (``bert``: recipes/precision_bert.toml, BERT-tiny trained on a generated marker-token task;
``cnn``: recipes/precision_cnn.toml, a small CNN trained on generated stripe images) this

1. writes a recipe with the model, its ``[data]`` traffic, one batch size and the variants ``eager``,
   ``compile``, ``onnx``, ``openvino`` crossed with ``fp32``, ``bf16``, ``int8``, plus ``onnx+int8-static``
   (bf16 only where the CPU has native bf16), and runs the real CLI on it (``autotune run``, no showdown of its
   own): every variant is built (quantized and calibrated on the traffic: build time), gated against eager and
   screened;
2. re-measures every candidate that passed with the showdown machinery (``autotune.showdown.run_showdown``:
   fresh workers, randomized interleaved rounds, disturbed rounds left out) and computes each candidate's
   paired ratio to the **best fp32** candidate over the same rounds (median of the per-round log ratios,
   bootstrap 95% CI: ``autotune.showdown.paired``'s);
3. scores every candidate's accuracy on the task's labelled set (``recipes/labelled.py:labelled_set``, seed 1:
   samples the calibration never saw), each variant built in this process exactly as the worker builds it
   (``build_variant`` with the traffic's calibration batches), against eager fp32's accuracy.

The table: per runtime (torch = eager/compile, onnx, openvino) and precision, the fastest candidate that
passed, its showdown throughput, ratio to the best fp32 [95% CI], accuracy and drop in points; and whether it
is slower than the same runtime's fp32 (int8 is, on some CPUs and models).

    .venv/bin/python benchmarks/bench_precision.py [--models bert,cnn] [--rounds 6] [--round-seconds 0.5]
        [--max-seconds 3] [--samples 512] [--out bench-out/precision] [--json out.json]

Small run (proves the script; numbers are noise on a loaded machine):
    .venv/bin/python benchmarks/bench_precision.py --models cnn --bases eager,onnx,openvino --rounds 2 \
        --round-seconds 0.2 --max-seconds 1 --samples 64
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.runner import Runner  # noqa: E402
from autotune.showdown import ShowdownSettings, run_showdown  # noqa: E402
from autotune.showdown.paired import hierarchical_median_ci  # noqa: E402

#: model -> (recipe, batch size, labelled task)
MODELS: dict[str, tuple[str, int, str]] = {
    "bert": ("recipes/precision_bert.toml", 16, "text"),
    "cnn": ("recipes/precision_cnn.toml", 32, "images"),
}
BASES = ("eager", "compile", "onnx", "openvino")
PRECISIONS = ("fp32", "bf16", "int8")
EXTRA = ("onnx+int8-static",)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {v!r} as TOML")


def _absolute(factory: str, base: Path) -> str:
    target, _, attr = factory.rpartition(":")
    return f"{(base / target).resolve()}:{attr}" if target.endswith(".py") else factory


def precision_recipe(model: str, *, max_seconds: float, bases: tuple[str, ...] = BASES,
                     precisions: tuple[str, ...] = PRECISIONS, extra: tuple[str, ...] = EXTRA) -> str:
    """The model's recipe at one batch size, every base crossed with every precision (absolute factory paths)."""
    rel, batch, _ = MODELS[model]
    path = ROOT / rel
    data = tomllib.loads(path.read_text())
    lines = [f'name = "precision-{model}"', 'device = "cpu"', "", "[model]",
             f"factory = {_toml_value(_absolute(data['model']['factory'], path.parent))}",
             f"kwargs = {_toml_value(data['model'].get('kwargs', {}))}", "", "[data]",
             f"factory = {_toml_value(_absolute(data['data']['factory'], path.parent))}",
             f"kwargs = {_toml_value(data['data'].get('kwargs', {}))}"]
    for key in ("max_batches", "pad_values"):
        if key in data["data"]:
            lines.append(f"{key} = {_toml_value(data['data'][key])}")
    lines += ["", "[search]", f"variants = {_toml_value([*bases, *extra])}",
              f"precisions = {_toml_value(list(precisions))}", f"batch_sizes = [{batch}]",
              'objective = "throughput"', "time_budget_s = 3600", "",
              "[measure]", 'mode = "throughput"', "ci_target = 0.02", f"max_seconds = {max_seconds}",
              "rounds = 0", "timeout_s = 900"]
    return "\n".join(lines) + "\n"


def runtime_of(variant: str) -> str:
    base = variant.split("+")[0].split(":")[0]
    return base if base in ("onnx", "openvino") else "torch"


def precision_of(variant: str) -> str:
    parts = variant.split("+")[1:]
    return next((p for p in parts if p in ("bf16", "fp16", "int8", "int8-static")), "fp32")


# ---- accuracy on the labelled set ---------------------------------------------------------------------------


def accuracies(model: str, recipe_path: Path, variants: list[str], *, samples: int) -> dict[str, Any]:
    """Accuracy of eager fp32 and of each variant on the labelled set (seed 1), built as the worker builds it."""
    import importlib.util

    import torch

    from autotune.core.recipe import load_recipe
    from autotune.worker.model import build_model
    from autotune.worker.traffic import adapt, load_traffic
    from autotune.worker.variants import VariantSpec, build_variant
    from autotune.worker.variants.quantize import calibration_for

    _, batch, task = MODELS[model]
    spec_l = importlib.util.spec_from_file_location("recipes_labelled", ROOT / "recipes" / "labelled.py")
    assert spec_l is not None and spec_l.loader is not None
    labelled = importlib.util.module_from_spec(spec_l)
    spec_l.loader.exec_module(labelled)
    recipe = load_recipe(recipe_path)
    device = torch.device("cpu")
    net = build_model(recipe, device=device)
    traffic = load_traffic(recipe, batch_size=batch, device=device, seed=0)
    eager = adapt(net, traffic.layout)
    kwargs = tomllib.loads((ROOT / MODELS[model][0]).read_text())["data"].get("kwargs", {})
    task_kwargs = ({"seq_min": kwargs.get("seq_min", 16), "seq_max": kwargs.get("seq_max", 64)} if task == "text"
                   else {"size": kwargs.get("size", 32), "classes": kwargs.get("classes", 10),
                         "noise": kwargs.get("noise", 0.5)})
    held = labelled.labelled_set(task, samples=samples, batch_size=batch, seed=1, **task_kwargs)

    def flat(x: Any) -> tuple[Any, ...]:
        return tuple(x[n] for n in traffic.layout.names) if isinstance(x, dict) else (x,)

    def logits(out: Any) -> Any:
        if hasattr(out, "logits"):
            return out.logits
        if isinstance(out, dict):
            return out["logits"]
        return out[0] if isinstance(out, (list, tuple)) else out

    def score(fn: Any, prepare: Any) -> tuple[float, Any]:
        hits = total = 0
        preds = []
        with torch.inference_mode():
            for x, y in held:
                p = logits(fn(*prepare(flat(x)))).float().argmax(-1)
                preds.append(p)
                hits += int((p == y).sum())
                total += int(y.numel())
        return hits / total, torch.cat(preds)

    reference, ref_pred = score(eager, lambda xs: xs)
    out: dict[str, Any] = {"eager fp32": {"accuracy": reference, "agreement": 1.0}}
    for name in variants:
        spec = VariantSpec.parse(name)
        try:
            with torch.inference_mode():
                built = build_variant(spec, eager, traffic.example, device="cpu", dynamic_dims=traffic.build_dims(),
                                      input_names=traffic.layout.names,
                                      calibration=calibration_for(spec, recipe, traffic, batch_size=batch,
                                                                  device=device))
            acc, pred = score(built.fn, built.prepare_inputs)
            out[name] = {"accuracy": acc, "agreement": float((pred == ref_pred).float().mean()),
                         "model_bytes": built.model_bytes}
        except Exception as exc:  # a variant that cannot be built here is reported, not fatal
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        if spec.compiler == "compile":
            torch._dynamo.reset()
    return out


# ---- one model -------------------------------------------------------------------------------------------------


def run_model(model: str, args: argparse.Namespace) -> dict[str, Any]:
    out = args.out / model
    out.mkdir(parents=True, exist_ok=True)
    recipe = out / "recipe.toml"
    recipe.write_text(precision_recipe(model, max_seconds=args.max_seconds, bases=tuple(args.bases),
                                       precisions=tuple(args.precisions),
                                       extra=tuple(e for e in EXTRA if e.split("+")[0] in args.bases)))
    t0 = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).parent / "autotune"), "run", str(recipe), "--out",
                           str(out / "run")], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"autotune run failed ({proc.returncode}): {proc.stderr[-1500:]}")
    report = json.loads((out / "run" / "report.json").read_text())
    rows = [r for r in report["candidates"] if r.get("status") == "ok" and r.get("feasible")]
    screened = time.perf_counter() - t0
    settings = ShowdownSettings(rounds=args.rounds, round_seconds=args.round_seconds, margin=0.02,
                                objective="throughput", latency_percentile="p99", timeout_s=900.0,
                                seed=args.seed, processes=2)
    recipe_data = {k: v for k, v in report["recipe"].items() if k != "device_resolved"}
    doc = run_showdown(rows, recipe_data=recipe_data, settings=settings, make_runner=Runner,
                       on_progress=lambda text: print(f"  {model}: {text}", flush=True))
    acc = accuracies(model, recipe, [r["variant"] for r in rows], samples=args.samples)
    return {"model": model, "batch_size": MODELS[model][1], "candidates": report["candidates"],
            "unavailable": report.get("unavailable"), "showdown": doc, "accuracy": acc,
            "screen_seconds": screened, "total_seconds": time.perf_counter() - t0}


def paired_to_best_fp32(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per candidate key: median throughput over the compared rounds, and the paired ratio to the best fp32
    candidate (median of per-round log ratios) with its bootstrap 95% CI."""
    doc = result["showdown"] or {}
    per_round: dict[str, list[float]] = doc.get("seconds_per_call") or {}
    used = doc.get("rounds_compared") or []
    batch = result["batch_size"]
    perf = {k: np.array([batch / v[i] for i in used if i < len(v)]) for k, v in per_round.items()}
    perf = {k: p for k, p in perf.items() if p.size and p.size == len(used)}
    fp32 = [k for k in perf if precision_of(k.split("@")[0]) == "fp32"]
    if not fp32:
        return {}
    best = max(fp32, key=lambda k: float(np.median(perf[k])))
    out = {}
    for i, (k, p) in enumerate(perf.items()):
        d = np.log(p) - np.log(perf[best])
        lo, hi = hierarchical_median_ci(d, seed=i) if d.size > 1 else (float(d[0]), float(d[0]))
        out[k] = {"throughput": float(np.median(p)), "ratio": math.exp(float(np.median(d))),
                  "ratio_ci": (math.exp(lo), math.exp(hi)), "best_fp32": best}
    return out


def table(result: dict[str, Any]) -> str:
    from tabulate import tabulate

    paired = paired_to_best_fp32(result)
    acc = result["accuracy"]
    reference = acc["eager fp32"]["accuracy"]
    best: dict[tuple[str, str], str] = {}
    for key, s in paired.items():
        variant = key.split("@")[0]
        group = (runtime_of(variant), "int8" if precision_of(variant).startswith("int8") else precision_of(variant))
        if group not in best or s["throughput"] > paired[best[group]]["throughput"]:
            best[group] = key
    fp32_of = {rt: paired[k]["throughput"] for (rt, p), k in best.items() if p == "fp32"}
    rows = []
    for rt in ("torch", "onnx", "openvino"):
        for prec in ("fp32", "bf16", "int8"):
            key = best.get((rt, prec))
            if key is None:
                rows.append([rt, prec, "-", "-", "-", "-", "-", "-", "not measured (unavailable, rejected or failed)"])
                continue
            s = paired[key]
            a = acc.get(key.split("@")[0], {})
            note = ""
            if prec != "fp32" and rt in fp32_of and s["throughput"] < fp32_of[rt]:
                note = f"slower than {rt} fp32"
            rows.append([rt, prec, key.split("@")[0], f"{s['throughput']:.0f}",
                         f"{s['ratio']:.2f} [{s['ratio_ci'][0]:.2f}, {s['ratio_ci'][1]:.2f}]",
                         f"{100 * a['accuracy']:.1f}" if "accuracy" in a else a.get("error", "-")[:40],
                         f"{100 * (reference - a['accuracy']):+.1f}" if "accuracy" in a else "-",
                         f"{100 * a['agreement']:.1f}" if "agreement" in a else "-", note])
    doc = result["showdown"] or {}
    head = (f"## {result['model']}, batch {result['batch_size']} (eager fp32 accuracy {100 * reference:.1f}%; "
            f"{result['total_seconds']:.0f} s; rounds compared {len(doc.get('rounds_compared', []))}, disturbed "
            f"{len(doc.get('disturbed_rounds', []))}; ratio to the best fp32: "
            f"{next(iter(paired.values()))['best_fp32'] if paired else '-'})\n")
    body = tabulate(rows, headers=["runtime", "precision", "best variant", "samples/s", "ratio to best fp32 [95% CI]",
                                   "accuracy %", "drop (points)", "top-1 agreement %", ""])
    rejected = [f"{r['variant']}: {r.get('status')}: {(r.get('reason') or '')[:90]}" for r in result["candidates"]
                if r.get("status") != "ok"]
    return head + body + "".join(f"\n  {line}" for line in rejected)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--max-seconds", type=float, default=3.0, help="screening budget per variant")
    ap.add_argument("--rounds", type=int, default=6, help="undisturbed showdown rounds")
    ap.add_argument("--round-seconds", type=float, default=0.5)
    ap.add_argument("--samples", type=int, default=512, help="labelled samples the accuracy is scored on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bases", default=",".join(BASES), help="compilers crossed with the precisions")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "precision")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.bases = [b.strip() for b in args.bases.split(",") if b.strip()]
    args.precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    results = []
    for model in models:
        print(f"{model} ...", flush=True)
        results.append(run_model(model, args))
        print(table(results[-1]) + "\n", flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
