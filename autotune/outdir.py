"""One ``autotune run`` per ``--out`` directory, held by an OS lock that dies with its process.

Two runs on one ``--out`` would share its ``study.db`` (each measuring while the other's heartbeat and
boundary state move under it) and overwrite each other's reports. So a run holds an exclusive
``flock`` on ``OUT/.autotune.lock`` from the moment the directory exists until its reports are written,
and a second run is refused with the holder's pid.

Why ``flock`` and not a pid file: the kernel drops the lock when the holder's file descriptor is
closed, which happens when the process exits in any way (SIGKILL, the OOM killer, a crash). A killed
run leaves the file behind, never the lock, so nothing has to decide whether a recorded pid is still
alive (or was reused). The descriptor is not inherited by the spawned worker processes (Python opens
files non-inheritable), so a worker that outlives a killed run does not keep the lock either. The file
itself stays: removing it on exit would let a run that opened it just before lock a deleted inode.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from autotune.errors import InputError

#: Name of the lock file inside ``--out``.
LOCK_NAME = ".autotune.lock"


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file ("unknown" while it is still writing it)."""
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return text
    return "unknown"


@contextlib.contextmanager
def hold_out_dir(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock for the block; :class:`InputError` if another process holds it.

    ``out`` must exist. An OSError creating or writing the lock file, or a file beside it (a read-only, immutable
    or full ``--out``), goes on up: :func:`autotune.study.storage.storage_errors` turns it into a message.
    """
    path = out / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"--out {out}: another autotune run (pid {_holder(fd)}) is using this directory; "
                             "wait for it to finish, or use another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        # The lock file may be left from an earlier run, so writing it proves nothing about the directory: a
        # read-only or immutable --out must fail now, not after the measurements when the reports are written.
        with tempfile.TemporaryFile(dir=out, prefix=".autotune-write-test-"):
            pass
        yield
    finally:
        os.close(fd)  # releases the lock
