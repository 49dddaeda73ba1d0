"""Does the recommendation deliver what the report says? Its artifact, run by its own load.py in a plain process.

For each run directory (made by ``autotune run RECIPE --out DIR``), read the recommendation's reported throughput
from ``DIR/report.json``, then time ``DIR/artifact/load.py`` in a fresh Python process that imports only what a
deployment would: torch (or onnxruntime / openvino and numpy), the loader, and for a recipe with ``[data]`` the
user's own data factory (a service has its own requests; autotune is never imported: the child checks
``sys.modules``). The child serves the same traffic the candidates were timed on: the factory's first
``max_batches`` batches at the recommended batch size, cycled in order (or the loader's ``make_inputs()`` batch
for a recipe without ``[data]``), warms every shape up, then times whole passes for ``--seconds``. A recommendation
measured in another process environment (``onnx+jemalloc``) is started in it, as its ``run.sh`` would start it
(the loader's own re-exec runs only for ``python load.py``, not under ``runpy``). The plain process and its
spec are :mod:`autotune.artifact_timing`'s, which ``autotune compare --rerun`` uses too.

Rounds are interleaved: round 1 of every run directory, then round 2, ... so drift on this shared machine lands
on every run alike. Prints a markdown table: reported throughput, the plain process's per round, and the ratio
plain / reported (median of the rounds); the issue's bar is 0.93-1.07. A round another process disturbed (more than a
tenth of a core of foreign CPU over its timed window, as the plain process reads the kernel:
``autotune.core.contention``) is marked ``*`` and left out of the median when two quiet rounds remain, as the run's own
artifact check does.

    python benchmarks/bench_deployment_agreement.py demo-out bert-out timm-out --rounds 3 --seconds 3
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from autotune.artifact_check import compared_rounds
from autotune.artifact_timing import artifact_target, plain_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    targets = [artifact_target(r.resolve()) for r in args.runs]
    plain: dict[Path, list[tuple[float, bool]]] = {t.run_dir: [] for t in targets}
    for _ in range(args.rounds):
        for t in targets:
            out = plain_process(t, seconds=args.seconds)
            plain[t.run_dir].append((float(out["throughput"]), bool(out.get("disturbed"))))
    print("| run | recommendation | reported (samples/s) | plain process per round (* disturbed) | ratio (median) |")
    print("|---|---|---|---|---|")
    for t in targets:
        got = plain[t.run_dir]
        used = compared_rounds([d for _, d in got])
        ratio = statistics.median(got[i][0] for i in used) / t.reported
        rounds = ", ".join(f"{v:.1f}{'*' if d else ''}" for v, d in got)
        print(f"| {t.run_dir.name} | {t.label} | {t.reported:.1f} | {rounds} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
