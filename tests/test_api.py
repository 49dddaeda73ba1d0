"""The Python API: recipes built in code are validated like files, and a notebook-style script tunes
a real model through it (examples/tune_in_python.py, run as a user would run it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import autotune
from autotune.api import CandidateResult, factory_reference
from autotune.errors import InputError, RecipeError

ROOT = Path(__file__).resolve().parents[1]


def top_level_factory() -> object:
    return None


def test_make_recipe_validates_like_a_file() -> None:
    recipe = autotune.make_recipe(model="torchvision.models:resnet18", inputs=[{"name": "x", "shape": [3, 8, 8]}],
                                  variants=["eager", "frozen"], batch_sizes=[1, 4], batch={"granularity": 2})
    assert recipe.model.factory == "torchvision.models:resnet18"
    assert recipe.search.variants == ("eager", "frozen") and recipe.batch.granularity == 2
    with pytest.raises(RecipeError, match=r"search\.objective"):
        autotune.make_recipe(model="m:f", inputs=[{"name": "x", "shape": [4]}], objective="fastest")
    with pytest.raises(RecipeError, match=r"batch\.nonsense"):
        autotune.make_recipe(model="m:f", inputs=[{"name": "x", "shape": [4]}], batch={"nonsense": 1})


def test_a_function_becomes_a_reference_a_worker_can_import() -> None:
    assert factory_reference(top_level_factory) == "tests.test_api:top_level_factory"
    with pytest.raises(InputError, match="not a top-level function"):
        factory_reference(lambda: None)

    def nested() -> None:
        return None

    with pytest.raises(InputError, match="not a top-level function"):
        factory_reference(nested)


def test_analyze_warmup_and_typed_rows() -> None:
    values = [0.05] + [0.01] * 300
    analysis = autotune.analyze_warmup(values)
    assert analysis.steady_start is not None and analysis.steady_start >= 1  # the first call is warmup
    assert analysis.steady_mean == pytest.approx(0.01)
    row = {"variant": "eager", "batch_size": 4, "status": "ok", "throughput": 10.0, "throughput_ci": [9.0, 11.0],
           "latency_ms": {"p50": 1.0}, "feasible": True}
    c = CandidateResult.from_row(row)
    assert c.throughput_ci == (9.0, 11.0) and c.latency_ms["p50"] == 1.0 and c.row is row


def test_import_is_light() -> None:
    code = "import sys, autotune; print(sorted(m for m in ('torch', 'optuna') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
@pytest.mark.worker
def test_notebook_style_example_tunes_and_reads_the_boundary(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "tune_in_python.py"), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "[validated] small_cnn on cpu" in text and "[done]" in text
    assert "recommended: " in text and "samples/s" in text
    assert "eager batch boundary under 4 GiB: " in text
    assert (tmp_path / "out" / "report.json").exists()
