"""The machine a run measured on: report.json's ``environment`` section, and the hardware a study depends on.

A recommendation is only valid for the machine it was measured on: the same model can swap
its best variant between two CPUs or two torch releases. The machine's facts are stored in
``report.json`` so that a reader (or a later ``autotune report``) can tell which machine the
numbers describe, and so that two reports can be compared honestly.

Rules this module keeps:

- It runs in the parent and imports no torch. The facts it can read without torch (host, CPU,
  memory, OS, Python, package versions from metadata, GPUs from ``nvidia-smi``) are read here;
  torch's own (version, build, thread pools, CUDA device count) are read by a worker
  (:mod:`autotune.worker.torch_facts`, sent back with the ``validate`` reply) and merged by
  :func:`machine_facts` into the same fields. A CUDA context in the parent would hold several
  hundred MiB of GPU memory for the whole run (skewing every batch-boundary probe) and make
  ``fork`` unusable.
- :func:`machine_facts` never raises. Every fact is read by its own small probe; a probe that
  fails (file missing, package absent, driver broken) leaves ``None`` and the others go on.

Why one module (~400 lines): the machine's description is one concept; its length is many small readers
(``/proc``, cgroups, nvidia-smi), each a few lines and each only used by :func:`machine_facts`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from autotune.core.protocol import unknown_torch_facts

__all__ = ["ENV_VARS", "PACKAGES", "hardware_fingerprint", "machine_facts", "summary_line"]

T = TypeVar("T")

#: Environment variables that change how fast a model runs; recorded whether set or not.
ENV_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "KMP_AFFINITY",
    "GOMP_CPU_AFFINITY",
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCHINDUCTOR_MAX_AUTOTUNE",
    "TORCHINDUCTOR_FREEZING",
    "TORCH_CUDNN_V8_API_ENABLED",
)

#: Distributions whose versions are recorded (read from metadata, never imported).
PACKAGES: tuple[str, ...] = ("torchvision", "optuna", "numpy", "scipy", "triton", "matplotlib")

#: CPU flags that decide which kernels torch can use (bf16/int8 matmul, wide vectors).
_NOTABLE_CPU_FLAGS: tuple[str, ...] = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "bf16",
)

_CPUINFO = Path("/proc/cpuinfo")
_MEMINFO = Path("/proc/meminfo")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_NVIDIA_SMI_TIMEOUT_S = 10.0


def _safe(probe: Callable[[], T], default: T | None = None) -> T | None:
    """Run one probe; any failure means "unknown", never an exception for the caller."""
    try:
        return probe()
    except Exception:
        return default


# --------------------------------------------------------------------------------------- CPU


def _read_cpuinfo() -> list[dict[str, str]]:
    """``/proc/cpuinfo`` as one ``{key: value}`` dict per logical processor."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in _CPUINFO.read_text(errors="replace").splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def _cpu_model(cpuinfo: list[dict[str, str]] | None) -> str | None:
    for block in cpuinfo or []:
        for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
            if block.get(key):
                return block[key]
    return platform.processor() or None


def _physical_cores(cpuinfo: list[dict[str, str]] | None) -> int | None:
    """Distinct (package, core) pairs; psutil as fallback (e.g. on ARM, no ``core id``)."""
    pairs = {
        (block.get("physical id"), block.get("core id")) for block in cpuinfo or [] if "core id" in block
    }
    if pairs:
        return len(pairs)
    try:
        import psutil
    except ImportError:
        return None
    count = psutil.cpu_count(logical=False)
    return int(count) if count else None


def _cpu_flags(cpuinfo: list[dict[str, str]] | None) -> list[str] | None:
    for block in cpuinfo or []:
        raw = block.get("flags") or block.get("Features")
        if raw is not None:
            present = set(raw.split())
            return [flag for flag in _NOTABLE_CPU_FLAGS if flag in present]
    return None


def _affinity_cores() -> int | None:
    """How many cores this process may run on (taskset / cpuset), often fewer than exist."""
    return len(os.sched_getaffinity(0))


def _cgroup_cpu_quota() -> float | None:
    """The container's CPU quota in cores (cgroup v2 ``cpu.max``, v1 cfs files); None if unlimited."""
    v2 = _CGROUP_ROOT / "cpu.max"
    if v2.exists():
        quota, *rest = v2.read_text().split()
        if quota == "max":
            return None
        period = int(rest[0]) if rest else 100_000
        return int(quota) / period
    v1_quota = _CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us"
    v1_period = _CGROUP_ROOT / "cpu" / "cpu.cfs_period_us"
    if v1_quota.exists() and v1_period.exists():
        quota_us = int(v1_quota.read_text())
        if quota_us <= 0:
            return None
        return quota_us / int(v1_period.read_text())
    return None


# ------------------------------------------------------------------------------------ memory


def _meminfo_bytes(field: str) -> int | None:
    for line in _MEMINFO.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == field:
            number, _, unit = value.strip().partition(" ")
            return int(number) * (1024 if unit.strip().lower() == "kb" else 1)
    return None


def host_memory_available() -> int | None:
    """MemAvailable now (None where /proc/meminfo cannot be read)."""
    return _safe(lambda: _meminfo_bytes("MemAvailable"))


def _memory_total() -> int | None:
    total = _safe(lambda: _meminfo_bytes("MemTotal"))
    if total is not None:
        return total
    import psutil

    return int(psutil.virtual_memory().total)


def _memory_available() -> int | None:
    available = _safe(lambda: _meminfo_bytes("MemAvailable"))
    if available is not None:
        return available
    import psutil

    return int(psutil.virtual_memory().available)


def _cgroup_memory_limit() -> int | None:
    """The container's memory limit in bytes; None when unlimited.

    On a CPU this, not MemTotal, is where a large batch gets killed, so the batch boundary
    should be read against it.
    """
    for path in (_CGROUP_ROOT / "memory.max", _CGROUP_ROOT / "memory" / "memory.limit_in_bytes"):
        if path.exists():
            raw = path.read_text().strip()
            if raw == "max":
                return None
            limit = int(raw)
            # cgroup v1 writes "unlimited" as a huge page-aligned number.
            return None if limit >= 2**60 else limit
    return None


# -------------------------------------------------------------------------------- nvidia-smi

_SMI_QUERY = "index,name,memory.total,compute_cap,driver_version"


def _parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version
    --format=csv,noheader,nounits`` (memory in MiB); unparsable fields become None."""

    def number(field: str) -> float | None:
        try:
            return float(field)
        except ValueError:
            return None

    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 5 or not fields[0].isdigit():
            continue
        memory_mib = number(fields[2])
        capability = fields[3] if number(fields[3]) is not None else None
        gpus.append(
            {
                "index": int(fields[0]),
                "name": fields[1] or None,
                "memory_total_bytes": int(memory_mib * 2**20) if memory_mib is not None else None,
                "capability": capability,
                "multiprocessors": None,
                "driver_version": fields[4] or None,
            }
        )
    return gpus


def _nvidia_smi_gpus() -> list[dict[str, Any]]:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return []
    completed = subprocess.run(
        [executable, f"--query-gpu={_SMI_QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=_NVIDIA_SMI_TIMEOUT_S,
        check=False,
    )
    return _parse_nvidia_smi(completed.stdout) if completed.returncode == 0 else []


def _merge_gpus(from_torch: list[dict[str, Any]], from_smi: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prefer torch's view (it honours CUDA_VISIBLE_DEVICES); fill gaps from nvidia-smi.

    nvidia-smi lists every GPU in the machine; without torch's list it is the best we have.
    Indices of the two agree only when CUDA_VISIBLE_DEVICES is unset, so the driver version
    (the same for all GPUs of one machine) is the only field copied across by position.
    """
    if not from_torch:
        return from_smi
    driver = next((gpu["driver_version"] for gpu in from_smi if gpu.get("driver_version")), None)
    return [{**gpu, "driver_version": gpu.get("driver_version") or driver} for gpu in from_torch]


# ---------------------------------------------------------------------------------- public


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_facts(torch_facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """Describe this machine and its software as a JSON-able dict (report.json's ``environment``); never raises.

    Keys (all present, ``None`` when unknown): ``hostname``, ``platform``, ``machine``,
    ``python``, ``python_implementation``, ``cpu_model``, ``cpu_logical_cores``,
    ``cpu_physical_cores``, ``cpu_affinity_cores``, ``cpu_quota_cores``, ``cpu_flags``,
    ``memory_total_bytes``, ``memory_available_bytes``, ``memory_limit_bytes`` (cgroup),
    ``torch_version``, ``torch_cuda_version``, ``torch_cudnn_version``, ``torch_threads``,
    ``torch_interop_threads``, ``torch_parallel_backend``, ``mkl_available``, ``mkl_version``,
    ``mkldnn_available``, ``openmp_available``, ``cuda_available``, ``cuda_device_count``,
    ``cuda_driver_version``, ``gpus`` (list of ``{index, name, memory_total_bytes,
    capability, multiprocessors, driver_version}``), ``packages`` ({name: version}),
    ``env`` ({variable: value}).

    ``torch_facts`` is what a worker read from torch (:class:`autotune.core.protocol.TorchFacts`, the
    ``validate`` reply's); None (no worker answered) leaves every torch fact unknown.
    """
    cpuinfo = _safe(_read_cpuinfo)
    env: dict[str, Any] = {
        "hostname": _safe(socket.gethostname),
        "platform": _safe(platform.platform),
        "machine": _safe(platform.machine),
        "python": _safe(platform.python_version),
        "python_implementation": _safe(platform.python_implementation),
        "cpu_model": _safe(lambda: _cpu_model(cpuinfo)),
        "cpu_logical_cores": _safe(os.cpu_count),
        "cpu_physical_cores": _safe(lambda: _physical_cores(cpuinfo)),
        "cpu_affinity_cores": _safe(_affinity_cores),
        "cpu_quota_cores": _safe(_cgroup_cpu_quota),
        "cpu_flags": _safe(lambda: _cpu_flags(cpuinfo)),
        "memory_total_bytes": _safe(_memory_total),
        "memory_available_bytes": _safe(_memory_available),
        "memory_limit_bytes": _safe(_cgroup_memory_limit),
    }
    facts: dict[str, Any] = {**unknown_torch_facts(), **(torch_facts or {})}
    gpus_torch = facts.pop("gpus", []) or []
    env.update(facts)
    gpus_smi = (_safe(_nvidia_smi_gpus) or []) if (env.get("cuda_device_count") or gpus_torch) else []
    gpus = _merge_gpus(gpus_torch, gpus_smi)
    env["cuda_driver_version"] = next((g["driver_version"] for g in gpus if g.get("driver_version")), None)
    env["gpus"] = gpus
    env["packages"] = {name: _safe(functools.partial(_package_version, name)) for name in PACKAGES}
    env["env"] = {name: os.environ.get(name) for name in ENV_VARS}
    return env


def hardware_fingerprint() -> dict[str, Any]:
    """The stable hardware facts a study's measurements depend on: ``machine`` (architecture), ``cpu_model``,
    ``cpu_cores`` (logical CPUs of the machine) and ``gpus`` (the names of its GPUs, as nvidia-smi lists
    them; empty without one). Never raises; an unknown fact is None.

    Left out on purpose: what changes while a machine runs or between two runs on it (free memory, the CPU
    affinity or quota of one process, clocks, the driver version, the hostname). No torch import and no CUDA
    context: the caller is the parent process that spawns the measuring workers.
    """
    cpuinfo = _safe(_read_cpuinfo)
    gpus = _safe(_nvidia_smi_gpus) or []
    return {
        "machine": _safe(platform.machine),
        "cpu_model": _safe(lambda: _cpu_model(cpuinfo)),
        "cpu_cores": _safe(os.cpu_count),
        "gpus": [gpu.get("name") for gpu in sorted(gpus, key=lambda g: g.get("index") or 0)],
    }


def _gib(value: Any) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return f"{value / 2**30:.1f} GiB"
    return None


def _gpu_phrase(gpu: Mapping[str, Any]) -> str:
    details = [
        part
        for part in (
            _gib(gpu.get("memory_total_bytes")),
            f"sm_{str(gpu['capability']).replace('.', '')}" if gpu.get("capability") else None,
            f"driver {gpu['driver_version']}" if gpu.get("driver_version") else None,
        )
        if part
    ]
    name = str(gpu.get("name") or "unknown GPU")
    return f"{name} ({', '.join(details)})" if details else name


def summary_line(env: Mapping[str, Any]) -> str:
    """One line for headers: ``cpu: AMD EPYC 7B13 (2 cores), torch 2.14.1, no GPU``.

    Tolerates any dict (an older report, a hand-written one): missing facts read "unknown".
    The core count is the one the process may use (affinity, then quota), since that is what
    the measurements saw, with the machine's total when it differs.
    """
    cpu = str(env.get("cpu_model") or "unknown CPU")
    logical = env.get("cpu_logical_cores")
    usable = env.get("cpu_affinity_cores") or logical
    quota = env.get("cpu_quota_cores")
    if isinstance(quota, int | float) and isinstance(usable, int) and quota < usable:
        usable = f"{quota:g}"
    if usable is None:
        cores = "? cores"
    elif logical and str(usable) != str(logical):
        cores = f"{usable} of {logical} cores"
    else:
        cores = f"{usable} cores"
    torch_version = env.get("torch_version")
    torch_part = f"torch {torch_version}" if torch_version else "torch unknown"
    if env.get("torch_cuda_version"):
        torch_part += f" (CUDA {env['torch_cuda_version']})"
    listed = env.get("gpus")  # a list of mappings as written; anything else (a hand-edited report) is no GPU list
    gpus = [gpu for gpu in listed if isinstance(gpu, Mapping)] if isinstance(listed, list) else []
    if gpus:
        phrases = [_gpu_phrase(gpu) for gpu in gpus]
        if len(set(phrases)) == 1:
            gpu_part = f"{len(phrases)}x {phrases[0]}" if len(phrases) > 1 else phrases[0]
        else:
            gpu_part = "; ".join(phrases)
    elif env.get("cuda_device_count"):
        gpu_part = f"{env['cuda_device_count']} GPU(s)"
    else:
        gpu_part = "no GPU"
    return f"cpu: {cpu} ({cores}), {torch_part}, {gpu_part}"
