"""Dynamo's process-wide state as a reused worker sees it: graphs compiled, graph breaks, and a reset
between candidates."""

from __future__ import annotations

import sys


def recompile_count() -> int:
    """Graphs dynamo has compiled in this process (``counters["stats"]["unique_graphs"]``).

    Dynamo has no counter named "recompiles"; every compiled graph (first compile, recompile after a
    guard failure, or a graph after a graph break) increments ``unique_graphs``. Read it before and
    after a steady-state measurement: any increase there is a recompilation. 0 if dynamo was never
    imported (it is not imported here just to answer).
    """
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def graph_break_count() -> int:
    """Graph breaks dynamo has recorded in this process (sum over reasons); 0 if dynamo is unused."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


def reset_compiler_state() -> None:
    """Forget compiled code between candidates in a reused worker: ``torch._dynamo.reset()`` (code
    caches, guards, CUDA graph trees) and dynamo's counters. Cheap no-op if dynamo was never used.

    Counters are cleared too so a long-lived worker's numbers stay per-candidate; callers still
    compare before/after values rather than absolute ones.
    """
    if "torch._dynamo" not in sys.modules:
        return
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
