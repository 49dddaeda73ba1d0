"""A worker's tie to its parent: it dies when the parent dies, and ends a request that overstays its deadline.

Why: the parent starts workers in a session of their own (so a Ctrl-C in the terminal reaches only the parent,
which decides), and only the parent timed requests out. A parent killed with SIGKILL, by ``timeout`` or by the
OOM killer therefore left its workers running: a hung or long candidate went on loading the CPU while the next
run was timing. Three guards, each enough alone for the case it covers:

1. ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux): the kernel kills the worker when the parent exits, however it
   exits, even while the worker is stuck inside a C call. Set first thing, before torch is imported, and then
   the parent's pid is checked once: a parent that died before the ``prctl`` would not trigger it.
2. A watchdog thread (every platform) that polls ``os.getppid()``: a changed parent (re-parented to init or a
   subreaper) means the parent is gone, and the worker exits.
3. The same thread enforces the request's own deadline: the parent sends ``timeout_s`` with every request
   (:meth:`autotune.runner.WorkerProcess.request`); a request still running :data:`DEADLINE_GRACE_S` after it
   (the parent kills at the deadline itself, so this only fires when the parent cannot) ends the worker.

SIGTERM keeps (or gets back) its default action, terminating the worker at once: no library's handler may turn it
into an exception that some ``except Exception`` swallows. Exits use ``os._exit``: nothing of a worker is worth
flushing when its parent is gone. A thread that holds the GIL in a C loop forever would stall guard 2 and 3;
guard 1 does not need the GIL. The kernel sends the death signal when the *thread* that started the worker ends;
the parent starts workers from its main thread only, so that is the parent's exit.

Pseudo-code::

    start(parent_pid):  prctl(PDEATHSIG, SIGKILL); if getppid() != parent_pid: exit
                        SIGTERM -> default; thread: loop every POLL_S { parent gone or deadline passed -> exit }
    begin(timeout_s):   deadline = now + timeout_s + DEADLINE_GRACE_S     (around each request)
    end():              deadline = None
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

from autotune.core.protocol import PARENT_ENV

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
#: Seconds between the watchdog's looks at the parent and the deadline.
POLL_S = 0.5
#: Seconds past a request's timeout after which the worker ends itself (the parent kills at the timeout).
DEADLINE_GRACE_S = 10.0
#: Exit codes: the parent is gone; a request overstayed its deadline.
EXIT_ORPHANED = 70
EXIT_DEADLINE = 71


class Lifeline:
    """The guards of one worker process (see the module docstring); :meth:`begin` / :meth:`end` bracket a request."""

    def __init__(self, parent_pid: int | None, *, poll_s: float = POLL_S, grace_s: float = DEADLINE_GRACE_S) -> None:
        self.parent_pid = parent_pid
        self.poll_s = poll_s
        self.grace_s = grace_s
        self._deadline: float | None = None
        self._what = ""

    def start(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.parent_pid is None:  # started by hand (a test, a debugger): no parent to follow
            return
        _set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != self.parent_pid:  # died before the prctl took effect
            os._exit(EXIT_ORPHANED)
        threading.Thread(target=self._watch, name="autotune-lifeline", daemon=True).start()

    def begin(self, timeout_s: object, what: str = "") -> None:
        """A request starts; ``timeout_s`` is the parent's timeout for it (absent or invalid: no deadline)."""
        if isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool) and 0 < timeout_s < 1e9:
            self._what = what
            self._deadline = time.monotonic() + float(timeout_s) + self.grace_s

    def end(self) -> None:
        self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(self.poll_s)
            if os.getppid() != self.parent_pid:
                os._exit(EXIT_ORPHANED)
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                with contextlib.suppress(Exception):  # stderr may be gone with the parent
                    sys.stderr.write(f"autotune worker: request {self._what} overstayed its deadline; exiting\n")
                    sys.stderr.flush()
                os._exit(EXIT_DEADLINE)


def _set_parent_death_signal(sig: int) -> None:
    """``prctl(PR_SET_PDEATHSIG, sig)``; a no-op where there is no prctl (the watchdog still follows the parent)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def parent_pid_from_env() -> int | None:
    text = os.environ.get(PARENT_ENV, "")
    return int(text) if text.isdigit() else None
