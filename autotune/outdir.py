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
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from autotune.errors import InputError

#: Name of the lock file inside ``--out``.
LOCK_NAME = ".autotune.lock"


def path_component(name: str) -> str:
    """A recipe's name as one directory name, for the default ``--out`` (``out/<name>``).

    Why: the name is data from the recipe file, and ``Path("out") / name`` with a name of ``/some/dir`` or
    ``../x`` is that path itself, so a recipe could have a run write (and swap out an ``artifact/``) anywhere.
    Everything but letters, digits, ``.``, ``_`` and ``-`` becomes ``_``; leading and trailing dots go (no
    ``..``, no hidden directory); an empty result is ``run``; at most 100 characters.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip(".")[:100].strip(".")
    return safe or "run"


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file ("unknown" while it is still writing it)."""
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return text
    return "unknown"


@contextlib.contextmanager
def hold_out_dir(out: Path, *, label: str = "--out") -> Iterator[None]:
    """Hold ``out``'s lock for the block; :class:`InputError` if another process holds it.

    ``out`` must exist. An OSError creating or writing the lock file, or a file beside it (a read-only, immutable
    or full ``--out``), goes on up: :func:`autotune.study.storage.storage_errors` turns it into a message. Once
    held, what a killed holder left behind is cleaned up (:func:`clean_leftovers`): nobody else can be writing it.
    ``label`` names the directory in the message (``DIR`` for ``autotune report DIR``).
    """
    path = out / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = "run" if label == "--out" else "run or report"
            raise InputError(f"{label} {out}: another autotune {holder} (pid {_holder(fd)}) is using this "
                             f"directory; wait for it to finish, or use another {label}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        # The lock file may be left from an earlier run, so writing it proves nothing about the directory: a
        # read-only or immutable --out must fail now, not after the measurements when the reports are written.
        with tempfile.TemporaryFile(dir=out, prefix=".autotune-write-test-"):
            pass
        clean_leftovers(out)
        yield
    finally:
        os.close(fd)  # releases the lock


#: What a killed run leaves in its ``--out``: the temporary files of the atomic report writes
#: (:mod:`autotune.report.write`: ``.report.json.<random>.tmp``, and the plots' in ``plots/``); the artifact's
#: staging and swapped-out directories are :mod:`autotune.deployment`'s (``.artifact.<pid>``).
TEMP_FILE = re.compile(r"\.(report\.(json|md|html)|[a-z_]+\.png)\.[A-Za-z0-9_]+\.tmp")


def clean_leftovers(out: Path) -> list[Path]:
    """Remove what killed runs left in ``out`` (call with its lock held); returns what was removed.

    Only names this tool makes are touched, so an ``--out`` that holds other files keeps them.
    """
    from autotune.deployment import clean_staging

    removed = clean_staging(out)
    for directory in (out, out / "plots"):
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if TEMP_FILE.fullmatch(path.name) and path.is_file() and not path.is_symlink():
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
