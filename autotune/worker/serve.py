"""A worker's main loop: read requests from stdin, dispatch them to the ops, answer on the protocol pipe.

The protocol pipe is a duplicate of the original stdout; file descriptor 1 is then pointed at
stderr, so a model that prints cannot corrupt the protocol. ``python -m autotune.worker`` runs
:func:`main`.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback
from typing import Any

from autotune.core.process_env import ENVIRONMENT_OPS, check_worker_environment
from autotune.core.protocol import ROLE_OPS, Response
from autotune.core.variant_names import VariantSpec
from autotune.errors import AutotuneError, InputError
from autotune.worker.lifeline import Lifeline
from autotune.worker.model import one_line
from autotune.worker.ops import OPS
from autotune.worker.state import WorkerState


def handle(state: WorkerState, req: dict[str, Any]) -> Response:
    rid = req.get("id")
    name = req.get("op")
    if name not in OPS or name not in ROLE_OPS[state.role]:
        what = "unknown op" if name not in OPS else f"a {state.role} worker does not serve op"
        return {"id": rid, "ok": False, "error": {"type": "ProtocolError", "message": f"{what} {name!r}",
                                                  "input_error": False}}
    op = OPS[name]
    try:
        if name in ENVIRONMENT_OPS and isinstance(req.get("variant"), str):
            # never time (or build the artifact of) a candidate in a process environment it does not name
            check_worker_environment(VariantSpec.parse(req["variant"]).environment)
        return {"id": rid, "ok": True, "result": op(state, req)}
    except AutotuneError as exc:
        return {"id": rid, "ok": False,
                "error": {"type": type(exc).__name__, "message": str(exc), "input_error": isinstance(exc, InputError)}}
    except Exception as exc:
        tb = traceback.format_exc(limit=6)
        return {"id": rid, "ok": False,
                "error": {"type": type(exc).__name__, "message": one_line(exc), "input_error": False,
                          "traceback": tb[-2000:]}}


#: glibc's M_MMAP_THRESHOLD. Pinning it keeps large blocks in mmap, so a freed batch's memory goes back
#: to the OS and the next probe's peak RSS is its own: without it glibc raises the threshold after
#: large frees and a reused worker measured up to 40 MB more than a fresh process at the same batch.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def _pin_mmap_threshold() -> None:
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None, *, lifeline: Lifeline | None = None) -> int:
    """Serve requests; ``--role probe`` pins the allocator for memory probes (never for timing).

    ``lifeline`` (tied by ``__main__`` before torch was imported) brackets each request with the deadline the
    parent sent in its ``timeout_s`` field, so a request that hangs ends the worker even when the parent cannot.

    The pin disables glibc's dynamic mmap threshold for the life of the process (it cannot be
    undone), so every large free is an munmap and every large allocation a fresh page-faulting
    mmap: measured, it made eager resnet18 1.8-2.3x slower than a plain process. A ``measure``
    worker therefore leaves the allocator as a deployment process has it.
    """
    args = sys.argv[1:] if argv is None else argv
    role = args[args.index("--role") + 1] if "--role" in args else "measure"
    if role not in ROLE_OPS:
        raise SystemExit(f"autotune.worker: --role must be one of {sorted(ROLE_OPS)}, got {role!r}")
    if role == "probe":
        _pin_mmap_threshold()
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # anything the model prints goes to stderr, never into the protocol
    state = WorkerState(role="probe" if role == "probe" else "measure")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        if lifeline is not None:
            lifeline.begin(req.get("timeout_s"), what=f"{req.get('id')} ({req.get('op')})")
        resp = handle(state, req)
        if lifeline is not None:
            lifeline.end()
        proto.write(json.dumps(resp) + "\n")
        proto.flush()
    return 0
