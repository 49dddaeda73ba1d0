"""Tests for the correctness gate: output comparison rules and check_variant on real built variants."""

from __future__ import annotations

import json
import math
from collections import OrderedDict, namedtuple
from typing import Any

import pytest
import torch

from autotune.errors import InputError
from autotune.worker.correctness import GateResult, Tolerance, check_variant, compare_outputs, tolerance_for
from autotune.worker.variants import VariantSpec, build_variant

FP32 = tolerance_for("fp32")
BF16 = tolerance_for("bf16")

Pair = namedtuple("Pair", ["logits", "extra"])


def _t(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------------------------------
# tolerances
# --------------------------------------------------------------------------------------------------


def test_tolerances_are_ordered_by_precision() -> None:
    fp16, tf32 = tolerance_for("fp16"), tolerance_for("fp32", device="cuda", tf32=True)
    assert FP32.rtol < tf32.rtol < fp16.rtol < BF16.rtol
    assert FP32.min_cosine > tf32.min_cosine > fp16.min_cosine > BF16.min_cosine
    assert tolerance_for("autocast-bf16") == BF16
    assert tolerance_for("autocast-fp16") == fp16
    assert tolerance_for("fp32", device="cuda", tf32=False) == FP32
    assert tolerance_for("fp32", device="cpu", tf32=True) == FP32  # TF32 is a CUDA thing
    with pytest.raises(InputError, match="fp8"):
        tolerance_for("fp8")


# --------------------------------------------------------------------------------------------------
# compare_outputs
# --------------------------------------------------------------------------------------------------


def test_identical_outputs_pass_with_zero_error() -> None:
    x = _t(0, 8, 10)
    r = compare_outputs(x, x.clone(), tolerance=FP32)
    assert r.passed and r.reason is None
    assert r.max_abs_error == 0 and r.max_rel_error == 0 and r.min_cosine == pytest.approx(1.0)
    assert r.batches == 1


def test_reassociation_noise_passes_fp32_but_a_real_error_does_not() -> None:
    ref = _t(0, 64, 100) * 30
    noisy = ref * (1 + 1e-6 * _t(1, 64, 100))  # last-bits differences, like a reordered reduction
    assert compare_outputs(ref, noisy, tolerance=FP32).passed
    wrong = ref.clone()
    wrong[3, 7] += 0.05 * ref.abs().max()  # one element off by 5% of the peak
    r = compare_outputs(ref, wrong, tolerance=FP32)
    assert not r.passed
    assert r.reason is not None and r.reason.startswith("out: 1 of 6400 elements outside tolerance")
    assert r.max_abs_error == pytest.approx(float((wrong - ref).abs().max()), rel=1e-6)
    assert r.max_rel_error == pytest.approx(r.max_abs_error / float(ref.abs().max()), rel=1e-6)


def test_atol_scales_with_the_output_magnitude() -> None:
    for scale in (1e-6, 1.0, 1e6):  # the same relative noise passes at every magnitude
        ref = _t(2, 32, 32) * scale
        assert compare_outputs(ref, ref + 1e-6 * scale * _t(3, 32, 32), tolerance=FP32).passed
        assert not compare_outputs(ref, ref + 1e-2 * scale * _t(3, 32, 32), tolerance=FP32).passed


def test_bf16_rounding_needs_the_bf16_tolerance() -> None:
    ref = _t(4, 16, 1000)
    cand = ref.to(torch.bfloat16)  # dtype differs too: compared in float64
    assert compare_outputs(ref, cand, tolerance=BF16).passed
    r = compare_outputs(ref, cand, tolerance=FP32)
    assert not r.passed and r.min_cosine > 0.9999


def test_cosine_catches_drift_that_elementwise_bounds_allow() -> None:
    loose = Tolerance(rtol=1.0, atol=1.0, min_cosine=0.999)
    ref = _t(5, 4096)
    cand = ref + 0.3 * _t(6, 4096)  # every element within |ref| + rms, but clearly another vector
    r = compare_outputs(ref, cand, tolerance=loose)
    assert not r.passed and r.reason is not None and "cosine similarity" in r.reason
    assert r.min_cosine < 0.999


def test_nested_outputs_report_the_path_of_the_bad_leaf() -> None:
    ref = Pair(_t(7, 4, 3), {"hidden": [_t(8, 2, 2), _t(9, 5)], "ids": torch.arange(4)})
    ok = Pair(ref.logits.clone(), {"hidden": [t.clone() for t in ref.extra["hidden"]],
                                  "ids": torch.arange(4)})
    assert compare_outputs(ref, ok, tolerance=FP32).passed
    bad = Pair(ref.logits.clone(), {"hidden": [ref.extra["hidden"][0].clone(), ref.extra["hidden"][1] + 1],
                                   "ids": torch.arange(4)})
    r = compare_outputs(ref, bad, tolerance=FP32)
    assert not r.passed and r.reason is not None
    assert r.reason.startswith("out.extra['hidden'][1]: ")
    # dict key order does not matter; dict subclasses (e.g. model-output classes) count as dicts
    reordered = Pair(ref.logits, OrderedDict([("ids", torch.arange(4)), ("hidden", ref.extra["hidden"])]))
    assert compare_outputs(ref, reordered, tolerance=FP32).passed


@pytest.mark.parametrize(("candidate", "needle"), [
    ((torch.zeros(2), torch.zeros(3)), "expected namedtuple Pair"),
    (Pair(torch.zeros(2), {"other": torch.zeros(3)}), "keys differ"),
    (Pair(torch.zeros(2), 1.0), "expected a mapping"),
    (Pair(torch.zeros(3), {"a": torch.zeros(3)}), "shape (3,) != reference (2,)"),
    (Pair([torch.zeros(2)], {"a": torch.zeros(3)}), "expected Tensor, got list"),
])
def test_structure_mismatches_are_reported(candidate: Any, needle: str) -> None:
    ref = Pair(torch.zeros(2), {"a": torch.zeros(3)})
    r = compare_outputs(ref, candidate, tolerance=FP32)
    assert not r.passed and math.isinf(r.max_abs_error)
    assert r.reason is not None and needle in r.reason, r.reason


def test_list_length_and_tuple_list_interchange() -> None:
    ref = [torch.ones(2), torch.ones(2)]
    assert compare_outputs(ref, (torch.ones(2), torch.ones(2)), tolerance=FP32).passed  # TorchScript lists
    r = compare_outputs(ref, [torch.ones(2)], tolerance=FP32)
    assert not r.passed and r.reason is not None and "expected 2 items, got 1" in r.reason


def test_integer_outputs_must_match_exactly() -> None:
    ref = torch.tensor([1, 2, 3, 4])
    assert compare_outputs(ref, ref.clone(), tolerance=BF16).passed
    r = compare_outputs(ref, torch.tensor([1, 2, 3, 5]), tolerance=BF16)
    assert not r.passed and r.reason is not None and "1 of 4 integer elements differ" in r.reason
    assert compare_outputs(torch.tensor([True, False]), torch.tensor([True, False]), tolerance=FP32).passed
    assert not compare_outputs(torch.tensor([True, False]), torch.tensor([True, True]), tolerance=FP32).passed


def test_nan_and_inf_must_sit_in_the_same_places() -> None:
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0])
    assert compare_outputs(ref, ref.clone(), tolerance=FP32).passed
    for i, value in [(0, float("nan")), (2, -float("inf")), (4, float("inf")), (1, 0.0)]:
        cand = ref.clone()
        cand[i] = value
        r = compare_outputs(ref, cand, tolerance=FP32)
        assert not r.passed and r.reason is not None and "NaN/inf" in r.reason, (i, value)
        assert math.isinf(r.max_abs_error)


def test_zero_reference_and_empty_tensors() -> None:
    z = torch.zeros(3, 3)
    assert compare_outputs(z, z.clone(), tolerance=FP32).passed
    assert not compare_outputs(z, z + 1e-3, tolerance=FP32).passed
    assert compare_outputs(torch.zeros(0, 4), torch.zeros(0, 4), tolerance=FP32).passed


def test_scalar_and_non_tensor_leaves() -> None:
    ref = {"loss": 1.5, "n": 3, "name": "x", "none": None}
    near = {"loss": 1.5 + 1e-9, "n": 3, "name": "x", "none": None}
    assert compare_outputs(ref, near, tolerance=FP32).passed
    assert not compare_outputs(ref, {**near, "loss": 1.6}, tolerance=FP32).passed
    r = compare_outputs(ref, {"loss": 1.5, "n": 4, "name": "x", "none": None}, tolerance=FP32)
    assert not r.passed and r.reason is not None and r.reason.startswith("out['n']: 4 != reference 3")


def test_gate_result_to_dict_is_strict_json() -> None:
    r = compare_outputs(torch.ones(2), torch.tensor([1.0, float("nan")]), tolerance=FP32)
    d = r.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["passed"] is False and d["max_abs_error"] == "inf" and d["tolerance"] == FP32.to_dict()


# --------------------------------------------------------------------------------------------------
# check_variant on real variants
# --------------------------------------------------------------------------------------------------


class Branchy(torch.nn.Module):
    """Returns a dict with float and integer leaves; one branch depends on the data (the trace trap)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.lin(x)
        if bool(y.mean() > 0):
            y = y * 3
        return {"logits": y, "top": y.argmax(dim=-1)}


def test_check_variant_uses_fresh_batches_and_reports_the_worst() -> None:
    torch.manual_seed(0)
    model = Branchy().eval()
    seen: list[int] = []

    def make(seed: int) -> tuple[torch.Tensor, ...]:
        seen.append(seed)
        return (_t(100 + seed, 5, 6),)

    with torch.no_grad():
        branch = [bool(model.lin(make(s)[0]).mean() > 0) for s in range(4)]
    seen.clear()
    example = (_t(99, 5, 6),)
    traced = build_variant(VariantSpec.parse("trace"), model, example, device="cpu")
    gate = check_variant(model, traced, make, batches=4)
    assert seen == [0, 1, 2, 3]
    assert gate.batches == 4
    with torch.no_grad():
        example_branch = bool(model.lin(example[0]).mean() > 0)
    if all(b == example_branch for b in branch):
        pytest.skip("every batch took the example's branch")  # not expected for these seeds
    assert not gate.passed
    first_bad = next(i for i, b in enumerate(branch) if b != example_branch)
    assert gate.reason is not None and gate.reason.startswith(f"batch {first_bad}: out[")
    scripted = build_variant(VariantSpec.parse("script"), model, example, device="cpu")
    good = check_variant(model, scripted, make, batches=4)
    assert good.passed and good.max_abs_error == 0 and good.reason is None


def test_check_variant_picks_the_tolerance_of_the_variant_precision() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)).eval()
    built = build_variant(VariantSpec.parse("eager+bf16"), model, (_t(0, 4, 32),), device="cpu")
    gate = check_variant(model, built, lambda s: (_t(s + 1, 4, 32),))
    assert gate.passed and gate.tolerance == BF16
    assert isinstance(gate, GateResult) and gate.max_abs_error > 0
    with pytest.raises(ValueError):
        check_variant(model, built, lambda s: (_t(s, 4, 32),), batches=0)


def test_a_reference_with_nothing_to_check_fails_the_gate_with_its_reason() -> None:
    """All-NaN outputs "agree" with all-NaN outputs, and a None agrees with None: such a model was recommended
    without a word (issue 32). Some NaN or inf among finite values (a mask) is still compared as before."""
    tol = tolerance_for("fp32")
    nan = torch.full((2, 4), float("nan"))
    got = compare_outputs(nan, nan.clone(), tolerance=tol)
    assert not got.passed and "NaN/inf throughout" in (got.reason or "")
    got = compare_outputs({"logits": nan, "ids": torch.arange(4)}, {"logits": nan.clone(), "ids": torch.arange(4)},
                          tolerance=tol)
    assert not got.passed  # the only floating-point output is all NaN
    got = compare_outputs(None, None, tolerance=tol)
    assert not got.passed and "returned None" in (got.reason or "")
    masked = torch.tensor([[0.0, float("-inf"), 1.0]])
    assert compare_outputs(masked, masked.clone(), tolerance=tol).passed
    assert compare_outputs(torch.arange(3), torch.arange(3), tolerance=tol).passed  # integer outputs: no NaN to have


def test_an_output_object_holding_tensors_is_compared_by_its_tensors() -> None:
    """A transformers GPT-2 classifier returns its KV cache (a ``DynamicCache``) beside the logits. Such an object
    compares by identity, so eager was once rejected against eager ("DynamicCache(...) != reference
    DynamicCache(...)"); its tensors are compared instead, and a changed one is named by its path."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, num_labels=2)
    torch.manual_seed(0)
    model = transformers.GPT2ForSequenceClassification(cfg).eval()
    x = torch.randint(0, 100, (1, 12))
    with torch.inference_mode():
        ref, again = model(input_ids=x), model(input_ids=x)
    caches = [v for v in again.values() if not isinstance(v, torch.Tensor)]
    assert caches and hasattr(caches[0], "__dict__"), "the output holds a cache object"
    same = compare_outputs(ref, again, tolerance=tolerance_for("fp32"))
    assert same.passed, same.reason
    layer = caches[0].layers[0]
    with torch.inference_mode():
        layer.keys.add_(1.0)
    changed = compare_outputs(ref, again, tolerance=tolerance_for("fp32"))
    assert not changed.passed and ".layers[0].keys" in (changed.reason or "")


def test_plain_objects_in_an_output_still_compare_by_value() -> None:
    """Objects with no tensor inside (a dtype, a string, a small record) are leaves compared by equality."""

    class Record:
        def __init__(self, name: str) -> None:
            self.name = name

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Record) and other.name == self.name

        __hash__ = None  # type: ignore[assignment]

    t = torch.ones(3)
    assert compare_outputs({"r": Record("a"), "t": t}, {"r": Record("a"), "t": t.clone()},
                           tolerance=tolerance_for("fp32")).passed
    bad = compare_outputs({"r": Record("a"), "t": t}, {"r": Record("b"), "t": t.clone()},
                          tolerance=tolerance_for("fp32"))
    assert not bad.passed and "non-float leaves must be equal" in (bad.reason or "")
