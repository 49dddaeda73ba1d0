"""Exact penalised changepoint search (PELT) with the Gaussian mean+variance cost, and its refinement.

:func:`pelt` is exact on a grid of candidate cuts (every ``jump``-th value, so a long series
costs what ``max_grid`` points cost); :func:`refine` then places each cut exactly within one
grid step. Both minimise the same penalised cost (:func:`autotune.core.warmup.cost.gaussian_cost`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autotune.core.warmup.cost import gaussian_cost
from autotune.errors import InputError

__all__ = ["check_finite", "pelt", "refine"]


def check_finite(x: np.ndarray) -> None:
    """Refuse NaN and infinite timings up front: a NaN cost would win every argmin of the search."""
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise InputError(f"timing at index {int(bad[0])} is {x[bad[0]]!r}; timings must be finite numbers")


def pelt(
    values: Sequence[float] | np.ndarray,
    *,
    penalty: float | None = None,
    min_size: int = 2,
    jump: int = 1,
    var_floor: float = 1e-6,
) -> list[int]:
    """Exact penalised changepoint search (PELT, Killick et al. 2012), Gaussian mean+variance cost.

    Minimises ``sum over segments of [ m * log(var + var_floor) ] + penalty * (#segments)``
    where ``m`` is the segment length and ``var`` its (population) variance: the "normal"
    cost of ``ruptures``, including its ``1e-6`` floor. The result equals
    ``ruptures.Pelt(model="normal", min_size=min_size, jump=jump).fit(x).predict(pen=penalty)``
    without the final ``n``: the returned indices are where new segments start, excluding 0
    and ``len(values)``. Note the floor is absolute: scale the series (``analyze`` standardises
    it) so that real variances are far above it.

    ``penalty`` defaults to BIC, ``3 log n`` (mean, variance and position per change).

    Pseudo-code (F[t] = optimal cost of x[:t], candidates = admissible last changepoints)::

        F[0] = 0; candidates = {0}
        for t in grid (multiples of jump >= min_size, then n):
            cost_s = F[s] + C(x[s:t]) for s in candidates     # one vectorised expression
            F[t]   = min cost_s + penalty;  last[t] = argmin
            candidates = {s : cost_s <= F[t]}                  # pruning, exact since K = 0
            add the next grid point t' with t' <= next_t - min_size
        backtrack last[] from n

    C(x[s:t]) comes from cumulative sums of x and x^2 in O(1) per candidate. The candidate set
    is kept in parallel arrays so each step is a handful of numpy calls.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    n = x.size
    if min_size < 1 or jump < 1:
        raise ValueError("min_size and jump must be at least 1")
    check_finite(x)
    if n < 2 * max(min_size, 1) or n < min_size + jump:
        return []
    pen = 3.0 * math.log(n) if penalty is None else float(penalty)
    c = x - float(np.median(x))  # centring keeps the cumulative sums well conditioned
    s1 = np.concatenate(([0.0], np.cumsum(c)))
    s2 = np.concatenate(([0.0], np.cumsum(c * c)))
    grid = [k for k in range(0, n, jump) if k >= min_size]
    grid.append(n)
    F = np.full(n + 1, np.inf)
    F[0] = 0.0
    last = np.zeros(n + 1, dtype=np.intp)
    cap = len(grid) + 2
    c_idx = np.zeros(cap, dtype=np.intp)
    c_pos = np.zeros(cap)
    c_s1 = np.zeros(cap)
    c_s2 = np.zeros(cap)
    c_f = np.zeros(cap)
    w_m = np.empty(cap)
    w_a = np.empty(cap)
    w_v = np.empty(cap)
    na = 0
    last_added = -1
    for t in grid:
        new = ((t - min_size) // jump) * jump
        if new != last_added and (new == 0 or new >= min_size):
            c_idx[na] = new
            c_pos[na] = new
            c_s1[na] = s1[new]
            c_s2[na] = s2[new]
            c_f[na] = F[new]
            na += 1
            last_added = new
        if na == 0:
            continue
        m = w_m[:na]
        a = w_a[:na]
        v = w_v[:na]
        np.subtract(float(t), c_pos[:na], out=m)
        np.subtract(s1[t], c_s1[:na], out=a)
        np.subtract(s2[t], c_s2[:na], out=v)
        gaussian_cost(m, a, v, var_floor)  # into v
        np.add(v, c_f[:na], out=v)
        k = int(np.argmin(v))
        best = float(v[k])
        F[t] = best + pen
        last[t] = c_idx[k]
        keep = v <= best + pen
        kept = int(np.count_nonzero(keep))
        if kept != na:
            for arr in (c_idx, c_pos, c_s1, c_s2, c_f):
                arr[:kept] = arr[:na][keep]
            na = kept
    out: list[int] = []
    t = n
    while t > 0:
        s = int(last[t])
        if s > 0:
            out.append(s)
        t = s
    out.reverse()
    return out


def refine(z: np.ndarray, cps: list[int], *, jump: int, penalty: float, min_size: int,
           var_floor: float) -> list[int]:
    """Exact placement of changepoints found on a ``jump`` grid.

    The grid search can only cut at multiples of ``jump``; a change between two grid points
    comes out as one cut a few values off, or as two cuts around a short mixed segment. Here
    the same penalised cost is minimised exactly over cuts within one grid step of the grid
    changepoints (any subset of them, so cuts may also merge or vanish), cluster by cluster
    (grid cuts closer than two steps form a cluster), between the neighbouring clusters'
    grid cuts as fixed ends::

        P = {left} + {c - jump + 1 .. c + jump - 1 : c in cluster} + {right}
        F[p] = min over q in P, q <= p - min_size of F[q] + C(z[q:p]) + penalty
    """
    if jump <= 1 or not cps:
        return cps
    n = z.size
    s1 = np.concatenate(([0.0], np.cumsum(z)))
    s2 = np.concatenate(([0.0], np.cumsum(z * z)))
    clusters: list[list[int]] = [[cps[0]]]
    for c in cps[1:]:
        if c - clusters[-1][-1] <= 2 * jump:
            clusters[-1].append(c)
        else:
            clusters.append([c])
    out: list[int] = []
    for i, cluster in enumerate(clusters):
        left = clusters[i - 1][-1] if i > 0 else 0
        right = clusters[i + 1][0] if i + 1 < len(clusters) else n
        cand: set[int] = set()
        for c in cluster:
            cand.update(range(max(left + min_size, c - jump + 1), min(right - min_size, c + jump - 1) + 1))
        pos = np.asarray([left, *sorted(cand), right], dtype=np.intp)
        F = np.full(pos.size, np.inf)
        F[0] = 0.0
        last = np.zeros(pos.size, dtype=np.intp)
        fpos = pos.astype(float)
        p1, p2 = s1[pos], s2[pos]
        for j in range(1, pos.size):
            m = fpos[j] - fpos[:j]
            tot = gaussian_cost(m, p1[j] - p1[:j], p2[j] - p2[:j], var_floor)
            tot += F[:j]
            tot[m < min_size] = np.inf
            k = int(tot.argmin())
            F[j] = tot[k] + penalty
            last[j] = k
        found: list[int] = []
        j = pos.size - 1
        while j > 0:
            j = int(last[j])
            if j > 0:
                found.append(int(pos[j]))
        out.extend(reversed(found))
    return out
