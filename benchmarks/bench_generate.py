"""Issue 33's checks on a ``[generate]`` run, each against a plain process (torch and transformers only).

    python benchmarks/bench_generate.py recipes/gpt2_generate.toml --out /tmp/gen-gpt2 --json /tmp/gen-gpt2.json
    python benchmarks/bench_generate.py --reuse /tmp/gen-gpt2 --rounds 5      # the checks on an existing run

1. ``autotune run RECIPE --out OUT``: the recommendation (configuration, concurrency, TTFT / ITL p50 / p99,
   tokens/s), the boundary, the side-by-side rounds (static + compile vs dynamic eager, compile payback).
2. Agreement: the recommendation at its concurrency timed ROUNDS times in each of three kinds of fresh process,
   interleaved in a shuffled order per round: autotune's worker (the op the search used), a plain process calling
   ``model.generate`` with the settings written independently (``benchmarks/plain_generate.py``), and a plain
   process calling the artifact's own ``load.py``. Useful tokens/s: the medians within +-7% of each other and of
   the report's figure.
3. Tokens: ``OUT/artifact/load.py --check`` in a plain process: the run's prompts give the reference's greedy
   tokens.
4. Boundary (``concurrency = "auto"``): plain processes' peak resident memory for a worst-case call and the
   workload's calls after it at b and at b + 1 (three processes each, the boundary's own configuration) against
   the limit: the largest at b within it and the largest at b + 1 over it, each within +-3% of the limit.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PLAIN = ROOT / "benchmarks" / "plain_generate.py"


def run_autotune(recipe: str, out: Path) -> None:
    cmd = [sys.executable, "-m", "autotune", "run", recipe, "--out", str(out)]
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(f"autotune run: {time.monotonic() - t0:.0f} s", flush=True)


def plain(artifact: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-I", str(PLAIN), str(artifact), *args], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def agreement(out: Path, doc: dict[str, Any], rounds: int, calls: int) -> dict[str, Any]:
    from autotune.client import WorkerClient
    from autotune.core.recipe import Recipe
    from autotune.generate.points import point_from, ratio_ci
    from autotune.runner import Runner

    rec = doc["generate"]["recommendation"]
    recipe = Recipe.from_dict(doc["recipe"])
    artifact = out / "artifact"
    c = int(rec["concurrency"])
    rates: dict[str, list[float]] = {"autotune worker": [], "plain generate()": [], "artifact load.py": []}
    rng = random.Random(0)
    with Runner(fresh_measure=True) as runner:
        client = WorkerClient(runner)
        for r in range(rounds):
            arms = list(rates)
            rng.shuffle(arms)
            for arm in arms:
                if arm == "autotune worker":
                    res: Any = client.generate(recipe, rec["config_settings"], c, action="measure", calls=calls,
                                               timeout=900)
                    if res["status"] != "ok":
                        raise RuntimeError(res["reason"])
                    rates[arm].append(point_from(rec["config"], c, res).tokens_per_s)
                else:
                    got = plain(artifact, "--calls", str(calls), *(["--via-load"] if "load" in arm else []))
                    rates[arm].append(float(got["tokens_per_s"]))
            print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()), flush=True)
    base = rates["autotune worker"]
    result: dict[str, Any] = {"concurrency": c, "config": rec["config"], "rounds": rates,
                              "report_tokens_per_s": rec["tokens_per_s"]}
    verdicts = {}
    for arm in ("plain generate()", "artifact load.py"):
        ratio, ci = ratio_ci(rates[arm], base)
        med = statistics.median(rates[arm]) / statistics.median(base)
        verdicts[f"{arm} / autotune worker within 7%"] = abs(med - 1) <= 0.07
        print(f"  {arm} / autotune worker: median ratio {med:.3f} (mean {ratio:.3f}, 95% CI {ci[0]:.3f}-{ci[1]:.3f})")
    report_ratio = statistics.median(rates["plain generate()"]) / rec["tokens_per_s"]
    verdicts["plain generate() / the report's figure within 7%"] = abs(report_ratio - 1) <= 0.07
    print(f"  plain generate() median / the report's {rec['tokens_per_s']:,.0f} tokens/s: {report_ratio:.3f}")
    result["verdicts"] = verdicts
    return result


def tokens(out: Path) -> bool:
    proc = subprocess.run([sys.executable, "-I", "load.py", "--check"], cwd=out / "artifact", capture_output=True,
                          text=True, timeout=900)
    print("  " + proc.stdout.strip().replace("\n", "\n  "))
    return proc.returncode == 0


def boundary(out: Path, doc: dict[str, Any], repeats: int = 3) -> dict[str, Any] | None:
    b = doc["generate"].get("boundary")
    if not b or b.get("stopped_by") != "memory" or not b.get("memory_limit_bytes"):
        return None
    limit, n = int(b["memory_limit_bytes"]), int(b["max_concurrency"])
    # the boundary's own configuration (the reference), which may not be the recommendation's; REPEATS plain
    # processes at each (a process's peak at one concurrency varies by several percent: allocator and timing)
    calls = str(doc["recipe"]["generate"]["calls"])
    at = [plain(out / "artifact", "--probe", str(n), "--calls", calls, "--config", b["config"])["vmhwm_bytes"]
          for _ in range(repeats)]
    above = [plain(out / "artifact", "--probe", str(n + 1), "--calls", calls, "--config", b["config"])["vmhwm_bytes"]
             for _ in range(repeats)]
    # a deployment's worst case decides: b fits if its largest peak is within the limit (+3%), b + 1 does not if
    # its largest peak is over it (-3%)
    ok = max(at) <= limit * 1.03 and max(above) >= limit * 0.97
    mib = lambda xs: ", ".join(f"{x / 2**20:.0f}" for x in xs)  # noqa: E731
    print(f"  boundary {n} ({b['config']}) in {limit / 2**20:.0f} MiB: plain peaks at {n}: {mib(at)} MiB "
          f"(largest {max(at) / limit:.3f} of the limit); at {n + 1}: {mib(above)} MiB ({max(above) / limit:.3f})")
    return {"max_concurrency": n, "limit": limit, "plain_peaks_at_b": at, "plain_peaks_at_b_plus_1": above,
            "agrees_within_3pct": ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", nargs="?")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--reuse", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--boundary-only", action="store_true", help="with --reuse: only the boundary check")
    args = ap.parse_args()
    out = args.reuse or args.out
    if out is None:
        ap.error("--out or --reuse")
    if args.reuse is None:
        if not args.recipe:
            ap.error("a recipe, or --reuse DIR")
        run_autotune(args.recipe, out)
    doc = json.loads((out / "report.json").read_text())
    section = doc["generate"]
    from autotune.report.generate import console_lines

    print("\n".join(console_lines(section)))
    result: dict[str, Any] = {"recommendation": section["recommendation"], "rounds": section.get("rounds"),
                              "seconds": section["seconds"]}
    verdicts: dict[str, bool] = {}
    if not args.boundary_only:
        print("agreement (interleaved fresh processes):", flush=True)
        result["agreement"] = agreement(out, doc, args.rounds, args.calls)
        print("tokens:", flush=True)
        result["tokens_identical"] = tokens(out)
        verdicts.update(result["agreement"]["verdicts"])
        verdicts["artifact load.py --check: the reference's greedy tokens"] = result["tokens_identical"]
    print("boundary:", flush=True)
    result["boundary"] = boundary(out, doc)
    if result["boundary"] is not None:
        verdicts["boundary agrees with a plain process at b and b + 1 (+-3%)"] = \
            result["boundary"]["agrees_within_3pct"]
    for k, v in verdicts.items():
        print(f"{'PASS' if v else 'FAIL'}  {k}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
