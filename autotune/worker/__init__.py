"""The worker: a child process that builds, checks and measures one candidate at a time.

Why a separate process (pyperf's runner/worker split): a candidate can segfault inside a
compiler, call ``os._exit``, hang, or be killed by the kernel's OOM killer; none of that may
take the tuner down or lose what was measured. The parent (:mod:`autotune.runner`) spawns
``python -m autotune.worker`` (a fresh interpreter, never a fork of a process that already
initialised torch) and talks JSON lines over a private pipe.

Everything that runs in a worker, and imports torch, lives in this package; the parent never imports it
(it talks to workers through :mod:`autotune.client` over :mod:`autotune.core.protocol`). The modules:

* the process: :mod:`~autotune.worker.serve` (the main loop; ``__main__`` runs it), :mod:`~autotune.worker.ops`
  (the ops), :mod:`~autotune.worker.state` (what a worker keeps between requests);
* the model and its batches: :mod:`~autotune.worker.factory` (resolving ``module:function``),
  :mod:`~autotune.worker.model` (building the model from the recipe), :mod:`~autotune.worker.traffic` (the
  batches a candidate is gated and timed on), :mod:`~autotune.worker.devices` (device backends, OOM);
* the candidates: :mod:`~autotune.worker.variants` (expanding, checking and building variants, the runtimes),
  :mod:`~autotune.worker.correctness` and :mod:`~autotune.worker.detections` (the gate against eager fp32),
  :mod:`~autotune.worker.accuracy` and :mod:`~autotune.worker.metric` (the accuracy budget of lower precisions,
  the user's metric), :mod:`~autotune.worker.model_size` (a variant's model size),
  :mod:`~autotune.worker.timing` (the timing loop), :mod:`~autotune.worker.artifact` and
  :mod:`~autotune.worker.profiling` (the saved artifact and its operator tables),
  :mod:`~autotune.worker.torch_facts` (what torch says about the machine, for the report).

Importing the package imports no torch: the names below are re-exported lazily (PEP 562), so
``python -m autotune.worker`` parses its arguments first and ``from autotune.worker import op_measure``
still works in a process that wants the ops.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as mypy sees them
    from autotune.core.protocol import ROLE_OPS  # noqa: F401
    from autotune.worker.ops import (  # noqa: F401
        BUILD_SEED,
        GATE_BATCHES,
        GATE_SEED,
        IMPORT_SECONDS,
        OPS,
        TOOL_IMPORT_BYTES,
        _guarded,
        _with_threads,
        op_device_memory,
        op_hello,
        op_measure,
        op_parse_variant,
        op_probe,
        op_slice,
        op_stage,
        op_validate,
    )
    from autotune.worker.serve import (  # noqa: F401
        M_MMAP_THRESHOLD,
        MMAP_THRESHOLD_BYTES,
        _pin_mmap_threshold,
        handle,
        main,
    )
    from autotune.worker.state import (  # noqa: F401
        LoadedWorkload,
        ProbeMaster,
        Staged,
        WorkerState,
        _trim_heap,
    )

#: Where each re-exported name lives.
_HOMES = {
    **dict.fromkeys(
        ("BUILD_SEED", "GATE_BATCHES", "GATE_SEED", "IMPORT_SECONDS", "OPS", "TOOL_IMPORT_BYTES", "_guarded",
         "_with_threads", "op_device_memory", "op_hello", "op_measure", "op_parse_variant", "op_probe",
         "op_slice", "op_stage", "op_validate"), "autotune.worker.ops"),
    "ROLE_OPS": "autotune.core.protocol",
    **dict.fromkeys(("M_MMAP_THRESHOLD", "MMAP_THRESHOLD_BYTES", "_pin_mmap_threshold", "handle", "main"),
                    "autotune.worker.serve"),
    **dict.fromkeys(("LoadedWorkload", "ProbeMaster", "Staged", "WorkerState", "_trim_heap"), "autotune.worker.state"),
}

__all__ = [name for name in _HOMES if not name.startswith("_")]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'autotune.worker' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
