"""A candidate's peak memory is its own: the correctness gate's reference runs are not charged to it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune.core.recipe import load_recipe

pytestmark = pytest.mark.worker  # runs the worker's ops on a real model (~40 s): not in `make test-fast`

OUT_MIB = 128
MODEL = f"""
import torch

class Widen(torch.nn.Module):
    # every call returns {OUT_MIB} MiB at batch 512: the gate holds eager's and the variant's
    # outputs and a float64 copy of each (6x this), the steady loop one output at a time
    def forward(self, x):
        return (x.unsqueeze(1) * torch.ones(64, 1)).reshape(x.shape[0], -1)

def widen():
    return Widen()
"""
RECIPE = """
name = "widen"
device = "cpu"
[model]
factory = "widen.py:widen"
[[inputs]]
name = "x"
shape = [1024]
[search]
variants = ["eager"]
batch_sizes = [512]
[measure]
max_seconds = 0.3
rounds = 0
"""


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_measured_peak_excludes_the_gate(tmp_path: Path) -> None:
    worker = pytest.importorskip("autotune.worker")
    from autotune.worker import devices

    (tmp_path / "widen.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "widen.toml").write_text(RECIPE)
    recipe = load_recipe(tmp_path / "widen.toml").to_dict()
    state = worker.WorkerState()
    state.workload(recipe)  # the model built and run once, as in a worker
    worker._trim_heap()
    before = devices.backend_for("cpu").current_memory_bytes()
    res = worker.op_measure(state, {"recipe": recipe, "variant": "eager", "batch_size": 512,
                                    "settings": {"max_seconds": 0.3, "ci_target": 0.5}})
    assert res["status"] == "ok", res
    grown = (res["peak_memory_bytes"] - before) / 2**20
    # steady loop: an output or two alive at once; the gate alone would add ~6 outputs
    assert grown < 3 * OUT_MIB, f"peak grew by {grown:.0f} MiB over the worker's baseline"
    assert "gate excluded" in res["peak_memory_scope"]
