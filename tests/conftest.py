"""Fixtures shared by the tests, and the hook that skips ``cuda`` tests without a GPU.

Plain helpers (paths, the tiny recipe, ``run_cli``, fake search rows) are in :mod:`tests.support`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from tests.support import MODELS, FakeRow, search_row

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
    """Tests marked ``cuda`` skip cleanly on machines without a GPU."""
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not _cuda_available():
            item.add_marker(skip)


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
