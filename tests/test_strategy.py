"""The bracket strategy on fake landscapes (pure: no worker, no torch, no study)."""

from __future__ import annotations

import json
import math

import pytest

from autotune.study.bracket import Arm, BracketSearch, coarse_grid, refined_batch_sizes
from tests.support import tiny_recipe


def unimodal(peak: float, top: float, width: float = 1.5):
    """Throughput that rises to ``top`` at batch ``peak`` and falls after it, on log2(b)."""
    return lambda b: top * math.exp(-((math.log2(b) - math.log2(peak)) / width) ** 2)


def drive(search: BracketSearch, value, *, limit: int = 200, sd: float = 0.01, latency=None, slo=None, explore=False,
          cost: float = 1.0):
    """Run the search against ``value(variant, batch)``; returns the proposals made.

    It stops at the end of the structured phase (the first ``explore`` proposal), as a search whose budget
    ends there would; ``explore=True`` runs it to its very end (every point measured)."""
    made = []
    for _ in range(limit):
        p = search.next()
        if p is None or (p.action == "explore" and not explore):
            break
        made.append(p)
        v = value(p.variant, p.batch_size)
        feasible = True
        if latency is not None and slo is not None:
            feasible = latency(p.variant, p.batch_size) <= slo
        search.tell(p.variant, p.batch_size, status="ok", value=v, relative_sd=sd / math.sqrt(p.fidelity),
                    feasible=feasible, cost_seconds=cost + p.fidelity, fidelity=p.fidelity)
    return made


def test_refined_sizes_put_a_point_between_powers_of_two_and_respect_granularity():
    assert refined_batch_sizes([1, 2, 4, 8, 16, 32]) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
    sizes = refined_batch_sizes([8, 16, 32, 64, 96], granularity=8)
    assert sizes == (8, 16, 24, 32, 48, 64, 80, 96)
    assert all(s % 8 == 0 for s in sizes)
    assert coarse_grid(refined_batch_sizes([1, 2, 4, 8, 16, 32, 40])) == (1, 2, 4, 8, 16, 32, 40)


def test_finds_the_peak_of_a_unimodal_curve_in_few_probes():
    sizes = refined_batch_sizes([2**i for i in range(11)])  # 1..1024, 20 points
    curve = unimodal(peak=48, top=1000.0)
    search = BracketSearch([Arm("eager", sizes, {"compiler": "eager"})])
    made = drive(search, lambda v, b: curve(b))
    probed = {p.batch_size for p in made}
    assert search.recommendation() == ("eager", 48)
    assert len(probed) <= 8, sorted(probed)  # of 20: bracketing, then refinement around 32..64


def test_refinement_respects_granularity_and_never_goes_above_the_boundary():
    sizes = refined_batch_sizes([8, 16, 32, 64, 128, 136], granularity=8)  # boundary 136 (usable max)
    curve = unimodal(peak=1000, top=500.0, width=4.0)  # still rising at the boundary
    search = BracketSearch([Arm("frozen", sizes, {"compiler": "frozen"})])
    made = drive(search, lambda v, b: curve(b))
    assert all(p.batch_size % 8 == 0 and p.batch_size <= 136 for p in made)
    assert search.recommendation() == ("frozen", 136)


def test_a_candidate_whose_ci_cannot_reach_the_leader_is_not_measured_again():
    sizes = (1, 2, 4, 8, 16, 32)
    arms = [Arm("eager", sizes, {"compiler": "eager"}), Arm("frozen", sizes, {"compiler": "frozen"})]
    search = BracketSearch(arms)
    values = {"eager": unimodal(16, 100.0), "frozen": unimodal(16, 300.0)}  # eager far behind
    made = drive(search, lambda v, b: values[v](b), sd=0.02)
    races = [p for p in made if p.action == "race"]
    assert races and all(p.variant == "frozen" for p in races)
    assert search.recommendation()[0] == "frozen"


def test_close_contenders_are_raced_to_full_fidelity():
    sizes = (1, 2, 4, 8)
    arms = [Arm("a", sizes, {"compiler": "eager"}), Arm("b", sizes, {"compiler": "frozen"})]
    search = BracketSearch(arms, screen_fraction=0.25)
    values = {"a": unimodal(8, 100.0, 3), "b": unimodal(8, 101.0, 3)}
    drive(search, lambda v, b: values[v](b), sd=0.03)
    fid = {k: p.fidelity for k, p in search.points.items()}
    assert fid[("a", 8)] >= 1.0 - 1e-9 and fid[("b", 8)] >= 1.0 - 1e-9


def test_honours_a_latency_slo_during_the_search():
    sizes = tuple(2**i for i in range(9))
    curve = unimodal(peak=256, top=1000.0, width=6)  # throughput keeps rising with the batch...
    latency = lambda v, b: 2.0 * b  # noqa: E731  # ...but the SLO (60 ms) allows b <= 16 only (32 -> 64 ms)
    search = BracketSearch([Arm("eager", sizes, {"compiler": "eager"})])
    made = drive(search, lambda v, b: curve(b), latency=latency, slo=60.0)
    assert search.recommendation() == ("eager", 16)
    # it starts at the largest batch (the throughput prior); each infeasible batch caps the variant: nothing at
    # or above the smallest infeasible batch seen so far is ever proposed again
    cap = math.inf
    for p in made:
        assert p.batch_size < cap, (p, cap)
        if latency("eager", p.batch_size) > 60.0:
            cap = min(cap, p.batch_size)
    made_all = drive(search, lambda v, b: curve(b), latency=latency, slo=60.0, explore=True)
    assert all(p.batch_size <= 16 for p in made_all)


def test_a_throughput_search_starts_at_the_preferred_batch():
    sizes = tuple(2**i for i in range(9))
    curve = unimodal(peak=32, top=1000.0, width=3)
    search = BracketSearch([Arm("eager", sizes, {"compiler": "eager"}, preferred=32)])
    assert drive(search, lambda v, b: curve(b))[0].batch_size == 32
    plain = BracketSearch([Arm("eager", sizes, {"compiler": "eager"})])
    assert drive(plain, lambda v, b: curve(b))[0].batch_size == 256


def test_latency_objective_starts_small_and_minimises():
    sizes = (1, 2, 4, 8, 16)
    search = BracketSearch([Arm("eager", sizes, {"compiler": "eager"})], objective="latency")
    made = drive(search, lambda v, b: 5.0 + b)
    assert made[0].batch_size == 1
    assert search.recommendation() == ("eager", 1)
    assert {p.batch_size for p in made} <= {1, 2}


def test_failed_variant_is_dropped_and_oom_caps_the_batch():
    sizes = (1, 2, 4, 8, 16)
    search = BracketSearch([Arm("compile", sizes, {"compiler": "compile"}), Arm("eager", sizes, {"compiler": "eager"})])
    search.tell("compile", 4, status="failed", cost_seconds=20)
    search.tell("eager", 8, status="oom", cost_seconds=1)
    assert search.allowed(search.arms["eager"]) == [1, 2, 4]
    made = drive(search, lambda v, b: 10.0 * b)
    assert all(p.variant == "eager" and p.batch_size <= 4 for p in made)


def test_cost_aware_order_screens_cheap_variants_before_an_expensive_compile():
    sizes = (1, 2, 4, 8)
    arms = [Arm("compile", sizes, {"compiler": "compile"}), Arm("eager", sizes, {"compiler": "eager"}),
            Arm("frozen", sizes, {"compiler": "frozen"})]
    search = BracketSearch(arms)
    first = search.next()
    assert first is not None and first.variant != "compile" and first.action == "screen"


@pytest.mark.parametrize("seed", range(3))
def test_per_dimension_model_predicts_an_unmeasured_combination(seed):
    sizes = (1, 2, 4)
    dims = [{"compiler": c, "threads": t} for c in ("eager", "frozen") for t in (1, 2)]
    arms = [Arm(f"{d['compiler']}+threads={d['threads']}", sizes, d) for d in dims]
    search = BracketSearch(arms)
    truth = {"eager+threads=1": 100.0, "eager+threads=2": 180.0, "frozen+threads=1": 150.0}
    for v, t in truth.items():
        search.tell(v, 4, status="ok", value=t * (1 + 0.001 * seed), relative_sd=0.01, cost_seconds=2)
    mu, _ = search._predict(search.arms["frozen+threads=2"])
    assert math.exp(mu) == pytest.approx(150 * 180 / 100, rel=0.15)


def test_recipe_names_an_unknown_strategy(write_recipe):
    from autotune.core.recipe import load_recipe
    from autotune.errors import InputError

    text = tiny_recipe().replace("[search]\n", '[search]\nstrategy = "grid"\n')
    with pytest.raises(InputError) as err:
        load_recipe(write_recipe(text))
    msg = str(err.value)
    assert "recipe.toml" in msg and "search.strategy" in msg and "bracket, tpe" in msg


# slow (~50 s): `bracket` is an opt-in, experimental strategy; the pure tests above pin its decisions.
@pytest.mark.slow
def test_the_real_tool_runs_the_bracket_strategy_end_to_end(write_recipe, tmp_path):
    """`autotune run` on the tiny model: the bracket loop measures through the study, screens short, and the
    report recommends a measured, feasible candidate; a second run on the same --out resumes from the study."""
    import optuna

    from autotune.cli import main

    recipe = write_recipe(tiny_recipe(variants='["eager", "frozen"]', batch_sizes="[1, 2, 4, 8]", max_seconds=0.4,
                                      strategy="bracket"))
    out = tmp_path / "out"
    assert main(["run", str(recipe), "--out", str(out), "--no-progress"]) == 0
    doc = json.loads((out / "report.json").read_text())
    # it does not stop while the budget lasts and points are unmeasured: 8 points, 8 trials at most
    assert doc["search"]["stopped_by"] in ("exhausted", "max_trials")
    rows = doc["candidates"]
    assert len({(r["variant"], r["batch_size"]) for r in rows}) == len(rows)  # one row per combination
    # short measurements (screens at 0.25, races of 0.25-0.5 on top); the rows are each combination's last
    assert any(r.get("search_action") in ("screen", "race", "step", "explore") and r.get("fidelity") < 1 for r in rows)
    rec = doc["recommendation"]
    assert rec is not None and (rec["variant"], rec["batch_size"]) in {(r["variant"], r["batch_size"]) for r in rows}
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}")
    assert {"variant", "batch_size"} <= set(study.trials[0].params)
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    before = len(study.trials)
    assert main(["run", str(recipe), "--out", str(out), "--no-progress"]) == 0  # resume: a few races at most
    again = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}")
    assert len(again.trials) - before <= 2


def test_does_not_stop_while_points_are_unmeasured_and_degrades_to_exhaustive():
    sizes = (1, 2, 4, 8, 16)
    arms = [Arm("eager", sizes, {"compiler": "eager"}), Arm("frozen", sizes, {"compiler": "frozen"})]
    search = BracketSearch(arms)
    values = {"eager": unimodal(4, 100.0), "frozen": unimodal(4, 200.0)}
    made = drive(search, lambda v, b: values[v](b), explore=True)
    assert search.converged
    assert {(p.variant, p.batch_size) for p in made} == {(a.name, b) for a in arms for b in sizes}
    assert search.next() is None  # only once everything is measured and no contender is left to race
    assert search.recommendation() == ("frozen", 4)


def test_explore_finds_a_second_peak_off_the_unimodal_assumption():
    sizes = refined_batch_sizes([2**i for i in range(8)])  # 1..128, 14 points

    first = unimodal(peak=64, top=100.0)

    def curve(b: int) -> float:  # a local peak at 64, a dip below it, and the real peak at batch 2
        return 150.0 if b == 2 else (120.0 if b in (1, 3) else first(b))

    search = BracketSearch([Arm("eager", sizes, {"compiler": "eager"})])
    structured = drive(search, lambda v, b: curve(b))
    assert search.recommendation() == ("eager", 64)  # the structured phase stops at the local peak...
    made = drive(search, lambda v, b: curve(b), explore=True)
    assert search.recommendation() == ("eager", 2)  # ...the explore phase goes on and finds the other one
    assert len(structured) + len(made) <= 2 * len(sizes) + 6


def test_a_single_surprising_screen_is_raced_before_it_is_trusted():
    sizes = (1, 2, 4)
    arms = [Arm("a", sizes, {"compiler": "eager"}), Arm("b", sizes, {"compiler": "frozen"})]
    search = BracketSearch(arms)
    for b in sizes:
        search.tell("a", b, status="ok", value=100.0, relative_sd=0.02, cost_seconds=2, fidelity=1.0)
    search.tell("b", 2, status="ok", value=140.0, relative_sd=0.04, cost_seconds=2, fidelity=0.25)  # a lucky screen?
    nxt = search.next()
    assert nxt is not None and (nxt.variant, nxt.batch_size, nxt.action) == ("b", 2, "race")


def test_an_export_specialised_to_its_batch_leaves_batch_1_not_a_dead_variant() -> None:
    """A ``batch_specific`` failure (the export unrolled the batch it was built at) fails every batch above 1: the
    variant is capped at batch 1, not dropped, and a plain failure still drops it."""
    arm = Arm("onnx", (1, 2, 4), {"compiler": "onnx"})
    search = BracketSearch([arm])
    search.tell("onnx", 2, status="failed", batch_specific=True)
    assert "onnx" not in search.dead and search.allowed(arm) == [1]
    search.tell("onnx", 1, status="failed")
    assert "onnx" in search.dead
