"""Deployment runtimes side by side: PyTorch variants, ONNX Runtime and OpenVINO under the showdown's rules.

For each model (quickstart resnet18 at batch 16, mobilenet_v3_large at 4, the transformer at 8: the
batches of ``bench_agreement.py``) this

1. writes a recipe with the model's factory and inputs, one batch size, and the variants ``eager``,
   ``frozen``, ``compile``, ``onnx``, ``openvino`` and ``openvino:throughput`` (throughput objective,
   no showdown of its own), and runs the real CLI on it (``autotune run``): every variant is built,
   gated against eager, and screened (warmup detection, timing to the CI target);
2. re-measures *every* variant that passed, not only the finalists a tuning would pick, with the
   showdown machinery (``autotune.showdown.run_showdown``): fresh worker processes per variant (2),
   randomized interleaved rounds, rounds a neighbour disturbed left out, paired ratios to the leader
   with bootstrap CIs, ties within the 2% margin broken by simplicity.

The table gives both: the screening throughput with its within-window CI, and the paired ratio to the
leader with its CI over rounds. Build seconds are the export/conversion (runtimes) or the build and
first call (torch variants).

    .venv/bin/python benchmarks/bench_runtimes.py [--models quickstart,transformer] [--rounds 6]
                                                  [--out bench-out/runtimes] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.runner import Runner  # noqa: E402
from autotune.showdown import ShowdownSettings, run_showdown  # noqa: E402

MODELS: dict[str, tuple[str, int]] = {
    "quickstart": ("recipes/quickstart.toml", 16),
    "mobilenet_v3_large": ("recipes/mobilenet_v3_large.toml", 4),
    "transformer": ("recipes/transformer.toml", 8),
}
VARIANTS = ("eager", "frozen", "compile", "onnx", "openvino", "openvino:throughput")


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


def side_by_side_recipe(model: str, *, variants: tuple[str, ...], max_seconds: float) -> str:
    """The model's recipe reduced to one batch size and the runtime variants (absolute factory path)."""
    rel, batch = MODELS[model]
    path = ROOT / rel
    data = tomllib.loads(path.read_text())
    factory = data["model"]["factory"]
    target, _, attr = factory.rpartition(":")
    if target.endswith(".py"):
        factory = f"{(path.parent / target).resolve()}:{attr}"
    lines = [f'name = "runtimes-{model}"', 'device = "cpu"', "", "[model]", f"factory = {_toml_value(factory)}"]
    if data["model"].get("kwargs"):
        lines.append(f"kwargs = {_toml_value(data['model']['kwargs'])}")
    for inp in data["inputs"]:
        lines += ["", "[[inputs]]"] + [f"{k} = {_toml_value(v)}" for k, v in inp.items()]
    lines += ["", "[search]", f"variants = {_toml_value(list(variants))}", f"batch_sizes = [{batch}]",
              'objective = "throughput"', "time_budget_s = 1200", "",
              "[measure]", 'mode = "throughput"', "ci_target = 0.02", f"max_seconds = {max_seconds}",
              "rounds = 0", "timeout_s = 600"]
    return "\n".join(lines) + "\n"


def run_model(model: str, args: argparse.Namespace) -> dict[str, Any]:
    out = args.out / model
    out.mkdir(parents=True, exist_ok=True)
    recipe = out / "recipe.toml"
    recipe.write_text(side_by_side_recipe(model, variants=tuple(args.variants), max_seconds=args.max_seconds))
    t0 = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).parent / "autotune"), "run", str(recipe), "--out",
                           str(out / "run")], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"autotune run failed ({proc.returncode}): {proc.stderr[-1500:]}")
    report = json.loads((out / "run" / "report.json").read_text())
    rows = [r for r in report["candidates"] if r.get("status") == "ok" and r.get("feasible")]
    screened = time.perf_counter() - t0
    settings = ShowdownSettings(rounds=args.rounds, round_seconds=args.round_seconds, margin=0.02,
                                objective="throughput", latency_percentile="p99", timeout_s=600.0,
                                seed=args.seed, processes=2)
    recipe_data = {k: v for k, v in report["recipe"].items() if k != "device_resolved"}  # as run_document.rerender
    doc = run_showdown(rows, recipe_data=recipe_data, settings=settings, make_runner=Runner,
                       on_progress=lambda text: print(f"  {model}: {text}", flush=True))
    return {"model": model, "batch_size": MODELS[model][1], "candidates": report["candidates"],
            "showdown": doc, "screen_seconds": screened, "total_seconds": time.perf_counter() - t0}


def table(result: dict[str, Any]) -> str:
    from tabulate import tabulate

    verdict = (result["showdown"] or {}).get("verdict") or {}
    standings = {s["key"]: s for s in verdict.get("standings", [])}
    rows = []
    for r in result["candidates"]:
        key = f"{r['variant']}@{r['batch_size']}"
        s = standings.get(key)
        ci = r.get("throughput_ci") or [None, None]
        screen = (f"{r['throughput']:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]" if r.get("throughput") and ci[0] is not None
                  else "-")
        ratio = f"{s['ratio']:.3f} [{s['ratio_ci'][0]:.3f}, {s['ratio_ci'][1]:.3f}]" if s else "-"
        mark = ("pick" if key == verdict.get("pick") else "") + (" leader" if key == verdict.get("leader") else "")
        rows.append([r["variant"], r.get("status"), screen, f"{(r.get('compile_seconds') or 0):.1f}",
                     ratio, "yes" if s and s["tied"] else ("no" if s else "-"), mark.strip(),
                     (r.get("reason") or "")[:60]])
    dropped = (result["showdown"] or {}).get("dropped") or {}
    head = (f"## {result['model']}, batch {result['batch_size']} ({result['total_seconds']:.0f} s; rounds compared "
            f"{len((result['showdown'] or {}).get('rounds_compared', []))}, disturbed "
            f"{len((result['showdown'] or {}).get('disturbed_rounds', []))})\n")
    body = tabulate(rows, headers=["variant", "status", "screen samples/s [95% CI]", "build s",
                                   "paired ratio to leader [95% CI]", "tied (2%)", "", "reason"])
    extra = "".join(f"\n  dropped from the showdown: {k}: {v}" for k, v in dropped.items())
    return head + body + extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--max-seconds", type=float, default=3.0, help="screening budget per variant")
    ap.add_argument("--rounds", type=int, default=6, help="undisturbed showdown rounds")
    ap.add_argument("--round-seconds", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "runtimes")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
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
