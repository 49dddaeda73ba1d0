"""Test doubles shipped with the package, for tests, benchmarks and users' own tests (no model runs).

They live here, not in the modules whose contracts they stand in for, so that production code
carries no test code and a test double is found where a reader looks for one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from autotune.batch import ProbeResult

__all__ = ["SyntheticProbe"]


@dataclass(frozen=True)
class SyntheticProbe:
    """A deterministic stand-in for a real probe, for tests and the benchmark (no model runs).

    Batch ``b`` fits iff ``b <= boundary``. A fitting probe reports the peak
    ``intercept + per_sample·b·(1 + noise·z_b) + noise_bytes·y_b``, z_b and y_b standard normals
    drawn from (seed, b), capped at the limit (a run that fit cannot have exceeded it). The limit
    sits between the boundary and the next batch on the *noise-free* line, inflated by
    ``fragmentation``: with fragmentation > 0 the true boundary is below where the
    allocated-memory line meets the limit, as when reserved memory exceeds allocated memory on a
    GPU.

    The CPU failure mode: a large intercept (runtime and model), of which ``baseline_bytes`` is
    what the process holds before the batch exists (reported with its own noise_bytes-sized
    error; None: no baseline reported) and the rest a per-probe overhead; ``noise_bytes`` is
    absolute, independent of the batch, so at small batches it swamps the per-sample part.
    With ``failure_peaks`` a failing probe reports its complete peak (at least the limit + 1),
    as a CPU budget check does; otherwise none, as after an out-of-memory error.
    """

    boundary: int
    intercept_bytes: float
    bytes_per_sample: float
    noise: float = 0.0
    fragmentation: float = 0.0
    position: float = 0.5  # where in [boundary, boundary + 1) the noise-free line meets the limit
    seed: int = 0
    noise_bytes: float = 0.0
    baseline_bytes: float | None = None
    failure_peaks: bool = False

    @property
    def memory_limit_bytes(self) -> int:
        crossing = (self.boundary + self.position) * (1 + self.fragmentation)
        return int(self.intercept_bytes + self.bytes_per_sample * crossing)

    def __call__(self, batch_size: int) -> ProbeResult:
        rng = random.Random(f"{self.seed}:{batch_size}")
        z, y, w = rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0)
        baseline = None
        if self.baseline_bytes is not None:
            baseline = int(max(0.0, self.baseline_bytes + self.noise_bytes * w))
        peak = self.intercept_bytes + self.bytes_per_sample * batch_size * (1 + self.noise * z)
        peak += self.noise_bytes * y
        limit = self.memory_limit_bytes
        if batch_size > self.boundary:
            if not self.failure_peaks:
                return ProbeResult(fits=False, error="out of memory (synthetic)", baseline_bytes=baseline)
            return ProbeResult(
                fits=False,
                peak_memory_bytes=int(max(peak, limit + 1)),
                error="over budget (synthetic)",
                baseline_bytes=baseline,
            )
        return ProbeResult(
            fits=True, peak_memory_bytes=int(min(max(peak, 0.0), limit)), baseline_bytes=baseline
        )
