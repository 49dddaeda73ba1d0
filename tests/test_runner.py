"""Worker isolation: every way a candidate can die becomes a `failed` row, and the run goes on.

These tests run the real worker subprocess on deliberately broken models (tests/models/broken.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.client import WorkerClient
from autotune.core.measure_settings import MeasureSettings
from autotune.core.recipe import load_recipe
from autotune.runner import Runner
from tests.support import tiny_recipe

pytestmark = pytest.mark.worker  # starts worker or CLI processes: not in `make test-fast`

MODELS = Path(__file__).resolve().parent / "models"
SETTINGS = MeasureSettings(mode="throughput", ci_target=0.05, max_seconds=0.3)


def _recipe(write_recipe, crash: str | None):
    kwargs = f'kwargs = {{ crash = "{crash}" }}' if crash else ""
    return load_recipe(write_recipe(tiny_recipe(name="broken", kwargs=kwargs, variants='["eager"]')))


def _measure(runner: Runner, recipe, batch: int, *, timeout: float = 120.0) -> dict:
    return WorkerClient(runner).measure(recipe, "eager", batch, SETTINGS, timeout=timeout)


def test_healthy_worker_is_reused_across_candidates(write_recipe) -> None:
    recipe = _recipe(write_recipe, None)
    with Runner() as runner:
        first = _measure(runner, recipe, 1)
        second = _measure(runner, recipe, 4)
        assert first["status"] == second["status"] == "ok"
        assert runner.stats.workers_started == 1
        assert first["measurement"]["batch_size"] == 1 and second["measurement"]["batch_size"] == 4


@pytest.mark.parametrize(
    ("crash", "reason", "timeout"),
    [
        ("raise", r"ValueError: deliberate failure at batch >= 4", 120.0),
        # a death by signal (kill) and an exception stay in make test; these two are slow (issue 31)
        pytest.param("segfault", r"worker died with SIGSEGV", 120.0, marks=pytest.mark.slow),
        pytest.param("exit", r"worker exited with code 3", 120.0, marks=pytest.mark.slow),
        ("kill", r"worker died with SIGKILL \(killed by the kernel, likely out of memory\)", 120.0),
        ("hang", r"timed out after 8 s", 8.0),
    ],
)
def test_broken_candidate_is_failed_and_the_run_goes_on(write_recipe, crash: str, reason: str,
                                                        timeout: float) -> None:
    import re

    recipe = _recipe(write_recipe, crash)
    with Runner() as runner:
        before = _measure(runner, recipe, 1)
        assert before["status"] == "ok"
        broken = _measure(runner, recipe, 4, timeout=timeout)  # batch >= 4 triggers the crash
        assert broken["status"] == "failed"
        assert re.search(reason, broken["reason"]), broken["reason"]
        after = _measure(runner, recipe, 2)  # a fresh worker takes over
        assert after["status"] == "ok", after
        # a Python exception is handled inside the worker, which stays healthy; a crash costs a new worker
        assert runner.stats.workers_started == (1 if crash == "raise" else 2)


def test_model_printing_does_not_corrupt_protocol(write_recipe, tmp_path: Path) -> None:
    module = tmp_path / "noisy.py"
    module.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        print('hello from forward', flush=True)\n"
        "        return x * 2\n"
        "def make():\n"
        "    print('{\"id\": 999, \"ok\": true}')\n"
        "    return M()\n"
    )
    recipe = load_recipe(write_recipe(f"""
device = "cpu"
[model]
factory = "{module}:make"
[[inputs]]
shape = [4]
"""))
    with Runner() as runner:
        assert _measure(runner, recipe, 2)["status"] == "ok"


def test_probes_and_measurements_run_in_separate_workers() -> None:
    """The probe worker pins glibc's mmap threshold; timing must never happen in that process.

    Raw requests to one process (the client routes each op to its role, so it never sends these)."""
    from autotune.runner import WorkerProcess

    for role, refused in (("probe", "measure"), ("measure", "probe")):
        worker = WorkerProcess(role=role)
        try:
            resp = worker.request({"op": refused, "recipe": {}, "variant": "eager", "batch_size": 1}, timeout=30)
            assert not resp["ok"] and "does not serve" in resp["error"]["message"], (role, resp)
        finally:
            worker.close()


def _state(pid: int, want: str | None = None) -> str:
    """The process's state letter from /proc (T: stopped); with ``want``, waited for up to 2 s (a signal is
    delivered asynchronously)."""
    import time

    deadline = time.monotonic() + (2.0 if want else 0.0)
    while True:
        text = Path(f"/proc/{pid}/stat").read_text()
        state = text[text.rindex(")") + 2]
        if want is None or state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


def test_a_paused_worker_uses_no_cpu_answers_its_next_request_and_closes() -> None:
    """The showdown stops every staged worker but the one being timed: a stopped worker keeps what it built,
    continues on its next request, and a paused one still closes at once (a stopped process would never read the
    end of its stdin)."""
    import time

    from autotune.runner import HELLO, WorkerProcess

    worker = WorkerProcess(role="measure")
    try:
        pid = worker.proc.pid
        worker.pause()
        assert worker.paused and _state(pid, "T") == "T"
        cpu = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[11:13]
        time.sleep(0.3)
        assert Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[11:13] == cpu  # utime, stime: still
        resp = worker.request(HELLO, timeout=30)  # continues it first
        assert resp["ok"] and not worker.paused and _state(pid) != "T"
        worker.pause()
        t0 = time.monotonic()
        worker.close()
        assert time.monotonic() - t0 < 5 and worker.proc.returncode == 0
    finally:
        worker.kill()


def test_a_worker_killed_while_starting_is_started_again_then_its_request_fails(tmp_path: Path) -> None:
    """A start killed from outside is retried once; a second failure is the request's failure (with the reason),
    never an exception that ends the run (issue 32: exit 2 and an unfinished report)."""
    import os

    from autotune.runner import HELLO

    site = tmp_path / "site"
    site.mkdir()
    count = tmp_path / "starts"
    # every worker start counts itself; the first `die` of them are SIGKILLed before the worker says hello
    (site / "sitecustomize.py").write_text(
        "import os, signal\n"
        f"path = {str(count)!r}\n"
        "n = (int(open(path).read()) if os.path.exists(path) else 0) + 1\n"
        "open(path, 'w').write(str(n))\n"
        "if n <= int(os.environ.get('DIE_STARTS', '0')):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")

    def runner(die: int) -> Runner:
        count.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "DIE_STARTS": str(die)}
        return Runner(env=env)

    with runner(1) as once:
        assert "pid" in once.call(HELLO, timeout=60) and once.stats.crashes == 1  # the retry answered
    with runner(2) as twice:
        got = twice.call(HELLO, timeout=60)
        assert got.get("status") == "failed" and "could not start (twice)" in got["reason"]
        assert "SIGKILL" in got["reason"] and twice.stats.crashes == 2
