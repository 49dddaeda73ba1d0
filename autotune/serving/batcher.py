"""The dynamic batcher's rule, as a pure state machine: which queued requests go to which instance, and when.

Every server has this knob (Triton's ``dynamic_batching { max_queue_delay_microseconds }``, TorchServe's
``batchSize``/``maxBatchDelay``, Ray Serve's ``@serve.batch(max_batch_size, batch_wait_timeout_s)``); the rule
here is theirs: a batch is dispatched to a free instance as soon as the queue holds ``max_batch`` samples, or
when the oldest queued request has waited ``max_delay_s``, whichever comes first. With no free instance the
queue grows, and the next instance to free up takes a full batch at once.

The same object decides in the server (:mod:`autotune.serving.server`, real time) and in the serving search's
simulation (:mod:`autotune.serving.simulate`, simulated time), so what the search predicts is what the server
does. The caller owns the clock: every method takes ``now`` (seconds, any monotonic origin), nothing here
sleeps or reads a clock, and the order of dispatches is deterministic (FIFO requests, the lowest free
instance first).

Standard library only: this file is copied beside ``serve.py`` into the artifact, which needs no autotune.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

_EPSILON_S = 1e-9


@dataclass(frozen=True)
class BatchPolicy:
    """At most ``max_batch`` samples per call; the oldest request waits at most ``max_delay_s`` for company."""

    max_batch: int
    max_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_batch, int) or isinstance(self.max_batch, bool) or self.max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {self.max_batch!r}")
        if not (self.max_delay_s >= 0.0) or self.max_delay_s == float("inf"):
            raise ValueError(f"max_delay_s must be a finite number >= 0, got {self.max_delay_s!r}")


@dataclass(frozen=True)
class Dispatch:
    """One call: ``requests`` (their ids, oldest first) go to ``instance`` as one batch of ``samples`` rows."""

    instance: int
    requests: tuple[Hashable, ...]
    samples: int


@dataclass(frozen=True)
class _Queued:
    request: Hashable
    arrived: float
    samples: int


class Batcher:
    """Queue and instances of one model. ``add`` queues, ``poll`` dispatches, ``release`` frees an instance.

    A request larger than ``max_batch`` samples is dispatched alone (the server refuses requests larger than
    the artifact takes before they get here).
    """

    def __init__(self, policy: BatchPolicy, instances: int) -> None:
        if not isinstance(instances, int) or instances < 1:
            raise ValueError(f"instances must be an integer >= 1, got {instances!r}")
        self.policy = policy
        self.instances = instances
        self._queue: deque[_Queued] = deque()
        self._queued_samples = 0
        self._busy = [False] * instances

    @property
    def queued(self) -> int:
        """Requests waiting."""
        return len(self._queue)

    @property
    def queued_samples(self) -> int:
        return self._queued_samples

    @property
    def busy(self) -> int:
        """Instances running a batch."""
        return sum(self._busy)

    def add(self, request: Hashable, now: float, samples: int = 1) -> None:
        """Queue ``request`` (``samples`` rows), arrived at ``now``."""
        if samples < 1:
            raise ValueError(f"a request has at least one sample, got {samples}")
        self._queue.append(_Queued(request, now, samples))
        self._queued_samples += samples

    def release(self, instance: int) -> None:
        """``instance`` finished its batch and is free."""
        if not self._busy[instance]:
            raise ValueError(f"instance {instance} is not busy")
        self._busy[instance] = False

    def ready(self, now: float) -> bool:
        """Whether the queue may be dispatched at ``now`` (full batch, or the oldest request waited long enough)."""
        if not self._queue:
            return False
        # the tolerance: ``deadline()`` is ``arrived + max_delay_s``, and ``(a + d) - a`` may round below ``d``
        return (self._queued_samples >= self.policy.max_batch
                or now - self._queue[0].arrived >= self.policy.max_delay_s - _EPSILON_S)

    def poll(self, now: float) -> list[Dispatch]:
        """The batches to start at ``now``, each on a free instance (marked busy until ``release``)."""
        out: list[Dispatch] = []
        while self._queue and False in self._busy and self.ready(now):
            instance = self._busy.index(False)
            taken: list[Hashable] = []
            samples = 0
            while self._queue and (not taken or samples + self._queue[0].samples <= self.policy.max_batch):
                item = self._queue.popleft()
                taken.append(item.request)
                samples += item.samples
            self._queued_samples -= samples
            self._busy[instance] = True
            out.append(Dispatch(instance, tuple(taken), samples))
        return out

    def deadline(self) -> float | None:
        """When ``poll`` must run next if no request arrives and no instance frees up: the oldest request's
        delay running out, while an instance is free to take it (None: nothing to wait for)."""
        if not self._queue or False not in self._busy:
            return None
        return self._queue[0].arrived + self.policy.max_delay_s


__all__ = ["BatchPolicy", "Batcher", "Dispatch"]
