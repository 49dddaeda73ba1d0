"""Record a full landscape: every (variant, batch) of a space measured with the tool's real measurement.

A landscape is what ``benchmarks/bench_search.py`` replays: for every combination of a realistic
space, the candidate row the search would have got (throughput and its 95% CI, latency percentiles,
peak memory, status) together with what it cost to get it, split into the parts a search pays for:

- ``build_seconds``: building the variant (script/trace/freeze, torch.compile's graph capture);
- ``first_call_seconds``: the first call (for ``compile`` this is where Inductor compiles);
- ``measure_seconds``: warmup detection plus steady-state timing (the timing loop's own samples);
- ``gate_seconds``: the rest of the worker call: making inputs, the correctness gate against eager
  fp32 (a few eager and variant calls), the worker round trip. Derived as
  ``wall - build - first_call - measure`` (the worker reports no separate gate time).
- ``wall_seconds``: the whole ``measure`` request as the parent saw it.

Every point is measured exactly as ``autotune run`` measures a candidate: one ``measure`` request
(``autotune.client.WorkerClient``) to a reused measure worker (``autotune.runner.Runner``), the same
settings (``autotune.core.measure_settings.MeasureSettings.from_recipe``), the same row
(``autotune.candidate.candidate_record``). The worker is validated once per landscape.

The space is the recipe's model and inputs crossed by this script (``SPACES`` below): compilers x
memory formats x threads x batch sizes. The batch list goes past the point where throughput saturates
on this machine (the memory budget is not the limit here: 24 GB for models of tens of MB), and it is
recorded as the space's ``max_batch`` per variant. ``max_seconds`` per point is short (1 s; the
shipped recipes use 3-8 s) to keep the recording affordable on a 2-core machine; it is stored.

Usage::

    python benchmarks/record_landscape.py quickstart [--out benchmarks/landscapes/quickstart.json]
    python benchmarks/record_landscape.py all

Results are written after every point (a partial file is valid and says ``complete: false``), so an
interrupted recording resumes where it stopped when run again with the same output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.candidate import candidate_record  # noqa: E402
from autotune.client import WorkerClient  # noqa: E402
from autotune.core.measure_settings import MeasureSettings  # noqa: E402
from autotune.core.measurement import Measurement  # noqa: E402
from autotune.core.recipe import load_recipe  # noqa: E402
from autotune.runner import Runner  # noqa: E402
from autotune.validation import validate  # noqa: E402

#: The spaces recorded: recipe, compilers, memory formats, threads, batch sizes, measurement overrides.
SPACES: dict[str, dict[str, Any]] = {
    "quickstart": {
        "recipe": "recipes/quickstart.toml",
        "compilers": ["eager", "frozen", "compile", "trace"],
        "memory_formats": ["contiguous", "channels_last"],
        "threads": [1, 2],
        "batch_sizes": [1, 2, 4, 8, 16, 24, 32, 64],
        "measure": {"max_seconds": 1.0, "ci_target": 0.02},
    },
    "transformer": {
        "recipe": "recipes/transformer.toml",
        "compilers": ["eager", "frozen", "compile"],
        "memory_formats": ["contiguous"],  # token inputs: channels_last does not apply
        "threads": [1, 2],
        "batch_sizes": [1, 2, 4, 8, 16, 24, 32],
        "measure": {"max_seconds": 1.0, "ci_target": 0.02},
        "device": "cpu",
    },
    "mobilenet_v3_large": {
        "recipe": "recipes/mobilenet_v3_large.toml",
        "compilers": ["eager", "frozen", "compile"],
        "memory_formats": ["contiguous", "channels_last"],
        "threads": [1, 2],
        "batch_sizes": [1, 2, 4, 8],
        "measure": {"max_seconds": 1.0, "ci_target": 0.02},
    },
}


def variant_name(compiler: str, memory_format: str, threads: int) -> str:
    parts = [compiler]
    if memory_format != "contiguous":
        parts.append(memory_format)
    parts.append(f"threads={threads}")
    return "+".join(parts)


def environment() -> dict[str, Any]:
    from autotune.environment import machine_facts, summary_line
    from autotune.worker.torch_facts import torch_facts

    try:
        env = machine_facts(torch_facts())
        return {"summary": summary_line(env), **{k: env.get(k) for k in (
            "hostname", "machine", "cpu_model", "cpu_logical_cores", "cpu_physical_cores", "cpu_affinity_cores",
            "memory_total_bytes", "torch_version", "torch_threads")}}
    except Exception:  # the basics are enough for a replay
        return {"machine": platform.machine(), "cpu_count": os.cpu_count(), "python": platform.python_version()}


def slim_row(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("variant", "compiler", "compile_mode", "precision", "memory_format", "threads", "batch_size", "status",
            "reason", "feasible", "violations", "throughput", "throughput_ci", "latency_ms", "latency_source",
            "peak_memory_bytes", "compile_seconds", "warmup_iterations", "classification",
            "relative_ci_half_width", "samples", "iterations_per_sample", "stopped_by", "foreign_cores")
    return {k: row.get(k) for k in keep}


def record(name: str, out: Path) -> None:
    space = SPACES[name]
    recipe = load_recipe(ROOT / space["recipe"])
    variants = [variant_name(c, f, t) for c, f, t in
                itertools.product(space["compilers"], space["memory_formats"], space["threads"])]
    recipe = replace(recipe, device=space.get("device", recipe.device),
                     search=replace(recipe.search, variants=tuple(variants), memory_formats=("contiguous",),
                                    batch_sizes=tuple(space["batch_sizes"])),
                     measure=replace(recipe.measure, **space["measure"]))
    doc: dict[str, Any]
    if out.exists():
        doc = json.loads(out.read_text())
    else:
        import torch  # the parent imports torch only to say which version recorded this

        doc = {
            "landscape": name, "schema": 1, "recipe": space["recipe"], "objective": recipe.search.objective,
            "constraints": {"max_latency_ms": recipe.constraints.max_latency_ms,
                            "latency_percentile": recipe.constraints.latency_percentile,
                            "max_memory_bytes": recipe.constraints.max_memory_bytes},
            "space": {"compilers": space["compilers"], "memory_formats": space["memory_formats"],
                      "threads": space["threads"], "batch_sizes": space["batch_sizes"]},
            "measure": MeasureSettings.from_recipe(recipe).to_dict(),
            "torch": torch.__version__, "machine": environment(),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "notes": "timings taken on a shared 2-core machine while other jobs ran: noisy, treated as truth by "
                     "the replay",
            "complete": False, "points": [],
        }
    doc["space"] = {"compilers": space["compilers"], "memory_formats": space["memory_formats"],
                    "threads": space["threads"], "batch_sizes": space["batch_sizes"]}
    doc["measure"] = MeasureSettings.from_recipe(recipe).to_dict()
    # a resumed recording keeps only the points of the space as it is now
    doc["points"] = [p for p in doc["points"] if p["variant"] in variants and p["batch_size"] in space["batch_sizes"]
                     and (p.get("cost") or {}).get("max_seconds") == space["measure"]["max_seconds"]]
    done = {(p["variant"], p["batch_size"]) for p in doc["points"]}
    settings = MeasureSettings.from_recipe(recipe)
    data = recipe.to_dict()
    with Runner() as runner:
        client = WorkerClient(runner)
        workload = validate(runner, recipe)
        doc["unavailable"] = list(workload.unavailable)
        # whole variants one after another, in a seeded shuffled order: a recording cut short still has
        # complete batch curves spread over every dimension (not only the first compiler's)
        order = list(workload.variants)
        random.Random(0).shuffle(order)
        for variant, batch in itertools.product(order, space["batch_sizes"]):
            if (variant, batch) in done:
                continue
            t0 = time.perf_counter()
            res = client.measure(data, variant, batch, settings, timeout=recipe.measure.timeout_s)
            wall = time.perf_counter() - t0
            row = slim_row(candidate_record(trial=0, variant=variant, spec=workload.specs[variant],
                                            batch_size=batch, result=res, constraints=recipe.constraints))
            m = Measurement.from_dict(res["measurement"]) if res.get("measurement") else None
            measure_s = (sum(m.samples) * m.iterations_per_sample + sum(m.latency_samples)) if m else 0.0
            build = float(res.get("build_seconds") or 0.0)
            first = float(res.get("first_call_seconds") or 0.0)
            row["cost"] = {"wall_seconds": round(wall, 4), "build_seconds": round(build, 4),
                           "first_call_seconds": round(first, 4), "measure_seconds": round(measure_s, 4),
                           "gate_seconds": round(max(0.0, wall - build - first - measure_s), 4),
                           "max_seconds": recipe.measure.max_seconds}
            doc["points"].append(row)
            tp = row["throughput"]
            print(f"{name} {variant}@{batch}: {row['status']} "
                  f"{'' if tp is None else f'{tp:.1f}/s'} wall {wall:.1f}s", flush=True)
            _write(out, doc)
    doc["complete"] = True
    _write(out, doc)


def _write(out: Path, doc: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("space", choices=[*SPACES, "all"])
    p.add_argument("--out", type=Path, default=None, help="output JSON (default benchmarks/landscapes/NAME.json)")
    args = p.parse_args(argv)
    names = list(SPACES) if args.space == "all" else [args.space]
    for name in names:
        out = args.out if args.out is not None and len(names) == 1 else ROOT / "benchmarks/landscapes" / f"{name}.json"
        record(name, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
