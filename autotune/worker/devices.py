"""Device backends: one small class per device type, behind one protocol.

Everything that differs between a CPU, an NVIDIA GPU and an Intel GPU lives here, so that the
timing loop, the worker, the variant builders and the boundary search never ask which device
they run on: they ask the backend (:func:`backend_for`) for what they need.

The protocol (:class:`DeviceBackend`):

* ``activate()`` makes ``cuda:N`` / ``xpu:N`` the current device of the process. Without it
  events, side streams, graph capture and capability queries act on device 0 whatever the
  recipe said.
* ``synchronize()`` and ``block_timer()``: the timer uses the device's own events where it has
  them (``torch.Event``), so asynchronous launches are timed on the device clock, and
  ``perf_counter`` on the CPU.
* memory: ``current_memory_bytes``, ``peak_memory_bytes``, ``reset_peak_memory``,
  ``free_memory_bytes`` / ``total_memory_bytes``, ``limit_memory`` (a real allocator cap, so a
  probe under a limit gets the allocator's own out-of-memory error) and ``release_memory``.
* ``capabilities()``: events, graphs, bf16, fp16, tf32, and the batch multiple reduced-precision
  kernels prefer (tensor cores).
* ``graph_call(fn, example)``: a captured graph replayed per call, where the device has graphs.

Out-of-memory classification is one function, :func:`oom_kind`: the exception *type* first
(``torch.OutOfMemoryError``, Python's ``MemoryError``); then, only for a plain ``RuntimeError``
(what TorchScript, frozen modules, AOTInductor and cuBLAS/cuDNN re-raise an allocator failure
as), the allocator's own fixed wording, listed in :data:`OOM_WORDINGS` with where each comes
from. Never "out of memory" anywhere in any message: only these fixed tags.

Backends: :class:`CpuBackend`, :class:`CudaBackend` and :class:`XpuBackend` (Intel GPUs through
``torch.xpu``; same shape as CUDA, no graphs). XPU has not run on hardware yet; its protocol is
tested on CPU against a recording module.

Why one module (~490 lines): one protocol and its backends (CPU, CUDA, XPU) are the single place where
device differences are allowed; splitting the backends apart would scatter it.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from autotune.core.device_names import ALLOWED_TEXT, DEVICE_TYPES, INDEXED_TYPES
from autotune.errors import DeviceUnavailableError, VariantError

CLEAR_REFS = "/proc/self/clear_refs"
PROC_STATUS = "/proc/self/status"

#: Allocator wordings recognised in a plain ``RuntimeError`` (re-raised allocator failures), with
#: where each comes from. Each is a fixed tag of the allocator's message, tested in
#: tests/test_devices.py against the full real message.
OOM_WORDINGS: dict[str, str] = {
    # c10/core/impl/alloc_cpu.cpp: "[enforce fail at alloc_cpu.cpp:N] ... DefaultCPUAllocator: can't allocate memory"
    "cpu_allocator": "DefaultCPUAllocator: can't allocate memory",
    # c10/cuda/CUDACachingAllocator.cpp: "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has ..."
    # (re-raised as RuntimeError by the TorchScript interpreter and by AOTInductor's runner)
    "cuda_caching_allocator": "CUDA out of memory. Tried to allocate",
    # c10/cuda/CUDAException: a cudaMalloc outside the caching allocator (cuBLAS/cuDNN handles, NCCL)
    "cuda_runtime": "CUDA error: out of memory",
    # aten/src/ATen/cuda/CublasHandlePool.cpp / CUDABlas.cpp: cuBLAS could not get its workspace
    "cublas_workspace": "CUBLAS_STATUS_ALLOC_FAILED",
    # aten/src/ATen/cudnn: cuDNN could not allocate its workspace or handle
    "cudnn_workspace": "CUDNN_STATUS_ALLOC_FAILED",
    # c10/xpu/XPUCachingAllocator.cpp: "XPU out of memory. Tried to allocate ..."
    "xpu_caching_allocator": "XPU out of memory",
    # Level Zero through the Unified Runtime (Intel GPUs)
    "xpu_level_zero": "UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
}
#: The TorchScript interpreter's first line when it re-raises an error from inside a graph.
TORCHSCRIPT_RERAISE = "The following operation failed in the TorchScript interpreter"


def oom_kind(exc: BaseException) -> str | None:
    """Which out-of-memory this exception is, or None when it is not one.

    Pseudo-code::

        if type(exc) is torch.OutOfMemoryError (any device) -> "allocator_type"
        if type(exc) is MemoryError                          -> "python"
        if exc is a RuntimeError or torch.jit.Error (TorchScript, AOTInductor, cuBLAS re-raise so):
            for tag in OOM_WORDINGS: if tag's wording in str(exc) -> tag
        -> None

    The kernel's OOM killer is recognised by the runner from the worker's SIGKILL.
    """
    if isinstance(exc, torch.OutOfMemoryError):
        return "allocator_type"
    if isinstance(exc, MemoryError):
        return "python"
    if isinstance(exc, (RuntimeError, torch.jit.Error)):
        text = str(exc)
        for tag, wording in OOM_WORDINGS.items():
            if wording in text:
                return tag
    return None


def oom_reason(exc: BaseException) -> str:
    """One line for an out-of-memory failure that says it was one: ``Type: line``, where the line is the
    allocator's own (the one holding its wording) rather than the message's first.

    Why: the TorchScript interpreter re-raises an allocator failure with a first line of its own ("The following
    operation failed in the TorchScript interpreter.") and the allocator's words several lines down. A frozen MLP's
    confirming probe on an H200 (session 32) was recorded with that first line alone, so its boundary document
    never said the failure was out of memory."""
    text = str(exc).strip().splitlines()
    for line in text:
        if any(wording in line for wording in OOM_WORDINGS.values()):
            return f"{type(exc).__name__}: {line.strip()}"
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def is_oom(exc: BaseException) -> bool:
    """Does this exception mean "out of memory"? (see :func:`oom_kind`)"""
    return oom_kind(exc) is not None


@dataclass(frozen=True)
class MemoryMethod:
    """How peak memory is measured on a device, said in the report."""

    name: str
    description: str


@dataclass(frozen=True)
class Capabilities:
    """What a device can do that changes which variants are worth building."""

    events: bool = False  # device-side timing events
    graphs: bool = False  # graph capture and replay (CUDA graphs)
    bf16: bool = False  # native bf16 arithmetic (emulated does not count)
    fp16: bool = False
    tf32: bool = False  # fp32 matmuls may run in TF32 (the gate's fp32 tolerance widens)
    int4_weight_only: bool = False  # torchao's int4 weight-only kernels (tinygemm: CUDA only)
    #: Batch multiple that reduced-precision kernels run best at (tensor cores), 1 when none.
    reduced_precision_batch_multiple: int = 1


BlockTimer = Callable[[Callable[[], Any], int], float]


class DeviceBackend:
    """The protocol every backend implements; the defaults are those of a host-memory device."""

    type: ClassVar[str] = ""
    #: Forward passes per memory probe (an accelerator may allocate workspaces at the second call).
    probe_calls: ClassVar[int] = 1
    #: Memory of a model on this device is the device's own, not the host's.
    device_memory: ClassVar[bool] = False

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def activate(self) -> None:
        """Make this device the process's current one (a no-op where there is only one)."""

    def synchronize(self) -> None:
        """Wait for every queued operation on the device."""

    def block_timer(self) -> BlockTimer:
        """A function timing ``n`` back-to-back calls, in seconds, with the device's clock."""
        clock = time.perf_counter_ns

        def block(call: Callable[[], Any], n: int) -> float:
            t0 = clock()
            for _ in range(n):
                call()
            return (clock() - t0) / 1e9

        return block

    def memory_method(self) -> MemoryMethod:
        raise NotImplementedError

    def current_memory_bytes(self) -> int:
        raise NotImplementedError

    def peak_memory_bytes(self) -> int:
        raise NotImplementedError

    def reset_peak_memory(self) -> None:
        raise NotImplementedError

    def free_memory_bytes(self) -> int | None:
        """Memory this process could still allocate on the device; None where unknown."""
        return None

    def total_memory_bytes(self) -> int | None:
        return None

    def limit_memory(self, limit_bytes: int | None) -> bool:
        """Cap what the allocator may take (None: no cap); False where the device has no such cap."""
        return False

    def release_memory(self) -> None:
        """Return cached blocks, so the next probe starts from a clean allocator.

        Call it after the exception that caused it is gone (outside the ``except``): a live
        traceback still holds the frames and with them the tensors.
        """
        gc.collect()

    def capabilities(self) -> Capabilities:
        return Capabilities()

    def graph_call(self, fn: Callable[..., Any], example: tuple[Any, ...]) -> Callable[..., Any]:
        raise VariantError(f"graph capture needs a device with graphs (CUDA); this is {self.device}")


class CpuBackend(DeviceBackend):
    """Host memory is the process's resident set (VmRSS / VmHWM, reset through clear_refs)."""

    type = "cpu"

    def memory_method(self) -> MemoryMethod:
        if _can_reset_rss():
            return MemoryMethod("vmhwm", "peak resident set of the worker (VmHWM, reset via /proc/self/clear_refs)")
        return MemoryMethod("ru_maxrss", "peak resident set of the worker since it started (ru_maxrss; not resettable)")

    def current_memory_bytes(self) -> int:
        return _status_field_bytes("VmRSS")

    def peak_memory_bytes(self) -> int:
        try:
            return _status_field_bytes("VmHWM")
        except OSError:
            import resource

            return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def reset_peak_memory(self) -> None:
        if _can_reset_rss():
            # Writing 5 resets the "high water mark" (VmHWM) to the current RSS (Linux >= 4.0).
            with open(CLEAR_REFS, "w") as fh:
                fh.write("5")

    def free_memory_bytes(self) -> int | None:
        return available_host_memory_bytes()

    def capabilities(self) -> Capabilities:
        return Capabilities(bf16=cpu_native_precision("bf16") is True, fp16=cpu_native_precision("fp16") is True)


def cpu_capabilities() -> Mapping[str, Any] | None:
    """The CPU's x86 features as CPUID reports them to this process (``torch.cpu.get_capabilities``), or None when
    torch cannot say or the report is not an x86 one.

    CPUID, not ``/proc/cpuinfo``: the kernels (oneDNN, MLAS) pick their code by CPUID, and under an emulator or a
    hypervisor that masks features the two can differ."""
    get_caps = getattr(torch.cpu, "get_capabilities", None)
    if get_caps is None:
        return None
    try:
        caps = get_caps()
    except Exception:
        return None
    if not isinstance(caps, Mapping) or "avx2" not in caps:  # torch 2.14 returns a mappingproxy
        return None  # not an x86 capability report
    return caps


def cpu_native_precision(precision: str) -> bool | None:
    """Whether this CPU does the precision's arithmetic natively; ``None`` when torch cannot tell.

    Read from ``torch.cpu.get_capabilities()`` (x86 only): bf16 needs AVX512_BF16 or AMX_BF16, fp16
    AVX512_FP16 or AMX_FP16. fp32 (or any precision without a reduced dtype) is always native.
    """
    reduced = {"bf16": "bf16", "autocast-bf16": "bf16", "fp16": "fp16", "autocast-fp16": "fp16"}.get(precision)
    if reduced is None:
        return True
    caps = cpu_capabilities()
    if caps is None:
        return None
    if reduced == "bf16":
        return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))
    return bool(caps.get("avx512_fp16") or caps.get("amx_fp16"))


class AcceleratorBackend(DeviceBackend):
    """A device with its own caching allocator and events, driven through a torch device module.

    CUDA (``torch.cuda``) and XPU (``torch.xpu``) expose the same functions; the module is an
    argument so the protocol can be tested on a machine without either (a recording module).
    """

    probe_calls = 2  # the second call may allocate workspaces (cuDNN autotuning) the first did not
    device_memory = True

    def __init__(self, device: torch.device, module: Any | None = None) -> None:
        super().__init__(device)
        self.module = module if module is not None else getattr(torch, self.type)

    def activate(self) -> None:
        if self.device.index is not None:
            self.module.set_device(self.device.index)

    def synchronize(self) -> None:
        self.module.synchronize(self.device)

    def _event(self) -> Any:
        if hasattr(torch, "Event") and self.module is getattr(torch, self.type, None):
            return torch.Event(device=self.device, enable_timing=True)
        return self.module.Event(enable_timing=True)

    def block_timer(self) -> BlockTimer:
        start, end = self._event(), self._event()

        def block(call: Callable[[], Any], n: int) -> float:
            start.record()
            for _ in range(n):
                call()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3

        return block

    # Memory is read as the caching allocator's *reserved* bytes, not its allocated ones: an allocator cap
    # (set_per_process_memory_fraction) and the device's own capacity both bound what is reserved, so that is the
    # line a boundary lies on. Read as allocated (until session 32), generate()'s model put GPT-2's boundary near
    # 133 sequences while the cap failed at 113, and five probes in between failed first (BENCHMARKS, session 30).
    # Reserved is also what the process holds from the device, which other processes cannot use.

    def memory_method(self) -> MemoryMethod:
        return MemoryMethod(f"{self.type}_max_reserved",
                            f"torch.{self.type}.max_memory_reserved (the caching allocator's reserved peak: what an "
                            "allocator cap and the device's capacity bound)")

    def current_memory_bytes(self) -> int:
        return int(self.module.memory_reserved(self.device))

    def peak_memory_bytes(self) -> int:
        return int(self.module.max_memory_reserved(self.device))

    def reset_peak_memory(self) -> None:
        self.module.reset_peak_memory_stats(self.device)

    def free_memory_bytes(self) -> int | None:
        free, _total = self.module.mem_get_info(self.device)
        return int(free)

    def total_memory_bytes(self) -> int | None:
        _free, total = self.module.mem_get_info(self.device)
        return int(total)

    def limit_memory(self, limit_bytes: int | None) -> bool:
        setter = getattr(self.module, "set_per_process_memory_fraction", None)
        total = self.total_memory_bytes()
        if setter is None or not total:
            return False
        fraction = 1.0 if limit_bytes is None else min(1.0, max(0.0, limit_bytes / total))
        setter(fraction, self._index())  # it wants an index: a bare "cuda" is refused
        return True

    def _index(self) -> int:
        return self.device.index if self.device.index is not None else int(self.module.current_device())

    def release_memory(self) -> None:
        gc.collect()
        self.module.synchronize(self.device)
        self.module.empty_cache()


class CudaBackend(AcceleratorBackend):
    type = "cuda"

    def capabilities(self) -> Capabilities:
        try:
            bf16 = bool(self.module.is_bf16_supported(including_emulation=False))
        except TypeError:
            bf16 = bool(self.module.is_bf16_supported())
        major, _minor = self.module.get_device_capability(self.device)
        tf32 = bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)
        return Capabilities(events=True, graphs=True, bf16=bf16, fp16=True, tf32=tf32 and major >= 8,
                            reduced_precision_batch_multiple=8 if major >= 7 else 1, int4_weight_only=True)

    def graph_call(self, fn: Callable[..., Any], example: tuple[Any, ...]) -> Callable[..., Any]:
        return _CudaGraphCall(fn, example, module=self.module)


class XpuBackend(AcceleratorBackend):
    """Intel GPUs (``torch.xpu``, torch >= 2.8). Not yet run on hardware: see the README."""

    type = "xpu"

    def capabilities(self) -> Capabilities:
        is_bf16 = getattr(self.module, "is_bf16_supported", None)
        bf16 = bool(is_bf16()) if is_bf16 is not None else False
        return Capabilities(events=True, graphs=False, bf16=bf16, fp16=True, reduced_precision_batch_multiple=8)


#: The backend of each device type; :data:`autotune.core.device_names.DEVICE_TYPES` lists the same.
BACKENDS: dict[str, type[DeviceBackend]] = {"cpu": CpuBackend, "cuda": CudaBackend, "xpu": XpuBackend}
assert tuple(BACKENDS) == DEVICE_TYPES


def backend_for(device: torch.device | str, *, module: Any | None = None) -> DeviceBackend:
    """The backend that acts on ``device`` (``module`` replaces torch.cuda / torch.xpu in tests)."""
    dev = torch.device(device) if isinstance(device, str) else device
    cls = BACKENDS.get(dev.type)
    if cls is None:
        raise DeviceUnavailableError(f"device type '{dev.type}' is not supported; allowed: {ALLOWED_TEXT}")
    if issubclass(cls, AcceleratorBackend):
        return cls(dev, module)
    return cls(dev)


def _device_module(kind: str) -> Any | None:
    return getattr(torch, kind, None)


def _is_available(kind: str) -> bool:
    module = _device_module(kind)
    try:
        return bool(module is not None and module.is_available())
    except Exception:  # a broken driver install says "not available", not a traceback
        return False


def resolve_device(name: str, *, field: str = "device") -> torch.device:
    """``auto`` → the first accelerator present (cuda, then xpu), else cpu; a missing one is an input error."""
    if name == "auto":
        for kind in INDEXED_TYPES:
            if _is_available(kind):
                return torch.device(kind)
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise DeviceUnavailableError(f"{field}: '{name}' is not a device; allowed: {ALLOWED_TEXT}") from None
    if dev.type not in BACKENDS:
        raise DeviceUnavailableError(f"{field}: device type '{dev.type}' is not supported; allowed: {ALLOWED_TEXT}")
    if dev.type in INDEXED_TYPES:
        if not _is_available(dev.type):
            version = getattr(torch.version, dev.type, None)
            built = f", built for {dev.type.upper()} {version}" if version else ""
            raise DeviceUnavailableError(
                f"{field}: '{name}' requested but this machine has no usable {dev.type.upper()} device "
                f"(torch {torch.__version__}{built}); use device = \"cpu\" or \"auto\""
            )
        module = _device_module(dev.type)
        assert module is not None  # _is_available said it is there
        count = int(module.device_count())
        if dev.index is not None and dev.index >= count:
            raise DeviceUnavailableError(
                f"{field}: '{name}' requested but only {count} {dev.type.upper()} device(s) exist "
                f"({dev.type}:0..{dev.type}:{count - 1})"
            )
    return dev


def _can_reset_rss() -> bool:
    return os.path.exists(CLEAR_REFS) and os.access(CLEAR_REFS, os.W_OK)


def _status_field_bytes(name: str) -> int:
    with open(PROC_STATUS) as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"{name} not in {PROC_STATUS}")


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


class _CudaGraphCall:
    """Explicit CUDA graph: capture once on static input buffers, then copy-in + replay.

    The returned outputs are the graph's static buffers and are overwritten by the next call
    (the usual serving pattern; callers that keep an output must clone it).
    """

    def __init__(self, inner: Callable[..., Any], example: tuple[Any, ...], *, module: Any, warmup: int = 3) -> None:
        # The graph replays raw pointers to the weights: whatever holds them must live as long as it does.
        # (Without this reference an eager module was freed once the build returned, and replays read
        # freed memory: NaN and wrong outputs on an H100.)
        self._inner = inner
        self._static = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in example)
        self._shapes = tuple(
            (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in example
        )
        stream = module.Stream()
        stream.wait_stream(module.current_stream())
        with module.stream(stream):
            for _ in range(warmup):
                inner(*self._static)
        module.current_stream().wait_stream(stream)
        module.synchronize()
        self._graph = module.CUDAGraph()
        with module.graph(self._graph):
            self._out = inner(*self._static)
        module.synchronize()

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self._static):
            raise VariantError(
                f"cudagraphs variant captured with {len(self._static)} inputs, got {len(args)}"
            )
        for dst, src, sig in zip(self._static, args, self._shapes, strict=True):
            if isinstance(dst, torch.Tensor):
                assert sig is not None  # recorded for every tensor input
                if (tuple(src.shape), src.dtype) != sig:
                    raise VariantError(
                        f"cudagraphs variant captured for input {sig[0]} {sig[1]}, got {tuple(src.shape)} "
                        f"{src.dtype}: build it again for this batch size"
                    )
                dst.copy_(src)
        self._graph.replay()
        return self._out


__all__ = [
    "BACKENDS", "OOM_WORDINGS", "AcceleratorBackend", "Capabilities", "CpuBackend", "CudaBackend",
    "DeviceBackend", "MemoryMethod", "XpuBackend", "available_host_memory_bytes", "backend_for",
    "is_oom", "oom_kind", "resolve_device",
]
