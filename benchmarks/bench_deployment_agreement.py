"""Does the recommendation deliver what the report says? Its artifact, run by its own load.py in a plain process.

For each run directory (made by ``autotune run RECIPE --out DIR``), read the recommendation's reported throughput
from ``DIR/report.json``, then time ``DIR/artifact/load.py`` in a fresh Python process that imports only what a
deployment would: torch (or onnxruntime / openvino and numpy), the loader, and for a recipe with ``[data]`` the
user's own data factory (a service has its own requests; autotune is never imported: the child checks
``sys.modules``). The child serves the same traffic the candidates were timed on: the factory's first
``max_batches`` batches at the recommended batch size, cycled in order (or the loader's ``make_inputs()`` batch
for a recipe without ``[data]``), warms every shape up, then times whole passes for ``--seconds``. A recommendation
measured in another process environment (``onnx+jemalloc``) is started in it, as its ``run.sh`` would start it
(the loader's own re-exec runs only for ``python load.py``, not under ``runpy``).

Rounds are interleaved: round 1 of every run directory, then round 2, ... so drift on this shared machine lands
on every run alike. Prints a markdown table: reported throughput, the plain process's per round, and the ratio
plain / reported (median of the rounds); the issue's bar is 0.93-1.07.

    python benchmarks/bench_deployment_agreement.py demo-out bert-out timm-out --rounds 3 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import importlib.util, json, runpy, sys, time
spec = json.loads(sys.argv[1])
ns = runpy.run_path(spec["loader"])
predict = ns["load"]()
kind = spec["kind"]
if spec.get("data"):
    import torch
    d = spec["data"]
    mod_spec = importlib.util.spec_from_file_location("user_data", d["file"])
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    torch.manual_seed(d["seed"])
    it = iter(getattr(mod, d["function"])(batch_size=spec["batch_size"], **d["kwargs"]))
    batches = []
    for b in it:
        batches.append(b)
        if len(batches) >= d["max_batches"]:
            break
    def form(b):
        if kind in ("onnx", "openvino"):
            conv = lambda t: t.numpy()
        else:
            conv = lambda t: t
        if isinstance(b, dict):
            return (), {k: conv(v) for k, v in b.items()}
        if isinstance(b, (tuple, list)):
            return tuple(conv(v) for v in b), {}
        return (conv(b),), {}
    calls = [form(b) for b in batches]
    rows = [int(next(iter(a or k.values())).shape[0]) for a, k in calls]
else:
    x = ns["make_inputs"]()
    calls = [(tuple(x), {})]
    rows = [int(x[0].shape[0])]
assert "autotune" not in sys.modules, "the plain process imported autotune"
def one_pass():
    for a, k in calls:
        predict(*a, **k)
for _ in range(3):
    one_pass()
end = time.perf_counter() + 1.0
while time.perf_counter() < end:
    one_pass()
t0 = time.perf_counter(); n = 0
while True:
    one_pass(); n += 1
    t = time.perf_counter() - t0
    if t >= spec["seconds"]:
        break
print(json.dumps({"throughput": n * sum(rows) / t, "passes": n}))
"""


def child_environment(run_dir: Path) -> dict[str, str]:
    """The variables the recommendation's process environment sets (``run.sh``'s), over this process's."""
    from autotune.core.process_env import environment_of_variant

    rec = json.loads((run_dir / "report.json").read_text())["recommendation"]
    return environment_of_variant(str(rec["variant"])).apply(os.environ)


def child_spec(run_dir: Path, seconds: float) -> tuple[dict[str, object], float, str]:
    doc = json.loads((run_dir / "report.json").read_text())
    rec = doc["recommendation"]
    art = doc.get("artifact") or {}
    if art.get("status") != "ok":
        raise SystemExit(f"{run_dir}: no artifact ({art.get('reason')})")
    recipe = doc["recipe"]
    spec: dict[str, object] = {"loader": str(run_dir / "artifact" / "load.py"), "kind": art["kind"],
                               "batch_size": rec["batch_size"], "seconds": seconds}
    data = recipe.get("data")
    if data:
        target, _, function = data["factory"].rpartition(":")
        file = Path(target) if Path(target).is_absolute() else Path(data["base_dir"]) / target
        spec["data"] = {"file": str(file), "function": function, "kwargs": data.get("kwargs") or {},
                        "max_batches": data.get("max_batches", 16), "seed": recipe["search"].get("seed", 0)}
    return spec, float(rec["throughput"]), f"{rec['variant']}@{rec['batch_size']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    args.runs = [r.resolve() for r in args.runs]
    specs = {r: child_spec(r, args.seconds) for r in args.runs}
    plain: dict[Path, list[float]] = {r: [] for r in args.runs}
    for _ in range(args.rounds):
        for run in args.runs:
            spec = specs[run][0]
            proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True,
                                  cwd=run, timeout=600, env=child_environment(run))
            if proc.returncode != 0:
                raise SystemExit(f"{run}: the plain process failed: {proc.stderr[-800:]}")
            plain[run].append(json.loads(proc.stdout.strip().splitlines()[-1])["throughput"])
    print("| run | recommendation | reported (samples/s) | plain process per round | ratio (median) |")
    print("|---|---|---|---|---|")
    for run in args.runs:
        _, reported, name = specs[run]
        ratio = statistics.median(plain[run]) / reported
        rounds = ", ".join(f"{v:.1f}" for v in plain[run])
        print(f"| {run.name} | {name} | {reported:.1f} | {rounds} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
