"""The noise model both detectors share: autocorrelation, trend, and when two levels are the same.

Timing noise is autocorrelated (a slow iteration makes the next one slow too), so every test
here scales the i.i.d. standard error by the AR(1) long-run variance factor
``tau = (1 + phi) / (1 - phi)``: otherwise the slow wander of such noise would be read as
drift or as a change of level.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.core.stats import lag1_autocorrelation

__all__ = ["PHI_MAX", "Equivalence", "estimate_phi", "trend"]

PHI_MAX = 0.9  # cap of the AR(1) estimate (long-run factor <= 19)


def estimate_phi(y: np.ndarray, window: int = 31) -> float:
    """AR(1) coefficient of the noise, insensitive to level shifts and smooth trends.

    For AR(1) noise the first differences have lag-1 autocorrelation ``-(1 - phi) / 2``, so
    ``phi = 1 + 2 * rho_d``. Differences are blind to the level; a step becomes one large
    difference, which clipping at 4 MAD neutralises, and a smooth trend (a decay, a drift)
    becomes a slowly varying mean of the differences, which a moving average removes.
    Clipped to [0, PHI_MAX]: beyond that the long-run factor (1+phi)/(1-phi) is too sensitive
    to the estimate to be useful, and such a series is closer to a random walk than to noise.
    """
    d = np.diff(y)
    if d.size < 8:
        return 0.0
    med = float(np.median(d))
    mad = 1.4826 * float(np.median(np.abs(d - med)))
    if mad > 0:
        d = np.clip(d, med - 4.0 * mad, med + 4.0 * mad)
    c = np.concatenate(([0.0], np.cumsum(d)))
    h = window // 2
    idx = np.arange(d.size)
    lo = np.maximum(idx - h, 0)
    hi = np.minimum(idx + h + 1, d.size)
    d = d - (c[hi] - c[lo]) / (hi - lo)
    return min(max(1.0 + 2.0 * lag1_autocorrelation(d), 0.0), PHI_MAX)


def trend(y: np.ndarray, tau: float) -> tuple[float, float]:
    """Relative change over ``y`` predicted by a least-squares line, and its t-statistic.

    The slope's standard error uses the residual scale of the fit times ``sqrt(tau)``, the
    long-run variance factor of the noise, so the slow wandering of autocorrelated noise is
    not mistaken for drift.
    """
    m = y.size
    if m < 3:
        return 0.0, 0.0
    t = np.arange(m, dtype=float) - (m - 1) / 2.0
    sxx = float(np.dot(t, t))
    mean = float(y.mean())
    slope = float(np.dot(t, y - mean)) / sxx
    resid = y - mean - slope * t
    sigma = math.sqrt(float(np.dot(resid, resid)) / (m - 2) * tau)
    rel = slope * m / mean if mean != 0 else 0.0
    se = sigma / math.sqrt(sxx)
    if se <= 0:
        return rel, (math.copysign(math.inf, slope) if slope else 0.0)
    return rel, slope / se


class Equivalence:
    """Are two segment means the same level? Relative tolerance, or within noise.

    ``|a - b| <= max(rel_tolerance * |b|, Z * sigma_lr * sqrt(1/n_a + 1/n_b))`` where
    ``sigma_lr`` is the long-run (autocorrelation-inflated) noise scale: two short segments of
    very noisy data are not called different just because PELT cut between them.
    """

    Z = 3.0

    def __init__(self, rel_tolerance: float, sigma_lr: float) -> None:
        self.rel = rel_tolerance
        self.sigma_lr = sigma_lr

    def __call__(self, a_mean: float, a_len: int, b_mean: float, b_len: int) -> bool:
        noise = self.Z * self.sigma_lr * math.sqrt(1.0 / a_len + 1.0 / b_len)
        return abs(a_mean - b_mean) <= max(self.rel * abs(b_mean), noise)
