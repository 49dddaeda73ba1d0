"""What disturbed a timing window (autotune.core.contention): the arithmetic on two /proc readings, then the real
kernel's readings with a spinning process beside us."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from autotune.core.contention import _TICK, CpuWindow, process_ticks, top_consumers


def test_the_top_consumers_are_named_by_what_they_used_between_two_readings() -> None:
    before = {10: ("spinner", 100, 5), 11: ("idle", 50, 5), 12: ("kworker/0:1-events", 7, 1), 99: ("me", 0, 1)}
    after = {10: ("spinner", 100 + _TICK, 5), 11: ("idle", 50, 5), 12: ("kworker/0:1-mm", 7 + _TICK // 5, 1),
             13: ("newcomer", _TICK // 2, 900), 99: ("me", 2 * _TICK, 1)}
    got = top_consumers(before, after, 1.0, exclude={99})
    assert [(c["name"], c["pid"]) for c in got] == [("spinner", 10), ("newcomer", 13), ("kworker/0:1-mm", 12)]
    assert got[0]["cores"] == pytest.approx(1.0) and got[1]["cores"] == pytest.approx(0.5, abs=0.02)
    # a kernel worker's name changes with its work: the start time, not the name, says it is the same process
    assert got[2]["cores"] == pytest.approx(0.2, abs=0.02)
    # a pid reused by a new process counts from zero, not from the old process's ticks
    reused = top_consumers({10: ("old", 10 * _TICK, 5)}, {10: ("new", _TICK, 700)}, 1.0)
    assert reused == [{"name": "new", "pid": 10, "cores": pytest.approx(1.0)}]
    assert [c["name"] for c in top_consumers(before, after, 1.0, exclude={99}, limit=1)] == ["spinner"]
    assert top_consumers(before, after, 0.0) == []


@pytest.mark.worker
def test_a_spinning_neighbour_is_named_by_the_kernels_readings() -> None:
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    spinner = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"])
    try:
        time.sleep(0.3)
        before = process_ticks()
        window = CpuWindow.start()
        time.sleep(1.0)
        load = window.stop()
        after = process_ticks()
        assert load.foreign_cores is not None and load.foreign_cores > 0.5 and load.disturbed
        named = top_consumers(before, after, load.wall_seconds, exclude={os.getpid()})
        assert spinner.pid in [c["pid"] for c in named], named
        mine = next(c for c in named if c["pid"] == spinner.pid)
        # its share of the 2 cores, beside the other test worker and anything else running: half a core or
        # less on a busy CI machine (0.5 exactly once), so the reading only has to be clearly the spinner's
        assert mine["name"].startswith("python") and mine["cores"] > 0.3
    finally:
        spinner.kill()
        spinner.wait()
