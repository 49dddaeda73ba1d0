"""The Gaussian segment cost: what a segment of constant behaviour costs to the changepoint search.

A segment of ``m`` values with (population) variance ``var`` costs ``m * log(var + var_floor)``:
twice its negative Gaussian log-likelihood up to constants, with the mean and the variance fitted
(the "normal" cost of ``ruptures``, including its absolute floor). Both searches of
:mod:`autotune.core.warmup.changepoints` (the grid search and the exact refinement) evaluate it for many
candidate segments at once from cumulative sums; it is written here once, so a fix lands in both
(it used to be written out twice, and a fix once reached only one copy).
"""

from __future__ import annotations

import numpy as np

__all__ = ["gaussian_cost"]


def gaussian_cost(length: np.ndarray, sum1: np.ndarray, sum2: np.ndarray, var_floor: float) -> np.ndarray:
    """``length * log(var + var_floor)`` for segments given their lengths, sums and sums of squares.

    In place, for the hot loop of the search: ``sum1`` and ``sum2`` are overwritten and the cost
    is returned in ``sum2``. Pseudo-code::

        mean = sum1 / length
        var  = sum2 / length - mean^2          # population variance from the sums
        var  = max(var, tiny)                  # see below
        cost = length * log(var + var_floor)

    ``E[x^2] - E[x]^2`` from cumulative sums can come out a hair below 0 (cancellation); a NaN
    from its log would win an argmin, so the variance is clamped at 0, and at 1e-300 when there
    is no floor (a log of 0 is -inf, which would win every comparison).
    """
    np.divide(sum1, length, out=sum1)
    np.multiply(sum1, sum1, out=sum1)
    np.divide(sum2, length, out=sum2)
    np.subtract(sum2, sum1, out=sum2)
    np.maximum(sum2, 1e-300 if var_floor <= 0.0 else 0.0, out=sum2)
    sum2 += var_floor
    np.log(sum2, out=sum2)
    np.multiply(sum2, length, out=sum2)
    return sum2
