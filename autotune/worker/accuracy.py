"""The accuracy budget: what a lower-precision variant (bf16, fp16, autocast, int8) may cost on the user's data.

A lower precision changes the answer by design, so closeness to eager fp32 within fp32's rounding (the strict
gate of :mod:`autotune.worker.correctness`) is the wrong question for it; the user's question is how much
accuracy it loses on their data. So a variant whose precision is not fp32 is judged here, over *all* the
traffic's batches (a ``[data]`` factory's, up to ``data.max_batches``; without ``[data]`` the gate's fresh random
batches), and rejected when outside the budget. fp32 variants keep the strict gate; with an ``[accuracy]`` table
they are also scored here, for the report (``gating`` False: the strict gate decides).

Three kinds of budget, in this order of precedence::

    metric      [accuracy] metric = "data.py:metric": metric(outputs, batches) -> float, higher is better
                  batches = the factory's batches as it yielded them (tensor, tuple or dict; CPU tensors), in order
                  outputs = the model's output on each batch, same structure as eager's, CPU, floats as float32
                reference = metric(eager fp32 outputs, batches); value = metric(variant outputs, batches)
                drop = reference - value               (absolute; max_drop in the metric's units)
                     = (reference - value) / |reference|  (max_drop = "1%": relative; the default budget)
                pass = drop <= max_drop
    agreement   no metric, and the output is classifier-shaped: a floating tensor (the output itself, or its
                "logits" entry) of shape (B, C) with C >= 2, or a "logits" entry (..., C)
                value = fraction of rows (positions) whose argmax equals eager fp32's; reference = 1
                drop = 1 - value; pass = drop <= max_drop (default 0.01: 99% top-1 agreement)
    closeness   no metric, any other output: per floating leaf, over all batches (finite positions)
                rel_error = ||cand - ref|| / ||ref||   (norm-wise; 0 when both are 0)
                cosine    = <cand, ref> / (||cand|| ||ref||)
                pass = every leaf's rel_error <= CLOSENESS[precision].max_rel_error
                       and cosine >= CLOSENESS[precision].min_cosine
                integer/bool leaves must be equal, detections are matched as sets (the gate's rules, with the
                precision's tolerance); drop = the worst rel_error

In every kind a structure mismatch, or NaN/inf where eager fp32's output is finite, rejects the variant (no metric
could be trusted on it).

**A verdict with its uncertainty.** A budget judged on 48 predictions cannot tell 99% agreement from 90%: one
disagreement in 48 is compatible with anything from 0.4% to 10.9% disagreement. So agreement and metric budgets
are decided on a 95% interval of the drop, and a verdict is one of three::

    agreement   interval = Wilson interval of differ / total           (core.stats.wilson_interval)
    metric      a batch's contribution d_b = drop(metric(eager's outputs with batch b's replaced by the variant's))
                (every batch stays where it was, so a metric that reads its labels by position still scores the
                right rows); for a metric that is a mean over rows the d_b add up to the drop, and
                interval = drop -+ t_{0.975, n-1} * sqrt(n) * sd(d_b)     (n batches, n + 1 metric calls)
                fewer than 3 batches, contributions that do not add up to the drop within 5% (a macro-F1, an AUC),
                or a metric slower than 10 s for them: no interval, the point estimate decides, the result says why
    within      interval high <= max_drop              -> passes
    exceeds     interval low  >  max_drop              -> rejected
    undecided   the interval holds max_drop            -> [accuracy] undecided = "accept" (default): passes, and the
                report says it is undecided and about how many samples (batches) at the observed rate would
                decide it; "reject": rejected
    closeness   no sampling question (numerical error against fixed thresholds): within or exceeds

Why contributions and not a bootstrap over resampled batches: the documented metric keeps its labels and reads
rows by position (``LABELS[:len(logits)]``), so a resample would score outputs against the wrong rows.

Why these closeness thresholds (``benchmarks/bench_precision_error.py``, random weights and inputs): resnet18, an
MLP and a 4-layer transformer encoder cast whole stay at norm-wise errors of 0.004-0.007 in bf16 and 0.0005-0.0012
in fp16, the MLP's dynamic int8 at 0.025 (cosine 0.9997). The thresholds leave 4-8x headroom over those. A real
bug (a wrong op, an overflow, a broken calibration) is off by O(1).

Random inputs (no ``[data]``) are scored like data, but the result says ``data: "random"`` and the report warns
that accuracy was not measured on real data: agreement on random inputs of a random-weight model is a statement
about near-tied logits, not about a task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from autotune.core.stats import samples_to_decide, t_quantile_975, wilson_interval
from autotune.errors import WorkloadError
from autotune.worker.correctness import (
    _compare_detections,
    _compare_scalar,
    _compare_tensor,
    _Detections,
    _StructureMismatch,
    _walk,
    tolerance_for,
)
from autotune.worker.metric import call_metric, cpu_float, metric_name, user_batch

if TYPE_CHECKING:
    from autotune.core.recipe import AccuracySpec, Recipe
    from autotune.worker.traffic import InputLayout
    from autotune.worker.variants import BuiltVariant

AccuracyKind = Literal["metric", "agreement", "closeness"]
Verdict = Literal["within", "exceeds", "undecided"]


@dataclass(frozen=True)
class Closeness:
    """The default budget for outputs that are not classifier-shaped (module docstring: why these numbers)."""

    max_rel_error: float
    min_cosine: float


CLOSENESS: dict[str, Closeness] = {
    "fp16": Closeness(0.01, 0.9999),
    "autocast-fp16": Closeness(0.01, 0.9999),
    "bf16": Closeness(0.05, 0.998),
    "autocast-bf16": Closeness(0.05, 0.998),
    "int8": Closeness(0.10, 0.99),
    "int8-static": Closeness(0.10, 0.99),
    # fp32 rows are scored only for the report (the strict gate decides them)
    "fp32": Closeness(1e-4, 0.99999),
}
#: Without a metric: the top-1 disagreement with eager fp32 a classifier may have (99% agreement).
DEFAULT_AGREEMENT_DROP = 0.01
#: With a metric and no max_drop: 1% of eager fp32's value.
DEFAULT_RELATIVE_DROP = 0.01
#: A metric's interval: the fewest batches it is made from, the time the batches' contributions may take, and how
#: far their sum may be from the drop (a mean over rows adds up exactly; a macro-F1 or an AUC does not).
MIN_INTERVAL_BATCHES = 3
CONTRIBUTION_SECONDS = 10.0
ADDITIVITY_TOLERANCE = 0.05


def judged_by_budget(precision: str) -> bool:
    """Whether a precision is judged by the accuracy budget (every one but fp32) instead of the strict gate."""
    return precision != "fp32"


@dataclass(frozen=True)
class AccuracyResult:
    """A variant's accuracy on the traffic against eager fp32's, and the budget's verdict.

    ``value``/``reference``/``drop`` are in the kind's units: the metric's; an agreement fraction; for closeness
    the worst cosine (value) and the worst norm-wise relative error (drop). ``gating``: the verdict decided the
    row (lower precision), else it is information for the report (fp32 rows, judged by the strict gate).
    """

    kind: AccuracyKind
    passed: bool
    gating: bool
    metric: str  # the user's reference, "top-1 agreement" or "closeness"
    value: float | None
    reference: float | None
    drop: float | None
    max_drop: float | None
    relative: bool
    budget: str
    batches: int
    samples: int
    data: Literal["factory", "random"]
    rel_error: float | None = None
    cosine: float | None = None
    max_abs_error: float | None = None
    reason: str | None = None
    verdict: Verdict | None = None
    #: the drop's 95% interval (module docstring); None: closeness, or no interval could be made
    drop_interval: tuple[float, float] | None = None
    #: undecided: about how many samples (agreement) or batches (metric) at the observed rate would decide it
    needed: int | None = None
    needed_unit: str | None = None
    #: one sentence on how sure the verdict is (the interval, or why there is none)
    uncertainty: str | None = None

    def to_dict(self) -> dict[str, Any]:
        def num(x: float | None) -> float | str | None:
            return x if x is None or math.isfinite(x) else str(x)  # JSON has no inf/nan

        return {
            "kind": self.kind, "passed": self.passed, "gating": self.gating, "metric": self.metric,
            "value": num(self.value), "reference": num(self.reference), "drop": num(self.drop),
            "max_drop": self.max_drop, "relative": self.relative, "budget": self.budget,
            "batches": self.batches, "samples": self.samples, "data": self.data,
            "rel_error": num(self.rel_error), "cosine": num(self.cosine), "max_abs_error": num(self.max_abs_error),
            "reason": self.reason, "verdict": self.verdict,
            "drop_interval": list(self.drop_interval) if self.drop_interval is not None else None,
            "needed": self.needed, "needed_unit": self.needed_unit, "uncertainty": self.uncertainty,
        }

    def correctness(self) -> dict[str, Any]:
        """The row's ``correctness`` (the gate's form) for a variant the budget judged: its verdict and errors."""
        def num(x: float | None) -> float | str | None:
            return x if x is None or math.isfinite(x) else str(x)

        return {"passed": self.passed, "max_abs_error": num(self.max_abs_error), "max_rel_error": num(self.rel_error),
                "min_cosine": num(self.cosine), "batches": self.batches, "reason": self.reason,
                "tolerance": None, "by": "accuracy budget"}


# ------------------------------------------------------------------------------------------- helpers


def classifier_leaf(out: Any) -> torch.Tensor | None:
    """The classifier-shaped tensor of an output (module docstring), or None."""
    if isinstance(out, torch.Tensor):
        t, named = out, False
    elif isinstance(out, Mapping) and isinstance(out.get("logits"), torch.Tensor):
        t, named = out["logits"], True
    else:
        return None
    if not t.is_floating_point() or t.dim() < 2 or t.shape[-1] < 2:
        return None
    return t if (t.dim() == 2 or named) else None


def _pct(x: float) -> str:
    return f"{x * 100:.4g}%"


# ------------------------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Outputs:
    """eager fp32's and the variant's outputs on every batch (CPU, floats as float32), and the batches."""

    reference: list[Any]
    candidate: list[Any]
    batches: list[Any]  # in the user's form
    data: Literal["factory", "random"]


def run_outputs(reference: Callable[..., Any], built: BuiltVariant, flat_batches: Sequence[tuple[torch.Tensor, ...]],
                layout: InputLayout, *, data: Literal["factory", "random"]) -> Outputs:
    """Call eager fp32 and the variant on every batch (inference mode), copying each output before the next call.

    Exceptions of the variant propagate (the caller classifies them: failed / oom), as in the gate.
    """
    refs, cands, users = [], [], []
    with torch.inference_mode():
        for flat in flat_batches:
            refs.append(cpu_float(reference(*flat)))
            cands.append(cpu_float(built.fn(*built.prepare_inputs(flat))))
            users.append(user_batch(layout, flat))
    return Outputs(refs, cands, users, data)


def _hard_problem(outs: Outputs, precision: str) -> tuple[str | None, float, float, float]:
    """Structure mismatches and NaN/inf where the reference is finite (these reject in every kind), and the
    elementwise errors of the row's ``correctness`` (max abs, max norm-wise-by-peak rel, min cosine)."""
    tol = tolerance_for(precision)
    max_abs, max_rel, min_cos = 0.0, 0.0, 1.0
    for i, (ref, cand) in enumerate(zip(outs.reference, outs.candidate, strict=True)):
        try:
            pairs = list(_walk(ref, cand, "out"))
        except _StructureMismatch as exc:
            return f"batch {i}: structure mismatch at {exc}", math.inf, math.inf, 0.0
        for path, r, c in pairs:
            if isinstance(r, torch.Tensor) and r.is_floating_point() and tuple(r.shape) == tuple(c.shape):
                bad = torch.isfinite(r) & ~torch.isfinite(c)
                if bool(bad.any()):
                    return (f"batch {i}: {path}: {int(bad.sum())} of {r.numel()} elements are NaN/inf where eager "
                            "fp32's are finite"), math.inf, math.inf, 0.0
                rep = _compare_tensor(path, r, c, tol)
                max_abs, max_rel, min_cos = max(max_abs, rep.abs_err), max(max_rel, rep.rel_err), \
                    min(min_cos, rep.cosine)
            elif isinstance(r, torch.Tensor) and tuple(r.shape) != tuple(c.shape):
                return f"batch {i}: {path}: shape {tuple(c.shape)} != eager fp32's {tuple(r.shape)}", \
                    math.inf, math.inf, 0.0
    return None, max_abs, max_rel, min_cos


# ------------------------------------------------------------------------------------------- the kinds


def _budget(spec: AccuracySpec | None, *, default: float, relative_default: bool) -> tuple[float, bool]:
    if spec is None or spec.max_drop is None:
        return default, relative_default
    return spec.max_drop, spec.relative


def _agreement(outs: Outputs) -> tuple[float, int, int] | None:
    """(agreement, differing, total) over the classifier leaf, or None when the output is not classifier-shaped."""
    same = total = 0
    for ref, cand in zip(outs.reference, outs.candidate, strict=True):
        r, c = classifier_leaf(ref), classifier_leaf(cand)
        if r is None or c is None or r.shape != c.shape:
            return None
        eq = r.argmax(-1) == c.argmax(-1)
        same += int(eq.sum())
        total += eq.numel()
    if total == 0:
        return None
    return same / total, total - same, total


def _closeness(outs: Outputs, precision: str) -> tuple[float, float, str | None]:
    """(worst rel_error, worst cosine, problem) per the module docstring's closeness rule."""
    tol = tolerance_for(precision)
    sums: dict[str, list[float]] = {}  # path -> [sum d^2, sum r^2, sum c^2, sum r*c]
    problem: str | None = None
    for i, (ref, cand) in enumerate(zip(outs.reference, outs.candidate, strict=True)):
        for path, r, c in _walk(ref, cand, "out"):
            if isinstance(r, _Detections):
                rep = _compare_detections(path, r, c, tol)
            elif isinstance(r, torch.Tensor) and r.is_floating_point() and not r.is_complex():
                both = torch.isfinite(r) & torch.isfinite(c)
                r64, c64 = r[both].double(), c[both].double()
                acc = sums.setdefault(path, [0.0, 0.0, 0.0, 0.0])
                acc[0] += float((c64 - r64).pow(2).sum())
                acc[1] += float(r64.pow(2).sum())
                acc[2] += float(c64.pow(2).sum())
                acc[3] += float((r64 * c64).sum())
                continue
            elif isinstance(r, torch.Tensor):
                rep = _compare_tensor(path, r, c, tol)
            else:
                rep = _compare_scalar(path, r, c, tol)
            if not rep.ok and problem is None:
                problem = f"batch {i}: {rep.path}: {rep.why}"
    worst_rel, worst_cos = 0.0, 1.0
    for d2, r2, c2, rc in sums.values():
        rel = math.sqrt(d2 / r2) if r2 > 0 else (0.0 if d2 == 0 else math.inf)
        cos = rc / math.sqrt(r2 * c2) if r2 > 0 and c2 > 0 else (1.0 if r2 == c2 else 0.0)
        worst_rel, worst_cos = max(worst_rel, rel), min(worst_cos, cos)
    return worst_rel, worst_cos, problem


def _verdict(interval: tuple[float, float] | None, drop: float, max_drop: float) -> Verdict:
    """within / exceeds / undecided: the interval against the budget (module docstring); no interval: the point."""
    lo, hi = interval if interval is not None else (drop, drop)
    if lo > max_drop + 1e-12:
        return "exceeds"
    return "within" if hi <= max_drop + 1e-12 else "undecided"


def _decide(verdict: Verdict, spec: AccuracySpec | None) -> bool:
    """Whether a verdict passes: within, or undecided under ``[accuracy] undecided = "accept"`` (the default)."""
    return verdict == "within" or (verdict == "undecided" and (spec is None or spec.undecided == "accept"))


def _decision_text(verdict: Verdict, budget: str, needed: int | None, unit: str) -> str:
    if verdict == "within":
        return f"shown within the budget ({budget})"
    if verdict == "exceeds":
        return f"shown over the budget ({budget})"
    more = (f"about {needed:,} {unit} at the observed rate would decide it" if needed is not None
            else f"no number of {unit} decides it at the observed rate")
    return f"undecided against the budget ({budget}): {more}"


def _metric_interval(recipe: Recipe, metric: Callable[..., Any], outs: Outputs, reference: float, total: float,
                     drop_of: Callable[[float, float], float | None]) -> tuple[tuple[float, float] | None, str]:
    """The 95% interval of a metric's drop from its batches' contributions (module docstring), or None and why."""
    import statistics
    import time

    n = len(outs.batches)
    if n < MIN_INTERVAL_BATCHES:
        return None, (f"no interval: {n} batch{'' if n == 1 else 'es'} (an interval over batches needs at least "
                      f"{MIN_INTERVAL_BATCHES}); the point estimate decided")
    parts: list[float] = []
    start = time.perf_counter()
    for b in range(n):
        if time.perf_counter() - start > CONTRIBUTION_SECONDS:
            return None, (f"no interval: the metric took over {CONTRIBUTION_SECONDS:g} s for {b} of {n} batches' "
                          "contributions; the point estimate decided")
        mixed = list(outs.reference)
        mixed[b] = outs.candidate[b]
        try:
            value = call_metric(recipe, metric, mixed, outs.batches, whose="eager's outputs with one batch the "
                                                                            "variant's")
        except WorkloadError as exc:
            return None, f"no interval: {str(exc)[:200]}; the point estimate decided"
        part = drop_of(reference, value)
        if part is None:
            return None, "no interval: eager fp32's metric is 0; the point estimate decided"
        parts.append(part)
    summed = math.fsum(parts)
    if not math.isclose(summed, total, rel_tol=ADDITIVITY_TOLERANCE, abs_tol=1e-9):
        return None, (f"no interval: the metric is not a sum over rows (the batches' contributions add up to "
                      f"{summed:.4g}, the drop is {total:.4g}), so batches cannot be treated as samples; the point "
                      "estimate decided")
    half = t_quantile_975(n - 1) * math.sqrt(n) * statistics.stdev(parts)
    return (total - half, total + half), f"95% t interval over the {n} batches' contributions"


def judge(outs: Outputs, *, precision: str, recipe: Recipe, metric: Callable[..., Any] | None = None,
          reference_value: float | None = None) -> AccuracyResult:
    """The budget's verdict on a variant's outputs (the kinds and their rules: module docstring).

    ``metric`` is the resolved ``[accuracy] metric`` (None: the default kinds); ``reference_value`` eager fp32's
    value when the caller has it already. A metric that raises on the *reference* is the user's error
    (:class:`WorkloadError`); on the variant's outputs it rejects the variant.
    """
    spec = recipe.accuracy
    gating = judged_by_budget(precision)
    n = len(outs.reference)
    samples = sum(_rows(b) for b in outs.batches)
    where = "the data" if outs.data == "factory" else "random inputs"
    common = {"gating": gating, "batches": n, "samples": samples, "data": outs.data}
    hard, max_abs, max_rel, min_cos = _hard_problem(outs, precision)

    if metric is not None and spec is not None:
        return _judge_metric(outs, spec, recipe, metric, reference_value, hard=hard, where=where,
                             errors=(max_abs, max_rel, min_cos), common=common)

    agreement = _agreement(outs) if hard is None else None
    classifier = bool(outs.reference) and classifier_leaf(outs.reference[0]) is not None
    if agreement is not None or (hard is not None and classifier):
        max_drop, _ = _budget(spec, default=DEFAULT_AGREEMENT_DROP, relative_default=False)
        budget = f"top-1 agreement with eager fp32 >= {_pct(1 - max_drop)}"
        if agreement is None:
            return AccuracyResult(kind="agreement", passed=False, metric="top-1 agreement", value=None, reference=1.0,
                                  drop=math.inf, max_drop=max_drop, relative=False, budget=budget, rel_error=max_rel,
                                  cosine=min_cos, max_abs_error=max_abs, reason=hard, verdict="exceeds",
                                  **common)  # type: ignore[arg-type]
        frac, differ, total = agreement
        interval = wilson_interval(differ, total)
        verdict = _verdict(interval, 1 - frac, max_drop)
        needed = samples_to_decide(differ, total, max_drop) if verdict == "undecided" else None
        uncertainty = (f"{differ} of {total} predictions differ: disagreement {_pct(1 - frac)}, 95% interval "
                       f"{_pct(interval[0])}-{_pct(interval[1])} (Wilson); "
                       + _decision_text(verdict, f"at most {_pct(max_drop)}", needed, "predictions"))
        passed = _decide(verdict, spec)
        reason = None
        if not passed:
            reason = (f"accuracy budget: top-1 agreement with eager fp32 {_pct(frac)} ({differ} of {total} predictions "
                      f"differ) on {n} batches of {where} "
                      + (f"< {_pct(1 - max_drop)} (max_drop {max_drop:g})" if verdict == "exceeds" else
                         "is undecided, and [accuracy] undecided = \"reject\"")
                      + f"; {uncertainty}")
        return AccuracyResult(kind="agreement", passed=passed, metric="top-1 agreement", value=frac,
                              reference=1.0, drop=1 - frac, max_drop=max_drop, relative=False, budget=budget,
                              rel_error=max_rel, cosine=min_cos, max_abs_error=max_abs, reason=reason,
                              verdict=verdict, drop_interval=interval, needed=needed,
                              needed_unit="predictions" if needed is not None else None, uncertainty=uncertainty,
                              **common)  # type: ignore[arg-type]

    limits = CLOSENESS[precision]
    budget = f"relative error <= {limits.max_rel_error:g} and cosine >= {limits.min_cosine:g} ({precision})"
    if hard is not None:
        return AccuracyResult(kind="closeness", passed=False, metric="closeness", value=None, reference=1.0,
                              drop=math.inf, max_drop=limits.max_rel_error, relative=False, budget=budget,
                              rel_error=math.inf, cosine=0.0, max_abs_error=max_abs, reason=hard, verdict="exceeds",
                              **common)  # type: ignore[arg-type]
    rel, cos, problem = _closeness(outs, precision)
    reason = problem
    if reason is None and (rel > limits.max_rel_error or cos < limits.min_cosine):
        reason = (f"accuracy budget: relative error {rel:.3g} and cosine {cos:.6f} against eager fp32 on {n} batches "
                  f"of {where}; allowed for {precision}: relative error <= {limits.max_rel_error:g}, cosine >= "
                  f"{limits.min_cosine:g}")
    return AccuracyResult(kind="closeness", passed=reason is None, metric="closeness", value=cos, reference=1.0,
                          drop=rel, max_drop=limits.max_rel_error, relative=False, budget=budget, rel_error=rel,
                          cosine=cos, max_abs_error=max_abs, reason=reason,
                          verdict="within" if reason is None else "exceeds",
                          uncertainty="numerical error against fixed thresholds: no sampling interval",
                          **common)  # type: ignore[arg-type]


def _judge_metric(outs: Outputs, spec: AccuracySpec, recipe: Recipe, metric: Callable[..., Any],
                  reference_value: float | None, *, hard: str | None, where: str,
                  errors: tuple[float, float, float], common: Mapping[str, Any]) -> AccuracyResult:
    """The ``metric`` kind of :func:`judge`: the drop, its bootstrap interval and the verdict."""
    max_abs, max_rel, min_cos = errors
    n = len(outs.reference)
    name = metric_name(str(spec.metric))
    ref = reference_value if reference_value is not None else call_metric(
        recipe, metric, outs.reference, outs.batches, whose="eager fp32's outputs")
    max_drop, relative = _budget(spec, default=DEFAULT_RELATIVE_DROP, relative_default=True)
    budget = (f"{name} drop <= {_pct(max_drop)} of eager fp32's {ref:.6g}" if relative
              else f"{name} drop <= {max_drop:g}")
    if relative and ref == 0:
        raise WorkloadError(f"{recipe.path}: field 'accuracy.max_drop': a relative drop needs eager fp32's "
                            f"metric to be non-zero, and '{spec.metric}' gave 0 on it; give an absolute "
                            "max_drop")
    value: float | None = None
    reason = hard
    if reason is None:
        try:
            value = call_metric(recipe, metric, outs.candidate, outs.batches, whose="this variant's outputs")
        except WorkloadError as exc:
            reason = str(exc)
    if value is None:
        return AccuracyResult(kind="metric", passed=False, metric=name, value=None, reference=ref, drop=math.inf,
                              max_drop=max_drop, relative=relative, budget=budget, rel_error=max_rel,
                              cosine=min_cos, max_abs_error=max_abs, reason=reason, verdict="exceeds",
                              **common)

    def drop_of(reference: float, got: float) -> float | None:
        if relative:
            return None if reference == 0 else (reference - got) / abs(reference)
        return reference - got

    drop = drop_of(ref, value)
    assert drop is not None
    interval, how = _metric_interval(recipe, metric, outs, ref, drop, drop_of)
    verdict = _verdict(interval, drop, max_drop)
    needed = None
    if verdict == "undecided" and interval is not None and drop != max_drop:
        half = (interval[1] - interval[0]) / 2
        needed = math.ceil(n * (half / abs(drop - max_drop)) ** 2)
    show = _pct if relative else (lambda x: f"{x:.4g}")
    limit = _pct(max_drop) if relative else f"{max_drop:g}"
    shown_interval = f", 95% interval {show(interval[0])} to {show(interval[1])}" if interval is not None else ""
    uncertainty = (f"drop {show(drop)}{shown_interval} ({how}); "
                   + _decision_text(verdict, f"at most {limit}", needed, "batches"))
    passed = _decide(verdict, spec)
    if not passed:
        head = f"accuracy budget: {name} {value:.6g} against eager fp32's {ref:.6g} on {n} batches of {where}: "
        reason = (head + f"drop {show(drop)} > max_drop {limit}; {uncertainty}" if verdict == "exceeds" else
                  head + f"{uncertainty}; [accuracy] undecided = \"reject\"")
    return AccuracyResult(kind="metric", passed=passed, metric=name, value=value, reference=ref, drop=drop,
                          max_drop=max_drop, relative=relative, budget=budget, rel_error=max_rel, cosine=min_cos,
                          max_abs_error=max_abs, reason=reason, verdict=verdict, drop_interval=interval,
                          needed=needed, needed_unit="batches" if needed is not None else None,
                          uncertainty=uncertainty, **common)


def _rows(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    first = next(iter(batch.values())) if isinstance(batch, Mapping) else batch[0]
    return int(first.shape[0])


__all__ = [
    "CLOSENESS",
    "DEFAULT_AGREEMENT_DROP",
    "DEFAULT_RELATIVE_DROP",
    "AccuracyResult",
    "Closeness",
    "Outputs",
    "Verdict",
    "classifier_leaf",
    "judge",
    "judged_by_budget",
    "run_outputs",
]
