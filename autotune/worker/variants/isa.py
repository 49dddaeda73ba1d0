"""Which CPU kernels a reduced-precision torch variant ran: oneDNN's verbose log of one call, summarised.

A bf16 or int8 speed-up on a CPU depends on the instructions its kernels use: AMX tiles (``avx512_core_amx``),
AVX512-BF16 / AVX512-VNNI (``avx512_core_bf16``, ``avx512_core_vnni``) or plain AVX512/AVX2 emulation. torch
does not say which it picked, but oneDNN (which runs torch's CPU matmuls and convolutions in bf16, and the
weights' reorders) logs every primitive it executes with its implementation name when its verbose mode is on.
:func:`onednn_kernels` turns the mode on for one call, reads the log (oneDNN prints to the C ``stdout``, file
descriptor 1, so the descriptor is pointed at a temporary file for that call) and counts the implementations of
the compute primitives::

    flush stdout; saved = dup(1); dup2(tmpfile, 1)
    with torch.backends.mkldnn.verbose(VERBOSE_ON): call()
    flush; dup2(saved, 1)
    lines "onednn_verbose,...,primitive,exec,cpu,<kind>,<impl>,..." with kind in (matmul, convolution,
    inner_product) -> count impl ("brg_matmul:avx512_core_amx_bf16" ...)

Kernels outside oneDNN (fbgemm's int8 Linear of ``torch.ao``, inductor's generated C++, MLAS in ONNX Runtime)
do not log: the note then says what torch's dispatch level is (``torch.backends.cpu.get_cpu_capability()``).
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

_COMPUTE = ("matmul", "convolution", "inner_product", "deconvolution")


def cpu_capability() -> str:
    """torch's CPU dispatch level (``AVX512``, ``AVX2``, ``DEFAULT``...) and whether the CPU has AMX."""
    import torch

    level = str(torch.backends.cpu.get_cpu_capability())
    caps = _cpuid_features() or {}
    flags = [name for name in ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512_fp16") if caps.get(name)]
    return f"torch CPU capability {level}" + (f" ({', '.join(flags)})" if flags else "") + \
        ("" if any(f.startswith("amx") for f in flags) else ", no AMX on this CPU")


def parse_onednn_log(text: str) -> dict[str, int]:
    """Count the implementations of the compute primitives in a oneDNN verbose log."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 7 or parts[0] != "onednn_verbose" or "exec" not in parts[2:4]:
            continue
        i = parts.index("exec")
        if i + 3 >= len(parts) or parts[i + 2] not in _COMPUTE:
            continue
        impl = f"{parts[i + 2]} {parts[i + 3]}"
        counts[impl] = counts.get(impl, 0) + 1
    return counts


def onednn_kernels(call: Callable[[], Any]) -> str:
    """One ``call()`` with oneDNN's verbose log on; a note naming the kernels it ran, or saying none logged."""
    import torch

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with tempfile.TemporaryFile(mode="w+b") as log:
            os.dup2(log.fileno(), 1)
            try:
                with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                    call()
            finally:
                sys.stdout.flush()
                os.dup2(saved, 1)
            log.seek(0)
            text = log.read().decode(errors="replace")
    finally:
        os.close(saved)
    counts = parse_onednn_log(text)
    if not counts:
        return f"kernels: none of the matmuls/convolutions ran in oneDNN (no verbose log); {cpu_capability()}"
    top = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4])
    amx = any("amx" in k for k in counts)
    return f"kernels (oneDNN verbose, one call): {top}; {'AMX ran' if amx else 'no AMX kernel ran'}; {cpu_capability()}"


#: CPU features (as ``torch.cpu.get_capabilities`` names them) that give int8 an exact int32 dot product.
INT8_DOT_FEATURES: tuple[str, ...] = ("amx_int8", "avx512_vnni", "avx_vnni")


def _cpuid_features() -> Mapping[str, Any] | None:
    """:func:`autotune.worker.devices.cpu_capabilities` (imported when asked: the builders need it only for int8)."""
    from autotune.worker.devices import cpu_capabilities

    return cpu_capabilities()


def int8_saturation() -> str | None:
    """Why u8s8 int8 kernels may saturate on this CPU, or None where they do not.

    Why it matters: an x86 CPU without an int8 dot-product instruction (AVX512-VNNI, AVX-VNNI, AMX-INT8) multiplies
    uint8 activations by int8 weights with ``vpmaddubsw``, which adds each pair of products into an int16 and
    clamps it: two products of 255 x 127 overflow it. ONNX Runtime's quantization guide (``reduce_range`` on
    "AVX2 and AVX512 (non-VNNI) machines") and NNCF's ``OverflowFix`` (SSE / AVX2 / AVX-512 parts) both answer with
    7-bit weights, which cannot overflow. On an AVX2-only EPYC the full-range builds of a small MLP lost 0.30-0.34
    of norm-wise accuracy; VNNI parts accumulate in int32 and need no fix. Non-x86 CPUs (ARM's ``sdot``) accumulate
    in int32 too."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return None
    caps = _cpuid_features()
    if caps is None or any(caps.get(name) for name in INT8_DOT_FEATURES):  # None: torch cannot say, so no fix
        return None
    return ("this CPU has no int8 dot-product instruction (no AVX512-VNNI, AVX-VNNI or AMX-INT8), where u8s8 int8 "
            "kernels add pairs of products into int16 and saturate")


__all__ = ["INT8_DOT_FEATURES", "cpu_capability", "int8_saturation", "onednn_kernels", "parse_onednn_log"]
