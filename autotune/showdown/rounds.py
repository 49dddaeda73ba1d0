"""The showdown's orchestration: finalists staged in fresh workers, timed in interleaved rounds, then compared.

The algorithm (stage, rounds, burn-in, disturbed rounds, when to stop) is in :mod:`autotune.showdown`; the
comparison of the rounds is :mod:`autotune.showdown.paired`.

Workers of their own per finalist (not all finalists in one process) so no finalist runs beside
another's compiler caches or allocator state, as in a deployment. A worker waiting for its next slice
blocks on its pipe, but its runtime's threads may not: ONNX Runtime spins by default, OpenMP and TBB pools
wait actively after each call, and that CPU came out of the finalist being timed (5 of 11 rounds disturbed
on the CNN). So every worker but the one timing its slice is stopped (SIGSTOP of its process group,
:meth:`autotune.runner.Runner.pause`) and continued for its own slice; the runtimes' settings, which the
artifact ships with, are left as they are. More than one per finalist because processes differ:
glibc's dynamic mmap threshold follows each process's allocation history, and the same transformer
variant measured 0.93-1.005x a plain process's speed from one process to the next (page faults
per call 0-2,600, bench_agreement); one process per finalist let that luck decide near ties
(three runs, three different picks), alternating rounds between two lets the comparison see it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.client import WorkerClient
from autotune.core.variant_names import VariantSpec
from autotune.deployment import write_finalist_artifact
from autotune.errors import InputError
from autotune.showdown.paired import Verdict, candidate_key, contender_from, paired_verdict, undecided
from autotune.showdown.verdict import contended, verdict_text

if TYPE_CHECKING:
    from autotune.runner import Runner

#: Compilers whose artifact is a file a deployment loads: their finalists are staged from it (``shipped_dir``).
SHIPPED_COMPILERS = frozenset({"script", "trace", "frozen", "export", "onnx", "openvino"})
#: Seconds a slice request may take beyond its nominal length before the worker counts as hung.
SLICE_GRACE_S = 60.0
#: Rounds tried at most, as a multiple of the undisturbed rounds wanted (plus 2 per process added).
MAX_ROUNDS_FACTOR = 3
#: Worker processes per finalist: MIN_PROCESSES by default (``measure.processes``; two cannot tell one process's
#: luck from the spread between processes; a recipe may ask for fewer to save time, and the report then says the
#: between-process spread was not measured), at most MAX_PROCESSES when more are added.
MIN_PROCESSES = 3
MAX_PROCESSES = 6
#: Once the finalists are staged (the costly part: a fresh process, a build and a warm-up each), at least this
#: many rounds are run (fewer when ``measure.rounds`` asks for fewer), deadline or not: a round costs one slice
#: per finalist (0.5 s each by default), and the two rounds a deadline allowed left the demo's verdict undecided
#: with one of its three processes never compared (2026-11-27). The showdown's estimate already counts them.
MIN_ROUNDS_STAGED = 6
#: One more process per finalist is staged while a watched finalist's between-process spread is at least this
#: share of the margin (and its tie still undecided when the rounds run out).
PROCESS_SPREAD_SHARE = 0.5
#: Quiet rounds: a worker continued after SIGSTOP first makes untimed calls for this share of a round. Its threads
#: and caches start cold after the stop, and the slice's one probe cycle was its only warm-up; on the quickstart's
#: torch pair (eager@16 vs frozen@16, 6 runs each, 2026-11-27) the ratio CI's median width was 0.139 stopped and
#: continued, 0.107 with this warm-up and 0.119 with the others left running (the runs overlap: a lean, not a
#: proof; BENCHMARKS "Quiet rounds"). It costs a fifth of each slice's time, quiet rounds only.
RESUME_WARMUP = 0.2


@dataclass(frozen=True)
class ShowdownSettings:
    rounds: int
    round_seconds: float
    margin: float
    objective: str
    latency_percentile: str
    timeout_s: float
    seed: int = 0
    processes: int = MIN_PROCESSES  # worker processes per finalist at the start; rounds alternate between them
    deadline: float | None = None  # time.monotonic() after which no new round starts
    #: Every staged worker but the one timing its slice is stopped (SIGSTOP; ``measure.quiet_rounds``): the
    #: finalist being timed has the machine to itself, as it would in a deployment of one model.
    quiet: bool = True
    #: Untimed calls a continued worker makes before its slice, as a share of ``round_seconds`` (quiet rounds only).
    resume_warmup: float = RESUME_WARMUP
    #: Where finalists with a file form are saved and staged from, as shipped (``measure.as_shipped``; the
    #: tuner sets it on a CPU run): None stages every finalist built from the recipe, as the search measured it.
    shipped_dir: str | None = None

    @property
    def slice_warmup_seconds(self) -> float:
        """The untimed calls before each slice: a worker continued after SIGSTOP re-warms first."""
        return self.resume_warmup * self.round_seconds if self.quiet else 0.0


def estimated_seconds(finalists: Sequence[Mapping[str, Any]], settings: ShowdownSettings,
                      *, startup_s: float = 5.0) -> float:
    """Rough cost of a showdown: worker start-up + rebuild + warmup per finalist, plus the rounds. A finalist staged
    as shipped is built once, by the worker that saves its artifact, and its processes only load it: on the
    quickstart's frozen@16 a shipped stage took 3.2-3.4 s against 5.4 s built, on the BERT recipe's openvino@8
    3.5-3.8 s against 9.1-9.5 s (session 29; a built stage also builds the recipe's model)."""
    def build(r: Mapping[str, Any]) -> float:
        return startup_s + float(r.get("compile_seconds") or 0.0)

    total = 0.0
    for r in finalists:
        if settings.shipped_dir is not None and shippable(r):
            total += build(r) + settings.processes * (startup_s + 2.0 * settings.round_seconds)
        else:
            total += settings.processes * (build(r) + 2.0 * settings.round_seconds)
    return total + settings.rounds * (settings.round_seconds + settings.slice_warmup_seconds) * len(finalists)


def fitted(finalists: Sequence[Mapping[str, Any]], settings: ShowdownSettings, *, left: float, allowance: float,
           startup_s: float) -> tuple[list[Mapping[str, Any]], ShowdownSettings, float]:
    """The showdown that the time left covers: (finalists, settings, estimated cost). Pure.

    Why: the estimate counts every finalist's ``processes`` stagings one after another, and an all-or-nothing rule
    then skipped the showdown of two finalists whose CIs overlapped (the quickstart's onnx@16 and openvino@16 at
    461.5 +-2.3% and 444.2 +-4.8%: estimated at 80 s with 72 s allowed, session 42), so the pick rested on one screen
    each in reused workers, with the budget 31 s short of spent. Fewer fresh processes still give paired,
    interleaved rounds, which screens do not; the report then says the between-process spread was measured on
    fewer processes, or not at all::

        drop finalists from the end of the ranking while more than 2 remain and cost > left
        while cost > allowance and processes > 1: processes -= 1
        cost > allowance still: the caller skips the showdown

    ``allowance``: ``left`` plus what the run's promise allows beyond its budget (the tuner's SHOWDOWN_OVERRUN).
    """
    kept = list(finalists)
    cost = estimated_seconds(kept, settings, startup_s=startup_s)
    while len(kept) > 2 and cost > left:
        kept = kept[:-1]
        cost = estimated_seconds(kept, settings, startup_s=startup_s)
    while cost > allowance and settings.processes > 1:
        settings = replace(settings, processes=settings.processes - 1)
        cost = estimated_seconds(kept, settings, startup_s=startup_s)
    return kept, settings, cost


def shippable(row: Mapping[str, Any]) -> bool:
    """Whether ``row``'s variant has a file form a deployment loads (TorchScript, ONNX, OpenVINO IR, AOTInductor):
    eager and torch.compile ship as code that builds the model, which is what the showdown's build does."""
    return VariantSpec.parse(str(row["variant"])).compiler in SHIPPED_COMPILERS


def run_showdown(
    finalists: Sequence[Mapping[str, Any]],
    *,
    recipe_data: Mapping[str, Any],
    settings: ShowdownSettings,
    make_runner: Callable[[], Runner],
    on_progress: Callable[[str], None] | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Stage every finalist in its own workers, run the interleaved rounds, compare.

    Returns a JSON-able document: the settings, per finalist its per-round seconds per call (or
    why it dropped out), which process timed each round, and the :class:`Verdict` with its text (absent when
    fewer than two of several finalists lasted; a single finalist gets its rounds and a verdict of one).

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
    seen: list[dict[str, Any]] = []  # the processes a disturbed slice's worker saw using CPU, by round
    disturbed: list[bool] = []
    round_process: list[int] = []  # which process (index into each finalist's runners) timed each round
    stage_seconds: list[float] = []  # wall time of each process staged: what one more would cost
    notes: list[str] = []
    per_call = settings.objective == "latency"

    shipped: dict[str, dict[str, Any] | None] = {}  # per finalist: the artifact it is staged from (None: built)
    shipped_samples: dict[str, float] = {}

    def shipped_spec(key: str, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The artifact ``row`` is staged from, saved by a fresh worker the first time (None: stage it built)."""
        from autotune.artifact_timing import child_spec  # it imports the report, which imports this package

        if settings.shipped_dir is None or not shippable(row):
            return None
        if key not in shipped:
            shipped[key] = None
            directory = Path(settings.shipped_dir) / f"finalist{len(shipped)}"
            if on_progress:
                on_progress(f"saving {key}'s artifact (staged as shipped)")
            section = write_finalist_artifact(recipe_data, row, directory, make_runner=make_runner,
                                              timeout=settings.timeout_s)
            why: str | None = str(section.get("reason") or "no reason given")
            if section.get("status") == "ok":
                try:
                    shipped[key] = child_spec(directory, kind=str(section.get("kind")),
                                              batch_size=int(row["batch_size"]), recipe=recipe_data, why="the showdown")
                    why = None
                except InputError as exc:
                    why = str(exc)
            if why is not None:
                notes.append(f"{key} was staged built, not as shipped: its artifact could not be saved ({why})")
        return shipped[key]

    def stage(key: str, row: Mapping[str, Any]) -> Runner | str:
        """One fresh worker with ``row``'s variant warm, or why it could not be: loaded from its saved artifact
        when it has one (:func:`shipped_spec`), else built from the recipe."""
        spec = shipped_spec(key, row)
        t0 = time.monotonic()
        runner = make_runner()
        res = WorkerClient(runner).stage(
            recipe_data, row["variant"], row["batch_size"],
            warmup_iterations=int(row.get("warmup_iterations") or 0),
            warmup_seconds=2.0 * settings.round_seconds, timeout=settings.timeout_s, shipped=spec)
        stage_seconds.append(time.monotonic() - t0)
        if res.get("status") != "ok":
            runner.close()
            return f"{res.get('status')}: {res.get('reason')}"
        samples = res.get("samples_per_call")  # a StageOutcome's, staged as shipped
        if spec is not None and isinstance(samples, int | float) and samples > 0:
            shipped_samples[key] = float(samples)
        return runner

    finished = False
    stopped_by = ""  # what ended the rounds: settled | deadline | round_cap | dropped
    began = time.monotonic()
    staging_s: float | None = None  # the saves and stagings before the first round (what the estimate predicts)
    try:
        for row in finalists:
            key = candidate_key(row)
            if on_progress:
                on_progress(f"staging {key}")
            runners[key] = []
            for _ in range(settings.processes):
                got = stage(key, row)
                if isinstance(got, str):
                    dropped[key] = got
                    break
                runners[key].append(got)
                if settings.quiet:
                    got.pause()
            if key in dropped:
                for runner in runners.pop(key):
                    runner.close()
                continue
            if key in shipped_samples:  # what its artifact's traffic cycle serves per call (the saved batches)
                row = {**row, "traffic": {**(row.get("traffic") or {}), "samples_per_call": shipped_samples[key]}}
            staged[key] = row
            per_round[key], latency[key], foreign[key] = [], [], []
        staging_s = time.monotonic() - began
        rng = random.Random(settings.seed)
        # one finalist alone still gets its rounds: fresh processes give the headline throughput; of several,
        # at least two must last for a comparison
        need = min(2, len(finalists))
        r = 0
        added = 0

        def current() -> Verdict | None:
            return _verdict(staged, dropped, per_round, latency, _compared_rounds(disturbed, settings),
                            round_process, settings, need=need)

        def settled() -> bool:  # enough undisturbed rounds, and no tie decision left to a coin flip
            if sum(not d for d in disturbed[settings.processes:]) < settings.rounds:
                return False
            verdict = current()
            return verdict is None or not undecided(verdict)

        def add_process() -> bool:
            """Stage one more process per finalist while the spread between processes is comparable to the margin.

            Only when the rounds asked for are done and still undecided, every process has timed >= 2 compared
            rounds (so its spread is seen), the processes are fewer than MAX_PROCESSES, and the deadline leaves
            room for the staging (as long as the stagings so far took) plus a few rounds.
            """
            verdict = current()
            alive = [k for k in staged if k not in dropped]
            count = len(runners[alive[0]]) if alive else 0
            if verdict is None or not undecided(verdict) or count >= MAX_PROCESSES:
                return False
            used = _compared_rounds(disturbed, settings)
            if min(sum(round_process[i] == p for i in used) for p in range(count)) < 2:
                return False
            watched = [verdict.leader, *verdict.undecided]
            spread = max((verdict.standing(k).process_spread or 0.0) for k in watched)
            if spread < PROCESS_SPREAD_SHARE * settings.margin:
                return False
            cost = len(alive) * (max(stage_seconds) if stage_seconds else 0.0) \
                + 3 * len(alive) * settings.round_seconds
            if settings.deadline is not None and time.monotonic() + cost > settings.deadline:
                return False
            fresh: dict[str, Runner] = {}
            for key in alive:
                if on_progress:
                    on_progress(f"staging process {count + 1} of {key} (between-process spread "
                                f"{spread:.1%} against a {settings.margin:.0%} margin)")
                got = stage(key, staged[key])
                if isinstance(got, str):
                    notes.append(f"process {count + 1} could not be staged for {key} ({got}); "
                                 f"kept {count} processes")
                    for runner in fresh.values():
                        runner.close()
                    return False
                # its first slice is burn-in (a fresh process's allocator is still settling): timed, never kept
                burn = WorkerClient(got).slice(settings.round_seconds, per_call=per_call,
                                               percentile=settings.latency_percentile,
                                               timeout=settings.round_seconds + SLICE_GRACE_S)
                fresh[key] = got
                if settings.quiet:
                    got.pause()
                if burn["status"] != "ok":
                    notes.append(f"process {count + 1} of {key} failed its first slice; kept {count} processes")
                    for runner in fresh.values():
                        runner.close()
                    return False
            for key, runner in fresh.items():
                runners[key].append(runner)
            return True

        while True:
            if settled():
                stopped_by = "settled"
                break
            if (settings.deadline is not None and time.monotonic() >= settings.deadline
                    and r >= max(2, min(settings.rounds, MIN_ROUNDS_STAGED))):
                stopped_by = "deadline"
                break
            if sum(not d for d in disturbed[settings.processes:]) >= settings.rounds and add_process():
                added += 1
            if r >= MAX_ROUNDS_FACTOR * settings.rounds + settings.processes + 2 * added:
                stopped_by = "round_cap"
                break
            r += 1
            order = [k for k in staged if k not in dropped]
            if len(order) < need:
                stopped_by = "dropped"
                break
            rng.shuffle(order)
            count = len(runners[order[0]])
            process = min(range(count), key=lambda p: (sum(q == p for q in round_process), p))
            if on_progress:
                on_progress(_progress_line(r, disturbed, settings))
            hit = False
            for key in order:
                runner = runners[key][process]
                res = WorkerClient(runner).slice(settings.round_seconds, per_call=per_call,
                                                 percentile=settings.latency_percentile,
                                                 timeout=settings.round_seconds + SLICE_GRACE_S,
                                                 warmup_seconds=settings.slice_warmup_seconds)
                if settings.quiet:
                    runner.pause()
                if res["status"] != "ok":
                    dropped[key] = f"round {r}: {res.get('status')}: {res.get('reason')}"
                    continue
                per_round[key].append(float(res["seconds_per_call"]))
                load = res.get("load") or {}
                foreign[key].append(load.get("foreign_cores"))
                seen.extend({"round": len(disturbed), **c} for c in load.get("consumers") or []
                            if isinstance(c, dict))
                hit = hit or bool(load.get("disturbed"))
                if (latency_seconds := res.get("latency_seconds")) is not None:
                    latency[key].append(float(latency_seconds))
            disturbed.append(hit)
            round_process.append(process)
            if on_round is not None:
                on_round({**_document(finalists, staged, dropped, per_round, foreign, disturbed, round_process,
                                      notes, settings, processes_used=settings.processes + added, seen=seen,
                                      shipped=shipped),
                          "complete": False})
        finished = True
    finally:
        for group in runners.values():
            for runner in group:
                if finished:
                    runner.close()
                else:  # Ctrl-C: kill, never wait for a slice to end
                    runner.recycle(kill=True)
    doc = _document(finalists, staged, dropped, per_round, foreign, disturbed, round_process, notes, settings,
                    processes_used=settings.processes + added, seen=seen, shipped=shipped)
    # the progress lines said how many undisturbed compared rounds were wanted; the document says what ended them
    doc["stopped_by"] = stopped_by or None
    # what staging cost, against the tuner's estimate (``estimated_seconds``, set by its caller): the saves of the
    # shipped finalists' artifacts and every process's stage, before the first round; each stage's own wall
    doc["staging_seconds"] = None if staging_s is None else round(staging_s, 3)
    doc["stage_seconds"] = [round(s, 3) for s in stage_seconds]
    used = doc["rounds_compared"]
    verdict = _verdict(staged, dropped, per_round, latency, used, round_process, settings,
                       need=min(2, len(finalists)))
    if verdict is not None:
        doc["verdict"] = verdict.to_dict()
        doc["verdict"]["text"] = verdict_text(doc)
    return doc


def _document(finalists: Sequence[Mapping[str, Any]], staged: Mapping[str, Any], dropped: Mapping[str, str],
              per_round: Mapping[str, list[float]], foreign: Mapping[str, list[float | None]],
              disturbed: Sequence[bool], round_process: Sequence[int], notes: Sequence[str],
              settings: ShowdownSettings, *, processes_used: int, seen: Sequence[Mapping[str, Any]] = (),
              shipped: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The showdown's document without its verdict (the rounds so far; copies, so later rounds change nothing).
    ``shipped``: per finalist, the artifact it was staged from (None or absent: built)."""
    burn_in = _burn_in(disturbed, settings)
    used = _compared_rounds(disturbed, settings)
    doc: dict[str, Any] = {
        "rounds": settings.rounds, "round_seconds": settings.round_seconds, "margin": settings.margin,
        "seed": settings.seed, "processes": settings.processes, "objective": settings.objective,
        "quiet": settings.quiet,
        "processes_used": processes_used, "round_process": list(round_process),
        "finalists": [candidate_key(r) for r in finalists],
        "seconds_per_call": {k: list(per_round[k]) for k in staged},
        "foreign_cores": {k: list(foreign[k]) for k in staged},
        "disturbed_rounds": [i for i, d in enumerate(disturbed) if d], "rounds_run": len(disturbed),
        "burn_in_rounds": burn_in,
        "rounds_compared": used,
        "dropped": dict(dropped), "notes": list(notes), "verdict": None,
        "staged_from": {k: "artifact" if (shipped or {}).get(k) else "build" for k in staged},
    }
    doc["contended"] = contended(doc)
    doc["disturbed_by"] = disturbers(seen)
    return doc


def disturbers(seen: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per process seen using CPU in a disturbed slice (``core.contention.top_consumers``): its name, pid, in how
    many rounds and at most how many cores, most rounds first (issue 31: "the report ... says what disturbed
    them, when that is known")."""
    by: dict[tuple[str, int], dict[str, Any]] = {}
    for c in seen:
        key = (str(c.get("name")), int(c.get("pid") or 0))
        entry = by.setdefault(key, {"name": key[0], "pid": key[1], "rounds": set(), "cores": 0.0})
        entry["rounds"].add(c.get("round"))
        entry["cores"] = max(entry["cores"], float(c.get("cores") or 0.0))
    out = [{**e, "rounds": len(e["rounds"])} for e in by.values()]
    return sorted(out, key=lambda e: (-e["rounds"], -e["cores"]))


def _progress_line(r: int, disturbed: Sequence[bool], settings: ShowdownSettings) -> str:
    """What round ``r`` is, counting what it says it counts: the first ``processes`` rounds are burn-in (each
    process's first slice, never compared), and only rounds after them count toward the undisturbed ones wanted
    (issue 31: "round 2 (0/6 undisturbed so far)" read as "every round was disturbed" when none had been)."""
    if r <= settings.processes:
        return f"round {r} (burn-in {r} of {settings.processes}: each process's first slice, not compared)"
    counted = disturbed[settings.processes:]
    calm = sum(not d for d in counted)
    return (f"round {r} ({calm} of {len(counted)} compared rounds so far undisturbed; {settings.rounds} "
            "undisturbed wanted)")


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
             used: Sequence[int], round_process: Sequence[int], settings: ShowdownSettings, *,
             need: int = 2) -> Verdict | None:
    alive = [k for k in staged if k not in dropped]
    if len(alive) < max(1, need) or not used:
        return None
    contenders = [contender_from(staged[k], [per_round[k][i] for i in used],
                                 [latency[k][i] for i in used] if latency[k] else (),
                                 [round_process[i] for i in used]) for k in alive]
    return paired_verdict(contenders, objective=settings.objective, margin=settings.margin, seed=settings.seed)
