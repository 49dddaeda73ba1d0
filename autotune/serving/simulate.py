"""A serving configuration's latency predicted from measured service times: the search's pruning step.

Confirming one configuration with real load costs half a minute (a server start, then a bisection of load
points, each a few seconds long); the grid of instances x threads x max batch x max delay has dozens. What a
configuration can sustain follows mostly from two measured things: how long one instance takes for a batch of
b samples while the other instances are busy too (:class:`ServiceModel`, from ``serve.py --calibrate``), and
the batcher's rule (:mod:`autotune.serving.batcher`, the very object the server runs). A discrete-event
simulation of Poisson arrivals through that batcher gives each configuration's latency percentiles at a rate,
and a bisection over the rate its predicted maximum within the SLO, in milliseconds of CPU each; only the
best few are then confirmed with real load (:mod:`autotune.serving.search`).

The front end (HTTP parsing, the pipes to the instances) enters in one of two ways. Where it shares the instances'
cores, as a fixed per-request latency (``overhead_s``; the search adds its work to the calls). Where it has cores of
its own (``front_end_rate`` set), as what it is, one event loop: a FIFO server that does each request's work, half
before the request reaches the batcher (reading and decoding it) and half after its call (the answer); a finished
call waits in it, and its requests are answered before its instance is given the next batch (the order asyncio
runs the server's callbacks in). With only a ceiling on its rate and no queue, the first GPU run (session 47:
resnet18, 0.42 ms of front-end work a request, calls of 1-4 in 1.0-1.5 ms) was predicted 2,444 requests/s for one
and two instances alike, at the ceiling; they served 1,147 and 1,939, and the loop now predicts 1,537 and 2,030.
What the model still leaves out, and why the confirmation stays: the front end's work on shared cores is charged to
the calls, not scheduled. A call's time varies
around its median (``spread``, a log-normal sigma from the calibration's p90/p50); the variation between
processes and minutes does not. So the ranking is trusted more than the numbers, and the numbers the report
states come from the real load.

Pure (numpy and the batcher); common random numbers: every rate of one bisection reuses the same unit
exponential gaps and service-time noise, so the predicted percentile grows smoothly with the rate instead of
jumping with the draw.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import cast

import numpy as np

from autotune.serving.batcher import Batcher, BatchPolicy

#: z of the normal's 90th percentile: a log-normal's sigma is ln(p90 / p50) / this.
_Z90 = 1.2815515655446004


@dataclass(frozen=True)
class ServiceModel:
    """Seconds per call of one instance at each calibrated batch size, measured with every instance busy."""

    batches: tuple[int, ...]
    seconds: tuple[float, ...]
    #: Log-normal sigma of one call's time around the median (0: every call takes the median).
    spread: float = 0.0
    #: The same per batch size where calibrated apart (empty: ``spread`` at every size). A call of n samples takes
    #: the sigma of the smallest calibrated size that holds it: a configuration of small calls is not given the
    #: spread of large ones it never makes.
    spreads: tuple[float, ...] = ()
    #: Fixed latency every request pays outside the model call (HTTP, decode, the pipe, encode).
    overhead_s: float = 0.0
    #: The front end's own ceiling in requests per second (None: not measured).
    front_end_rate: float | None = None

    def __post_init__(self) -> None:
        if not self.batches or len(self.batches) != len(self.seconds):
            raise ValueError("a service model needs one time per batch size")
        if list(self.batches) != sorted(set(self.batches)) or self.batches[0] < 1:
            raise ValueError(f"batch sizes must be increasing and >= 1, got {self.batches}")
        if any(not (s > 0 and math.isfinite(s)) for s in self.seconds):
            raise ValueError(f"service times must be finite and > 0, got {self.seconds}")
        if self.spreads and (len(self.spreads) != len(self.batches) or
                             any(not (x >= 0 and math.isfinite(x)) for x in self.spreads)):
            raise ValueError(f"one finite spread >= 0 per batch size, got {self.spreads}")

    @staticmethod
    def sigma_from_ratio(p90_over_p50: float) -> float:
        """The log-normal sigma whose p90 is ``p90_over_p50`` times its median."""
        return max(0.0, math.log(max(p90_over_p50, 1.0)) / _Z90)

    def sigma(self, samples: int) -> float:
        """The log-normal sigma of a call of ``samples``: the smallest calibrated size's that holds it (the
        largest's past it)."""
        if not self.spreads:
            return self.spread
        return self.spreads[next((k for k, b in enumerate(self.batches) if samples <= b), len(self.batches) - 1)]

    def at(self, samples: int) -> float:
        """Median seconds for a batch of ``samples``: linear between calibrated sizes, and past the ends along
        the nearest segment (never below the smallest size's time per sample)."""
        b, s = self.batches, self.seconds
        if len(b) == 1:
            return s[0] * max(samples, 1) / b[0] if samples > b[0] else s[0]
        if samples <= b[0]:
            return s[0]
        i = next((k for k in range(1, len(b)) if samples <= b[k]), len(b) - 1)
        slope = (s[i] - s[i - 1]) / (b[i] - b[i - 1])
        return max(s[i - 1] + slope * (samples - b[i - 1]), s[0])

    def capacity(self, instances: int, max_batch: int) -> float:
        """Samples per second with every instance busy on full batches: the rate no configuration beats."""
        best = max(k / self.at(k) for k in range(1, max_batch + 1))
        cap = instances * best
        return min(cap, self.front_end_rate) if self.front_end_rate else cap


@dataclass(frozen=True)
class Prediction:
    """A configuration's simulated latency at one rate, in seconds."""

    rate: float
    p50_s: float
    pct_s: float  # the SLO's percentile
    mean_batch: float


class Simulator:
    """One configuration's latency at any rate, with fixed random draws (common random numbers)."""

    def __init__(self, policy: BatchPolicy, instances: int, service: ServiceModel, *, requests: int = 2000,
                 samples_per_request: int = 1, seed: int = 0) -> None:
        self.policy, self.instances, self.service = policy, instances, service
        self.samples = samples_per_request
        rng = np.random.default_rng(seed)
        self._gaps = rng.exponential(1.0, size=requests)  # unit-rate gaps: offsets are cumsum / rate
        noisy = service.spread > 0 or any(x > 0 for x in service.spreads)
        self._z = rng.standard_normal(size=requests) if noisy else np.zeros(requests)  # scaled per call's size

    def latencies(self, rate: float) -> tuple[np.ndarray, float]:
        """Every request's latency (seconds, arrival to answer) at ``rate`` requests/s, and the mean batch."""
        if self.service.front_end_rate:
            return self._through_front_end(rate, 1.0 / self.service.front_end_rate)
        offsets = np.cumsum(self._gaps) / rate
        n = len(offsets)
        batcher = Batcher(self.policy, self.instances)
        done = np.full(n, np.nan)
        running: list[tuple[float, int, tuple[int, ...]]] = []  # (finish time, instance, requests)
        i, calls, batched = 0, 0, 0
        while i < n or running or batcher.queued:
            deadline = batcher.deadline()
            now = min(offsets[i] if i < n else math.inf, running[0][0] if running else math.inf,
                      deadline if deadline is not None else math.inf)
            if not math.isfinite(now):  # nothing can move: a queue with every instance busy is in `running`
                break
            while running and running[0][0] <= now:
                finish, instance, reqs = heapq.heappop(running)
                batcher.release(instance)
                for r in reqs:
                    done[r] = finish
            while i < n and offsets[i] <= now:
                batcher.add(i, float(offsets[i]), self.samples)
                i += 1
            for d in batcher.poll(now):
                took = self.service.at(d.samples) * math.exp(self.service.sigma(d.samples) * float(self._z[calls % n]))
                calls += 1
                batched += d.samples
                reqs = cast("tuple[int, ...]", d.requests)  # the request ids here are indices
                heapq.heappush(running, (now + took, d.instance, reqs))
        lat = done - offsets + self.service.overhead_s
        return lat, (batched / calls if calls else 0.0)

    def _took(self, samples: int, calls: int) -> float:
        return self.service.at(samples) * math.exp(self.service.sigma(samples) * float(self._z[calls % len(self._z)]))

    def _through_front_end(self, rate: float, work_s: float) -> tuple[np.ndarray, float]:
        """:meth:`latencies` with the front end as one FIFO server of ``work_s`` a request (see the module's
        docstring): events in time order, the loop's jobs in the order they reach it."""
        offsets = np.cumsum(self._gaps) / rate
        n = len(offsets)
        batcher = Batcher(self.policy, self.instances)
        done = np.full(n, np.nan)
        events: list[tuple[float, int, int, object]] = [(float(t), k, 0, k) for k, t in enumerate(offsets)]
        heapq.heapify(events)  # (time, order, kind, what): 0 arrival, 1 decoded, 2 call done, 3 answered, 4 wake
        order, free_at, calls, batched = n, 0.0, 0, 0
        half = work_s / 2
        wakes: set[float] = set()  # the batcher's deadlines already in the heap

        def loop_job(now: float, seconds: float) -> float:
            nonlocal free_at
            free_at = max(now, free_at) + seconds
            return free_at

        def push(at: float, kind: int, what: object) -> None:
            nonlocal order
            order += 1
            heapq.heappush(events, (at, order, kind, what))

        while events:
            now, _, kind, what = heapq.heappop(events)
            if kind == 0:
                push(loop_job(now, half), 1, what)
                continue
            if kind == 1:
                batcher.add(what, now, self.samples)
            elif kind == 2:
                # the finished call waits for the loop, which answers its requests before the instance is given the
                # next batch: the server's call task sets the requests' futures, then releases the instance and
                # dispatches, and asyncio runs the woken answers (FIFO) before the new call's first step
                instance, reqs = cast("tuple[int, tuple[int, ...]]", what)
                answered = loop_job(now, half * len(reqs))
                for r in reqs:
                    done[r] = answered
                push(answered, 3, instance)
                continue
            elif kind == 3:
                batcher.release(cast("int", what))
            for d in batcher.poll(now):
                took = self._took(d.samples, calls)
                calls += 1
                batched += d.samples
                push(now + took, 2, (d.instance, cast("tuple[int, ...]", d.requests)))
            deadline = batcher.deadline()
            if deadline is not None and deadline > now and deadline not in wakes:
                wakes.add(deadline)
                push(deadline, 4, None)
        return done - offsets, (batched / calls if calls else 0.0)

    def predict(self, rate: float, percentile: float) -> Prediction:
        lat, mean_batch = self.latencies(rate)
        # the first tenth is the empty queue's transient, left out as the real load points leave it out
        steady = lat[len(lat) // 10:]
        return Prediction(rate, float(np.percentile(steady, 50)), float(np.percentile(steady, percentile)),
                          mean_batch)

    def max_rate(self, slo_s: float, percentile: float, *, rel_tol: float = 0.02) -> tuple[float, Prediction | None]:
        """The highest rate whose simulated percentile is within ``slo_s`` (bisection on the rate), with its
        prediction; (0, None) when even a trickle misses the SLO (one batch-1 call is already too slow)."""
        cap = self.service.capacity(self.instances, self.policy.max_batch) / self.samples
        lo, hi = 0.0, cap * 1.05
        best: Prediction | None = None
        low = self.predict(cap * 0.02, percentile)
        if low.pct_s > slo_s:
            return 0.0, None
        lo, best = cap * 0.02, low
        while hi - lo > rel_tol * lo:
            mid = math.sqrt(lo * hi)
            got = self.predict(mid, percentile)
            if got.pct_s <= slo_s:
                lo, best = mid, got
            else:
                hi = mid
        return lo, best


def percentile_of(name: str) -> float:
    """``"p99"`` -> 99.0, ``"p99.9"`` -> 99.9."""
    return float(name.lstrip("p"))


__all__ = ["Prediction", "ServiceModel", "Simulator", "percentile_of"]
