"""The time budget split up front (autotune.core.budget, issue 32): pure arithmetic, then what a run's report says
of it (the real runs that spend it are in tests/test_artifact.py and tests/test_cli.py)."""

from __future__ import annotations

import pytest

from autotune.core.budget import (
    ARTIFACT_SHARE_CAP,
    MIN_CHECK_ROUNDS,
    OVERRUN,
    ROUND_OVERHEAD_S,
    SEARCH_SHARE,
    BudgetPlan,
    artifact_reserve,
    check_round_seconds,
    check_rounds_that_fit,
)
from autotune.report.analysis import budget_summary
from autotune.report.schema import validate_report


def test_a_check_round_is_a_plain_process_and_the_tools_slice() -> None:
    plain = check_round_seconds(2.5, seconds=1.5, warm_s=1.0, paired=False)
    assert plain == pytest.approx(2.5 + 1.0 + 1.5 + ROUND_OVERHEAD_S)
    assert check_round_seconds(2.5, seconds=1.5, warm_s=1.0, paired=True) == pytest.approx(plain + 1.5)


def test_a_check_round_of_an_artifact_that_compiles_on_load_counts_the_compile() -> None:
    """A torch.compile artifact is the code that builds it: each plain process compiles again. A BART's check was
    sized as if it did not (68 s left, two paired rounds planned) and took 100 s, past the run's promise (session
    38); with the load counted, no round fits and the check is skipped, as its note then says."""
    from autotune.core.budget import check_rounds_that_fit

    fast = check_round_seconds(5.0, seconds=1.5, warm_s=1.0, paired=True)
    compiling = check_round_seconds(5.0, seconds=1.5, warm_s=1.0, paired=True, load_s=41.0)
    assert compiling == pytest.approx(fast + 41.0)
    assert check_rounds_that_fit(68.0, wanted=5, round_s=fast, staging_s=46.0) == (2, True)
    assert check_rounds_that_fit(68.0, wanted=5, round_s=compiling, staging_s=46.0) == (0, False)


def test_the_artifact_reserve_covers_build_and_check_but_never_more_than_its_cap() -> None:
    no_check = artifact_reserve(1000.0, startup_s=3.0, check_rounds=0, seconds=1.5, warm_s=1.0, build_s=6.0)
    assert no_check == pytest.approx(9.0)
    five = artifact_reserve(1000.0, startup_s=3.0, check_rounds=5, seconds=1.5, warm_s=1.0, build_s=6.0)
    assert five == pytest.approx(9.0 + 9.0 + 5 * check_round_seconds(3.0, seconds=1.5, warm_s=1.0, paired=True))
    assert artifact_reserve(60.0, startup_s=3.0, check_rounds=5, seconds=1.5, warm_s=1.0) == \
        pytest.approx(ARTIFACT_SHARE_CAP * 60.0)


def test_the_plan_gives_the_search_its_share_of_what_the_reserve_leaves() -> None:
    plan = BudgetPlan(total_s=100.0, started=1000.0, artifact_s=20.0)
    assert plan.deadline == 1100.0 and plan.promise == pytest.approx(1000.0 + 100.0 * (1 + OVERRUN))
    # 10 s of validation: 70 s before the reserve, the search its share when a showdown follows
    assert plan.before_artifact(1010.0) == pytest.approx(70.0)
    assert plan.search_seconds(1010.0, showdown=True) == pytest.approx(70.0 * SEARCH_SHARE)
    assert plan.search_seconds(1010.0, showdown=False) == pytest.approx(70.0)
    assert plan.search_seconds(1200.0, showdown=True) == 0.0  # spent: never negative


@pytest.mark.parametrize(("left", "wanted", "expect"), [
    (200.0, 5, (5, True)),   # everything fits
    (40.0, 5, (3, True)),    # (40 - 10) // 8 = 3 paired rounds
    (20.0, 5, (3, False)),   # 1 paired round would fit: plain rounds instead (20 // 6)
    (10.0, 5, (0, False)),   # not even two plain rounds
    (200.0, 0, (0, False)),  # no check asked for
])
def test_check_rounds_are_sized_to_the_time_left(left: float, wanted: int, expect: tuple[int, bool]) -> None:
    assert check_rounds_that_fit(left, wanted=wanted, round_s=8.0, staging_s=10.0) == expect


def test_fewer_than_the_minimum_rounds_are_never_run() -> None:
    for left in range(0, 200):
        rounds, _ = check_rounds_that_fit(float(left), wanted=5, round_s=8.0, staging_s=10.0)
        assert rounds == 0 or MIN_CHECK_ROUNDS <= rounds <= 5


def _doc(budget: dict[str, object]) -> dict[str, object]:
    return {"schema": 2, "recipe": {"name": "r"}, "environment": {}, "search": {}, "candidates": [],
            "recommendation": None, "budget": budget}


def test_the_report_says_the_time_against_the_budget_and_its_promise() -> None:
    plan = BudgetPlan(total_s=60.0, started=0.0, artifact_s=18.0)
    within = plan.to_dict({"validation": 7.0, "search": 30.0, "showdown": 12.0, "artifact": 16.0}, 65.0)
    validate_report(_doc(within))
    text = budget_summary(_doc(within))
    assert text is not None
    assert text.startswith("65 s of a 60-s budget (within its promise of 75 s)")
    assert "validation 7 s, search 30 s, showdown 12 s, artifact 16 s" in text
    over = plan.to_dict({"search": 80.0, "serving": 45.0}, 80.0)
    assert over["within_promise"] is False
    text = budget_summary(_doc(over))
    assert text is not None and "OVER its promise of 75 s" in text and "serving 45 s (its own budget)" in text
    # with the stage's own budget known (the recipe's [serving]), its line says it and its promise (+10% to hold)
    served = dict(_doc(over), recipe={"name": "r", "serving": {"time_budget_s": 40.0}})
    assert "then serving 45 s of its own 40-s budget (OVER its promise of 44 s)" in (budget_summary(served) or "")
    served["recipe"]["serving"]["time_budget_s"] = 41.0  # type: ignore[index]
    assert "then serving 45 s of its own 41-s budget (within its promise of 45 s)" in (budget_summary(served) or "")
    over_by_a_little = dict(_doc(plan.to_dict({"search": 30.0, "serving": 66.4}, 60.0)),
                            recipe={"name": "r", "serving": {"time_budget_s": 60.0}})
    # (the MLM's report said "serving 66 s of its own 60-s budget (OVER its promise of 66 s)")
    assert "then serving 66.4 s of its own 60-s budget (OVER its promise of 66.0 s)" in \
        (budget_summary(over_by_a_little) or "")
    assert budget_summary(_doc({"phases": "x"})) is None  # an older or damaged section: no line, no traceback


def test_a_search_starts_a_candidate_only_while_half_a_typical_one_fits() -> None:
    from autotune.core.budget import worth_starting

    assert worth_starting(5.0, [])  # the first candidate always (the share is not spent)
    assert not worth_starting(0.0, []) and not worth_starting(-1.0, [4.0])
    assert worth_starting(12.0, [24.0, 20.0, 30.0])  # half of the median (24 s) fits
    assert not worth_starting(3.0, [24.0, 24.0])  # the busy-neighbour case: 3 s left of a 24-s candidate


def test_a_showdown_process_is_staged_in_what_this_runs_candidates_took() -> None:
    from autotune.core.budget import staging_seconds

    assert staging_seconds([], [], max_seconds=3.0) == 5.0  # nothing measured: the old constant
    assert staging_seconds([8.0, 7.5, 9.0], [0.8, 1.0], max_seconds=3.0) == 5.0  # a quiet machine: the floor
    assert staging_seconds([22.0], [0.8], max_seconds=3.0) == pytest.approx(18.2)  # beside a busy neighbour


def test_variants_the_budget_never_reached_are_named() -> None:
    """The search screens the variants in the recipe's order; one the budget never reached has no row, and the run
    says so instead of leaving it out of every table (a segmentation model's openvino, session 32)."""
    from autotune.study.space import SearchOutcome
    from autotune.tuner import unmeasured_note

    rows = [{"variant": v, "status": "ok"} for v in ("eager", "script", "onnx")] + [
        {"variant": "trace", "status": "failed"}]
    variants = ("eager", "script", "trace", "onnx", "openvino")

    def outcome(stopped_by: str) -> SearchOutcome:
        return SearchOutcome(rows=rows, stopped_by=stopped_by, wall_seconds=1.0, sampler="tpe", measured_this_run=4,
                             trials=4)

    note = unmeasured_note(variants, outcome("time_budget"))
    assert note is not None and note.startswith("never measured: openvino (the search's time budget ran out")
    assert "trace" not in note  # a failed variant has its row, and its reason, in the tables
    assert unmeasured_note(variants, outcome("exhausted")) is None
    assert unmeasured_note(("eager", "script", "trace", "onnx"), outcome("time_budget")) is None
    many = unmeasured_note(tuple(f"v{i}" for i in range(11)), outcome("time_budget"))
    assert many is not None and "v7 and 3 more" in many
