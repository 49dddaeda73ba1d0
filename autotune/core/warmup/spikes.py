"""Isolated spikes in a timing series: found first, so they neither become segments nor inflate a variance.

A spike is a short excursion (at most 3 values) far from the local level (6 robust sigmas
from a rolling median). Recurring spikes (GC pauses, a periodic slow iteration) are part of
what running the model costs; one-off extreme ones (>= 20x the local level, at most 3: a
compile, a recompile) are an event the deployment pays once (:func:`one_off_spikes`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "EXTREME", "ONE_OFF_MAX", "SPIKE_MAX_RUN", "SPIKE_MAX_SHARE", "SPIKE_THRESHOLD", "SPIKE_WINDOW", "find_spikes",
    "one_off_spikes", "robust_sigma", "rolling_median", "spike_mask",
]

SPIKE_WINDOW = 15  # rolling-median window of the spike finder
SPIKE_THRESHOLD = 6.0  # robust sigmas from the local level
SPIKE_MAX_RUN = 3  # longer runs are level changes, not spikes
SPIKE_MAX_SHARE = 0.1  # more "spikes" than this: a bimodal distribution, not outliers

EXTREME = 20.0  # a spike this many times the local level is an event (compile), not noise
ONE_OFF_MAX = 3  # more extreme spikes than this recur: they stay in the steady mean


def rolling_median(x: np.ndarray, window: int) -> np.ndarray:
    """Centred rolling median; the ends are mirrored (not repeated: x[0] may be a spike)."""
    h = window // 2
    if x.size <= h:
        return np.full(x.size, float(np.median(x)))
    padded = np.pad(x, h, mode="reflect")
    view = np.lib.stride_tricks.sliding_window_view(padded, 2 * h + 1)
    med: np.ndarray = np.median(view, axis=1)
    return med


def robust_sigma(r: np.ndarray, level: float) -> float:
    mad = float(np.median(np.abs(r - np.median(r))))
    sigma = 1.4826 * mad
    if sigma <= 0.0:  # quantised timer or constant series
        sigma = float(np.std(r))
    return max(sigma, 1e-6 * abs(level), 1e-300)


def find_spikes(
    values: Sequence[float] | np.ndarray,
    *,
    window: int = 15,
    threshold: float = 6.0,
    max_run: int = 3,
) -> np.ndarray:
    """Boolean mask of isolated spikes: short excursions far from the local level.

    Pseudo-code::

        med   = centred rolling median (window, mirrored ends)
        r     = x - med;  sigma = 1.4826 * MAD(r)
        cand  = |r| > threshold * sigma
        spike = cand, in runs of at most max_run consecutive values of the same sign

    A longer run is a level change, not a spike, and is left to the changepoint search.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    if x.size < 5:
        return np.zeros(x.size, dtype=bool)
    return spike_mask(x, rolling_median(x, window), threshold, max_run)


def spike_mask(x: np.ndarray, med: np.ndarray, threshold: float, max_run: int) -> np.ndarray:
    n = x.size
    mask = np.zeros(n, dtype=bool)
    r = x - med
    sigma = robust_sigma(r, float(np.median(x)))
    sign = np.where(r > threshold * sigma, 1, np.where(r < -threshold * sigma, -1, 0))
    if not sign.any():
        return mask
    # run-length encode the sign sequence
    change = np.flatnonzero(np.diff(sign)) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [n]))
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if sign[s] != 0 and e - s <= max_run:
            mask[s:e] = True
    return mask


def one_off_spikes(x: np.ndarray, med: np.ndarray, spikes: np.ndarray) -> np.ndarray:
    """Boolean mask of one-off extreme spikes: at most ``ONE_OFF_MAX`` values >= ``EXTREME`` x the local level.

    Pseudo-code::

        extreme  = spike and x >= EXTREME * rolling median      (a compile, a recompile)
        one_off  = extreme if count(extreme) <= ONE_OFF_MAX else nothing

    Why: an iteration that costs 20x its neighbours is not the same work as they are (a
    compile, a recompile on a guard failure, a page-in of the weights). Once or a few times in
    a run it is an event the deployment pays once, and averaging it into the steady mean
    can double the mean (a 2,000x first call in 2,000 values). The same cost *recurring*
    (more than a few times: GC pauses, interrupts, a periodic slow iteration) is what every
    iteration costs on average, and stays in. The count, not the size, tells the two apart:
    recurring slow iterations of any size stay.
    """
    extreme = spikes & (x >= EXTREME * med)
    if int(extreme.sum()) > ONE_OFF_MAX:
        return np.zeros(x.size, dtype=bool)
    return extreme
