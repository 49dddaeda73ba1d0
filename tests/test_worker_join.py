"""``autotune worker`` joining a study whose creating run has not stored its search space yet.

The creating run stores the recipe when it opens the study and the space after its batch-boundary
search (minutes). Fake clock and sleep here; the real concurrent run + worker is in
tests/test_postgres.py.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.errors import InputError
from autotune.recipe import load_recipe
from autotune.tuner import SPACE_POLL_S, join_study
from tests.conftest import run_cli
from tests.test_cli import tiny


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _study_with_recipe_only(write_recipe, tmp_path: Path) -> tuple[str, optuna.Study]:
    recipe = load_recipe(tiny(write_recipe, variants='["eager"]'))
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    study.set_user_attr("recipe", recipe.to_dict())
    return storage, study


def test_worker_waits_for_the_space_within_its_budget_then_says_why(write_recipe, tmp_path: Path) -> None:
    storage, _ = _study_with_recipe_only(write_recipe, tmp_path)
    fake = FakeTime()
    with pytest.raises(InputError, match="no search space yet after 7 s"):
        join_study(storage, "s", time_budget=7.0, progress=False, clock=fake.clock, sleep=fake.sleep)
    assert fake.now == pytest.approx(7.0)
    assert len(fake.sleeps) == 4 and max(fake.sleeps) <= SPACE_POLL_S  # 2 + 2 + 2 + 1


def test_worker_goes_on_once_the_space_appears(write_recipe, tmp_path: Path) -> None:
    storage, study = _study_with_recipe_only(write_recipe, tmp_path)
    fake = FakeTime()

    def sleep(seconds: float) -> None:  # the creating run finishes its boundary search meanwhile
        fake.sleep(seconds)
        if len(fake.sleeps) == 2:
            study.set_user_attr("space", {})
            study.set_user_attr("specs", {})

    outcome = join_study(storage, "s", time_budget=60.0, progress=False, clock=fake.clock, sleep=sleep)
    assert len(fake.sleeps) == 2
    assert outcome.measured_this_run == 0 and outcome.rows == []  # an empty space: nothing to measure


def test_worker_cli_on_a_study_without_a_recipe(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=storage, study_name="foreign")
    code, _, err = run_cli("worker", "--storage", storage, "--study", "foreign", "--time-budget", "1")
    assert code == 2 and "not created by `autotune run`" in err and "Traceback" not in err
    code, _, err = run_cli("worker", "--storage", storage, "--study", "missing", "--time-budget", "1")
    assert code == 2 and "no study named 'missing'" in err
