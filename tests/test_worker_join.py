"""``autotune worker`` joining a study whose creating run has not stored its search space yet.

The creating run stores its fingerprint when it opens the study and the space after its batch-boundary
search (minutes). Fake clock and sleep here; the real concurrent run + worker is in tests/test_postgres.py,
the fingerprint and trust checks in tests/test_study_safety.py.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.core.recipe import Recipe, load_recipe
from autotune.errors import InputError
from autotune.study import open_study, study_fingerprint
from autotune.tuner import SPACE_POLL_S, _settings, join_study
from tests.support import run_cli, tiny

pytestmark = pytest.mark.worker  # starts worker or CLI processes: not in `make test-fast`


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _study_without_space(write_recipe, tmp_path: Path) -> tuple[Recipe, str, optuna.Study]:
    """A study as `autotune run` leaves it while it probes batch boundaries: fingerprint stored, no space yet."""
    recipe = load_recipe(tiny(write_recipe, variants='["eager"]'))
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    settings = _settings(recipe, storage=storage, study_name="s", time_budget=0.0,
                         fingerprint=study_fingerprint(recipe, "cpu"))
    return recipe, storage, open_study(settings, recipe_data=recipe.to_dict())


def test_worker_waits_for_the_space_within_its_budget_then_says_why(write_recipe, tmp_path: Path) -> None:
    recipe, storage, _ = _study_without_space(write_recipe, tmp_path)
    fake = FakeTime()
    with pytest.raises(InputError, match="no search space yet after 7 s"):
        join_study(recipe, storage, "s", time_budget=7.0, clock=fake.clock, sleep=fake.sleep)
    assert fake.now == pytest.approx(7.0)
    assert len(fake.sleeps) == 4 and max(fake.sleeps) <= SPACE_POLL_S  # 2 + 2 + 2 + 1


def test_worker_goes_on_once_the_space_appears(write_recipe, tmp_path: Path) -> None:
    recipe, storage, study = _study_without_space(write_recipe, tmp_path)
    fake = FakeTime()

    def sleep(seconds: float) -> None:  # the creating run finishes its boundary search meanwhile
        fake.sleep(seconds)
        if len(fake.sleeps) == 2:
            study.set_user_attr("space", {})
            study.set_user_attr("specs", {})

    outcome = join_study(recipe, storage, "s", time_budget=60.0, clock=fake.clock, sleep=sleep)
    assert len(fake.sleeps) == 2
    assert outcome.measured_this_run == 0 and outcome.rows == []  # an empty space: nothing to measure


def test_worker_cli_on_a_study_not_made_by_autotune_run(write_recipe, tmp_path: Path) -> None:
    recipe = tiny(write_recipe, variants='["eager"]')
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=storage, study_name="foreign")
    code, _, err = run_cli("worker", str(recipe), "--storage", storage, "--study", "foreign", "--time-budget", "1")
    assert code == 2 and "not created by `autotune run`" in err and "refusing to join" in err, err
    assert "Traceback" not in err
    code, _, err = run_cli("worker", str(recipe), "--storage", storage, "--study", "missing", "--time-budget", "1")
    assert code == 2 and "no study named 'missing'" in err
    code, _, err = run_cli("worker", str(recipe), "--storage", storage, "--time-budget", "1")  # study: the recipe name
    assert code == 2 and "no study named 'tiny'" in err
    code, _, err = run_cli("worker", "--storage", storage, "--study", "foreign")  # the recipe is required
    assert code == 2 and "recipe" in err
