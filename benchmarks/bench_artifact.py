"""Artifact sizes and build times: the deployable artifact of each variant of a recipe, at one batch size.

Runs the same step `autotune run` ends with (:func:`autotune.deployment.write_deployment`: a fresh worker builds
the variant, saves it, profiles it and eager) for every variant given, and prints a markdown table for
BENCHMARKS.md. Then it times ``load()`` + one batch of each artifact's ``load.py`` in a fresh process.

    python benchmarks/bench_artifact.py recipes/quickstart.toml --batch-size 16 \\
        --variants eager script trace frozen compile export onnx openvino
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autotune.core.recipe import load_recipe
from autotune.deployment import ARTIFACT_DIR, LOADER_NAME, write_deployment
from autotune.runner import Runner
from autotune.worker.variants import VariantSpec

LOAD = ("import runpy, sys, time; t = time.perf_counter(); ns = runpy.run_path(sys.argv[1]); p = ns['load'](); "
        "x = ns['make_inputs'](); t1 = time.perf_counter(); p(*x); "
        "print(f'{t1 - t:.2f} {time.perf_counter() - t1:.3f}')")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--variants", nargs="+", default=["eager", "frozen", "onnx", "openvino"])
    args = parser.parse_args()
    recipe = load_recipe(args.recipe)
    print("| variant | artifact | files | size | build + first call | save | whole step | "
          "load() in a fresh process | first batch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for variant in args.variants:
        spec = VariantSpec.parse(variant)
        with tempfile.TemporaryDirectory(prefix="bench-artifact-") as tmp:
            out = Path(tmp)
            data = recipe.to_dict()
            data["device_resolved"] = "cpu"
            doc = {"recipe": data, "recommendation": {"variant": spec.name, "batch_size": args.batch_size,
                                                      **spec.to_dict()}}
            t0 = time.perf_counter()
            write_deployment(recipe.to_dict(), doc, out, make_runner=Runner, timeout=1200, profile=False)
            wall = time.perf_counter() - t0
            a = doc["artifact"]
            if a["status"] != "ok":
                print(f"| {variant} | failed: {a['reason']} | | | | | {wall:.1f} s | | |")
                continue
            files = ", ".join(f["name"] for f in a["files"] if f["name"] != LOADER_NAME) or "load.py (code)"
            proc = subprocess.run([sys.executable, "-c", LOAD, str(out / ARTIFACT_DIR / LOADER_NAME)],
                                  capture_output=True, text=True, timeout=1200)
            load_s, first_s = proc.stdout.split()[-2:] if proc.returncode == 0 else ("failed", proc.stderr[-200:])
            print(f"| {variant} | {a['kind']} | {files} | {a['size_bytes'] / 2**20:.1f} MiB | "
                  f"{a['build_seconds']:.1f} s | {a['save_seconds']:.2f} s | {wall:.1f} s | {load_s} s | {first_s} s |",
                  flush=True)


if __name__ == "__main__":
    main()
