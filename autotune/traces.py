"""Timing traces: read them from files, draw them as text, describe them, and synthesise labelled ones.

A trace is a 1-D series of per-iteration times in seconds, in the order they were measured.
The ``autotune warmup`` command reads trace files with :func:`load_trace` and prints
:func:`summary` and :func:`sketch`; the synthetic generator (:func:`synthetic_trace`,
:func:`synthetic_suite`) produces traces with a known answer for the warmup detector's tests
and benchmark. It covers each phenomenon the detector must handle (steps, exponential decay,
compile spikes, isolated spikes, periodic slow iterations, slowdowns, drift, regime changes)
over wide ranges of length, level (microseconds to seconds), noise and autocorrelation, so a
detector scored on it is not scored on a handful of files it was tuned on.

numpy only.

Why one module (~550 lines): loading a trace, the synthetic generator and the held-out labels are the
one thing the warmup detector is judged on, and the benchmark uses all three together; most of the length is
the generator's documented noise models. (If it grows, the synthetic half is the one to move out.)
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.limits import MAX_TRACE_BYTES, MAX_TRACE_VALUES, read_text_limited
from autotune.errors import InputError

if TYPE_CHECKING:
    from autotune.core.warmup import WarmupAnalysis

__all__ = [
    "EXTRA_SHAPES",
    "HELD_OUT_SEED",
    "REAL_MARGIN",
    "SHAPES",
    "RealTraceLabel",
    "SyntheticTrace",
    "held_out_suite",
    "label_real_trace",
    "load_trace",
    "sketch",
    "summary",
    "synthetic_suite",
    "synthetic_trace",
]

#: The longest time per iteration a trace may hold (about 31 years): sums of squares of up to
#: MAX_TRACE_BYTES values this size stay far from float overflow.
MAX_SECONDS = 1e9

_ALLOWED = (
    "one number per line (seconds); a header line, blank lines, '#' comments and extra"
    " comma-separated columns (the first is used) are tolerated"
)


def load_trace(path: str | Path) -> np.ndarray:
    """Read a trace: ``.csv`` or ``.txt``, one number (seconds) per line.

    Tolerated: one non-numeric header line at the top, blank lines, ``#`` comments, and CSV rows
    with several columns (the first column is the value). Anything else raises
    :class:`~autotune.errors.InputError` naming the file, the line and what is allowed.
    """
    p = Path(path)
    try:
        text = read_text_limited(p, MAX_TRACE_BYTES, what=_ALLOWED)
    except FileNotFoundError as exc:
        raise InputError(f"{p}: no such file") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{p}: is a directory, expected a trace file") from exc
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    except ValueError as exc:  # a NUL character in the path
        raise InputError(f"{str(p)!r}: cannot read ({exc})") from None
    values: list[float] = []
    seen_content = False
    for lineno, raw in enumerate(io.StringIO(text), start=1):  # lazily: no list of every line at once
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        field = line.split(",")[0].strip().strip('"').strip("'")
        try:
            value = float(field)
        except ValueError:
            if not seen_content:  # a header line
                seen_content = True
                continue
            raise InputError(f"{p}, line {lineno}: {field!r} is not a number; expected {_ALLOWED}") from None
        seen_content = True
        if not math.isfinite(value):
            raise InputError(f"{p}, line {lineno}: {field!r} is not a finite number; expected {_ALLOWED}")
        if value < 0:
            raise InputError(f"{p}, line {lineno}: {field!r} is negative; a time in seconds must be >= 0")
        if value > MAX_SECONDS:
            raise InputError(f"{p}, line {lineno}: {field!r} is not a time per iteration; a time in seconds must "
                             f"be at most {MAX_SECONDS:g} (the analysis squares and sums them)")
        values.append(value)
        if len(values) > MAX_TRACE_VALUES:
            raise InputError(f"{p}, line {lineno}: more than {MAX_TRACE_VALUES:,} values; give at most that many "
                             "(the last ones, or every k-th: a warmup shows in far fewer)")
    if not values:
        raise InputError(f"{p}: no values; expected {_ALLOWED}")
    return np.asarray(values, dtype=float)


def _format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    a = abs(value)
    if a >= 1.0:
        return f"{value:.4g} s"
    if a >= 1e-3:
        return f"{value * 1e3:.4g} ms"
    if a >= 1e-6:
        return f"{value * 1e6:.4g} us"
    return f"{value * 1e9:.4g} ns"


def sketch(
    values: Sequence[float] | np.ndarray,
    analysis: WarmupAnalysis,
    *,
    width: int = 72,
    height: int = 12,
) -> str:
    """ASCII plot of the trace: one column per bucket of iterations, its median as ``*``.

    The detected steady start is a ``|`` column (``S`` on the axis), changepoints are ``^`` on
    the axis, and the steady mean a row of ``-``. The vertical range is set by the 1st-99th
    percentiles so that one compile spike does not flatten the rest; clipped values are drawn
    on the top or bottom row.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    if width < 10 or height < 3:
        raise ValueError("sketch needs width >= 10 and height >= 3")
    n = x.size
    if n == 0:
        return "(empty trace)"
    cols = min(width, n)
    edges = np.linspace(0, n, cols + 1).astype(int)
    meds = np.array([np.median(x[edges[c] : max(edges[c + 1], edges[c] + 1)]) for c in range(cols)])
    lo, hi = np.percentile(x, [1.0, 99.0])
    if analysis.steady_mean is not None:
        lo, hi = min(lo, analysis.steady_mean), max(hi, analysis.steady_mean)
    if hi <= lo:
        hi = lo + (abs(lo) * 1e-3 or 1e-12)

    def row(v: float) -> int:
        t = (v - lo) / (hi - lo)  # a span of subnormals (5e-324 to 1.5e-323) makes this overflow to inf
        if not math.isfinite(t):
            t = 1.0 if v > lo else 0.0
        return round(min(max(t, 0.0), 1.0) * (height - 1))

    grid = [[" "] * cols for _ in range(height)]
    if analysis.steady_mean is not None:
        r = row(analysis.steady_mean)
        for c in range(cols):
            grid[r][c] = "-"
    col_of = lambda i: min(int(np.searchsorted(edges, i, side="right")) - 1, cols - 1)  # noqa: E731
    if analysis.steady_start:
        sc = col_of(analysis.steady_start)
        for r in range(height):
            grid[r][sc] = "|"
    for c in range(cols):
        grid[row(float(meds[c]))][c] = "*"
    axis = ["-"] * cols
    for cp in analysis.changepoints:
        axis[col_of(cp)] = "^"
    if analysis.steady_start is not None:
        axis[col_of(analysis.steady_start)] = "S"
    label_w = max(len(_format_seconds(hi)), len(_format_seconds(lo)))
    lines = []
    for r in range(height - 1, -1, -1):
        label = _format_seconds(hi) if r == height - 1 else _format_seconds(lo) if r == 0 else ""
        lines.append(f"{label:>{label_w}} |{''.join(grid[r])}")
    lines.append(f"{'':>{label_w}} +{''.join(axis)}")
    lines.append(f"{'':>{label_w}}  0{'iteration':^{max(cols - 2 - len(str(n)), 1)}}{n}")
    return "\n".join(lines)


def summary(path: str | Path, analysis: WarmupAnalysis, *, consumed: int | None = None) -> str:
    """A few readable lines about one analysed trace (for ``autotune warmup`` without ``--json``)."""
    lines = [f"{path}: {analysis.classification} ({analysis.n} values)"]
    if analysis.steady_start is None:
        lines.append("  no steady state: the timings keep changing until the end of the trace")
    else:
        steady_n = analysis.n - analysis.steady_start
        lines.append(f"  steady from iteration {analysis.steady_start} ({steady_n} values)")
        def interval(ci: tuple[float, float] | None) -> str:
            return f"[{_format_seconds(ci[0])}, {_format_seconds(ci[1])}]" if ci is not None else "-"

        mean, median = _format_seconds(analysis.steady_mean), _format_seconds(analysis.steady_median)
        lines.append(f"  steady median {median}, 95% CI {interval(analysis.median_ci)} (4 batch medians: "
                     "the level's wander is in it)")
        lines.append(f"  steady mean {mean}, 95% CI of the mean {interval(analysis.ci)}")
        if analysis.wander is not None:
            lines.append(f"  the level wanders ±{100 * analysis.wander:.1f}% between blocks")
    cps = ", ".join(str(c) for c in analysis.changepoints[:12])
    more = f" (+{len(analysis.changepoints) - 12} more)" if len(analysis.changepoints) > 12 else ""
    one_off = f" ({len(analysis.one_off)} one-off, left out of the mean)" if analysis.one_off else ""
    lines.append(f"  changepoints: {cps or 'none'}{more}; isolated spikes: {len(analysis.outliers)}{one_off}")
    if consumed is not None:
        lines.append(f"  online detector would have stopped after {consumed} values")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Synthetic traces with known answers
# ---------------------------------------------------------------------------------------------

SHAPES = (
    "flat",
    "step",
    "expdecay",
    "multistep",
    "ramp",
    "compile_first",
    "spiky",
    "periodic",
    "slowdown",
    "drift",
    "late_drift",
    "regime",
)
#: Shapes outside :data:`SHAPES`, so that the suites scored since before they existed stay the same traces.
EXTRA_SHAPES = ("burst",)


@dataclass(frozen=True)
class SyntheticTrace:
    """A generated trace and its answer.

    ``steady_start`` is the first index of the steady state (None for ``no_steady_state``),
    ``oracle_mean`` the mean of all values from there on: what a perfect detector reports.
    """

    values: np.ndarray
    shape: str
    cls: str
    steady_start: int | None
    level: float | None
    cv: float
    phi: float
    seed: int
    #: iterations each value is the mean of (the held-out set's blocks; 1 for per-iteration traces)
    iterations_per_value: int = 1

    @property
    def n(self) -> int:
        return int(self.values.size)

    @property
    def oracle_mean(self) -> float | None:
        if self.steady_start is None:
            return None
        return float(self.values[self.steady_start :].mean())

    def label(self) -> dict[str, Any]:
        """The same fields as the shared ``labels.json`` entries."""
        return {
            "cls": self.cls,
            "steady_start": self.steady_start,
            "level": self.level,
            "mean": self.oracle_mean,
            "n": self.n,
            "cv": self.cv,
            "phi": self.phi,
            "shape": self.shape,
            "iterations_per_value": self.iterations_per_value,
        }


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """Stationary AR(1) noise with unit marginal variance."""
    e = rng.standard_normal(n)
    out = np.empty(n)
    out[0] = e[0]
    scale = math.sqrt(max(1.0 - phi * phi, 0.0))
    for i in range(1, n):
        out[i] = phi * out[i - 1] + scale * e[i]
    return out


def _apply_noise(
    base: np.ndarray, rng: np.random.Generator, cv: float, phi: float, skewed: bool
) -> np.ndarray:
    z = _ar1(rng, base.size, phi)
    if skewed:  # log-normal multiplicative noise: right-skewed like real timings
        s = math.sqrt(math.log1p(cv * cv))
        return base * np.exp(s * z - s * s / 2.0)
    return base * (1.0 + cv * z)


def synthetic_trace(
    shape: str,
    *,
    n: int = 2000,
    level: float = 1e-3,
    cv: float = 0.02,
    phi: float = 0.3,
    seed: int = 0,
    skewed: bool = False,
    change_at: int | None = None,
    iterations_per_value: int = 1,
) -> SyntheticTrace:
    """One labelled trace of the given ``shape`` (see :data:`SHAPES`); deterministic per seed.

    Noise is AR(1) with coefficient ``phi`` and marginal coefficient of variation ``cv``,
    multiplicative, optionally log-normal (``skewed``). Shape parameters (step heights,
    warmup lengths, spike rates...) are drawn from ``seed``. Labels follow Barrett et al.
    (2017): a trace whose last level change is in its last 20% has no steady state.

    ``change_at`` (a value index) fixes the position of the shape's main change instead of
    drawing it: the end of a step, ramp, multistep or spiky warmup, the steady start of an
    exponential decay (its time constant follows), the start of a slowdown. Shapes without
    such a change (flat, periodic, compile_first, drift, late_drift, regime) ignore it.
    ``iterations_per_value`` is only recorded (the values are block means of that many
    iterations: the detector's units).
    """
    if shape not in SHAPES + EXTRA_SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES + EXTRA_SHAPES)}")
    if n < 200:
        raise ValueError("synthetic traces need n >= 200")
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    base = np.full(n, level)
    start: int | None
    cls, start = "flat", 0
    spikes: np.ndarray | None = None  # multiplicative factors applied after the noise
    true_level: float | None = level

    def warmup_len(lo: int, frac: float) -> int:
        drawn = int(rng.integers(lo, max(lo + 1, int(n * frac))))
        return drawn if change_at is None else max(1, int(change_at))

    if shape == "flat":
        pass
    elif shape == "step":
        w = warmup_len(3, 0.25)
        base[:w] *= rng.uniform(1.15, 3.0)
        cls, start = "warmup", w
    elif shape == "expdecay":
        amp = float(np.exp(rng.uniform(math.log(0.3), math.log(6.0))))
        tau = float(np.exp(rng.uniform(math.log(2.0), math.log(max(3.0, n / 40)))))
        if change_at is not None:
            tau = max(change_at, 1) / math.log(amp / 0.005)
        base *= 1.0 + amp * np.exp(-t / tau)
        cls, start = "warmup", math.ceil(tau * math.log(amp / 0.005))
    elif shape == "multistep":
        k = int(rng.integers(2, 5))
        if change_at is None:
            bounds = np.sort(rng.choice(np.arange(5, int(n * 0.3)), size=k, replace=False))
        else:
            last = max(int(change_at), 1)
            lower = rng.integers(1, last, size=k - 1) if last > 1 else np.zeros(0, dtype=int)
            bounds = np.sort(np.unique(np.concatenate((lower, [last]))))
        factor = 1.0
        for b in bounds[::-1]:
            factor *= rng.uniform(1.1, 1.8)
            base[:b] = level * factor
        cls, start = "warmup", int(bounds[-1])
    elif shape == "ramp":
        w = warmup_len(20, 0.3)
        base[:w] *= 1.0 + rng.uniform(0.2, 2.0) * (1.0 - t[:w] / w)
        cls, start = "warmup", w
    elif shape == "compile_first":
        k = int(rng.integers(1, 4))
        spikes = np.ones(n)
        spikes[:k] = np.exp(rng.uniform(math.log(20.0), math.log(2000.0), size=k))
        cls, start = "warmup", k
    elif shape == "spiky":
        spikes = np.ones(n)
        rate = rng.uniform(0.002, 0.02)
        hit = rng.random(n) < rate
        spikes[hit] = rng.uniform(2.0, 15.0, size=int(hit.sum()))
        if rng.random() < 0.5:
            w = warmup_len(10, 0.2)
            base[:w] *= rng.uniform(1.3, 2.0)
            cls, start = "warmup", w
    elif shape == "periodic":
        period = int(rng.integers(5, 251))
        spikes = np.ones(n)
        spikes[::period] = rng.uniform(1.3, 2.5)
    elif shape == "slowdown":
        s = int(rng.integers(int(n * 0.1), int(n * 0.5))) if change_at is None else max(int(change_at), 2)
        jump = max(0.1, 3 * cv) + rng.uniform(0.0, 0.5)
        base[:s] /= 1.0 + jump
        if rng.random() < 0.4:  # a warmup before the fast phase
            w = int(rng.integers(5, max(6, s // 3)))
            base[:w] = level * rng.uniform(1.3, 2.5)
        cls, start = "slowdown", s
    elif shape == "drift":
        total = rng.uniform(0.1, 0.5) * (1 if rng.random() < 0.7 else -1)
        base *= 1.0 + total * (t / n - 1.0)
        cls, start, true_level = "no_steady_state", None, None
    elif shape == "late_drift":
        s = int(n * rng.uniform(0.5, 0.75))
        total = rng.uniform(0.1, 0.4) * (1 if rng.random() < 0.7 else -1)
        base[s:] *= 1.0 + total * (t[s:] - s) / (n - s)
        cls, start, true_level = "no_steady_state", None, None
    elif shape == "burst":
        # one level (after a warmup step, half of the time) that a neighbour slows 1-3 times for 0.5-4% of the
        # trace; each burst comes after the level has held at least as long as it lasts, and none in the last 20%
        w = warmup_len(3, 0.2) if rng.random() < 0.5 else 0
        if w:
            base[:w] *= rng.uniform(1.15, 3.0)
        for _ in range(int(rng.integers(1, 4))):
            length = int(rng.integers(max(3, n // 200), n // 25 + 1))
            first = w + length
            last = int(n * 0.8) - length
            if last > first:
                at = int(rng.integers(first, last))
                base[at : at + length] *= rng.uniform(1.05, 1.5)
        cls, start = ("warmup", w) if w else ("flat", 0)
    elif shape == "regime":
        levels = level * (1.0 + np.cumsum(rng.uniform(max(0.08, 3 * cv), 0.5, size=4)))
        levels = np.concatenate(([level], levels))
        pos = 0
        last_len = int(rng.integers(int(n * 0.03), int(n * 0.18)))
        cur = -1
        while pos < n - last_len:
            length = int(rng.integers(50, 400))
            if n - last_len - pos - length < 50:  # no sliver of a regime before the last one
                length = n - last_len - pos
            cur = int(rng.choice([i for i in range(levels.size) if i != cur]))
            base[pos : pos + length] = levels[cur]
            pos += length
        base[pos:] = levels[int(rng.choice([i for i in range(levels.size) if i != cur]))]
        cls, start, true_level = "no_steady_state", None, None
    values = _apply_noise(base, rng, cv, phi, skewed)
    if spikes is not None:
        values = values * spikes
    values = np.maximum(values, level * 1e-3)
    if start is not None:
        start = min(start, n - 1)
        if start == 0 and cls == "warmup":
            cls = "flat"
    return SyntheticTrace(
        values=values, shape=shape, cls=cls, steady_start=start, level=true_level, cv=cv, phi=phi, seed=seed,
        iterations_per_value=int(iterations_per_value),
    )


def synthetic_suite(count: int, *, seed: int = 0, shapes: Sequence[str] = SHAPES) -> list[SyntheticTrace]:
    """``count`` traces cycling through ``shapes`` with random length (500-5000), level
    (1 us - 1 s), cv (0.2% - 8%), AR(1) phi (0 - 0.9) and skew; deterministic per seed."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        shape = shapes[i % len(shapes)]
        out.append(
            synthetic_trace(
                shape,
                n=int(np.exp(rng.uniform(math.log(500), math.log(5000)))),
                level=float(np.exp(rng.uniform(math.log(1e-6), math.log(1.0)))),
                cv=float(np.exp(rng.uniform(math.log(0.002), math.log(0.08)))),
                phi=float(rng.uniform(0.0, 0.9)),
                seed=int(rng.integers(0, 2**31)),
                skewed=bool(rng.random() < 0.3),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Real traces: the labelling protocol (independent of the detector)
# ---------------------------------------------------------------------------------------------

#: Practical-equivalence margin the real corpus is labelled at (the showdown's default margin).
REAL_MARGIN = 0.02


@dataclass(frozen=True)
class RealTraceLabel:
    """The labelling protocol's verdict on one captured trace (see :func:`label_real_trace`).

    ``reference`` is the median of the late half, the level a correct detector must report
    within the margin; ``steady`` says whether the late half holds one level at that margin;
    ``first_call_ratio`` is value 0 over the reference (the compile / first-call cost);
    ``late_window_spread`` the largest relative distance of a late-half window median from
    the reference.
    """

    reference: float
    steady: bool
    first_call_ratio: float
    late_window_spread: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "label": "steady" if self.steady else "no_steady_state",
            "first_call_ratio": self.first_call_ratio,
            "late_window_spread": self.late_window_spread,
            "n": self.n,
        }


def label_real_trace(values: Sequence[float] | np.ndarray, *, margin: float = REAL_MARGIN,
                     windows: int = 4) -> RealTraceLabel:
    """Label a real trace without the detector: the late half is the reference.

    Protocol (fixed before any detector was scored on the corpus)::

        late      = values[n // 2:]
        reference = median(late)
        split late into `windows` equal consecutive windows; w_i = median of window i
        spread    = max_i |w_i - reference| / reference
        steady    = spread <= margin

    Why medians: one-off spikes (a recompile, an interrupt) and short bursts must not move a
    window. Why the margin: levels closer than the margin are one level to the final
    comparison (it calls such candidates a tie), so a late half whose windows all stay within
    the margin of its median holds one practical level; one whose windows wander further has
    no level to score a detector against, and is labelled ``no_steady_state``.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    n = int(x.size)
    if n < 8 * windows:
        raise ValueError(f"a real trace needs at least {8 * windows} values, got {n}")
    late = x[n // 2 :]
    ref = float(np.median(late))
    parts = np.array_split(late, windows)
    spread = max(abs(float(np.median(p)) - ref) for p in parts) / ref
    return RealTraceLabel(reference=ref, steady=spread <= margin, first_call_ratio=float(x[0] / ref),
                          late_window_spread=float(spread), n=n)


#: The held-out set's seed, picked once and never tuned on (see BENCHMARKS.md).
HELD_OUT_SEED = 8675309
#: Change positions of the held-out set are drawn uniformly from 1..HELD_OUT_HORIZON iterations.
HELD_OUT_HORIZON = 3000
#: Per-iteration seconds of the held-out set: log-uniform over this range (fast GPU calls to CPU
#: model calls of the shipped recipes at small batches), blocked like the timing loop's
#: throughput mode: k = ceil(5 ms / call) iterations per value.
HELD_OUT_CALL_SECONDS = (10e-6, 10e-3)
HELD_OUT_BLOCK_SECONDS = 0.005


def held_out_suite(
    count: int,
    *,
    seed: int = HELD_OUT_SEED,
    horizon: int = HELD_OUT_HORIZON,
    call_seconds: tuple[float, float] = HELD_OUT_CALL_SECONDS,
    block_seconds: float = HELD_OUT_BLOCK_SECONDS,
    shapes: Sequence[str] = SHAPES,
) -> list[SyntheticTrace]:
    """Held-out traces in the detector's units: change positions in *iterations*, values are block means.

    Per trace::

        c  = per-iteration seconds, log-uniform over call_seconds
        k  = ceil(block_seconds / c)                       # iterations per value (throughput mode)
        p  = change position in iterations, uniform on 1..horizon; in values ceil(p / k)
        n  = values: log-uniform 500..5000, at least 2 * ceil(p / k) + 100 (so the change is
             not in the last 20%: a steady tail exists to be found)
        synthetic_trace(shape, n, level = c, change_at = ceil(p / k), cv 0.2%-8%,
                        phi 0-0.9, 30% skewed)

    ``seed`` defaults to :data:`HELD_OUT_SEED`, chosen once and never tuned on.
    """
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        shape = shapes[i % len(shapes)]
        c = float(np.exp(rng.uniform(math.log(call_seconds[0]), math.log(call_seconds[1]))))
        k = max(1, math.ceil(block_seconds / c))
        p_it = int(rng.integers(1, horizon + 1))
        p_val = max(1, math.ceil(p_it / k))
        n = int(np.exp(rng.uniform(math.log(500), math.log(5000))))
        n = max(n, 2 * p_val + 100)
        out.append(
            synthetic_trace(
                shape,
                n=n,
                level=c,
                cv=float(np.exp(rng.uniform(math.log(0.002), math.log(0.08)))),
                phi=float(rng.uniform(0.0, 0.9)),
                seed=int(rng.integers(0, 2**31)),
                skewed=bool(rng.random() < 0.3),
                change_at=p_val,
                iterations_per_value=k,
            )
        )
    return out
