"""Fixtures shared by the tests, and the hook that skips ``cuda`` tests without a GPU.

Plain helpers (paths, the tiny recipe, ``run_cli``, fake search rows) are in :mod:`tests.support`.
"""

from __future__ import annotations

import functools
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` skip cleanly on machines without a GPU. Under pytest-xdist (``make test`` runs two
    processes, ``--dist loadgroup``) each test module is one group, so its module-scoped fixtures (a real run, a
    server) are built once; the modules that read the shared ``showdown_run`` form one group, so that run is made
    once for all of them rather than once per process."""
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not _cuda_available():
            item.add_marker(skip)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    shared = {item.module.__name__ for item in items
              if isinstance(item, pytest.Function) and "showdown_run" in item.fixturenames}
    for item in items:
        module = item.module.__name__ if isinstance(item, pytest.Function) else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("showdown_run" if module in shared else module))


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
    ``out``: they copy it first."""
    base = tmp_path_factory.mktemp("showdown-run")
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
