"""A stationary mixture of two speeds: per-call times that alternate at random between two levels.

Some models run two code paths or two cache states and switch between them call by call (a slow call in
three, at random). The changepoint search sees each short run of one level as a segment: it cuts the series
into dozens of pieces whose means differ by far more than the margin, the walk back stops at once, and the
trace is called ``no_steady_state``, though nothing trends and the mixture's mean is as stable as any level.
What is steady about such a series is the *mixture*: its share of slow calls and its two levels. Averaged over
blocks a few runs long, it is one level with ordinary noise, and the warmup analysis of those block means says
where it settles.

Detection (:func:`find_mixture`) looks at the second half of the series (where a steady state would be: a
warmup before it would otherwise be a third level), and all of these must hold::

    two-means split of log x (exact 1-D: the split of the sorted values with the least within sum of squares)
    minority share p >= SPIKE_MAX_SHARE (10%: fewer slow calls are spikes, :mod:`.spikes`)
    separated: |median_hi - median_lo| >= SEPARATION (4) x the larger of the two clusters' robust sd
               (bimodal beyond noise: Ashman's D >= 2 sqrt 2)
    a gap:     at most GAP_SHARE (5%) of the values lie between the clusters (farther than 2 robust sds from
               both medians): two levels, not several levels or a wander that a threshold cuts in two
    alternating: the runs of one level (with hysteresis: a value in the gap keeps the level before it)
               number >= MIN_RUNS (20), and their mean length is <= MAX_MEAN_RUN (8) and <= n / RUN_FRACTION
               (40): calls switch every few calls (a regime change, or a step from warmup to steady,
               makes a few long runs, not many short ones)

Analysis when found (in :func:`autotune.core.warmup.offline.analyze`)::

    b     = max(MIN_BLOCK, ceil(BLOCK_RUNS x mean run length))      # a block holds several runs
    y_b   = means of consecutive blocks of b values (the last partial block dropped)
    a     = analyze(y_b) with min_steady scaled by 1/b (at least 8 blocks)
    none: no_steady_state (the mixture itself moves: its share or its levels drift)
    else: steady from a.steady_start x b, class from a; mean, median and CI from the raw values from
          there on (the mixture's: every call, fast or slow), CI by the circular block bootstrap
          with a block of at least b; the two levels and the share are reported (the report notes
          that the series is bimodal)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.core.warmup.spikes import SPIKE_MAX_SHARE

__all__ = ["BLOCK_RUNS", "GAP_SHARE", "MAX_MEAN_RUN", "MIN_BLOCK", "MIN_RUNS", "RUN_FRACTION", "SEPARATION", "Mixture",
           "find_mixture"]

SEPARATION = 4.0  # distance of the two levels in robust sds of the wider cluster
GAP_SHARE = 0.05  # values allowed between the two clusters
MIN_RUNS = 20  # runs of one level: fewer are level changes (regimes, warmup), not a mixture
MAX_MEAN_RUN = 8.0  # calls per run of one level, on average, at most
RUN_FRACTION = 40  # mean run length at most n / RUN_FRACTION
BLOCK_RUNS = 4.0  # runs per block of the block means
MIN_BLOCK = 8


@dataclass(frozen=True)
class Mixture:
    """Two levels that alternate: their means (input units), the slow level's share and the runs' mean length."""

    low: float
    high: float
    share_high: float
    mean_run: float

    @property
    def block(self) -> int:
        """Values per block of the block-mean series the warmup analysis looks at."""
        return max(MIN_BLOCK, math.ceil(BLOCK_RUNS * self.mean_run))


def _robust_sd(v: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(v - np.median(v)))) if v.size else 0.0


def find_mixture(values: np.ndarray) -> Mixture | None:
    """The two alternating levels of the second half of ``values`` (seconds per call), or None (module docstring)."""
    x = np.asarray(values, dtype=float)
    x = x[x.size // 2 :]
    n = x.size
    if n < 2 * MIN_RUNS or not np.all(x > 0):
        return None
    z = np.log(x)
    s = np.sort(z)
    csum, csq = np.cumsum(s), np.cumsum(s * s)
    k = np.arange(1, n)  # split after k values
    left = csq[:-1] - csum[:-1] ** 2 / k
    right = (csq[-1] - csq[:-1]) - (csum[-1] - csum[:-1]) ** 2 / (n - k)
    split = int(np.argmin(left + right)) + 1
    threshold = 0.5 * (s[split - 1] + s[split])
    high = z > threshold
    share = float(high.mean())
    if min(share, 1.0 - share) < SPIKE_MAX_SHARE:
        return None
    lo, hi = z[~high], z[high]
    spread = max(_robust_sd(lo), _robust_sd(hi), 1e-12)
    m_lo, m_hi = float(np.median(lo)), float(np.median(hi))
    if m_hi - m_lo < SEPARATION * spread:
        return None
    low_band, high_band = z <= m_lo + 2.0 * spread, z >= m_hi - 2.0 * spread
    if float(np.mean(~low_band & ~high_band)) > GAP_SHARE:
        return None
    # True: the slow level; a value in the gap keeps the state before it (forward fill of the last banded value)
    last = np.maximum.accumulate(np.where(high_band | low_band, np.arange(n), -1))
    state = np.where(last >= 0, high_band[np.maximum(last, 0)], bool(high_band[0]))
    runs = 1 + int(np.count_nonzero(state[1:] != state[:-1]))
    mean_run = n / runs
    if runs < MIN_RUNS or mean_run > min(MAX_MEAN_RUN, n / RUN_FRACTION):
        return None
    return Mixture(low=float(np.exp(lo).mean()), high=float(np.exp(hi).mean()), share_high=share,
                   mean_run=mean_run)
