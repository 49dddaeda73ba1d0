"""The serving search: which instances x threads x max batch x max delay serves the most requests per second
within the SLO, found on the artifact's own server with open-loop load.

Pipeline (each step's time counted against ``serving.time_budget_s``)::

    layouts   = instances x threads that fit the usable cores (n * t <= cores)
    calibrate each layout: serve.py --calibrate times predict at every max-batch size with all n busy
    naive     = 1 instance x all cores, max batch 1, no delay: started, its per-request overhead read at
                concurrency 1, then its max rate bisected with real load (the first baseline)
    simulate  every grid point (autotune.serving.simulate): predicted max rate within the SLO
    confirm   the best `confirm` predictions (distinct layouts first) with real load: max rate bisected
    batch-loop baseline: the throughput pick served as it is (its threads, max batch = its batch size,
                a delay of one call at that size; none when its batch is no larger than a request), bisected
                unless it is a configuration already measured (an artifact of batch 1: the naive server)
    each baseline's hold = its max rate for SUSTAIN_SECONDS on its own server, once, where its share has the room
                (the pick's is held too: a ratio of a held rate to an unheld one flatters the baseline)
    each bisection's share of the budget: what is left after calibration, less the curve's reserve, over the
                bisections planned (the naive one, up to `confirm` others the simulation does not prune, the batch
                loop): a grid of one configuration gives its one bisection the whole budget
    rescue    = where nothing passed at any rate tried: the naive server's bisection goes on below its lowest
                rate on a fresh server, while the budget has room for it and a hold
    the pick  = the highest confirmed max rate (with serving.rate: the fewest cores that serve it)
    its hold  = its max rate for SUSTAIN_SECONDS on a fresh server (lowered until it holds)
    its curve = p50/p99 at 50%, 80%, 90% and 100% (the hold) of its max rate

Every server is the artifact's ``run.sh serve`` (:mod:`autotune.serving.processes`): what the report states
is what ships. An interrupt keeps every configuration measured so far (``interrupted: true``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.budget import SERVING_HOLD_GRACE
from autotune.core.device_names import is_accelerator
from autotune.serving.batcher import BatchPolicy
from autotune.serving.processes import Calibration, ServerProcess, ServingError, calibrate, pinned
from autotune.serving.rate_search import (
    LoadPoint,
    as_dicts,
    bound_above,
    find_max_rate,
    max_rate_of,
    next_rate,
    point_from,
    point_seconds,
    requests_to_bound,
    short_bound,
)
from autotune.serving.requests import cut_requests, load_batches
from autotune.serving.simulate import ServiceModel, Simulator, percentile_of

if TYPE_CHECKING:
    from autotune.serving.loadgen import LoadResult

#: Fractions of the pick's max rate its curve is measured at. 90% is measured, not read between 80% and 100%:
#: the percentile climbs steeply near the max, and a straight line between the two said p99 22 ms where a 30-s
#: replay at 90% saw 35 ms (BERT-like, one core, 2026-11-26).
CURVE_FRACTIONS = (0.5, 0.8, 0.9, 1.0)
#: Requests per curve point below the max (its p99 from ~15 beyond it), within 3-6 s.
CURVE_REQUESTS = 1500
#: The shortest and longest a curve point below the max lasts, in seconds; a slow model's points may run up to
#: CURVE_POINT_MAX_S where the serving budget has that time left (:func:`_curve_point_seconds`).
CURVE_POINT_S = (3.0, 6.0)
CURVE_POINT_MAX_S = 30.0
#: The pick's max rate must hold this long (a bisection point lasts 2-8 s), else it is lowered by SUSTAIN_STEP,
#: at most SUSTAIN_TRIES times.
SUSTAIN_SECONDS = 10.0
SUSTAIN_STEP = 0.9
#: A hold whose percentile came out at SUSTAIN_FAR times the SLO or more steps to SUSTAIN_FAR_STEP of its rate, past
#: the bisection's short passes just below it: the BERT-like pick's 2-s points passed at 478 and 510 requests/s, its
#: hold at 510 read p99 414 ms (10x the SLO), and the holds that followed at 478 and 430 (a pass 6% below, then
#: 10% down) failed too, leaving the rate not held (session 36).
SUSTAIN_FAR = 2.0
SUSTAIN_FAR_STEP = 0.8
SUSTAIN_TRIES = 3  # holds of SUSTAIN_SECONDS in all; an undecided one runs on at its rate (:meth:`_hold`)
#: One hold's SUSTAIN_SECONDS at most, undecided ones pooled (the pick's next try then goes to a lower rate); the
#: last try pools too, so the pick's holds take at most SUSTAIN_TRIES + 1 such chunks. A baseline gets one such
#: hold, within its share of the budget.
HOLD_CHUNKS = 2
#: Seconds a hold keeps clear of the stage's last moment: the last answers, the server's stop, the stage's files.
#: (Holds that could end exactly at it took the quickstart's stage to 165.1 s of a 165-s promise, session 36.)
LATE_MARGIN_S = 2.0
#: Seconds of the serving budget kept for the pick's sustain check and curve (at most a quarter of it).
CURVE_RESERVE_S = 30.0
#: Every fresh server gets this much untimed open-loop load, at WARMUP_FRACTION of the rate its first timed point
#: will try, before that point. A fresh server is slow for its first second or two (BERT-like, OpenVINO, one core,
#: 90% of its max rate, 1-s windows on three fresh servers: mean latency 11-34 ms in the first, 8-10 ms after;
#: p99 50-73 against ~27 ms; a new input shape alone costs OpenVINO 3x a known one), and the 10% of a point's
#: requests left out as warm-up is 0.3 s of a 3-s point: every bisection's first point failed (session 27).
WARMUP_SECONDS = 2.0
WARMUP_FRACTION = 0.5
#: The longest a fresh server may take to get ready (its load, its warm-up call, the merge check), where the
#: stage's promise leaves more.
SERVER_START_MAX_S = 180.0
#: Seconds a fresh server takes to start and warm before a curve measured apart from a hold (the artifact's load and
#: WARMUP_SECONDS; a few seconds for the models served so far).
STARTUP_ALLOWANCE_S = 8.0
#: A fresh server slower than this to get ready is named where it left configurations unconfirmed (a ModernBERT's
#: torch.compile artifact: 18 s a server, 43 s of calibration, of a 120-s serving budget, session 39).
SLOW_START_S = 5.0
#: A batch's cost per sample at least this many times below a single call's is a saving worth naming.
BATCH_SAVES = 1.2
#: The points a bisection needs to bracket a max rate (a pass, a failure, one between): what a confirmation costs
#: beyond its fresh server's start and warm-up, in :func:`bisections_that_fit`.
BRACKET_POINTS = 3
#: What a load point costs beyond its schedule: its last answers, and the second :func:`find_max_rate` keeps clear of
#: its deadline. (The quickstart's naive server got 25 s for three 8-s points and ran two: 73.5 failed, 51.4 passed,
#: a bracket of 43% under every ratio the report gave against it, session 36.)
POINT_SLACK_S = 1.0


@dataclass(frozen=True)
class ServingConfig:
    instances: int
    threads: int
    max_batch: int
    max_delay_ms: float

    @property
    def cores(self) -> int:
        return self.instances * self.threads

    @property
    def layout(self) -> tuple[int, int]:
        return (self.instances, self.threads)

    def args(self) -> list[str]:
        return ["--instances", str(self.instances), "--threads", str(self.threads),
                "--max-batch", str(self.max_batch), "--max-delay-ms", f"{self.max_delay_ms:g}"]

    def label(self) -> str:
        return (f"{self.instances}x{self.threads} thr, batch<={self.max_batch}, "
                f"delay {self.max_delay_ms:g} ms")


@dataclass(frozen=True)
class Target:
    """The artifact to serve: its directory, the variant and environment it holds, the largest batch it takes."""

    artifact: Path
    variant: str
    environment: str
    batch_size: int
    threads: int  # the threads the throughput pick ran with
    model_name: str
    input_names: tuple[str, ...]
    pad_values: Mapping[str, float] = field(default_factory=dict)
    call_seconds: float | None = None  # the pick's time per call at batch_size (the batch-loop baseline's delay)
    device: str = "cpu"  # where the artifact runs (the run's resolved device): an accelerator changes the layouts


@dataclass
class Measured:
    """One configuration measured with real load."""

    config: ServingConfig
    role: str
    predicted: float | None
    max_rate: float
    max_rate_ci: tuple[float, float]
    points: list[LoadPoint]
    stopped_by: str
    #: The max rate its bisection found, before any hold (the short points alone).
    bisected: float | None = None
    #: Its holds (SUSTAIN_SECONDS at a rate, undecided ones pooled), in the order run; also among ``points``: the
    #: pick's on a fresh server, a baseline's once on its own where its share had room.
    holds: list[LoadPoint] = field(default_factory=list)

    @property
    def held(self) -> bool | None:
        """Whether a hold passed: True, False when every one failed, None when none was run."""
        return any(p.passed for p in self.holds) if self.holds else None

    def to_dict(self, target: Target) -> dict[str, Any]:
        return {"variant": target.variant, "environment": target.environment,
                "instances": self.config.instances, "threads": self.config.threads,
                "max_batch": self.config.max_batch, "max_delay_ms": self.config.max_delay_ms,
                "predicted_max_rate": _r(self.predicted), "max_rate": _r(self.max_rate),
                "max_rate_ci": [_r(x) for x in self.max_rate_ci], "role": self.role, "pruned_reason": None,
                "stopped_by": self.stopped_by, "bracketed": self.bracketed, "held": self.held,
                "bisected_max_rate": _r(self.bisected),
                "points": as_dicts(self.points)}

    @property
    def bracketed(self) -> bool:
        """Whether a rate above the max failed: without one, the max rate is a lower bound."""
        return any(not p.passed and p.rate > self.max_rate for p in self.points)


def bisection_floor(first_rate: float) -> float:
    """The lowest rate a bisection that began at ``first_rate`` steps down to (its resumption too)."""
    return max(0.5, first_rate * 0.05)


def _rps(rate: float) -> str:
    """A request rate in words: one decimal from 10 requests/s up, two below (a slow model's holds at 1.711 and
    1.667 read "1.7 did not hold ... the next hold tries 1.7", session 46)."""
    return f"{rate:.1f}" if rate >= 10 else f"{rate:.2f}"


def with_calls(point: LoadPoint, calls: Sequence[tuple[int, float]]) -> LoadPoint:
    """``point`` with the server's account of its calls (:meth:`ServerProcess.served_calls`): how many, their mean
    rows, their median time. Why in the report: whether the dynamic batcher formed batches at the rate the report
    gives is the question a deployer asks of a max batch, and the calibration's call times are the simulation's
    input, the served ones what happened (a GPU's served calls were the lead for its predictions, session 47)."""
    if not calls:
        return point
    rows = np.array([c[0] for c in calls], dtype=float)
    seconds = np.array([c[1] for c in calls], dtype=float)
    return replace(point, calls=len(calls), rows_per_call=round(float(rows.mean()), 3),
                   call_p50_ms=round(float(np.median(seconds)) * 1000, 3))


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def split_cpus() -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """(the server's CPUs, the load client's): with two or more, the client gets the last one to itself.

    The load client runs on the same machine as the server it measures. Sharing every core, the served rate
    depended on the client's own CPU cost: the quickstart's recommendation, 335 requests/s with autotune's
    asyncio client, missed its SLO at 301 requests/s (p99 639 ms) under tritonclient, whose greenlets cost more
    per request (2026-11-26). On cores of its own the client's cost no longer counts against the server, and
    any client that keeps up sees the same server. The price: the server is measured on one core fewer than
    the machine has, and the report says so.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None, None
    if len(cpus) < 2:
        return None, None
    return frozenset(cpus[:-1]), frozenset(cpus[-1:])


def _powers(limit: int) -> list[int]:
    out, k = [], 1
    while k < limit:
        out.append(k)
        k *= 2
    return [*out, limit]


#: On an accelerator, ``"auto"`` instances go up to this many processes sharing the device (Triton Model Analyzer's
#: default instance-count search stops at 5).
ACCELERATOR_MAX_INSTANCES = 4


def layouts(spec: Any, cores: int, *, accelerator: bool = False) -> list[tuple[int, int]]:
    """instances x threads within ``cores`` (``"auto"``: powers of two and ``cores`` itself).

    On an accelerator ``"auto"`` means 1, 2 and 4 instances of one thread each, and the naive server's one
    instance of every core. Why: the model's work runs on the device, so a process's intra-op threads only run its
    Python and launches, which one core does; what changes the served rate is how many processes feed the device
    at once (their kernels overlap, and one's launches hide another's copies), the knob GPU servers expose as
    instance count. The CPU grid (every power of two of instances x threads) would be 14 layouts on a 16-core
    machine, each a calibration that starts a CUDA context per instance."""
    if accelerator:
        inst = _powers(min(cores, ACCELERATOR_MAX_INSTANCES)) if spec.instances == "auto" else list(spec.instances)
        thr = [1] if spec.threads == "auto" else list(spec.threads)
        out = [(n, t) for n in inst for t in thr if n * t <= cores]
        if spec.instances == "auto" and spec.threads == "auto":
            out.append((1, cores))
        return list(dict.fromkeys(out)) or [(1, 1)]
    inst = _powers(cores) if spec.instances == "auto" else list(spec.instances)
    thr = _powers(cores) if spec.threads == "auto" else list(spec.threads)
    out = [(n, t) for n in inst for t in thr if n * t <= cores]
    return out or [(1, 1)]


def batch_grid(spec: Any, largest: int) -> list[int]:
    sizes = _powers(largest) if spec.max_batch == "auto" else [b for b in spec.max_batch if b <= largest]
    return sorted(set(sizes)) or [1]


def _bodies(target: Target, samples: int | str) -> tuple[list[tuple[bytes, dict[str, str]]], int]:
    from autotune.serving.v2 import encode_infer_request

    batches = load_batches(target.artifact / "traffic.npz", target.input_names)
    reqs = cut_requests(batches, samples, pad_values=target.pad_values)
    rows = int(next(iter(reqs[0].values())).shape[0])
    return [encode_infer_request(r, binary=True) for r in reqs], rows


def nonempty_poisson(rate: float, seconds: float, seed: int, *, tries: int = 20) -> np.ndarray:
    """Poisson arrivals for one load point, the next seed's where a draw holds none (still fixed before the run, and
    independent of any answer).

    Why: a slow model's point at 0.5 requests/s for 8 s expects 4 requests, and one draw in 55 has none. A video
    classifier's naive server drew such a point first; a point with no request is not a pass, so its bisection
    ended at "0 requests/s", and every ratio against the naive server with it (session 38)."""
    from autotune.serving import schedule

    for k in range(tries):
        offsets = schedule.poisson(rate, seconds, seed + k)
        if offsets.size:
            return offsets
    return offsets


def bracket_seconds(point_s: float) -> float:
    """What BRACKET_POINTS points of ``point_s`` take, each with its POINT_SLACK_S."""
    return BRACKET_POINTS * (max(point_s, 0.0) + POINT_SLACK_S)


def bisections_that_fit(left_s: float, start_s: float, point_s: float, wanted: int) -> int:
    """How many of ``wanted`` bisections fit in ``left_s`` seconds, each a fresh server (``start_s`` to start, then
    WARMUP_SECONDS of warm-up) and BRACKET_POINTS points of ``point_s``; at least one when any is wanted."""
    each = max(start_s, 0.0) + WARMUP_SECONDS + bracket_seconds(point_s)
    return max(min(1, wanted), min(wanted, int(max(left_s, 0.0) // each)))


def _curve_point_seconds(rate: float, spare_s: float = 0.0, *, resolve: int = 0) -> float:
    """A curve point's length: ~CURVE_REQUESTS requests within CURVE_POINT_S; where that holds fewer than
    ``resolve`` requests (the fewest whose slowest one bounds the percentile, :func:`requests_to_bound`), long
    enough for ``resolve`` as far as ``spare_s`` (the point's share of the budget left) and CURVE_POINT_MAX_S allow.

    Why: a slow model's 6-s point holds a few dozen requests, whose p99 is their slowest one and reads low. The
    served detector (6.4 requests/s, 2026-11-28) was predicted p99 404 ms at 90% from 33 requests; tritonclient saw
    559 ms over 179, while 43 s of the stage's budget were left unused."""
    seconds = point_seconds(rate, requests=CURVE_REQUESTS, low=CURVE_POINT_S[0], high=CURVE_POINT_S[1])
    if rate * seconds >= resolve:
        return seconds
    return max(seconds, min(resolve / max(rate, 1e-9), CURVE_POINT_MAX_S, spare_s))


class ServingSearch:
    """One serving search over one target; ``run()`` returns report.json's ``serving`` section."""

    def __init__(self, spec: Any, target: Target, *, on_event: Callable[[str], None] | None = None,
                 cores: int | None = None, seed: int = 0) -> None:
        self.spec, self.target = spec, target
        self.say = on_event or (lambda text: None)
        self.server_cpus, self.client_cpus = split_cpus()
        self.cores = cores or (len(self.server_cpus) if self.server_cpus else usable_cores())
        self.seed = seed
        self.q = percentile_of(spec.percentile)
        self.measured: list[Measured] = []
        self.predicted: dict[ServingConfig, float] = {}
        self.calibrations: dict[tuple[int, int], Calibration] = {}
        self.overhead_s = 0.0
        self.calibration_s = 0.0
        self.load_s = 0.0
        self.hold_s = 0.0
        self.baseline_hold_s = 0.0
        self.curve_s = 0.0
        self.warm_s = 0.0
        self.curve: list[LoadPoint] = []
        self._curve_fractions: list[float] = []
        self._held: Measured | None = None  # the configuration whose max rate held (its curve is self.curve)
        self._curve_for: Measured | None = None  # whose curve self.curve is (a held pick's, or one that did not hold)
        self._hold_failed: set[ServingConfig] = set()  # configurations a hold showed below their bisected max
        self.merge_why: str | None = None  # the server's: why requests of different lengths are served apart
        self.output_dynamic_dims: dict[str, list[int]] = {}  # the server's: output dims that follow the length
        # the server's: why no two requests share a call (an output couples a call's rows), the output dims that
        # follow the call's rows, and the grid's configurations that batching would have needed
        self.merge_requests_why: str | None = None
        self.output_batch_dims: dict[str, list[int]] = {}
        self.unmerged: list[ServingConfig] = []
        self.never_within: dict[ServingConfig, str] = {}  # configurations not measured: why none can meet the SLO
        self.start_s = 0.0  # the naive server's start (a fresh server's cost before a hold or a bisection)
        self.interrupted = False
        self.notes: list[str] = []
        self.bodies: list[tuple[bytes, dict[str, str]]] = []
        self.request_rows = 1
        self._closed = getattr(spec, "arrivals_kind", spec.arrivals) == "closed"
        self._promise = float("inf")  # the stage's last moment: run() sets it from the budget
        self.slowest_stop_s = 0.0  # the longest a server of this stage took to stop (_margin)

    # ---- load --------------------------------------------------------------------------------------------

    def _offsets(self, rate: float, seconds: float, seed: int) -> np.ndarray:
        """The arrival times of one load point: Poisson, or the recipe's trace played at ``rate``."""
        from autotune.serving import schedule

        path = getattr(self.spec, "arrivals_path", None)
        if getattr(self.spec, "arrivals_kind", "poisson") == "replay" and path is not None:
            return schedule.rescale(schedule.replay(path), rate, seconds)
        return nonempty_poisson(rate, seconds, seed)

    def _load(self, server: ServerProcess, rate: float, seconds: float, seed: int, *, account: bool = True
              ) -> tuple[LoadResult, list[tuple[int, float]]]:
        """Open-loop load at ``rate`` for ``seconds`` from the client's CPUs (its time counts in ``load_s``), and
        the calls the server made for it (:meth:`ServerProcess.served_calls`; none asked for without ``account``)."""
        from autotune.serving.loadgen import run_load

        t0 = time.monotonic()
        if account:
            server.served_calls(self.target.model_name)  # forget the calls before this load (the warm-up's)
        with pinned(self.client_cpus):
            result = run_load(server.url, self.target.model_name, self.bodies, self._offsets(rate, seconds, seed),
                              timeout_s=max(5.0, 20 * self.spec.slo_ms / 1000), seconds=seconds)
        calls = (server.served_calls(self.target.model_name) or []) if account else []
        self.load_s += time.monotonic() - t0
        return result, calls

    def _point(self, server: ServerProcess, rate: float, seconds: float) -> LoadPoint:
        result, calls = self._load(server, rate, seconds, self.seed + len(self.measured) * 101 + int(rate))
        point = with_calls(point_from(result, rate=rate, seconds=seconds, slo_ms=self.spec.slo_ms,
                                      percentile=self.q), calls)
        self._say_point(point)
        return point

    def _say_point(self, point: LoadPoint) -> None:
        self.say(f"  {point.rate:8.1f} req/s: p{self.q:g} {point.pct_ms:8.1f} ms "
                 f"({'pass' if point.passed else 'fail'}), {point.ok}/{point.sent} ok" if point.kept else
                 f"  {point.rate:8.1f} req/s: no request in its {point.seconds:.0f} s (not a pass)")

    def _hold(self, m: Measured, srv: ServerProcess, rate: float, until: float, chunks: int) -> LoadPoint | None:
        """``rate`` held on ``srv`` for SUSTAIN_SECONDS, and SUSTAIN_SECONDS more at a time, pooled, while the
        percentile reads within the SLO but its interval still reaches over it (up to ``chunks`` in all, each
        ending the stage's margin (:meth:`_margin`) before ``until``); the pooled point, None when not even one
        chunk fits. The pooled point joins ``m``'s points and holds as each chunk ends (replacing the one before
        it), so an interrupt during a later chunk keeps what the earlier ones measured.

        Why: a hold passes only when the percentile's whole 95% interval is within the SLO, and a 10-s point of a
        slow model holds a few hundred requests, whose p99 interval is wide. The quickstart's naive server read
        p99 36.5 ms (interval 32.2-40.8) at 77 requests/s, 35.8 ms at 69.3, 39.5 ms at 62.6, each "failed" on the
        40-ms SLO and stepped 10% down into another undecided rate, until the budget ran out and no rate held
        (session 36). More requests at the same rate narrow the interval; a rate 10% lower does not decide it."""
        results: list[Any] = []
        calls: list[tuple[int, float]] = []
        point: LoadPoint | None = None
        while len(results) < chunks and time.monotonic() + SUSTAIN_SECONDS + self._margin() <= until:
            if results:
                self.say(f"  undecided: {SUSTAIN_SECONDS:g} s more at {_rps(rate)} req/s")
            seed = self.seed + len(self.measured) * 101 + int(rate) + 7919 * len(results)
            result, served = self._load(srv, rate, SUSTAIN_SECONDS, seed)
            results.append(result)
            calls += served
            before, point = point, with_calls(point_from(_pooled(results), rate=rate,
                                                         seconds=SUSTAIN_SECONDS * len(results),
                                                         slo_ms=self.spec.slo_ms, percentile=self.q), calls)
            self._record_hold(m, point, replacing=before)
            self._say_point(point)
            if point.passed or point.clear or point.pct_ms > self.spec.slo_ms:
                break
        return point

    def _record_hold(self, m: Measured, point: LoadPoint, *, replacing: LoadPoint | None = None) -> None:
        """A hold joins the configuration's points (its max rate is then the highest pass below every failure), in
        place of ``replacing`` (the same hold's point before its last chunk was pooled in).

        An undecided hold (its percentile within the SLO, its interval over it) at a rate a bisection point passed
        surely, with no pass below it, leaves the max rate at that rate rather than at nothing: the hold did not
        show the rate too high, it failed to confirm it. (A ViT's naive server passed 25.5 requests/s on an 8-s
        point, p99 32.4 ms on a 50-ms SLO; its 10-s hold read 44.8 ms, interval to 61.8, and the budget ended
        there: the report said "no configuration met p99 <= 50 ms at any rate tried", session 37.)"""
        for seen in (m.points, m.holds):
            at = next((i for i, p in enumerate(seen) if p is replacing), None) if replacing is not None else None
            if at is None:
                seen.append(point)
            else:
                seen[at] = point
        m.max_rate, m.max_rate_ci = max_rate_of(m.points)
        undecided = not point.passed and point.pct_ms <= self.spec.slo_ms
        if m.max_rate <= 0 and undecided and any(p.passed and p.rate >= point.rate for p in m.points):
            m.max_rate, m.max_rate_ci = point.rate, (point.rate, bound_above(m.points, point.rate))

    def _missed(self, point: LoadPoint) -> str:
        """Why a hold did not pass: its percentile over the SLO, or within it but not surely."""
        if point.pct_ms > self.spec.slo_ms:
            return f"p{self.q:g} {point.pct_ms:.1f} ms"
        return (f"p{self.q:g} {point.pct_ms:.1f} ms, within the SLO but its 95% interval reached "
                f"{point.pct_ci_ms[1]:.1f} ms: not sure")

    def _warm(self, server: ServerProcess, rate: float) -> None:
        """Untimed load on a fresh server (WARMUP_SECONDS at WARMUP_FRACTION of ``rate``, the bodies cycled, so
        each input shape has been seen): its answers are not kept, only the time it took."""
        t0 = time.monotonic()
        self._load(server, max(1.0, WARMUP_FRACTION * rate), WARMUP_SECONDS, self.seed + 7, account=False)
        self.warm_s += time.monotonic() - t0

    def _closed_point(self, server: ServerProcess) -> LoadPoint:
        """``arrivals = "closed"``: ``concurrency`` clients, each sending when answered (a closed loop hides
        queueing, so this is the user's traffic model, not a way to find a max rate)."""
        from autotune.serving.loadgen import run_closed

        t0 = time.monotonic()
        seconds = 5.0
        with pinned(self.client_cpus):
            result = run_closed(server.url, self.target.model_name, self.bodies, int(self.spec.concurrency or 1),
                                seconds, timeout_s=max(5.0, 20 * self.spec.slo_ms / 1000))
        self.load_s += time.monotonic() - t0
        point = point_from(result, rate=float(result.achieved_rate), seconds=seconds, slo_ms=self.spec.slo_ms,
                           percentile=self.q)
        self.say(f"  closed loop x{self.spec.concurrency}: {point.achieved_rate:.1f} req/s, "
                 f"p{self.q:g} {point.pct_ms:.1f} ms ({'pass' if point.passed else 'fail'})")
        return point

    def _bisect(self, config: ServingConfig, role: str, start: float, deadline: float,
                server: ServerProcess | None = None, *, hold: bool = False, resume: Measured | None = None) -> Measured:
        """``config``'s max rate bisected from ``start`` until ``deadline``, on ``server`` or a fresh one; with
        ``resume`` (a configuration measured before), its bisection goes on from its points, ``start`` the next."""
        predicted = self.predicted.get(config) or 0.0
        self.say(f"{role}: {config.label()} (" + (
            f"on below {min(p.rate for p in resume.points):.2f} req/s, from {start:.2f}"
            if resume is not None and resume.points else f"predicted {predicted:.0f} req/s" if predicted > 0 else
            f"predicted to miss the SLO at any rate; from {start:.2f} req/s") + ")")

        def run(srv: ServerProcess) -> Measured:
            if self._closed:  # the clients set the rate: one point, at their concurrency
                point = self._closed_point(srv)
                best = point.achieved_rate if point.passed else 0.0
                m = Measured(config, role, self.predicted.get(config), best, (best, best), [point], "closed")
                self.measured.append(m)
                return m
            prior = tuple(resume.points) if resume is not None else ()
            m = resume if resume is not None else \
                Measured(config, role, self.predicted.get(config), 0.0, (0.0, 0.0), [], "running")
            if resume is None:
                self.measured.append(m)  # kept, with the points so far, whatever interrupts the bisection

            def measure(rate: float, seconds: float) -> LoadPoint:
                point = self._point(srv, rate, seconds)
                m.points.append(point)
                m.max_rate, m.max_rate_ci = max_rate_of(m.points)
                return point

            try:
                got = find_max_rate(measure, start=start, deadline=deadline, prior=prior,
                                    floor=bisection_floor(prior[0].rate if prior else start))
            except KeyboardInterrupt:
                m.stopped_by = "interrupted"
                raise
            m.max_rate, m.max_rate_ci, m.stopped_by = got.max_rate, got.max_rate_ci, got.stopped_by
            m.bisected = got.max_rate
            if hold:
                self._hold_baseline(m, srv, deadline)
            return m

        if server is not None:
            return run(server)
        with self._server(config) as srv:
            self._warm(srv, start)
            return run(srv)

    def _never_within_slo(self, config: ServingConfig) -> str | None:
        """Why ``config`` meets the SLO at no rate, where the calibration alone makes that sure; None otherwise.

        A call leaves the batcher when it is full or when its first request has waited the max delay. Where the max
        delay and a full call (its median) each take longer than the SLO, that first request misses the SLO in every
        call dispatched at the delay, and in at least half the full ones: one request in 2 x max batch at least, more
        than a p99 (under 50 a call) leaves. The batch loop served as it is waits one call of the artifact's batch
        for its batch: a DETR's (193 ms, its full call 354 ms, SLO 150 ms) was bisected from 8.5 requests/s down to
        4.2 on three 8-s points, all failed, while the configurations that serve were left points short (session
        46)."""
        cal = self.calibrations.get(config.layout)
        full = cal.service_s.get(config.max_batch) if cal is not None else None
        per_call = max(1, config.max_batch // max(1, self.request_rows))
        slo = float(self.spec.slo_ms)
        if full is None or config.max_delay_ms < slo or full * 1000 < slo or 1 / (2 * per_call) <= 1 - self.q / 100:
            return None
        return (f"each call's first request waits {config.max_delay_ms:.0f} ms for its batch, or runs in a full call "
                f"of {config.max_batch}, which takes {full * 1000:.0f} ms: both over the {slo:g}-ms SLO, so at least "
                f"one request in {2 * per_call} misses it at any rate, more than its p{self.q:g} allows")

    def _rescue(self, naive: Measured, deadline: float) -> None:
        """No configuration passed at any rate tried: the naive server's bisection goes on below its lowest rate, on a
        fresh server, while the stage's budget has room for that and for a hold of what passes.

        Why: a bisection starts where the simulation (or the batch-1 call) puts it and steps down 30% a point, so a
        slow model's few 8-s points can all lie above the rates that serve. A DETR (transformers, ~95 ms a call) under
        p99 <= 150 ms: its naive server stopped at 3.6 requests/s, undecided (p99 169 ms, CI 128-172), and the report
        said "Serving failed" with 45 s of the stage's budget unspent (session 46)."""
        if not naive.points or naive.max_rate > 0:
            return
        rate = next_rate(naive.points, naive.points[-1].rate, floor=bisection_floor(naive.points[0].rate))
        until = deadline - self._hold_need()
        if rate is None or time.monotonic() + self.start_s + WARMUP_SECONDS + point_seconds(rate) + \
                POINT_SLACK_S > until:
            return
        lowest = min(p.rate for p in naive.points)
        self.notes.append(f"no configuration met the SLO at any rate tried, so the naive server's bisection went on "
                          f"below {lowest:.2f} requests/s on a fresh server, with the serving budget left")
        self._bisect(naive.config, naive.role, rate, until, resume=naive)

    def _hold_baseline(self, m: Measured, srv: ServerProcess, deadline: float) -> None:
        """A baseline's max rate held once for SUSTAIN_SECONDS on its own server, where its share of the budget has
        the room; a failure joins its points, so its max rate is then the highest pass below it.

        Why: the pick's max rate must hold for SUSTAIN_SECONDS (lowered until it does), and a rate bisected on
        2-s points runs above what holds: the BERT-like pick passed 2-s points at 524 requests/s and held at none
        of 524, 491 and 442 (p99 186, 77 and 37 ms over 10 s, session 36). Set against a naive server judged on
        its 2-s points alone, the report's "1.28x the naive server" compared a held rate with an unheld one."""
        if m.max_rate <= 0 or time.monotonic() + SUSTAIN_SECONDS + self._margin() > deadline:
            return
        self.say(f"hold: {m.config.label()} at {_rps(m.max_rate)} req/s for {SUSTAIN_SECONDS:g} s")
        t0 = time.monotonic()
        rate = m.max_rate
        try:
            point = self._hold(m, srv, rate, deadline, HOLD_CHUNKS)
        finally:
            self.baseline_hold_s += time.monotonic() - t0
        if point is None:
            return
        if not point.passed:
            now = (f"stays {_rps(rate)}, not held (undecided, and no rate below it passed)" if m.max_rate >= rate else
                   f"is now the highest passing rate below it ({_rps(m.max_rate)}), not held")
            self.notes.append(f"the {m.role} baseline ({m.config.label()}): {_rps(rate)} requests/s did not hold for "
                              f"{point.seconds:g} s ({self._missed(point)}): its max rate {now}")

    def _server_args(self, config: ServingConfig) -> list[str]:
        return [*config.args(), "--model-name", self.target.model_name]

    def _left(self) -> float:
        """Seconds to the stage's promise (its budget and grace, :meth:`_late`), less its margin (:meth:`_margin`):
        the most a server's start or a calibration may take. (An SSDlite artifact compiled with torch.compile took
        the stage to 116 s of a 99-s promise in one failed calibration, whose own limit was 120 s, session 37.)"""
        return max(1.0, self._promise - time.monotonic() - self._margin())

    def _server(self, config: ServingConfig) -> ServerProcess:
        """A fresh server of ``config``, whose start may take what the stage's promise has left (:meth:`_left`)."""
        left = self._left()
        why = "" if left >= SERVER_START_MAX_S else ("what the serving stage had left of its time_budget_s and "
                                                     "grace: the artifact's load and first calls take longer")
        return ServerProcess(self.target.artifact, self._server_args(config), cpus=self.server_cpus,
                             start_timeout=min(SERVER_START_MAX_S, left), timeout_why=why, on_stop=self._stopped)

    def _stopped(self, seconds: float) -> None:
        self.slowest_stop_s = max(self.slowest_stop_s, seconds)

    def _margin(self) -> float:
        """What the stage keeps clear of its last moment: LATE_MARGIN_S, and the slowest server stop seen so far
        beyond it. (A served torch.compile BART's servers took long to stop, and the stage ended at 264.1 s of its
        264-s promise, session 38.)"""
        return LATE_MARGIN_S + self.slowest_stop_s

    # ---- the steps ---------------------------------------------------------------------------------------

    def _calibrate(self, grid: Sequence[int], deadline: float) -> None:
        per_layout = max(0.3, min(1.0, (deadline - time.monotonic()) / (3 * max(1, len(self._layouts)) *
                                                                        len(grid))))
        for n, t in self._layouts:
            if time.monotonic() > deadline and self.calibrations:
                self.notes.append(f"layout {n}x{t} not calibrated: the calibration's share of the budget ran out")
                continue
            self.say(f"calibrating {n} instance(s) x {t} thread(s) at batch {', '.join(map(str, grid))}")
            # bounded by the stage's promise alone, which the recipe sets: a fixed 120 s failed a timm mobilenetv3's
            # static-shape compile artifact, whose five call sizes took 232 s to compile and time on one core with
            # inductor's cache cold (21 s warm), with most of a 300-s serving budget left, and no field could
            # raise it (session 43)
            left = self._left()
            try:
                cal = calibrate(self.target.artifact, instances=n, threads=t, batches=grid, seconds=per_layout,
                                timeout=left, cpus=self.server_cpus)
            except ServingError as exc:
                if "took longer" in str(exc):
                    raise ServingError(f"{exc}: what the serving budget had left (its time_budget_s with its "
                                       "grace); the artifact's load and first calls take longer than that (a "
                                       "torch.compile artifact compiles at each call size: raise "
                                       "serving.time_budget_s)") from exc
                raise
            self.calibrations[(n, t)] = cal
            self.calibration_s += cal.seconds

    def _model(self, layout: tuple[int, int]) -> ServiceModel:
        """The layout's service model. When its instances take every server core, the front end's work per
        request (HTTP, decoding, the pipe) runs on their cores and lengthens their calls: each call then also
        pays the per-request overhead for every request in it (on the BERT-like model, one core: predicted
        1,185 requests/s without this, 375-486 measured; a call of 2 at 1.5 ms plus two requests' 0.87 ms).
        Each calibrated size keeps its own spread: a configuration's small calls are not given its large ones'."""
        cal = self.calibrations[layout]
        sizes = sorted(cal.service_s)
        spreads = tuple(ServiceModel.sigma_from_ratio(cal.spread.get(b, 1.0)) for b in sizes)
        shared = layout[0] * layout[1] >= self.cores
        return ServiceModel(tuple(sizes), tuple(cal.service_s[b] + (b * self.overhead_s if shared else 0.0)
                                                for b in sizes),
                            spread=max(spreads, default=0.0), spreads=spreads, overhead_s=self.overhead_s,
                            front_end_rate=None if shared or self.overhead_s <= 0 else 1.0 / self.overhead_s)

    def _start_rate(self, config: ServingConfig) -> float:
        """Where a bisection starts: the simulation's prediction, scaled by what the batched configurations
        confirmed so far served against theirs (:meth:`_served_over_predicted`); else (a layout not calibrated)
        70% of what the calibrated batch-1 call and the front end allow."""
        predicted = self.predicted.get(config) or 0.0
        if predicted > 0:
            return predicted * (self._served_over_predicted() if config.max_batch > self.request_rows else 1.0)
        cal = self.calibrations.get(config.layout) or next(iter(self.calibrations.values()), None)
        if cal is None:
            return 10.0
        rate = config.instances / cal.service_s[min(cal.service_s)]
        if self.overhead_s > 0:
            rate = min(rate, 1.0 / self.overhead_s)
        return 0.7 * rate

    def _served_over_predicted(self) -> float:
        """The median of measured / predicted max rate over the batched configurations confirmed so far (1.0
        before the first), within [0.2, 2].

        Why: the simulation ranks the grid, but its absolute rate for batched configurations has been about
        twice what they served (BERT-like, one core: 908 and 854 predicted, 479 and 518 served), and a
        bisection that starts there spends its first points overloading the server (p99 over a second) and
        stepping down. Starting the next one where the last ones landed saves those points; the ranking, a
        common factor, is unchanged."""
        ratios = [m.max_rate / m.predicted for m in self.measured
                  if m.role == "search" and m.predicted and m.max_rate > 0 and m.config.max_batch > self.request_rows]
        return float(min(2.0, max(0.2, float(np.median(ratios))))) if ratios else 1.0

    def _simulate(self, configs: Sequence[ServingConfig]) -> None:
        for c in configs:
            if c.layout not in self.calibrations:
                continue
            sim = Simulator(BatchPolicy(c.max_batch, c.max_delay_ms / 1000), c.instances, self._model(c.layout),
                            samples_per_request=self.request_rows, seed=self.seed)
            rate, _ = sim.max_rate(self.spec.slo_ms / 1000, self.q)
            self.predicted[c] = rate

    def _fit_overhead(self, naive: ServingConfig, measured: Measured) -> bool:
        """When the naive server served less than its simulation predicted, the per-request overhead the
        trickle read is too small (a trickle overlaps what a loaded front end queues): raise it until the
        simulated naive max rate is the measured one (bisection; the simulated rate falls as the overhead grows),
        and simulate the grid again with it. Measured on the same server the grid is served by, at batch 1."""
        predicted = self.predicted.get(naive) or 0.0
        if measured.max_rate <= 0 or predicted <= measured.max_rate * 1.1 or naive.layout not in self.calibrations:
            return False
        before, lo, hi = self.overhead_s, self.overhead_s, self.overhead_s + 1.0 / measured.max_rate
        for _ in range(12):
            self.overhead_s = (lo + hi) / 2
            self._simulate([naive])
            if (self.predicted.get(naive) or 0.0) > measured.max_rate:
                lo = self.overhead_s
            else:
                hi = self.overhead_s
        self.overhead_s = hi
        self._simulate([naive])
        self.notes.append(f"the naive server served {measured.max_rate:.0f} requests/s where the simulation said "
                          f"{predicted:.0f}: the per-request overhead was raised from {before * 1e3:.2f} to "
                          f"{self.overhead_s * 1e3:.2f} ms to match, and the grid simulated again")
        return True

    def _overhead(self, server: ServerProcess) -> None:
        """The per-request latency outside the model call: a trickle's median minus batch 1's call."""
        from autotune.serving.loadgen import run_closed

        with pinned(self.client_cpus):
            res = run_closed(server.url, self.target.model_name, self.bodies, 1, 1.5, timeout_s=30.0)
        lat = np.asarray(res.latencies_ms, dtype=float)
        cal = self.calibrations.get((1, self.cores)) or next(iter(self.calibrations.values()))
        call = cal.service_s[min(cal.service_s)]
        if lat.size >= 5:
            self.overhead_s = max(0.0, float(np.median(lat)) / 1000 - call)

    def _fit_confirmations(self, chosen: list[ServingConfig], loop: bool, left_s: float, naive: Measured,
                           share: float) -> tuple[list[ServingConfig], float]:
        """The configurations to confirm, fewer where the budget left cannot give each a bracketed max rate, and
        each bisection's share of that time.

        Why: with 60 s of serving budget on a 2 ms model (torch's TransformerEncoder, session 34) each of three
        confirmations got one passing point, and the stage recommended "at least 890 requests/s" (no higher rate
        tried), ranking configurations by points that all passed; one confirmation with a failure above it says
        more. The batch loop served as it is (``loop``) keeps its place: it is a baseline the report needs."""
        seconds = [p.seconds for p in naive.points if p.seconds > 0 and p not in naive.holds]  # its bisection's
        point_s = float(np.mean(seconds)) if seconds else 4.0
        fit = bisections_that_fit(left_s, self.start_s, point_s, len(chosen) + int(loop))
        keep = max(1, fit - int(loop)) if chosen else 0
        if keep < len(chosen):
            dropped = len(chosen) - keep
            room = (f"the {left_s:.0f} s left fit {fit} bisection(s) of a fresh server and {BRACKET_POINTS} points "
                    "each" if left_s >= 1 else "the serving budget was spent")
            if self.start_s >= SLOW_START_S:  # what a larger serving.time_budget_s has to pay for, said
                room += (f" (a fresh server of this artifact takes {self.start_s:.0f} s to get ready: its load, the "
                         f"merge check and the warm-up at every call size, where a torch.compile artifact compiles"
                         + (f"; the calibration took {self.calibration_s:.0f} s" if self.calibration_s >= 1 else "")
                         + ")")
            self.notes.append(
                f"{dropped} of the {len(chosen)} configurations the simulation ranked next "
                f"{'was' if dropped == 1 else 'were'} not confirmed: {room}, and a bracketed max rate says more than "
                "several that only passed")
            chosen = chosen[:keep]
        runs = len(chosen) + int(loop)
        return chosen, (max(share, left_s / (runs + 0.2)) if runs else share)

    def _choose(self) -> Measured | None:
        """The highest max rate (with ``serving.rate``: the fewest cores that serve it), each configuration's rate
        as a hold would leave it (:meth:`_as_held`)."""
        candidates = [m for m in self.measured if m.role in ("search", "naive", "batch-loop") and m.max_rate > 0]
        if not candidates:
            return None
        value = self._as_held()
        rate = getattr(self.spec, "rate", None)
        if rate:
            serving = [m for m in candidates if value(m) >= rate]
            if serving:
                return min(serving, key=lambda m: (m.config.cores, -value(m)))
            self.notes.append(f"no configuration measured serves {rate:g} requests/s within the SLO; "
                              "the recommendation is the highest max rate")
        return max(candidates, key=value)

    def hold_discount(self) -> float:
        """What the holds so far left of the bisections: per configuration held, its max rate as they left it (the
        rate that held or, where none did, the highest that passed below every failure: what :meth:`_as_held` ranks
        it at; where no pass lies below them, the lowest failed rate, the one bound the holds gave) over its bisected
        max rate, capped at 1; their median, 1.0 before any.

        Why the rate below a failure and not the failed rate itself: a configuration whose holds failed ranks at the
        rate they left it, so the configurations never held must be discounted the same way, or they rank above it
        on the same evidence. With the failed rate, a first hold that failed at the bisected rate read as 1.0, "the
        bisection held": LayoutLM's pick failed its holds at 379.5, 303.6 and 291.9 (its max rate then 224.6, its
        bisected 379.5), the discount read 0.77, and the batch loop's configuration, bisected to 337.8 and never
        held, ranked at 260 above it; recommended at 337.8, it missed its SLO under tritonclient at 90% of that
        (p99 57 ms on a 40-ms SLO, session 45)."""
        ratios = []
        for m in self.measured:
            if not m.holds or not m.bisected:
                continue
            # (a configuration left at nothing ranks nowhere, and a ratio of 0 would rank every one never held at
            # 0, the order of the list then choosing: LayoutLM's naive server, bisected to 555.7, failed at 555.7,
            # 444.6 and 400.1 with no pass below, session 45)
            left = m.max_rate if m.max_rate > 0 else min(p.rate for p in m.holds)
            ratios.append(min(1.0, left / m.bisected))
        return float(np.median(ratios)) if ratios else 1.0

    def _as_held(self) -> Callable[[Measured], float]:
        """A configuration's max rate as the holds leave it: its own where it was held (passed, or lowered by a
        failure), else its bisected max rate times :meth:`hold_discount`.

        Why: a rate bisected on 2-s points runs above what holds for 10 s, so a held pick set against configurations
        judged on their short points alone loses to whichever was never held. The BERT-like pick (bisected 509) and
        the next (463) failed every hold and were lowered; the naive server, bisected to 452 and never held, then
        led and was recommended, and tritonclient's 30 s at 90% of it read p99 173 ms (session 36)."""
        discount = self.hold_discount()
        return lambda m: m.max_rate if m.holds else m.max_rate * discount

    def _batch_loop(self) -> ServingConfig:
        """The batch loop's pick served as it is: its threads, its batch, and as long a wait for a batch as one call
        of it takes. A batch no larger than a request is a request alone, so it waits for nobody: no delay (as in
        the grid), and at the naive server's threads that is the naive server, not a second baseline to measure."""
        batch = self.target.batch_size if self.merge_requests_why is None else self.request_rows
        delay = round(1000 * (self.target.call_seconds or 0.0), 3) if batch > self.request_rows else 0.0
        return ServingConfig(1, min(self.target.threads or self.cores, self.cores), batch, delay)

    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        deadline = t0 + float(self.spec.time_budget_s)
        self._promise = self._late(deadline)
        self._layouts = layouts(self.spec, self.cores, accelerator=is_accelerator(self.target.device))
        grid = batch_grid(self.spec, self.target.batch_size)
        status, reason = "ok", None
        try:
            self.bodies, self.request_rows = _bodies(self.target, self.spec.request_samples)
            if self.request_rows > self.target.batch_size:
                raise ServingError(f"a request of {self.request_rows} samples is larger than the artifact's "
                                   f"batch ({self.target.batch_size})")
            grid = [b for b in grid if b >= self.request_rows] or [self.request_rows]
            self._calibrate(grid, t0 + 0.3 * self.spec.time_budget_s)
            configs = [ServingConfig(n, t, b, d) for (n, t) in self._layouts for b in grid
                       for d in (self.spec.max_delay_ms if b > self.request_rows else (0.0,))]
            configs = list(dict.fromkeys(configs))
            naive = ServingConfig(1, self.cores, self.request_rows, 0.0)
            loop = self._batch_loop()
            others = [c for c in configs if c != naive]
            reserve = min(CURVE_RESERVE_S, 0.25 * float(self.spec.time_budget_s))
            # what the bisections share, read before the naive server's start, warm-up and overhead point, which its
            # share pays for (read after them, a LayoutLM's naive share came out 2 s shorter, and its bisection ended
            # after two failed points: "0 requests/s", session 46)
            left = deadline - time.monotonic() - reserve
            with self._server(naive) as srv:
                self.merge_why, self.output_dynamic_dims = srv.merge_why, srv.output_dynamic_dims
                self.merge_requests_why, self.output_batch_dims = srv.merge_requests_why, srv.output_batch_dims
                if srv.unserved_outputs:
                    self.notes.append(f"outputs that are not tensors are left out of the served responses (no v2 "
                                      f"datatype carries them): {', '.join(srv.unserved_outputs)}")
                if srv.merge_requests_why:  # no batching window can help: each request is a call of its own
                    self.unmerged = [c for c in configs if c.max_batch > self.request_rows]
                    configs = [c for c in configs if c not in self.unmerged]
                    others = [c for c in configs if c != naive]
                    loop = self._batch_loop()
                    self.notes.append(f"the server serves each request in a call of its own, since merging two "
                                      f"requests into one call changed an answer ({srv.merge_requests_why}): no "
                                      "batching window was searched (max batch above "
                                      f"{self.request_rows} pruned)")
                elif srv.merge_why:
                    self.notes.append(f"the server serves requests of different lengths in separate calls, since "
                                      f"merging them into one padded call changed an answer ({srv.merge_why}): "
                                      "batching helps only among requests of one length")
                self._warm(srv, self._start_rate(naive))
                self._overhead(srv)
                self._simulate([*configs, naive])
                # the bisections planned: the naive one, the confirmations the simulation does not prune, the batch
                # loop. (Counting every configuration the grid holds, a DETR whose every batched one was predicted to
                # miss the SLO gave its naive server a quarter of the budget, three 8-s points, all above what it
                # serves; the batch loop then took the pruned ones' shares, and 45 s were left unspent, session 46.)
                promising = [c for c in others if self.predicted.get(c, 0.0) > 0]
                loop_why = self._never_within_slo(loop) if loop != naive else None  # then no bisection of it
                n_runs = 1 + min(self.spec.confirm, len(promising)) + int(loop != naive and loop_why is None)
                share = left / (n_runs + 0.2)
                # the baseline every knob is judged against gets the points a bracket needs, its server already up
                # (a 16-s share held two 8-s points of the quickstart's naive server, both failed: "0 requests/s")
                naive_s = max(share, bracket_seconds(point_seconds(max(self._start_rate(naive), 0.5))) + 1.0)
                measured_naive = self._bisect(naive, "naive", self._start_rate(naive),
                                              time.monotonic() + min(naive_s, deadline - time.monotonic() - reserve),
                                              server=srv, hold=True)
                self.start_s = srv.started_s  # what a fresh server costs before its first point
            if self._fit_overhead(naive, measured_naive):
                self._simulate(configs)
            ranked = sorted((c for c in configs if self.predicted.get(c, 0.0) > 0 and c != naive),
                            key=lambda c: -self.predicted[c])  # predicted to miss the SLO at any rate: pruned
            rate = getattr(self.spec, "rate", None)
            if rate:  # the cheapest that is predicted to serve the rate, with a margin, first
                fits = [c for c in ranked if self.predicted[c] >= 1.1 * rate]
                ranked = sorted(fits, key=lambda c: (c.cores, -self.predicted[c])) + \
                    [c for c in ranked if c not in fits]
            chosen = _diverse(ranked, self.spec.confirm)
            chosen, share = self._fit_confirmations(chosen, loop != naive and loop_why is None,
                                                    deadline - time.monotonic() - reserve, measured_naive, share)
            if not others and not self.merge_requests_why:  # e.g. an artifact of batch 1 on one server core
                self.notes.append(f"the grid held only the naive server's configuration ({naive.label()}): the "
                                  f"artifact's batch is {self.target.batch_size}, so no batching window was "
                                  "searched")
            for c in chosen:
                left = deadline - time.monotonic()
                if left < 10:
                    self.notes.append(f"{c.label()}: not confirmed, the serving budget ran out")
                    continue
                self._bisect(c, "search", self._start_rate(c), time.monotonic() + min(share, left - 5))
            if loop not in [m.config for m in self.measured] and deadline - time.monotonic() > 10:
                self._simulate([loop])
                if loop_why is not None:
                    self.never_within[loop] = loop_why
                    self.notes.append(f"the batch loop served as it is ({loop.label()}) was not measured: {loop_why}")
                else:
                    self._bisect(loop, "batch-loop", self._start_rate(loop),
                                 time.monotonic() + min(share, deadline - time.monotonic() - 3), hold=True)
            if self._choose() is None and not self._closed:
                self._rescue(measured_naive, deadline)
            pick = self._choose()
            held: set[int] = set()
            # the pick must hold its max rate; one that does not is lowered, and may then lose its place to
            # another configuration, whose max rate must hold in turn
            while (pick is not None and not self._closed and id(pick) not in held
                   and self._late(deadline) - time.monotonic() > self._hold_need()):
                held.add(id(pick))
                if self._measure_curve(pick, deadline):
                    break
                pick = self._choose()
            if self._held is not None and not self._closed:
                self._challenge(deadline)
            if self._held is None and pick is not None and self._curve_for is not pick:
                self._curve_unheld(pick, deadline)
        except KeyboardInterrupt:
            self.interrupted = True
            status, reason = "failed", "interrupted"
        except ServingError as exc:
            status, reason = "failed", str(exc)
        except Exception as exc:  # like the artifact step: the stage fails with its reason, the run stands
            status, reason = "failed", f"the serving search failed: {type(exc).__name__}: {exc}"
        return self._section(status, reason, time.monotonic() - t0)

    def _hold_need(self) -> float:
        """Seconds a hold on a fresh server takes: the server's start, its warm-up, the hold, the stage's margin."""
        return SUSTAIN_SECONDS + WARMUP_SECONDS + self.start_s + self._margin()

    def _late(self, deadline: float) -> float:
        """The hold's and the curve's last moment: the stage's deadline plus its grace (SERVING_HOLD_GRACE)."""
        return deadline + SERVING_HOLD_GRACE * self.spec.time_budget_s

    def _measure_curve(self, pick: Measured, deadline: float) -> bool:
        """On a fresh server: the pick's max rate held for SUSTAIN_SECONDS (lowered until it holds), then the
        curve's 50% and 80% points of what held; whether it held."""
        late = self._late(deadline)
        with self._server(pick.config) as srv:
            self._warm(srv, pick.max_rate)
            t0 = time.monotonic()
            try:
                full = self._sustain(pick, srv, late)
            finally:  # (an interrupted hold's time still counts in the stage's accounting)
                self.hold_s += time.monotonic() - t0
            if full is None:
                if self._choose() is pick:  # it stays the recommendation: its curve on this server, already warm
                    self._curve_unheld(pick, deadline, srv)
                return False
            self._below(pick, srv, deadline, {1.0: full})
            self._held = pick
            return True

    def _below(self, pick: Measured, srv: ServerProcess, deadline: float, points: dict[float, LoadPoint]) -> None:
        """The curve's points below the pick's max rate (50%, 80%, 90%), on ``srv``, as the budget allows: each
        runs at least its CURVE_POINT_S within the stage's grace, and longer only within the budget itself."""
        late = self._late(deadline)
        t0 = time.monotonic()
        below = CURVE_FRACTIONS[:-1]
        for i, f in enumerate(below):
            rate = pick.max_rate * f
            seconds = _curve_point_seconds(rate, (deadline - time.monotonic()) / (len(below) - i),
                                           resolve=requests_to_bound(self.q))
            if time.monotonic() + seconds + self._margin() > late:
                self.notes.append("the curve was cut short by the serving budget")
                break
            points[f] = self._point(srv, rate, seconds)
        self.curve_s += time.monotonic() - t0
        self.curve = [points[f] for f in CURVE_FRACTIONS if f in points]
        self._curve_fractions = [f for f in CURVE_FRACTIONS if f in points]
        self._curve_for = pick

    def _curve_unheld(self, pick: Measured, deadline: float, srv: ServerProcess | None = None) -> None:
        """No pick's max rate held: the points below the recommendation's max rate all the same, on ``srv`` (the
        last hold's, already warm) or a fresh server, so the report still says what a deployer sees at 50-90% of the
        rate it gives.

        Why: a slow model's holds can fail on too few requests (the floor, :func:`short_bound`), and a pick whose
        hold failed is left at the highest rate that passed below it. Without these points the report had no
        percentiles under load to predict a deployment's (the served detector, 2026-11-28), though measuring them
        costs 10-20 s, and a fresh server's start on top: after three failed holds the quickstart's stage had 23 s
        of its grace left, too few for a fresh server and the points (session 36)."""
        late = self._late(deadline)
        need = (0.0 if srv is not None else STARTUP_ALLOWANCE_S) + sum(
            _curve_point_seconds(pick.max_rate * f) for f in CURVE_FRACTIONS[:-1])
        if pick.max_rate <= 0 or self._closed or time.monotonic() + need + self._margin() > late:
            return
        self.say(f"curve: {pick.config.label()} at 50-90% of {_rps(pick.max_rate)} req/s (its max rate did not hold)")
        if srv is not None:
            self._below(pick, srv, deadline, {})
        else:
            with self._server(pick.config) as fresh:
                self._warm(fresh, pick.max_rate)
                self._below(pick, fresh, deadline, {})
        self.notes.append(f"the curve's points below the max rate were measured though no hold passed: they are "
                          f"fractions of {_rps(pick.max_rate)} requests/s, the rate the report gives")

    def _challenge(self, deadline: float) -> None:
        """The configuration never held whose bisected max rate is above the held pick's, held in turn on a fresh
        server while the stage's own budget (not its grace) lasts; it becomes the recommendation, with its curve,
        if it holds a higher rate than the pick did.

        Why: a configuration never held ranks at its bisected rate times :meth:`hold_discount`, and that discount
        can come from a single hold that failed far over the SLO and stepped 20% down (SUSTAIN_FAR_STEP). The
        BERT-like run on an AVX2 EPYC (session 41) held the naive server at 276 requests/s after 345 failed once
        (p99 5.2x the SLO): the discount 0.80 then ranked max batch 4 (bisected 318) at 254, the naive server was
        recommended, and the report said batching did not help, with 21 s of the stage's budget unspent. Held, the
        two are compared on what each sustained. A single challenger: its hold and curve are what the budget has
        room for, and a grid's third best rarely overturns a pick the second could not."""
        held = self._held
        if held is None or getattr(self.spec, "rate", None):
            return  # (with a rate to serve the objective is the fewest cores: :meth:`_choose`)
        rivals = [m for m in self.measured if not m.holds and m.max_rate > held.max_rate]
        if not rivals:
            return
        rival = max(rivals, key=lambda m: m.max_rate)
        bisected = rival.bisected or rival.max_rate
        if time.monotonic() + self._hold_need() > deadline:
            self.notes.append(f"{rival.config.label()}: bisected to {_rps(rival.max_rate)} requests/s, above the "
                              f"recommendation's held {_rps(held.max_rate)}, but never held: the serving budget ran "
                              "out")
            return
        self.say(f"challenge: {rival.config.label()} bisected to {_rps(rival.max_rate)} req/s, above the held "
                 f"{_rps(held.max_rate)}")
        with self._server(rival.config) as srv:
            self._warm(srv, rival.max_rate)
            t0 = time.monotonic()
            try:
                full = self._sustain(rival, srv, deadline, floor=held.max_rate)
            finally:
                self.hold_s += time.monotonic() - t0
            if full is None or rival.max_rate <= held.max_rate:
                self.notes.append(f"{rival.config.label()}: bisected to {_rps(bisected)} requests/s, above the "
                                  f"recommendation's held {_rps(held.max_rate)}, held no rate above it")
                return
            self.notes.append(f"{rival.config.label()} held {_rps(rival.max_rate)} requests/s, above the "
                              f"{_rps(held.max_rate)} that {held.config.label()} held: it is the recommendation")
            self._below(rival, srv, deadline, {1.0: full})
            self._held = rival

    def _sustain(self, pick: Measured, srv: ServerProcess, late: float, floor: float = 0.0) -> LoadPoint | None:
        """The pick's max rate for SUSTAIN_SECONDS. A failure joins the pick's points, so its max rate is then the
        highest pass below it, and the next hold tries that rate, or SUSTAIN_STEP lower where no pass lies that
        close (SUSTAIN_FAR_STEP lower, whatever passed, after a failure far over the SLO): a hold that passes holds
        the max rate the report then gives, and the short passes above it are set aside. (Stepping down from the
        failed rate alone held the detector at 6.52 requests/s while its report gave 7.02, a bisection pass between
        the two, as held; tritonclient's 30 s at 90% of 7.02 then missed the SLO, 2026-11-28.)

        Why: a bisection point lasts a few seconds, and a machine's noise that stalls the server now and then
        shows in a longer run. The BERT-like pick passed 2-s points at 575 requests/s, and tritonclient then
        saw p99 319 ms over 30 s at 90% of it (2026-11-26).
        """
        rate = pick.max_rate
        tries = 0
        while tries < SUSTAIN_TRIES:
            if rate <= floor:  # a challenger lowered to what the pick already holds: nothing left to decide
                return None
            if time.monotonic() + SUSTAIN_SECONDS + self._margin() > late:
                self.notes.append(f"the max rate was not held for {SUSTAIN_SECONDS:g} s: the serving budget ran out")
                return None
            self.say(f"hold: {pick.config.label()} at {_rps(rate)} req/s for {SUSTAIN_SECONDS:g} s on a fresh server")
            # every try may pool an undecided chunk, the last one too: its rate sits within the SLO on its estimate,
            # and a try cut to one chunk there gave up a rate that more requests would have decided (LayoutLM's
            # third hold read p99 24.5 ms on a 40-ms SLO, interval to 40.9, and the budget then ran out with
            # nothing held: the recommendation fell to a configuration never held, which tritonclient's 30 s at
            # 90% of its rate saw at p99 57 ms, session 45; the BERT-like run's last hold was undecided too)
            point = self._hold(pick, srv, rate, late, HOLD_CHUNKS)
            if point is None:
                continue
            tries += max(1, round(point.seconds / SUSTAIN_SECONDS))
            if point.passed:
                # what held is the max rate: a bisection's short passes above it, under a failed hold, never held
                pick.max_rate, pick.max_rate_ci = rate, (rate, bound_above(pick.points, rate))
                return point
            self._hold_failed.add(pick.config)
            failed = rate
            kept = pick.max_rate >= failed  # an undecided hold with no pass below it (:meth:`_record_hold`)
            below = (f"still {_rps(failed)}, not held (undecided, and no rate below it passed yet)" if kept else
                     f"the highest passing rate below it ({_rps(pick.max_rate)})" if pick.max_rate > 0 else
                     "unknown (no rate below it passed yet)")
            far = point.pct_ms >= SUSTAIN_FAR * self.spec.slo_ms
            rate = rate * SUSTAIN_FAR_STEP if far else max(0.0 if kept else pick.max_rate, rate * SUSTAIN_STEP)
            nxt = ""
            if tries < SUSTAIN_TRIES:
                nxt = f", and the next hold tries {_rps(rate)}" + (
                    f" ({SUSTAIN_FAR_STEP:.0%} of it: its p{self.q:g} was {point.pct_ms / self.spec.slo_ms:.1f}x "
                    "the SLO, far past what the short points below it showed)" if far else "")
            self.notes.append(f"{pick.config.label()}: {_rps(failed)} requests/s did not hold for {point.seconds:g} s "
                              f"({self._missed(point)}): its max rate is now {below}{nxt}")
        return None

    # ---- the report section ------------------------------------------------------------------------------

    def _section(self, status: str, reason: str | None, seconds: float) -> dict[str, Any]:
        t = self.target
        if self.client_cpus and self.server_cpus:
            note = (f"measured with the server on CPU {_cpu_list(self.server_cpus)} and the load client on CPU "
                    f"{_cpu_list(self.client_cpus)}, so the client's own cost does not count against the server; "
                    f"clients elsewhere leave the server all {len(self.server_cpus) + len(self.client_cpus)} cores")
            if note not in self.notes:
                self.notes.append(note)
        pick = self._held or self._choose()  # the one whose max rate held for SUSTAIN_SECONDS, if any did
        if self._curve_for is not pick:  # a curve measured for a configuration that then lost its place: not this one's
            self.curve, self._curve_fractions = [], []
        discount = self.hold_discount()
        if discount < 0.97:
            self.notes.append(f"the holds left {discount:.0%} of what the short points of their bisections passed "
                              f"(the median over {sum(1 for m in self.measured if m.holds)} configuration(s): the "
                              "rate held, or the highest passing below a failed hold): the configurations never held "
                              "were ranked at their bisected max rate times that")
        rec = None
        bound = short_bound(pick.points, pick.max_rate, self.q) if pick is not None else None
        if pick is not None and self._held is None and not self._closed and bound is None:
            # (with a short bound the holds failed on too few requests to say the rate is too high: a floor, below)
            if pick.config in self._hold_failed:
                self.notes.append(f"the recommendation's max rate did not hold for {SUSTAIN_SECONDS:g} s on a "
                                  "fresh server (see above): take it as an upper bound")
            else:
                self.notes.append(f"the recommendation's max rate was not held for {SUSTAIN_SECONDS:g} s (the "
                                  "serving budget ran out before its turn): it rests on its bisection's points alone")
        if pick is not None:
            top = [p for p in pick.points if p.passed and p.rate <= pick.max_rate]
            at_max = max(top, key=lambda p: p.rate) if top else None
            # (where the max rate is an undecided hold's, kept with no pass below it, that hold is what was measured
            # at it: the sentence read "p50 - ms, p99 - ms at that rate" for LayoutLM's 273.5, held 10 s at p99
            # 35.7 ms, session 45)
            kept = next((p for p in reversed(pick.holds) if abs(p.rate - pick.max_rate) < 1e-6), None)
            full = next((p for p in self.curve if abs(p.rate - pick.max_rate) < 1e-6), None) or at_max or kept
            rec = {"variant": t.variant, "environment": t.environment, "instances": pick.config.instances,
                   "threads": pick.config.threads, "max_batch": pick.config.max_batch,
                   "max_delay_ms": pick.config.max_delay_ms, "max_rate": _r(pick.max_rate),
                   "max_rate_ci": [_r(x) for x in pick.max_rate_ci],
                   "p50_ms": _r(full.p50_ms) if full else None, "p99_ms": _r(full.p99_ms) if full else None,
                   "pct_ms": _r(full.pct_ms) if full else None,
                   "p99_ci_ms": [_r(x) for x in full.p99_ci_ms] if full else None,
                   "goodput": _r(full.good / full.seconds) if full else None,
                   "bracketed": pick.bracketed, "held_s": SUSTAIN_SECONDS if pick is self._held else None}
            if not pick.bracketed:
                self.notes.append(f"the pick passed at every rate tried, up to {pick.max_rate:.1f} requests/s: its "
                                  "max rate is at least that (the serving budget ran out before a rate failed)")
            rec["floor"] = bound is not None
            thin = full if full is not None and 0 < full.kept < requests_to_bound(self.q) else None
            rec["pass_requests"] = full.kept if full is not None else None
            if thin is not None:
                need = requests_to_bound(self.q)
                self.notes.append(
                    f"the max rate passed on {thin.kept} requests, too few to be 95% sure of a p{self.q:g} (that needs "
                    f"{need}; at {thin.rate:.1f} requests/s a point of {need} lasts "
                    f"{need / max(thin.rate, 1e-9):.0f} s): its p{self.q:g} read within the SLO, but so few "
                    "requests cannot bound it; a longer [serving] time_budget_s would")
            if bound is not None:
                need = requests_to_bound(self.q)
                rec["bound_requests"] = bound.kept
                self.notes.append(
                    f"the max rate is a floor: the rate that bounds it, {bound.rate:.1f} requests/s, failed on "
                    f"{bound.kept} requests, too few to resolve a p{self.q:g} (that needs {need}, the fewest whose "
                    f"slowest one bounds it), so one slow request failed it. At that rate a point of {need} requests "
                    f"lasts {need / max(bound.rate, 1e-9):.0f} s; a longer [serving] time_budget_s would let the "
                    "search say how far above the floor the truth lies")
        elif status == "ok":
            status, reason = "failed", f"no configuration met p{self.q:g} <= {self.spec.slo_ms:g} ms at any rate tried"
            points = [p for m in self.measured for p in m.points]
            if points and not any(p.ok for p in points):  # not slow: nothing was answered at all
                said = next((e for p in points for e in p.errors), "no error message")
                reason += f": no request was answered ({said})"
            elif points:
                reason += self._lowest_tried()
        self._did_knobs_help(pick)
        measured = {m.config for m in self.measured}
        pruned: list[dict[str, Any]] = [{"variant": t.variant, "environment": t.environment, "instances": c.instances,
                   "threads": c.threads, "max_batch": c.max_batch, "max_delay_ms": c.max_delay_ms,
                   "predicted_max_rate": _r(r), "max_rate": None, "max_rate_ci": None, "role": "pruned",
                   "pruned_reason": self.never_within.get(c) or ("predicted below the confirmed ones" if r > 0 else
                                                                 "predicted to miss the SLO at any rate"),
                  "points": []}
                  for c, r in sorted(self.predicted.items(), key=lambda kv: -kv[1]) if c not in measured]
        pruned += [{"variant": t.variant, "environment": t.environment, "instances": c.instances, "threads": c.threads,
                    "max_batch": c.max_batch, "max_delay_ms": c.max_delay_ms, "predicted_max_rate": None,
                    "max_rate": None, "max_rate_ci": None, "role": "pruned",
                    "pruned_reason": "requests cannot share a call", "points": []}
                   for c in self.unmerged if c not in measured and c not in self.predicted]
        by_role = {m.role: m for m in self.measured}
        baselines = {key: by_role[role].to_dict(t) for key, role in (("naive", "naive"), ("batch_loop", "batch-loop"))
                     if role in by_role}
        return {
            "status": status, "reason": reason, "slo_ms": self.spec.slo_ms, "percentile": self.spec.percentile,
            "model_name": t.model_name, "arrivals": getattr(self.spec, "arrivals_kind", "poisson"),
            "request_samples": self.request_rows, "rate_target": getattr(self.spec, "rate", None),
            "merge_lengths": self.merge_why is None, "merge_why": self.merge_why,
            "output_dynamic_dims": self.output_dynamic_dims,
            "merge_requests": self.merge_requests_why is None, "merge_requests_why": self.merge_requests_why,
            "output_batch_dims": self.output_batch_dims,
            "cores": self.cores, "device": self.target.device, "recommendation": rec,
            "cpus": {"server": sorted(self.server_cpus) if self.server_cpus else None,
                     "client": sorted(self.client_cpus) if self.client_cpus else None},
            "at_fraction": [dict(p.to_dict(), fraction=f) for f, p in zip(self._curve_fractions, self.curve,
                                                                          strict=True)],
            "configs": [m.to_dict(t) for m in self.measured] + pruned,
            "baselines": baselines,
            "knobs": self._knobs(pick),
            "calibration": {f"{n}x{th}": {"service_ms": {str(b): round(s * 1000, 3) for b, s in c.service_s.items()},
                                          "p90_over_p50": c.spread,
                                          "traffic_calls": {str(b): k for b, k in c.mix.items()}}
                            for (n, th), c in self.calibrations.items()},
            "overhead_ms": round(self.overhead_s * 1000, 3),
            "hold_discount": round(discount, 4),
            "seconds": round(seconds, 2),
            "calls": {"calibration_s": round(self.calibration_s, 2), "load_s": round(self.load_s, 2),
                      "hold_s": round(self.hold_s, 2), "baseline_hold_s": round(self.baseline_hold_s, 2),
                      "curve_s": round(self.curve_s, 2),
                      "warm_s": round(self.warm_s, 2)},
            "notes": self.notes,
            "interrupted": self.interrupted,
        }

    def _lowest_tried(self) -> str:
        """What the lowest rate tried read, and a request's call alone, for a stage where nothing passed: how far the
        SLO lies from what the model does, where "no configuration met it" alone left a user nothing to act on."""
        m, low = min(((m, p) for m in self.measured for p in m.points), key=lambda mp: mp[1].rate)
        lo, hi = low.pct_ci_ms
        text = (f": the lowest, {low.rate:.2f} requests/s ({m.config.label()}), read p{self.q:g} {low.pct_ms:.0f} ms "
                f"(CI {lo:.0f}-{hi:.0f})")
        cal = self.calibrations.get((1, self.cores)) or next(iter(self.calibrations.values()), None)
        if cal is not None:
            one = min(cal.service_s)
            text += f"; a call of {self.request_rows} request row(s) alone takes {cal.service_s[one] * 1000:.0f} ms"
            if cal.mix.get(one, 0) > 1:
                text += (f" (the median over {cal.mix[one]} of the traffic's requests, their p90 "
                         f"{cal.service_s[one] * cal.spread.get(one, 1.0) * 1000:.0f} ms)")
        return text

    def _did_knobs_help(self, pick: Measured | None) -> None:
        """Say so when the search's knobs bought nothing over the naive server, and what the calibration says
        about why (a batch's cost per sample against a single call's)."""
        naive = next((m for m in self.measured if m.role == "naive" and m.max_rate > 0), None)
        loop = next((m for m in self.measured if m.role == "batch-loop" and m.max_rate > 0), None)
        discount = self.hold_discount()
        paid_as_held = False
        if pick is not None and naive is not None and pick.holds and not naive.holds and discount < 0.97:
            # the ratios below and in the tables set a held rate against one bisected on short points alone
            as_held = naive.max_rate * discount
            note = (f"the naive server's {naive.max_rate:.0f} requests/s rests on its bisection's short points alone "
                    f"(never held); at the {discount:.0%} of bisected rates the holds left, it would serve about "
                    f"{as_held:.0f}, and the pick {pick.max_rate / as_held:.2f}x that")
            if note not in self.notes:
                self.notes.append(note)
            paid_as_held = pick.max_rate >= 1.1 * as_held  # on equal footing the knobs paid: no "did not beat"
        if (pick is not None and naive is not None and pick.max_rate >= 1.1 * naive.max_rate and loop is not None
                and pick is not loop and pick.max_rate < 1.1 * loop.max_rate):
            note = (f"batching helps here ({pick.max_rate / naive.max_rate:.2f}x the naive server), but the batch "
                    f"loop's own max batch and wait, served as they are, already get most of it: the search's pick "
                    f"is {pick.max_rate / loop.max_rate:.2f}x that baseline ({loop.max_rate:.0f} requests/s)")
            if note not in self.notes:
                self.notes.append(note)
        if pick is not None and pick is loop and naive is not None and pick.max_rate >= 1.1 * naive.max_rate:
            note = (f"the batch loop's own max batch and wait, served as they are, served the most "
                    f"({pick.max_rate / naive.max_rate:.2f}x the naive server): no configuration the search "
                    "confirmed beat it")
            if note not in self.notes:
                self.notes.append(note)
        if pick is None or naive is None or pick.max_rate >= 1.1 * naive.max_rate or paid_as_held:
            return
        if self.merge_requests_why is not None:  # batching was never possible: the calibration says nothing here
            text = (f"instances and threads did not beat the naive server here ({pick.max_rate / naive.max_rate:.2f}x "
                    "its max rate), and requests cannot share a call")
            if text not in self.notes:
                self.notes.append(text)
            return
        text = (f"batching and instances did not beat the naive server here ({pick.max_rate / naive.max_rate:.2f}x "
                f"its max rate)")
        cal = self.calibrations.get(pick.config.layout)
        if cal and len(cal.service_s) > 1:
            # the cheapest size per sample, not the largest: BERT-like on one core was said to save nothing ("a call
            # of 16 costs 1.89 ms per sample against 1.61 ms for one") where a call of 2 cost 1.31 (session 47)
            one = min(cal.service_s)
            big = min(cal.service_s, key=lambda b: (cal.service_s[b] / b, -b))
            if big == one:
                big = max(cal.service_s)
            per = cal.service_s[big] / big
            saving = cal.service_s[one] / per
            text += (f": a call of {big} costs {per * 1000:.2f} ms per sample against "
                     f"{cal.service_s[one] * 1000:.2f} ms for one")
            if saving < BATCH_SAVES:
                text += f" ({saving:.2f}x), so a batch saves little and its wait costs latency"
            elif cal.service_s[big] * 1000 > self.spec.slo_ms / 3 or self.overhead_s <= 0:
                # (the quickstart's said "2.09x, so a batch saves little": the SLO, not the cost, is why)
                text += (f", {saving:.2f}x cheaper, but a call of {big} alone takes {cal.service_s[big] * 1000:.1f} ms "
                         f"of the {self.spec.slo_ms:g}-ms SLO: the batches that fit it, with their wait, gain too "
                         "little")
            else:  # a call far inside the SLO: the per-request work the batch does not share is what is left
                alone, batched = cal.service_s[one] + self.overhead_s, per + self.overhead_s
                text += (f", {saving:.2f}x cheaper, and a call of {big} ({cal.service_s[big] * 1000:.1f} ms) fits the "
                         f"{self.spec.slo_ms:g}-ms SLO many times over; but the server's own work per request "
                         f"({self.overhead_s * 1000:.2f} ms: HTTP, decoding, the pipe to the instance) is not "
                         f"batched, so a request costs {batched * 1000:.2f} ms in a full batch against "
                         f"{alone * 1000:.2f} ms alone ({alone / batched:.2f}x at best), and the measured rates, "
                         "queueing and tails included, kept less of that than the 10% it takes to say it paid")
        if text not in self.notes:
            self.notes.append(text)

    def _knobs(self, pick: Measured | None) -> list[dict[str, Any]]:
        """What each knob was worth: the pick against the pick with that knob at its naive value, measured
        where both were measured, else the simulation's prediction (labelled)."""
        if pick is None:
            return []
        c = pick.config
        alts = {"max_batch": ServingConfig(c.instances, c.threads, self.request_rows, 0.0),
                "max_delay_ms": ServingConfig(c.instances, c.threads, c.max_batch, 0.0),
                "instances": ServingConfig(1, c.cores, c.max_batch, c.max_delay_ms),
                "threads": ServingConfig(c.instances, 1, c.max_batch, c.max_delay_ms)}
        measured = {m.config: m.max_rate for m in self.measured}
        out: list[dict[str, Any]] = []
        for knob, alt in alts.items():
            if alt == c:
                out.append({"knob": knob, "ratio": None, "source": None,
                            "text": "the pick already uses the plain setting"})
                continue
            if alt in measured and measured[alt] > 0:
                ratio, source = pick.max_rate / measured[alt], "measured"
            elif self.predicted.get(alt, 0) > 0 and self.predicted.get(c, 0) > 0:
                ratio, source = self.predicted[c] / self.predicted[alt], "predicted"
            else:
                out.append({"knob": knob, "ratio": None, "source": None,
                            "text": f"{alt.label()} neither measured nor predicted"})
                continue
            out.append({"knob": knob, "ratio": round(ratio, 3), "source": source,
                        "text": f"against {alt.label()} ({source})"})
        return out


def _pooled(results: Sequence[Any]) -> Any:
    """Load results at one rate, one after another on one server, as one (``point_from`` reads it): the latencies
    in send order, the counts summed, the achieved rate over the whole."""
    if len(results) == 1:
        return results[0]
    seconds = sum(float(r.elapsed_s) for r in results)
    ok = sum(int(r.ok) for r in results)
    return SimpleNamespace(
        latencies_ms=np.concatenate([np.asarray(r.latencies_ms, dtype=float) for r in results]),
        sent=sum(int(r.sent) for r in results), ok=ok, failed=sum(int(r.failed) for r in results),
        timed_out=sum(int(r.timed_out) for r in results), dropped=sum(int(r.dropped) for r in results),
        achieved_rate=ok / seconds if seconds > 0 else 0.0,
        send_lag_p99_ms=max(float(getattr(r, "send_lag_p99_ms", 0.0) or 0.0) for r in results),
        errors=tuple(e for r in results for e in (getattr(r, "errors", ()) or ())))


def _cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _diverse(ranked: Sequence[ServingConfig], k: int) -> list[ServingConfig]:
    """The best ``k``, one per layout first (a layout's best batching), then one per max batch not yet chosen,
    then the next best overall: the simulation is surest about the delay within a max batch, less sure about
    max batches against each other (a call's real cost at b is where calibration errs: on BERT one core, max
    batch 8 predicted 1,190 requests/s and served under 200, when max batch 2 served 258), least about layouts."""
    chosen: list[ServingConfig] = []
    for key in (lambda c: c.layout, lambda c: (c.layout, c.max_batch), lambda c: c):
        seen = {key(c) for c in chosen}
        for c in ranked:
            if len(chosen) >= k:
                break
            if key(c) not in seen and c not in chosen:
                chosen.append(c)
                seen.add(key(c))
    return sorted(chosen, key=lambda c: ranked.index(c))


__all__ = ["CURVE_FRACTIONS", "Measured", "ServingConfig", "ServingSearch", "Target", "batch_grid", "layouts",
           "usable_cores"]
