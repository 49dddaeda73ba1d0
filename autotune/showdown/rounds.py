"""The showdown's orchestration: finalists staged in fresh workers, timed in interleaved rounds, then compared.

The algorithm (stage, rounds, burn-in, disturbed rounds, when to stop) is in :mod:`autotune.showdown`; the
comparison of the rounds is :mod:`autotune.showdown.paired`.

Workers of their own per finalist (not all finalists in one process) so no finalist runs beside
another's compiler caches or allocator state, as in a deployment; a worker waiting for its next
slice blocks on its pipe and costs no CPU. More than one per finalist because processes differ:
glibc's dynamic mmap threshold follows each process's allocation history, and the same transformer
variant measured 0.93-1.005x a plain process's speed from one process to the next (page faults
per call 0-2,600, bench_agreement); one process per finalist let that luck decide near ties
(three runs, three different picks), alternating rounds between two lets the comparison see it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.client import WorkerClient
from autotune.showdown.paired import Verdict, candidate_key, contender_from, paired_verdict, undecided

if TYPE_CHECKING:
    from autotune.runner import Runner

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
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Stage every finalist in its own worker, run the interleaved rounds, compare.

    Returns a JSON-able document: the settings, per finalist its per-round seconds per call (or
    why it dropped out), and the :class:`Verdict` (absent when fewer than two of several finalists lasted; a
    single finalist gets its rounds and a verdict of one).

    ``on_round`` receives the document after every round, with the rounds so far, ``complete: false`` and no
    verdict (a pick from a few rounds is not the showdown's): the run keeps it, so an interrupt keeps the rounds
    that were run. An exception (Ctrl-C) kills the workers at once rather than waiting for their slices.
    """
    runners: dict[str, list[Runner]] = {}
    staged: dict[str, Mapping[str, Any]] = {}
    dropped: dict[str, str] = {}
    per_round: dict[str, list[float]] = {}
    latency: dict[str, list[float]] = {}
    foreign: dict[str, list[float | None]] = {}
    disturbed: list[bool] = []
    per_call = settings.objective == "latency"
    finished = False
    try:
        for row in finalists:
            key = candidate_key(row)
            if on_progress:
                on_progress(f"staging {key}")
            runners[key] = []
            for _ in range(settings.processes):
                runner = make_runner()
                runners[key].append(runner)
                res = WorkerClient(runner).stage(
                    recipe_data, row["variant"], row["batch_size"],
                    warmup_iterations=int(row.get("warmup_iterations") or 0),
                    warmup_seconds=2.0 * settings.round_seconds, timeout=settings.timeout_s)
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
        # one finalist alone still gets its rounds: fresh processes give the headline throughput; of several,
        # at least two must last for a comparison
        need = min(2, len(finalists))
        r = 0
        limit = MAX_ROUNDS_FACTOR * settings.rounds + settings.processes

        def settled() -> bool:  # enough undisturbed rounds, and no tie decision left to a coin flip
            if sum(not d for d in disturbed[settings.processes:]) < settings.rounds:
                return False
            verdict = _verdict(staged, dropped, per_round, latency, _compared_rounds(disturbed, settings), settings,
                               need=need)
            return verdict is None or not undecided(verdict)

        while (not settled() and r < limit
               and (settings.deadline is None or time.monotonic() < settings.deadline or r < 2)):
            r += 1
            order = [k for k in staged if k not in dropped]
            if len(order) < need:
                break
            rng.shuffle(order)
            if on_progress:
                on_progress(f"round {r} ({sum(not d for d in disturbed[settings.processes:])}/{settings.rounds} "
                            "undisturbed so far)")
            hit = False
            for key in order:
                worker = WorkerClient(runners[key][(r - 1) % len(runners[key])])
                res = worker.slice(settings.round_seconds, per_call=per_call, percentile=settings.latency_percentile,
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
            if on_round is not None:
                on_round({**_document(finalists, staged, dropped, per_round, foreign, disturbed, settings),
                          "complete": False})
        finished = True
    finally:
        for group in runners.values():
            for runner in group:
                if finished:
                    runner.close()
                else:  # Ctrl-C: kill, never wait for a slice to end
                    runner.recycle(kill=True)
    doc = _document(finalists, staged, dropped, per_round, foreign, disturbed, settings)
    used = doc["rounds_compared"]
    verdict = _verdict(staged, dropped, per_round, latency, used, settings, need=min(2, len(finalists)))
    doc["verdict"] = None if verdict is None else verdict.to_dict()
    return doc


def _document(finalists: Sequence[Mapping[str, Any]], staged: Mapping[str, Any], dropped: Mapping[str, str],
              per_round: Mapping[str, list[float]], foreign: Mapping[str, list[float | None]],
              disturbed: Sequence[bool], settings: ShowdownSettings) -> dict[str, Any]:
    """The showdown's document without its verdict (the rounds so far; copies, so later rounds change nothing)."""
    burn_in = _burn_in(disturbed, settings)
    used = _compared_rounds(disturbed, settings)
    return {
        "rounds": settings.rounds, "round_seconds": settings.round_seconds, "margin": settings.margin,
        "seed": settings.seed, "processes": settings.processes, "objective": settings.objective,
        "finalists": [candidate_key(r) for r in finalists],
        "seconds_per_call": {k: list(per_round[k]) for k in staged},
        "foreign_cores": {k: list(foreign[k]) for k in staged},
        "disturbed_rounds": [i for i, d in enumerate(disturbed) if d], "rounds_run": len(disturbed),
        "burn_in_rounds": burn_in,
        "rounds_compared": used,
        "dropped": dict(dropped), "verdict": None,
    }


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
             used: Sequence[int], settings: ShowdownSettings, *, need: int = 2) -> Verdict | None:
    alive = [k for k in staged if k not in dropped]
    if len(alive) < max(1, need) or not used:
        return None
    contenders = [contender_from(staged[k], [per_round[k][i] for i in used],
                                 [latency[k][i] for i in used] if latency[k] else ()) for k in alive]
    return paired_verdict(contenders, objective=settings.objective, margin=settings.margin, seed=settings.seed)
