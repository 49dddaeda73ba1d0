"""Was anything else running while we timed? CPU time the measured process did not use itself.

Why: on a shared machine a neighbour that spins on one core does not just take that core. With
torch's two OpenMP threads on a 2-core machine, every parallel region then waits for the thread
that was descheduled: calls measured 13 ms quiet took 50-550 ms in rounds a neighbour overlapped.
No statistic over the timings alone can tell such a round from a slow variant, but the kernel can:
``/proc/stat`` counts the busy CPU time of the whole machine (including ``steal``, the time a
hypervisor gave to other guests), and ``time.process_time`` the time of this process. The
difference over a timing window is what others used.

    window = CpuWindow.start()
    ... time the candidate ...
    load = window.stop()            # wall, own cpu, machine busy (None where /proc/stat is absent)
    load.foreign_cores              # others' cpu seconds per wall second: 0 quiet, ~1 a spinning core

numpy-free and torch-free: the worker and the parent both import it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

PROC_STAT = "/proc/stat"
#: Foreign CPU (cores' worth, averaged over the window) above which a timing window counts as disturbed:
#: a tenth of a core, far above the kernel's and the tuner's own housekeeping, far below a busy neighbour.
DISTURBED_CORES = 0.1
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_seconds() -> float | None:
    """Busy CPU seconds of all cores since boot (user+nice+system+irq+softirq+steal), or None."""
    try:
        with open(PROC_STAT) as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None
    values = [int(v) for v in fields[1:]]
    busy = values[0] + values[1] + values[2] + values[5] + values[6] + (values[7] if len(values) > 7 else 0)
    return busy / _TICK


@dataclass(frozen=True)
class CpuLoad:
    """CPU use over one timing window."""

    wall_seconds: float
    own_cpu_seconds: float
    machine_busy_seconds: float | None

    @property
    def foreign_cores(self) -> float | None:
        """Other processes' (and guests') CPU seconds per wall second; None where unknown."""
        if self.machine_busy_seconds is None or self.wall_seconds <= 0:
            return None
        return max(0.0, self.machine_busy_seconds - self.own_cpu_seconds) / self.wall_seconds

    @property
    def disturbed(self) -> bool:
        foreign = self.foreign_cores
        return foreign is not None and foreign > DISTURBED_CORES

    def to_dict(self) -> dict[str, Any]:
        return {"wall_seconds": self.wall_seconds, "own_cpu_seconds": self.own_cpu_seconds,
                "machine_busy_seconds": self.machine_busy_seconds, "foreign_cores": self.foreign_cores,
                "disturbed": self.disturbed}


@dataclass(frozen=True)
class CpuWindow:
    """Start of a window; :meth:`stop` gives the :class:`CpuLoad` since."""

    wall: float
    own: float
    machine: float | None

    @classmethod
    def start(cls) -> CpuWindow:
        return cls(time.perf_counter(), time.process_time(), machine_busy_seconds())

    def stop(self) -> CpuLoad:
        machine = machine_busy_seconds()
        busy = None if machine is None or self.machine is None else machine - self.machine
        return CpuLoad(wall_seconds=time.perf_counter() - self.wall, own_cpu_seconds=time.process_time() - self.own,
                       machine_busy_seconds=busy)
