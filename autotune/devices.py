"""Devices: resolution, synchronisation, peak memory and out-of-memory recognition.

Everything that differs between CPU and CUDA lives here so that the timing loop and the
worker stay device-agnostic. Timing itself is in :mod:`autotune.measure`.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch

from autotune.errors import DeviceUnavailableError

CLEAR_REFS = "/proc/self/clear_refs"
PROC_STATUS = "/proc/self/status"


def resolve_device(name: str, *, field: str = "device") -> torch.device:
    """``auto`` → cuda when present, else cpu. Asking for a missing GPU is an input error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise DeviceUnavailableError(f"{field}: '{name}' is not a device; allowed: auto, cpu, cuda, cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"{field}: '{name}' requested but this machine has no usable CUDA device "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); use device = \"cpu\" or \"auto\""
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceUnavailableError(
                f"{field}: '{name}' requested but only {count} CUDA device(s) exist (cuda:0..cuda:{count - 1})"
            )
    elif dev.type != "cpu":
        raise DeviceUnavailableError(f"{field}: device type '{dev.type}' is not supported; allowed: cpu, cuda")
    return dev


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(exc: BaseException) -> bool:
    """Does this exception mean "out of memory"?

    CUDA: by type (``torch.cuda.OutOfMemoryError``), never by message text. CPU: Python's
    ``MemoryError``; torch's CPU allocator has no exception type of its own (it raises a
    plain ``RuntimeError`` from c10's enforce in ``alloc_cpu.cpp``), so there we recognise the
    allocator's fixed tag ``DefaultCPUAllocator``. The kernel's OOM killer is recognised by
    the runner from the worker's SIGKILL.
    """
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return type(exc) is RuntimeError and "DefaultCPUAllocator" in str(exc)


def release_memory(device: torch.device) -> None:
    """Return cached blocks so the next probe starts from a clean allocator state."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class MemoryMethod:
    """How peak memory is measured on a device, said in the report."""

    name: str
    description: str


def memory_method(device: torch.device) -> MemoryMethod:
    if device.type == "cuda":
        return MemoryMethod("cuda_max_allocated", "torch.cuda.max_memory_allocated (peak of the caching allocator)")
    if _can_reset_rss():
        return MemoryMethod("vmhwm", "peak resident set of the worker (VmHWM, reset via /proc/self/clear_refs)")
    return MemoryMethod("ru_maxrss", "peak resident set of the worker since it started (ru_maxrss; not resettable)")


def _can_reset_rss() -> bool:
    return os.path.exists(CLEAR_REFS) and os.access(CLEAR_REFS, os.W_OK)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    if _can_reset_rss():
        # Writing 5 resets the "high water mark" (VmHWM) to the current RSS (Linux >= 4.0).
        with open(CLEAR_REFS, "w") as fh:
            fh.write("5")


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return _vmhwm_bytes()


def current_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return _status_field_bytes("VmRSS")


def _vmhwm_bytes() -> int:
    try:
        return _status_field_bytes("VmHWM")
    except OSError:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _status_field_bytes(name: str) -> int:
    with open(PROC_STATUS) as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"{name} not in {PROC_STATUS}")


def device_memory_capacity(device: torch.device) -> int | None:
    """Total memory of a GPU (the OOM boundary's natural limit); None on CPU."""
    if device.type == "cuda":
        _free, total = torch.cuda.mem_get_info(device)
        return int(total)
    return None


def available_host_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
