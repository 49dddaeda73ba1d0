"""One measured point (a configuration at a concurrency) from a worker's raw series: the statistics.

Pure (numpy). TTFT and inter-token latency (ITL) are kept apart: the prefill's cost grows with the prompt and the
batch, a decode step's with the batch and the cache. The decode-step series goes through the warmup detector
(:func:`autotune.core.warmup.analyze`): a compile or a recompile in the timed calls shows there as a changepoint
or a one-off spike, and the steps before steady state are left out of the ITL figures. Throughput counts the
*useful* tokens (each prompt's own new tokens) over the calls' wall time: a static batch that decodes to its
longest sequence is charged for the tokens it throws away.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.core.contention import busy
from autotune.core.stats import bootstrap_percentiles, replicate_interval
from autotune.core.warmup import analyze

N_BOOT = 1000


@dataclass(frozen=True)
class Quantiles:
    """p50 and p99 (ms) with their 95% bootstrap intervals, of ``n`` values."""

    p50: float
    p50_ci: tuple[float, float]
    p99: float
    p99_ci: tuple[float, float]
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {"p50_ms": self.p50, "p50_ci_ms": list(self.p50_ci), "p99_ms": self.p99, "p99_ci_ms": list(self.p99_ci),
                "n": self.n}


def quantiles_ms(values_s: Sequence[float] | np.ndarray, *, seed: int = 0) -> Quantiles:
    x = np.asarray(values_s, dtype=float) * 1e3
    if x.size == 0:
        raise ValueError("no values")

    def one(q: float, s: int) -> tuple[float, tuple[float, float]]:
        value = float(np.percentile(x, q))
        if x.size < 2:
            return value, (value, value)
        return value, replicate_interval(bootstrap_percentiles(x, q, n_boot=N_BOOT, seed=s))

    p50, p50_ci = one(50.0, seed)
    p99, p99_ci = one(99.0, seed + 1)
    return Quantiles(p50, p50_ci, p99, p99_ci, int(x.size))


@dataclass(frozen=True)
class GenPoint:
    config: str
    concurrency: int
    ttft: Quantiles
    itl: Quantiles
    #: useful tokens per second, all sequences together, and its 95% interval (calls resampled)
    tokens_per_s: float
    tokens_per_s_ci: tuple[float, float]
    #: generated tokens per second (useful or not): what the hardware did
    generated_per_s: float
    #: one sequence's decode rate at steady state: 1 / median ITL
    per_sequence_tokens_per_s: float
    call_seconds: tuple[float, ...]
    first_call_seconds: float
    #: the first call's excess over a steady call: compile and first-call costs, paid once per process
    compile_seconds: float
    recompiles: int
    peak_memory_bytes: int | None
    steady_start: int | None
    warmup_class: str
    notes: tuple[str, ...] = ()
    #: other processes' CPU, in cores, while the calls were timed (None: unknown, or an older worker)
    foreign_cores: float | None = None

    @property
    def disturbed(self) -> bool:
        """Other processes used more than contention.DISTURBED_CORES while its calls were timed (unknown: not
        disturbed)."""
        return busy(self.foreign_cores)

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "concurrency": self.concurrency, "status": "ok",
                "ttft": self.ttft.to_dict(), "itl": self.itl.to_dict(),
                "tokens_per_s": self.tokens_per_s, "tokens_per_s_ci": list(self.tokens_per_s_ci),
                "generated_tokens_per_s": self.generated_per_s,
                "per_sequence_tokens_per_s": self.per_sequence_tokens_per_s,
                "calls": len(self.call_seconds), "call_seconds": list(self.call_seconds),
                "first_call_seconds": self.first_call_seconds, "compile_seconds": self.compile_seconds,
                "recompiles": self.recompiles, "peak_memory_bytes": self.peak_memory_bytes,
                "itl_steady_start": self.steady_start, "itl_warmup": self.warmup_class, "notes": list(self.notes),
                "foreign_cores": self.foreign_cores}


def point_from(config: str, concurrency: int, raw: Mapping[str, Any], *, seed: int = 0) -> GenPoint:
    """The statistics of one worker ``measure`` reply (:class:`autotune.core.protocol.GenerateOutcome`)."""
    seconds = np.asarray(raw["call_seconds"], dtype=float)
    useful = np.asarray(raw["useful_tokens"], dtype=float)
    generated = np.asarray(raw["generated_tokens"], dtype=float)
    steps = [float(v) for call in raw["itl"] for v in call]
    notes: list[str] = []
    steady_start: int | None = 0
    warmup_class = "too-short"
    if len(steps) >= 20:
        analysis = analyze(steps, with_ci=False, min_steady=min(30, len(steps) // 2))
        warmup_class = analysis.classification
        steady_start = analysis.steady_start
        outliers = set(analysis.one_off)
        if steady_start is None:
            notes.append(f"decode steps never reached a steady state ({warmup_class}): every step counted")
            kept = [v for i, v in enumerate(steps) if i not in outliers]
        else:
            kept = [v for i, v in enumerate(steps) if i >= steady_start and i not in outliers]
            if steady_start:
                notes.append(f"the first {steady_start} decode steps were warmup ({warmup_class})")
        if analysis.one_off:
            notes.append(f"{len(analysis.one_off)} one-off slow decode step(s) (a recompile or a stall) left out")
    else:
        kept = steps
    if not kept:
        kept = steps or [float("nan")]
    itl = quantiles_ms(kept, seed=seed)
    rate = float(useful.sum() / seconds.sum())
    rng = np.random.default_rng(seed)
    if seconds.size >= 2:
        idx = rng.integers(0, seconds.size, size=(N_BOOT, seconds.size))
        rate_ci = replicate_interval(useful[idx].sum(axis=1) / seconds[idx].sum(axis=1))
    else:
        rate_ci = (rate, rate)
    first = float(raw.get("first_call_seconds", float("nan")))
    load = raw.get("load")
    foreign = load.get("foreign_cores") if isinstance(load, Mapping) else None
    foreign = float(foreign) if isinstance(foreign, int | float) and not isinstance(foreign, bool) else None
    if busy(foreign):
        notes.append(f"other processes used {foreign:.2f} cores while its calls were timed: a busy machine's figure")
    peak = raw.get("peak_memory_bytes")
    return GenPoint(
        config=config, concurrency=concurrency, ttft=quantiles_ms(raw["ttft"], seed=seed + 7), itl=itl,
        tokens_per_s=rate, tokens_per_s_ci=rate_ci, generated_per_s=float(generated.sum() / seconds.sum()),
        per_sequence_tokens_per_s=1e3 / itl.p50 if itl.p50 > 0 else float("nan"),
        call_seconds=tuple(float(s) for s in seconds), first_call_seconds=first,
        compile_seconds=max(0.0, first - float(np.median(seconds))), recompiles=int(raw.get("recompiles", 0)),
        peak_memory_bytes=int(peak) if isinstance(peak, int) else None, steady_start=steady_start,
        warmup_class=warmup_class, notes=tuple(notes) + tuple(str(n) for n in raw.get("notes") or ()),
        foreign_cores=foreign)


def ratio_ci(a: Sequence[float], b: Sequence[float], *, seed: int = 0) -> tuple[float, tuple[float, float]]:
    """mean(a) / mean(b) of two independent samples (rounds' tokens/s), with a 95% bootstrap interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ratio = float(x.mean() / y.mean())
    if x.size < 2 or y.size < 2:
        return ratio, (ratio, ratio)
    rng = np.random.default_rng(seed)
    rx = x[rng.integers(0, x.size, size=(N_BOOT, x.size))].mean(axis=1)
    ry = y[rng.integers(0, y.size, size=(N_BOOT, y.size))].mean(axis=1)
    return ratio, replicate_interval(rx / ry)
