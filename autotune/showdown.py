"""The final showdown: finalists re-measured in randomized, interleaved rounds, compared in pairs.

Why: the search measures each candidate once, in one contiguous window of a few seconds. On a
shared machine a busy neighbour or a clock change during that window is charged to that one
candidate, and its within-window CI cannot see it: three runs of the demo crowned three
different winners while each run's CIs were +-1-6%. Following Abedi & Brecht ("Conducting
repeatable experiments in highly variable cloud computing environments", ICPE 2017), the
finalists are re-measured in several rounds, each round visiting every finalist once in a fresh
random order, so slow periods of the machine are spread over all of them. The winner is decided
by a *paired* comparison over rounds (each round's ratio to the leader measured in that same
round), which cancels what a round shares, and finalists within a practical-equivalence margin
are a tie broken by a documented rule instead of by noise.

Algorithm::

    finalists = feasible ok rows ranked by the search's pessimistic score;
                the leader, every row whose throughput CI still reaches the leader's
                (upper bound >= leader's lower bound), every row whose screening window
                other processes disturbed (> 0.1 core: its number says little),
                at least `min_finalists`, at most `max_finalists`
    stage:   `processes` (2) fresh measure workers per finalist: build the variant, first call,
             warm up; round r uses worker r mod processes
    rounds:  repeat until R undisturbed rounds and no tie is a coin flip (no finalist's ratio CI
             straddles 1 - margin: see :func:`undecided`); at most 3R rounds, or the deadline:
                 for each finalist in a seeded random order: time one slice
                 (round_seconds of back-to-back calls) -> seconds per call in round r,
                 and the CPU others used meanwhile (autotune.contention)
                 a round in which any slice saw > 0.1 core of foreign CPU is "disturbed";
                 the first `processes` rounds are burn-in (every process's first slice:
                 a fresh process's allocator is still settling) and never compared
             compare on the undisturbed rounds (all rounds if fewer than 2 are)
    compare (pure, :func:`compare`):
        perf[c][r] = throughput (samples/s), or 1 / latency percentile for a latency objective
        leader     = argmax over c of median_r (log perf[c][r] - log perf[L0][r]), where L0 is
                     the best by median log perf (paired against a common reference)
        ratio[c]   = exp(median_r (log perf[c][r] - log perf[leader][r]))    # paired
        ci[c]      = percentile bootstrap of that median over resampled rounds (paired: the
                     same rounds for c and the leader)
        (medians, not means: a round a neighbour hit unevenly moves a mean, not a median)
        tie        = {c : upper end of ci[c] >= 1 - margin}: not shown to be slower than the
                     leader by more than the margin (a finalist whose processes or rounds
                     disagree gets a wide CI and stays in the tie rather than losing by luck)
        pick       = min over tie of (simplicity, p99 latency, peak memory)
        simplicity: eager < script/trace < frozen < compile/export < onnx/openvino, then fp32 before reduced
                    precision, then contiguous before channels_last

Workers of their own per finalist (not all finalists in one process) so no finalist runs beside
another's compiler caches or allocator state, as in a deployment; a worker waiting for its next
slice blocks on its pipe and costs no CPU. More than one per finalist because processes differ:
glibc's dynamic mmap threshold follows each process's allocation history, and the same transformer
variant measured 0.93-1.005x a plain process's speed from one process to the next (page faults
per call 0-2,600, bench_agreement); one process per finalist let that luck decide near ties
(three runs, three different picks), alternating rounds between two lets the comparison see it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.candidate import pessimistic_score
from autotune.contention import DISTURBED_CORES
from autotune.warmup import DEFAULT_MARGIN  # one margin: steady-state levels and showdown ties

if TYPE_CHECKING:
    from autotune.runner import Runner

#: Finalists re-measured at least / at most (when that many feasible candidates exist).
MIN_FINALISTS = 3
MAX_FINALISTS = 6
#: Bootstrap resamples of the rounds for the ratio's CI.
N_BOOT = 2000
#: Compiler families from simplest to most involved to deploy (the first tie-break).
#: The runtimes come last: deploying them adds a runtime, an export step and a second set of kernels.
SIMPLICITY = {"eager": 0, "script": 1, "trace": 1, "frozen": 2, "compile": 3, "export": 3,
              "onnx": 4, "openvino": 4}


@dataclass(frozen=True)
class Contender:
    """One finalist's rounds: seconds per call in each round, plus what the tie-break needs."""

    key: str
    batch_size: int
    seconds_per_call: tuple[float, ...]
    simplicity: tuple[int, ...]
    p99_ms: float = math.inf
    peak_memory_bytes: float = math.inf
    latency_seconds: tuple[float, ...] = ()  # per round: the objective's latency percentile (latency objective)


@dataclass(frozen=True)
class Standing:
    """A contender's result in the paired comparison."""

    key: str
    ratio: float  # performance relative to the leader (1.0 = the leader; < 1 = slower)
    ratio_ci: tuple[float, float]
    tied: bool
    round_perf: tuple[float, ...]  # throughput per round (samples/s), or 1/latency per round
    round_spread: float  # coefficient of variation of round_perf: the between-rounds spread

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "ratio": self.ratio, "ratio_ci": list(self.ratio_ci), "tied": self.tied,
                "round_perf": list(self.round_perf), "round_spread": self.round_spread}


@dataclass(frozen=True)
class Verdict:
    """Outcome of :func:`compare`: the leader, the pick, every standing and whether it was a tie."""

    leader: str
    pick: str
    standings: tuple[Standing, ...]
    margin: float
    rounds: int
    tie_break: str = field(default="")

    @property
    def tie(self) -> bool:
        return sum(s.tied for s in self.standings) > 1

    def standing(self, key: str) -> Standing:
        return next(s for s in self.standings if s.key == key)

    def to_dict(self) -> dict[str, Any]:
        return {"leader": self.leader, "pick": self.pick, "tie": self.tie, "margin": self.margin,
                "rounds": self.rounds, "tie_break": self.tie_break,
                "standings": [s.to_dict() for s in self.standings]}


def simplicity(row: Mapping[str, Any]) -> tuple[int, ...]:
    """Tie-break key of a candidate row: simpler execution first (see the module docstring)."""
    return (SIMPLICITY.get(str(row.get("compiler")), len(SIMPLICITY)),
            int((row.get("precision") or "fp32") != "fp32"),
            int((row.get("memory_format") or "contiguous") != "contiguous"))


def select_finalists(rows: Sequence[Mapping[str, Any]], *, objective: str, latency_percentile: str = "p99",
                     min_finalists: int = MIN_FINALISTS, max_finalists: int = MAX_FINALISTS
                     ) -> list[Mapping[str, Any]]:
    """The leader and every feasible row that could still beat it, in score order (see module docstring)."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("feasible")]
    ranked = sorted(ok, key=lambda r: pessimistic_score(r, objective=objective,
                                                        latency_percentile=latency_percentile))
    if not ranked:
        return []
    leader = ranked[0]

    def reaches(row: Mapping[str, Any]) -> bool:
        if objective == "latency":
            return True  # latency rows carry no CI of their percentile: rank order decides
        lead_ci, ci = leader.get("throughput_ci"), row.get("throughput_ci")
        if not lead_ci or not ci or lead_ci[0] is None or ci[1] is None:
            return False
        return float(ci[1]) >= float(lead_ci[0])

    def disturbed(row: Mapping[str, Any]) -> bool:  # its one window was shared with a neighbour: unjudged
        foreign = row.get("foreign_cores")
        return foreign is not None and float(foreign) > DISTURBED_CORES

    out = [r for i, r in enumerate(ranked) if i < min_finalists or reaches(r) or disturbed(r)]
    return out[:max_finalists]


def _bootstrap_median_ci(d: np.ndarray, *, seed: int, n_boot: int = N_BOOT) -> tuple[float, float]:
    if d.size < 2 or float(d.max()) == float(d.min()):
        m = float(np.median(d))
        return (m, m)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    medians = np.median(d[idx], axis=1)
    lo, hi = np.quantile(medians, [0.025, 0.975])
    return (float(lo), float(hi))


def compare(contenders: Sequence[Contender], *, objective: str = "throughput", margin: float = DEFAULT_MARGIN,
            seed: int = 0) -> Verdict:
    """Paired comparison over rounds and the tie-break (pseudo-code in the module docstring).

    Every contender must have the same number of rounds (>= 1); round r of all of them was
    measured in the same interleaved pass.
    """
    if not contenders:
        raise ValueError("compare needs at least one contender")
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    rounds = {len(c.seconds_per_call) for c in contenders}
    if len(rounds) != 1 or 0 in rounds:
        raise ValueError(f"every contender needs the same number (>= 1) of rounds, got {sorted(rounds)}")
    perf: dict[str, np.ndarray] = {}
    for c in contenders:
        if objective == "latency":
            lat = np.asarray(c.latency_seconds or c.seconds_per_call, dtype=float)
            perf[c.key] = 1.0 / lat
        else:
            perf[c.key] = c.batch_size / np.asarray(c.seconds_per_call, dtype=float)
    logs = {k: np.log(v) for k, v in perf.items()}
    reference = max(contenders, key=lambda c: float(np.median(logs[c.key]))).key
    leader = max(contenders, key=lambda c: float(np.median(logs[c.key] - logs[reference]))).key
    standings = []
    for i, c in enumerate(contenders):
        d = logs[c.key] - logs[leader]
        lo, hi = _bootstrap_median_ci(d, seed=seed + i)
        ratio = float(math.exp(np.median(d)))
        p = perf[c.key]
        spread = float(p.std(ddof=1) / p.mean()) if p.size > 1 else 0.0
        standings.append(Standing(key=c.key, ratio=ratio, ratio_ci=(math.exp(lo), math.exp(hi)),
                                  tied=math.exp(hi) >= 1.0 - margin, round_perf=tuple(float(v) for v in p),
                                  round_spread=spread))
    by_key = {c.key: c for c in contenders}
    ratio_of = {s.key: s.ratio for s in standings}
    tied = [s.key for s in standings if s.tied]
    pick = min(tied, key=lambda k: (by_key[k].simplicity, by_key[k].p99_ms, by_key[k].peak_memory_bytes,
                                    -ratio_of[k]))
    reason = ""
    if len(tied) > 1:
        reason = (f"{len(tied)} finalists within {margin:.0%} of the leader: simplest execution first "
                  "(eager < script/trace < frozen < compile/export < onnx/openvino; fp32 and contiguous first), "
                  "then lower p99 latency, then lower peak memory")
    return Verdict(leader=leader, pick=pick, standings=tuple(standings), margin=margin,
                   rounds=next(iter(rounds)), tie_break=reason)


def candidate_key(row: Mapping[str, Any]) -> str:
    return f"{row['variant']}@{row['batch_size']}"


def contender_from(row: Mapping[str, Any], seconds_per_call: Sequence[float],
                   latency_seconds: Sequence[float] = ()) -> Contender:
    p99 = (row.get("latency_ms") or {}).get("p99")
    return Contender(key=candidate_key(row), batch_size=int(row["batch_size"]),
                     seconds_per_call=tuple(float(s) for s in seconds_per_call),
                     simplicity=simplicity(row), p99_ms=float(p99) if p99 is not None else math.inf,
                     peak_memory_bytes=float(row.get("peak_memory_bytes") or math.inf),
                     latency_seconds=tuple(float(s) for s in latency_seconds))


# ---------------------------------------------------------------------------------------------
# Orchestration: one measure worker per finalist, interleaved slices
# ---------------------------------------------------------------------------------------------

#: Seconds a slice request may take beyond its nominal length before the worker counts as hung.
SLICE_GRACE_S = 60.0
#: Rounds tried at most, as a multiple of the undisturbed rounds wanted.
MAX_ROUNDS_FACTOR = 3


@dataclass(frozen=True)
class ShowdownSettings:
    rounds: int
    round_seconds: float
    margin: float
    objective: str
    latency_percentile: str
    timeout_s: float
    seed: int = 0
    processes: int = 2  # worker processes per finalist; rounds alternate between them
    deadline: float | None = None  # time.monotonic() after which no new round starts


def estimated_seconds(finalists: Sequence[Mapping[str, Any]], settings: ShowdownSettings,
                      *, startup_s: float = 5.0) -> float:
    """Rough cost of a showdown: worker start-up + rebuild + warmup per finalist, plus the rounds."""
    per = settings.processes * sum(startup_s + float(r.get("compile_seconds") or 0.0)
                                   + 2.0 * settings.round_seconds for r in finalists)
    return per + settings.rounds * settings.round_seconds * len(finalists)


def run_showdown(
    finalists: Sequence[Mapping[str, Any]],
    *,
    recipe_data: Mapping[str, Any],
    settings: ShowdownSettings,
    make_runner: Callable[[], Runner],
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Stage every finalist in its own worker, run the interleaved rounds, compare.

    Returns a JSON-able document: the settings, per finalist its per-round seconds per call (or
    why it dropped out), and the :class:`Verdict` (absent when fewer than two finalists lasted).
    """
    runners: dict[str, list[Runner]] = {}
    staged: dict[str, Mapping[str, Any]] = {}
    dropped: dict[str, str] = {}
    per_round: dict[str, list[float]] = {}
    latency: dict[str, list[float]] = {}
    foreign: dict[str, list[float | None]] = {}
    disturbed: list[bool] = []
    per_call = settings.objective == "latency"
    try:
        for row in finalists:
            key = candidate_key(row)
            if on_progress:
                on_progress(f"staging {key}")
            runners[key] = []
            for _ in range(settings.processes):
                runner = make_runner()
                runners[key].append(runner)
                res = runner.call({"op": "stage", "recipe": dict(recipe_data), "variant": row["variant"],
                                   "batch_size": row["batch_size"],
                                   "warmup_iterations": int(row.get("warmup_iterations") or 0),
                                   "warmup_seconds": 2.0 * settings.round_seconds},
                                  timeout=settings.timeout_s)
                if res.get("status") != "ok":
                    dropped[key] = f"{res.get('status')}: {res.get('reason')}"
                    break
            if key in dropped:
                for runner in runners.pop(key):
                    runner.close()
                continue
            staged[key] = row
            per_round[key], latency[key], foreign[key] = [], [], []
        rng = random.Random(settings.seed)
        r = 0
        limit = MAX_ROUNDS_FACTOR * settings.rounds + settings.processes

        def settled() -> bool:  # enough undisturbed rounds, and no tie decision left to a coin flip
            if sum(not d for d in disturbed[settings.processes:]) < settings.rounds:
                return False
            verdict = _verdict(staged, dropped, per_round, latency, _compared_rounds(disturbed, settings), settings)
            return verdict is None or not undecided(verdict)

        while (not settled() and r < limit
               and (settings.deadline is None or time.monotonic() < settings.deadline or r < 2)):
            r += 1
            order = [k for k in staged if k not in dropped]
            if len(order) < 2:
                break
            rng.shuffle(order)
            if on_progress:
                on_progress(f"round {r} ({sum(not d for d in disturbed[settings.processes:])}/{settings.rounds} "
                            "undisturbed so far)")
            hit = False
            for key in order:
                worker = runners[key][(r - 1) % len(runners[key])]
                res = worker.call({"op": "slice", "seconds": settings.round_seconds, "per_call": per_call,
                                   "percentile": settings.latency_percentile},
                                  timeout=settings.round_seconds + SLICE_GRACE_S)
                if res["status"] != "ok":
                    dropped[key] = f"round {r}: {res.get('status')}: {res.get('reason')}"
                    continue
                per_round[key].append(float(res["seconds_per_call"]))
                load = res.get("load") or {}
                foreign[key].append(load.get("foreign_cores"))
                hit = hit or bool(load.get("disturbed"))
                if (latency_seconds := res.get("latency_seconds")) is not None:
                    latency[key].append(float(latency_seconds))
            disturbed.append(hit)
    finally:
        for group in runners.values():
            for runner in group:
                runner.close()
    burn_in = _burn_in(disturbed, settings)
    used = _compared_rounds(disturbed, settings)
    doc: dict[str, Any] = {
        "rounds": settings.rounds, "round_seconds": settings.round_seconds, "margin": settings.margin,
        "seed": settings.seed, "processes": settings.processes,
        "finalists": [candidate_key(r) for r in finalists],
        "seconds_per_call": {k: per_round[k] for k in staged},
        "foreign_cores": {k: foreign[k] for k in staged},
        "disturbed_rounds": [i for i, d in enumerate(disturbed) if d], "rounds_run": len(disturbed),
        "burn_in_rounds": burn_in,
        "rounds_compared": used,
        "dropped": dropped, "verdict": None,
    }
    verdict = _verdict(staged, dropped, per_round, latency, used, settings)
    doc["verdict"] = None if verdict is None else verdict.to_dict()
    return doc


def _burn_in(disturbed: Sequence[bool], settings: ShowdownSettings) -> int:
    """Rounds never compared: every process's first slice (fewer when fewer than that + 2 rounds ran)."""
    return min(settings.processes, max(0, len(disturbed) - 2))


def _compared_rounds(disturbed: Sequence[bool], settings: ShowdownSettings) -> list[int]:
    """Indices of the rounds compared: after the burn-in, the undisturbed ones (all if fewer than 2 are)."""
    burn_in = _burn_in(disturbed, settings)
    used = [i for i, d in enumerate(disturbed) if not d and i >= burn_in]
    return used if len(used) >= 2 else list(range(burn_in, len(disturbed)))


def _verdict(staged: Mapping[str, Mapping[str, Any]], dropped: Mapping[str, str],
             per_round: Mapping[str, Sequence[float]], latency: Mapping[str, Sequence[float]],
             used: Sequence[int], settings: ShowdownSettings) -> Verdict | None:
    alive = [k for k in staged if k not in dropped]
    if len(alive) < 2 or not used:
        return None
    contenders = [contender_from(staged[k], [per_round[k][i] for i in used],
                                 [latency[k][i] for i in used] if latency[k] else ()) for k in alive]
    return compare(contenders, objective=settings.objective, margin=settings.margin, seed=settings.seed)


def undecided(verdict: Verdict) -> bool:
    """Whether some finalist's tie is a coin flip: its ratio CI straddles ``1 - margin``.

    Such a finalist is tied only because the rounds cannot yet tell (the CI reaches the margin
    but also goes below it); more rounds narrow the CI, so the showdown keeps going (up to
    ``MAX_ROUNDS_FACTOR`` x the rounds asked, or its deadline) instead of letting noise decide
    whether a slower variant is picked for simplicity.
    """
    floor = 1.0 - verdict.margin
    return any(s.key != verdict.leader and s.ratio_ci[0] < floor <= s.ratio_ci[1] for s in verdict.standings)


def recommendation(rows: Sequence[Mapping[str, Any]], showdown: Mapping[str, Any] | None,
                   fallback: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The recommended row: the showdown's pick when there was one, else ``fallback`` (the search's best).

    The row carries ``decided_by`` and, after a showdown, the pick's standing (ratio to the
    leader with its CI, whether it was a tie and with whom).
    """
    verdict = (showdown or {}).get("verdict")
    if verdict:
        pick = next((r for r in rows if r.get("status") == "ok" and r.get("feasible")
                     and candidate_key(r) == verdict["pick"]), None)
        if pick is not None:
            standing = next(s for s in verdict["standings"] if s["key"] == verdict["pick"])
            tied = [s["key"] for s in verdict["standings"] if s["tied"]]
            return {**pick, "decided_by": "showdown", "showdown": {
                "ratio_to_leader": standing["ratio"], "ratio_ci": standing["ratio_ci"], "leader": verdict["leader"],
                "tie": verdict["tie"], "tied_with": [k for k in tied if k != verdict["pick"]],
                "round_spread": standing["round_spread"], "margin": verdict["margin"],
                "rounds": verdict["rounds"]}}
    return None if fallback is None else {**fallback, "decided_by": "search"}
