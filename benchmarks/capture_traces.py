"""Capture the real-trace corpus: per-call timings of the shipped recipes' models on this machine.

Usage::

    .venv/bin/python benchmarks/capture_traces.py [--out tests/data/real-traces] [--only NAME ...]

Every trace is built the way the tool builds a candidate (``autotune.core.recipe.load_recipe``,
``autotune.worker.model.build_model`` / ``make_inputs``, ``VariantSpec.parse`` + ``build_variant``, the
thread count set as the worker sets it) and every call is timed on its own (``perf_counter``
around one call, inside ``torch.inference_mode``). Value 0 is the first call (compile, lazy
init, the profiling executor's first runs), so the corpus exercises the first-call spike.

A trace runs until it has at least ``MIN_CALLS`` calls and ``MIN_SECONDS`` of wall time, or
``MAX_SECONDS``, or ``MAX_CALLS`` (fast models: 4,000 calls keeps the files small). Existing
trace files are kept (the capture can be resumed); ``labels.json`` is rewritten from all
trace files present by :mod:`autotune.traces`' labelling protocol
(:func:`autotune.traces.label_real_trace`), which does not use the detector.

Output: ``<out>/<name>.txt`` (one value per line, seconds, 6 significant digits, with a
``#`` header line holding the metadata) and ``<out>/labels.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from autotune.core.recipe import load_recipe  # noqa: E402
from autotune.traces import label_real_trace, load_trace  # noqa: E402
from autotune.worker.model import build_model, make_inputs  # noqa: E402
from autotune.worker.traffic import adapt, load_traffic  # noqa: E402
from autotune.worker.variants import VariantSpec, build_variant, reset_compiler_state  # noqa: E402

MIN_CALLS = 600
MIN_SECONDS = 6.0
MAX_SECONDS = 15.0
MAX_CALLS = 4000


@dataclass(frozen=True)
class Job:
    recipe: str
    variant: str
    batch: int
    threads: int

    @property
    def name(self) -> str:
        v = self.variant.replace(":", "-").replace("+", "_").replace("=", "")
        return f"{self.recipe}__{v}__b{self.batch}__t{self.threads}"


def _jobs() -> list[Job]:
    """The corpus: every CPU recipe, several variants, batch sizes, and 1 and 2 threads.

    Big models get small batches (the capture stays ~10-15 minutes on 2 cores); torch.compile
    only where its compile is short enough on this machine.
    """
    jobs: list[Job] = []
    for v in ("eager", "script", "trace", "frozen", "compile"):
        for b, t in ((16, 1), (256, 2)):
            jobs.append(Job("mlp", v, b, t))
    jobs.append(Job("mlp", "eager+bf16", 64, 2))
    jobs.append(Job("mlp", "frozen", 64, 1))
    for v in ("eager", "script", "frozen", "compile"):
        for b, t in ((1, 2), (8, 1)):
            jobs.append(Job("quickstart", v, b, t))
    jobs.append(Job("quickstart", "eager", 32, 2))
    jobs.append(Job("quickstart", "frozen", 32, 1))
    for v in ("eager", "script", "frozen"):
        for b, t in ((1, 1), (1, 2)):
            jobs.append(Job("mobilenet_v3_large", v, b, t))
    jobs.append(Job("mobilenet_v3_large", "eager", 4, 2))
    for v in ("eager", "frozen"):
        jobs.append(Job("efficientnet_b0", v, 1, 2))
    jobs.append(Job("efficientnet_b0", "eager", 2, 1))
    for v in ("eager", "script", "frozen", "compile"):
        jobs.append(Job("transformer", v, 1, 2))
    jobs.append(Job("transformer", "eager", 8, 1))
    jobs.append(Job("transformer", "frozen", 8, 2))
    jobs.append(Job("resnet50", "eager", 1, 2))
    jobs.append(Job("resnet50", "frozen", 1, 1))
    return jobs


def _heldout_jobs() -> list[Job]:
    """A second corpus, recorded after the warmup and CI methods were designed (issue 31's held-out half): the
    runtimes (ONNX Runtime, OpenVINO) and families (a Hugging Face BERT, a timm CNN) the first corpus lacks,
    and torch variants at batch sizes it did not use."""
    jobs: list[Job] = []
    for recipe, small, big in (("bert", 1, 8), ("timm_cnn", 1, 4), ("quickstart", 4, 16), ("mlp", 8, 64),
                               ("mobilenet_v3_large", 1, 2), ("transformer", 1, 8), ("efficientnet_b0", 1, 2)):
        jobs.append(Job(recipe, "onnx", small, 2))
        jobs.append(Job(recipe, "openvino", big, 1))
    jobs += [Job("bert", "eager", 1, 2), Job("bert", "frozen", 8, 1), Job("timm_cnn", "eager", 4, 2),
             Job("timm_cnn", "trace", 1, 1), Job("quickstart", "trace", 16, 2), Job("mlp", "compile", 64, 2),
             Job("mlp", "eager", 64, 1), Job("transformer", "trace", 8, 2), Job("mobilenet_v3_large", "trace", 2, 1),
             Job("efficientnet_b0", "script", 2, 2)]
    return jobs


def capture(job: Job) -> list[float]:
    """Per-call seconds of one candidate, first call included."""
    recipe = load_recipe(ROOT / "recipes" / f"{job.recipe}.toml")
    device = torch.device("cpu")
    torch.set_num_threads(job.threads)
    reset_compiler_state()
    model = build_model(recipe, device=device)
    spec = VariantSpec.parse(job.variant)
    traffic = load_traffic(recipe, batch_size=job.batch, device=device, seed=0)
    clock = time.perf_counter
    out: list[float] = []
    with torch.inference_mode():
        if traffic.layout.has_keywords or recipe.data is not None:  # a data factory, keyword inputs: as the worker
            example = traffic.example
            built = build_variant(spec, adapt(model, traffic.layout), example, device="cpu",
                                  dynamic_dims=traffic.build_dims(), input_names=traffic.layout.names)
        else:
            example = make_inputs(recipe.inputs, batch_size=job.batch, device=device, seed=0)
            built = build_variant(spec, model, example, device="cpu")
        prepared = built.prepare_inputs(example)
        torch.set_num_threads(job.threads)
        start = clock()
        while True:
            t0 = clock()
            built.fn(*prepared)
            t1 = clock()
            out.append(t1 - t0)
            spent = t1 - start
            n = len(out)
            if (n >= MIN_CALLS and spent >= MIN_SECONDS) or spent >= MAX_SECONDS or n >= MAX_CALLS:
                break
    return out


def write_labels(out_dir: Path, jobs: dict[str, Job]) -> None:
    labels: dict[str, Any] = {}
    for path in sorted(out_dir.glob("*.txt")):
        x = load_trace(path)
        meta = _read_header(path)
        lab = label_real_trace(x)
        labels[path.name] = {**meta, **lab.to_dict()}
    (out_dir / "labels.json").write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n")


def _read_header(path: Path) -> dict[str, Any]:
    with path.open() as fh:
        first = fh.readline()
    if first.startswith("# "):
        try:
            return dict(json.loads(first[2:]))
        except ValueError:
            return {}
    return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "real-traces"))
    ap.add_argument("--only", nargs="*", default=None, help="job names (or substrings) to capture")
    ap.add_argument("--labels-only", action="store_true", help="only rewrite labels.json")
    ap.add_argument("--set", choices=("corpus", "heldout"), default="corpus",
                    help="corpus: the first 40 jobs; heldout: the second set (runtimes, transformers, timm)")
    args = ap.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = {j.name: j for j in (_heldout_jobs() if args.set == "heldout" else _jobs())}
    if not args.labels_only:
        for name, job in jobs.items():
            if args.only is not None and not any(s in name for s in args.only):
                continue
            path = out_dir / f"{name}.txt"
            if path.exists():
                continue
            t0 = time.perf_counter()
            try:
                x = capture(job)
            except Exception as exc:  # a variant this machine cannot build: leave it out, say so
                print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            meta = {
                "recipe": job.recipe, "variant": job.variant, "batch": job.batch, "threads": job.threads,
                "calls": len(x), "seconds": round(sum(x), 3), "torch": torch.__version__,
                "machine": platform.machine(), "captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            body = "\n".join(f"{v:.6g}" for v in x)
            path.write_text(f"# {json.dumps(meta, sort_keys=True)}\n{body}\n")
            print(f"{name}: {len(x)} calls, first {x[0] * 1e3:.1f} ms, median {sorted(x)[len(x) // 2] * 1e3:.3f} ms,"
                  f" {time.perf_counter() - t0:.1f} s", flush=True)
    write_labels(out_dir, jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
