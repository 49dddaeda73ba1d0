"""The correctness gate: a variant is timed only if it computes what eager fp32 computes.

This strict gate judges fp32 variants. A lower-precision variant (bf16, fp16, autocast, int8) changes the answer
by design, so it is held to the accuracy budget instead (:mod:`autotune.worker.accuracy`), which reuses this
module's leaf walk and detection matching.

Speed-ups that change the answer are the classic failure of auto-tuners: ``torch.jit.trace``
freezes the branch the example took, a compiler pass reorders a reduction, bf16 loses bits. The
gate runs the eager fp32 model and the built variant on the same *fresh* random batches (never the
example the variant was built from — a trace is always right on its own example) and compares every
output leaf.

Comparison, per floating-point tensor leaf (in float64)::

    scale   = rms(reference)  (1.0 if the reference is all zeros)
    finite  = positions where both are finite; NaN/±inf must sit in the same places with the same sign
    ok_elem = |cand - ref| <= atol * scale + rtol * |ref|        (allclose with a scale-relative atol)
    cosine  = <cand, ref> / (|cand| |ref|)                        (1.0 when both are zero)
    pass    = all(ok_elem) and cosine >= min_cosine

``atol`` is relative to the tensor's RMS so that one tolerance fits logits of size 1 and features
of size 1000; ``rtol`` covers elementwise rounding; the cosine catches a systematic drift that
stays under the elementwise bounds. Integer, bool and non-tensor leaves (ints, strings, None) must be
equal exactly; Python floats use the elementwise rule. Structure (types of containers, lengths,
dict keys, namedtuple fields, tensor shapes) must match.

Reported errors: ``max_abs_error`` = max |cand - ref|; ``max_rel_error`` = that error over the
reference's largest magnitude (a norm-wise relative error that stays meaningful near zeros).

Detector outputs are the exception to comparing by position. A mapping with ``boxes`` (K, 4) float and
``scores`` (K,) float (optionally ``labels`` (K,) integer and per-detection leaves with first dimension K,
such as ``masks``) on both sides is one image's detections: top-k and NMS are discontinuous, so harmless
rounding reorders near-tied detections or swaps one at a cut. :mod:`autotune.worker.detections` matches them as
sets (same label, box and score within this tolerance, scaled by the boxes' RMS) and accepts an unmatched
detection only at a score cut or the NMS threshold, and never more than half of a list; the matched pairs
are then compared with the rule above, cosine included. Errors are the matched pairs'; where detections
are left unmatched, how far the nearest same-label candidate boxes are off (inf for a missing one), and
the reason names the image, e.g. ``out[0]: 7 of 100 reference detections unmatched (top score 0.81, best
IoU 0.31); ...; 93 matched, 2 excused``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.worker.detections import detection_keys, match_detections

if TYPE_CHECKING:
    import torch

    from autotune.worker.variants import BuiltVariant


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float  # times the reference tensor's RMS
    min_cosine: float

    def to_dict(self) -> dict[str, float]:
        return {"rtol": self.rtol, "atol": self.atol, "min_cosine": self.min_cosine}


#: fp32 on CPU: kernels that reassociate sums (inductor, MKLDNN, frozen conv+bn folding) differ from
#: eager in the last bits; 1e-4 leaves ~100x headroom over what resnet18 shows (~1e-6 relative)
#: while a real bug (a wrong branch, a dropped op) is off by O(1).
_FP32 = Tolerance(rtol=1e-4, atol=1e-4, min_cosine=0.99999)
#: fp32 on CUDA with TF32 allowed (cuDNN convolutions use TF32 by default): 10-bit mantissa products.
_TF32 = Tolerance(rtol=2e-3, atol=2e-3, min_cosine=0.9999)
#: fp16: 11-bit significand (eps 9.8e-4); errors compound over layers.
_FP16 = Tolerance(rtol=1e-2, atol=1e-2, min_cosine=0.999)
#: bf16: 8-bit significand (eps 7.8e-3), the same range as fp32.
_BF16 = Tolerance(rtol=5e-2, atol=5e-2, min_cosine=0.99)
#: int8: 256 levels per tensor or channel; used where leaves are still compared elementwise under the accuracy
#: budget (detections matched as sets, the errors reported): its verdict is :mod:`autotune.worker.accuracy`'s.
_INT8 = Tolerance(rtol=1e-1, atol=1e-1, min_cosine=0.98)


def tolerance_for(precision: str, *, device: str = "cpu", tf32: bool | None = None) -> Tolerance:
    """Tight for fp32 (with room for reassociation, or TF32 on CUDA), dtype-aware for bf16/fp16.

    ``tf32=None`` asks the device's backend whether fp32 matmuls may run in TF32 now. Autocast variants get
    the tolerance of their reduced dtype (some ops run in it, errors compound the same way).
    """
    if precision in ("bf16", "autocast-bf16"):
        return _BF16
    if precision in ("fp16", "autocast-fp16"):
        return _FP16
    if precision in ("int8", "int8-static"):
        return _INT8
    if precision != "fp32":
        from autotune.errors import InputError
        from autotune.worker.variants import PRECISIONS

        raise InputError(f"unknown precision '{precision}'; allowed: {', '.join(PRECISIONS)}")
    from autotune.core.device_names import is_accelerator

    if is_accelerator(str(device)):
        if tf32 is None:
            from autotune.worker.devices import backend_for

            tf32 = backend_for(str(device)).capabilities().tf32
        if tf32:
            return _TF32
    return _FP32


@dataclass(frozen=True)
class GateResult:
    passed: bool
    max_abs_error: float
    max_rel_error: float
    min_cosine: float
    batches: int
    reason: str | None = None
    tolerance: Tolerance | None = None

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | str:
            return x if math.isfinite(x) else str(x)  # JSON has no inf/nan

        return {
            "passed": self.passed,
            "max_abs_error": num(self.max_abs_error),
            "max_rel_error": num(self.max_rel_error),
            "min_cosine": num(self.min_cosine),
            "batches": self.batches,
            "reason": self.reason,
            "tolerance": self.tolerance.to_dict() if self.tolerance else None,
        }


@dataclass(frozen=True)
class _LeafReport:
    path: str
    ok: bool
    abs_err: float
    rel_err: float
    cosine: float
    why: str | None


class _StructureMismatch(Exception):
    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what


@dataclass(frozen=True)
class _Detections:
    """A leaf of :func:`_walk`: one image's detections, the mapping and its per-detection keys."""

    mapping: Mapping[Any, Any]
    keys: tuple[Any, ...]


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _walk(ref: Any, cand: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """Pair up the leaves of two nested outputs; raise ``_StructureMismatch`` where they diverge."""
    import torch

    if isinstance(ref, torch.Tensor) or isinstance(cand, torch.Tensor):
        if not (isinstance(ref, torch.Tensor) and isinstance(cand, torch.Tensor)):
            raise _StructureMismatch(path, f"expected {type(ref).__name__}, got {type(cand).__name__}")
        yield path, ref, cand
        return
    if _is_namedtuple(ref):
        if not _is_namedtuple(cand) or type(cand)._fields != type(ref)._fields:
            raise _StructureMismatch(path, f"expected namedtuple {type(ref).__name__}{type(ref)._fields}, "
                                           f"got {type(cand).__name__}")
        for name in type(ref)._fields:
            yield from _walk(getattr(ref, name), getattr(cand, name), f"{path}.{name}")
        return
    if isinstance(ref, (list, tuple)):
        if not isinstance(cand, (list, tuple)):
            raise _StructureMismatch(path, f"expected {type(ref).__name__}, got {type(cand).__name__}")
        if len(ref) != len(cand):
            raise _StructureMismatch(path, f"expected {len(ref)} items, got {len(cand)}")
        for i, (r, c) in enumerate(zip(ref, cand, strict=True)):
            yield from _walk(r, c, f"{path}[{i}]")
        return
    if isinstance(ref, Mapping):
        if not isinstance(cand, Mapping):
            raise _StructureMismatch(path, f"expected a mapping, got {type(cand).__name__}")
        if set(ref.keys()) != set(cand.keys()):
            missing = sorted(map(repr, set(ref) - set(cand)))
            extra = sorted(map(repr, set(cand) - set(ref)))
            raise _StructureMismatch(path, f"keys differ (missing {missing}, extra {extra})")
        per_detection = detection_keys(ref, cand)
        if per_detection is not None:  # one image's detections: matched as a set, not by position
            yield path, _Detections(ref, per_detection), _Detections(cand, per_detection)
        for k in ref:
            if per_detection is None or k not in per_detection:
                yield from _walk(ref[k], cand[k], f"{path}[{k!r}]")
        return
    fields = _object_fields(ref, path)
    if fields is not None:  # an object that holds tensors (a Hugging Face cache): its attributes, compared as leaves
        if type(cand) is not type(ref):
            raise _StructureMismatch(path, f"expected {type(ref).__name__}, got {type(cand).__name__}")
        theirs = vars(cand)
        for name, value in fields.items():
            yield from _walk(value, theirs.get(name), f"{path}.{name}")
        return
    yield path, ref, cand


#: How deep :func:`_walk` follows objects' attributes (a cache's layers hold its tensors two levels down).
_OBJECT_DEPTH = 6


def _object_fields(x: Any, path: str) -> dict[str, Any] | None:
    """The attributes of an object in a model's output that holds tensors somewhere inside (a transformers
    ``DynamicCache``: its layers' keys and values), to be walked as a mapping; None for a plain value (compared by
    equality) or an object with no tensor inside.

    Why: such an object compares by identity, so the eager reference against eager itself read "DynamicCache(...)
    != reference DynamicCache(...)" and every variant of a GPT-2 classifier was rejected."""
    import torch

    if isinstance(x, (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.Size)):
        return None
    if not hasattr(x, "__dict__") or path.count(".") >= _OBJECT_DEPTH:
        return None
    fields = {k: v for k, v in vars(x).items() if not callable(v)}  # methods, classes: not outputs

    def holds_tensor(v: Any, depth: int) -> bool:
        if isinstance(v, torch.Tensor):
            return True
        if depth <= 0:
            return False
        if isinstance(v, (list, tuple)):
            return any(holds_tensor(i, depth - 1) for i in v)
        if isinstance(v, Mapping):
            return any(holds_tensor(i, depth - 1) for i in v.values())
        return hasattr(v, "__dict__") and any(holds_tensor(i, depth - 1) for i in vars(v).values())

    return fields if any(holds_tensor(v, _OBJECT_DEPTH) for v in fields.values()) else None


def _compare_tensor(path: str, ref: torch.Tensor, cand: torch.Tensor, tol: Tolerance) -> _LeafReport:
    import torch

    if tuple(ref.shape) != tuple(cand.shape):
        return _LeafReport(path, False, math.inf, math.inf, 0.0,
                           f"shape {tuple(cand.shape)} != reference {tuple(ref.shape)}")
    r = ref.detach()
    c = cand.detach().to(r.device)
    if r.is_complex() or c.is_complex():
        r = torch.view_as_real(r.to(torch.complex128))
        c = torch.view_as_real(c.to(torch.complex128))
    r64 = r.to(torch.float64)
    c64 = c.to(torch.float64)
    if r64.numel() == 0:
        return _LeafReport(path, True, 0.0, 0.0, 1.0, None)
    if not r.is_floating_point():  # integer / bool outputs: indices, masks, counts
        diff = (c64 - r64).abs()
        n_bad = int((diff != 0).sum())
        if n_bad == 0:
            return _LeafReport(path, True, 0.0, 0.0, 1.0, None)
        err = float(diff.max())
        peak = float(r64.abs().max())
        return _LeafReport(path, False, err, err / peak if peak > 0 else math.inf, 0.0,
                           f"{n_bad} of {r.numel()} integer elements differ (must match exactly)")
    r_nan, c_nan = torch.isnan(r64), torch.isnan(c64)
    r_inf, c_inf = torch.isinf(r64), torch.isinf(c64)
    # Non-finite values must match in kind and position: NaN with NaN, +inf with +inf.
    sign_flip = r_inf & c_inf & (torch.sign(r64) != torch.sign(c64))
    nonfinite_bad = (r_nan != c_nan) | (r_inf != c_inf) | sign_flip
    both = torch.isfinite(r64) & torch.isfinite(c64)
    rf, cf = r64[both], c64[both]
    abs_err, rel_err, cosine, n_bad, scale = 0.0, 0.0, 1.0, 0, 1.0
    worst = ""
    if rf.numel():
        diff = (cf - rf).abs()
        abs_err = float(diff.max())
        rms = float(rf.pow(2).mean().sqrt())
        scale = rms if rms > 0 else 1.0
        excess = diff - (tol.atol * scale + tol.rtol * rf.abs())
        n_bad = int((excess > 0).sum())
        peak = float(rf.abs().max())
        rel_err = abs_err / peak if peak > 0 else (0.0 if abs_err == 0 else math.inf)
        nr, nc = float(rf.norm()), float(cf.norm())
        if nr == 0 or nc == 0:
            cosine = 1.0 if nr == nc else 0.0
        else:
            cosine = float((rf * cf).sum()) / (nr * nc)
        i = int(torch.argmax(excess))
        worst = f"ref {float(rf[i]):.4g}, got {float(cf[i]):.4g}; "
    n_nonfinite = int(nonfinite_bad.sum())
    if n_nonfinite:
        return _LeafReport(path, False, math.inf, math.inf, cosine,
                           f"{n_nonfinite} of {r.numel()} elements are NaN/inf where the reference's are not "
                           "(or the other way round)")
    if n_bad:
        return _LeafReport(
            path, False, abs_err, rel_err, cosine,
            f"{n_bad} of {rf.numel()} elements outside tolerance; max abs error {abs_err:.3g} "
            f"({worst}allowed {tol.atol:g}*rms({scale:.3g}) + {tol.rtol:g}*|ref|), cosine {cosine:.6f}",
        )
    if cosine < tol.min_cosine:
        return _LeafReport(path, False, abs_err, rel_err, cosine,
                           f"cosine similarity {cosine:.6f} < {tol.min_cosine} (max abs error {abs_err:.3g})")
    return _LeafReport(path, True, abs_err, rel_err, cosine, None)


def _compare_scalar(path: str, ref: Any, cand: Any, tol: Tolerance) -> _LeafReport:
    if isinstance(ref, float) and isinstance(cand, (int, float)) and not isinstance(cand, bool):
        if math.isnan(ref) and math.isnan(cand):
            return _LeafReport(path, True, 0.0, 0.0, 1.0, None)
        err = abs(float(cand) - ref)
        if not math.isfinite(err):
            ok = ref == cand
            return _LeafReport(path, ok, 0.0 if ok else math.inf, 0.0 if ok else math.inf, 1.0,
                               None if ok else f"{cand!r} != reference {ref!r}")
        ok = err <= tol.atol * max(abs(ref), 1e-12) + tol.rtol * abs(ref) or err == 0
        rel = err / abs(ref) if ref else (0.0 if err == 0 else math.inf)
        return _LeafReport(path, ok, err, rel, 1.0, None if ok else f"{cand!r} != reference {ref!r}")
    try:
        ok = bool(type(ref) is type(cand) and ref == cand)
    except Exception:
        ok = False
    return _LeafReport(path, ok, 0.0 if ok else math.inf, 0.0 if ok else math.inf, 1.0,
                       None if ok else f"{cand!r} != reference {ref!r} (non-float leaves must be equal)")


def _compare_detections(path: str, ref: _Detections, cand: _Detections, tol: Tolerance) -> _LeafReport:
    """One image's detections: match them (:func:`autotune.worker.detections.match_detections`), then the pairs.

    The matched pairs' boxes, scores, labels and other per-detection leaves (masks, keypoints) are
    stacked in reference order and compared with the tensor rule, cosine included, so a systematic drift
    within the elementwise bounds still fails. Errors: the matched pairs' worst, or, where detections are
    left unmatched, how far the nearest same-label candidate boxes are off (inf for a missing detection).
    """
    import torch

    match = match_detections(ref.mapping, cand.mapping, rtol=tol.rtol, atol=tol.atol)
    ri = torch.tensor(match.ref_index, dtype=torch.long)
    ci = torch.tensor(match.cand_index, dtype=torch.long)
    reports = []
    for key in ref.keys:
        r, c = ref.mapping[key], cand.mapping[key]
        reports.append(_compare_tensor(f"{path}[{key!r}] (matched detections)", r[ri.to(r.device)],
                                       c[ci.to(c.device)], tol))
    abs_err = max((rep.abs_err for rep in reports), default=0.0)
    rel_err = max((rep.rel_err for rep in reports), default=0.0)
    cosine = min((rep.cosine for rep in reports), default=1.0)
    if not match.passed:
        peak = float(ref.mapping["boxes"].detach().abs().max()) if match.n_ref else 0.0
        off = match.displaced_box_error
        abs_err = max(abs_err, off)
        rel_err = max(rel_err, off / peak if peak > 0 else math.inf)
        return _LeafReport(path, False, abs_err, rel_err, cosine, match.problem)
    bad = [rep for rep in reports if not rep.ok]
    if bad:
        worst = max(bad, key=lambda rep: (rep.rel_err, rep.abs_err))
        return _LeafReport(worst.path, False, abs_err, rel_err, cosine, f"{worst.why} ({match.summary})")
    return _LeafReport(path, True, abs_err, rel_err, cosine, None)


def _reference_problem(reference: Any, root: str) -> str | None:
    """Why the reference's output cannot check anything, or None: it is None or holds no value, or every
    floating-point tensor in it is NaN/inf throughout (a candidate with the same NaNs would "agree" with it, and
    such a model was recommended without a word: issue 32)."""
    import torch

    if reference is None:
        return "the reference (eager fp32) returned None: no output to check a variant against"
    leaves = [r for _, r, _ in _walk(reference, reference, root)]
    if not leaves or all(leaf is None for leaf in leaves):
        return "the reference (eager fp32) returned no values: no output to check a variant against"
    floats = [t for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0]
    if floats and not any(bool(torch.isfinite(t).any()) for t in floats):
        return ("every floating-point output of the reference (eager fp32) is NaN/inf throughout: nothing to "
                "check a variant against (the model or its inputs)")
    return None


def compare_outputs(reference: Any, candidate: Any, *, tolerance: Tolerance, root: str = "out") -> GateResult:
    """Compare one pair of (nested) outputs. ``batches`` is 1; the reason names the worst leaf's path."""
    import torch

    problem = _reference_problem(reference, root)
    if problem is not None:
        return GateResult(False, math.inf, math.inf, 0.0, 1, problem, tolerance)
    leaves: list[_LeafReport] = []
    try:
        for path, r, c in _walk(reference, candidate, root):
            if isinstance(r, _Detections):
                leaves.append(_compare_detections(path, r, c, tolerance))
            elif isinstance(r, torch.Tensor):
                leaves.append(_compare_tensor(path, r, c, tolerance))
            else:
                leaves.append(_compare_scalar(path, r, c, tolerance))
    except _StructureMismatch as exc:
        return GateResult(False, math.inf, math.inf, 0.0, 1, f"structure mismatch at {exc}", tolerance)
    max_abs = max((leaf.abs_err for leaf in leaves), default=0.0)
    max_rel = max((leaf.rel_err for leaf in leaves), default=0.0)
    min_cos = min((leaf.cosine for leaf in leaves), default=1.0)
    bad = [leaf for leaf in leaves if not leaf.ok]
    if not bad:
        return GateResult(True, max_abs, max_rel, min_cos, 1, None, tolerance)
    worst = max(bad, key=lambda leaf: (leaf.rel_err, leaf.abs_err))
    more = f" (+{len(bad) - 1} more outputs)" if len(bad) > 1 else ""
    return GateResult(False, max_abs, max_rel, min_cos, 1, f"{worst.path}: {worst.why}{more}", tolerance)


def check_variant(
    reference: Callable[..., Any],
    built: BuiltVariant,
    make_inputs: Callable[[int], tuple[torch.Tensor, ...]],
    *,
    batches: int = 3,
    tolerance: Tolerance | None = None,
) -> GateResult:
    """Run eager fp32 ``reference`` and ``built`` on ``make_inputs(0..batches-1)``; worst case over batches.

    Pseudo-code::

        for seed in 0 .. batches-1:                      (seeds differ from the build example's)
            x = make_inputs(seed)                        fp32, on the device
            ref = reference(*x)                          under inference_mode
            out = built.fn(*built.prepare_inputs(x))     (compared before the next call: CUDA-graph
                                                          outputs are overwritten by it)
            r = compare_outputs(ref, out, tolerance for the variant's precision)
        passed = all passed; errors = max over batches; cosine = min; reason = first failing batch's

    Exceptions raised by the candidate propagate (the caller classifies them as failed / oom); the
    gate's job is only to say whether outputs agree.
    """
    import torch

    if batches < 1:
        raise ValueError("batches must be >= 1")
    tol = tolerance or tolerance_for(built.spec.precision, device=built.device)
    results: list[GateResult] = []
    first_reason: str | None = None
    for seed in range(batches):
        x = make_inputs(seed)
        with torch.inference_mode():
            ref = reference(*x)
            out = built.fn(*built.prepare_inputs(x))
            r = compare_outputs(ref, out, tolerance=tol)
        del out
        results.append(r)
        if not r.passed and first_reason is None:
            first_reason = f"batch {seed}: {r.reason}"
    return GateResult(
        passed=all(r.passed for r in results),
        max_abs_error=max(r.max_abs_error for r in results),
        max_rel_error=max(r.max_rel_error for r in results),
        min_cosine=min(r.min_cosine for r in results),
        batches=batches,
        reason=first_reason,
        tolerance=tol,
    )


__all__ = ["GateResult", "Tolerance", "check_variant", "compare_outputs", "tolerance_for"]
