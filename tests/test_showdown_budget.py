"""The showdown keeps the time budget and a resume does not run it twice (issue 32: a quickstart with
``--time-budget 60`` staged and timed its finalists for 143 s after the budget was spent; a run interrupted in its
artifact step ran its finished showdown again on resume). The real resume is in
``tests/test_cli.py::test_resume_does_not_remeasure``."""

from __future__ import annotations

from autotune.core.recipe import load_recipe
from autotune.tuner import _reusable, final_showdown
from tests.support import search_row, tiny_recipe


def _recipe(write_recipe, budget: float = 120):
    return load_recipe(write_recipe(tiny_recipe(variants='["eager", "frozen", "compile"]', time_budget_s=budget,
                                                rounds=2, processes=1)))


def test_a_spent_budget_skips_the_showdown_and_says_so(write_recipe) -> None:
    recipe = _recipe(write_recipe)
    rows = [search_row(0, "frozen", 4), search_row(1, "eager", 4), search_row(2, "compile", 4)]
    notes: list[str] = []
    assert final_showdown(recipe, rows, left=-30.0, notes=notes) is None  # no worker is started
    assert len(notes) == 1 and notes[0].startswith("no showdown: the time budget had 0 s left")


def test_a_showdown_short_of_time_runs_with_fewer_processes_and_says_so(write_recipe, monkeypatch) -> None:
    """Fewer fresh processes per finalist before no showdown at all (the pure rule: test_showdown_shipped.py; a real
    showdown with one process per finalist: the shared run of tests/conftest.py)."""
    import autotune.showdown

    recipe = load_recipe(write_recipe(tiny_recipe(variants='["eager", "frozen"]', time_budget_s=120, rounds=6,
                                                  round_seconds=0.5, processes=3)))
    rows = [search_row(0, "frozen", 4), search_row(1, "eager", 4)]
    ran: list[int] = []
    monkeypatch.setattr(autotune.showdown, "run_showdown",
                        lambda finalists, *, settings, **_: ran.append(settings.processes) or {"processes": 1})
    notes: list[str] = []
    # built stagings of 5 s: 3 processes each 2 x 3 x (5 + 1) + 6 x 0.5 x 2 = 42 s, 2 each 30 s; 32 s allowed
    # (2 s left + 0.25 x the 120-s budget)
    doc = final_showdown(recipe, rows, left=2.0, startup_s=5.0, notes=notes)
    assert doc is not None and doc["processes_asked"] == 3  # the report's sentence says why 2 (test_showdown.py)
    assert ran == [2] and len(notes) == 1
    assert "staged 2 processes per finalist, not measure.processes = 3" in notes[0]
    notes.clear()
    assert final_showdown(recipe, rows, left=-20.0, startup_s=5.0, notes=notes) is None  # 10 s allowed: not even 1
    assert ran == [2] and "(one process each)" in notes[0]


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


def test_quiet_rounds_auto_stops_the_others_only_beside_a_spinning_runtime() -> None:
    """ONNX Runtime and OpenVINO pools spin when idle (a fifth of the rounds disturbed beside them); torch pairs'
    CIs came out wider stopped and continued (BENCHMARKS, "Quiet rounds"): "auto" stops the others only when a
    finalist is a runtime; true and false are as given."""
    from autotune.tuner import quiet_rounds

    torch_pair = [{"variant": "eager"}, {"variant": "frozen+channels_last"}]
    with_runtime = [{"variant": "frozen"}, {"variant": "openvino:throughput"}]
    assert quiet_rounds("auto", with_runtime) and quiet_rounds("auto", [{"variant": "onnx+int8"}])
    assert not quiet_rounds("auto", torch_pair)
    assert quiet_rounds(True, torch_pair) and not quiet_rounds(False, with_runtime)
