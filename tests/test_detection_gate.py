"""The correctness gate on detector outputs: matching instead of position (autotune.worker.detections).

Pure tests on synthetic torchvision-style detections, then a real torchvision Faster R-CNN through
autotune's builder and gate: variants whose detections come out reordered or swapped at a cut pass,
a variant whose boxes are shifted by a few pixels is rejected.
"""

from __future__ import annotations

import importlib.util
import math
from types import ModuleType
from typing import Any

import pytest
import torch

from autotune.worker.correctness import check_variant, compare_outputs, tolerance_for
from autotune.worker.detections import FEW, NMS_IOU, detection_keys, match_detections
from autotune.worker.variants import VariantSpec, build_variant
from tests.support import ROOT

FP32 = tolerance_for("fp32")
BF16 = tolerance_for("bf16")

Dets = dict[str, torch.Tensor]


def _dets(n: int = 20, *, seed: int = 0, size: float = 320.0, top: float = 0.9, low: float = 0.3) -> Dets:
    """torchvision-style detections: descending, well-separated scores; random boxes and labels."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size * 0.7
    wh = 20 + torch.rand(n, 2, generator=g) * 80
    return {"boxes": torch.cat([xy, xy + wh], dim=1),
            "labels": torch.randint(1, 6, (n,), generator=g),
            "scores": torch.linspace(top, low, n)}


def _take(d: Dets, index: list[int] | torch.Tensor) -> Dets:
    idx = torch.as_tensor(index, dtype=torch.long)
    return {k: v[idx] for k, v in d.items()}


def _cat(a: Dets, b: Dets) -> Dets:
    return {k: torch.cat([a[k], b[k]]) for k in a}


def _reason(r: Any) -> str:
    assert r.reason is not None
    return str(r.reason)


# --------------------------------------------------------------------------------------------------
# recognition
# --------------------------------------------------------------------------------------------------


def test_detections_are_recognised_by_structure() -> None:
    d = _dets(5)
    assert detection_keys(d, _dets(3, seed=1)) == ("boxes", "labels", "scores")  # K may differ
    masks = {**d, "masks": torch.zeros(5, 1, 8, 8), "image_id": torch.tensor(7)}
    other = {**_dets(4, seed=1), "masks": torch.zeros(4, 1, 8, 8), "image_id": torch.tensor(7)}
    assert detection_keys(masks, other) == ("boxes", "labels", "scores", "masks")  # image_id: not per-detection
    no_labels = {"boxes": d["boxes"], "scores": d["scores"]}
    assert detection_keys(no_labels, no_labels) == ("boxes", "scores")
    assert detection_keys({**d, "boxes": torch.zeros(5, 5)}, d) is None  # not (K, 4)
    assert detection_keys({**d, "labels": d["labels"].float()}, {**d, "labels": d["labels"].float()}) is None
    assert detection_keys(d, {k: v for k, v in d.items() if k != "labels"}) is None  # keys differ
    nan = {**d, "scores": d["scores"].clone()}
    nan["scores"][0] = float("nan")
    assert detection_keys(nan, nan) is None  # the gate's NaN rule applies position by position
    assert detection_keys({"logits": torch.zeros(5, 4)}, {"logits": torch.zeros(5, 4)}) is None


def test_a_mapping_that_is_not_detections_is_still_compared_by_position() -> None:
    d = {**_dets(6), "labels": _dets(6)["labels"].float()}  # float labels: not recognised
    r = compare_outputs([d], [_take(d, [1, 0, 2, 3, 4, 5])], tolerance=FP32)
    assert not r.passed and _reason(r).startswith("out[0][") and "elements outside tolerance" in _reason(r)


# --------------------------------------------------------------------------------------------------
# matching on synthetic detections
# --------------------------------------------------------------------------------------------------


def test_identical_and_permuted_detections_pass() -> None:
    ref = [_dets(20, seed=0), _dets(15, seed=1)]
    same = compare_outputs(ref, [dict(d) for d in ref], tolerance=FP32)
    assert same.passed and same.max_abs_error == 0 and same.min_cosine == pytest.approx(1.0)
    g = torch.Generator().manual_seed(5)
    noisy = []
    for d in ref:
        p = torch.randperm(d["scores"].numel(), generator=g)
        n = _take(d, p)
        n["boxes"] = n["boxes"] * (1 + 1e-6 * torch.randn(n["boxes"].shape, generator=g))
        noisy.append(n)
    r = compare_outputs(ref, noisy, tolerance=FP32)
    assert r.passed and r.reason is None
    assert 0 < r.max_abs_error < 1e-3  # the matched pairs' error, not the positional one
    # the same lists compared by position (tuples are not recognised) fail, as on main
    as_tuples = compare_outputs([tuple(d.values()) for d in ref], [tuple(d.values()) for d in noisy],
                                tolerance=FP32)
    assert not as_tuples.passed


def test_a_near_tie_swap_at_the_top_k_cut_passes() -> None:
    pool = _dets(21, low=0.3)
    pool["scores"][20] = pool["scores"][19] + 1e-7  # the 20th and 21st tie to rounding
    ref = _take(pool, list(range(20)))  # detections_per_img = 20: the list is full
    cand = _take(pool, [*range(19), 20])  # rounding put the 21st above the 20th
    r = compare_outputs([ref], [cand], tolerance=FP32)
    assert r.passed, r.reason
    m = match_detections(ref, cand, rtol=FP32.rtol, atol=FP32.atol)
    assert len(m.ref_index) == 19 and m.excused_boundary == 2 and m.excused_nms == 0
    # a swap of a detection far above the cut is not a tie: it fails
    cand_bad = _take(pool, [*range(10), *range(11, 20), 20])
    bad = compare_outputs([ref], [cand_bad], tolerance=FP32)
    assert not bad.passed
    assert _reason(bad).startswith("out[0]: 1 of 20 reference detections unmatched (top score 0.6, best IoU")


def test_a_detection_at_the_score_threshold_may_flip() -> None:
    ref = _dets(12, low=0.05)
    cand = _take(ref, list(range(11)))  # the lowest (0.05, the threshold) fell just below it
    cand["scores"] = cand["scores"] * (1 - 1e-7)
    assert compare_outputs([ref], [cand], tolerance=FP32).passed
    assert compare_outputs([cand], [ref], tolerance=FP32).passed  # ... or just above it


def test_a_near_duplicate_at_the_nms_threshold_may_flip() -> None:
    keep = {"boxes": torch.tensor([[100.0, 100.0, 200.0, 200.0], [10.0, 10.0, 60.0, 40.0]]),
            "labels": torch.tensor([1, 2]), "scores": torch.tensor([0.9, 0.8])}
    low = {"boxes": torch.tensor([[250.0, 10.0, 300.0, 40.0]]), "labels": torch.tensor([2]),
           "scores": torch.tensor([0.5])}  # kept by both, below the near-duplicate: no cut explains it
    x = 100.0 / 3  # IoU((0,100)x(0,100) shifted by x) = (100 - x) / (100 + x) = 0.5: at the threshold
    dup = {"boxes": torch.tensor([[100.0 + x, 100.0, 200.0 + x, 200.0]]), "labels": torch.tensor([1]),
           "scores": torch.tensor([0.7])}
    ref = _cat(_cat(keep, dup), low)
    cand = _cat(keep, low)
    m = match_detections(ref, cand, rtol=FP32.rtol, atol=FP32.atol)
    assert m.passed and m.excused_nms == 1 and m.excused_boundary == 0
    assert compare_outputs([ref], [cand], tolerance=FP32).passed
    # the same detection well clear of the NMS threshold (IoU 0.33) should not have been suppressed
    x = 50.0
    far = {**dup, "boxes": torch.tensor([[100.0 + x, 100.0, 200.0 + x, 200.0]])}
    r = compare_outputs([_cat(_cat(keep, far), low)], [cand], tolerance=FP32)
    assert not r.passed and "1 of 4 reference detections unmatched (top score 0.7, best IoU 0.33)" in _reason(r)
    # ... nor one at the threshold whose would-be suppressor has another label
    other = {**dup, "labels": torch.tensor([3])}
    assert not compare_outputs([_cat(_cat(keep, other), low)], [cand], tolerance=FP32).passed
    assert NMS_IOU == 0.5


def test_boxes_shifted_by_a_tenth_of_their_size_fail_with_the_offset() -> None:
    ref = _dets(20)
    cand = dict(ref)
    size = ref["boxes"][:, 2:] - ref["boxes"][:, :2]
    cand["boxes"] = ref["boxes"] + 0.1 * torch.cat([size, size], dim=1)
    r = compare_outputs([ref], [cand], tolerance=FP32)
    assert not r.passed
    reason = _reason(r)
    assert reason.startswith("out[0]: 20 of 20 reference detections unmatched (top score 0.9, best IoU 0.6")
    assert "; 0 matched, 2 excused; more than half of a list unmatched is not a discontinuity" in reason
    assert "nearest candidate boxes off by up to" in reason
    expected = float((cand["boxes"] - ref["boxes"]).abs().max())
    assert r.max_abs_error == pytest.approx(expected)  # the displacement, reported as the error
    # a single shifted box among 20 fails too, naming that detection's score
    one = {k: v.clone() for k, v in ref.items()}
    one["boxes"][3] += 0.1 * torch.cat([size[3], size[3]])
    r1 = compare_outputs([ref], [one], tolerance=FP32)
    assert not r1.passed and "1 of 20 reference detections unmatched (top score 0.8053" in _reason(r1)
    assert r1.max_abs_error == pytest.approx(float(0.1 * size[3].max()), rel=1e-5)
    # bf16's tolerance is wide (5% of the image's rms coordinate): a 1-pixel shift is within it
    near = {**ref, "boxes": ref["boxes"] + 1.0}
    assert compare_outputs([ref], [near], tolerance=BF16).passed
    assert not compare_outputs([ref], [near], tolerance=FP32).passed


def test_a_missing_high_score_detection_fails() -> None:
    ref = _dets(20)
    cand = _take(ref, list(range(1, 20)))
    r = compare_outputs([_dets(5, seed=9), ref], [_dets(5, seed=9), cand], tolerance=FP32)
    assert not r.passed
    assert _reason(r).startswith("out[1]: 1 of 20 reference detections unmatched (top score 0.9, best IoU")
    assert math.isinf(r.max_abs_error)  # nothing to measure a missing detection against
    extra = compare_outputs([cand], [ref], tolerance=FP32)  # an extra one fails as well
    assert not extra.passed and "1 of 20 candidate detections unmatched (top score 0.9)" in _reason(extra)


def test_wrong_labels_fail() -> None:
    ref = _dets(20)
    cand = {**ref, "labels": ref["labels"].clone()}
    cand["labels"][2] = ref["labels"][2] % 5 + 1
    r = compare_outputs([ref], [cand], tolerance=FP32)
    assert not r.passed
    reason = _reason(r)
    assert "1 of 20 reference detections unmatched" in reason
    assert f"IoU 1.00 with a candidate labelled {int(cand['labels'][2])} instead of {int(ref['labels'][2])}" \
        in reason


def test_scores_outside_tolerance_fail() -> None:
    ref = _dets(20)
    cand = {**ref, "scores": ref["scores"] * 1.01}
    r = compare_outputs([ref], [cand], tolerance=FP32)
    assert not r.passed and "nearest candidate boxes off by up to 0 (allowed 0.0436), scores by 0.009" in _reason(r)
    assert compare_outputs([ref], [cand], tolerance=BF16).passed


def test_per_detection_leaves_follow_the_matching() -> None:
    ref = _dets(8)
    ref["masks"] = torch.rand(8, 1, 6, 6, generator=torch.Generator().manual_seed(3))
    perm = [7, 6, 5, 4, 3, 2, 1, 0]
    assert compare_outputs([ref], [_take(ref, perm)], tolerance=FP32).passed
    bad = _take(ref, perm)
    bad["masks"][2] += 0.5
    r = compare_outputs([ref], [bad], tolerance=FP32)
    assert not r.passed and _reason(r).startswith("out[0]['masks'] (matched detections): 36 of 288 elements")
    assert "(8 of 8 matched)" in _reason(r)


def test_when_scores_tie_most_of_a_list_cannot_be_excused() -> None:
    """A degenerate detector (every score equal): every detection is at the cut, so only step 3 catches a shift."""
    ref = _dets(30)
    ref["scores"] = torch.full((30,), 0.5019)
    ref["labels"] = torch.ones(30, dtype=torch.long)
    swapped = _cat(_take(ref, list(range(25))), _dets(5, seed=4) | {"scores": torch.full((5,), 0.5019),
                                                                  "labels": torch.ones(5, dtype=torch.long)})
    ok = match_detections(ref, swapped, rtol=FP32.rtol, atol=FP32.atol)
    assert ok.passed and ok.excused_boundary == 10  # 5 out, 5 in: all at the (tied) cut
    shifted = {**ref, "boxes": ref["boxes"] + 3.0}
    r = compare_outputs([ref], [shifted], tolerance=FP32)
    assert not r.passed and _reason(r).startswith("out[0]: 30 of 30 reference detections unmatched")
    assert "more than half of a list unmatched" in _reason(r)
    # a list with at most FEW unmatched is exempt: two weak detections at the threshold may both flip
    tiny = _take(ref, [0, 1])
    assert compare_outputs([tiny], [_take(ref, [2, 3])], tolerance=FP32).passed
    assert FEW == 2


def test_empty_detection_lists() -> None:
    empty = _take(_dets(3), [])
    assert compare_outputs([empty], [_take(_dets(3), [])], tolerance=FP32).passed
    low = _dets(1, top=0.05)
    assert compare_outputs([empty], [low], tolerance=FP32).passed  # one detection at the threshold
    many = _dets(6)
    r = compare_outputs([empty], [many], tolerance=FP32)
    assert not r.passed and _reason(r).startswith("out[0]: 6 of 6 candidate detections unmatched (top score 0.9)")
    gone = compare_outputs([many], [empty], tolerance=FP32)
    assert not gone.passed and math.isinf(gone.max_abs_error)
    assert _reason(gone).startswith("out[0]: 6 of 6 reference detections unmatched (top score 0.9, best IoU 0.00)")


# --------------------------------------------------------------------------------------------------
# a real torchvision Faster R-CNN through autotune's builder and gate
# --------------------------------------------------------------------------------------------------


def _recipe_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("autotune_recipe_models", ROOT / "recipes" / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _detector(**kwargs: Any) -> torch.nn.Module:
    pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return _recipe_models().fasterrcnn_batched(**kwargs)  # type: ignore[no-any-return]


def _images(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 3, 320, 320, generator=torch.Generator().manual_seed(100 + seed)),)


class ShiftedBoxes(torch.nn.Module):
    """A deliberately wrong variant: the same detector, every box moved by a few pixels."""

    def __init__(self, inner: torch.nn.Module, pixels: float) -> None:
        super().__init__()
        self.inner = inner
        self.pixels = pixels

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        return [{**d, "boxes": d["boxes"] + self.pixels} for d in self.inner(images)]


@pytest.mark.worker  # a real model through worker ops (the marker's definition): not test-fast
def test_the_factory_builds_a_small_batched_detector() -> None:
    model = _detector()
    assert not model.training
    with torch.inference_mode():
        out = model(*_images(0))
    assert isinstance(out, list) and len(out) == 2
    for d in out:
        assert set(d) == {"boxes", "labels", "scores"} and d["boxes"].shape == (100, 4)
        assert float(d["scores"].max() - d["scores"].min()) > 0.01  # calibrated: scores spread, no tie


def _positional(out: list[dict[str, torch.Tensor]]) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(d[k] for k in sorted(d)) for d in out]


@pytest.mark.worker  # a real model through worker ops (the marker's definition): not test-fast
def test_real_detector_reordered_by_a_correct_variant_passes() -> None:
    """torchvision's own random init ties every score: channels_last reorders and swaps at the cut."""
    model = _detector(num_classes=5, calibrate=False)
    built = build_variant(VariantSpec.parse("eager+channels_last"), model, _images(99), device="cpu")
    with torch.inference_mode():
        ref = model(*_images(0))
        out = built.fn(*built.prepare_inputs(_images(0)))
    # where the discontinuity is there, compared by position (as before this gate) the variant is rejected. It
    # depends on the CPU's kernels: on the AVX2 EPYC channels_last reordered tied detections; on a Sapphire
    # Rapids part (AVX-512, AMX; 2026-11-26) it computed the same values in the same order, so nothing moved
    # and the positional comparison rightly passes. The gate must pass either way.
    positional = compare_outputs(_positional(ref), _positional(out), tolerance=FP32)
    if not positional.passed:
        assert "elements outside tolerance" in _reason(positional)
    gate = check_variant(model, built, _images, batches=2)
    assert gate.passed, gate.reason
    assert gate.max_abs_error < 1e-2


@pytest.mark.worker  # a real model through worker ops (the marker's definition): not test-fast
def test_real_detector_with_shifted_boxes_is_rejected() -> None:
    model = _detector(num_classes=5)
    wrong = build_variant(VariantSpec.parse("eager"), ShiftedBoxes(model, 3.0), _images(99), device="cpu")
    gate = check_variant(model, wrong, _images, batches=2)
    assert not gate.passed
    reason = _reason(gate)
    assert reason.startswith("batch 0: out[") and "100 of 100 reference detections unmatched" in reason
    assert "nearest candidate boxes off by up to 3" in reason
    assert gate.max_abs_error == pytest.approx(3.0, abs=1e-3)
    right = build_variant(VariantSpec.parse("eager"), ShiftedBoxes(model, 0.0), _images(99), device="cpu")
    assert check_variant(model, right, _images, batches=2).passed
    # on the tied (uncalibrated) detector the majority rule is what rejects the shift
    tied = _detector(num_classes=5, calibrate=False)
    wrong_tied = build_variant(VariantSpec.parse("eager"), ShiftedBoxes(tied, 3.0), _images(99), device="cpu")
    gate_tied = check_variant(tied, wrong_tied, _images, batches=1)
    assert not gate_tied.passed and "more than half of a list unmatched" in _reason(gate_tied)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["compile", "onnx"])
def test_real_detector_compiled_passes(variant: str) -> None:
    """compile (~85 s cold on 2 cores) and ONNX Runtime (~35 s) reorder the tied detector's output too."""
    from autotune.worker.variants import available

    model = _detector(num_classes=5, calibrate=False)
    spec = VariantSpec.parse(variant)
    avail = available(spec, device="cpu")
    if not avail.ok:
        pytest.skip(avail.reason)
    built = build_variant(spec, model, _images(99), device="cpu")
    gate = check_variant(model, built, _images, batches=3)
    assert gate.passed, gate.reason
    wrong = build_variant(spec, ShiftedBoxes(model, 3.0), _images(99), device="cpu")
    assert not check_variant(model, wrong, _images, batches=1).passed
