"""Device names a recipe or ``--device`` may give, checked without importing torch.

The parent process (CLI, recipe loading, the tuner) never imports torch, so the grammar of a
device name lives here and the backends that act on devices live in :mod:`autotune.worker.devices`,
which only the worker imports. :data:`DEVICE_TYPES` is the list of backends there.
"""

from __future__ import annotations

#: Device types a backend exists for (see ``autotune.worker.devices.BACKENDS``).
DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda", "xpu")
#: Device types with an index (``cuda:1``, ``xpu:0``): the accelerators.
INDEXED_TYPES: tuple[str, ...] = ("cuda", "xpu")
ALLOWED_TEXT = "auto, cpu, cuda, cuda:N, xpu, xpu:N"


def is_device_name(name: str) -> bool:
    """``auto``, a device type, or an accelerator type with an index (``cuda:1``)."""
    if name == "auto" or name in DEVICE_TYPES:
        return True
    kind, sep, index = name.partition(":")
    return bool(sep) and kind in INDEXED_TYPES and index.isdigit()


def device_type(name: str) -> str:
    """``cuda:1`` → ``cuda``; ``cpu`` → ``cpu`` (the backend a resolved name dispatches to)."""
    return str(name).split(":", 1)[0].strip().lower()


def is_accelerator(name: str) -> bool:
    """An accelerator (own memory, asynchronous launches, events), not the host CPU."""
    return device_type(name) in INDEXED_TYPES


def cuda_index(name: str) -> int | None:
    """The CUDA device's index (``cuda`` → 0, ``cuda:1`` → 1); None for any other device. For the servers whose
    configuration names NVIDIA GPUs by index (Triton's ``KIND_GPU`` instance groups, TorchServe's GPU count)."""
    kind, _, index = str(name).strip().lower().partition(":")
    if kind != INDEXED_TYPES[0]:
        return None
    return int(index) if index.isdigit() else 0
