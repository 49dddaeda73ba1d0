"""The traffic: a [data] factory's own batches, keyword inputs, dynamic dims, buckets, timing over the traffic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autotune.core.recipe import Recipe, load_recipe
from autotune.errors import RecipeError, WorkloadError
from autotune.worker.timing import MeasureSettings, measure_callable
from autotune.worker.traffic import (
    BucketPlan,
    InputLayout,
    TrafficCall,
    adapt,
    bucket_plan,
    default_buckets,
    dynamic_dims_of,
    load_traffic,
)
from tests.support import MODELS, run_cli

KEYWORD = MODELS / "keyword.py"


def data_recipe(tmp_path: Path, factory: str = "batches", *, kwargs: str = "", model_kwargs: str = "",
                variants: str = '["eager", "trace"]', extra: str = "") -> Path:
    text = f"""
name = "kw"
device = "cpu"
[model]
factory = "{KEYWORD}:classifier"
{model_kwargs}
[data]
factory = "{KEYWORD}:{factory}"
{kwargs}
[search]
variants = {variants}
batch_sizes = [4]
{extra}
[measure]
max_seconds = 0.5
ci_target = 0.05
rounds = 0
"""
    path = tmp_path / "recipe.toml"
    path.write_text(text)
    return path


# --------------------------------------------------------------------------------------------- recipe


def test_data_recipe_round_trips(tmp_path: Path) -> None:
    r = load_recipe(data_recipe(tmp_path, kwargs="kwargs = { n = 4 }\nbuckets = [8, 16]",
                                extra='shapes = ["dynamic", "buckets"]'))
    assert r.inputs == ()
    assert r.data is not None and r.data.buckets == (8, 16) and dict(r.data.kwargs) == {"n": 4}
    assert r.search.shapes == ("dynamic", "buckets")
    assert Recipe.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_recipe_without_new_fields_keeps_its_json_form() -> None:
    d = load_recipe(Path("recipes/quickstart.toml")).to_dict()
    assert "data" not in d and "shapes" not in d["search"]
    assert set(d["inputs"][0]) == {"name", "shape", "dtype", "vocab_size"}


@pytest.mark.parametrize(("snippet", "field", "words"), [
    ('[data]\nfactory = "x.py:f"\n[[inputs]]\nname = "a"\nshape = [2]', "inputs", "must be left out"),
    ('[data]\nfactory = "nocolon"', "data.factory", "not a factory reference"),
    ('[data]\nfactory = "x.py:f"\nbuckets = []', "data.buckets", "must not be empty"),
    ('[data]\nfactory = "x.py:f"\nbuckets = [0]', "data.buckets[0]", "positive"),
    ('[data]\nfactory = "x.py:f"\npad_values = { a = "zero" }', "data.pad_values.a", "expected a number"),
    ('[data]\nfactory = "x.py:f"\nbatch = 3', "data.batch", "unknown key"),
    ('[[inputs]]\nname = "m"\nshape = [4]\ndtype = "float32"\nrange = [0, 2]', "inputs[0].range", "integer"),
    ('[[inputs]]\nname = "m"\nshape = [4]\ndtype = "int64"\nrange = [2, 2]', "inputs[0].range", "low < high"),
    ('[[inputs]]\nname = "m"\nshape = [4]\ndtype = "int64"\nrange = [0, 2]\nvocab_size = 3',
     "inputs[0].range", "not both"),
    ('[[inputs]]\nname = "a"\nshape = [4]\nkeyword = true\n[[inputs]]\nname = "b"\nshape = [4]',
     "inputs[1].keyword", "follows keyword input"),
    ('[[inputs]]\nname = "a"\nshape = [4]\n[search]\nshapes = ["static"]', "search.shapes", "allowed"),
])
def test_bad_data_and_input_fields_name_the_field(tmp_path: Path, snippet: str, field: str, words: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(f'[model]\nfactory = "m.py:f"\n{snippet}\n')
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert f"field '{field}'" in str(info.value) and words in str(info.value)
    assert str(path) in str(info.value)


def test_keyword_and_ranged_inputs_make_random_batches(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(f'[model]\nfactory = "{KEYWORD}:classifier"\n'
                    '[[inputs]]\nname = "input_ids"\nshape = [7]\ndtype = "int64"\nrange = [1, 100]\nkeyword = true\n'
                    '[[inputs]]\nname = "attention_mask"\nshape = [7]\ndtype = "int64"\nrange = [0, 2]\n'
                    'keyword = true\n')
    recipe = load_recipe(path)
    t = load_traffic(recipe, batch_size=3, device=torch.device("cpu"))
    assert t.source == "inputs" and t.layout.form == "dict" and t.layout.has_keywords
    ids, mask = t.example
    assert ids.shape == (3, 7) and int(ids.min()) >= 1 and int(ids.max()) < 100
    assert set(mask.unique().tolist()) <= {0, 1}
    got = t.layout.call(lambda *a, **k: (a, sorted(k)), t.example)
    assert got == ((), ["attention_mask", "input_ids"])


# --------------------------------------------------------------------------------------------- loading


def test_factory_batches_are_loaded_with_dynamic_dims(tmp_path: Path) -> None:
    recipe = load_recipe(data_recipe(tmp_path))
    t = load_traffic(recipe, batch_size=4, device=torch.device("cpu"))
    assert t.source == "factory" and t.layout.form == "dict"
    assert t.layout.names == ("input_ids", "attention_mask") and all(t.layout.keyword)
    assert t.rows == (4, 4, 4, 4, 3)  # the last batch is partial
    assert t.dynamic_dims == ((1,), (1,))
    assert t.dynamic_dim_names() == ["input_ids[1]", "attention_mask[1]"]
    assert t.samples_per_call == pytest.approx(19 / 5)
    assert t.buckets == (8, 12)  # powers of two from 5 up, and the largest size seen
    # the example is the largest batch; the gate sees every shape, the example's through another batch
    assert t.example[0].shape == (4, 12)
    gate = t.gate_batches(2)  # four shapes (the partial 3x9 batch is one): all of them, whatever the count
    assert {tuple(b[0].shape) for b in gate} == {(4, 5), (4, 9), (4, 12), (3, 9)}
    assert len(t.gate_batches(6)) == 5
    described = t.describe()
    assert described["keyword_inputs"] == ["input_ids", "attention_mask"]
    assert sum(s["batches"] for s in described["shapes"]) == 5


def test_positional_factory_batches(tmp_path: Path) -> None:
    recipe = load_recipe(data_recipe(tmp_path, "positional"))
    t = load_traffic(recipe, batch_size=4, device=torch.device("cpu"))
    assert t.layout.form == "tuple" and not t.layout.has_keywords and t.layout.n_positional == 2


@pytest.mark.parametrize(("factory", "words"), [
    ("raises", "raised with batch_size=4"),
    ("empty", "yielded no batches"),
    ("not_iterable", "expected an iterable of batches"),
    ("mismatched_rows", "disagree on the batch size"),
    ("non_tensor", "expected a torch.Tensor"),
    ("too_many_rows", "6 rows for batch_size=4"),
    ("changing_keys", "every batch must have the same form"),
    ("missing_function", "has no attribute"),
])
def test_bad_factories_are_workload_errors(tmp_path: Path, factory: str, words: str) -> None:
    recipe = load_recipe(data_recipe(tmp_path, factory))
    with pytest.raises(WorkloadError) as info:
        load_traffic(recipe, batch_size=4, device=torch.device("cpu"))
    assert "field 'data.factory'" in str(info.value) and words in str(info.value)


# --------------------------------------------------------------------------------------------- pure helpers


def test_dynamic_dims_and_default_buckets() -> None:
    a = (torch.zeros(2, 5), torch.zeros(2, 3, 4))
    b = (torch.zeros(1, 9), torch.zeros(1, 3, 4))
    assert dynamic_dims_of([a, b]) == ((1,), ())
    assert default_buckets([a, b], ((1,), ())) == (8, 9)
    assert default_buckets([a], ((), ())) == ()


def test_bucket_plan_pads_and_slices_back() -> None:
    layout = InputLayout(names=("ids", "mask"), keyword=(True, True), form="dict")
    plan = BucketPlan(layout, ((1,), (1,)), (8, 16), (0.0, 0.0), ((0, 1),))
    ids = torch.arange(10).reshape(2, 5)
    padded, length = plan.pad((ids, torch.ones(2, 5)))
    assert length == 5 and padded[0].shape == (2, 8) and int(padded[0][:, 5:].abs().sum()) == 0
    out = plan.unpad({"h": torch.zeros(2, 8, 8)}, length)
    assert out["h"].shape == (2, 5, 8)  # dim 1 follows the length; dim 2 (also 8) does not
    assert plan.bucket_of(17) == 17  # above the largest bucket: left as it is


def test_bucket_plan_learns_which_output_dims_follow_the_length(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kwmodels", KEYWORD)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    recipe = load_recipe(data_recipe(tmp_path))
    t = load_traffic(recipe, batch_size=4, device=torch.device("cpu"))
    model = adapt(mod.classifier().eval(), t.layout)
    plan = bucket_plan(model, t)
    # output leaves in pytree order: logits (B, 3) then hidden (B, L, 16): only hidden's dim 1 follows L
    assert plan.output_dims == ((1, 1),)
    with torch.inference_mode():
        for batch in t.batches:
            ref = model(*batch)
            got = plan.wrap(model)(*batch)
            assert got["hidden"].shape == ref["hidden"].shape
            torch.testing.assert_close(got["logits"], ref["logits"])


def test_traffic_call_cycles_and_measurement_weighs_whole_passes() -> None:
    seen: list[int] = []
    call = TrafficCall(lambda x: seen.append(x), [(0,), (1,), (2,)])
    for _ in range(7):
        call()
    assert seen == [0, 1, 2, 0, 1, 2, 0] and call.index == 0
    call.reset()
    call()
    assert seen[-1] == 0

    sizes = [(torch.randn(64, 64), 4), (torch.randn(128, 128), 2)]
    tc = TrafficCall(lambda x, rows: x @ x, [(x, r) for x, r in sizes])
    m = measure_callable(tc, batch_size=4, device=torch.device("cpu"),
                         settings=MeasureSettings(max_seconds=0.5, ci_target=0.05))
    assert m.iterations_per_sample % 2 == 0  # whole passes per block
    served = m.extra["latency_batches"]
    assert len(served) == len(m.latency_samples) and len(served) % 2 == 0
    assert served[:4] == [0, 1, 0, 1]


# --------------------------------------------------------------------------------------------- end to end


@pytest.mark.worker
def test_measure_on_keyword_traffic_reports_buckets(tmp_path: Path) -> None:
    path = data_recipe(tmp_path, kwargs="buckets = [8, 16]", extra='shapes = ["dynamic", "buckets"]')
    code, out, err = run_cli("measure", str(path), "--variant", "trace+buckets", "--batch-size", "4", "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["status"] == "ok", row
    traffic = row["traffic"]
    assert traffic["samples_per_call"] == pytest.approx(19 / 5) and traffic["batches"] == 5
    assert traffic["shape_policy"] == "buckets"
    assert traffic["dynamic_dims"] == ["input_ids[1]", "attention_mask[1]"]
    # a +buckets variant's shapes are its buckets (the padded shapes it runs): 5 -> 8; 9, 12 -> 16; partial 3x9
    assert [b["shape"] for b in traffic["buckets"]] == ["input_ids 4x8, attention_mask 4x8",
                                                        "input_ids 4x16, attention_mask 4x16",
                                                        "input_ids 3x16, attention_mask 3x16"]
    assert sum(b["calls"] for b in traffic["buckets"]) % 5 == 0  # whole passes over the 5 batches
    assert row["correctness"]["passed"] and row["correctness"]["batches"] == 5


@pytest.mark.worker
def test_padding_that_changes_the_answer_is_rejected(tmp_path: Path) -> None:
    path = data_recipe(tmp_path, model_kwargs="kwargs = { use_mask = false }", extra='shapes = ["buckets"]')
    code, out, err = run_cli("measure", str(path), "--variant", "eager+buckets", "--batch-size", "4", "--json")
    row = json.loads(out)
    assert code == 1 and row["status"] == "rejected", (row, err)
    assert "outside tolerance" in row["reason"] or "cosine" in row["reason"]


@pytest.mark.worker
@pytest.mark.parametrize("factory", ["raises", "mismatched_rows", "non_tensor"])
def test_bad_data_exits_2_before_measuring(tmp_path: Path, factory: str) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run_cli("run", str(data_recipe(tmp_path, factory)), "--out", str(out_dir), "--no-progress")
    assert code == 2, (out, err)
    assert "data.factory" in err and factory in err and "Traceback" not in err
    assert not (out_dir / "study.db").exists() or "candidates" not in (out_dir / "report.json").read_text() \
        if (out_dir / "report.json").exists() else True


def test_make_recipe_takes_a_data_factory() -> None:
    from autotune import make_recipe

    r = make_recipe(model=f"{KEYWORD}:classifier", data=f"{KEYWORD}:batches", batch_sizes=[4])
    assert r.inputs == () and r.data is not None and r.data.factory.endswith("keyword.py:batches")
    r2 = make_recipe(model=f"{KEYWORD}:classifier", data={"factory": f"{KEYWORD}:batches", "kwargs": {"n": 3}},
                     batch_sizes=[4])
    assert r2.data is not None and dict(r2.data.kwargs) == {"n": 3}
    t = load_traffic(r2, batch_size=4, device=torch.device("cpu"))
    assert len(t.batches) == 3


def test_the_reproduction_of_a_data_recipe_serves_its_batches_through_the_artifact() -> None:
    import ast

    from autotune.report.reproduce import reproduce_script

    doc = {
        "recipe": {"name": "kw", "device": "cpu", "search": {"seed": 3},
                   "model": {"factory": f"{KEYWORD}:classifier", "kwargs": {}},
                   "data": {"factory": f"{KEYWORD}:batches", "kwargs": {"n": 4}, "max_batches": 4,
                            "base_dir": str(KEYWORD.parent)}},
        "recommendation": {"variant": "trace+buckets", "batch_size": 4, "throughput": 100.0,
                           "latency_ms": {"p50": 1.0, "p99": 2.0}},
    }
    script = reproduce_script(doc)
    ast.parse(script)
    assert "runpy.run_path('artifact/load.py')" in script
    assert "batches_of(batch_size=BATCH_SIZE, n=4)" in script and "torch.manual_seed(3)" in script
    assert "MAX_BATCHES = 4" in script and "import autotune" not in script


def test_the_data_factory_is_part_of_the_studys_model_identity(tmp_path: Path) -> None:
    import shutil

    from autotune.study.model_identity import model_identity

    data = tmp_path / "data.py"
    shutil.copy(KEYWORD, data)
    path = tmp_path / "r.toml"
    path.write_text(f'[model]\nfactory = "{KEYWORD}:classifier"\n[data]\nfactory = "data.py:batches"\n')
    before = model_identity(load_recipe(path))["data"]
    assert json.loads(before)["file_sha256"] is not None
    data.write_text(data.read_text() + "\n# edited\n")
    assert model_identity(load_recipe(path))["data"] != before  # an edited data factory is another study
    data.unlink()
    with pytest.raises(RecipeError, match=r"field 'data\.factory': cannot read"):
        model_identity(load_recipe(path))
    quick = load_recipe(Path("recipes/quickstart.toml"))
    assert "data" not in model_identity(quick) and "inputs.keyword_range" not in model_identity(quick)


# its kind stays in make test (issue 31):
# test_measure_on_keyword_traffic_reports_buckets and test_artifact_traffic
@pytest.mark.slow
@pytest.mark.worker
def test_a_keyword_traffic_recipe_runs_end_to_end(tmp_path: Path) -> None:
    """The whole run on variable-length keyword batches: the report's data section, every candidate's traffic by
    shape, a showdown headline, and an artifact whose load.py serves the data's batches of every size."""
    path = data_recipe(tmp_path, kwargs="buckets = [8, 16]", variants='["eager", "trace"]',
                       extra='shapes = ["dynamic", "buckets"]\ntime_budget_s = 120')
    path.write_text(path.read_text().replace("rounds = 0", "rounds = 2\nround_seconds = 0.1\nprocesses = 1"))
    out = tmp_path / "out"
    code, _, err = run_cli("run", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    assert doc["data"]["source"] == "factory" and doc["data"]["keyword_inputs"] == ["input_ids", "attention_mask"]
    assert doc["data"]["dynamic_dims"] == ["input_ids[1]", "attention_mask[1]"]
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert {c["variant"] for c in ok} == {"eager", "eager+buckets", "trace", "trace+buckets"}
    for c in ok:
        assert c["traffic"]["batches"] == 5 and c["traffic"]["buckets"], c["variant"]
    rec = doc["recommendation"]
    assert rec["decided_by"] == "showdown" and rec["throughput_source"] == "showdown"
    assert doc["artifact"]["status"] == "ok"
    md = (out / "report.md").read_text()
    assert "input_ids 4x16, attention_mask 4x16" in md and "input_ids[1]" in md  # per-shape rows, dynamic dims
