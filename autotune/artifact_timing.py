"""Time two runs' artifacts side by side, now: ``autotune compare A B --rerun N``.

Why: two reports are two measurements taken at different times, and this machine's speed moves between them.
Two runs of the same code on the quickstart, three minutes apart on a quiet machine, gave screen ratios with a
median of 0.89 (one configuration 0.82, a "regression"), while a model slowed by 10% gave 0.76-1.20: no
interval built from the two reports can tell a slower model from a slower afternoon. What a CI gate needs is
the two deployments timed *together*: each run's recommendation, saved as its artifact, run by its own
``load.py`` in a plain process (no autotune imported: the child checks) started in the process environment it
was measured in (``run.sh``'s variables), A and B in every round in a seeded random order, so a drift of the
machine lands on both sides of each pair::

    for round in 1..N:
        order = shuffle([A, B]) (seeded)
        for side in order: throughput[side][round] = fresh plain process: load(), warm every shape
                          (3 passes + 1 s), then whole passes over the traffic for `seconds`
    d[round]  = log(throughput B / throughput A)           # a pair: both in the same minute
    ratio     = exp(mean d)
    CI        = exp(mean d -+ t_{0.975, N-1} * sd(d) / sqrt(N))
    verdict   = regression  if CI high < 1 - threshold
                improvement if CI low  > 1 + threshold
                unchanged   otherwise

The traffic is the run's own: for a recipe with ``[data]``, the batches the artifact was measured on, as saved
in it (``artifact/traffic.npz``), cycled in order; for ``[[inputs]]``, the loader's ``make_inputs()`` batch.
What runs is each run directory's own ``artifact/load.py`` and nothing else: the data factory that report.json
names is never imported (a report.json is data; its ``base_dir`` could name any folder's Python file). When the two
runs picked different configurations the comparison is between their recommendations, which is the question
a deployment asks ("is the new recommendation slower than the old one?").
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.compare import Ratio, ratio_verdict
from autotune.compare_rounds import t_quantile_975
from autotune.core.artifact_child import CHILD
from autotune.core.device_names import device_type, is_accelerator
from autotune.core.process_env import environment_of_variant
from autotune.deployment import TRAFFIC_NAME
from autotune.errors import InputError

__all__ = ["CHILD", "ArtifactTarget", "RerunResult", "artifact_target", "child_spec", "plain_process", "rerun",
           "target_of", "time_artifact"]

#: Seconds a plain process may take (load, warm-up, timing) before it is called failed.
CHILD_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ArtifactTarget:
    """One run's recommendation as its artifact: what the plain process loads and serves, and where it was made."""

    run_dir: Path
    label: str  # variant@batch
    reported: float  # the report's throughput of the recommendation
    child: Mapping[str, Any] = field(default_factory=dict)  # the plain process's spec, less "seconds"
    environment: Mapping[str, str] = field(default_factory=dict)  # variables the environment sets


def artifact_target(run_dir: Path) -> ArtifactTarget:
    """The recommendation of ``run_dir`` (``autotune run --out``) as an artifact to time.

    Raises :class:`InputError` naming the file and field when the directory has no report, no recommendation or
    no saved artifact (a run with ``--no-artifact``, or one whose artifact step failed).
    """
    report = run_dir / "report.json"
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{report}: --rerun needs the run directory's report.json: {exc}") from None
    return target_of(run_dir, doc)


def target_of(run_dir: Path, doc: Any) -> ArtifactTarget:
    """:func:`artifact_target` on a report document already in hand (the run's own, before it is written)."""
    report = run_dir / "report.json"
    rec = doc.get("recommendation") if isinstance(doc, Mapping) else None
    art = doc.get("artifact") if isinstance(doc, Mapping) else None
    if not isinstance(rec, Mapping) or not rec.get("variant"):
        raise InputError(f"{report}: field 'recommendation': none, so there is no artifact to re-run")
    if not isinstance(art, Mapping) or art.get("status") != "ok":
        reason = art.get("reason") if isinstance(art, Mapping) else "no artifact section"
        raise InputError(f"{report}: field 'artifact': not saved ({reason}); --rerun times the saved artifacts")
    child = child_spec(run_dir / "artifact", kind=str(art.get("kind")), batch_size=int(rec["batch_size"]),
                       recipe=doc.get("recipe") or {}, why="--rerun")
    env = environment_of_variant(str(rec["variant"]))
    return ArtifactTarget(run_dir=run_dir, label=f"{rec['variant']}@{rec['batch_size']}",
                          reported=float(rec.get("throughput") or 0.0), child=child, environment=env.apply(os.environ))


def child_spec(artifact_dir: Path, *, kind: str, batch_size: int, recipe: Mapping[str, Any], why: str
               ) -> dict[str, Any]:
    """What the plain process (and a worker staged as shipped) loads from ``artifact_dir``: its ``load.py`` and, for
    a ``[data]`` recipe, the traffic saved in it (:mod:`autotune.core.artifact_child`'s ``spec``). Raises
    :class:`InputError` naming the missing file; ``why`` says who needs it."""
    loader = artifact_dir / "load.py"
    if not loader.is_file():
        raise InputError(f"{loader}: missing; {why} runs the artifact's own load.py")
    child: dict[str, Any] = {"loader": str(loader.resolve()), "kind": kind, "batch_size": batch_size}
    device = str(recipe.get("device_resolved") or recipe.get("device") or "cpu")
    if is_accelerator(device) and kind not in ("onnx", "openvino"):
        # a torch artifact on an accelerator: its calls return before the device is done (the runtimes' return
        # host arrays, which waits); the child synchronises as the tool's timer does (artifact_child.TIME_PASSES)
        child["sync"] = device_type(device)
    data = recipe.get("data")
    if isinstance(data, Mapping) and data.get("factory"):
        # the traffic the artifact was measured on, saved in it; never the data factory report.json names: a
        # report is data, and its base_dir could point at any folder's Python file (issue 32)
        traffic = artifact_dir / TRAFFIC_NAME
        if not traffic.is_file():
            raise InputError(f"{traffic}: missing; {why} replays the traffic saved with the artifact (a run of "
                             "an older autotune did not save it: run it again)")
        max_batches = data.get("max_batches")
        child["traffic"] = str(traffic.resolve())
        child["max_batches"] = max_batches if isinstance(max_batches, int) and max_batches > 0 else 16
    return child


def time_artifact(target: ArtifactTarget, *, seconds: float) -> float:
    """One fresh plain process serving ``target``'s traffic for ``seconds``; its throughput (samples/s)."""
    return float(plain_process(target, seconds=seconds)["throughput"])


def plain_process(target: ArtifactTarget, *, seconds: float, warm_s: float = 1.0) -> dict[str, Any]:
    """One fresh plain process serving ``target``'s traffic: warm (3 passes, then ``warm_s``), then timed for
    ``seconds``; what it printed: ``throughput`` (samples/s), ``passes``, ``calls``, per-call ``p50_ms`` /
    ``p90_ms`` / ``p99_ms`` / ``mean_ms`` and ``rows_per_call``. Raises :class:`InputError` naming the loader
    when the process fails."""
    proc = subprocess.run([sys.executable, "-c", CHILD,
                           json.dumps({**target.child, "seconds": seconds, "warm_s": warm_s})],
                          capture_output=True, text=True, cwd=target.run_dir, env=dict(target.environment),
                          timeout=CHILD_TIMEOUT_S, check=False)
    if proc.returncode != 0:  # the exception's own line first: a report shortens the rest (warnings, traceback)
        err = proc.stderr.strip()
        last = err.splitlines()[-1] if err else "nothing on stderr"
        raise InputError(f"{target.run_dir / 'artifact' / 'load.py'}: the plain process failed "
                         f"(exit {proc.returncode}): {last}; its stderr ended: {err[-600:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@dataclass(frozen=True)
class RerunResult:
    """A and B's artifacts timed side by side: per-round throughputs, the paired ratio B/A and its verdict."""

    a: str
    b: str
    a_throughput: tuple[float, ...]
    b_throughput: tuple[float, ...]
    seconds: float
    threshold: float

    @property
    def log_ratios(self) -> list[float]:
        return [math.log(b / a) for a, b in zip(self.a_throughput, self.b_throughput, strict=True)]

    @property
    def ratio(self) -> float:
        return math.exp(statistics.fmean(self.log_ratios))

    @property
    def ci(self) -> tuple[float, float] | None:
        d = self.log_ratios
        if len(d) < 2:
            return None
        half = t_quantile_975(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
        m = statistics.fmean(d)
        return math.exp(m - half), math.exp(m + half)

    @property
    def verdict(self) -> str:
        """``compare``'s rule on the paired ratio (regression, improvement, unchanged; at least 2 rounds: a CI)."""
        return ratio_verdict(Ratio(self.ratio, self.ci), self.threshold)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "rounds": len(self.a_throughput), "seconds": self.seconds,
                "a_throughput": list(self.a_throughput), "b_throughput": list(self.b_throughput),
                "ratio": self.ratio, "ci": list(self.ci) if self.ci else None, "threshold": self.threshold,
                "verdict": self.verdict, "method": "paired rounds of fresh plain processes, t interval"}


def rerun(a: ArtifactTarget, b: ArtifactTarget, *, rounds: int, seconds: float, threshold: float, seed: int = 0,
          timer: Callable[..., float] = time_artifact) -> RerunResult:
    """Time ``a`` and ``b`` in ``rounds`` interleaved rounds (the module docstring); ``timer`` for tests."""
    if rounds < 2:
        raise InputError(f"--rerun: at least 2 rounds are needed for an interval, got {rounds}")
    rng = random.Random(seed)
    got: dict[str, list[float]] = {"a": [], "b": []}
    for _ in range(rounds):
        order = [("a", a), ("b", b)]
        rng.shuffle(order)
        for side, target in order:
            got[side].append(timer(target, seconds=seconds))
    return RerunResult(a=a.label, b=b.label, a_throughput=tuple(got["a"]), b_throughput=tuple(got["b"]),
                       seconds=seconds, threshold=threshold)
