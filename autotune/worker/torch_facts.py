"""What torch says about the machine: its version, build, thread pools and CUDA devices (read in the worker).

report.json's ``environment`` section describes the machine a run measured on. The parent gathers what it
can read without torch (host, CPU, memory, OS, Python, packages, nvidia-smi: :mod:`autotune.environment`);
torch's own facts are read here, in the worker that imports torch anyway, sent back with the ``validate``
reply (:class:`autotune.core.protocol.TorchFacts`) and merged by the parent into the same fields
(:func:`autotune.environment.machine_facts`).

Rules: :func:`torch_facts` never raises (a fact that cannot be read is ``None``), and it creates no CUDA
context unless asked (``initialize_cuda``) or one exists: ``torch.cuda.device_count`` asks NVML, so reading
it costs no GPU memory; GPU properties through torch are read only where CUDA already is initialised, and
the parent otherwise lists the GPUs from nvidia-smi.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from autotune.core.protocol import TorchFacts, unknown_torch_facts

__all__ = ["torch_facts"]

T = TypeVar("T")


def _safe(probe: Callable[[], T], default: T | None = None) -> T | None:
    """Run one probe; any failure means "unknown", never an exception for the caller."""
    try:
        return probe()
    except Exception:
        return default


def torch_facts(*, initialize_cuda: bool = False) -> TorchFacts:
    """Everything torch knows; every fact unknown when torch cannot be imported."""
    facts = unknown_torch_facts()
    try:
        import torch
    except Exception:
        return facts

    facts["torch_version"] = _safe(lambda: str(torch.__version__))
    facts["torch_cuda_version"] = _safe(lambda: torch.version.cuda)
    facts["torch_cudnn_version"] = _safe(lambda: torch.backends.cudnn.version())
    facts["torch_threads"] = _safe(torch.get_num_threads)
    facts["torch_interop_threads"] = _safe(torch.get_num_interop_threads)
    facts["mkl_available"] = _safe(torch.backends.mkl.is_available)
    facts["mkldnn_available"] = _safe(torch.backends.mkldnn.is_available)
    facts["openmp_available"] = _safe(torch.backends.openmp.is_available)
    parallel_info = _safe(torch.__config__.parallel_info) or ""
    backend = re.search(r"ATen parallel backend:\s*(.+)", parallel_info)
    facts["torch_parallel_backend"] = backend.group(1).strip() if backend else None
    mkl = re.search(r"Math Kernel Library Version\s+([0-9][0-9.]*)", parallel_info)
    facts["mkl_version"] = mkl.group(1) if mkl else None

    # device_count() asks NVML first, so it neither creates a context nor poisons fork.
    count = _safe(torch.cuda.device_count)
    facts["cuda_device_count"] = count
    facts["cuda_available"] = bool(count) if count is not None else None
    already = bool(_safe(torch.cuda.is_initialized, False))
    if count and (initialize_cuda or already):
        facts["gpus"] = _safe(lambda: _torch_gpus(torch, count)) or []
    return facts


def _torch_gpus(torch: Any, count: int) -> list[dict[str, Any]]:
    gpus = []
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "index": index,
                "name": str(props.name),
                "memory_total_bytes": int(props.total_memory),
                "capability": f"{props.major}.{props.minor}",
                "multiprocessors": int(props.multi_processor_count),
                "driver_version": None,
            }
        )
    return gpus
