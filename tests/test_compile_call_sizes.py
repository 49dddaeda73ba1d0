"""A static-shape torch.compile artifact pads a batch's rows up to a call size and cuts the answers back.

torch.compile with ``dynamic=False`` compiles again for each new batch size and, past torch's recompile limit (8 a
frame), runs the model eagerly without a word: a server's batcher makes every size up to its max batch, so a served
compile artifact of max batch 12 ran batches of 9-12 in eager (session 43). ``load.py`` now pads to
``CALL_SIZES`` (the powers of two below the batch, and the batch) and raises the limit to cover them.

The first tests run the generated lines themselves on a model that records the sizes it is called at (a double for
torch.compile, which only the last test runs: the artifact in a fresh process, compiling for real).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.deployment import ARTIFACT_DIR, LOADER_NAME, write_deployment
from autotune.report.snippets import call_sizes, row_padding_lines, rows_padded, torch_predict_lines
from autotune.runner import Runner
from tests.test_artifact import _document, _recipe


def test_call_sizes_are_the_powers_of_two_below_the_batch_and_the_batch() -> None:
    assert call_sizes(16) == [1, 2, 4, 8, 16]
    assert call_sizes(12) == [1, 2, 4, 8, 12]
    assert call_sizes(1) == [1]
    assert call_sizes(3) == [1, 2, 3]


def _predict(model: Any, batch: int) -> Any:
    """predict as load.py defines it for a static-shape compile artifact of ``batch``, around ``model``."""
    ns: dict[str, Any] = {"torch": torch, "device": torch.device("cpu"), "INPUTS": ["x", "y"], "N_POSITIONAL": 2,
                          "model": model}
    exec("\n".join([
        *row_padding_lines(batch, 1), "",
        "def _flatten(args, kwargs):", "    return list(args)", "",
        "def _prepare(xs):", "    return xs", "",
        "def load():",
        *torch_predict_lines(context="torch.inference_mode()", call="model(*xs)", flat=False, buckets=False,
                             rows=True),
    ]), ns)
    return ns["load"]()


def test_rows_are_padded_up_to_a_call_size_and_every_answer_is_its_own_rows() -> None:
    seen: list[int] = []

    def model(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        seen.append(int(x.shape[0]))
        return {"sum": x.sum(dim=1) + y[:, 0], "rows": x * 2, "fixed": torch.ones(3), "name": "not a tensor"}

    predict = _predict(model, 12)
    for n in range(1, 13):
        x, y = torch.arange(n * 4, dtype=torch.float32).reshape(n, 4), torch.full((n, 2), float(n))
        out = predict(x, y)
        assert out["sum"].shape == (n,) and torch.equal(out["sum"], x.sum(dim=1) + n)
        assert torch.equal(out["rows"], x * 2)
        assert out["fixed"].shape == (3,) and out["name"] == "not a tensor"  # not rows: left as they are
    assert sorted(set(seen)) == [1, 2, 4, 8, 12]  # 5 sizes, not 12
    assert seen[2] == 4  # a batch of 3 ran at 4, its last row repeated


def test_a_batch_beyond_the_call_sizes_runs_as_it_is() -> None:
    seen: list[int] = []

    def model(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append(int(x.shape[0]))
        return x

    assert _predict(model, 4)(torch.zeros(6, 1), torch.zeros(6, 1)).shape == (6, 1) and seen == [6]


def test_rows_are_padded_only_when_every_input_and_output_is_batched_in_dim_0() -> None:
    batched = {"inputs": [{"name": "x", "dynamic_dims": [0]}], "outputs": [{"name": "y", "shape": [8, 10]}]}
    assert rows_padded(batched, 8)
    assert not rows_padded(batched, 1)  # nothing to pad
    # a detector's outputs come a dict per image: their shapes are not the batch's rows
    assert not rows_padded({**batched, "outputs": [{"name": "boxes", "shape": [37, 4]}]}, 8)
    assert not rows_padded({**batched, "outputs": []}, 8)  # unknown outputs (an older report): as before
    assert not rows_padded({**batched, "inputs": [{"name": "x", "dynamic_dims": []}]}, 8)


FRESH = r"""
import json, runpy, sys
from pathlib import Path
import torch
import torch._dynamo.utils as dynamo_utils
sys.modules["autotune"] = None  # the artifact must load and run without autotune
ns = runpy.run_path(str(Path(sys.argv[1]) / "load.py"), run_name="artifact_load")
predict = ns["load"]()
eager = ns["model"]._orig_mod  # load.py's torch.compile wraps the model it built
worst = 0.0
for n in range(1, int(sys.argv[2]) + 1):
    (x,) = ns["make_inputs"](n)
    out = predict(x)
    with torch.inference_mode():
        ref = eager(x)
    assert out.shape == ref.shape, (n, out.shape, ref.shape)
    worst = max(worst, float((out - ref).abs().max()))
print(json.dumps({"graphs": dynamo_utils.counters["stats"]["unique_graphs"], "worst": worst,
                  "sizes": ns["CALL_SIZES"], "frames": dict(dynamo_utils.counters["frames"])}))
"""


@pytest.mark.worker
def test_a_compile_artifact_of_batch_12_compiles_five_graphs_for_every_size_and_answers_as_eager(
        tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, variants='["compile"]', batch_sizes="[12]")
    doc = _document(recipe, "compile", 12)
    write_deployment(recipe.to_dict(), doc, tmp_path, make_runner=Runner, timeout=600, profile=False)
    assert doc["artifact"]["status"] == "ok", doc["artifact"]
    assert "dynamic=False" in (tmp_path / ARTIFACT_DIR / LOADER_NAME).read_text()
    proc = subprocess.run([sys.executable, "-I", "-c", FRESH, str(tmp_path / ARTIFACT_DIR), "12"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["sizes"] == [1, 2, 4, 8, 12]
    # one graph per call size; before, 8 graphs and then eager for 9-12 ("hit config.recompile_limit (8)")
    assert info["graphs"] == 5, info
    assert "recompile_limit" not in proc.stderr, proc.stderr[-2000:]
    assert info["worst"] < 1e-4, info
