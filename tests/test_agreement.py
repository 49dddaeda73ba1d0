"""The measure worker times in the process state a plain deployment process has (allocator, threads).

The full check is ``benchmarks/bench_agreement.py`` (tool vs a plain process, every model and variant);
this is its cheap, deterministic part: a model whose forward asks glibc, from inside the measure
worker, whether the mmap threshold is still dynamic (the worker once pinned it, which made timing
~2x slow), and reports the thread count; a plain ``python`` process answers the same questions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.client import WorkerClient
from autotune.core.measure_settings import MeasureSettings
from autotune.core.recipe import load_recipe
from autotune.runner import Runner

PROBE_MODULE = '''
import ctypes, json, os
import torch


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def allocator_state():
    """'dynamic' (glibc default) or 'pinned' (M_MMAP_THRESHOLD set: every large block is a fresh mmap).

    By default, freeing an mmapped chunk raises the threshold past its size, so the same request
    is then served from the heap; with the threshold pinned it is mmapped again (hblks grows).
    """
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = _MallInfo2
    size = 4 << 20
    libc.free(libc.malloc(size))
    before = libc.mallinfo2().hblks
    p = libc.malloc(size)
    mmapped = libc.mallinfo2().hblks > before
    libc.free(p)
    return "pinned" if mmapped else "dynamic"


def state():
    return {"allocator": allocator_state(), "threads": torch.get_num_threads(), "pid": os.getpid()}


class Probe(torch.nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] == 3:  # the measured batch size (validation runs batch 2)
            with open(self.out, "a") as f:
                f.write(json.dumps(state()) + "\\n")
        return self.lin(x)


def make(out):
    return Probe(out)


if __name__ == "__main__":
    print(json.dumps(state()))
'''


def _libc_has_mallinfo2() -> bool:
    import ctypes

    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not sys.platform.startswith("linux") or not _libc_has_mallinfo2(),
                       reason="needs glibc >= 2.33 (mallinfo2)"),
]


def _plain(module: Path, **env: str) -> dict:
    out = subprocess.run([sys.executable, str(module)], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_allocator_check_tells_a_pinned_process_apart(tmp_path: Path) -> None:
    module = tmp_path / "probe_model.py"
    module.write_text(PROBE_MODULE)
    assert _plain(module)["allocator"] == "dynamic"
    # what the probe worker does with mallopt, done here through glibc's environment tunable
    assert _plain(module, MALLOC_MMAP_THRESHOLD_="131072")["allocator"] == "pinned"


def _worker_states(write_recipe, tmp_path: Path, env: dict[str, str] | None = None) -> list[dict]:
    """What the model's forward saw inside a measure worker, at the measured batch size."""
    module = tmp_path / "probe_model.py"
    module.write_text(PROBE_MODULE)
    log = tmp_path / "states.jsonl"
    recipe = load_recipe(write_recipe(f"""
device = "cpu"
[model]
factory = "{module}:make"
kwargs = {{ out = "{log}" }}
[[inputs]]
shape = [4]
[search]
variants = ["eager"]
"""))
    with Runner(env=env) as runner:
        client = WorkerClient(runner)
        client.validate(recipe, timeout=120)
        res = client.measure(recipe, "eager", 3, MeasureSettings(mode="throughput", ci_target=0.5, max_seconds=0.2),
                             timeout=120)
    assert res["status"] == "ok", res
    states = [json.loads(line) for line in log.read_text().splitlines()]
    assert states, "the model's forward never ran at the measured batch size"
    return states


def test_measure_worker_has_the_allocator_and_threads_of_a_plain_process(write_recipe, tmp_path: Path) -> None:
    states = _worker_states(write_recipe, tmp_path)
    module = tmp_path / "probe_model.py"
    plain = _plain(module)
    assert {s["allocator"] for s in states} == {plain["allocator"]} == {"dynamic"}, states
    assert {s["threads"] for s in states} == {plain["threads"]}, (states, plain)
    assert all(s["pid"] != os.getpid() for s in states)  # it really ran in the worker


def test_a_pinned_measure_worker_would_be_caught(write_recipe, tmp_path: Path) -> None:
    states = _worker_states(write_recipe, tmp_path, env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert {s["allocator"] for s in states} == {"pinned"}, states
