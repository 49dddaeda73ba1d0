"""Benchmark: every CPU-available variant's throughput relative to eager, side by side in one run.

Workloads: torchvision resnet18 (random weights, batch 8, 3x112x112 by default; ``--sizes 112,224``)
and an MLP (512 -> 2048 -> 2048 -> 10, batch 64). For each variant: build seconds, first-call
seconds (where torch.compile compiles), the correctness gate against eager fp32, then steady-state
time per batch.

Timing is deliberately simple (autotune's adaptive measure.py is not used here): every variant is
warmed up, then R rounds run; in each round every variant runs K calls back to back and the mean of
those K is one sample; the order of the variants rotates from round to round so that machine noise
(other processes on a shared 2-core box) is spread over all of them; a variant's figure is the
median of its R samples, and ``spread`` is the (max - min) / median of those samples.

Run::

    .venv/bin/python benchmarks/bench_variants.py                 # resnet18@112 + MLP, "all" variants
    .venv/bin/python benchmarks/bench_variants.py --quick         # smaller input, no max-autotune/export
    .venv/bin/python benchmarks/bench_variants.py --models mlp --variants eager,frozen,compile
    .venv/bin/python benchmarks/bench_variants.py --include-emulated   # also bf16 on a CPU without it

By default inductor's on-disk cache is pointed at a fresh temporary directory so that compile
seconds are cold-start figures (``--warm-cache`` keeps the user's cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass
class Row:
    model: str
    variant: str
    status: str  # ok | rejected | failed | unavailable
    reason: str = ""
    build_s: float | None = None
    first_call_s: float | None = None
    gate_rel_err: float | None = None
    samples: list[float] = field(default_factory=list)  # seconds per call, one per round
    recompiles_during_timing: int | None = None
    fn: Callable[..., Any] | None = None
    inputs: tuple[Any, ...] = ()
    threads: int | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def best(self) -> float | None:
        return min(self.samples) if self.samples else None

    @property
    def spread(self) -> float | None:
        if len(self.samples) < 2:
            return None
        m = statistics.median(self.samples)
        return (max(self.samples) - min(self.samples)) / m


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,mlp", help="comma list of resnet18, mlp")
    p.add_argument("--variants", default="all",
                   help="comma list of variant names (autotune grammar), 'all' = every CPU-available base")
    p.add_argument("--memory-formats", default=None,
                   help="crossed into resnet18's variants (default: contiguous,channels_last)")
    p.add_argument("--sizes", default="112", help="resnet18 input sizes (comma list), e.g. 112,224")
    p.add_argument("--resnet-batch", type=int, default=8)
    p.add_argument("--mlp-batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--round-seconds", type=float, default=0.25,
                   help="target time per variant per round (sets K, the calls per sample, from eager)")
    p.add_argument("--threads-variants", default="1",
                   help="thread counts N to add as eager+threads=N, frozen+threads=N ('' for none)")
    p.add_argument("--threads", type=int, default=None,
                   help="baseline torch.set_num_threads for every variant without threads=N (default: torch's)")
    p.add_argument("--include-emulated", action="store_true",
                   help="also try bf16/autocast-bf16 where the CPU has no native bf16 (slow; shows why)")
    p.add_argument("--quick", action="store_true",
                   help="resnet18 at 64x64, contiguous only, 5 rounds, no max-autotune/export/threads")
    p.add_argument("--warm-cache", action="store_true",
                   help="keep inductor's on-disk cache (faster compiles)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = "64"
        args.rounds = min(args.rounds, 5)
        args.round_seconds = min(args.round_seconds, 0.15)
        args.threads_variants = ""
        args.memory_formats = args.memory_formats or "contiguous"
    return args


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _variant_names(args: argparse.Namespace, *, image: bool) -> tuple[list[str], list[str]]:
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    if args.quick and names == ["all"]:
        names = ["eager", "script", "trace", "frozen", "compile"]
    threads = [int(t) for t in args.threads_variants.split(",") if t.strip()]
    for t in threads:
        names += [f"eager+threads={t}", f"frozen+threads={t}"]
    if args.include_emulated:
        names += ["eager+bf16", "eager+autocast-bf16", "frozen+bf16"]
    if args.memory_formats:
        formats = [f.strip() for f in args.memory_formats.split(",")]
    else:
        formats = ["contiguous", "channels_last"] if image else ["contiguous"]
    return names, formats


def bench_model(label: str, model: Any, shape: tuple[int, ...], args: argparse.Namespace,
                log: Callable[[str], None]) -> list[Row]:
    import torch

    from autotune.errors import VariantError
    from autotune.worker.correctness import check_variant
    from autotune.worker.variants import (
        available,
        build_variant,
        expand_variants,
        recompile_count,
        summarize_exception,
    )

    default_threads = torch.get_num_threads()
    image = len(shape) == 4

    def make_inputs(seed: int) -> tuple[torch.Tensor, ...]:
        return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)),)

    names, formats = _variant_names(args, image=image)
    specs = expand_variants(names, device="cpu", memory_formats=formats, input_ndims=(len(shape),))
    rows: list[Row] = []
    example = make_inputs(10_000)
    for spec in specs:
        row = Row(label, spec.name, "ok", threads=spec.threads)
        rows.append(row)
        avail = available(spec, device="cpu", input_ndims=(len(shape),), input_is_float=(True,),
                          allow_emulated_precision=args.include_emulated)
        if not avail.ok:
            row.status, row.reason = "unavailable", avail.reason or ""
            continue
        torch.set_num_threads(spec.threads or default_threads)
        log(f"  {label}: building {spec.name} ...")
        try:
            built, _ = _timed(lambda spec=spec: build_variant(spec, model, example, device="cpu"))
            row.build_s = built.build_seconds
            x = built.prepare_inputs(example)
            _, row.first_call_s = _timed(lambda built=built, x=x: built.fn(*x))
            gate = check_variant(model, built, make_inputs)
        except VariantError as exc:
            row.status, row.reason = "failed", str(exc)
            continue
        except Exception as exc:  # a compile failure surfaces at the first call
            row.status, row.reason = "failed", f"first call failed: {summarize_exception(exc)}"
            continue
        row.gate_rel_err = gate.max_rel_error
        if not gate.passed:
            row.status, row.reason = "rejected", gate.reason or ""
            continue
        row.fn, row.inputs = built.fn, x
        log(f"  {label}: {spec.name} built in {row.build_s:.1f}s, first call {row.first_call_s:.1f}s")

    runnable = [r for r in rows if r.status == "ok" and r.fn is not None]
    eager = next((r for r in runnable if r.variant == "eager"), runnable[0] if runnable else None)
    if eager is None:
        return rows
    # calls per sample, from eager's speed, so a round takes ~round_seconds per variant
    torch.set_num_threads(default_threads)
    for _ in range(3):
        eager.fn(*eager.inputs)  # type: ignore[misc]
    _, one = _timed(lambda: eager.fn(*eager.inputs))  # type: ignore[misc]
    k = max(1, int(args.round_seconds / max(one, 1e-6)))
    for r in runnable:  # warm up: TorchScript's profiling executor optimises on the first calls
        torch.set_num_threads(r.threads or default_threads)
        for _ in range(max(3, k // 2)):
            r.fn(*r.inputs)  # type: ignore[misc]
    for r in runnable:
        r.recompiles_during_timing = 0
    log(f"  {label}: timing {len(runnable)} variants, {args.rounds} rounds x {k} calls")
    for rnd in range(args.rounds):
        order = runnable[rnd % len(runnable):] + runnable[: rnd % len(runnable)]
        for r in order:
            torch.set_num_threads(r.threads or default_threads)
            fn, inputs = r.fn, r.inputs
            graphs = recompile_count()
            t0 = time.perf_counter()
            for _ in range(k):
                fn(*inputs)  # type: ignore[misc]
            r.samples.append((time.perf_counter() - t0) / k)
            r.recompiles_during_timing = (r.recompiles_during_timing or 0) + recompile_count() - graphs
    torch.set_num_threads(default_threads)
    for r in runnable:
        r.fn, r.inputs = None, ()
    return rows


def _table(rows: list[Row], batch: int) -> str:
    from tabulate import tabulate

    eager = next((r for r in rows if r.variant == "eager" and r.median), None)
    body = []
    for r in rows:
        med = r.median
        compile_s = (r.build_s or 0) + (r.first_call_s or 0) if r.build_s is not None else None
        body.append([
            r.variant,
            r.status,
            f"{batch / med:,.1f}" if med else "",
            f"{eager.median / med:.2f}x" if med and eager and eager.median else "",
            f"{eager.best / r.best:.2f}x" if r.best and eager and eager.best else "",
            f"{med * 1e3:.2f}" if med else "",
            f"{100 * r.spread:.0f}%" if r.spread is not None else "",
            f"{r.build_s:.2f}" if r.build_s is not None else "",
            f"{r.first_call_s:.2f}" if r.first_call_s is not None else "",
            f"{compile_s:.1f}" if compile_s is not None else "",
            f"{r.gate_rel_err:.1e}" if r.gate_rel_err is not None else "",
            (r.reason[:90] + "...") if len(r.reason) > 93 else r.reason,
        ])
    headers = ["variant", "status", "samples/s", "vs eager", "vs eager (best)", "ms/batch", "spread",
               "build s", "1st call s", "compile s", "gate rel err", "reason"]
    return tabulate(body, headers=headers, disable_numparse=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.warm_cache:
        return _run(args)
    cache = tempfile.mkdtemp(prefix="bench-variants-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    try:
        return _run(args)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _run(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    import torch

    from autotune.worker.variants import cpu_native_precision

    if args.threads:
        torch.set_num_threads(args.threads)
    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    print("# bench_variants: variant throughput relative to eager, CPU, one process, side by side")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {cpu_native_precision('bf16')}, "
          f"inductor cache: {'warm (user cache)' if args.warm_cache else 'cold (fresh temp dir)'}")
    print("# timing: simple (not autotune's adaptive measure.py): "
          f"median of {args.rounds} interleaved rounds, "
          "each round K back-to-back calls per variant (K from eager's speed), variant order rotated per "
          "round; spread = (max-min)/median of the round means; "
          "'vs eager (best)' compares the fastest rounds")
    print("# compile s = build s (deepcopy/script/trace/freeze/export+AOTInductor) + 1st call s "
          "(torch.compile compiles here); gate = max error vs eager fp32 over 3 fresh batches")
    all_json: list[dict[str, Any]] = []
    for name in models:
        if name == "resnet18":
            import torchvision

            torch.manual_seed(0)
            model = torchvision.models.resnet18(weights=None).eval()
            workloads = [(f"resnet18 batch {args.resnet_batch} 3x{s}x{s}", (args.resnet_batch, 3, s, s))
                         for s in (int(v) for v in args.sizes.split(","))]
        elif name == "mlp":
            torch.manual_seed(0)
            model = torch.nn.Sequential(
                torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                torch.nn.Linear(2048, 10),
            ).eval()
            workloads = [(f"MLP 512-2048-2048-10 batch {args.mlp_batch}", (args.mlp_batch, 512))]
        else:
            print(f"unknown model {name!r} (resnet18, mlp)", file=sys.stderr)
            return 2
        for label, shape in workloads:
            t0 = time.perf_counter()
            rows = bench_model(label, model, shape, args, log)
            print(f"\n## {label}  ({time.perf_counter() - t0:.0f} s for this table)\n")
            print(_table(rows, shape[0]))
            sys.stdout.flush()
            for r in rows:
                all_json.append({
                    "workload": label, "variant": r.variant, "status": r.status, "reason": r.reason,
                    "seconds_per_batch": r.median, "samples": r.samples, "build_seconds": r.build_s,
                    "first_call_seconds": r.first_call_s, "gate_max_rel_error": r.gate_rel_err,
                    "recompiles_during_timing": r.recompiles_during_timing,
                })
            recompiled = [r.variant for r in rows if r.recompiles_during_timing]
            if recompiled:
                print("\nNOTE: dynamo compiled graphs during timing (recompilations): "
                      + ", ".join(recompiled))
    print(f"\n# total wall time {time.perf_counter() - t_start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(all_json, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
