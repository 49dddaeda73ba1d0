"""The run's time budget, split among its phases up front (issue 32: a budget is a promise).

``search.time_budget_s`` covers the whole run: validation, the batch boundaries, the search, the showdown and the
artifact step (the build, its profile and the check of the artifact as shipped). What the run promises is that
budget plus :data:`OVERRUN` of it, since the costs of the later phases are estimates made before they run; the
serving stage (``[serving]``) has its own ``serving.time_budget_s`` on top, which the report names.

Why up front: a budget that each phase spends until it is gone leaves nothing for the phases after it. The
artifact step came last and was never counted, so with ``--time-budget 60`` a run took 78 s before the artifact
check existed, and about 110 s after (the check alone is 30-40 s at five rounds). The artifact step is reserved
first (:func:`artifact_reserve`, from the worker start-up cost measured during validation); the search gets
:data:`SEARCH_SHARE` of the rest and the showdown what the search leaves; the check then sizes its rounds to what
is left of the promise (:func:`check_rounds_that_fit`) and says so when it runs fewer.

Pure: clock readings come in as arguments.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ARTIFACT_SHARE_CAP", "BUILD_GUESS_S", "FINAL_WRITE_S", "MIN_CHECK_ROUNDS", "OVERRUN", "ROUND_OVERHEAD_S",
           "SEARCH_SHARE", "SERVING_HOLD_GRACE", "BudgetPlan", "artifact_reserve", "check_round_seconds",
           "check_rounds_that_fit", "staging_seconds", "worth_starting"]

#: How far past ``time_budget_s`` a run may end: its later phases are sized by estimates.
OVERRUN = 0.25
#: Share of what is left after the boundaries and the artifact reserve that the search may spend when a showdown
#: follows; the showdown gets the rest.
SEARCH_SHARE = 0.75
#: The artifact reserve never takes more than this share of the budget: a small budget still searches.
ARTIFACT_SHARE_CAP = 0.3
#: Fewer rounds than this give no interval: the check is then skipped and the report says why.
MIN_CHECK_ROUNDS = 2
#: The build of the artifact and its profile beyond a worker's start-up, before the pick is known (a TorchScript
#: or an ONNX export of resnet18 at 64x64: 3-8 s on a 2-core machine, 2026-11-27).
BUILD_GUESS_S = 6.0
#: A round's cost beyond start-up, warm-up and timing: the artifact's load, three warm passes, the process's exit
#: and the paired slice's pause and resume (3 paired rounds of a traced resnet18 took 8.0 s each where start-up,
#: warm-up and timing add to 6.5 s, 2026-11-27).
ROUND_OVERHEAD_S = 1.5
#: The last report write after the last phase (report.md, report.html and its plots): about a second.
FINAL_WRITE_S = 2.0
#: How far past its own ``[serving] time_budget_s`` the serving stage may run: its pick's 10-s hold and its curve
#: start only while they end within this share past the stage's budget (a pick found near the end is still held).
SERVING_HOLD_GRACE = 0.1


def check_round_seconds(startup_s: float, *, seconds: float, warm_s: float, paired: bool,
                        load_s: float = 0.0) -> float:
    """One round of the artifact check: a fresh plain process (its interpreter and ``import torch`` cost about a
    worker's start-up, then the load, three warm passes and ``warm_s``, then ``seconds`` timed), and the tool's
    slice of ``seconds`` when ``paired``.

    ``load_s``: what the plain process's load builds before its first answer. An artifact with no file form (a
    ``torch.compile`` one is the code that builds it) compiles in every fresh process: a BART's two rounds took
    100 s where 68 s were left, and the run ended at 218 s of its 188-s promise (session 38)."""
    return startup_s + load_s + warm_s + seconds + ROUND_OVERHEAD_S + (seconds if paired else 0.0)


def staging_seconds(candidate_seconds: Sequence[float], compile_seconds: Sequence[float], *, max_seconds: float,
                    floor: float = 5.0) -> float:
    """A showdown process's start-up, warm-up and bookkeeping (its build apart), from what this run's candidates
    took: the median candidate's wall time less its build and its timing (``max_seconds`` at most), never below
    ``floor`` (the estimate before anything was measured). Beside a busy neighbour a quickstart candidate took
    22 s, a quiet one about 8 s; with the floor alone a one-finalist showdown estimated at 23 s took 46 s."""
    if not candidate_seconds:
        return floor
    build = statistics.median(compile_seconds) if compile_seconds else 0.0
    return max(floor, statistics.median(candidate_seconds) - build - max_seconds)


def worth_starting(left_s: float, spent: Sequence[float]) -> bool:
    """Whether a search with ``left_s`` of its share left starts another candidate, given what this run's
    candidates took (``spent``, seconds each): always the first, then only while at least half a typical
    candidate's time is left. So the share is overrun by half a candidate at most, on average, and not by a
    whole one: beside a busy neighbour a quickstart candidate took 24 s, and "finish the one in progress" ran the
    search 22 s past its 27-s share (2026-11-27)."""
    if left_s <= 0:
        return False
    return not spent or left_s >= 0.5 * statistics.median(spent)


def artifact_reserve(total_s: float, *, startup_s: float, check_rounds: int, seconds: float, warm_s: float,
                     build_s: float = BUILD_GUESS_S) -> float:
    """Seconds kept for the artifact step: its build worker, the build and profile, and (``check_rounds`` > 0)
    the check's staged worker and rounds; at most :data:`ARTIFACT_SHARE_CAP` of ``total_s``."""
    need = startup_s + build_s
    if check_rounds > 0:
        need += startup_s + build_s + check_rounds * check_round_seconds(startup_s, seconds=seconds,
                                                                         warm_s=warm_s, paired=True)
    return max(0.0, min(need, ARTIFACT_SHARE_CAP * total_s))


def check_rounds_that_fit(left_s: float, *, wanted: int, round_s: float, staging_s: float) -> tuple[int, bool]:
    """How many check rounds fit in ``left_s``, and whether the tool's side is staged for them: all ``wanted``
    paired when they fit; else as many paired rounds as fit (at least :data:`MIN_CHECK_ROUNDS`); else plain rounds
    alone (no staging; ``round_s`` is the paired round, a plain one costs ``round_s`` less a slice); else (0,
    False): no check."""
    if wanted <= 0:
        return 0, False
    paired = int((left_s - staging_s) // round_s) if round_s > 0 else wanted
    if paired >= MIN_CHECK_ROUNDS:
        return min(wanted, paired), True
    plain = int(left_s // max(round_s * 0.75, 1e-9))
    if plain >= MIN_CHECK_ROUNDS:
        return min(wanted, plain), False
    return 0, False


@dataclass(frozen=True)
class BudgetPlan:
    """A run's budget once validation has measured a worker's start-up: the artifact reserve, the deadlines.

    ``started``: the run's start on the monotonic clock (before validation, which the budget covers too).
    """

    total_s: float
    started: float
    artifact_s: float

    @property
    def deadline(self) -> float:
        """When the run's phases should be done, the artifact step included."""
        return self.started + self.total_s

    @property
    def promise(self) -> float:
        """When the run is promised to be done (the serving stage apart): the budget plus :data:`OVERRUN`."""
        return self.started + self.total_s * (1.0 + OVERRUN)

    @property
    def last_phase_end(self) -> float:
        """When the last phase must end for the final report write to end by the promise."""
        return self.promise - FINAL_WRITE_S

    def before_artifact(self, now: float) -> float:
        """Seconds left for the phases before the artifact step (may be negative)."""
        return self.deadline - self.artifact_s - now

    def search_seconds(self, now: float, *, showdown: bool) -> float:
        """The search's share: :data:`SEARCH_SHARE` of what is left before the artifact reserve when a showdown
        follows, all of it otherwise; never negative."""
        left = max(0.0, self.before_artifact(now))
        return left * (SEARCH_SHARE if showdown else 1.0)

    def to_dict(self, phases: dict[str, float], wall_s: float) -> dict[str, Any]:
        """report.json's ``budget``: the plan, the seconds each phase took and whether the promise held."""
        return {"time_budget_s": self.total_s, "promise_s": round(self.total_s * (1.0 + OVERRUN), 3),
                "artifact_reserve_s": round(self.artifact_s, 3),
                "phases": {k: round(v, 3) for k, v in phases.items()}, "wall_seconds": round(wall_s, 3),
                "within_promise": wall_s <= self.total_s * (1.0 + OVERRUN)}
