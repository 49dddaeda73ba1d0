"""The generate search: the concurrency boundary, every configuration at each concurrency, the checks, the pick,
and the side-by-side rounds that back it.

Pseudo-code::

    ref = dynamic cache, eager, fp32 (configs.reference)
    measure ref at 1 sequence                         # the model runs; its greedy tokens at c = 1
    concurrencies = the recipe's, or (auto) the boundary B (boundary.find_concurrency_boundary on ref) and
                    the powers of two below it
    for c ascending, for config in the grid (ref first):   # each point a fresh process; budget checked before
        point = measure(config, c); tokens checked against ref's at c (fp32 exact, else the budget)
        (timed while other processes used CPU, and the budget allows: measured once more, the second stands)
    eligible = ok, tokens agree, p99 TTFT / ITL within the recipe's limits
    pick = the most useful tokens/s; any eligible point at the pick's concurrency whose tokens/s interval
           overlaps the pick's and is simpler takes its place (the tie goes to the simpler setting)
    rounds: the pick, ref and the fastest static-cache point (compiled first), at the pick's concurrency,
            measured again in generate.rounds fresh processes, interleaved (A B C A B C ...): the ratios
            pick / ref and static(+compile) / ref with 95% intervals over the rounds; "undecided" where the
            interval holds 1; a pick not surely faster than ref gives way to ref (the simpler); a round in which
            another process used CPU while one of its points was timed is left out when every contender keeps
            two quiet rounds (quiet_rates)
    compile payback = compile seconds / (ref's seconds per call - its seconds per call), in calls

Every point is a fresh worker (``Runner(fresh_measure=True)``): a compiled decode step's cost and memory are
those of a process that compiled it, as a deployment would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune.client import WorkerClient
from autotune.core.recipe import GenerateSpec, Recipe
from autotune.core.recipe.generate import bucket_length
from autotune.errors import BatchSearchError
from autotune.generate.agreement import TokenCheck, check_tokens
from autotune.generate.configs import (
    GenerateConfig,
    grid,
    in_place_of,
    lower_precision,
    reference_choices,
    simplicity,
    without_reference_twin,
)
from autotune.generate.points import GenPoint, point_from, ratio_ci
from autotune.runner import WorkerCrash

#: Side-by-side rounds the grid leaves time for (of ``generate.rounds``): two per contender is the fewest that
#: compare (:meth:`GenerateSearch.rounds`).
RESERVED_ROUNDS = 2


def rounds_reserve(rounds: int, point_seconds: float) -> float:
    """Seconds the grid leaves for the side-by-side rounds: RESERVED_ROUNDS rounds of the pick and the reference
    (each a fresh process, timed like the reference's point at the level its curve ranks first); none when the recipe
    asks for fewer than two rounds.

    Why: a Pythia's and a Phi-3's grids spent the whole budget, and the rounds ran 0 and 1 of 3: "too few to compare,
    so the pick rests on its screen" (session 38)."""
    if rounds < 2 or point_seconds <= 0:
        return 0.0
    return RESERVED_ROUNDS * 2 * point_seconds


@dataclass
class PointResult:
    config: GenerateConfig
    concurrency: int
    status: str  # ok | rejected | failed | oom | skipped
    reason: str = ""
    point: GenPoint | None = None
    check: TokenCheck | None = None
    tokens: list[list[int]] | None = None
    seconds: float = 0.0
    unsupported: bool = False  # failed because the model lacks the configuration's setting (its attention)

    def to_dict(self) -> dict[str, Any]:
        base: dict[str, Any] = self.point.to_dict() if self.point is not None else \
            {"config": self.config.label(), "concurrency": self.concurrency}
        base.update(status=self.status, reason=self.reason, seconds=self.seconds,
                    tokens_check=self.check.to_dict() if self.check else None)
        return base


@dataclass
class Progress:
    """What the search has so far (the stage writes the report from it after every point)."""

    points: list[PointResult] = field(default_factory=list)
    boundary: dict[str, Any] | None = None
    model: dict[str, Any] = field(default_factory=dict)
    rounds: dict[str, Any] | None = None
    pick: PointResult | None = None
    notes: list[str] = field(default_factory=list)
    stopped_by: str = "complete"
    reference: str = ""  # the reference configuration's label, once one ran


def levels_by_yield(levels: list[int], refs: dict[int, PointResult],
                    eligible: Callable[[PointResult], bool]) -> list[int]:
    """The concurrencies in the order the other configurations visit them: the reference's eligible levels by its
    tokens/s, highest first, then the rest (over a latency limit, or where it did not run) by concurrency.

    Why: a budget spent level by level from 1 sequence up stops before the levels that decide. A Pythia-shaped
    model's boundary was 64 sequences, and its 300-s budget measured every configuration at 1, 2, 4 and 8 and then
    ran out: the pick was at 8 sequences, with 16-64 never tried (session 38). The throughput pick is almost always
    where the reference's own curve is highest; a latency limit moves it down, and the order follows."""
    def key(c: int) -> tuple[int, float, int]:
        r = refs.get(c)
        if r is None or r.point is None or not eligible(r):
            return (1, 0.0, c)
        return (0, -r.point.tokens_per_s, c)

    return sorted(levels, key=key)


class GenerateSearch:
    def __init__(self, client: WorkerClient, recipe: Recipe, *, on_point: Callable[[Progress], None],
                 say: Callable[[str], None], limit: int | None, limit_source: str) -> None:
        assert recipe.generate is not None
        self.client, self.recipe, self.spec = client, recipe, recipe.generate
        self.on_point, self.say = on_point, say
        self.limit, self.limit_source = limit, limit_source
        self.progress = Progress()
        self.started = time.monotonic()
        self.costs: dict[GenerateConfig, float] = {}
        self.ref = reference_choices(self.spec)[0]  # the one that ran at 1 sequence (run)
        self.default_threads: int | None = None  # torch's threads in a worker left at its default (measure)

    # ------------------------------------------------------------------ the pieces
    def left(self) -> float:
        return self.spec.time_budget_s - (time.monotonic() - self.started)

    def measure(self, config: GenerateConfig, c: int, *, calls: int | None = None) -> PointResult:
        t0 = time.monotonic()
        res = self.client.generate(self.recipe.to_dict(), config.to_dict(), c, action="measure",
                                   calls=calls or self.spec.calls, timeout=self.recipe.measure.timeout_s)
        seconds = time.monotonic() - t0
        self.costs[config] = seconds
        crash = res.get("crash")
        if isinstance(crash, WorkerCrash) and crash.killed_by_kernel:
            return PointResult(config, c, "oom", crash.reason, seconds=seconds)
        if res["status"] != "ok":
            return PointResult(config, c, str(res["status"]), str(res["reason"]), seconds=seconds,
                               unsupported=bool(res.get("unsupported")))
        raw: Any = res
        if raw.get("model"):
            self.progress.model = dict(raw["model"])
        if config.threads == 0 and raw.get("threads"):
            self.default_threads = int(raw["threads"])
        point = point_from(config.label(), c, raw)
        if self.limit is not None and point.peak_memory_bytes is not None and point.peak_memory_bytes > self.limit:
            return PointResult(config, c, "rejected", f"peak {point.peak_memory_bytes / 2**20:,.0f} MiB is over the "
                               f"memory limit ({self.limit / 2**20:,.0f} MiB, {self.limit_source})", point=point,
                               tokens=raw["tokens"], seconds=seconds)
        return PointResult(config, c, "ok", point=point, tokens=raw["tokens"], seconds=seconds)

    def concurrencies(self, ref: GenerateConfig) -> list[int]:
        spec = self.spec
        if spec.concurrency != "auto":
            return list(spec.concurrency)
        from autotune.generate.boundary import BOUNDARY_SHARE, boundary_document, find_concurrency_boundary

        self.say(f"concurrency boundary of {ref.label()} (limit "
                 f"{'none' if self.limit is None else f'{self.limit / 2**30:.2f} GiB'}, {self.limit_source})")
        found = find_concurrency_boundary(
            self.client, self.recipe, ref, limit=self.limit, upper=spec.max_concurrency,
            deadline=self.started + BOUNDARY_SHARE * spec.time_budget_s,
            on_probe=lambda r, _p: self.say(f"  probe {r.batch_size} sequences: "
                                            f"{'fits' if r.fits else 'does not fit'} ({r.seconds:.1f} s)"))
        prompt_tokens = max(bucket_length(n, spec.bucket) for n in _prompt_lengths(spec, self.progress.model))
        self.progress.boundary = boundary_document(found, limit=self.limit, source=self.limit_source,
                                                   prompt_tokens=prompt_tokens, new_tokens=spec.max_new_tokens,
                                                   config=ref)
        self.say(self.progress.boundary["sentence"])
        top = found.max_batch_size
        return sorted({2 ** k for k in range(int(math.log2(top)) + 1)} | {top})

    # ------------------------------------------------------------------ the search
    def run(self) -> Progress:
        spec, prog = self.spec, self.progress
        configs = grid(spec)
        for ref in reference_choices(spec):  # the next attention only where the model lacks this one
            self.ref = ref
            first = self.measure(ref, 1)
            prog.points.append(first)
            if not first.unsupported:
                break
        if first.status != "ok":
            prog.stopped_by = "reference_failed"
            prog.notes.append(f"the reference ({ref.label()}) failed at 1 sequence: {first.reason}")
            return prog
        prog.reference = ref.label()
        missing = {p.config.attention for p in prog.points if p.unsupported}
        if ref.attention not in spec.attention:  # none of the recipe's: every configuration with the model's own
            configs = in_place_of(configs, ref.attention)
            prog.notes.append(f"the model supports none of the recipe's attentions ({', '.join(spec.attention)}): "
                              f"every configuration uses its own, {ref.attention}")
        elif ref != configs[0]:
            prog.notes.append(f"the reference is {ref.label()}: the model does not support "
                              f"{', '.join(sorted(missing))} attention")
        configs, twin = without_reference_twin(configs, ref, self.default_threads)
        if twin is not None:
            prog.notes.append(f"{twin.label()} is the reference here: torch's default in a worker is "
                              f"{twin.threads} threads, so it was measured once, as {ref.label()}")
        tried = {p.config for p in prog.points}
        self.on_point(prog)
        try:
            levels = self.concurrencies(ref)
        except BatchSearchError as exc:  # one sequence does not fit: nothing to measure beyond the first point
            prog.stopped_by = "boundary"
            prog.notes.append(f"concurrency boundary: {exc}")
            return prog
        refs: dict[int, PointResult] = {1: first}
        # failed to build or run: not tried again at other concurrencies (an attention the reference found missing)
        broken: dict[GenerateConfig, str] = {p.config: f"failed at 1 sequence: {p.reason}"
                                             for p in prog.points if p.status == "failed"}
        def visit(config: GenerateConfig, c: int) -> None:
            if c == 1 and config in tried:
                return
            if config.attention in missing:  # every configuration with it fails alike: said once
                if c == 1:
                    prog.points.append(PointResult(config, c, "skipped", f"the model does not support "
                                                   f"attention {config.attention!r}"))
                return
            if config in broken:
                prog.points.append(PointResult(config, c, "skipped", broken[config]))
                return
            if config != ref and c not in refs:
                prog.points.append(PointResult(config, c, "skipped", f"the reference did not run at {c} sequences: "
                                               "no tokens to check it against"))
                return
            predicted = self.costs.get(config, self.costs.get(ref, 0.0)) * (1.0 + 0.1 * math.log2(c))
            if self.left() - reserve < predicted:
                kept = " (the rest kept for the side-by-side rounds)" if reserve > 0 else ""
                prog.points.append(PointResult(config, c, "skipped", f"generate.time_budget_s spent{kept}"))
                prog.stopped_by = "time_budget"
                return
            self.say(f"{config.label()} at {c} sequence{'s' if c > 1 else ''}")
            result = self.measure(config, c)
            first = result.point if result.status == "ok" else None
            if first is not None and first.disturbed and self.left() - reserve >= predicted:
                # timed beside a busy neighbour: one more fresh process, whose figure stands if it ran
                self.say(f"{config.label()} at {c} sequence{'s' if c > 1 else ''} again (other processes used "
                         f"{first.foreign_cores:.2f} cores while it was timed)")
                again = self.measure(config, c)
                if again.status == "ok" and again.point is not None:
                    prog.notes.append(f"{config.label()} at {c}: its first process was timed while other processes "
                                      f"used {first.foreign_cores:.2f} cores ({first.tokens_per_s:,.0f} tokens/s); "
                                      f"measured again ({again.point.tokens_per_s:,.0f} tokens/s), the second stands")
                    result = again
            if result.status == "failed":
                broken[config] = f"failed at {c} sequence{'s' if c > 1 else ''}: {result.reason}"
            if config == ref and result.status == "ok":
                refs[c] = result
            self._check(result, refs.get(c))
            prog.points.append(result)
            self.on_point(prog)

        reserve = 0.0
        for c in levels:  # the reference's curve first: it ranks the levels, and checks every other point
            visit(ref, c)
        order = levels_by_yield(levels, refs, self.eligible)
        reserve = rounds_reserve(spec.rounds, refs[order[0]].seconds if order and order[0] in refs else 0.0)
        for c in order:
            for config in configs:
                if config != ref:
                    visit(config, c)
        prog.points.sort(key=lambda r: r.concurrency)  # the tables read level by level, each as measured
        prog.pick = self.pick()
        if prog.pick is not None and self.left() > 0 and spec.rounds > 0:
            prog.rounds = self.rounds(prog.pick, refs)
            self._settle(refs)
        self.on_point(prog)
        return prog

    def reference_tokens(self, c: int) -> list[list[int]] | None:
        """The reference's greedy tokens at ``c`` sequences (what the artifact's ``load.py --check`` compares)."""
        ref = self.ref
        return next((r.tokens for r in self.progress.points if r.config == ref and r.concurrency == c
                     and r.tokens is not None), None)

    def _check(self, result: PointResult, ref: PointResult | None) -> None:
        if result.status != "ok" or result.tokens is None:
            return
        if ref is None or ref.tokens is None:
            result.reason = "not checked: the reference did not run at this concurrency"
            result.status = "rejected"
            return
        if result is ref:
            return
        result.check = check_tokens(ref.tokens, result.tokens, exact=not lower_precision(result.config),
                                    budget=self.spec.token_agreement)
        if not result.check.passed:
            result.status, result.reason = "rejected", result.check.reason

    def eligible(self, r: PointResult) -> bool:
        if r.status != "ok" or r.point is None:
            return False
        spec = self.spec
        if spec.max_ttft_ms is not None and r.point.ttft.p99 > spec.max_ttft_ms:
            return False
        return spec.max_itl_ms is None or r.point.itl.p99 <= spec.max_itl_ms

    def pick(self) -> PointResult | None:
        ok = [r for r in self.progress.points if self.eligible(r)]
        if not ok:
            return None
        best = max(ok, key=lambda r: r.point.tokens_per_s if r.point else 0.0)
        assert best.point is not None
        low = best.point.tokens_per_s_ci[0]
        ties = [r for r in ok if r.concurrency == best.concurrency and r.point is not None
                and r.point.tokens_per_s_ci[1] >= low]
        return min(ties, key=lambda r: (simplicity(r.config), -(r.point.tokens_per_s if r.point else 0.0)))

    def _settle(self, refs: dict[int, PointResult]) -> None:
        """The rounds decide. A pick not surely faster than the reference (its ratio's interval holds 1, or is below
        it) gives way: to the contender the rounds show surely faster than the reference, the fastest such (a
        Mamba's screen put dynamic/eager ahead, and the rounds had static/eager 1.15x it, CI 1.05-1.29), else to
        the reference at the same concurrency, the simpler setting."""
        prog, pick = self.progress, self.progress.pick
        if pick is None or prog.rounds is None:
            return
        comps = prog.rounds["comparisons"]
        comp = next((x for x in comps if x["config"] == pick.config.label()), None)
        if comp is not None and comp["verdict"] == "faster":
            return
        faster = sorted((x for x in comps if x["verdict"] == "faster"), key=lambda x: -x["ratio"])
        for x in faster:
            better = next((r for r in prog.points if r.config.label() == x["config"]
                           and r.concurrency == pick.concurrency and self.eligible(r)), None)
            if better is not None:
                lo, hi = x["ratio_ci"]
                prog.notes.append(f"{pick.config.label()} led the screen, but side by side {x['config']} was faster "
                                  f"than {x['against']} ({x['ratio']:.2f}x, 95% CI {lo:.2f}-{hi:.2f}), and "
                                  f"{pick.config.label()} was not surely so: {x['config']} is recommended")
                prog.pick = better
                return
        ref = refs.get(pick.concurrency)
        if comp is None or ref is None or not self.eligible(ref):
            return
        lo, hi = comp["ratio_ci"]
        prog.notes.append(f"{pick.config.label()} led the screen, but side by side it was {comp['verdict']} against "
                          f"{ref.config.label()} ({comp['ratio']:.2f}x, 95% CI {lo:.2f}-{hi:.2f}): the simpler "
                          "reference is recommended")
        prog.pick = ref

    def rounds(self, pick: PointResult, refs: dict[int, PointResult]) -> dict[str, Any]:
        c = pick.concurrency
        ref = self.ref
        # the static cache's best (compiled ones first): the ratio "static + compile vs dynamic eager"
        static = [r for r in self.progress.points if r.concurrency == c and r.config.cache == "static"
                  and r.status == "ok" and r.point is not None]
        compiled = [r for r in static if r.config.compile != "none"] or static
        contenders = [pick.config, ref]
        if compiled:
            fastest = max(compiled, key=lambda r: r.point.tokens_per_s if r.point else 0.0).config
            if fastest not in contenders:
                contenders.append(fastest)
        contenders = list(dict.fromkeys(contenders))
        timed: dict[GenerateConfig, list[tuple[int, float]]] = {k: [] for k in contenders}  # (round, tokens/s)
        points: dict[GenerateConfig, list[GenPoint]] = {k: [] for k in contenders}
        disturbed: list[bool] = []  # per round: another process used CPU while one of its points was timed
        self.say(f"side-by-side rounds at {c} sequences: {', '.join(k.label() for k in contenders)}")
        for i in range(self.spec.rounds):
            hit = False
            for config in contenders:
                if self.left() <= 0:
                    break
                r = self.measure(config, c)
                if r.status == "ok" and r.point is not None:
                    timed[config].append((i, r.point.tokens_per_s))
                    points[config].append(r.point)
                    hit = hit or r.point.disturbed
            disturbed.append(hit)
        rates, dropped = quiet_rates(timed, disturbed)
        out: dict[str, Any] = {"concurrency": c, "rounds": {k.label(): v for k, v in rates.items()},
                               "comparisons": [], "rounds_asked": self.spec.rounds,
                               "rounds_run": min((len(v) for v in timed.values()), default=0),
                               "disturbed_rounds": [i for i, d in enumerate(disturbed) if d],
                               "foreign_cores": {k.label(): [p.foreign_cores for p in v] for k, v in points.items()},
                               "disturbed_left_out": dropped}
        base = rates[ref]
        for config in contenders:
            if config == ref or len(rates[config]) < 2 or len(base) < 2:
                continue
            ratio, ci = ratio_ci(rates[config], base, seed=len(out["comparisons"]))
            verdict = "faster" if ci[0] > 1.0 else "slower" if ci[1] < 1.0 else "undecided"
            entry: dict[str, Any] = {"config": config.label(), "against": ref.label(), "ratio": ratio,
                                     "ratio_ci": list(ci), "verdict": verdict, "rounds": len(rates[config])}
            if config.compile != "none":
                entry.update(_payback(points[config], points[ref]))
            out["comparisons"].append(entry)
        return out


def quiet_rates(timed: dict[GenerateConfig, list[tuple[int, float]]], disturbed: list[bool]
                ) -> tuple[dict[GenerateConfig, list[float]], bool]:
    """Each contender's tokens/s over the rounds, the disturbed rounds left out when every contender keeps two quiet
    ones (the fewest that compare); else every round, and False: too few quiet rounds to leave any out.

    Why: a round is fresh processes timed one after another, and a neighbour that holds the CPU through one of them
    moves that contender's figure, not the others' (a BLOOM's screen beside another run's plain processes: 104
    tokens/s, its quiet rounds about 1,000; session 44). The showdown leaves such rounds out the same way."""
    quiet = {i for i, d in enumerate(disturbed) if not d}
    kept = {k: [v for i, v in series if i in quiet] for k, series in timed.items()}
    if any(disturbed) and all(len(v) >= 2 for v in kept.values()):
        return kept, True
    return {k: [v for _, v in series] for k, series in timed.items()}, False


def _payback(mine: list[GenPoint], ref: list[GenPoint]) -> dict[str, Any]:
    """The compile cost (the first call's excess, median over processes) against the seconds a call saves."""
    if not mine or not ref:
        return {}
    compile_s = sorted(p.compile_seconds for p in mine)[len(mine) // 2]
    per_call = sorted(sum(p.call_seconds) / len(p.call_seconds) for p in mine)[len(mine) // 2]
    ref_call = sorted(sum(p.call_seconds) / len(p.call_seconds) for p in ref)[len(ref) // 2]
    saved = ref_call - per_call
    calls = math.ceil(compile_s / saved) if saved > 0 else None
    return {"compile_seconds": compile_s, "seconds_per_call": per_call, "reference_seconds_per_call": ref_call,
            "payback_calls": calls,
            "payback": (f"pays back its {compile_s:.1f} s of compile after {calls} calls" if calls is not None else
                        f"never pays back its {compile_s:.1f} s of compile: it is not faster per call")}


def _prompt_lengths(spec: GenerateSpec, model: dict[str, Any]) -> tuple[int, ...]:
    lengths = model.get("prompt_lengths")
    return tuple(lengths) if lengths else spec.prompt_lengths
