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

What disturbed a window, when the kernel can say: :func:`process_ticks` reads every process's CPU ticks from
``/proc/PID/stat``, and :func:`top_consumers` names the ones that used the most between two readings (by their
kernel name, ``comm``, and pid: never the command line, which may hold a password).

numpy-free and torch-free: the worker and the parent both import it, and the artifact check's plain process runs the
source of its readers (:data:`autotune.core.artifact_child.CONTENTION`), so those need only the standard library and no
postponed annotations.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Self

PROC_STAT = "/proc/stat"
PROC = "/proc"
#: A process named as a window's consumer used at least this many cores' worth over it (top 3 at most).
CONSUMER_CORES = 0.05
#: Foreign CPU (cores' worth, averaged over the window) above which a timing window counts as disturbed:
#: a tenth of a core, far above the kernel's and the tuner's own housekeeping, far below a busy neighbour.
DISTURBED_CORES = 0.1
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy(foreign_cores: object) -> bool:
    """Whether a window's foreign CPU (cores' worth, as a CpuLoad or a report holds it) marks it disturbed: a number
    above DISTURBED_CORES. Unknown (None) or not a number (a hand-edited report's ``true``): not disturbed."""
    return (isinstance(foreign_cores, int | float) and not isinstance(foreign_cores, bool)
            and foreign_cores > DISTURBED_CORES)


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
        return busy(self.foreign_cores)

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
    def start(cls) -> Self:  # (Self, not the class's name: the plain process runs this source without postponed
        # annotations, autotune.core.artifact_child.CONTENTION)
        return cls(time.perf_counter(), time.process_time(), machine_busy_seconds())

    def stop(self) -> CpuLoad:
        machine = machine_busy_seconds()
        busy = None if machine is None or self.machine is None else machine - self.machine
        return CpuLoad(wall_seconds=time.perf_counter() - self.wall, own_cpu_seconds=time.process_time() - self.own,
                       machine_busy_seconds=busy)


def process_ticks() -> dict[int, tuple[str, int, int]]:
    """Per live process: its kernel name (``comm``), CPU ticks so far (utime + stime) and start time (ticks after
    boot: tells a reused pid apart; a kernel worker's ``comm`` changes with its work); {} without /proc.

    Costs a few milliseconds on a machine with a few hundred processes: read outside the timed window."""
    out: dict[int, tuple[str, int, int]] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        left, right = raw.find(b"("), raw.rfind(b")")
        if left < 0 or right < left:
            continue
        fields = raw[right + 2:].split()
        if len(fields) < 20:
            continue
        comm = raw[left + 1:right].decode(errors="replace")
        out[int(name)] = (comm, int(fields[11]) + int(fields[12]), int(fields[19]))
    return out


def top_consumers(before: dict[int, tuple[str, int, int]], after: dict[int, tuple[str, int, int]],
                  wall_seconds: float,
                  *, exclude: set[int] | None = None, limit: int = 3) -> list[dict[str, Any]]:
    """The processes that used the most CPU between two :func:`process_ticks` readings ``wall_seconds`` apart
    (``exclude``: the measuring process itself), at least :data:`CONSUMER_CORES` each, most first:
    ``[{"name": comm, "pid": pid, "cores": cpu seconds per wall second}]``. A process that started meanwhile
    counts from zero; one that ended is not seen."""
    if wall_seconds <= 0:
        return []
    skip = exclude or set()
    used: list[dict[str, Any]] = []
    for pid, (comm, ticks, started) in after.items():
        if pid in skip:
            continue
        start = before.get(pid)
        delta = ticks - (start[1] if start is not None and start[2] == started else 0)
        cores = delta / _TICK / wall_seconds
        if cores >= CONSUMER_CORES:
            used.append({"name": comm, "pid": pid, "cores": round(cores, 3)})
    used.sort(key=lambda c: -float(c["cores"]))
    return used[:limit]
