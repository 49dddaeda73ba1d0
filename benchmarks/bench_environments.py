"""Does the process environment matter? Plain processes per allocator / OpenMP setting, interleaved rounds.

For each model, each round runs one plain process (bench_agreement's ``PLAIN``: torch and the model only, no
autotune; ``torch.utils.benchmark`` ``blocked_autorange``) per process environment of
:mod:`autotune.core.process_env`, in a seeded random order, each started with that environment's variables
(``LD_PRELOAD``, ``GLIBC_TUNABLES``, ``OMP_WAIT_POLICY``). It prints ms per call per round, the median, the ratio
to glibc's default and its range over rounds, and the page faults per call (glibc's dynamic mmap threshold
shows there: thousands per call with the default, a few with the threshold pinned or another allocator).

This is the evidence for which settings ``search.environments = "auto"`` includes (the allocators) and which are
opt-in (``omp-passive``, ``omp-active``: run them here on the deployment machine to see whether they matter).

Run: .venv/bin/python benchmarks/bench_environments.py [--models bert,quickstart] [--variant eager]
     [--environments auto,glibc+omp-passive,glibc+omp-active] [--rounds 5] [--seconds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agreement import MODELS, ROOT, plain_config, run_plain

from autotune.core.process_env import AUTO_ALLOCATORS, resolve_environments


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert,quickstart", help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--variant", default="eager", help="eager | frozen | compile | onnx | openvino")
    ap.add_argument("--environments", default="auto,glibc+omp-passive,glibc+omp-active",
                    help="comma-separated environment names; auto = every allocator found here")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="blocked_autorange min_run_time per process")
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    names: list[str] = []
    for item in (x.strip() for x in args.environments.split(",") if x.strip()):
        names.extend(AUTO_ALLOCATORS if item == "auto" else [item])
    envs, missing = resolve_environments(names)
    for name, reason in missing:
        print(f"{name}: left out: {reason}")
    rng = random.Random(args.seed)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {(m, e.name): [] for m in args.models.split(",")
                                                              for e in envs}
    for r in range(args.rounds):
        for model in args.models.split(","):
            recipe_rel, batch = MODELS[model]
            cfg = plain_config(ROOT / recipe_rel, args.variant, batch, seconds=args.seconds,
                               warmup_seconds=args.warmup)
            order = list(envs)
            rng.shuffle(order)
            for env in order:
                out = run_plain(cfg, env.name)
                results[(model, env.name)].append(out)
                print(f"round {r + 1} {model:<12} {env.name:<24} {out['mean_s'] * 1e3:9.3f} ms/call "
                      f"{out['page_faults_per_call']:8.0f} faults/call", flush=True)
    print(f"\n{'model':<12} {'environment':<24} {'median ms':>10} {'vs glibc':>9} {'range':>13} {'faults':>8}")
    for (model, name), outs in results.items():
        med = statistics.median(o["mean_s"] for o in outs)
        base = results.get((model, "glibc"))
        ratios = [o["mean_s"] / b["mean_s"] for o, b in zip(outs, base, strict=True)] if base else []
        rel = f"{statistics.median(ratios):.3f}" if ratios else "-"
        span = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
        faults = statistics.median(o["page_faults_per_call"] for o in outs)
        print(f"{model:<12} {name:<24} {med * 1e3:10.3f} {rel:>9} {span:>13} {faults:8.0f}")
    if args.json:
        args.json.write_text(json.dumps([{"model": m, "environment": e, "rounds": rs}
                                         for (m, e), rs in results.items()], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
