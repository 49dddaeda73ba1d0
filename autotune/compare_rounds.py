"""Where ``autotune compare`` gets numbers that survive a second run: the showdown's fresh processes.

A search's screen times each candidate once, in a worker that has run the gate and other variants before it.
That worker's history moves the number (glibc's allocator state, measured: screens 8-17% below fresh processes,
and by up to +-13% from one run to the next), and the screen's CI sees none of it: two runs of the same code
compared on their screens reported five "regressions". The showdown times its finalists in several fresh
processes, each over interleaved rounds; a process is what a deployment starts, so the *process* is the unit
of a comparison between runs:

    per side, for a configuration both showdowns timed (compared rounds only: burn-in and disturbed rounds out):
        v[p]   = mean over process p's rounds of log(batch / seconds per call)
                 (one process only, as in a recipe with measure.processes = 1: v = its rounds)
        m      = mean of v, n = their count
        s2     = max(var(v) (ddof 1), within-process variance of a round / rounds per process)
                 (the floor: three processes that agree by luck do not make an exact number)
    log ratio  = m_B - m_A
    se         = sqrt(s2_A / n_A + s2_B / n_B)
    df         = Welch-Satterthwaite from the two terms
    CI         = exp(log ratio -+ t_{0.975, floor(df)} * se)

A t interval, not a bootstrap: with three processes a side, a bootstrap of three values is as narrow as their
range and no wider, while the t quantile (2.8 at 4 degrees of freedom) is what three values can claim.

For a configuration that only the screens measured, the screens' own CI is widened to the run-to-run spread of
a screen, which each report shows for its finalists (screen against fresh processes):

    d_r   = log(screen throughput / fresh-process throughput) over the report's finalists
    rms_r = sqrt(mean(d_r^2))           # how far a screen sits from what a fresh process gets
    floor = 1.96 * sqrt(rms_A^2 + rms_B^2)  on the log ratio's half-width
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.core.stats import t_quantile_975

__all__ = ["FreshRounds", "fresh_ratio", "fresh_rounds", "screen_spread", "t_quantile_975"]

_Z95 = 1.959963984540054


@dataclass(frozen=True)
class FreshRounds:
    """One configuration's compared showdown rounds in one report, grouped by the process that timed them."""

    key: str
    #: per process: log throughput (samples/s) of each of its compared rounds
    processes: tuple[tuple[float, ...], ...]

    @property
    def throughput(self) -> float:
        return math.exp(self.level)

    def units(self) -> list[float]:
        """The independent values: one per process (its mean), or the rounds when one process timed them all
        (then run-to-run variation between processes is not seen: the comparison says so)."""
        if len(self.processes) >= 2:
            return [float(np.mean(p)) for p in self.processes]
        return [float(v) for v in self.processes[0]]

    @property
    def level(self) -> float:
        """Mean log throughput over the units."""
        return float(np.mean(self.units()))

    def variance(self) -> float:
        """Variance of one unit: between processes, floored by what a process's rounds leave open."""
        units = np.asarray(self.units())
        between = float(units.var(ddof=1)) if units.size > 1 else 0.0
        if len(self.processes) < 2:
            return between
        dev = sum(float(((np.asarray(p) - np.mean(p)) ** 2).sum()) for p in self.processes)
        dof = sum(len(p) - 1 for p in self.processes)
        per_process = float(np.mean([len(p) for p in self.processes]))
        within = dev / dof / per_process if dof > 0 else 0.0
        return max(between, within)

    def ci(self) -> tuple[float, float] | None:
        """95% CI of the throughput (t interval over the units; None with fewer than two)."""
        n = len(self.units())
        var = self.variance()
        if n < 2 or var <= 0.0:
            return None
        half = t_quantile_975(n - 1) * math.sqrt(var / n)
        return (math.exp(self.level - half), math.exp(self.level + half))


def fresh_rounds(doc: Mapping[str, Any], variant: str, batch_size: int) -> FreshRounds | None:
    """The showdown rounds of ``variant@batch_size`` in a report, by process (None: not a finalist, or < 2 rounds).

    The process of each round is ``round_process`` where the showdown stored it; older showdowns alternated
    round r over ``processes`` workers (r mod processes).
    """
    showdown = doc.get("showdown")
    if not isinstance(showdown, Mapping):
        return None
    key = f"{variant}@{batch_size}"
    seconds = (showdown.get("seconds_per_call") or {}).get(key)
    if not isinstance(seconds, Sequence) or key in (showdown.get("dropped") or {}):
        return None
    run = len(seconds)
    used = [i for i in showdown.get("rounds_compared") or range(run) if isinstance(i, int) and 0 <= i < run]
    stored = showdown.get("round_process")
    count = int(showdown.get("processes") or 1)
    owner = [int(p) for p in stored] if isinstance(stored, Sequence) and len(stored) == run else \
        [i % max(count, 1) for i in range(run)]
    groups: dict[int, list[float]] = {}
    for i in used:
        value = float(seconds[i])
        if value > 0 and math.isfinite(value):
            groups.setdefault(owner[i], []).append(math.log(batch_size / value))
    if sum(len(g) for g in groups.values()) < 2:
        return None
    return FreshRounds(key, tuple(tuple(groups[p]) for p in sorted(groups)))


def fresh_ratio(a: FreshRounds, b: FreshRounds) -> tuple[float, tuple[float, float] | None]:
    """B/A throughput on fresh processes and its 95% CI (Welch t interval, the module docstring's pseudo-code)."""
    value = math.exp(b.level - a.level)
    na, nb = len(a.units()), len(b.units())
    va, vb = a.variance() / na, b.variance() / nb
    se2 = va + vb
    if se2 <= 0.0:
        return value, None
    denom = (va * va / (na - 1) if na > 1 else 0.0) + (vb * vb / (nb - 1) if nb > 1 else 0.0)
    df = se2 * se2 / denom if denom > 0 else 1.0
    half = t_quantile_975(df) * math.sqrt(se2)
    return value, (value * math.exp(-half), value * math.exp(half))


def screen_spread(doc: Mapping[str, Any]) -> float | None:
    """RMS of log(screen / fresh-process throughput) over a report's finalists (None: no finalist has both)."""
    d = []
    for row in doc.get("candidates") or []:
        if row.get("status") != "ok" or not isinstance(row.get("throughput"), int | float) or row["throughput"] <= 0:
            continue
        fresh = fresh_rounds(doc, str(row["variant"]), int(row["batch_size"]))
        if fresh is not None:
            d.append(math.log(float(row["throughput"]) / fresh.throughput))
    return math.sqrt(float(np.mean(np.square(d)))) if d else None


def widen(value: float, ci: tuple[float, float] | None, floor_log: float) -> tuple[float, float] | None:
    """``ci`` widened so that each side is at least ``floor_log`` from ``value`` on the log scale."""
    if ci is None or floor_log <= 0.0:
        return ci
    lo, hi = ci
    return (min(lo, value * math.exp(-floor_log)), max(hi, value * math.exp(floor_log)))


def screen_floor(a: Mapping[str, Any], b: Mapping[str, Any]) -> float | None:
    """The half-width floor (log scale) of a screen-vs-screen ratio CI (None: neither report shows its spread)."""
    sa, sb = screen_spread(a), screen_spread(b)
    if sa is None and sb is None:
        return None
    # a report without a showdown lends the other's spread: the screens of both runs move alike
    sa = sb if sa is None else sa
    sb = sa if sb is None else sb
    assert sa is not None and sb is not None
    return _Z95 * math.hypot(sa, sb)
