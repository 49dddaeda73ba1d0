"""A model whose every output is NaN is not recommended: each candidate fails the gate with the reason, the run
ends with no feasible configuration (exit 1), and the report says why (issue 32: it was recommended without a
word). The gate's rule itself is tested in test_correctness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_cli, tiny_recipe

pytestmark = pytest.mark.worker


def test_an_all_nan_model_is_never_recommended(write_recipe, tmp_path: Path) -> None:
    text = tiny_recipe(variants='["eager", "frozen"]', batch_sizes="[2]", rounds=0).replace(
        "broken.py:tiny", "broken.py:all_nan")
    code, out, err = run_cli("run", str(write_recipe(text)), "--out", str(tmp_path / "out"), "--no-progress")
    assert code == 1, out + err
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["recommendation"] is None
    rows = [r for r in doc["candidates"] if r.get("batch_size") == 2]
    assert rows and all(r["status"] != "ok" or not r.get("feasible") for r in rows)
    assert any("NaN/inf throughout" in str(r.get("reason")) for r in rows)
