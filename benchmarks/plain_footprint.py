"""A plain deployment process: the independent check of a batch boundary. Imports torch, nothing of autotune.

It does what a service would do: load the model once, build the variant from it, drop the
original where the variant holds its own copy of the weights, create a batch and run one forward
pass in inference mode. It prints one JSON line with the peak memory of that forward:

* CPU: the process's peak resident set (VmHWM, reset after the build via /proc/self/clear_refs),
  so the number is torch + one copy of the weights + the inputs + the forward at the batch;
* CUDA (``--device cuda``): whether the forward fits under an allocator cap at ``--limit`` bytes
  (``torch.cuda.set_per_process_memory_fraction``) and the peak the caching allocator reached.

Usage::

    python benchmarks/plain_footprint.py FACTORY_FILE:FUNCTION --kwargs '{"hidden": 8192}' \\
        --shape 256 --batch 11672 --variant eager|frozen|compile|export [--device cuda --limit BYTES]

Variants are built the way their documentation shows: ``frozen`` is
``optimize_for_inference(freeze(script(model)))``, ``compile`` is ``torch.compile(model)`` (compiled
at the first call), ``export`` is AOTInductor (``aoti_compile_and_package`` + ``aoti_load_package``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import importlib.util
import json
import os
import sys
import tempfile

import torch


def _load_factory(ref: str):
    target, _, attr = ref.rpartition(":")
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location("plain_user_models", target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)


def _status(name: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(name)


def _build(variant: str, model: torch.nn.Module, example: torch.Tensor):
    """The variant, and whether it holds its own copy of the weights (then the original is dropped)."""
    if variant == "eager":
        return model, False
    if variant == "frozen":
        return torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model))), True
    if variant == "compile":
        return torch.compile(model), False
    if variant == "export":
        ep = torch.export.export(model, (example,))
        path = os.path.join(tempfile.mkdtemp(), "model.pt2")
        torch._inductor.aoti_compile_and_package(ep, package_path=path)
        return torch._inductor.aoti_load_package(path), True
    raise SystemExit(f"unknown variant {variant!r}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("factory")
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--shape", type=int, nargs="+", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--variant", default="eager")
    p.add_argument("--device", default="cpu")
    p.add_argument("--limit", type=int, default=None, help="CUDA: allocator cap in bytes")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    with torch.no_grad():
        model = _load_factory(args.factory)(**json.loads(args.kwargs)).eval()
        for prm in model.parameters():
            prm.requires_grad_(False)
        model = model.to(device)
        example = torch.randn(args.batch, *args.shape, device=device)
        fn, own_copy = _build(args.variant, model, example)
        if own_copy:
            del model
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    result: dict[str, object] = {"variant": args.variant, "batch": args.batch, "device": str(device)}
    if device.type == "cuda":
        torch.cuda.empty_cache()
        total = torch.cuda.mem_get_info(device)[1]
        if args.limit:
            torch.cuda.set_per_process_memory_fraction(min(1.0, args.limit / total), device.index or 0)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            with torch.inference_mode():
                for _ in range(2):
                    out = fn(example)
                    torch.cuda.synchronize(device)
                    del out
            result["fits"] = True
        except RuntimeError as exc:  # torch.OutOfMemoryError, or TorchScript's re-raise of it (a RuntimeError)
            if "CUDA out of memory" not in str(exc):
                raise
            result["fits"] = False
            result["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
        result["peak_bytes"] = int(torch.cuda.max_memory_reserved(device))  # what the cap bounds
        result["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
    else:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # VmHWM := VmRSS: the build's transient copies are not the deployment's
        with torch.inference_mode():
            out = fn(example)
            del out
        result["peak_bytes"] = _status("VmHWM")
    result["torch_only"] = not any(name.startswith("autotune") for name in sys.modules)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
