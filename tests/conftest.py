from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(__file__).resolve().parent / "models"
SHARED_TRACES = ROOT.parent / "shared" / "warmup-traces"


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


def tiny_recipe(*, name: str = "tiny", kwargs: str = "", variants: str = '["eager", "frozen"]',
                batch_sizes: str = "[1, 4]", time_budget_s: float = 120, max_seconds: float = 0.4,
                ci_target: float = 0.05, rounds: int = 2, round_seconds: float = 0.1, processes: int = 1,
                strategy: str | None = None) -> str:
    """TOML of a recipe for the tiny conv model in tests/models/broken.py (list fields as TOML text)."""
    return f"""
name = "{name}"
device = "cpu"
[model]
factory = "@MODELS@/broken.py:tiny"
{kwargs}
[[inputs]]
name = "x"
shape = [3, 8, 8]
[search]
variants = {variants}
batch_sizes = {batch_sizes}
time_budget_s = {time_budget_s}
{f'strategy = "{strategy}"' if strategy else ""}
[measure]
max_seconds = {max_seconds}
ci_target = {ci_target}
rounds = {rounds}
round_seconds = {round_seconds}
processes = {processes}
"""


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run the CLI in a subprocess (real process, real exit code)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)
    return proc.returncode, proc.stdout, proc.stderr


#: test_cli's tiny recipe with ``{kwargs}`` and ``{variants}`` left to fill (also used by test_worker_join).
TINY = tiny_recipe(kwargs="{kwargs}", variants="{variants}")


def tiny(write_recipe, *, kwargs: str = "", variants: str = '["eager", "frozen"]', extra: str = "") -> Path:
    return write_recipe(TINY.format(kwargs=kwargs, variants=variants) + extra)


#: Throughput (items/s at batch 0) of each variant in the search's fake rows.
SEARCH_SPEED = {"eager": 100.0, "frozen": 180.0, "compile": 150.0, "broken": 1.0}


def search_row(trial: int, variant: str, batch: int, *, latency_ms: float | None = None) -> dict[str, Any]:
    status = "failed" if variant == "broken" else "ok"
    tput = SEARCH_SPEED[variant] * (1 + batch / 64)
    lat = latency_ms if latency_ms is not None else batch / tput * 1e3
    return {
        "trial": trial, "variant": variant, "batch_size": batch, "status": status,
        "reason": "boom" if status == "failed" else None, "feasible": status == "ok", "violations": [],
        "throughput": tput if status == "ok" else None,
        "latency_ms": {"mean": lat, "p50": lat, "p90": lat, "p99": lat} if status == "ok" else None,
        "peak_memory_bytes": batch * 1000, "classification": "flat",
    }


FakeRow = Callable[..., dict[str, Any]]


@pytest.fixture
def fake_row() -> FakeRow:
    """``fake_row(trial, variant, batch, *, latency_ms=None)``: the row a search's evaluate would return, made up
    without a worker (faster variants: SEARCH_SPEED; variant "broken" fails). For test_search and test_postgres."""
    return search_row
