"""Can a variant run *here*, and is it worth trying: :func:`available`, with a reason, before any time is spent.

Cheap: no model is built and inductor is not imported (torch itself is, lazily). The policy on reduced
precision without native CPU arithmetic is in :mod:`autotune.worker.variants`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.variant_names import VariantSpec


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str | None = None


def _device_type(device: str) -> str:
    from autotune.core.device_names import device_type

    return device_type(device)


def _capabilities(device: str) -> Any:
    """The device's :class:`autotune.worker.devices.Capabilities` (the backend knows; nothing here asks the type)."""
    from autotune.worker.devices import backend_for

    return backend_for(device).capabilities()


def _torch_version() -> tuple[int, int]:
    import torch

    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def _cpp_compiler() -> str | None:
    """The C++ compiler inductor will use, found without importing inductor (seconds of start-up).

    Mirrors ``torch._inductor.config.cpp.cxx``: ``$CXX`` if set, else g++ (clang++ on macOS); inductor
    does not look for other names, so neither do we.
    """
    cxx = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    return cxx if shutil.which(cxx.split()[0]) else None


def _has_triton() -> bool:
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    try:
        return bool(has_triton())
    except Exception:
        return False


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def thread_counts(threads: Sequence[int] | str, *, device: str) -> tuple[int, ...]:
    """The recipe's ``search.threads`` resolved for this device: the counts to cross the variants with.

    ``"auto"``: 1, 2, 4, ... below the usable cores, and the usable cores themselves (on 2 cores: 1, 2; on 12:
    1, 2, 4, 8, 12), a log-spaced ladder because throughput against threads flattens long before the last core.
    Nothing on a GPU: there the host threads do not run the model, so crossing them would only multiply the
    space by configurations that measure the same thing.
    """
    if _device_type(device) != "cpu" or not threads:
        return ()
    if isinstance(threads, str):
        cpus = _usable_cpus()
        ladder = {1 << i for i in range(cpus.bit_length()) if 1 << i < cpus}
        return tuple(sorted(ladder | {cpus}))
    return tuple(threads)


def cpu_native_precision(precision: str) -> bool | None:
    """Whether this CPU does the precision's arithmetic natively (a device fact: see
    :func:`autotune.worker.devices.cpu_native_precision`)."""
    from autotune.worker.devices import cpu_native_precision as native

    return native(precision)


def _reduced_dtype(precision: str) -> str | None:
    if precision in ("bf16", "autocast-bf16"):
        return "bf16"
    if precision in ("fp16", "autocast-fp16"):
        return "fp16"
    return None


def available(
    spec: VariantSpec,
    *,
    device: str,
    input_ndims: Sequence[int] = (),
    input_is_float: Sequence[bool] = (),
    allow_emulated_precision: bool = False,
) -> Availability:
    """Can ``spec`` run on ``device`` for inputs of these ranks, and is it worth trying? With a reason.

    ``input_ndims`` / ``input_is_float`` describe the model's inputs (empty: unknown, and then
    ``channels_last`` is not ruled out). Cheap: no model is built and inductor is not imported.
    """
    import torch

    from autotune.core.device_names import ALLOWED_TEXT, DEVICE_TYPES, INDEXED_TYPES

    kind = _device_type(device)
    if kind not in DEVICE_TYPES:
        return Availability(False, f"device '{device}' is not supported ({ALLOWED_TEXT})")
    accelerator = kind in INDEXED_TYPES
    if accelerator:
        module = getattr(torch, kind, None)
        if module is None or not module.is_available():
            return Availability(False, f"{kind.upper()} is not available on this machine")

    if spec.is_runtime:
        from autotune.worker.variants.runtimes import runtime_unavailable_reason

        reason = runtime_unavailable_reason(spec, device=device, input_ndims=input_ndims,
                                            input_is_float=input_is_float)
        return Availability(reason is None, reason)

    # compiler
    if spec.is_torchscript:
        if sys.version_info >= (3, 14):
            return Availability(False, "TorchScript is not supported on Python 3.14+")
    elif spec.compiler in ("compile", "export"):
        if sys.version_info >= (3, 15):
            return Availability(False, "torch.compile/export are not supported on Python 3.15+")
        if kind == "cpu" and _cpp_compiler() is None:
            return Availability(False, f"{spec.compiler} on CPU needs a C++ compiler (g++/clang++ or $CXX)")
        if accelerator and not _has_triton():
            return Availability(False, f"{spec.compiler} on {kind.upper()} needs triton, which is not installed")
    if spec.compiler == "compile" and kind == "cpu":
        if spec.compile_mode == "reduce-overhead":
            return Availability(
                False, "compile:reduce-overhead only adds CUDA graphs; on CPU it is compile:default"
            )
        if spec.compile_mode == "max-autotune-no-cudagraphs":
            return Availability(False, "compile:max-autotune-no-cudagraphs is compile:max-autotune on CPU")
    if spec.compiler == "export":
        import importlib.util

        if _torch_version() < (2, 6) or importlib.util.find_spec("torch.export") is None:
            return Availability(
                False, f"export needs torch >= 2.6 (AOTInductor packaging); have {torch.__version__}"
            )

    # precision
    if spec.is_quantized:
        if kind != "cpu":
            return Availability(False, f"{spec.precision} variants are built for the CPU here, not for {kind}")
        from autotune.worker.variants.quantize import torch_int8_unavailable_reason

        reason = torch_int8_unavailable_reason(spec.compiler, spec.precision)
        if reason is not None:
            return Availability(False, reason)
    reduced = _reduced_dtype(spec.precision)
    if reduced is not None:
        if spec.precision.startswith("autocast"):
            is_av = getattr(torch.amp, "is_autocast_available", None)
            if is_av is not None and not is_av(kind):
                return Availability(False, f"torch.autocast is not available for '{kind}'")
        if kind == "cpu":
            native = cpu_native_precision(spec.precision)
            if native is False and not allow_emulated_precision:
                need = "AVX512_BF16 or AMX_BF16" if reduced == "bf16" else "AVX512_FP16 or AMX_FP16"
                return Availability(
                    False,
                    f"this CPU has no native {reduced} arithmetic ({need}); emulated {reduced} is several "
                    "times slower than fp32, so it is not tried",
                )
        elif reduced == "bf16" and not _capabilities(device).bf16:
            return Availability(False, f"this {kind.upper()} device has no native bf16 "
                                       "(CUDA: needs compute capability >= 8.0)")

    # memory format
    if spec.memory_format == "channels_last" and input_ndims:
        same_len = len(input_is_float) == len(input_ndims)
        floats = list(input_is_float) if same_len else [True] * len(input_ndims)
        if not any(nd == 4 and fl for nd, fl in zip(input_ndims, floats, strict=True)):
            return Availability(False, "channels_last needs a 4-D floating-point input (N, C, H, W)")

    # cuda graphs / threads
    if spec.cuda_graphs and not (accelerator and _capabilities(device).graphs):
        return Availability(False, "CUDA graphs need a CUDA device")
    if spec.threads is not None:
        if kind != "cpu":
            return Availability(False, f"threads=N is a CPU knob (torch.set_num_threads); not used on {kind}")
        cpus = _usable_cpus()
        if spec.threads > cpus:
            return Availability(False, f"threads={spec.threads} exceeds the {cpus} usable CPU cores")
    return Availability(True)
