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
    stage:   `processes` (measure.processes, default MIN_PROCESSES = 3) fresh measure workers per
             finalist: build the variant, first call, warm up (on a CPU, a finalist with a file form is
             saved once as its artifact and each process loads it instead, building nothing: "as
             shipped", ``shipped_dir``); each round uses the process with the
             fewest rounds so far (the same process index for every finalist in a round, so a round's
             pairs share it)
    rounds:  repeat until R undisturbed rounds and no tie is a coin flip (no finalist's ratio CI
             straddles 1 - margin: see :func:`undecided`); at most 3R rounds (+2 per added process),
             or the deadline (but never fewer than min(R, MIN_ROUNDS_STAGED = 6) rounds once staged):
                 for each finalist in a seeded random order: time one slice
                 (round_seconds of back-to-back calls) -> seconds per call in round r,
                 and the CPU others used meanwhile (autotune.core.contention)
                 a round in which any slice saw > 0.1 core of foreign CPU is "disturbed";
                 the first `processes` rounds are burn-in (every process's first slice:
                 a fresh process's allocator is still settling) and never compared
             more processes: once the R rounds are done and still undecided, while the between-process
                 spread of the leader or an undecided finalist is >= half the margin, every process has
                 >= 2 compared rounds, fewer than MAX_PROCESSES (6) run and the deadline leaves room for
                 the staging: one more process per finalist (its first slice timed and discarded: burn-in)
             paired_verdict on the undisturbed rounds (all rounds if fewer than 2 are)
    paired_verdict (pure, :func:`paired_verdict`):
        perf[c][r] = throughput (samples/s), or 1 / latency percentile for a latency objective
        leader     = argmax over c of median_r (log perf[c][r] - log perf[L0][r]), where L0 is
                     the best by median log perf (paired against a common reference)
        ratio[c]   = exp(median_r (log perf[c][r] - log perf[leader][r]))    # paired
        ci[c]      = hierarchical bootstrap of that median: resample the processes, then the rounds
                     within each (paired: the same rounds for c and the leader), so the CI holds the
                     between-process spread as well as the between-round one
                     (:func:`~autotune.showdown.paired.hierarchical_median_ci` has the pseudo-code)
        (medians, not means: a round a neighbour hit unevenly moves a mean, not a median)
        tie        = {c : ratio[c] >= 1 - margin}: the paired median within the margin (the
                     rounds go on while a CI straddles 1 - margin, so that median is as firm as
                     the budget allows). Not "upper end of ci[c] >= 1 - margin": with ~6% noise
                     per round that handed a 5.5%-slower batch of the leader the tie, and the
                     tie-break then picked it (live search check, BENCHMARKS.md)
        undecided  = {c != leader : ci[c] straddles 1 - margin} when the rounds ran out: the report
                     says "undecided", names them and how the pick was made (:mod:`.verdict`)
        pick       = min over tie + {c in undecided : ci[c] reaches 1} of (simplicity, a tied one first, p99
                     latency, peak memory): an undecided finalist the rounds could not tell from the leader
                     is in the running as for a tie; one whose whole CI lies below 1 is slower (perhaps by
                     less than the margin) and is not
        simplicity: eager < script/trace < frozen < compile/export < onnx/openvino, then fp32 before reduced
                    precision, then contiguous before channels_last, then the default process environment
                    (glibc, nothing preloaded) before another allocator or OpenMP setting

Where each part lives (this package re-exports the public names):

* :mod:`~autotune.showdown.paired`: the pure half (no workers, no I/O): the finalists, the paired comparison
  (:func:`paired_verdict`, the bootstrap CI of each ratio), the tie rule, :func:`undecided` and the
  :func:`recommendation`; tested without a worker;
* :mod:`~autotune.showdown.verdict`: the verdict in words (undecided, tie, win; a busy machine first), one
  function for the stored text and every renderer;
* :mod:`~autotune.showdown.rounds`: the orchestration: the staged workers, the interleaved rounds, the
  burn-in and disturbed rounds (:func:`run_showdown`).

``rounds`` -> ``paired`` -> ``verdict`` (and ``rounds`` -> ``verdict``), never back.
"""

from __future__ import annotations

from autotune.showdown.paired import (
    MAX_FINALISTS,
    MIN_FINALISTS,
    N_BOOT,
    SIMPLICITY,
    Contender,
    Standing,
    Verdict,
    candidate_key,
    contender_from,
    hierarchical_median_ci,
    paired_verdict,
    recommendation,
    select_finalists,
    simplicity,
    spreads,
    undecided,
)
from autotune.showdown.rounds import (
    MAX_PROCESSES,
    MAX_ROUNDS_FACTOR,
    MIN_PROCESSES,
    SLICE_GRACE_S,
    ShowdownSettings,
    estimated_seconds,
    fitted,
    run_showdown,
)
from autotune.showdown.verdict import contended, undecided_keys, verdict_text

__all__ = [
    "MAX_FINALISTS",
    "MAX_PROCESSES",
    "MAX_ROUNDS_FACTOR",
    "MIN_FINALISTS",
    "MIN_PROCESSES",
    "N_BOOT",
    "SIMPLICITY",
    "SLICE_GRACE_S",
    "Contender",
    "ShowdownSettings",
    "Standing",
    "Verdict",
    "candidate_key",
    "contended",
    "contender_from",
    "estimated_seconds",
    "fitted",
    "hierarchical_median_ci",
    "paired_verdict",
    "recommendation",
    "run_showdown",
    "select_finalists",
    "simplicity",
    "spreads",
    "undecided",
    "undecided_keys",
    "verdict_text",
]
