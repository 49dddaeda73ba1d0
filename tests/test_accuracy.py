"""The accuracy budget (issue 19): the ``[accuracy]`` recipe table, and real bf16 variants judged by it in a worker.

The worker tests measure real variants of real (tiny, trained) models on a labelled held-out set that the recipe's
data file generates (tests/models/labelled.py): a bf16 cast that keeps the accuracy passes, the same function
written in a bf16-hostile form (``offset``) is rejected, by the user's metric and by the default top-1 agreement,
with its measured drop and the budget in the reason. fp32 variants keep the strict gate.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune.errors import InputError, RecipeError, WorkloadError

MODELS = Path(__file__).resolve().parent / "models"


def _recipe(tmp_path: Path, *, offset: float = 0.0, accuracy: str = "", variants: str = '"eager"',
            data: bool = True) -> Path:
    inputs = ('[data]\nfactory = "@MODELS@/labelled.py:batches"\nmax_batches = 8\n' if data
              else '[[inputs]]\nname = "x"\nshape = [16]\n')
    text = f"""
name = "acc"
device = "cpu"
[model]
factory = "@MODELS@/labelled.py:blob_classifier"
kwargs = {{ offset = {offset} }}
{inputs}
{accuracy}
[search]
variants = [{variants}]
batch_sizes = [32]
[measure]
max_seconds = 0.3
rounds = 0
"""
    path = tmp_path / "recipe.toml"
    path.write_text(text.replace("@MODELS@", str(MODELS)))
    return path


def _bf16_native() -> bool:
    from autotune.worker.devices import cpu_native_precision

    return bool(cpu_native_precision("bf16"))


needs_bf16 = pytest.mark.skipif(not _bf16_native(), reason="this CPU has no native bf16 (bf16 variants unavailable)")

# ---------------------------------------------------------------------------------------------- the recipe


def test_accuracy_table_parses_absolute_and_relative_budgets(tmp_path: Path) -> None:
    rel = autotune.load_recipe(_recipe(tmp_path, accuracy='[accuracy]\nmetric = "data.py:metric"\nmax_drop = "1%"'))
    assert rel.accuracy is not None
    assert (rel.accuracy.metric, rel.accuracy.max_drop, rel.accuracy.relative) == ("data.py:metric", 0.01, True)
    assert rel.accuracy.base_dir == str(tmp_path)
    absolute = autotune.load_recipe(_recipe(tmp_path, accuracy="[accuracy]\nmax_drop = 0.02"))
    assert absolute.accuracy is not None and absolute.accuracy.metric is None
    assert (absolute.accuracy.max_drop, absolute.accuracy.relative) == (0.02, False)
    assert absolute.accuracy.undecided == "accept"
    strict = autotune.load_recipe(_recipe(tmp_path, accuracy='[accuracy]\nundecided = "reject"'))
    assert strict.accuracy is not None and strict.accuracy.undecided == "reject"
    assert autotune.core.recipe.Recipe.from_dict(strict.to_dict()) == strict
    # the JSON form a worker request carries reads back equal; a recipe without the table keeps its old form
    assert autotune.core.recipe.Recipe.from_dict(rel.to_dict()) == rel
    assert "accuracy" not in autotune.load_recipe(_recipe(tmp_path)).to_dict()


@pytest.mark.parametrize(("table", "message"), [
    ('metric = "nocolon"', "field 'accuracy.metric': 'nocolon' is not a function reference"),
    ('max_drop = "one percent"', "field 'accuracy.max_drop': 'one percent' is not allowed"),
    ('max_drop = "100%"', "a relative drop must be in [0%, 100%)"),
    ("max_drop = -0.1", "must be a finite number >= 0"),
    ("max_drop = 1.5", "without a metric it is the top-1 disagreement allowed"),
    ("max_drop = true", "expected a number or a string, got a boolean"),
    ('metrc = "data.py:metric"', "did you mean 'accuracy.metric'"),
    ('undecided = "maybe"', "field 'accuracy.undecided': 'maybe' is not allowed; allowed: 'accept', 'reject'"),
])
def test_bad_accuracy_tables_name_the_field(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(RecipeError) as err:
        autotune.load_recipe(_recipe(tmp_path, accuracy=f"[accuracy]\n{table}"))
    assert message in str(err.value)
    assert str(tmp_path / "recipe.toml") in str(err.value)


def test_a_metric_needs_the_users_data(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"field 'accuracy.metric': needs a \[data\] factory"):
        autotune.load_recipe(_recipe(tmp_path, data=False, accuracy='[accuracy]\nmetric = "m.py:metric"'))


def test_the_budget_is_part_of_the_studys_fingerprint(tmp_path: Path) -> None:
    """Rows judged by another budget must not be resumed: the [accuracy] table (and the metric file's contents) is a
    part of the study's model identity, and a recipe without it keeps the identity it had before the table existed."""
    from autotune.study.model_identity import model_identity

    def identity(table: str) -> dict[str, Any]:
        return model_identity(autotune.load_recipe(_recipe(tmp_path, accuracy=table)))

    metric = f'[accuracy]\nmetric = "{MODELS}/labelled.py:metric"'
    assert "accuracy" not in identity("")
    one, two = identity(metric + '\nmax_drop = "1%"'), identity(metric + '\nmax_drop = "2%"')
    assert one["accuracy"] != two["accuracy"] and '"file_sha256": "' in one["accuracy"]
    accept = identity(metric + '\nmax_drop = "1%"\nundecided = "accept"')
    reject = identity(metric + '\nmax_drop = "1%"\nundecided = "reject"')
    assert accept["accuracy"] == one["accuracy"] != reject["accuracy"]  # the default keeps older studies' print


def test_int8_is_a_precision_of_the_grammar() -> None:
    from autotune.core.variant_names import VariantSpec

    assert VariantSpec.parse("onnx+int8").precision == "int8"


# ---------------------------------------------------------------------------------------------- the judge (pure)


def _judge(refs: list[Any], cands: list[Any], *, precision: str = "bf16", accuracy: dict[str, Any] | None = None,
           tmp_path: Path | None = None) -> Any:
    """``accuracy.judge`` on given outputs (torch in the test process: the worker's function, called directly)."""
    import torch

    from autotune.worker.accuracy import Outputs, judge

    recipe = autotune.make_recipe(model="m.py:f", data="d.py:b", accuracy=accuracy) if accuracy is not None else \
        autotune.make_recipe(model="m.py:f", inputs=[{"shape": [4]}])
    batches = [torch.zeros(len(r) if isinstance(r, torch.Tensor) else 1, 4) for r in refs]
    return judge(Outputs(refs, cands, batches, "factory"), precision=precision, recipe=recipe)


def _flipped(rows: int, flips: int) -> tuple[Any, Any]:
    import torch

    ref = torch.eye(4).repeat(rows // 4, 1)  # argmax 0..3
    cand = ref.clone()
    cand[:flips] = torch.tensor([0.0, 0.0, 0.0, 1.0]) if flips else cand[:flips]
    cand[:flips][ref[:flips].argmax(1) == 3] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    return ref, cand


def test_agreement_is_decided_on_its_wilson_interval_within_undecided_or_over() -> None:
    """Three verdicts against the 99% default: 0 of 1,000 differing is shown within (interval top 0.38%); 1 or 3
    of 200 are undecided (the interval holds 1%) and pass, with the predictions that would decide them; 10 of 200
    (interval 2.7-9.0%) is shown over and rejected. The same undecided row is rejected under
    ``undecided = "reject"``."""
    ref, cand = _flipped(1000, 0)
    within = _judge([ref], [cand])
    assert (within.kind, within.verdict, within.passed, within.needed) == ("agreement", "within", True, None)
    assert within.drop_interval is not None and within.drop_interval[1] == pytest.approx(0.00382, abs=1e-4)

    ref, one = _flipped(200, 1)
    ok = _judge([ref], [one])
    assert (ok.kind, ok.passed, ok.value, ok.max_drop, ok.verdict) == ("agreement", True, 0.995, 0.01, "undecided")
    assert ok.drop == pytest.approx(0.005) and ok.reason is None
    assert ok.needed is not None and ok.needed > 200 and ok.needed_unit == "predictions"
    assert "1 of 200 predictions differ" in str(ok.uncertainty) and "would decide it" in str(ok.uncertainty)
    row = ok.to_dict()
    assert row["verdict"] == "undecided" and len(row["drop_interval"]) == 2

    ref, three = _flipped(200, 3)
    undecided = _judge([ref], [three])
    assert undecided.passed and undecided.verdict == "undecided"
    strict = _judge([ref], [three], accuracy={"undecided": "reject"})
    assert not strict.passed and strict.verdict == "undecided"
    assert "top-1 agreement with eager fp32 98.5% (3 of 200 predictions differ)" in str(strict.reason)
    assert 'undecided = "reject"' in str(strict.reason)

    ref, ten = _flipped(200, 10)
    bad = _judge([ref], [ten])
    assert not bad.passed and bad.verdict == "exceeds" and bad.needed is None
    assert "10 of 200 predictions differ" in str(bad.reason) and "shown over the budget" in str(bad.reason)


def test_a_metric_is_decided_on_its_batches_contributions(tmp_path: Path) -> None:
    """A user's metric: with 16 batches the drop gets a t interval over the batches' contributions and a verdict;
    with 2 there is no interval and the point estimate decides (the result says so); a metric that is not a sum
    over rows (here: 1 when every row is right, else 0) gets none either."""
    import torch

    from autotune.worker.accuracy import Outputs, judge

    (tmp_path / "m.py").write_text(
        "import torch\n"
        "def metric(outputs, batches):\n"
        "    hits = sum(int((o.argmax(1) == b[1]).sum()) for o, b in zip(outputs, batches))\n"
        "    return hits / sum(len(b[1]) for b in batches)\n")
    gen = torch.Generator().manual_seed(1)
    labels = [torch.randint(0, 4, (32,), generator=gen) for _ in range(16)]
    refs = [torch.nn.functional.one_hot(y, 4).float() for y in labels]  # eager is right on every row
    cands = [r.clone() for r in refs]
    for c in cands[:8]:
        c[:1] = torch.tensor([0.0, 0.0, 0.0, 5.0])  # about 6 of 512 rows wrong: ~1% accuracy
    recipe = autotune.make_recipe(model="m.py:f", data="d.py:b", accuracy={
        "metric": f"{tmp_path / 'm.py'}:metric", "max_drop": 0.01})
    from autotune.worker.metric import resolve_metric

    metric = resolve_metric(recipe)
    batches = [(torch.zeros(32, 4), y) for y in labels]
    result = judge(Outputs(refs, cands, batches, "factory"), precision="int8", recipe=recipe, metric=metric)
    assert result.kind == "metric" and result.drop_interval is not None
    lo, hi = result.drop_interval
    assert lo <= result.drop <= hi and lo >= 0
    assert result.verdict == "undecided" and result.passed and result.needed is not None
    assert "95% t interval over the 16 batches' contributions" in str(result.uncertainty)
    few = judge(Outputs(refs[:2], cands[:2], batches[:2], "factory"), precision="int8", recipe=recipe,
                metric=metric)
    assert few.drop_interval is None and "the point estimate decided" in str(few.uncertainty)
    assert few.verdict == ("exceeds" if few.drop > 0.01 else "within")
    (tmp_path / "sq.py").write_text(
        "def metric(outputs, batches):\n"
        "    hits = sum(int((o.argmax(1) == b[1]).sum()) for o, b in zip(outputs, batches))\n"
        "    return float(hits == sum(len(b[1]) for b in batches))  # all right or nothing\n")
    squared = autotune.make_recipe(model="m.py:f", data="d.py:b", accuracy={
        "metric": f"{tmp_path / 'sq.py'}:metric", "max_drop": 0.01})
    odd = judge(Outputs(refs, cands, batches, "factory"), precision="int8", recipe=squared,
                metric=resolve_metric(squared))
    assert odd.drop_interval is None and "not a sum over rows" in str(odd.uncertainty)


def test_closeness_for_outputs_that_are_not_classes_uses_the_precisions_thresholds() -> None:
    import torch

    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(8, 5, 32, generator=gen)  # (B, T, hidden): features, not classes
    near = ref + 0.01 * torch.randn(8, 5, 32, generator=gen)
    result = _judge([ref], [near])
    assert result.kind == "closeness" and result.passed
    assert result.rel_error == pytest.approx(0.01, rel=0.2)
    far = ref + 0.2 * torch.randn(8, 5, 32, generator=gen)
    rejected = _judge([ref], [far])
    assert not rejected.passed and "allowed for bf16: relative error <= 0.05" in str(rejected.reason)
    assert _judge([ref], [near + 0.05 * torch.randn(8, 5, 32, generator=gen)], precision="int8").passed
    twice = ref + 0.02 * torch.randn(8, 5, 32, generator=gen)
    assert _judge([ref], [twice]).passed and not _judge([ref], [twice], precision="fp16").passed  # fp16: 1%


def test_nan_where_the_reference_is_finite_is_rejected_whatever_the_kind() -> None:
    import torch

    ref = torch.eye(4).repeat(5, 1)
    cand = ref.clone()
    cand[3, 2] = math.nan
    result = _judge([ref], [cand])
    assert not result.passed and "NaN/inf where eager fp32's are finite" in str(result.reason)


def test_default_budget_can_be_widened_without_a_metric() -> None:
    import torch

    ref = torch.eye(4).repeat(25, 1)
    cand = ref.clone()
    cand[:3] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    assert not _judge([ref], [cand]).passed  # 97% < 99%
    assert _judge([ref], [cand], accuracy={"max_drop": 0.05}).passed


# ---------------------------------------------------------------------------------------------- real variants


# its kind stays in make test (issue 31):
# test_default_agreement_rejects_the_broken_bf16_variant_and_keeps_fp32_strict
@pytest.mark.slow
@pytest.mark.worker
@needs_bf16
def test_users_metric_passes_a_real_bf16_variant_and_rejects_a_broken_one(tmp_path: Path) -> None:
    """The labelled held-out set: bf16 keeps the accuracy within 1%; the offset model's bf16 loses ~40 points."""
    table = '[accuracy]\nmetric = "@MODELS@/labelled.py:metric"\nmax_drop = "1%"'
    good = autotune.measure(_recipe(tmp_path, accuracy=table.replace("@MODELS@", str(MODELS))),
                            variant="eager+bf16", batch_size=32)
    assert good.status == "ok", good.reason
    acc = good.row["accuracy"]
    assert acc["kind"] == "metric" and acc["passed"] and acc["gating"]
    assert 0.8 < acc["reference"] < 1.0  # a real held-out accuracy, not eager's agreement with itself
    assert acc["drop"] <= 0.01 and acc["batches"] == 8 and acc["samples"] == 256 and acc["data"] == "factory"
    assert good.row["correctness"]["by"] == "accuracy budget"
    fp32 = autotune.measure(_recipe(tmp_path, accuracy=table.replace("@MODELS@", str(MODELS))),
                            variant="eager", batch_size=32)
    assert fp32.status == "ok" and fp32.row["accuracy"]["gating"] is False  # scored, but the strict gate decided
    assert fp32.row["accuracy"]["value"] == acc["reference"]
    assert good.row["model_bytes"] * 2 == fp32.row["model_bytes"]  # parameters at 2 bytes instead of 4

    broken = autotune.measure(_recipe(tmp_path, offset=1000.0, accuracy=table.replace("@MODELS@", str(MODELS))),
                              variant="eager+bf16", batch_size=32)
    assert broken.status == "rejected"
    assert broken.row["accuracy"]["drop"] > 0.2 and not broken.row["accuracy"]["passed"]
    assert "accuracy budget" in str(broken.reason) and "> max_drop 1%" in str(broken.reason)
    # labelled.py's metric reads its labels by position: each batch's contribution keeps the rows where they were
    lo, hi = broken.row["accuracy"]["drop_interval"]
    assert 0.01 < lo <= broken.row["accuracy"]["drop"] <= hi and broken.row["accuracy"]["verdict"] == "exceeds"
    assert acc["drop_interval"] is not None and acc["verdict"] in ("within", "undecided")
    assert broken.throughput is None and not broken.feasible  # never measured, never recommended


@pytest.mark.worker
@needs_bf16
def test_default_agreement_rejects_the_broken_bf16_variant_and_keeps_fp32_strict(tmp_path: Path) -> None:
    broken = autotune.measure(_recipe(tmp_path, offset=1000.0), variant="eager+bf16", batch_size=32)
    assert broken.status == "rejected"
    assert broken.row["accuracy"]["kind"] == "agreement"
    assert "predictions differ) on 8 batches of the data < 99%" in str(broken.reason)
    fp32 = autotune.measure(_recipe(tmp_path, offset=1000.0), variant="eager", batch_size=32)
    assert fp32.status == "ok" and "accuracy" not in fp32.row  # no [accuracy]: fp32 rows are the strict gate's
    assert fp32.row["correctness"]["tolerance"]["rtol"] == 1e-4


@pytest.mark.worker
@needs_bf16
def test_features_on_random_inputs_are_judged_by_closeness_and_say_so(tmp_path: Path) -> None:
    """No [data], no classes: the per-precision closeness thresholds on the gate's random batches."""
    def recipe(offset: float) -> Path:
        path = tmp_path / f"features{offset}.toml"
        path.write_text(f"""
device = "cpu"
[model]
factory = "{MODELS}/labelled.py:features"
kwargs = {{ offset = {offset} }}
[[inputs]]
name = "tokens"
shape = [5, 16]
[search]
batch_sizes = [8]
[measure]
max_seconds = 0.3
""")
        return path

    good = autotune.measure(recipe(0.0), variant="eager+bf16", batch_size=8)
    assert good.status == "ok", good.reason
    acc = good.row["accuracy"]
    assert (acc["kind"], acc["data"], acc["batches"]) == ("closeness", "random", 6)
    assert acc["rel_error"] < 0.05 and acc["cosine"] > 0.998
    # (the bf16-hostile form, features(offset=1000), is rejected the same way: left to the judge's own test above,
    # each measure here starts a worker)


@pytest.mark.worker
def test_a_metric_that_returns_no_number_is_bad_input_before_measuring(tmp_path: Path) -> None:
    table = f'[accuracy]\nmetric = "{MODELS}/labelled.py:bad_metric"'
    with pytest.raises((WorkloadError, InputError)) as err:
        autotune.measure(_recipe(tmp_path, accuracy=table), variant="eager", batch_size=32)
    assert "field 'accuracy.metric'" in str(err.value) and "expected a number" in str(err.value)


@pytest.mark.slow  # ~60 s on the shared 2-core machine: a whole run (validation, search, artifact, profile)
@pytest.mark.worker
@needs_bf16
def test_a_run_reports_precision_accuracy_and_the_cost_of_its_pick(tmp_path: Path) -> None:
    """The real thing end to end: a run over fp32 and bf16 with the user's metric writes the precision table, the
    accuracy plot, the candidates' accuracy and model size, and says what its recommendation costs."""
    table = f'[accuracy]\nmetric = "{MODELS}/labelled.py:metric"\nmax_drop = "2%"'
    recipe = autotune.load_recipe(_recipe(tmp_path, accuracy=table, variants='"eager", "eager+bf16"'))
    result = autotune.tune(recipe, out=tmp_path / "out", time_budget=120)
    doc = result.report
    rows = {c["variant"]: c for c in doc["candidates"]}
    assert rows["eager+bf16"]["accuracy"]["passed"] and rows["eager+bf16"]["accuracy"]["gating"]
    assert rows["eager"]["accuracy"]["gating"] is False
    assert rows["eager+bf16"]["model_bytes"] < rows["eager"]["model_bytes"]
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "## Precision and accuracy" in md and "| bf16 |" in md
    assert (tmp_path / "out" / "plots" / "accuracy.png").is_file()
    pick = doc["recommendation"]
    if pick["precision"] == "bf16":  # whichever is faster on this machine: the report says what the pick costs
        assert "Accuracy cost: labelled.py:metric" in md and "on 8 batches of the data (256 samples)" in md
    else:
        assert "Costs no accuracy: it runs in fp32" in md


def test_every_precision_has_a_closeness_budget() -> None:
    """A precision the grammar accepts (int8-static came with the quantizers) must have default thresholds."""
    from autotune.core.variant_names import PRECISIONS
    from autotune.worker.accuracy import CLOSENESS

    assert set(PRECISIONS) <= set(CLOSENESS)


def test_the_report_says_undecided_and_what_would_decide_it() -> None:
    """An undecided row is not "over budget": its cell and the recommendation's sentence say undecided, how sure,
    and how many predictions at the observed rate would decide it."""
    from autotune.report.precision import accuracy_cell, cost_sentence

    ref, one = _flipped(200, 1)
    acc = _judge([ref], [one]).to_dict()
    row = {"variant": "onnx+int8", "precision": "int8", "status": "ok", "accuracy": acc}
    cell = accuracy_cell(row)
    assert "99.50% top-1 agreement" in cell and f"(undecided: ~{acc['needed']:,} predictions would decide)" in cell
    text = str(cost_sentence({"candidates": [row]}, row))
    assert "How sure: 1 of 200 predictions differ" in text and "Undecided is not a rejection" in text
    strict = {**row, "status": "rejected", "accuracy": {**acc, "passed": False}}
    assert accuracy_cell(strict).endswith("(undecided, rejected)")
