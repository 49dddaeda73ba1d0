"""Paths that come from data are confined: a recipe's name is one directory name under ``out/``, and an empty
``--out`` is refused (issue 32: a recipe named ``/some/dir`` wrote its report and swapped out an ``artifact/``
there; ``--out ''`` wrote into the current directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.outdir import path_component
from tests.support import run_cli


@pytest.mark.parametrize(("name", "expected"), [
    ("quickstart", "quickstart"),
    ("bert-serving_v2.1", "bert-serving_v2.1"),
    ("/some/absolute/dir", "_some_absolute_dir"),
    ("../../etc", "_.._etc"),
    ("..", "run"),
    ("", "run"),
    (".hidden", "hidden"),
    ("a b\nc$(rm -rf x)", "a_b_c_rm_-rf_x_"),
    ("x" * 300, "x" * 100),
])
def test_a_recipe_name_becomes_one_safe_directory_name(name: str, expected: str) -> None:
    got = path_component(name)
    assert got == expected
    assert Path("out", got).parent == Path("out") and ".." not in Path(got).parts


@pytest.mark.worker  # a CLI process
def test_an_empty_out_is_refused_with_exit_2(tmp_path: Path) -> None:
    code, _, err = run_cli("run", str(tmp_path / "missing.toml"), "--out", "")
    assert code == 2 and "--out" in err and "empty" in err
