"""Device backends on CPU: OOM classification by type and by each documented allocator wording,
the accelerator protocol against a recording device module (what CUDA and XPU backends call),
dispatch of every device type, and no device-type checks outside the backends."""

from __future__ import annotations

import re
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.core.device_names import is_device_name
from autotune.errors import DeviceUnavailableError
from autotune.worker import devices
from autotune.worker.devices import (
    OOM_WORDINGS,
    AcceleratorBackend,
    CpuBackend,
    CudaBackend,
    XpuBackend,
    backend_for,
    is_oom,
    oom_kind,
)

ROOT = Path(__file__).resolve().parents[1]

# Full messages as the allocators word them (tests/data/oom-messages.json holds the ones captured
# on a real GPU; these are the documented forms, one per wording).
CUDA_CACHING = ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
                "1.06 GiB is free. Of the allocated memory 76.50 GiB is allocated by PyTorch")
TORCHSCRIPT_CUDA = ("The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript "
                    "(most recent call last):\n  File \"model.py\", line 5, in forward\n    return torch.empty(n)\n"
                    "RuntimeError: " + CUDA_CACHING + "\n")
CUBLAS = ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
CUDNN = "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"
CUDA_RUNTIME = "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call"
XPU = "XPU out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.11 GiB total capacity)"
LEVEL_ZERO = "level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)"


def test_real_cpu_allocator_failure_is_oom() -> None:
    with pytest.raises(RuntimeError) as info:
        torch.empty(2**50)
    assert type(info.value) is RuntimeError
    assert oom_kind(info.value) == "cpu_allocator"


@torch.jit.script
def _scripted_alloc(n: int) -> torch.Tensor:
    return torch.empty(n) + 1


def test_real_torchscript_reraise_of_an_allocator_failure_is_oom() -> None:
    with pytest.raises(RuntimeError) as info:
        _scripted_alloc(2**50)
    assert devices.TORCHSCRIPT_RERAISE in str(info.value)
    assert oom_kind(info.value) == "cpu_allocator"
    # the probe's recorded reason is the allocator's line, not the interpreter's first one
    reason = devices.oom_reason(info.value)
    assert devices.TORCHSCRIPT_RERAISE not in reason and "DefaultCPUAllocator: can't allocate memory" in reason


def test_an_oom_reason_names_the_allocator_whatever_line_it_is_on() -> None:
    assert "CUDA out of memory. Tried to allocate 20.00 GiB" in devices.oom_reason(RuntimeError(TORCHSCRIPT_CUDA))
    assert devices.oom_reason(RuntimeError(CUBLAS)).startswith("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED")
    assert devices.oom_reason(MemoryError()) == "MemoryError"
    assert devices.oom_reason(ValueError("a\nb")) == "ValueError: a"


@pytest.mark.parametrize(("message", "kind"), [
    (CUDA_CACHING, "cuda_caching_allocator"),
    (TORCHSCRIPT_CUDA, "cuda_caching_allocator"),
    (CUBLAS, "cublas_workspace"),
    (CUDNN, "cudnn_workspace"),
    (CUDA_RUNTIME, "cuda_runtime"),
    (XPU, "xpu_caching_allocator"),
    (LEVEL_ZERO, "xpu_level_zero"),
])
def test_each_documented_wording_in_a_plain_runtime_error(message: str, kind: str) -> None:
    assert oom_kind(RuntimeError(message)) == kind
    assert oom_kind(torch.jit.Error(message)) == kind  # TorchScript's own subclass of RuntimeError


def test_captured_gpu_messages_are_classified() -> None:
    """Messages captured on a real GPU (tests/data/oom-messages.json) keep being recognised."""
    import json

    path = ROOT / "tests" / "data" / "oom-messages.json"
    if not path.exists():
        pytest.skip("no GPU capture yet")
    captured = json.loads(path.read_text())
    assert captured
    for case in captured:
        exc_type = {"RuntimeError": RuntimeError, "OutOfMemoryError": torch.OutOfMemoryError}.get(
            case["type"], RuntimeError)
        assert is_oom(exc_type(case["message"])), case["what"]


def test_type_decides_before_wording() -> None:
    assert oom_kind(torch.OutOfMemoryError("anything")) == "allocator_type"
    assert oom_kind(MemoryError()) == "python"
    # the wording is trusted only in a RuntimeError; never "out of memory" in any message
    assert oom_kind(ValueError(CUDA_CACHING)) is None
    assert oom_kind(RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")) is None
    assert oom_kind(RuntimeError("the model ran out of memory budget for tokens")) is None
    assert set(OOM_WORDINGS) >= {"cpu_allocator", "cuda_caching_allocator", "cublas_workspace"}


# --------------------------------------------------------------------------------------------------
# The accelerator protocol against a recording module (what torch.cuda / torch.xpu would be asked)
# --------------------------------------------------------------------------------------------------


class _Event:
    def __init__(self, log: list[tuple[Any, ...]], clock: list[float], enable_timing: bool = False) -> None:
        assert enable_timing
        self.log, self.clock, self.at = log, clock, 0.0

    def record(self) -> None:
        self.log.append(("record",))
        self.at = self.clock[0]

    def synchronize(self) -> None:
        self.log.append(("event_synchronize",))

    def elapsed_time(self, end: _Event) -> float:
        return (end.at - self.at) * 1e3  # milliseconds, as torch's events


class RecordingModule:
    """Stands in for torch.cuda / torch.xpu: records every call, answers with fixed numbers."""

    GIB = 1024**3

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.clock = [0.0]

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.log.append((name, *args))
            return {"memory_reserved": 3, "max_memory_reserved": 7, "current_device": 0,
                    "mem_get_info": (6 * self.GIB, 8 * self.GIB)}.get(name)

        return call

    def Event(self, enable_timing: bool = False) -> _Event:
        return _Event(self.log, self.clock, enable_timing)


@pytest.mark.parametrize("kind", ["cuda", "xpu"], ids=["nvidia-backend", "intel-backend"])  # "cuda" is a marker
def test_accelerator_protocol_calls_the_device_module_for_device_n(kind: str) -> None:
    module = RecordingModule()
    backend = backend_for(f"{kind}:1", module=module)
    assert isinstance(backend, CudaBackend if kind == "cuda" else XpuBackend)
    dev = torch.device(f"{kind}:1")

    backend.activate()
    backend.synchronize()
    assert backend.current_memory_bytes() == 3 and backend.peak_memory_bytes() == 7
    backend.reset_peak_memory()
    assert backend.free_memory_bytes() == 6 * RecordingModule.GIB
    assert backend.total_memory_bytes() == 8 * RecordingModule.GIB
    assert backend.limit_memory(2 * RecordingModule.GIB) is True
    backend.release_memory()
    names = [entry[0] for entry in module.log]
    assert module.log[0] == ("set_device", 1)  # cuda:N acts on N, not on device 0
    assert ("synchronize", dev) in module.log
    # reserved, not allocated: what an allocator cap and the device's capacity bound
    assert ("memory_reserved", dev) in module.log and ("max_memory_reserved", dev) in module.log
    assert ("reset_peak_memory_stats", dev) in module.log
    assert ("set_per_process_memory_fraction", 0.25, 1) in module.log
    assert names[-2:] == ["synchronize", "empty_cache"]
    assert backend.memory_method().name == f"{kind}_max_reserved"
    assert backend.probe_calls == 2 and backend.device_memory


def test_accelerator_timer_reads_events_not_the_host_clock() -> None:
    module = RecordingModule()
    backend = backend_for("cuda:0", module=module)
    timer = backend.block_timer()

    def call() -> None:
        module.clock[0] += 0.25  # the device's clock advances; the host's is never read

    assert timer(call, 4) == pytest.approx(1.0)
    names = [entry[0] for entry in module.log]
    assert names == ["record", "record", "event_synchronize"]


def test_limit_none_lifts_the_cap() -> None:
    module = RecordingModule()
    backend = backend_for("xpu", module=module)
    backend.limit_memory(None)
    assert ("set_per_process_memory_fraction", 1.0, 0) in module.log  # the current device's index


def test_cpu_backend_reads_the_resident_set() -> None:
    backend = backend_for("cpu")
    assert isinstance(backend, CpuBackend) and not backend.device_memory and backend.probe_calls == 1
    backend.reset_peak_memory()
    before = backend.current_memory_bytes()
    x = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
    assert backend.peak_memory_bytes() >= before + 60 * 1024 * 1024
    del x
    assert backend.free_memory_bytes() is not None
    with pytest.raises(Exception, match="graph capture needs"):
        backend.graph_call(lambda x: x, (torch.ones(1),))
    assert backend.capabilities().graphs is False


def test_dispatch_and_resolution() -> None:
    assert set(devices.BACKENDS) == {"cpu", "cuda", "xpu"}
    assert isinstance(backend_for(torch.device("xpu:0"), module=RecordingModule()), XpuBackend)
    assert all(is_device_name(n) for n in ("auto", "cpu", "cuda", "cuda:1", "xpu", "xpu:3"))
    assert not any(is_device_name(n) for n in ("gpu", "cpu:0", "xpu:x", "mps"))
    if not torch.xpu.is_available():
        with pytest.raises(DeviceUnavailableError, match="no usable XPU device"):
            devices.resolve_device("xpu")
    with pytest.raises(DeviceUnavailableError, match="not supported"):
        devices.resolve_device("mps")
    assert devices.resolve_device("cpu").type == "cpu"


def test_cache_is_emptied_after_the_exception_is_released() -> None:
    """The worker's OOM path frees the failed call's tensors before emptying the cache."""
    from autotune.worker import _guarded

    seen: dict[str, Any] = {}

    class Recording(AcceleratorBackend):
        type = "cuda"

        def release_memory(self) -> None:
            seen["exc_info"] = sys.exc_info()
            seen["alive"] = ref() is not None

    holder = [torch.ones(1000)]
    ref = weakref.ref(holder[0])

    def body() -> dict[str, Any]:
        local = holder.pop()  # noqa: F841 (held by this frame, and by the traceback while it lives)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 byte")

    out = _guarded(Recording(torch.device("cuda"), RecordingModule()), body)
    assert out["status"] == "oom" and out["oom_kind"] == "allocator_type"
    assert seen["exc_info"] == (None, None, None)
    assert seen["alive"] is False


def test_no_device_type_checks_outside_the_backends() -> None:
    """Only autotune/worker/devices.py (and the name grammar) may ask whether a device is CUDA.

    One exception, by name: autotune/worker/variants/runtimes.py maps a torch device onto ONNX Runtime's
    CUDAExecutionProvider and IOBinding, whose API names the device "cuda" (ORT's vocabulary: there is
    no provider for other accelerators to dispatch to)."""
    pattern = re.compile(r"""(==|!=)\s*["']cuda["']|startswith\(\s*["']cuda|in\s*\(\s*["']cpu["'],\s*["']cuda["']""")
    offenders = []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        if path.name in ("devices.py", "device_names.py", "runtimes.py") or path.parent.name == "report":
            continue  # report/reproduce.py writes user code; it checks nothing itself
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert offenders == []


def test_cli_names_a_missing_accelerator_and_an_unknown_device_type(tmp_path: Path) -> None:
    from tests.support import run_cli

    if torch.xpu.is_available():
        pytest.skip("this machine has an XPU")
    code, _, err = run_cli("measure", "recipes/quickstart.toml", "--variant", "eager", "--batch-size", "1",
                           "--device", "xpu:1")
    assert code == 2 and "Traceback" not in err
    assert "'xpu:1' requested but this machine has no usable XPU device" in err
    code, _, err = run_cli("run", "recipes/quickstart.toml", "--device", "npu", "--out", str(tmp_path / "o"))
    assert code == 2 and "allowed: auto, cpu, cuda, cuda:N, xpu, xpu:N" in err
