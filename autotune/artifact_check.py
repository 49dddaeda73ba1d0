"""The recommendation as shipped: its saved artifact timed by its own ``load.py`` in plain processes, after the run.

Why: the run's figure comes from a worker process (torch imported, the traffic converted by the worker, the
showdown's processes beside it), and the deployment runs something else: ``load.py`` in a process that imports only
the runtime, in ``run.sh``'s environment. On an AVX-512 Xeon the two agreed within 0.5-4.5%
(``benchmarks/bench_deployment_agreement.py``); on an AVX2-only EPYC an OpenVINO BERT reported 981 samples/s and
its artifact served 739 (issue 30). A report can only promise what it measured on what ships, so every run with
an artifact ends by timing it the way a deployment runs it, and the report states that figure beside its own::

    target = the artifact (artifact_timing.target_of): load.py, run.sh's variables, the traffic saved with it
             ([data]) or make_inputs() ([[inputs]]); the plain process checks it never imported autotune
    tool = a fresh worker with the pick built and warm (the showdown's "stage"), stopped (SIGSTOP) between slices
    for r in 1..R (R = --artifact-check-rounds, default 5; 0: no check), the two sides in a seeded random order:
        plain: a fresh plain process: load(), warm (3 passes over the traffic + 1 s, as compare --rerun),
               time whole passes for S s
               -> throughput_r (samples/s), per-call p50_r / p99_r
        tool:  one S-s slice of the staged worker -> tool_r (samples per call / seconds per call)
        disturbed_r = another process used more than a tenth of a core while either side was timed (each side
                      reads the kernel around its own window: autotune.core.contention); a disturbed round is
                      replaced, up to extra_rounds(R) more, while the deadline allows
    used       = the undisturbed rounds when at least 2 are, else every round (the report says so)
    throughput = median over used; CI = exp(mean log t -+ t_{0.975,n-1} sd / sqrt(n))  (n >= 2)
    p50, p99   = median over the used rounds of each process's percentiles (per call = per batch)
    ratio      = throughput / the report's throughput (measured minutes earlier: the machine may have moved)
    paired     = exp(mean over used of log(throughput_r / tool_r)), t interval: the artifact against the tool side
                 by side, which a drift of the machine between the run and the check does not bias
    verdict    = on the paired ratio: agrees     its CI within 1 -+ 5%
                                      slower / faster   its CI wholly beyond 5%
                                      undecided  otherwise (a mean within 5% is not agreement while the interval
                                                 reaches further)
                 (without the tool side, on the ratio to the report: agrees when the rounds' CI is within 5% of
                 the report's figure, slower / faster when the median is outside 5% and the CI excludes the
                 figure, else undecided)

Why paired: the first checks on a noisy machine gave 0.80x and 0.79x the report (quickstart frozen@16, BERT-like
trace@16), and the same artifact timed alternately with ``autotune measure`` of the same configuration gave 0.93,
1.26 and 0.95: the machine had moved between the run and the check, not the artifact.

The check runs after the artifact is in place and before serving, with no worker alive, so nothing of autotune's
competes for the cores. Something else may: on a 2-core AVX2 EPYC a demo's check read 260, 407, 410 and 320
samples/s, the tool's worker beside it 329, 401, 413 and 343 (the machine, both sides at once), and the median, 363,
was the headline where a plain process a minute later ran 430 (session 40). So each round says whether it was
disturbed and by whom, and the headline leaves the disturbed rounds out when enough quiet ones remain.

A failure (the loader raises, the process dies, a timeout) is reported and never loses the run. On an
accelerator (CUDA, XPU) the plain process synchronises the device the way the tool's timer does
(:data:`autotune.core.artifact_child.TIME_PASSES`): the throughput from calls launched back to back with the
window closed by a synchronise, the percentiles from calls each synchronised. Until session 32 such artifacts were
not checked at all, and a hand-timed frozen@16 on an H200 ran at 0.82 of its report.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.device_names import device_type, is_accelerator
from autotune.core.stats import log_t_interval
from autotune.errors import AutotuneError, InputError

if TYPE_CHECKING:
    from autotune.runner import Runner

__all__ = [
    "AGREEMENT_TOLERANCE",
    "DEFAULT_ROUNDS",
    "ROUNDS_ENV",
    "SECONDS",
    "as_shipped",
    "check_artifact",
    "compared_rounds",
    "default_rounds",
    "extra_rounds",
    "paired_verdict",
    "skipped_section",
    "verdict",
]

#: Rounds (fresh plain processes) by default, and the variable that changes the default (0: no check; a CI that
#: does not need the figure, or this project's own suite, sets it).
DEFAULT_ROUNDS = 5
ROUNDS_ENV = "AUTOTUNE_ARTIFACT_CHECK_ROUNDS"
MAX_ROUNDS = 100
#: Seconds each plain process is timed, and warmed after its first 3 passes.
SECONDS = 1.5
WARM_SECONDS = 1.0
#: How far the artifact's figure may be from the report's and still agree (issue 30's +-5%).
AGREEMENT_TOLERANCE = 0.05


def default_rounds() -> int:
    """The rounds a run checks its artifact with: ``AUTOTUNE_ARTIFACT_CHECK_ROUNDS`` when set (an integer >= 0),
    else :data:`DEFAULT_ROUNDS`. Raises :class:`AutotuneError` naming the variable for any other value."""
    raw = os.environ.get(ROUNDS_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_ROUNDS
    try:
        rounds = int(raw)
    except ValueError:
        rounds = -1
    if rounds < 0 or rounds > MAX_ROUNDS:
        raise InputError(f"environment variable {ROUNDS_ENV}={raw!r}: allowed: an integer from 0 (no check) to "
                         f"{MAX_ROUNDS}")
    return rounds


def unchecked_device(doc: Mapping[str, Any]) -> str | None:
    """Why an artifact on this run's device is not timed in plain processes, or None: a CPU, or an accelerator
    whose torch module the plain process synchronises (``cuda``, ``xpu``)."""
    recipe_doc = doc.get("recipe") or {}
    device = str(recipe_doc.get("device_resolved") or recipe_doc.get("device") or "cpu")
    if device_type(device) != "cpu" and not is_accelerator(device):
        return (f"an artifact on {device}: the plain process knows no way to synchronise it, so its per-call times "
                "would not be the device's")
    return None


def check_artifact(doc: Any, out_dir: Path, *, rounds: int, seconds: float = SECONDS,
                   recipe_data: Mapping[str, Any] | None = None, make_runner: Callable[[], Runner] | None = None,
                   timeout: float = 600.0, seed: int = 0, deadline: float | None = None) -> dict[str, Any] | None:
    """Time the run's saved artifact in ``rounds`` plain processes, each round paired with a slice of the tool's
    own staged worker when ``make_runner`` is given (module docstring); the report's ``artifact_check`` section,
    or None when there is nothing to check (no rounds, no artifact).

    ``deadline`` (``time.monotonic()``): after :data:`autotune.core.budget.MIN_CHECK_ROUNDS` rounds, no round
    starts that the longest so far says would end after it (the run's budget is a promise); ``rounds`` in the
    section is then the number run."""
    from autotune.artifact_timing import plain_process, target_of
    from autotune.core.budget import MIN_CHECK_ROUNDS

    artifact = doc.get("artifact") if isinstance(doc, dict) else None
    rec = doc.get("recommendation") if isinstance(doc, dict) else None
    if rounds <= 0 or not isinstance(artifact, dict) or artifact.get("status") != "ok" or not isinstance(rec, dict):
        return None
    base: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "tolerance": AGREEMENT_TOLERANCE,
                            "method": "the artifact's load.py in fresh plain processes (run.sh's environment, no "
                                      "autotune imported), the traffic saved with it, median of the rounds"}
    not_here = unchecked_device(doc)
    if not_here is not None:
        return {**base, "status": "skipped", "reason": not_here}
    t0 = time.monotonic()
    runner: Runner | None = None
    tool: list[float] = []
    consumers: list[dict[str, Any]] = []
    tool_note: str | None = None
    try:
        target = target_of(out_dir, doc)
        per_call: float | None = None
        if make_runner is not None and recipe_data is not None:
            # the tool's side as the headline's source timed it: from this artifact when the showdown staged the
            # pick from its own (measure.as_shipped), else built from the recipe
            shipped = target.child if _staged_from_artifact(doc, rec) else None
            runner, tool_note, per_call = _staged(make_runner, recipe_data, rec, timeout, shipped=shipped)
        rng = random.Random(seed)
        runs: list[dict[str, Any]] = []
        disturbed: list[bool] = []
        longest = 0.0
        while len(runs) < rounds + extra_rounds(rounds) and sum(not d for d in disturbed) < rounds:
            if deadline is not None and len(runs) >= MIN_CHECK_ROUNDS and time.monotonic() + longest > deadline:
                break
            began = time.monotonic()
            sides = ["plain", "tool"] if runner is not None else ["plain"]
            rng.shuffle(sides)
            hit = False
            for side in sides:
                if side == "plain":
                    run = plain_process(target, seconds=seconds, warm_s=WARM_SECONDS)
                    runs.append(run)
                    hit = hit or bool(run.get("disturbed"))
                    consumers.extend({"round": len(disturbed), "side": "plain", **c}
                                     for c in run.get("consumers") or [])
                elif runner is not None:
                    rate, load = _slice(runner, rec, seconds, samples_per_call=per_call)
                    runner.pause()  # stopped while the plain process runs: the two never share the cores
                    if rate is None:
                        tool_note = "the tool's staged worker failed a slice; the rounds are the plain ones alone"
                        runner.close()
                        runner, tool = None, []
                    else:
                        tool.append(rate)
                        hit = hit or bool(load.get("disturbed"))
                        consumers.extend({"round": len(disturbed), "side": "tool", **c}
                                         for c in load.get("consumers") or [])
            disturbed.append(hit)
            longest = max(longest, time.monotonic() - began)
    except (AutotuneError, OSError, ValueError, KeyError) as exc:
        return {**base, "status": "failed", "reason": str(exc)[:800], "wall_seconds": round(time.monotonic() - t0, 3)}
    except Exception as exc:  # subprocess.TimeoutExpired and the like: the run stands, the section says why
        return {**base, "status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[:600]}",
                "wall_seconds": round(time.monotonic() - t0, 3)}
    finally:
        if runner is not None:
            runner.close()
    rates = [float(r["throughput"]) for r in runs]
    used = compared_rounds(disturbed)
    kept = [runs[i] for i in used]
    throughput = statistics.median(rates[i] for i in used)
    reported = rec.get("throughput")
    ratio = throughput / float(reported) if isinstance(reported, (int, float)) and reported > 0 else None
    ci = log_t_interval([rates[i] for i in used])
    section = {**base, "rounds": len(rates), "status": "ok", "throughputs": rates, "throughput": throughput, "ci": ci,
               "p50_ms": statistics.median(float(r["p50_ms"]) for r in kept),
               "p90_ms": statistics.median(float(r["p90_ms"]) for r in kept),
               "p99_ms": statistics.median(float(r["p99_ms"]) for r in kept),
               "mean_ms": statistics.median(float(r["mean_ms"]) for r in kept),
               "calls": sum(int(r["calls"]) for r in kept), "reported": reported, "ratio": ratio,
               "verdict": verdict(ratio, ci, reported), "tool_note": tool_note,
               "disturbed": disturbed, "compared": len(used),
               "foreign_cores": [r.get("foreign_cores") for r in runs], "consumers": consumers[:12],
               "wall_seconds": round(time.monotonic() - t0, 3)}
    if len(tool) == len(rates) and tool:
        ratios = [rates[i] / tool[i] for i in used]
        paired = math.exp(statistics.fmean(math.log(r) for r in ratios))
        paired_ci = log_t_interval(ratios)
        section.update(tool_throughputs=tool, paired_ratio=paired, paired_ci=paired_ci,
                       verdict=paired_verdict(paired, paired_ci))
    return section


def extra_rounds(rounds: int) -> int:
    """Rounds the check may add to replace disturbed ones (the deadline still bounds them): half the rounds asked
    for, one at least. A machine busy throughout then costs the check half again, not twice (this project's suite
    runs two test processes on two cores, so its checks see each other as foreign CPU)."""
    return max(1, rounds // 2)


def compared_rounds(disturbed: list[bool]) -> list[int]:
    """The rounds the headline is the median of: the undisturbed ones when at least
    :data:`~autotune.core.budget.MIN_CHECK_ROUNDS` are, else every round (the report then says they were disturbed:
    a figure from a busy machine is still the best there is, and it must not read as a quiet one)."""
    from autotune.core.budget import MIN_CHECK_ROUNDS

    quiet = [i for i, d in enumerate(disturbed) if not d]
    return quiet if len(quiet) >= MIN_CHECK_ROUNDS else list(range(len(disturbed)))


def skipped_section(rounds: int, reason: str) -> dict[str, Any]:
    """The section of a check that did not run (the time budget): status ``skipped`` and why."""
    return {"rounds": rounds, "seconds": SECONDS, "tolerance": AGREEMENT_TOLERANCE, "status": "skipped",
            "reason": reason}


def _staged_from_artifact(doc: Mapping[str, Any], rec: Mapping[str, Any]) -> bool:
    """Whether the showdown timed the pick from its saved artifact (its ``staged_from``)."""
    from autotune.showdown import candidate_key

    showdown = doc.get("showdown")
    staged = showdown.get("staged_from") if isinstance(showdown, Mapping) else None
    return isinstance(staged, Mapping) and staged.get(candidate_key(rec)) == "artifact"


def _staged(make_runner: Callable[[], Runner], recipe_data: Mapping[str, Any], rec: Mapping[str, Any],
            timeout: float, *, shipped: Mapping[str, Any] | None = None
            ) -> tuple[Runner | None, str | None, float | None]:
    """A fresh worker with the pick warm (the showdown's ``stage``: built, or loaded from the artifact with
    ``shipped``), paused; or None and why not. The third item: samples per call of a shipped stage's traffic."""
    from autotune.client import WorkerClient

    runner = make_runner()
    res = WorkerClient(runner).stage(recipe_data, str(rec["variant"]), int(rec["batch_size"]),
                                     warmup_iterations=int(rec.get("warmup_iterations") or 0),
                                     warmup_seconds=1.0, timeout=timeout,
                                     shipped=dict(shipped) if shipped is not None else None)
    if res.get("status") != "ok":
        runner.close()
        return (None, f"the tool's side could not be staged ({res.get('status')}: {str(res.get('reason'))[:200]})",
                None)
    runner.pause()
    samples = res.get("samples_per_call")
    return runner, None, float(samples) if isinstance(samples, int | float) and samples > 0 else None


def _slice(runner: Runner, rec: Mapping[str, Any], seconds: float, *, samples_per_call: float | None = None
           ) -> tuple[float | None, Mapping[str, Any]]:
    """One slice of the staged pick: samples/s (the traffic's samples per call over the seconds per call), or None
    when it failed; and the slice's CPU load (``disturbed``, ``consumers``: :mod:`autotune.core.contention`)."""
    from autotune.client import WorkerClient

    res = WorkerClient(runner).slice(seconds, per_call=False, percentile="p99", timeout=seconds + 60.0)
    spc = res.get("seconds_per_call") if res.get("status") == "ok" else None
    load = res.get("load")
    load = load if isinstance(load, Mapping) else {}
    if not isinstance(spc, (int, float)) or spc <= 0:
        return None, load
    per_call = samples_per_call or (rec.get("traffic") or {}).get("samples_per_call") or rec["batch_size"]
    return float(per_call) / float(spc), load


def paired_verdict(ratio: float, ci: list[float] | None) -> str:
    """The paired ratio (artifact / the tool, side by side): ``agrees`` when its CI lies within +-5% (without a CI:
    the ratio); ``slower`` / ``faster`` when the CI lies wholly beyond 5%; else ``undecided`` (too few or too noisy
    rounds to show either: a mean within 5% is not agreement while the interval reaches 16% off)."""
    low, high = (ci[0], ci[1]) if ci is not None else (ratio, ratio)
    if low >= 1.0 - AGREEMENT_TOLERANCE and high <= 1.0 + AGREEMENT_TOLERANCE:
        return "agrees"
    if high < 1.0 - AGREEMENT_TOLERANCE:
        return "slower"
    if low > 1.0 + AGREEMENT_TOLERANCE:
        return "faster"
    return "undecided"


def verdict(ratio: float | None, ci: list[float] | None, reported: Any) -> str | None:
    """Without the tool's side, against the report's figure: ``agrees`` when the rounds' CI lies within +-5% of it
    (without a CI: the ratio), ``slower`` / ``faster`` when the median is outside and the CI excludes the figure,
    else ``undecided``: neither agreement nor a gap is claimed beyond what the rounds show."""
    if ratio is None:
        return None
    figure = float(reported)
    low, high = (ci[0] / figure, ci[1] / figure) if ci is not None else (ratio, ratio)
    if low >= 1.0 - AGREEMENT_TOLERANCE and high <= 1.0 + AGREEMENT_TOLERANCE:
        return "agrees"
    if abs(ratio - 1.0) > AGREEMENT_TOLERANCE and (high < 1.0 or low > 1.0):
        return "slower" if ratio < 1 else "faster"
    return "undecided"


def as_shipped(rec: dict[str, Any], check: Mapping[str, Any] | None, artifact: Mapping[str, Any] | None = None
               ) -> None:
    """Make the recommendation's headline the artifact's (issue 30: "the headline is the artifact's number"):
    throughput, its CI and the per-call latencies from the plain processes; the run's own figures stay beside
    them (``measured_throughput``, ``measured_throughput_ci``, ``measured_throughput_source``,
    ``measured_latency_ms``) and still rank the candidates. Nothing changes unless the check ran (status ok) and,
    given the ``artifact`` section, it is this recommendation's (``autotune report DIR`` rebuilds the pick from the
    study, which workers may have added to)."""
    if not isinstance(check, Mapping) or check.get("status") != "ok" or rec.get("throughput_source") == "artifact":
        return
    if artifact is not None and (artifact.get("variant"), artifact.get("batch_size")) != (
            rec.get("variant"), rec.get("batch_size")):
        return
    rate = check.get("throughput")
    if not isinstance(rate, (int, float)) or rate <= 0:
        return
    rec["measured_throughput"] = rec.get("throughput")
    rec["measured_throughput_ci"] = rec.get("throughput_ci")
    rec["measured_throughput_source"] = rec.get("throughput_source") or "search"
    rec["measured_latency_ms"] = rec.get("latency_ms")
    rec["throughput"] = float(rate)
    rec["throughput_ci"] = list(check["ci"]) if isinstance(check.get("ci"), list) else None
    rec["throughput_source"] = "artifact"
    rec["latency_ms"] = {"p50": check.get("p50_ms"), "p90": check.get("p90_ms"), "p99": check.get("p99_ms"),
                         "mean": check.get("mean_ms")}
    rec["latency_source"] = "per_call"
    ci = rec["throughput_ci"]
    rec["relative_ci_half_width"] = (ci[1] - ci[0]) / 2 / float(rate) if ci else None
