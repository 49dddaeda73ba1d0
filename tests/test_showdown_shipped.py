"""The showdown times finalists as shipped: saved as their artifacts, loaded by their own ``load.py`` in workers that
built nothing (issue 30: a worker that built a DistilBERT served it 1.5-2x faster than its artifact ran).

Real workers and real artifacts throughout: a finalist's artifact is saved by a fresh worker
(:func:`autotune.deployment.write_finalist_artifact`), a second worker stages it from the files alone (op ``stage``
with ``shipped``) and times slices; the same lines the plain process runs load it (:mod:`autotune.core.artifact_child`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.artifact_timing import child_spec
from autotune.client import WorkerClient
from autotune.core.artifact_child import CHILD, LOAD_CALLS, load_calls
from autotune.core.recipe import load_recipe
from autotune.deployment import STAGING_NAME, clean_staging, finalists_dir, write_finalist_artifact
from autotune.errors import InputError
from autotune.runner import Runner
from autotune.showdown.rounds import ShowdownSettings, estimated_seconds, fitted, shippable
from tests.support import MODELS, tiny_recipe

pytestmark = pytest.mark.worker


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Path]:
    """The tiny model's ``script@2`` saved as a finalist's artifact: (recipe data, its row, the directory)."""
    base = tmp_path_factory.mktemp("finalist")
    recipe_path = base / "recipe.toml"
    recipe_path.write_text(tiny_recipe(variants='["script"]', batch_sizes="[2]").replace("@MODELS@", str(MODELS)))
    data = load_recipe(recipe_path).to_dict()
    row = {"variant": "script", "batch_size": 2, "compiler": "script", "precision": "fp32"}
    directory = base / "finalist1"
    section = write_finalist_artifact(data, row, directory, make_runner=Runner, timeout=300)
    assert section["status"] == "ok", section
    return data, row, directory


def test_a_finalists_artifact_is_the_file_and_loader_a_deployment_gets(saved: tuple[dict, dict, Path]) -> None:
    data, _, directory = saved
    assert (directory / "model.pt").is_file() and (directory / "load.py").is_file()
    spec = child_spec(directory, kind="torchscript", batch_size=2, recipe=data, why="test")
    loaded = load_calls(spec)  # the plain process's lines, in this process
    assert loaded.rows == (2,) and loaded.samples_per_call == 2.0
    args, kwargs = loaded.calls[0]
    out = loaded.predict(*args, **kwargs)
    assert tuple(out[0].shape) == (2, 4)
    # and the plain process still runs the same lines, never importing autotune
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps({**spec, "seconds": 0.2, "warm_s": 0.1})],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["rows_per_call"] == 2
    assert LOAD_CALLS in CHILD and "import autotune" not in CHILD


def test_a_worker_stages_from_the_artifact_without_building_the_model(saved: tuple[dict, dict, Path]) -> None:
    """The recipe's model factory is made unreadable: a stage that built anything would fail; staged as shipped it
    loads the files, warms and times slices."""
    data, _, directory = saved
    spec = child_spec(directory, kind="torchscript", batch_size=2, recipe=data, why="test")
    broken = {**data, "model": {**data["model"], "factory": str(directory / "missing.py") + ":tiny"}}
    runner = Runner()
    try:
        client = WorkerClient(runner)
        with pytest.raises(InputError, match=r"missing\.py"):  # built from the recipe: the factory is gone
            client.stage(broken, "script", 2, warmup_iterations=0, warmup_seconds=0.0, timeout=300)
    finally:
        runner.close()
    runner = Runner()
    try:
        client = WorkerClient(runner)
        res = client.stage(broken, "script", 2, warmup_iterations=0, warmup_seconds=0.1, timeout=300, shipped=spec)
        assert res["status"] == "ok", res
        assert res["samples_per_call"] == 2.0 and res["warmup_calls"] >= 10
        sl = client.slice(0.2, per_call=True, percentile="p99", timeout=60)
        assert sl["status"] == "ok" and sl["seconds_per_call"] > 0 and sl["latency_seconds"] > 0
    finally:
        runner.close()


def test_a_broken_loader_fails_the_stage_with_its_reason(saved: tuple[dict, dict, Path], tmp_path: Path) -> None:
    data = saved[0]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "load.py").write_text("def load():\n    raise RuntimeError('no model here')\n")
    spec = child_spec(bad, kind="torchscript", batch_size=2, recipe=data, why="test")
    runner = Runner()
    try:
        res = WorkerClient(runner).stage(data, "script", 2, warmup_iterations=0, warmup_seconds=0.0, timeout=300,
                                         shipped=spec)
    finally:
        runner.close()
    assert res["status"] == "failed" and "load.py failed" in res["reason"] and "no model here" in res["reason"]


def test_which_finalists_ship_files_and_what_saving_them_costs() -> None:
    assert all(shippable({"variant": v}) for v in ("script", "trace", "frozen+bf16", "onnx", "openvino+int8"))
    assert not any(shippable({"variant": v}) for v in ("eager", "compile", "compile:max-autotune"))
    rows = [{"variant": "onnx", "batch_size": 8, "compile_seconds": 4.0},
            {"variant": "eager", "batch_size": 8, "compile_seconds": 0.0}]
    plain = ShowdownSettings(rounds=6, round_seconds=0.5, margin=0.02, objective="throughput",
                             latency_percentile="p99", timeout_s=60)
    shipped = ShowdownSettings(rounds=6, round_seconds=0.5, margin=0.02, objective="throughput",
                               latency_percentile="p99", timeout_s=60, shipped_dir="/tmp/x")
    # the onnx finalist is built once (the worker that saves it: a start-up and its build) instead of in each of its
    # 3 processes, which only load it; eager is built in each as before
    assert estimated_seconds(rows, shipped, startup_s=5.0) - estimated_seconds(rows, plain, startup_s=5.0) == \
        pytest.approx(5.0 + 4.0 - 3 * 4.0)


def test_a_showdown_the_time_left_cannot_cover_in_full_stages_fewer_processes_before_it_is_skipped() -> None:
    # the quickstart's demo of session 42: onnx@16 and openvino@16, CIs overlapping, 3 processes each estimated at
    # 80 s with 72 s allowed: the showdown was skipped and the pick rested on the screens
    rows = [{"variant": "onnx", "batch_size": 16, "compile_seconds": 5.3},
            {"variant": "openvino", "batch_size": 16, "compile_seconds": 2.1},
            {"variant": "eager", "batch_size": 16, "compile_seconds": 0.0}]
    settings = ShowdownSettings(rounds=6, round_seconds=0.5, margin=0.02, objective="throughput",
                                latency_percentile="p99", timeout_s=60, shipped_dir="/tmp/x")
    full = estimated_seconds(rows[:2], settings, startup_s=7.0)
    assert full > 72.0
    kept, fit, cost = fitted(rows, settings, left=27.0, allowance=72.0, startup_s=7.0)
    assert [r["variant"] for r in kept] == ["onnx", "openvino"]  # the third went first
    assert 1 <= fit.processes < 3 and cost <= 72.0
    assert cost == pytest.approx(estimated_seconds(kept, fit, startup_s=7.0))
    bigger = estimated_seconds(kept, replace(fit, processes=fit.processes + 1), startup_s=7.0)
    assert bigger > 72.0  # the most processes that fit, not fewer
    # room for everything: nothing changes
    assert fitted(rows[:2], settings, left=200.0, allowance=245.0, startup_s=7.0) == (rows[:2], settings, full)
    # not even one process each fits: the caller skips, told the one-process cost
    kept, fit, cost = fitted(rows, settings, left=0.0, allowance=10.0, startup_s=7.0)
    assert fit.processes == 1 and cost > 10.0 and len(kept) == 2


def test_a_killed_runs_finalist_artifacts_are_removed_by_the_next(tmp_path: Path) -> None:
    left = finalists_dir(tmp_path)
    (left / "finalist1").mkdir(parents=True)
    assert STAGING_NAME.fullmatch(left.name)
    assert clean_staging(tmp_path) == [left] and not left.exists()
