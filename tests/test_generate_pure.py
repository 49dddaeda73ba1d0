"""The generate pipeline's pure parts: the ``[generate]`` table, the configurations, the token check, a point's
statistics and the pick. The real thing (workers, transformers, the artifact) is tests/test_generate_e2e.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from autotune.core.recipe import Recipe, parse_recipe
from autotune.errors import RecipeError
from autotune.generate.agreement import check_tokens, wilson_low
from autotune.generate.configs import GenerateConfig, from_label, grid, reference, simplicity
from autotune.generate.points import point_from, ratio_ci
from autotune.generate.search import GenerateSearch, PointResult

PATH = Path("/tmp/r.toml")


def _recipe(**generate: Any) -> Recipe:
    return parse_recipe({"model": {"factory": "m.py:f"}, "generate": generate}, path=PATH)


# ---- the recipe ------------------------------------------------------------------------------------------


def test_a_generate_table_needs_no_inputs_and_survives_its_json_form() -> None:
    r = _recipe(prompt_lengths=[40, 16, 16], new_tokens=[8, 4], cache="static", compile=["none", "default"],
                concurrency=[4, 1], max_itl_ms=50)
    assert r.inputs == () and r.generate is not None
    assert r.generate.prompt_lengths == (16, 40) and r.generate.new_tokens == (4, 8)
    assert r.generate.concurrency == (1, 4) and r.generate.cache == ("static",)
    assert Recipe.from_dict(r.to_dict()) == r
    assert "generate" not in parse_recipe({"model": {"factory": "m.py:f"}, "inputs": [{"shape": [3]}]},
                                          path=PATH).to_dict()


@pytest.mark.parametrize(("table", "words"), [
    ({"compile": "default", "cache": "dynamic"}, ["generate.compile", "static"]),
    ({"precisions": ["fp32", "bf61"]}, ["generate.precisions[1]", "bf16"]),
    ({"cache": "paged"}, ["generate.cache", "allowed: dynamic, static"]),
    ({"token_agreement": 1.5}, ["generate.token_agreement", "(0, 1]"]),
    ({"prompts_kwargs": {"n": 3}}, ["generate.prompts_kwargs", "generate.prompts"]),
    ({"prompts": "nofunction"}, ["generate.prompts", "factory reference"]),
    ({"new_tokens": 0}, ["generate.new_tokens", "positive integer"]),
    ({"prompt_lengths": [10, 100000]}, ["generate.prompt_lengths", "limit"]),
    ({"concurrency": "many"}, ["generate.concurrency", "auto"]),
    ({"max_tokens": 3}, ["generate.max_tokens", "unknown key"]),
    ({"threads": [0]}, ["generate.threads[0]", "positive integer"]),
])
def test_a_bad_generate_table_names_the_file_the_field_and_what_is_allowed(table: dict[str, Any],
                                                                          words: list[str]) -> None:
    with pytest.raises(RecipeError) as err:
        _recipe(**table)
    assert str(PATH) in str(err.value)
    for w in words:
        assert w in str(err.value)


# ---- the configurations ----------------------------------------------------------------------------------


def test_the_grid_starts_with_the_reference_and_compiles_only_a_static_cache() -> None:
    r = _recipe(cache=["static", "dynamic"], compile=["none", "default"], attention=["eager", "sdpa"],
                precisions=["int8", "fp32"])
    assert r.generate is not None
    configs = grid(r.generate)
    assert configs[0] == reference(r.generate) == GenerateConfig()
    assert all(c.cache == "static" for c in configs if c.compile != "none")
    assert len(configs) == len(set(configs)) == 2 * 2 * 2 + 2 * 2  # static x 2 modes, dynamic x none
    for c in configs:
        assert from_label(c.label()) == c
    assert simplicity(GenerateConfig()) < simplicity(GenerateConfig("static", "default"))
    assert reference(_recipe(attention="eager").generate).attention == "eager"  # type: ignore[arg-type]
    threaded = grid(_recipe(cache="dynamic", threads=[2, 1]).generate)  # type: ignore[arg-type]
    assert [c.label() for c in threaded] == ["dynamic/sdpa/fp32", "dynamic/sdpa/fp32@1t", "dynamic/sdpa/fp32@2t"]
    assert from_label("static+compile:default/sdpa/int8@2t") == GenerateConfig("static", "default", "sdpa", "int8", 2)


# ---- the token check -------------------------------------------------------------------------------------


def test_fp32_must_agree_exactly_and_names_the_first_difference() -> None:
    ref = [[1, 2, 3, 4], [5, 6, 7, 8]]
    ok = check_tokens(ref, [[1, 2, 3, 4], [5, 6, 7, 8]], exact=True, budget=0.9)
    assert ok.passed and ok.first_difference is None and ok.prompts_identical == 2
    bad = check_tokens(ref, [[1, 2, 3, 4], [5, 6, 9, 8]], exact=True, budget=0.9)
    assert not bad.passed and bad.first_difference == (1, 2)
    assert "prompt 1, token 2" in bad.reason
    # positions after a difference are not compared: the prefix before it agrees
    assert bad.agreeing == 4 + 2 and bad.compared == 8


def test_a_lower_precision_passes_on_the_lower_end_of_its_agreement_interval() -> None:
    ref = [[t for t in range(32)] for _ in range(8)]
    near = [list(r) for r in ref]
    near[0][31] = -1  # 255 of 256 positions agree
    assert check_tokens(ref, near, exact=False, budget=0.95).passed
    few = check_tokens([[1, 2]], [[1, 2]], exact=False, budget=0.95)
    assert not few.passed and "too few" in few.reason  # 2 of 2 cannot show 95%
    assert wilson_low(2, 2) < 0.5 < wilson_low(255, 256)


# ---- a point's statistics --------------------------------------------------------------------------------


def test_a_point_counts_useful_tokens_and_leaves_the_compile_spike_out_of_the_steady_itl() -> None:
    rng = np.random.default_rng(3)
    itl = [list(0.010 + rng.normal(0, 0.0002, 31)) for _ in range(6)]
    itl[0][0] = 0.900  # a recompile in the first timed step
    raw = {"call_seconds": [0.40] * 6, "useful_tokens": [100] * 6, "generated_tokens": [128] * 6, "itl": itl,
           "ttft": [0.02] * 6, "first_call_seconds": 5.4, "recompiles": 1, "peak_memory_bytes": 2**30}
    p = point_from("static+compile:default/sdpa/fp32", 4, raw)
    assert p.tokens_per_s == pytest.approx(600 / 2.4) and p.generated_per_s == pytest.approx(768 / 2.4)
    assert p.compile_seconds == pytest.approx(5.0)
    assert p.itl.p99 < 20.0  # the 900 ms step is not the p99
    assert p.itl.p50 == pytest.approx(10.0, rel=0.05)
    assert p.tokens_per_s_ci[0] <= p.tokens_per_s <= p.tokens_per_s_ci[1]
    assert p.to_dict()["recompiles"] == 1
    r, (lo, hi) = ratio_ci([2.0, 2.1, 1.9], [1.0, 1.05, 0.95])
    assert r == pytest.approx(2.0) and lo < 2.0 < hi and lo > 1.5


def _result(label: str, c: int, rate: float, ci: tuple[float, float], status: str = "ok") -> PointResult:
    point = SimpleNamespace(tokens_per_s=rate, tokens_per_s_ci=ci, ttft=SimpleNamespace(p99=10.0),
                            itl=SimpleNamespace(p99=5.0))
    return PointResult(from_label(label), c, status, point=point)  # type: ignore[arg-type]


def test_the_pick_is_the_fastest_and_a_tie_goes_to_the_simpler_setting() -> None:
    search = GenerateSearch.__new__(GenerateSearch)
    search.spec = _recipe(max_itl_ms=8).generate  # type: ignore[assignment]
    search.progress = SimpleNamespace(points=[  # type: ignore[assignment]
        _result("dynamic/sdpa/fp32", 8, 900, (850, 950)),
        _result("static+compile:default/sdpa/fp32", 8, 940, (900, 980)),  # overlaps: the simpler one wins
        _result("static/sdpa/int8", 16, 2000, (1900, 2100), status="rejected"),  # tokens disagreed
        _result("dynamic/sdpa/fp32", 4, 500, (480, 520)),
    ])
    pick = search.pick()
    assert pick is not None and pick.config == GenerateConfig() and pick.concurrency == 8
    search.progress.points.append(_result("static/sdpa/fp32", 16, 1500, (1450, 1550)))
    assert search.pick().concurrency == 16  # type: ignore[union-attr]
    search.spec = _recipe(max_itl_ms=4).generate  # type: ignore[assignment]
    assert search.pick() is None  # every ITL p99 (5 ms) is over the limit


class _FakeClient:
    """Canned worker replies (the real op runs in tests/test_generate_e2e.py): int4 cannot be built here, static
    int8 disagrees on one token, everything else runs and agrees with the reference."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def generate(self, recipe: Any, config: dict[str, Any], c: int, **kw: Any) -> dict[str, Any]:
        cfg = GenerateConfig.from_dict(config)
        self.calls.append((cfg.label(), c))
        if cfg.precision == "int4":
            return {"status": "failed", "reason": "int4 weight-only (torchao) needs a CUDA GPU"}
        tokens = [[i, i + 1, i + 2, i + 3] for i in range(4)]
        if cfg.precision == "int8" and cfg.cache == "static":
            tokens[2][3] = -1
        rate = 100.0 * c * (1.3 if cfg.cache == "static" else 1.0)
        return {"status": "ok", "reason": "", "model": {"vocab_size": 10}, "ttft": [0.01] * 3,
                "itl": [[0.002] * 5] * 3, "call_seconds": [4 * c / rate] * 3, "useful_tokens": [4 * c] * 3,
                "generated_tokens": [4 * c] * 3, "tokens": tokens, "first_call_seconds": 0.1, "recompiles": 0,
                "peak_memory_bytes": 2**20}


def test_the_search_checks_tokens_per_concurrency_and_tries_a_broken_configuration_once() -> None:
    recipe = _recipe(concurrency=[1, 4], cache=["dynamic", "static"], precisions=["fp32", "int8", "int4"],
                     token_agreement=0.5, rounds=0)
    client = _FakeClient()
    search = GenerateSearch(client, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                            limit=None, limit_source="none")
    prog = search.run()
    by = {(p.config.label(), p.concurrency): p for p in prog.points}
    # the reference's curve first (1, then 4), then the others at its best level first: 4 sequences
    assert client.calls[:3] == [("dynamic/sdpa/fp32", 1), ("dynamic/sdpa/fp32", 4), ("dynamic/sdpa/int8", 4)]
    assert sum(1 for label, _ in client.calls if label.endswith("int4")) == 2  # dynamic and static, at c = 4 only
    skipped = by[("dynamic/sdpa/int4", 1)]
    assert skipped.status == "skipped" and "failed at 4 sequences" in skipped.reason
    assert by[("static/sdpa/fp32", 4)].status == "ok" and by[("static/sdpa/fp32", 4)].check.passed  # type: ignore[union-attr]
    # int8 is judged on its budget: one differing token at position 3 of 16 still passes a 50% budget
    assert by[("static/sdpa/int8", 4)].check.first_difference == (2, 3)  # type: ignore[union-attr]
    assert prog.pick is not None and prog.pick.config.cache == "static" and prog.pick.concurrency == 4


class _CurveClient(_FakeClient):
    """tokens/s grows with the concurrency (100 per sequence), and so does the inter-token latency (1 ms per
    sequence): a latency limit makes the highest levels ineligible."""

    def __init__(self, ref_oom_at: int = 0) -> None:
        super().__init__()
        self.ref_oom_at = ref_oom_at

    def generate(self, recipe: Any, config: dict[str, Any], c: int, **kw: Any) -> dict[str, Any]:
        if c == self.ref_oom_at and GenerateConfig.from_dict(config).cache == "dynamic":
            self.calls.append((GenerateConfig.from_dict(config).label(), c))
            return {"status": "oom", "reason": "out of memory (fake)"}
        out = super().generate(recipe, config, c, **kw)
        if out["status"] == "ok":
            out["itl"] = [[c / 1000.0] * 5] * 3
        return out


def test_the_other_configurations_visit_the_levels_where_the_reference_yields_most_first() -> None:
    """A budget spent from 1 sequence up ran out before a Pythia's 16-64 (session 38): the reference's curve comes
    first, then every other configuration at its best eligible level, down, and the levels over the ITL limit
    last."""
    from autotune.generate.search import levels_by_yield

    recipe = _recipe(concurrency=[1, 2, 4, 8, 16], cache=["dynamic", "static"], max_itl_ms=10, rounds=0)
    client = _CurveClient()
    search = GenerateSearch(client, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                            limit=None, limit_source="none")
    prog = search.run()
    ref, other = [c for label, c in client.calls if label == "dynamic/sdpa/fp32"], \
        [c for label, c in client.calls if label == "static/sdpa/fp32"]
    assert ref == [1, 2, 4, 8, 16] and other == [8, 4, 2, 1, 16]
    assert client.calls.index(("static/sdpa/fp32", 8)) == 5  # right after the curve
    assert [p.concurrency for p in prog.points] == sorted(p.concurrency for p in prog.points)  # tables by level
    assert prog.pick is not None and prog.pick.concurrency == 8  # 16 is over the limit
    refs = {p.concurrency: p for p in prog.points if p.config.label() == "dynamic/sdpa/fp32"}
    del refs[2]  # a level where the reference did not run goes last, with the ineligible ones
    assert levels_by_yield([1, 2, 4, 8, 16], refs, search.eligible) == [8, 4, 1, 2, 16]
    # where the reference itself did not run, the others are not measured: nothing to check their tokens against
    client = _CurveClient(ref_oom_at=4)
    prog = GenerateSearch(client, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                          limit=None, limit_source="none").run()
    assert ("static/sdpa/fp32", 4) not in client.calls
    assert any(p.concurrency == 4 and p.status == "skipped" and "reference did not run at 4" in p.reason
               for p in prog.points)


class _SlowClient(_FakeClient):
    """Each point takes ``seconds`` of wall time, as a fresh process does."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def generate(self, recipe: Any, config: dict[str, Any], c: int, **kw: Any) -> dict[str, Any]:
        import time

        time.sleep(self.seconds)
        return super().generate(recipe, config, c, **kw)


def test_the_grid_leaves_time_for_two_side_by_side_rounds() -> None:
    """A Pythia's and a Phi-3's grids spent the whole budget and their rounds ran 0 and 1 of 3, "so the pick rests
    on its screen" (session 38): the grid now stops where two rounds of the pick and the reference still fit."""
    from autotune.generate.search import rounds_reserve

    assert rounds_reserve(3, 10.0) == 40.0 and rounds_reserve(1, 10.0) == 0.0 and rounds_reserve(3, 0.0) == 0.0
    recipe = _recipe(concurrency=[1, 4], cache=["dynamic", "static"], precisions=["fp32", "int8"], threads=[1, 2],
                     time_budget_s=1.6, rounds=3)
    prog = GenerateSearch(_SlowClient(0.1), recipe, on_point=lambda _p: None,  # type: ignore[arg-type]
                          say=lambda _t: None, limit=None, limit_source="none").run()
    assert prog.stopped_by == "time_budget"
    assert any("kept for the side-by-side rounds" in p.reason for p in prog.points if p.status == "skipped")
    assert prog.rounds is not None and prog.rounds["comparisons"], prog.rounds


class _NoAttentionClient(_FakeClient):
    """A model with no attention to choose (Mamba): sdpa is refused as the worker refuses it, eager runs."""

    def generate(self, recipe: Any, config: dict[str, Any], c: int, **kw: Any) -> dict[str, Any]:
        if GenerateConfig.from_dict(config).attention == "sdpa":
            self.calls.append((GenerateConfig.from_dict(config).label(), c))
            return {"status": "failed", "reason": "attention 'sdpa': MambaForCausalLM does not support it",
                    "unsupported": True}
        return super().generate(recipe, config, c, **kw)


def test_a_model_without_the_first_attention_gets_the_next_as_its_reference() -> None:
    """The reference is sdpa when the recipe lists it; a model that lacks it (the worker says ``unsupported``)
    gets the next attention as its reference instead of ending the run, and no other sdpa configuration is built
    (a Mamba's run recommended nothing before, session 32)."""
    recipe = _recipe(concurrency=[1, 4], cache=["dynamic", "static"], attention=["sdpa", "eager"], rounds=0)
    client = _NoAttentionClient()
    search = GenerateSearch(client, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                            limit=None, limit_source="none")
    prog = search.run()
    assert prog.stopped_by != "reference_failed" and prog.reference == "dynamic/eager/fp32"
    assert search.ref == from_label("dynamic/eager/fp32")
    assert [label for label, _ in client.calls if "sdpa" in label] == ["dynamic/sdpa/fp32"]  # tried once
    by = {(p.config.label(), p.concurrency): p for p in prog.points}
    assert by[("static/sdpa/fp32", 1)].status == "skipped" and ("static/sdpa/fp32", 4) not in by
    assert by[("static/eager/fp32", 4)].check.passed  # type: ignore[union-attr]  # checked against eager
    assert prog.pick is not None and prog.pick.config.attention == "eager"
    assert any("does not support sdpa" in n for n in prog.notes)


def test_a_model_with_none_of_the_recipes_attentions_runs_every_configuration_with_its_own() -> None:
    """The default ``attention = ["sdpa"]`` on a Mamba: the reference falls back to eager (what transformers gives a
    model without sdpa), and every configuration of the grid is measured with it, not skipped; the note says so
    (the run recommended nothing before, session 38)."""
    recipe = _recipe(concurrency=[1, 4], cache=["dynamic", "static"], rounds=0)
    assert recipe.generate.attention == ("sdpa",)
    client = _NoAttentionClient()
    search = GenerateSearch(client, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                            limit=None, limit_source="none")
    prog = search.run()
    assert prog.reference == "dynamic/eager/fp32"
    assert [label for label, _ in client.calls if "sdpa" in label] == ["dynamic/sdpa/fp32"]
    by = {(p.config.label(), p.concurrency): p for p in prog.points}
    assert by[("static/eager/fp32", 4)].status == "ok" and by[("static/eager/fp32", 4)].check.passed  # type: ignore[union-attr]
    assert not any(p.status == "skipped" for p in prog.points)
    assert prog.pick is not None and prog.pick.config.label() == "static/eager/fp32"
    assert any("supports none of the recipe's attentions (sdpa): every configuration uses its own, eager" in n
               for n in prog.notes)


def test_the_rounds_promote_a_contender_they_show_surely_faster() -> None:
    """The screen's pick was the reference; side by side another configuration was surely faster than it: that
    one is recommended (a Mamba's static cache, 1.15x, CI 1.05-1.29). Undecided, the pick stands."""
    search = GenerateSearch.__new__(GenerateSearch)
    search.spec = _recipe().generate  # type: ignore[assignment]
    ref, static = _result("dynamic/sdpa/fp32", 32, 1752, (1734, 1773)), _result("static/sdpa/fp32", 32, 1646,
                                                                                (1554, 1723))
    comparison = {"config": "static/sdpa/fp32", "against": "dynamic/sdpa/fp32", "ratio": 1.15,
                  "ratio_ci": [1.05, 1.29], "verdict": "faster", "rounds": 3}
    search.progress = SimpleNamespace(points=[ref, static], pick=ref, notes=[],  # type: ignore[assignment]
                                      rounds={"comparisons": [comparison]})
    search._settle({32: ref})
    assert search.progress.pick is static and "static/sdpa/fp32 is recommended" in search.progress.notes[0]
    search.progress = SimpleNamespace(points=[ref, static], pick=ref, notes=[],  # type: ignore[assignment]
                                      rounds={"comparisons": [{**comparison, "ratio_ci": [0.97, 1.29],
                                                               "verdict": "undecided"}]})
    search._settle({32: ref})
    assert search.progress.pick is ref and not search.progress.notes


class _ProbeClient:
    """A probe op that fits up to 100 sequences (peak linear in them) and takes ``seconds`` of wall time."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.probed = seconds, []  # type: ignore[var-annotated]

    def generate(self, recipe: Any, config: dict[str, Any], c: int, **kw: Any) -> dict[str, Any]:
        import time

        time.sleep(self.seconds)
        self.probed.append(c)
        if c > 100:
            return {"status": "oom", "reason": "out of memory (fake)"}
        return {"status": "ok", "reason": "", "fits": True, "peak_memory_bytes": 2**26 + c * 2**23,
                "baseline_bytes": 2**26, "step_seconds": 0.001}


def test_the_concurrency_boundary_stops_on_its_share_of_the_time_budget_and_says_so() -> None:
    import time

    from autotune.generate.boundary import boundary_document, find_concurrency_boundary

    recipe = _recipe(concurrency="auto", max_concurrency=128)
    ref = reference(recipe.generate)  # type: ignore[arg-type]
    limit = 2**26 + 100 * 2**23 + 2**22  # between 100 and 101 sequences
    free = find_concurrency_boundary(_ProbeClient(0.0), recipe, ref, limit=limit, upper=128)  # type: ignore[arg-type]
    assert free.stopped_by == "memory" and free.max_batch_size == 100
    client = _ProbeClient(0.05)
    capped = find_concurrency_boundary(client, recipe, ref, limit=limit, upper=128,  # type: ignore[arg-type]
                                       deadline=time.monotonic() + 0.12)
    assert capped.stopped_by == "time_cap" and len(client.probed) < len(free.probes)
    assert capped.max_batch_size in client.probed and capped.max_batch_size < 100
    doc = boundary_document(capped, limit=limit, source="budget", prompt_tokens=64, new_tokens=8, config=ref)
    assert doc["stopped_by"] == "time_cap" and "stopped on its time" in doc["sentence"]
    assert "generate.time_budget_s" in doc["sentence"] and "more may fit" in doc["sentence"]


def test_rounds_cut_short_by_the_budget_are_said_in_the_report() -> None:
    """One side-by-side round of three (the budget ran out) compares nothing: the report says the pick rests on its
    screen, in the console and in report.md; rounds that all ran add nothing."""
    from autotune.report.generate import console_lines, markdown, rounds_cut_text

    rounds = {"concurrency": 8, "rounds": {"a": [768.2], "b": [1199.9]}, "comparisons": [], "rounds_asked": 3,
              "rounds_run": 1}
    text = rounds_cut_text(rounds)
    assert text is not None and "after 1 of the 3" in text and "rests on its screen" in text
    section = {"recommendation": None, "reason": "x", "rounds": rounds}
    assert text in console_lines(section)
    assert "## Side by side" in markdown({"generate": section, "complete": True}) and text in markdown(
        {"generate": section, "complete": True})
    assert rounds_cut_text({**rounds, "rounds_run": 3}) is None and rounds_cut_text(None) is None
    some = {**rounds, "rounds_run": 2, "comparisons": [{"config": "a", "against": "b", "ratio": 0.7,
                                                        "ratio_ci": [0.6, 0.8], "verdict": "slower", "rounds": 2}]}
    assert "as wide as those rounds leave them" in (rounds_cut_text(some) or "")


def test_an_encoder_decoder_model_is_refused_with_the_field() -> None:
    """A [generate] recipe times and checks a causal LM's generate(): its new tokens are what follows the prompt. A
    T5 (built from its config) decodes afresh, so that cut leaves nothing and every token check passed on empty
    lists; it is refused, naming the recipe's field. A causal LM passes."""
    from transformers import GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration

    from autotune.errors import WorkloadError
    from autotune.worker.generation.build import check_generative

    t5 = T5ForConditionalGeneration(T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                                             num_heads=2, decoder_start_token_id=0, pad_token_id=0)).eval()
    with pytest.raises(WorkloadError, match=r"r\.toml: field 'model\.factory'.*encoder-decoder"):
        check_generative(t5, where="r.toml")
    check_generative(GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=16, n_layer=1, n_head=2)).eval(),
                     where="r.toml")


class _ThreadsClient(_FakeClient):
    """Reports the threads a worker ran with: the config's, else a default of 2 (a 2-core machine)."""

    def generate(self, recipe: Any, config: dict[str, Any], c: int, **kw: Any) -> dict[str, Any]:
        out = super().generate(recipe, config, c, **kw)
        out["threads"] = GenerateConfig.from_dict(config).threads or 2
        return out


def test_the_reference_at_the_default_thread_count_is_measured_once() -> None:
    """``threads = [1, 2]`` on a 2-core machine: ``dynamic/sdpa/fp32@2t`` is the reference itself (torch's default is
    2 threads in its worker), measured once, and a note says so; the others keep the threads the recipe gave."""
    recipe = _recipe(concurrency=[1, 4], cache=["dynamic", "static"], threads=[1, 2], rounds=0)
    client = _ThreadsClient()
    prog = GenerateSearch(client, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                          limit=None, limit_source="none").run()
    labels = {label for label, _ in client.calls}
    assert labels == {"dynamic/sdpa/fp32", "dynamic/sdpa/fp32@1t", "static/sdpa/fp32@1t", "static/sdpa/fp32@2t"}
    assert any("dynamic/sdpa/fp32@2t is the reference here" in n for n in prog.notes)
    # a worker whose default differs from every listed count: nothing folded
    plain = _FakeClient()
    GenerateSearch(plain, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                   limit=None, limit_source="none").run()
    assert "dynamic/sdpa/fp32@2t" in {label for label, _ in plain.calls}


def test_the_headline_is_the_side_by_side_rounds_median_when_the_pick_ran_in_them() -> None:
    """A screen disturbed by another process (three of ten calls 5-8 s: 104 tokens/s) is not the headline when the
    pick's own fresh-process rounds read ~1,000 (a BLOOM, session 44): the sentence gives the rounds' median and
    interval, and still names the screen; without rounds at its concurrency, or with one round, the screen stands."""
    from autotune.core.stats import log_t_interval
    from autotune.generate.stage import rounds_headline
    from autotune.report.generate import sentence

    rec: dict[str, Any] = {"config": "dynamic/sdpa/fp32", "concurrency": 8, "tokens_per_s": 104.4,
                           "tokens_per_s_ci": [57.4, 321.9], "per_sequence_tokens_per_s": 98.9,
                           "ttft": {"p50_ms": 25.9, "p99_ms": 568.3}, "itl": {"p50_ms": 10.1, "p99_ms": 12.5}}
    rounds = {"concurrency": 8, "rounds": {"dynamic/sdpa/fp32": [1065.4, 1010.9, 928.1],
                                           "static+compile:default/sdpa/fp32@2t": [1106.4, 1070.8, 852.0]}}
    head = rounds_headline(rounds, rec)
    assert head is not None and head["rounds"] == 3 and head["tokens_per_s"] == pytest.approx(1010.9)
    lo, hi = head["tokens_per_s_ci"]
    assert 800 < lo < 1010.9 < hi < 1200  # three rounds: t at 2 degrees of freedom is 4.3
    text = sentence({"recommendation": {**rec, "headline": head}})
    assert "1,011 useful tokens/s (median of 3 fresh-process side-by-side rounds, 95% CI" in text
    assert "its screen: 104 tokens/s (95% CI 57-322)" in text and "TTFT and ITL from its screen" in text
    assert rounds_headline({**rounds, "concurrency": 1}, rec) is None  # rounds at another concurrency
    assert rounds_headline({**rounds, "rounds": {"dynamic/sdpa/fp32": [1065.4]}}, rec) is None  # one round
    assert rounds_headline(None, rec) is None
    plain = sentence({"recommendation": rec})
    assert "104 useful tokens/s (95% CI 57-322)" in plain and "rounds" not in plain
    # the interval: geometric, positive, and it needs two positive values
    assert log_t_interval([1.0]) is None and log_t_interval([1.0, 0.0]) is None
    ci = log_t_interval([2.0, 2.0, 2.0])
    assert ci is not None and ci[0] == pytest.approx(2.0) and ci[1] == pytest.approx(2.0)


def test_a_point_timed_beside_a_busy_process_says_so() -> None:
    """The worker's CPU window over the timed calls (core.contention): other processes' cores reach the point, a
    note and the configurations table; a quiet one, or a reply without it (an older worker), says nothing."""
    from autotune.report.generate import markdown

    raw = {"call_seconds": [0.3] * 4, "useful_tokens": [100] * 4, "generated_tokens": [128] * 4,
           "itl": [[0.01] * 10] * 4, "ttft": [0.02] * 4, "first_call_seconds": 0.5, "recompiles": 0,
           "peak_memory_bytes": 2**30}
    busy = point_from("dynamic/sdpa/fp32", 8, {**raw, "load": {"foreign_cores": 0.93, "disturbed": True}})
    assert busy.foreign_cores == pytest.approx(0.93) and busy.to_dict()["foreign_cores"] == pytest.approx(0.93)
    assert any("other processes used 0.93 cores" in n for n in busy.notes)
    quiet = point_from("dynamic/sdpa/fp32", 8, {**raw, "load": {"foreign_cores": 0.01}})
    old = point_from("dynamic/sdpa/fp32", 8, raw)
    assert not any("busy" in n for n in quiet.notes + old.notes) and old.foreign_cores is None
    md = markdown({"complete": True, "generate": {"recommendation": None, "reason": "x",
                                                  "points": [busy.to_dict(), quiet.to_dict()]}})
    assert md.count("busy machine: other processes used 0.93 cores") == 1


class _BusyClient(_FakeClient):
    """The ``nth`` process of ``label`` at 4 sequences runs beside a busy neighbour: ten times slower, and its CPU
    window says so (``cores``); every other point is quiet."""

    def __init__(self, label: str, nth: int, cores: float) -> None:
        super().__init__()
        self.label, self.nth, self.cores = label, nth, cores

    def generate(self, recipe: Any, config: dict[str, Any], c: int, **kw: Any) -> dict[str, Any]:
        out = super().generate(recipe, config, c, **kw)
        label = GenerateConfig.from_dict(config).label()
        busy = c == 4 and label == self.label and self.calls.count((label, 4)) == self.nth
        if busy:
            out["call_seconds"] = [10 * s for s in out["call_seconds"]]
        out["load"] = {"foreign_cores": self.cores if busy else 0.01}
        return out


def test_a_side_by_side_round_a_neighbour_disturbed_is_left_out_and_said() -> None:
    """Rounds of fresh processes one after another: a neighbour that holds the CPU through one process moves that
    contender's figure alone. With two quiet rounds left for every contender, the disturbed round is left out of
    the comparison and the headline, and the report says so; with fewer, it stays in and the report says that."""
    from autotune.generate.search import quiet_rates
    from autotune.report.generate import console_lines, markdown, rounds_disturbed_text

    recipe = _recipe(concurrency=[4], cache=["dynamic", "static"], rounds=3)
    # the reference's third process at 4 sequences: its second side-by-side round
    search = GenerateSearch(_BusyClient("dynamic/sdpa/fp32", 3, 0.9), recipe,  # type: ignore[arg-type]
                            on_point=lambda _p: None, say=lambda _t: None, limit=None, limit_source="none")
    prog = search.run()
    rounds = prog.rounds
    assert rounds is not None and rounds["rounds_run"] == 3
    assert rounds["disturbed_rounds"] == [1] and rounds["disturbed_left_out"] is True
    assert rounds["rounds"]["dynamic/sdpa/fp32"] == pytest.approx([400.0, 400.0])  # the 40/s round left out
    assert rounds["foreign_cores"]["dynamic/sdpa/fp32"] == pytest.approx([0.01, 0.9, 0.01])
    assert all(c["rounds"] == 2 for c in rounds["comparisons"])
    text = rounds_disturbed_text(rounds)
    assert text is not None and "1 of the 3 side-by-side rounds" in text and "it was left out" in text
    section = {"recommendation": None, "reason": "x", "rounds": rounds}
    assert text in console_lines(section) and text in markdown({"generate": section, "complete": True})
    # too few quiet rounds: everything stays in, and the text says the figures include a busy machine's
    a, b = GenerateConfig(), from_label("static/sdpa/fp32")
    kept, left_out = quiet_rates({a: [(0, 400.0), (1, 40.0)], b: [(0, 520.0), (1, 520.0)]}, [False, True])
    assert not left_out and kept[a] == [400.0, 40.0]
    assert "include a busy machine's" in (rounds_disturbed_text({**rounds, "disturbed_left_out": False}) or "")
    assert rounds_disturbed_text({**rounds, "disturbed_rounds": []}) is None and rounds_disturbed_text(None) is None
    assert quiet_rates({a: [(0, 1.0)]}, [False]) == ({a: [1.0]}, False)  # nothing disturbed: every round


def test_a_screen_timed_beside_a_busy_neighbour_is_measured_again() -> None:
    """A screen picks what the rounds compare: the static cache's first process ran at a tenth of its speed beside
    a neighbour, so it is measured once more in a fresh process, whose figure stands, and a note says so."""
    client = _BusyClient("static/sdpa/fp32", 1, 0.95)  # the static cache's first process at 4 sequences
    recipe = _recipe(concurrency=[4], cache=["dynamic", "static"], rounds=0)
    search = GenerateSearch(client, recipe, on_point=lambda _p: None, say=lambda _t: None,  # type: ignore[arg-type]
                            limit=None, limit_source="none")
    prog = search.run()
    assert client.calls.count(("static/sdpa/fp32", 4)) == 2 and client.calls.count(("dynamic/sdpa/fp32", 4)) == 1
    static = next(p for p in prog.points if p.config.label() == "static/sdpa/fp32" and p.concurrency == 4)
    assert static.point is not None and static.point.tokens_per_s == pytest.approx(520.0)  # the quiet one
    assert any("static/sdpa/fp32 at 4: its first process was timed while other processes used 0.95 cores (52 "
               "tokens/s); measured again (520 tokens/s)" in n for n in prog.notes)
    assert prog.pick is not None and prog.pick.config.cache == "static"
