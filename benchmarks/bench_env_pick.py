"""Does ``search.environments = "auto"`` pick the allocator plain processes find faster, and does its artifact deliver?

Issue 23's first and third checks, per model (``quickstart``: resnet18 at batch 16; ``bert``: the BERT-like
``benchmarks/agreement/bert_fixed.toml``, 8 x 128 tokens):

1. ``autotune run`` a copy of the model's recipe with ``environments = "auto"`` (every allocator found here), the
   given variants and one batch size. From its report.json: the pick, its process environment, and the
   showdown's paired ratio of the pick against its twin in the other kind of environment (the glibc default
   for a pick in another allocator; the best other allocator for a pick in the default), with its CI.
2. Plain processes (``bench_agreement.PLAIN``: torch and the model only, no autotune) of the pick's base variant
   at its batch, one per environment per round, ``--rounds`` rounds in a seeded random order. The verdict is
   PASS when the pick's environment is the fastest by the plain processes' median, or within ``--tie`` of it
   (allocators that plain processes cannot tell apart are a tie, and either pick is right).
3. The artifact: ``artifact/load.py`` in a plain process started in the pick's environment
   (``bench_deployment_agreement``), ``--artifact-rounds`` rounds; plain / reported must be within 0.93-1.07.

    python benchmarks/bench_env_pick.py [--models quickstart,bert] [--budget 150] [--rounds 5]
        [--quickstart-variants eager,frozen] [--bert-variants eager] [--out bench-out/env-pick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agreement import ROOT, plain_config, run_plain
from bench_compare import run as run_cli

from autotune.artifact_timing import artifact_target, time_artifact
from autotune.core.process_env import AUTO_ALLOCATORS, environment_of_variant, resolve_environments
from autotune.worker.variants import VariantSpec

#: model -> (recipe, batch size)
MODELS: dict[str, tuple[str, int]] = {
    "quickstart": ("recipes/quickstart.toml", 16),
    "bert": ("benchmarks/agreement/bert_fixed.toml", 8),
}


def recipe_copy(src: Path, dst: Path, *, variants: list[str], batch: int, budget: float) -> Path:
    """``src`` with environments = "auto", the variants, one batch size and the budget; relative factory paths
    made absolute (the copy lives elsewhere)."""
    text = src.read_text()

    def absolute(m: re.Match[str]) -> str:
        target = m.group(2)
        return f'{m.group(1)}"{(src.parent / target).resolve()}:{m.group(3)}"'

    text = re.sub(r'(?m)^(factory = )"([^":]+\.py):([A-Za-z_]\w*)"', absolute, text)
    text = re.sub(r"(?m)^(variants|batch_sizes|environments|time_budget_s) = .*\n", "", text)
    settings = (f"variants = [{', '.join(json.dumps(v) for v in variants)}]\nbatch_sizes = [{batch}]\n"
                f'environments = "auto"\ntime_budget_s = {budget:g}\n')
    text = re.sub(r"(?m)^\[search\]\n", "[search]\n" + settings, text, count=1)
    dst.write_text(text)
    return dst


def tune(recipe: Path, out: Path) -> tuple[float, dict[str, Any]]:
    """``autotune run RECIPE --out OUT`` (bench_compare's), then its report."""
    wall = run_cli(recipe, out)
    return wall, json.loads((out / "report.json").read_text())


def twin_standing(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The showdown standing of the pick's twin in the other kind of environment (same base, same batch)."""
    rec = doc["recommendation"]
    base = VariantSpec.parse(rec["variant"]).base_name
    default = environment_of_variant(rec["variant"]).is_default
    verdict = (doc.get("showdown") or {}).get("verdict") or {}
    pick_key = f"{rec['variant']}@{rec['batch_size']}"
    by_key = {s["key"]: s for s in verdict.get("standings") or []}
    for key, s in by_key.items():
        variant, _, batch = key.rpartition("@")
        if key == pick_key or int(batch) != rec["batch_size"]:
            continue
        if VariantSpec.parse(variant).base_name == base and environment_of_variant(variant).is_default != default:
            pick = by_key.get(pick_key) or {}
            return {"twin": key, "twin_ratio_to_leader": s.get("ratio"), "twin_ratio_ci": s.get("ratio_ci"),
                    "pick_ratio_to_leader": pick.get("ratio"), "pick_ratio_ci": pick.get("ratio_ci"),
                    "leader": verdict.get("leader"), "tie": verdict.get("tie"),
                    "undecided": verdict.get("undecided")}
    return None


def plain_per_environment(recipe: Path, variant: str, batch: int, *, rounds: int, seconds: float,
                          seed: int) -> dict[str, list[float]]:
    """ms per call of plain processes per environment, ``rounds`` interleaved rounds in a seeded random order."""
    envs, missing = resolve_environments(list(AUTO_ALLOCATORS))
    for name, reason in missing:
        print(f"  {name}: left out: {reason}")
    cfg = plain_config(recipe, variant, batch, seconds=seconds, warmup_seconds=1.5)
    rng = random.Random(seed)
    out: dict[str, list[float]] = {e.name: [] for e in envs}
    for _ in range(rounds):
        order = list(envs)
        rng.shuffle(order)
        for env in order:
            out[env.name].append(run_plain(cfg, env.name)["mean_s"] * 1e3)
    return out


def artifact_rounds(run_dir: Path, rounds: int, seconds: float) -> tuple[float, list[float]]:
    target = artifact_target(run_dir)
    return target.reported, [time_artifact(target, seconds=seconds) for _ in range(rounds)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="quickstart,bert")
    ap.add_argument("--quickstart-variants", default="eager,frozen")
    ap.add_argument("--bert-variants", default="eager")
    ap.add_argument("--budget", type=float, default=150.0, help="time_budget_s of each run")
    ap.add_argument("--rounds", type=int, default=5, help="plain-process rounds per environment")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per plain process")
    ap.add_argument("--artifact-rounds", type=int, default=3)
    ap.add_argument("--tie", type=float, default=0.03, help="plain medians this close count as a tie")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "env-pick")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    ok = True
    for model in args.models.split(","):
        recipe_rel, batch = MODELS[model]
        variants = getattr(args, f"{model}_variants").split(",")
        recipe = recipe_copy(ROOT / recipe_rel, args.out / f"{model}.toml", variants=variants, batch=batch,
                             budget=args.budget)
        wall, doc = tune(recipe, args.out / model)
        rec = doc["recommendation"]
        env = environment_of_variant(rec["variant"]).name
        base = VariantSpec.parse(rec["variant"]).base_name
        twin = twin_standing(doc)
        print(f"\n{model}: run {wall:.0f} s; pick {rec['variant']}@{rec['batch_size']} ({env}), "
              f"{rec['throughput']:.1f}/s ({rec.get('throughput_source')}); twin in the showdown: {twin}", flush=True)
        plain = plain_per_environment(ROOT / recipe_rel, base, rec["batch_size"], rounds=args.rounds,
                                      seconds=args.seconds, seed=args.seed)
        medians = {e: statistics.median(v) for e, v in plain.items()}
        fastest = min(medians, key=lambda e: medians[e])
        print(f"  plain {base}@{rec['batch_size']}, ms per call (median of {args.rounds}):")
        for e, v in plain.items():
            print(f"    {e:<12} {medians[e]:8.3f}  vs glibc {medians[e] / medians['glibc']:.3f}  "
                  f"rounds {', '.join(f'{x:.2f}' for x in v)}")
        within = medians[env] <= medians[fastest] * (1 + args.tie)
        print(f"  plain fastest: {fastest}; the pick's {env} is {medians[env] / medians[fastest]:.3f}x its time: "
              f"{'PASS' if within else 'FAIL'}", flush=True)
        reported, art = artifact_rounds(args.out / model, args.artifact_rounds, args.seconds)
        ratio = statistics.median(art) / reported
        art_ok = 0.93 <= ratio <= 1.07
        print(f"  artifact in {env}: {', '.join(f'{x:.1f}' for x in art)}/s against reported {reported:.1f}/s: "
              f"ratio {ratio:.3f} ({'PASS' if art_ok else 'FAIL'}: 0.93-1.07)", flush=True)
        ok = ok and within and art_ok
        results.append({"model": model, "wall_s": wall, "pick": f"{rec['variant']}@{rec['batch_size']}",
                        "environment": env, "reported": reported, "twin": twin, "plain_ms": plain,
                        "plain_fastest": fastest, "pick_ok": within, "artifact": art, "artifact_ratio": ratio,
                        "artifact_ok": art_ok})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
