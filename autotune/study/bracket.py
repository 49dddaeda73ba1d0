"""The ``bracket`` search strategy: what to measure next, from what is known about this problem (pure logic).

A tuning's space is variants (compiler, compile mode, precision, memory format, threads, process environment) x
batch sizes, and a measurement costs seconds to minutes (a ``torch.compile`` build alone costs 10-30 s on a small
CPU). A black-box sampler over pre-crossed (variant, batch) categoricals (the ``tpe`` strategy) learns
nothing from the structure of the problem. This one uses four facts:

1. **Throughput against batch size is unimodal per variant**: it rises, then saturates or falls (cache
   spills, memory bandwidth). Latency per call only grows with the batch. So the batch of one variant
   is searched by *bracketing on log2(b)*: start at one coarse point (about powers of two), step up or
   down a coarse point while the value improves, and once the best coarse point has measured
   neighbours on both sides (or sits at an edge), *refine* between powers of two on the finer grid
   (e.g. 24 between 16 and 32; multiples of ``granularity`` only, see :func:`refined_batch_sizes`).
2. **Constraints are monotone in the batch**: a batch whose latency breaks the SLO, whose peak memory
   breaks the limit, or that ran out of memory, makes every larger batch of that variant infeasible,
   so the bracket never steps above it (the constraint is honoured *during* the search).
3. **Dimensions have effects of their own**: channels_last, one thread or two, a compiler, shift
   log-throughput by roughly the same amount across the other dimensions. An unmeasured variant's value
   is predicted from the measured ones by an additive model per dimension (:meth:`BracketSearch._predict`),
   which decides how promising it is before anything is spent on it.
4. **Costs differ by orders of magnitude**, and are learned as the search goes (per variant, else per
   compiler, else a prior: 20 s for a compile build, 3 s otherwise), so every action is weighed by its
   *expected gain per second*.

Multi-fidelity racing (own logic, not Optuna's pruners): every first measurement of a point is a short
*screen* (``screen_fraction`` of the full measurement time). Only points whose CI can still reach the
leader's are measured again, at twice the fidelity each time (successive halving by confidence
intervals), up to the full measurement. Optuna's pruners do not fit: they stop one trial from its own
intermediate values at fixed steps, whereas here the fidelity is a whole measurement in a worker (the
worker reports once), and the decision compares CIs *across* candidates.

Algorithm (log-space values: ``u = log(throughput)``, or ``-log(latency)`` for the latency objective;
higher is better; ``sd`` from the 95% CI)::

    leader L = best feasible point by its pooled estimate (inverse-variance over its measurements)
    0. surprise: L rests on one short screen and beats every other variant's points by > SURPRISE (0.1):
       race L first (a lucky screen is re-measured before it is trusted)
    1. structured phase, actions for every live variant (not failed/rejected):
        screen   (unmeasured variant): its start batch (latency: the smallest; throughput: the batch of
                 the leader so far, else the largest coarse batch, as the tpe strategy's prior);
                 gain ~ N(additive-model prediction, model sd)
        step     (bracket open toward a neighbour coarse point, below the first infeasible batch):
                 gain ~ N(u(b*) + slope, |slope|), slope from this variant's last step, else the median
                 of the steps seen so far (prior 0.15)
        refine   (coarse bracket closed; an unmeasured fine point next to the best one):
                 gain ~ N(u(b*), max(0.02, half the gap to the better neighbour))
        race     (a point measured below full fidelity whose 95% CI reaches the leader's): the same point
                 at twice the fidelity; gain ~ N(u, sd) against L (for the leader: its closest rival's)
    score = EI(gain; L) / expected cost(action)           EI: expected improvement over L, log units
    pick the highest score while its EI >= ``stop_ei``; else ``converged`` (the structured phase is done):
    2. race L and the recommendation up to full fidelity (their numbers are then as trustworthy as any)
    3. explore phase, never stopping while the caller's budget lasts and points are unmeasured: every
       unmeasured allowed point of every live variant, gain ~ N(mu, sd) where mu interpolates u linearly
       on log2(b) between the variant's measured neighbours (the nearest one's u beyond the ends) and
       sd = hypot(0.05, 0.3 x log2 distance to the nearest measured batch) (a variant with no feasible
       point: the additive model); score = EI / cost (floored, so every point is eventually proposed);
       after each explore result the structured actions are scored again first (a surprising point
       opens its own steps, refinement and race)
    4. every point below full fidelity whose CI still reaches L's is raced; then None (given the
       exhaustive budget, the search has measured everything: it degrades to exhaustive)

The recommendation is the feasible point with the best lower 95% bound (the tool's
:func:`autotune.candidate.pessimistic_score` rule), so a lucky short screen does not win alone.

This module decides; it does not measure. :func:`autotune.study.bracket_loop.run_bracket` asks it what to
run, runs it through the Optuna study (so resume, several workers and heartbeats stay as they are) and tells
it the row. ``benchmarks/bench_search.py`` replays recorded landscapes through the same class.

Why one module (~520 lines): :class:`BracketSearch` is one state machine whose actions (screen, step,
refine, race, explore) score against the same pooled points, leader and cost model, so they are read and
changed together; most of the length is this docstring's pseudo-code and :meth:`BracketSearch.candidates`.
The batch grids (:func:`refined_batch_sizes`, :func:`coarse_grid`) are the one part that stands alone (the
tuner builds the space with the first); at ~35 lines they would make a module of their own too small to
pay for the indirection.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Arm", "BracketSearch", "Proposal", "coarse_grid", "refined_batch_sizes"]

#: Prior build + gate seconds of one measurement, per compiler, until this search has seen its own.
PRIOR_FIXED_COST = {"compile": 20.0, "export": 30.0, "onnx": 10.0, "openvino": 10.0}
PRIOR_FIXED_COST_OTHER = 3.0
#: Prior log-gain of one coarse bracket step (about x1.16), until steps have been seen.
PRIOR_STEP_GAIN = 0.15
#: Spread of the additive model's prediction before there are residuals to estimate it from.
PRIOR_MODEL_SD = 0.35
#: Explore phase: spread of an unmeasured batch's value around its interpolation from the variant's
#: measured batches, per octave (log2) of distance to the nearest one, and its floor.
EXPLORE_SD_PER_OCTAVE = 0.3
EXPLORE_SD_FLOOR = 0.05
#: A leader that rests on one short screen and beats every other variant's points by more than this (log
#: units, about 10%) is a surprise: it is raced before anything else, so a lucky screen is not trusted.
SURPRISE = 0.1
DIMENSIONS = ("compiler", "compile_mode", "precision", "memory_format", "threads", "environment")
_Z95 = 1.959964


def refined_batch_sizes(sizes: Sequence[int], *, granularity: int = 1) -> tuple[int, ...]:
    """``sizes`` (a coarse grid, e.g. powers of two up to the boundary) with a point between each pair.

    The midpoint on log2 of ``a < b`` with ``b >= 2a`` is ``sqrt(a*b)``, taken as 1.5x ``a`` where
    ``b = 2a`` (3, 6, 12, 24, ...: rounder numbers, the same in log2 within 0.09) and rounded to a
    multiple of ``granularity``; points that collide with the grid are dropped.
    """
    base = sorted({int(s) for s in sizes})
    out = set(base)
    for a, b in zip(base, base[1:], strict=False):
        mid = 1.5 * a if b == 2 * a else math.sqrt(a * b)
        m = int(round(mid / granularity)) * granularity
        if a < m < b:
            out.add(m)
    return tuple(sorted(out))


def coarse_grid(sizes: Sequence[int]) -> tuple[int, ...]:
    """The bracketing grid: from the smallest size, each next point at least 1.9x the previous, and the largest."""
    base = sorted(set(sizes))
    if not base:
        return ()
    out = [base[0]]
    for s in base[1:]:
        if s >= 1.9 * out[-1]:
            out.append(s)
    if out[-1] != base[-1]:
        out.append(base[-1])
    return tuple(out)


@dataclass(frozen=True)
class Arm:
    """One variant: its name, its dimension values and the batch sizes it may run (ascending)."""

    name: str
    batch_sizes: tuple[int, ...]
    dims: Mapping[str, Any] = field(default_factory=dict)
    #: Where to start a throughput search when nothing is known yet (the probes' throughput peak), else None.
    preferred: int | None = None

    @property
    def compiler(self) -> str:
        return str(self.dims.get("compiler") or self.name.split("+")[0].split(":")[0])


@dataclass(frozen=True)
class Proposal:
    """Measure ``variant`` at ``batch_size`` for ``fidelity`` x the full measurement time; ``action`` says why."""

    variant: str
    batch_size: int
    fidelity: float
    action: str  # screen | step | refine | race | explore
    score: float = 0.0


@dataclass
class _Point:
    """What is known about one (variant, batch): pooled estimate, fidelity spent, feasibility."""

    u: float = 0.0
    sd: float = math.inf
    fidelity: float = 0.0
    ok: bool = False
    feasible: bool = False
    status: str = ""
    costs: list[float] = field(default_factory=list)

    def pool(self, u: float, sd: float, fidelity: float) -> None:
        if not self.ok or not math.isfinite(self.sd):
            self.u, self.sd = u, sd
        else:
            w1, w2 = 1.0 / self.sd**2, 1.0 / sd**2
            self.u = (w1 * self.u + w2 * u) / (w1 + w2)
            self.sd = math.sqrt(1.0 / (w1 + w2))
        self.fidelity += fidelity
        self.ok = True

    @property
    def low(self) -> float:
        return self.u - _Z95 * self.sd

    @property
    def high(self) -> float:
        return self.u + _Z95 * self.sd


def _ei(mu: float, sd: float, best: float) -> float:
    """Expected improvement of N(mu, sd) over ``best`` (log units)."""
    if sd <= 0:
        return max(0.0, mu - best)
    z = (mu - best) / sd
    pdf = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    return sd * pdf + (mu - best) * cdf


class BracketSearch:
    """Proposes the next (variant, batch, fidelity) and learns from each result (see the module docstring).

    ``objective``: ``throughput`` (maximise) or ``latency`` (minimise the constrained percentile);
    ``pareto`` brackets on throughput. ``screen_fraction``: fidelity of a first measurement (share of
    the full measurement time). ``stop_ei``: no action whose expected improvement (log units) is below
    this is worth taking. ``granularity`` is only used for the start batch's rounding; the sizes come
    from the arms (build them with :func:`refined_batch_sizes`).
    """

    def __init__(self, arms: Sequence[Arm], *, objective: str = "throughput", screen_fraction: float = 0.25,
                 stop_ei: float = 0.002, full_measure_seconds: float = 1.0) -> None:
        self.arms = {a.name: a for a in arms if a.batch_sizes}
        self.minimize = objective == "latency"
        self.screen_fraction = min(1.0, max(1e-3, screen_fraction))
        self.stop_ei = stop_ei
        self.full_measure_seconds = full_measure_seconds
        self.points: dict[tuple[str, int], _Point] = {}
        self.dead: dict[str, str] = {}  # variant -> why (failed / rejected)
        self.ceiling: dict[str, int] = {}  # variant -> smallest batch known infeasible (monotone constraints)
        self.steps: list[float] = []  # log-gains of coarse steps that improved (for the prior slope)
        self.pending: set[tuple[str, int]] = set()  # proposed, not told yet (several workers)
        self.converged = False  # the structured phase found nothing worth ``stop_ei`` (explore phase since)

    # -- telling ---------------------------------------------------------------------------------
    def tell(self, variant: str, batch_size: int, *, status: str, value: float | None = None,
             ci: Sequence[float] | None = None, feasible: bool = True, cost_seconds: float | None = None,
             fidelity: float = 1.0, relative_sd: float | None = None, batch_specific: bool = False) -> None:
        """One result. ``value``: throughput (samples/s) or the latency percentile (ms), as the objective;
        ``ci``: its 95% interval (or ``relative_sd`` directly); ``status`` as a candidate row's;
        ``batch_specific``: a failure of every batch above 1 (an export specialised to its batch), not of the
        variant."""
        key = (variant, int(batch_size))
        self.pending.discard(key)
        p = self.points.setdefault(key, _Point())
        p.status = status
        if cost_seconds is not None:
            p.costs.append(float(cost_seconds) - fidelity * self.full_measure_seconds)
        if status == "failed" and batch_specific:
            self._cap(variant, 2)  # batch 1 alone is left
            return
        if status in ("failed", "rejected"):
            self.dead.setdefault(variant, status)
            return
        if status != "ok" or value is None or value <= 0:  # oom (or pruned above a boundary): no larger batch
            self._cap(variant, batch_size)
            p.fidelity = max(p.fidelity, fidelity)
            return
        u = -math.log(value) if self.minimize else math.log(value)
        if relative_sd is not None:
            sd = max(1e-4, float(relative_sd))
        elif ci is not None and ci[0] and ci[1] and ci[0] > 0 and ci[1] > 0:
            sd = max(1e-4, (math.log(ci[1]) - math.log(ci[0])) / (2 * _Z95))
        else:
            sd = 0.05
        was = self._best_batch(variant)
        before = self.points[(variant, was)].u if was is not None and was != batch_size else None
        p.pool(u, sd, fidelity)
        p.feasible = feasible
        if not feasible:
            self._cap(variant, batch_size)
        elif before is not None and p.u > before:
            self.steps.append(p.u - before)

    def _cap(self, variant: str, batch_size: int) -> None:
        self.ceiling[variant] = min(self.ceiling.get(variant, 1 << 62), int(batch_size))

    def mark_pending(self, variant: str, batch_size: int) -> None:
        self.pending.add((variant, int(batch_size)))

    # -- what is known ---------------------------------------------------------------------------
    def allowed(self, arm: Arm) -> list[int]:
        cap = self.ceiling.get(arm.name)
        return [b for b in arm.batch_sizes if cap is None or b < cap]

    def _measured(self, variant: str) -> dict[int, _Point]:
        return {b: p for (v, b), p in self.points.items() if v == variant and p.ok and p.feasible}

    def _best_batch(self, variant: str) -> int | None:
        m = self._measured(variant)
        return max(m, key=lambda b: m[b].u) if m else None

    def leader(self) -> tuple[str, int] | None:
        """The point with the best pooled estimate (feasible)."""
        best = None
        for (v, b), p in self.points.items():
            if p.ok and p.feasible and v not in self.dead and (best is None or p.u > self.points[best].u):
                best = (v, b)
        return best

    def recommendation(self) -> tuple[str, int] | None:
        """The feasible point with the best lower 95% bound (the tool's pessimistic rule)."""
        best = None
        for (v, b), p in self.points.items():
            if p.ok and p.feasible and v not in self.dead and (best is None or p.low > self.points[best].low):
                best = (v, b)
        return best

    def _predict(self, arm: Arm) -> tuple[float, float]:
        """Additive per-dimension model of a variant's best log value, from the variants measured so far.

        ``u(variant) ~ mean + sum over dimensions of effect(dimension, value)``, fitted by ridge least squares
        on one-hot columns (a small ridge makes it defined with few variants; an unseen value has effect 0).
        The spread is the residual spread (the prior while fewer than 4 variants are measured), widened
        for the fit's own uncertainty.
        """
        bests = {v: max(p.u for p in self._measured(v).values()) for v in self.arms if self._measured(v)}
        if not bests:
            return 0.0, PRIOR_MODEL_SD
        names = list(bests)
        columns = sorted({(d, str(self.arms[v].dims.get(d))) for v in names for d in DIMENSIONS})
        x = np.array([[1.0 if str(self.arms[v].dims.get(d)) == val else 0.0 for d, val in columns] for v in names])
        y = np.array([bests[v] for v in names])
        mean = float(y.mean())
        ridge = 0.05
        coef = np.linalg.solve(x.T @ x + ridge * np.eye(len(columns)), x.T @ (y - mean)) if columns else np.zeros(0)
        row = np.array([1.0 if str(arm.dims.get(d)) == val else 0.0 for d, val in columns])
        pred = mean + float(row @ coef)
        n = len(names)
        resid = y - mean - x @ coef
        sd = float(np.sqrt((resid**2).sum() / max(1, n - 1))) if n >= 4 else PRIOR_MODEL_SD
        return pred, max(0.08, sd * math.sqrt(1 + 1 / n), PRIOR_MODEL_SD / math.sqrt(n))

    def _fixed_cost(self, arm: Arm, batch: int) -> float:
        own = [(b, c) for (v, b), p in self.points.items() if v == arm.name for c in p.costs]
        if own:
            b0, c0 = min(own, key=lambda bc: abs(math.log(bc[0] / batch)))
            return max(0.1, c0 * (1.0 + 0.1 * max(0.0, math.log2(batch / b0))))
        same = [c for (v, _), p in self.points.items() if v in self.arms and self.arms[v].compiler == arm.compiler
                for c in p.costs]
        if same:
            return max(0.1, sum(same) / len(same))
        return PRIOR_FIXED_COST.get(arm.compiler, PRIOR_FIXED_COST_OTHER)

    def _cost(self, arm: Arm, batch: int, fidelity: float) -> float:
        return self._fixed_cost(arm, batch) + fidelity * self.full_measure_seconds

    def _start_batch(self, arm: Arm, sizes: list[int]) -> int:
        if self.minimize:
            return sizes[0]
        coarse = [b for b in coarse_grid(arm.batch_sizes) if b in sizes] or sizes
        lead = self.leader()
        target: float
        if lead is not None:
            target = float(lead[1])
        else:
            target = float(arm.preferred or coarse[-1])
        return min(coarse, key=lambda b: (abs(math.log2(b / target)), -b))

    # -- proposing -------------------------------------------------------------------------------
    def candidates(self) -> list[Proposal]:
        """Every action worth considering now, with its score (EI per second)."""
        lead = self.leader()
        lead_u = self.points[lead].u if lead else -math.inf
        lead_sd = self.points[lead].sd if lead else 0.0
        prior_slope = sorted(self.steps)[len(self.steps) // 2] if self.steps else PRIOR_STEP_GAIN
        out: list[Proposal] = []

        def add(arm: Arm, b: int, fidelity: float, action: str, mu: float, sd: float) -> None:
            if (arm.name, b) in self.pending:
                return
            gain = _ei(mu, sd, lead_u) if math.isfinite(lead_u) else 1.0
            out.append(Proposal(arm.name, b, fidelity, action, gain / self._cost(arm, b, fidelity)))

        for arm in self.arms.values():
            if arm.name in self.dead:
                continue
            sizes = self.allowed(arm)
            if not sizes:
                continue
            tried = {b for (v, b) in self.points if v == arm.name}
            good = self._measured(arm.name)
            if not tried:
                if not any(v == arm.name for v, _ in self.pending):
                    mu, sd = self._predict(arm)
                    add(arm, self._start_batch(arm, sizes), self.screen_fraction, "screen", mu, sd)
                continue
            if not good:
                # measured but nothing feasible: step down toward smaller batches (constraints are monotone)
                lower = [b for b in sizes if b not in tried]
                if lower:
                    mu, sd = self._predict(arm)
                    add(arm, lower[-1] if not self.minimize else lower[0], self.screen_fraction, "step", mu, sd)
                continue
            b_star = max(good, key=lambda b: good[b].u)
            u_star = good[b_star].u
            coarse = [b for b in coarse_grid(arm.batch_sizes) if b in sizes or b in tried]
            if b_star in coarse:
                i = coarse.index(b_star)
                neighbours = [coarse[j] for j in (i - 1, i + 1) if 0 <= j < len(coarse)]
            else:  # the best is a fine point: its coarse bracket is closed by definition
                neighbours = []
            open_steps = [b for b in neighbours if b not in tried and b in sizes]
            for b in open_steps:
                prev = [x for x in good if x != b_star and (x < b_star) == (b < b_star)]
                slope = prior_slope
                if prev:  # the trend seen on the other side continues, weakened (concave curve)
                    x = min(prev, key=lambda z: abs(math.log2(z / b_star)))
                    slope = 0.5 * (u_star - good[x].u)
                elif (b > b_star) == self.minimize:
                    slope = -prior_slope / 2 if not self.minimize else prior_slope / 2
                add(arm, b, self.screen_fraction, "step", u_star + slope, max(abs(slope), 0.05))
            if not open_steps:
                # refine: unmeasured neighbours of b* on the full grid (between coarse points)
                k = sizes.index(b_star) if b_star in sizes else None
                if k is not None:
                    for j in (k - 1, k + 1):
                        if 0 <= j < len(sizes) and sizes[j] not in tried:
                            side = [x for x in good if x != b_star and (x < b_star) == (sizes[j] < b_star)]
                            gap = abs(u_star - good[min(side, key=lambda z: abs(z - b_star))].u) if side else 0.1
                            add(arm, sizes[j], self.screen_fraction, "refine", u_star - gap / 4,
                                max(0.02, gap / 2))
            # race: this variant's best point, measured below full fidelity, CI reaching the leader's
            p = good[b_star]
            if p.fidelity < 1.0 - 1e-9 and lead is not None and p.high >= lead_u - _Z95 * lead_sd:
                fid = min(1.0 - p.fidelity, max(p.fidelity, self.screen_fraction))
                if (arm.name, b_star) == lead:
                    rivals = [self.points[(v, b)] for (v, b) in self._arm_bests() if (v, b) != lead]
                    rival = max(rivals, key=lambda q: q.u, default=None)
                    if rival is None:
                        continue
                    gain = _ei(rival.u, math.hypot(rival.sd, p.sd), lead_u)
                else:
                    gain = _ei(p.u, p.sd, lead_u)
                out.append(Proposal(arm.name, b_star, fid, "race", gain / self._cost(arm, b_star, fid)))
        return out

    def _arm_bests(self) -> list[tuple[str, int]]:
        out = []
        for v in self.arms:
            b = self._best_batch(v) if v not in self.dead else None
            if b is not None:
                out.append((v, b))
        return out

    def _explore(self, lead_u: float) -> list[Proposal]:
        """Every unmeasured allowed point of every live variant, scored by EI per second (the explore phase).

        A point of a variant with feasible measurements is predicted by interpolating ``u`` linearly on
        log2(b) between its measured neighbours (the nearest one's ``u`` beyond the ends), with a spread
        that grows with the log2 distance to the nearest measured batch (``EXPLORE_SD_PER_OCTAVE``), so
        far, unexplored batches (a second peak, a dip recovered from) keep a chance, and points next to a
        surprisingly good measurement are tried first. A variant without a feasible measurement is
        predicted by the additive model. Scores never reach 0 (a floor proportional to the spread), so
        the ordering stays defined and every point is eventually proposed.
        """
        out: list[Proposal] = []
        for arm in self.arms.values():
            if arm.name in self.dead:
                continue
            tried = {b for (v, b) in self.points if v == arm.name} | {b for (v, b) in self.pending if v == arm.name}
            todo = [b for b in self.allowed(arm) if b not in tried]
            if not todo:
                continue
            good = self._measured(arm.name)
            model = self._predict(arm) if not good else (0.0, 0.0)
            for b in todo:
                if good:
                    x = math.log2(b)
                    lo = [m for m in good if m < b]
                    hi = [m for m in good if m > b]
                    if lo and hi:
                        a, c = max(lo), min(hi)
                        t = (x - math.log2(a)) / (math.log2(c) - math.log2(a))
                        mu = (1 - t) * good[a].u + t * good[c].u
                        d = min(x - math.log2(a), math.log2(c) - x)
                    else:
                        n = max(lo) if lo else min(hi)
                        mu, d = good[n].u, abs(x - math.log2(n))
                    sd = math.hypot(EXPLORE_SD_FLOOR, EXPLORE_SD_PER_OCTAVE * d)
                else:
                    mu, sd = model
                gain = _ei(mu, sd, lead_u) if math.isfinite(lead_u) else 1.0
                cost = self._cost(arm, b, self.screen_fraction)
                out.append(Proposal(arm.name, b, self.screen_fraction, "explore", max(gain, 1e-9 * sd) / cost))
        return out

    def _confirm(self, key: tuple[str, int] | None) -> Proposal | None:
        """Race ``key`` (the leader or the recommendation) one step toward full fidelity, if it is below it."""
        if key is None or key in self.pending:
            return None
        p = self.points[key]
        if p.fidelity >= 1.0 - 1e-9:
            return None
        return Proposal(key[0], key[1], min(1.0 - p.fidelity, max(p.fidelity, self.screen_fraction)), "race")

    def next(self) -> Proposal | None:
        """What to measure next; None only when every allowed point is measured and no contender is left to race.

        1. the structured phase (screen / step / refine / race), while its best action is worth
           ``stop_ei``; before anything else, a leader that rests on one short screen and beats every
           other variant's points by more than ``SURPRISE`` is raced, so a lucky screen is not trusted;
        2. then the leader and the recommendation are raced to full fidelity (``self.converged`` is set);
        3. then the explore phase (:meth:`_explore`), over every unmeasured point, for as long as the caller's
           budget lasts: given the exhaustive budget this measures everything;
        4. at the end, every point measured below full fidelity whose CI still reaches the leader's is raced.
        """
        lead = self.leader()
        if lead is not None and lead not in self.pending:
            p = self.points[lead]
            others = [q.u for k, q in self.points.items()
                      if k[0] != lead[0] and q.ok and q.feasible and k[0] not in self.dead]
            if p.fidelity <= self.screen_fraction + 1e-9 and others and p.u - max(others) > SURPRISE:
                return self._confirm(lead)
        cands = self.candidates()
        best = max(cands, key=lambda c: c.score) if cands else None
        if best is not None:
            cost = self._cost(self.arms[best.variant], best.batch_size, best.fidelity)
            if best.score * cost >= self.stop_ei:
                return best
        self.converged = True
        for key in (lead, self.recommendation()):
            conf = self._confirm(key)
            if conf is not None:
                return conf
        lead_u = self.points[lead].u if lead else -math.inf
        explore = self._explore(lead_u)
        if explore:
            return max(explore, key=lambda c: c.score)
        if lead is None:
            return None
        lead_low = self.points[lead].low
        rest = [(k, q) for k, q in self.points.items() if q.ok and q.feasible and k[0] not in self.dead
                and k not in self.pending and q.fidelity < 1.0 - 1e-9 and q.high >= lead_low]
        if rest:
            k, _ = max(rest, key=lambda kq: kq[1].u)
            return self._confirm(k)
        return None
