"""The artifact's server and its calibration, started by the serving search exactly as a deployer starts them.

Every configuration the search measures runs as ``artifact/run.sh serve ...``: the artifact's own
``serve.py`` (the file that ships) in the artifact's process environment (``run.sh`` sets the allocator and
OpenMP variables before Python starts), with its instances as child processes. So the figures the report
states are the shipped server's, not a stand-in's.

Nothing outlives the tuner: the server starts in a session of its own (a terminal's Ctrl-C reaches the
tuner, which decides), the kernel sends it SIGTERM when the tuner dies however it dies
(``PR_SET_PDEATHSIG``, kept across ``run.sh``'s ``exec``), and ``serve.py`` does the same for its instances.
Leaving the context stops it with SIGTERM (graceful), then SIGKILL to its process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError

#: ``run.sh``'s sub-command that starts ``serve.py`` (:func:`autotune.report.loader.run_script`).
RUN_SCRIPT = "run.sh"
_PR_SET_PDEATHSIG = 1


class ServingError(AutotuneError):
    """The artifact's server could not be started, calibrated or measured (the serving stage reports why)."""


def _child_setup(cpus: frozenset[int] | None) -> Any:
    """What runs in the child between fork and exec: a session of its own, SIGTERM when the tuner dies, and
    the CPUs it may run on (inherited by the instances it starts)."""

    def setup() -> None:
        os.setsid()
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


@contextlib.contextmanager
def pinned(cpus: frozenset[int] | None) -> Iterator[None]:
    """This process on ``cpus`` for the block (the load client on its own core), then back where it was."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _command(artifact: Path, args: Sequence[str]) -> list[str]:
    return ["sh", str(artifact / RUN_SCRIPT), "serve", "--artifact", str(artifact), *args]


def _environ() -> dict[str, str]:
    # run.sh runs ${PYTHON:-python}: this interpreter, which has the runtimes the artifact needs
    return dict(os.environ, PYTHON=sys.executable, PYTHONUNBUFFERED="1")


@dataclass(frozen=True)
class Calibration:
    """One layout's service times: seconds per call (median) at each batch size, every instance busy."""

    instances: int
    threads: int
    service_s: dict[int, float]
    spread: dict[int, float]  # p90 / p50 of a call's time, per batch size
    seconds: float  # wall time of the calibration, start-up included
    mix: dict[int, int] = field(default_factory=dict)  # distinct calls of the traffic timed per size (none: one input)


def calibrate(artifact: Path, *, instances: int, threads: int, batches: Sequence[int], seconds: float,
              timeout: float, cpus: frozenset[int] | None = None) -> Calibration:
    """``serve.py --calibrate``: ``instances`` processes of ``threads`` threads each time ``predict`` at every
    batch size at once (so the figure includes what they cost each other on shared cores and caches)."""
    t0 = time.monotonic()
    args = ["--calibrate", "--instances", str(instances), "--threads", str(threads),
            "--batches", ",".join(str(b) for b in batches), "--seconds", f"{seconds:g}"]
    try:
        proc = subprocess.run(_command(artifact, args), capture_output=True, text=True, timeout=timeout,
                              env=_environ(), preexec_fn=_child_setup(cpus), check=False)
    except subprocess.TimeoutExpired as exc:
        raise ServingError(f"calibrating {instances}x{threads} took longer than {timeout:.0f} s") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ServingError(f"calibrating {instances}x{threads} failed (exit {proc.returncode}): {' | '.join(tail)}")
    got: dict[str, Any] = json.loads(lines[-1])
    service = {int(k): float(v) for k, v in got["service_s"].items()}
    spread = {int(k): float(v) for k, v in (got.get("spread") or {}).items()}
    mix = {int(k): int(v) for k, v in (got.get("mix") or {}).items()}
    return Calibration(instances, threads, service, spread, time.monotonic() - t0, mix)


def _dims(value: Any) -> dict[str, list[int]]:
    """A ready file's ``{output: [dim, ...]}``; empty when absent or not that shape."""
    return {str(k): [int(d) for d in v] for k, v in value.items() if isinstance(v, list)} \
        if isinstance(value, dict) else {}


class ServerProcess:
    """``run.sh serve`` with one configuration, on a free port of 127.0.0.1; a context manager."""

    def __init__(self, artifact: Path, args: Sequence[str], *, start_timeout: float = 180.0,
                 cpus: frozenset[int] | None = None, timeout_why: str = "",
                 on_stop: Callable[[float], None] | None = None) -> None:
        self.artifact = artifact
        self.on_stop = on_stop  # told the seconds each stop took
        self.timeout_why = timeout_why  # what bounded start_timeout, for the error
        self.cpus = cpus
        self.args = list(args)
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.merge_why: str | None = None  # why the server serves requests of different lengths apart, if it does
        self.output_dynamic_dims: dict[str, list[int]] = {}  # per output, the dims that follow the input's length
        self.merge_requests_why: str | None = None  # why no two requests share a call, if so (rows coupled)
        self.output_batch_dims: dict[str, list[int]] = {}  # per output, the non-batch dims that follow the rows
        self.unserved_outputs: list[str] = []  # output leaves no response carries ("cache (DynamicCache)")
        self._dir = tempfile.TemporaryDirectory(prefix="autotune-serve-")
        self.log = Path(self._dir.name) / "server.log"
        self.started_s = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerProcess:
        ready = Path(self._dir.name) / "ready.json"
        t0 = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                _command(self.artifact, [*self.args, "--host", "127.0.0.1", "--port", "0",
                                         "--ready-file", str(ready)]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=_environ(),
                preexec_fn=_child_setup(self.cpus))
        try:
            while not ready.exists():
                if self.proc.poll() is not None:
                    raise ServingError(f"the server exited with {self.proc.returncode} before it was ready: "
                                       f"{self.tail()}")
                if time.monotonic() - t0 > self.start_timeout:
                    why = f" ({self.timeout_why})" if self.timeout_why else ""
                    raise ServingError(f"the server was not ready after {self.start_timeout:.0f} s{why}: "
                                       f"{self.tail()}")
                time.sleep(0.05)
            for _ in range(40):  # written atomically by serve.py, but be lenient with a reader racing it
                with contextlib.suppress(ValueError, OSError):
                    said = json.loads(ready.read_text())
                    self.port = int(said["port"])
                    self.merge_why = said.get("merge_why") if said.get("merge_lengths") is False else None
                    self.output_dynamic_dims = _dims(said.get("output_dynamic_dims"))
                    self.merge_requests_why = said.get("merge_requests_why") \
                        if said.get("merge_requests") is False else None
                    self.output_batch_dims = _dims(said.get("output_batch_dims"))
                    self.unserved_outputs = [str(u) for u in said.get("unserved_outputs") or []]
                    break
                time.sleep(0.05)
            if not self.port:
                raise ServingError(f"the server's ready file {ready} has no port")
        except BaseException:
            self.stop(graceful=False)
            raise
        self.started_s = time.monotonic() - t0
        return self

    def served_calls(self, model_name: str) -> list[tuple[int, float]] | None:
        """The calls the server made since the last time it was asked, each (rows, seconds from the merge to the
        split), and forgets them (``DELETE /v2/models/NAME/stats``); None when it did not answer."""
        import urllib.request

        request = urllib.request.Request(f"{self.url}/v2/models/{model_name}/stats", method="DELETE")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                doc = json.loads(answer.read())
            return [(int(rows), float(seconds)) for rows, seconds in doc.get("batches") or []]
        except (OSError, ValueError, TypeError):
            return None

    def tail(self, lines: int = 3) -> str:
        with contextlib.suppress(OSError):
            text = self.log.read_text(errors="replace").strip().splitlines()
            return " | ".join(text[-lines:]) or "(no output)"
        return "(no output)"

    def stop(self, *, graceful: bool = True) -> int | None:
        """SIGTERM (the server answers what it holds and stops its instances), then SIGKILL to the group; only the
        SIGKILL where ``graceful`` is False: a server that never got ready holds no request, and one still loading
        a model that compiles may take the whole wait to stop (a BART's served torch.compile artifact, not ready
        within what the stage had left, then took the stage 13 s past its promise, session 38)."""
        proc, self.proc = self.proc, None
        code = None
        t0 = time.monotonic()
        if proc is not None and graceful:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything of its session still there
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            if self.on_stop is not None:
                self.on_stop(time.monotonic() - t0)
        return code

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._dir.cleanup()


__all__ = ["Calibration", "ServerProcess", "ServingError", "calibrate", "pinned"]
