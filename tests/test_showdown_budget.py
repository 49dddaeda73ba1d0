"""The showdown keeps the time budget and a resume does not run it twice (issue 32: a quickstart with
``--time-budget 60`` staged and timed its finalists for 143 s after the budget was spent; a run interrupted in its
artifact step ran its finished showdown again on resume). The real resume is in
``test_a_resumed_run_reuses_its_finished_showdown``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.core.recipe import load_recipe
from autotune.tuner import _reusable, final_showdown
from tests.support import run_cli, search_row, tiny_recipe


def _recipe(write_recipe, budget: float = 120):
    return load_recipe(write_recipe(tiny_recipe(variants='["eager", "frozen", "compile"]', time_budget_s=budget,
                                                rounds=2, processes=1)))


def test_a_spent_budget_skips_the_showdown_and_says_so(write_recipe) -> None:
    recipe = _recipe(write_recipe)
    rows = [search_row(0, "frozen", 4), search_row(1, "eager", 4), search_row(2, "compile", 4)]
    notes: list[str] = []
    assert final_showdown(recipe, rows, left=-30.0, notes=notes) is None  # no worker is started
    assert len(notes) == 1 and notes[0].startswith("no showdown: the time budget had 0 s left")


def test_only_a_complete_showdown_of_the_same_leading_finalists_is_reused() -> None:
    done = {"finalists": ["frozen@4", "compile@4"], "verdict": {"pick": "frozen@4"}, "rounds_run": 4}
    assert _reusable(done, ["frozen@4", "compile@4", "eager@4"])
    assert not _reusable(done, ["compile@4", "frozen@4"])  # another leader: the search changed its ranking
    assert not _reusable({**done, "complete": False}, ["frozen@4", "compile@4"])  # rounds of an interrupted one
    assert not _reusable({**done, "verdict": None}, ["frozen@4", "compile@4"])
    assert not _reusable(None, ["frozen@4"])


def test_a_stored_showdown_is_returned_without_running_and_noted(write_recipe) -> None:
    recipe = _recipe(write_recipe)
    rows = [search_row(0, "frozen", 4), search_row(1, "eager", 4)]
    stored = {"finalists": ["frozen@4", "eager@4"], "verdict": {"pick": "frozen@4"}, "rounds_run": 4}
    notes: list[str] = []
    got = final_showdown(recipe, rows, left=-30.0, stored=stored, notes=notes)
    assert got is not None and got["reused"] is True and got["finalists"] == stored["finalists"]
    assert "reused" in notes[0] and "nothing is measured twice" in notes[0]


@pytest.mark.worker
def test_a_resumed_run_reuses_its_finished_showdown(write_recipe, tmp_path: Path) -> None:
    """A finished run, run again on the same --out: its search measures nothing and its showdown is the stored
    one (the same rounds, marked reused), not a second one."""
    recipe = write_recipe(tiny_recipe(variants='["eager", "frozen"]', batch_sizes="[2]", rounds=2,
                                      round_seconds=0.1, processes=1))
    out = tmp_path / "out"
    code, _, err = run_cli("run", str(recipe), "--out", str(out), "--no-progress")
    assert code == 0, err
    first = json.loads((out / "report.json").read_text())["showdown"]
    code, _, err = run_cli("run", str(recipe), "--out", str(out), "--no-progress")
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    assert doc["search"]["measured_this_run"] == 0
    assert doc["showdown"]["reused"] is True
    assert doc["showdown"]["seconds_per_call"] == first["seconds_per_call"]
    assert any("nothing is measured twice" in n for n in doc["notes"])
    assert "showdown: reused" in err
