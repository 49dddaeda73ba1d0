"""Detector outputs in the correctness gate: recognised by their structure, compared by matching.

A detector ends in discontinuous selections: a score threshold, non-maximum suppression (NMS) and a
top-k cut (torchvision: ``box_score_thresh``, ``box_nms_thresh``, ``box_detections_per_img``). Two
detections whose scores tie to the last bits are ordered by rounding, so a variant that computes the
same numbers up to harmless rounding (a compiler's fused kernels, ONNX Runtime, channels_last, bf16)
can return the same detections in another order, or swap one at the selection boundary for another.
Compared position by position that is "100 of 400 elements outside tolerance", indistinguishable from
a wrong answer. This module compares one image's detections as a *set*, and accepts a membership
difference only where a discontinuity explains it.

Recognition (structural, :func:`detection_keys`): a mapping with ``boxes`` (K, 4) float (x1, y1, x2,
y2, as torchvision), ``scores`` (K,) float, optionally ``labels`` (K,) integer, on both sides with the
same keys and finite boxes and scores. Its other tensors whose first dimension is K (``masks``,
``keypoints``, ``keypoints_scores``) are per-detection and follow the matching; anything else in the
mapping is compared by the gate's ordinary rules. torchvision's list of such dicts is one per image.

Algorithm (:func:`match_detections`), per image, reference R (eager fp32) and candidate C::

    e_box(r)   = atol * rms(R.boxes)  + rtol * |R.boxes[r]|     the gate's tensor rule, per coordinate:
    e_score(s) = atol * rms(R.scores) + rtol * |s|              boxes scale with the image, scores with theirs
    agree(r, c) = label(r) == label(c) and |C.boxes[c] - R.boxes[r]| <= e_box(r) and |C.s[c] - R.s[r]| <= e_score

    1. match, greedily in descending reference score (ties by index):
         c = the unmatched candidate that agrees with r with the smallest error (in units of the tolerance)
         pair (r, c) if one exists
       Only agreeing pairs are matched, so a pair is never "the same object, a bit off": either the
       variant computed that detection (within the precision's tolerance) or it did not.
    2. excuse each unmatched detection d, present in list L and missing from the other list O, if
         boundary: score(d) <= b + e_score(score(d)), where
                   b = max(min score of O        if len(O) >= len(L)   (O had no room: the top-k cut),
                           min(min score of R, min score of C))        (stand-in for the score threshold)
       or
         nms:      some matched pair (k_R, k_C) with label(k) == label(d) and score(k) >= score(d) - e_score
                   has |IoU(d, k_O) - NMS_IOU| <= slack   (d overlaps a kept detection at the NMS threshold:
                   its suppression flips with rounding; slack = the IoU change the box tolerance allows)
    3. majority: fail if more than max(FEW, half) of either list is unmatched, excused or not
    4. pass iff no unmatched detection is left unexcused (the gate then checks the matched pairs' boxes,
       scores and per-detection leaves with its tensor rule, cosine included).

Why these excuses and no others: the score threshold and the top-k cut drop exactly the detections
whose score is at the cut, so a swap there has scores within rounding of the cut; NMS drops a box
whose IoU with a kept, higher-scoring box of its class exceeds the threshold, so a flip needs an IoU
within rounding of it and a suppressor kept by both. A box moved by a few pixels, a missing
high-score detection or a changed label fits neither, and fails. The model's own threshold, NMS IoU
and K are not visible in its outputs: K is read as "the other list was at least as long", the score
threshold as the lowest score either list kept, and the NMS IoU is torchvision's default
(:data:`NMS_IOU`); a detector with another NMS threshold only loses that excuse.

Why the majority rule (step 3): a discontinuity moves the few detections at a cut, not most of them;
where more than half of a list needs an excuse, the excuses are no longer evidence. It matters where
scores tie: torchvision's detectors with random weights give every box the same score to ~1e-7, so
every detection is "at the boundary", and without step 3 boxes moved by a few pixels would pass.
Real variants of such a model reorder its detections completely (positionally 259 of 400 box
coordinates differ for compile and channels_last) but keep 83-100% of them (ONNX Runtime, compile,
channels_last). Lists with at most :data:`FEW` unmatched detections are exempt: two weak detections
at the threshold may both flip.

Limits: a discontinuity upstream (the RPN's own top-k and NMS picking another proposal) can change a
detection at any score and is not excused; a score-order flip between two overlapping near-tied
boxes of one class (each suppressing the other in turn) is excused only at a cut. Both need scores
equal to within the variant's rounding: rare in fp32, but bf16 moves proposals, and a bf16 variant of
a detector can be rejected for a few such detections.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

BOXES = "boxes"
SCORES = "scores"
LABELS = "labels"
#: torchvision's default ``box_nms_thresh`` (and the usual choice elsewhere): the IoU at which NMS flips.
NMS_IOU = 0.5
#: At most this much IoU slack for an NMS flip, however loose the precision's box tolerance (bf16).
MAX_NMS_SLACK = 0.1
#: Up to this many unmatched detections per list are never "most of the list" (step 3).
FEW = 2
#: An unmatched reference detection with a same-label candidate whose coordinates are all within this
#: fraction of its larger side is reported as displaced (with the coordinate error), one without as missing.
NEAR = 0.5


def _is_float_tensor(x: Any, dim: int) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.dim() == dim and x.is_floating_point()


def _count(m: Mapping[Any, Any]) -> int | None:
    """K, when ``m`` is one image's detections (see the module docstring), else None."""
    import torch

    boxes, scores = m.get(BOXES), m.get(SCORES)
    if not (_is_float_tensor(boxes, 2) and _is_float_tensor(scores, 1)):
        return None
    assert isinstance(boxes, torch.Tensor) and isinstance(scores, torch.Tensor)
    k = int(boxes.shape[0])
    if boxes.shape[1] != 4 or scores.shape[0] != k:
        return None
    labels = m.get(LABELS)
    if LABELS in m and not (isinstance(labels, torch.Tensor) and labels.dim() == 1
                            and not labels.is_floating_point() and not labels.is_complex()
                            and labels.shape[0] == k):
        return None
    if not (bool(torch.isfinite(boxes).all()) and bool(torch.isfinite(scores).all())):
        return None  # NaN/inf: compared position by position, where the gate's NaN rule applies
    return k


def detection_keys(ref: Any, cand: Any) -> tuple[Any, ...] | None:
    """The per-detection keys when ``ref`` and ``cand`` are both one image's detections, else None.

    Both must be mappings with the same keys, each recognised on its own (module docstring); the
    per-detection keys are ``boxes``, ``scores``, ``labels`` and every tensor whose first dimension is
    the reference's K, provided the candidate's is a tensor with its own K first and the same other
    dimensions. A mapping that fails any of this is compared position by position, as before.
    """
    import torch

    if not (isinstance(ref, Mapping) and isinstance(cand, Mapping)) or set(ref) != set(cand):
        return None
    k_ref, k_cand = _count(ref), _count(cand)
    if k_ref is None or k_cand is None:
        return None
    keys: list[Any] = []
    for key, value in ref.items():
        if key in (BOXES, SCORES, LABELS):
            keys.append(key)
            continue
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == k_ref:
            other = cand[key]
            if not (isinstance(other, torch.Tensor) and tuple(other.shape) == (k_cand, *value.shape[1:])):
                return None
            keys.append(key)
    return tuple(keys)


@dataclass(frozen=True)
class DetectionMatch:
    """One image's matching: the pairs, what was excused, and the one-line problem (None if none)."""

    ref_index: tuple[int, ...]  # matched pairs: ref_index[i] <-> cand_index[i]
    cand_index: tuple[int, ...]
    n_ref: int
    n_cand: int
    excused_boundary: int  # unmatched detections (either list) excused at the selection boundary
    excused_nms: int  # ... excused as NMS near-duplicates
    unexcused_ref: tuple[int, ...]
    unexcused_cand: tuple[int, ...]
    #: For the reference detections blamed (unexcused, or all unmatched when most of a list is), each
    #: against its nearest unmatched same-label candidate within NEAR: the largest coordinate and score
    #: errors; inf where one has no such candidate or only candidate detections are blamed.
    displaced_box_error: float
    displaced_score_error: float
    problem: str | None

    @property
    def passed(self) -> bool:
        return self.problem is None

    @property
    def summary(self) -> str:
        """``93 of 100 matched, 7 excused (5 at the score boundary, 2 NMS near-duplicates)``."""
        excused = self.excused_boundary + self.excused_nms
        text = f"{len(self.ref_index)} of {self.n_ref} matched"
        if excused:
            text += (f", {excused} excused ({self.excused_boundary} at the score boundary, "
                     f"{self.excused_nms} NMS near-duplicates)")
        return text


def _box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every box in ``a`` (N, 4) with every box in ``b`` (M, 4), x1 y1 x2 y2; 0 where the union is empty."""
    import torch

    area_a = (a[:, 2] - a[:, 0]).clamp(min=0) * (a[:, 3] - a[:, 1]).clamp(min=0)
    area_b = (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a[:, None] + area_b[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-300), torch.zeros_like(union))


def _iou_slack(d: torch.Tensor, others: torch.Tensor, iou: torch.Tensor, e: float) -> torch.Tensor:
    """How far IoU(d, k) can move, for each k in ``others`` (M, 4), when every coordinate moves by <= ``e``.

    To first order the intersection I and the union U each change by at most e times the sum of the two
    perimeters P, so IoU = I / U changes by at most e P (1 + IoU) / U <= 2 e P / U, with
    U = (area_d + area_k) / (1 + IoU). Capped at MAX_NMS_SLACK.
    """
    import torch

    def sides(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (b[..., 2] - b[..., 0]).clamp(min=0), (b[..., 3] - b[..., 1]).clamp(min=0)

    wd, hd = sides(d)
    wk, hk = sides(others)
    perimeter = 2.0 * (wd + hd + wk + hk)
    union = (wd * hd + wk * hk) / (1.0 + iou)
    slack = torch.where(union > 0, 2.0 * e * perimeter / union.clamp(min=1e-300),
                        torch.full_like(union, MAX_NMS_SLACK))
    return slack.clamp(max=MAX_NMS_SLACK)


def match_detections(ref: Mapping[Any, Any], cand: Mapping[Any, Any], *, rtol: float,
                     atol: float) -> DetectionMatch:
    """Match one image's candidate detections to the reference's (module docstring: the algorithm)."""
    import torch

    rb = ref[BOXES].detach().to("cpu", torch.float64)
    cb = cand[BOXES].detach().to("cpu", torch.float64)
    rs = ref[SCORES].detach().to("cpu", torch.float64)
    cs = cand[SCORES].detach().to("cpu", torch.float64)
    n_ref, n_cand = int(rb.shape[0]), int(cb.shape[0])
    if LABELS in ref:
        rl = ref[LABELS].detach().to("cpu", torch.int64)
        cl = cand[LABELS].detach().to("cpu", torch.int64)
    else:
        rl = torch.zeros(n_ref, dtype=torch.int64)
        cl = torch.zeros(n_cand, dtype=torch.int64)

    def rms(x: torch.Tensor) -> float:
        value = float(x.pow(2).mean().sqrt()) if x.numel() else 0.0
        return value if value > 0 else 1.0

    box_scale, score_scale = rms(rb), rms(rs)

    def e_score(s: float) -> float:
        return atol * score_scale + rtol * abs(s)

    e_box_ref = atol * box_scale + rtol * rb.abs()  # (n_ref, 4)

    # 1. greedy matching of agreeing pairs, in descending reference score
    same_label = rl[:, None] == cl[None, :]
    box_err = ((cb[None, :, :] - rb[:, None, :]).abs() / e_box_ref[:, None, :]).amax(dim=2) \
        if n_ref and n_cand else torch.zeros(n_ref, n_cand, dtype=torch.float64)
    score_err = (cs[None, :] - rs[:, None]).abs() / (atol * score_scale + rtol * rs.abs())[:, None]
    err = torch.maximum(box_err, score_err).masked_fill(~same_label, math.inf)
    taken = torch.zeros(n_cand, dtype=torch.bool)
    order = [int(i) for i in torch.sort(-rs, stable=True).indices]
    pairs: dict[int, int] = {}
    for i in order:
        if not n_cand:
            break
        row = err[i].masked_fill(taken, math.inf)
        j = int(torch.argmin(row))
        if float(row[j]) <= 1.0:
            pairs[i] = j
            taken[j] = True
    matched_ref = set(pairs)
    matched_cand = set(pairs.values())
    ref_is_matched = torch.zeros(n_ref, dtype=torch.bool)
    ref_is_matched[list(matched_ref)] = True
    cand_is_matched = taken

    # 2. excuses for the unmatched
    threshold = min(float(rs.min()) if n_ref else math.inf, float(cs.min()) if n_cand else math.inf)
    e_coord = atol * box_scale + rtol * max(float(rb.abs().max()) if n_ref else 0.0, 1.0)
    iou_d_ref = _box_iou(cb, rb)  # candidate d against reference detections k_R
    iou_d_cand = _box_iou(rb, cb)  # reference d against candidate detections k_C

    def excuse(score: float, label: int, box: torch.Tensor, own_len: int, other_scores: torch.Tensor,
               iou_to_other: torch.Tensor, other_boxes: torch.Tensor, other_matched: torch.Tensor,
               other_labels: torch.Tensor) -> str | None:
        cut = threshold
        if other_scores.numel() and other_scores.numel() >= own_len:
            cut = max(cut, float(other_scores.min()))
        if score <= cut + e_score(score):
            return "boundary"
        suppressors = other_matched & (other_labels == label) & (other_scores >= score - e_score(score))
        if bool(suppressors.any()):
            ious = iou_to_other[suppressors]
            slack = _iou_slack(box, other_boxes[suppressors], ious, e_coord)
            if bool(((ious - NMS_IOU).abs() <= slack).any()):
                return "nms"
        return None

    boundary = nms = 0
    unexcused_ref: list[int] = []
    unexcused_cand: list[int] = []
    for i in order:
        if i in matched_ref:
            continue
        why = excuse(float(rs[i]), int(rl[i]), rb[i], n_ref, cs, iou_d_cand[i], cb, cand_is_matched, cl)
        boundary += why == "boundary"
        nms += why == "nms"
        if why is None:
            unexcused_ref.append(i)
    for j in (int(j) for j in torch.sort(-cs, stable=True).indices):
        if j in matched_cand:
            continue
        why = excuse(float(cs[j]), int(cl[j]), cb[j], n_cand, rs, iou_d_ref[j], rb, ref_is_matched, rl)
        boundary += why == "boundary"
        nms += why == "nms"
        if why is None:
            unexcused_cand.append(j)

    # 3. majority: when most of a list is unmatched, every unmatched detection is to blame
    lost_ref, lost_cand = n_ref - len(pairs), n_cand - len(pairs)
    majority = lost_ref > max(FEW, n_ref / 2) or lost_cand > max(FEW, n_cand / 2)
    blamed_ref = [i for i in order if i not in matched_ref] if majority else unexcused_ref
    blamed_cand = [j for j in range(n_cand) if j not in matched_cand] if majority else unexcused_cand
    blamed_cand.sort(key=lambda j: (-float(cs[j]), j))

    # diagnosis: the nearest unmatched same-label candidate of each blamed reference detection (not
    # one-to-one: this only measures how far off the candidate is, the verdict is already taken)
    unmatched_cand = ~cand_is_matched
    box_off = score_off = allowed_off = 0.0
    for i in blamed_ref:
        dist = (cb - rb[i]).abs().amax(dim=1).masked_fill(~(unmatched_cand & (cl == rl[i])), math.inf) \
            if n_cand else torch.zeros(0, dtype=torch.float64)
        j = int(torch.argmin(dist)) if n_cand else -1
        reach = NEAR * float((rb[i, 2:] - rb[i, :2]).abs().max())
        if j < 0 or not float(dist[j]) <= reach:
            box_off = score_off = math.inf
            continue
        box_off = max(box_off, float(dist[j]))
        score_off = max(score_off, abs(float(cs[j] - rs[i])))
        allowed_off = max(allowed_off, float(e_box_ref[i].max()))

    problem = None
    if blamed_ref or blamed_cand:
        parts = []
        if blamed_ref:
            top = blamed_ref[0]  # the highest-scoring one
            label = int(rl[top])
            best_same = float(iou_d_cand[top].masked_fill(cl != label, 0.0).max()) if n_cand else 0.0
            best_any = float(iou_d_cand[top].max()) if n_cand else 0.0
            where = f"best IoU {best_same:.2f}"
            if best_any > best_same + 0.05 and LABELS in ref:
                other = int(cl[int(torch.argmax(iou_d_cand[top]))])
                where += f"; IoU {best_any:.2f} with a candidate labelled {other} instead of {label}"
            parts.append(f"{len(blamed_ref)} of {n_ref} reference detections unmatched "
                         f"(top score {float(rs[top]):.4g}, {where})")
        if blamed_cand:
            top = blamed_cand[0]
            parts.append(f"{len(blamed_cand)} of {n_cand} candidate detections unmatched "
                         f"(top score {float(cs[top]):.4g})")
        problem = " and ".join(parts)
        if blamed_ref and math.isfinite(box_off):
            problem += (f"; nearest candidate boxes off by up to {box_off:.3g} (allowed {allowed_off:.3g}), "
                        f"scores by {score_off:.3g}")
        excused = boundary + nms
        problem += f"; {len(pairs)} matched" + (f", {excused} excused" if excused else "")
        if majority:
            problem += ("; more than half of a list unmatched is not a discontinuity (it moves the few "
                        "detections at a score cut or the NMS threshold)")
    displaced_box = box_off if blamed_ref else (math.inf if problem else 0.0)
    displaced_score = score_off if blamed_ref else (math.inf if problem else 0.0)
    return DetectionMatch(
        ref_index=tuple(pairs), cand_index=tuple(pairs.values()), n_ref=n_ref, n_cand=n_cand,
        excused_boundary=boundary, excused_nms=nms, unexcused_ref=tuple(unexcused_ref),
        unexcused_cand=tuple(unexcused_cand),
        displaced_box_error=displaced_box, displaced_score_error=displaced_score,
        problem=problem,
    )


__all__ = ["DetectionMatch", "detection_keys", "match_detections"]
