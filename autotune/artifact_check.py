"""The recommendation as shipped: its saved artifact timed by its own ``load.py`` in plain processes, after the run.

Why: the run's figure comes from a worker process (torch imported, the traffic converted by the worker, the
showdown's processes beside it), and the deployment runs something else: ``load.py`` in a process that imports only
the runtime, in ``run.sh``'s environment. On an AVX-512 Xeon the two agreed within 0.5-4.5%
(``benchmarks/bench_deployment_agreement.py``); on an AVX2-only EPYC an OpenVINO BERT reported 981 samples/s and
its artifact served 739 (issue 30). A report can only promise what it measured on what ships, so every run with
an artifact ends by timing it the way a deployment runs it, and the report states that figure beside its own::

    target = the artifact (artifact_timing.target_of): load.py, run.sh's variables, the traffic saved with it
             ([data]) or make_inputs() ([[inputs]]); the plain process checks it never imported autotune
    for r in 1..R (R = --artifact-check-rounds, default 3; 0: no check):
        a fresh plain process: load(), warm (3 passes over the traffic + 0.5 s), time whole passes for S s
        -> throughput_r (samples/s), per-call p50_r / p99_r
    throughput = median_r; CI = exp(mean log t -+ t_{0.975,R-1} sd / sqrt(R))  (R >= 2)
    p50, p99   = median over the rounds of each process's percentiles (per call = per batch)
    ratio      = throughput / the report's throughput;  agrees = |ratio - 1| <= 5%

The check runs after the artifact is in place and before serving, with no worker alive, so nothing of autotune's
competes for the cores. A failure (the loader raises, the process dies, a timeout) is reported and never loses
the run. CUDA artifacts are not checked: the plain loop times calls without synchronising the device.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

from autotune.compare_rounds import t_quantile_975
from autotune.errors import AutotuneError, InputError

__all__ = ["AGREEMENT_TOLERANCE", "DEFAULT_ROUNDS", "ROUNDS_ENV", "SECONDS", "check_artifact", "default_rounds"]

#: Rounds (fresh plain processes) by default, and the variable that changes the default (0: no check; a CI that
#: does not need the figure, or this project's own suite, sets it).
DEFAULT_ROUNDS = 3
ROUNDS_ENV = "AUTOTUNE_ARTIFACT_CHECK_ROUNDS"
MAX_ROUNDS = 100
#: Seconds each plain process is timed, and warmed after its first 3 passes.
SECONDS = 2.0
WARM_SECONDS = 0.5
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


def check_artifact(doc: Any, out_dir: Path, *, rounds: int, seconds: float = SECONDS) -> dict[str, Any] | None:
    """Time the run's saved artifact in ``rounds`` plain processes (module docstring); the report's
    ``artifact_check`` section, or None when there is nothing to check (no rounds, no artifact)."""
    from autotune.artifact_timing import plain_process, target_of

    artifact = doc.get("artifact") if isinstance(doc, dict) else None
    rec = doc.get("recommendation") if isinstance(doc, dict) else None
    if rounds <= 0 or not isinstance(artifact, dict) or artifact.get("status") != "ok" or not isinstance(rec, dict):
        return None
    base: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "tolerance": AGREEMENT_TOLERANCE,
                            "method": "the artifact's load.py in fresh plain processes (run.sh's environment, no "
                                      "autotune imported), the traffic saved with it, median of the rounds"}
    device = str((doc.get("recipe") or {}).get("device") or "cpu")
    if device.startswith("cuda"):
        return {**base, "status": "skipped", "reason": "a CUDA artifact: the plain loop does not synchronise the "
                                                       "device, so its per-call times would not be the GPU's"}
    t0 = time.monotonic()
    try:
        target = target_of(out_dir, doc)
        runs = [plain_process(target, seconds=seconds, warm_s=WARM_SECONDS) for _ in range(rounds)]
    except (AutotuneError, OSError, ValueError, KeyError) as exc:
        return {**base, "status": "failed", "reason": str(exc)[:800], "wall_seconds": round(time.monotonic() - t0, 3)}
    except Exception as exc:  # subprocess.TimeoutExpired and the like: the run stands, the section says why
        return {**base, "status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[:600]}",
                "wall_seconds": round(time.monotonic() - t0, 3)}
    rates = [float(r["throughput"]) for r in runs]
    throughput = statistics.median(rates)
    ci = None
    if len(rates) >= 2 and min(rates) > 0:
        logs = [math.log(x) for x in rates]
        half = t_quantile_975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        ci = [math.exp(statistics.fmean(logs) - half), math.exp(statistics.fmean(logs) + half)]
    reported = rec.get("throughput")
    ratio = throughput / float(reported) if isinstance(reported, (int, float)) and reported > 0 else None
    return {**base, "status": "ok", "throughputs": rates, "throughput": throughput, "ci": ci,
            "p50_ms": statistics.median(float(r["p50_ms"]) for r in runs),
            "p99_ms": statistics.median(float(r["p99_ms"]) for r in runs),
            "calls": sum(int(r["calls"]) for r in runs), "reported": reported, "ratio": ratio,
            "agrees": None if ratio is None else abs(ratio - 1.0) <= AGREEMENT_TOLERANCE,
            "wall_seconds": round(time.monotonic() - t0, 3)}
