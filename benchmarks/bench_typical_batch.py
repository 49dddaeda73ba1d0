"""Which one batch stands for the traffic? A run's artifact timed on one saved batch against the whole traffic.

A plain process that times an artifact on ``make_inputs()`` times that batch's shape. With sentences padded per
batch, the first batch can be the longest or the shortest, so a check on it can read above or below the report's
throughput, which is over the whole traffic (issue 30). ``load.py`` picks the typical batch (``_typical_key``: of
the fullest batches, the one whose size per row is nearest the traffic's mean). This benchmark times, in fresh plain
processes and interleaved round by round: ``make_inputs()`` as shipped (the typical batch), the first saved batch
(``b0``), and the whole traffic (``autotune.artifact_timing.plain_process``, as ``bench_deployment_agreement.py``
and the run's own artifact check do). Prints each round and the medians over the report's figure.

    python benchmarks/bench_typical_batch.py /tmp/s43/bert --rounds 4 --seconds 3

For a ``[data]`` recipe whose inputs are keyword tensors (``predict(**batch)``) or positional ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: One fresh process: load.py imported (no autotune), ``make_inputs()`` as shipped or with its batch key forced,
#: three warm calls, then calls for ``seconds``; prints the batch's shape and samples/s.
CHILD = r"""
import json, sys, time
artifact, key, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
sys.modules["autotune"] = None
sys.path.insert(0, artifact)
import load
if key != "typical":
    load._typical_key = lambda data: key
predict = load.load()
x = load.make_inputs()
call = (lambda: predict(**x)) if isinstance(x, dict) else (lambda: predict(*x))
for _ in range(3):
    call()
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    call()
    n += 1
first = next(iter(x.values())) if isinstance(x, dict) else x[0]
print(json.dumps({"shape": list(first.shape), "throughput": n * first.shape[0] / (time.perf_counter() - t0)}))
"""


def one_batch(artifact: Path, key: str, seconds: float, environment: dict[str, str]) -> tuple[list[int], float]:
    """One fresh process timing ``make_inputs()`` (``key``: "typical" as shipped, or a saved batch's "b<i>"), in the
    run's process environment (run.sh's allocator and OpenMP settings)."""
    proc = subprocess.run([sys.executable, "-I", "-c", CHILD, str(artifact), key, str(seconds)], capture_output=True,
                          text=True, timeout=600, check=False, env=environment)
    if proc.returncode != 0:
        raise SystemExit(f"{artifact}/load.py failed: {proc.stderr.strip().splitlines()[-1:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["shape"], float(out["throughput"])


def main() -> None:
    from autotune.artifact_timing import artifact_target, plain_process

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run directory (autotune run --out) with an artifact and traffic.npz")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    target = artifact_target(args.run.resolve())
    artifact = args.run.resolve() / "artifact"
    got: dict[str, list[float]] = {"typical": [], "b0": [], "traffic": []}
    shapes: dict[str, list[int]] = {}
    for r in range(args.rounds):
        for key in ("b0", "typical"):
            shapes[key], value = one_batch(artifact, key, args.seconds, dict(target.environment))
            got[key].append(value)
        got["traffic"].append(float(plain_process(target, seconds=args.seconds)["throughput"]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in got.items()), flush=True)
    print(f"reported {target.reported:.1f} samples/s ({target.label}); first batch {shapes['b0']}, typical "
          f"{shapes['typical']}")
    for key, values in got.items():
        print(f"  {key}: median {statistics.median(values):.1f}, {statistics.median(values) / target.reported:.3f}x "
              "the report")


if __name__ == "__main__":
    main()
