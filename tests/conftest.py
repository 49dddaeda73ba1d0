"""Fixtures shared by the tests, and the hook that skips ``cuda`` tests without a GPU.

Plain helpers (paths, the tiny recipe, ``run_cli``, fake search rows) are in :mod:`tests.support`.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
from pathlib import Path

import pytest

from tests.support import MODELS, FakeRow, RealRun, run_cli, search_row, tiny_recipe

# Every ``autotune run`` ends by timing its artifact in 3 plain processes (about 10-20 s); the suite runs dozens of
# runs, so the check is off by default here and on in the tests that are about it (they pass the rounds).
os.environ.setdefault("AUTOTUNE_ARTIFACT_CHECK_ROUNDS", "0")


@functools.cache
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


#: The modules that take longest, longest first (seconds of a default suite on the 2-core machine, 2026-11-28: a
#: sum over their tests, 859-1,001 s for the whole suite in three runs). ``make test`` hands each process a whole
#: module at a time in collection order (``--dist loadfile --no-loadscope-reorder``), so these go first and the
#: short modules fill in at the end. In xdist's own order (most tests first) the 73-s serving run came last and one
#: process idled for two minutes. A module missing here only runs later; nothing else depends on the order.
LONGEST_FIRST = (
    "test_artifact",  # 90-121, with the shared showdown_run
    "test_generate_e2e",  # 78-86
    "test_serving_e2e",  # 59-73
    "test_study_safety",  # 55-81
    "test_cli",  # 42-52
    "test_interrupt",  # 37-48
    "test_compare_rerun",  # 40-47
    "test_search",  # 37-46
    "test_runner",  # 39-42
    "test_serving_server",  # 37
    "test_int8",  # 30-36
    "test_compile_call_sizes",  # 20 with inductor's cache warm, 36 cold (a fresh clone)
    "test_artifact_traffic",  # 33
    "test_process_env",  # 25-31
    "test_runtimes",  # 29-30
    "test_detection_gate",  # 10-25
    "test_fuzz",  # 21-25
    "test_traffic",  # 20-24
    "test_accuracy",  # 18-23
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` skip cleanly on machines without a GPU; the longest modules run first
    (:data:`LONGEST_FIRST`; the order within a module is kept)."""
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not _cuda_available():
            item.add_marker(skip)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.path)).stem, len(rank)))


@pytest.fixture
def write_recipe(tmp_path: Path):
    """Write a recipe TOML into tmp_path (model files in tests/models are referenced by absolute path)."""

    def write(text: str, name: str = "recipe.toml") -> Path:
        path = tmp_path / name
        path.write_text(text.replace("@MODELS@", str(MODELS)))
        return path

    return write


@pytest.fixture
def fake_row() -> FakeRow:
    """``fake_row(trial, variant, batch, *, latency_ms=None)``: the row a search's evaluate would return, made up
    without a worker (faster variants: SEARCH_SPEED; variant "broken" fails). For test_search and test_postgres."""
    return search_row


@pytest.fixture(scope="session")
def showdown_run(tmp_path_factory: pytest.TempPathFactory) -> RealRun:
    """One real ``autotune run`` of the tiny model decided by a showdown (eager and script at batch 2, one process
    per finalist, quiet rounds) whose artifact is timed as shipped (2 plain processes), read by every test that needs
    a real run's reports, showdown and artifact (test_showdown, test_artifact, test_report_browser). A run costs
    40-60 s on 2 cores; sharing it keeps ``make test`` near 10 minutes (issue 31). Tests must not write into
    ``out``: they copy it first.

    Under pytest-xdist (``make test``: two processes, a module each at a time) the modules that read it may run in
    different processes, so the first one to ask makes it under a file lock in the session's shared temporary
    directory and the other reads what it left (a session fixture is otherwise made once per process: in one suite
    it was made twice, 2026-11-28)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _showdown_run(tmp_path_factory.mktemp("showdown-run"))
    shared = tmp_path_factory.getbasetemp().parent / "showdown-run"  # the session's, above each worker's own
    shared.mkdir(exist_ok=True)
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = shared / "run.json"
        if not done.exists():
            run = _showdown_run(shared)
            done.write_text(json.dumps({"code": run.code, "stdout": run.stdout, "stderr": run.stderr}))
        kept = json.loads(done.read_text())
    return RealRun(kept["code"], kept["stdout"], kept["stderr"], shared / "recipe.toml", shared / "out")


def _showdown_run(base: Path) -> RealRun:
    recipe = base / "recipe.toml"
    # One process per finalist and a 10% margin: eager and script on the tiny model are often within a few
    # percent, and an undecided tie over two processes each staged more (up to 6 per finalist) and ran more rounds:
    # 40 s became 86 s on a busy machine. Alternating processes is tested with doubles (test_showdown_processes).
    text = tiny_recipe(name="showdown", variants='["eager", "script"]', batch_sizes="[2]", rounds=3,
                       round_seconds=0.1, processes=1) + "quiet_rounds = true\n"  # auto: torch: off
    text = text.replace("[search]\n", "[search]\nequivalence_margin = 0.1\n")
    recipe.write_text(text.replace("@MODELS@", str(MODELS)))
    code, stdout, stderr = run_cli("run", str(recipe), "--out", str(base / "out"), "--no-progress",
                                   "--artifact-check-rounds", "2")
    return RealRun(code, stdout, stderr, recipe, base / "out")
