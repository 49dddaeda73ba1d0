"""Open-loop arrival schedules: every request's intended send time, fixed before the run.

Why fixed in advance: a client that waits for an answer before it sends the next request (closed loop) sends
less when the server is slow, so the queue a real crowd would build never forms and the measured latency hides
it ("coordinated omission", triton-inference-server/server#3113). An open-loop client draws the arrival times
first, sends each request at its time whatever the server does, and counts latency from that intended time
(wrk2, vLLM ``bench serve --request-rate``). The schedules here are those times: sorted offsets in seconds
from the start of the run, numpy arrays, independent of any response.

- :func:`poisson`: independent users (exponential gaps of mean ``1 / rate``), reproducible from a seed.
- :func:`uniform`: one request every ``1 / rate`` seconds (no bursts: a lower bound on queueing).
- :func:`replay`: a recorded trace (arrival timestamps, one per line, or a JSON list), shifted to start at 0;
  :func:`rescale` plays it at another rate and repeats it to fill a run.

Pure: numpy only, no clock, no I/O except :func:`replay`'s read of its file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from autotune.core.limits import MAX_TRACE_BYTES, read_text_limited
from autotune.errors import InputError

__all__ = ["ArrivalKind", "Arrivals", "poisson", "replay", "rescale", "uniform"]

ArrivalKind = Literal["poisson", "closed", "replay"]


def _check_rate(rate: float, seconds: float) -> None:
    for name, value in (("rate", rate), ("seconds", seconds)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InputError(f"{name}: expected a positive finite number, got {value!r}")


def poisson(rate: float, seconds: float, seed: int = 0) -> np.ndarray:
    """Poisson arrivals at ``rate`` per second over ``[0, seconds)``: sorted offsets (s), the same for a seed.

    The gaps are exponential with mean ``1 / rate``; their count is random (about ``rate * seconds``), as in a
    real crowd. Drawn in one batch sized six standard deviations above the mean count, topped up if short.
    """
    _check_rate(rate, seconds)
    rng = np.random.default_rng(seed)
    mean = rate * seconds
    gaps = rng.exponential(1.0 / rate, size=int(mean + 6 * math.sqrt(mean) + 16))
    times = np.cumsum(gaps)
    while times[-1] < seconds:  # about never: the batch is 6 sigma above the mean
        more = np.cumsum(rng.exponential(1.0 / rate, size=max(16, int(mean)))) + times[-1]
        times = np.concatenate([times, more])
    return times[times < seconds]


def uniform(rate: float, seconds: float) -> np.ndarray:
    """One arrival every ``1 / rate`` seconds over ``[0, seconds)``, the first at 0."""
    _check_rate(rate, seconds)
    count = int(math.ceil(rate * seconds - 1e-9))
    times = np.arange(count, dtype=float) / rate
    return times[times < seconds]


_ALLOWED = ("one arrival timestamp in seconds per line (any origin; blank lines and lines starting with # are "
            "skipped), or a JSON list of numbers")


def replay(path: str | Path) -> np.ndarray:
    """A recorded trace's arrival times as offsets from its first arrival (sorted, starting at 0).

    The file holds one timestamp (seconds, any origin, e.g. Unix time) per line, or a JSON list of numbers.
    Out-of-order lines are sorted (a log merged from several front ends is rarely in order). A file that cannot
    be read, holds something other than finite numbers, or no arrival at all raises :class:`InputError` naming
    the file, the line and what is allowed.
    """
    p = Path(path)
    try:
        text = read_text_limited(p, MAX_TRACE_BYTES, what="arrivals file")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"arrivals file {p}: cannot read it ({getattr(exc, 'strerror', None) or exc}); "
                         f"expected {_ALLOWED}") from None
    values = _json_values(p, text) if text.lstrip().startswith("[") else _line_values(p, text)
    if not values:
        raise InputError(f"arrivals file {p}: no arrival in it; expected {_ALLOWED}")
    times = np.sort(np.asarray(values, dtype=float))
    return times - times[0]


def _json_values(path: Path, text: str) -> list[float]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"arrivals file {path}: line {exc.lineno}: not valid JSON ({exc.msg}); "
                         f"expected {_ALLOWED}") from None
    if not isinstance(data, list):
        raise InputError(f"arrivals file {path}: expected {_ALLOWED}")
    out = []
    for i, v in enumerate(data):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(f"arrivals file {path}: item {i} of the JSON list is {v!r}, not a finite number; "
                             f"expected {_ALLOWED}")
        out.append(float(v))
    return out


def _line_values(path: Path, text: str) -> list[float]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            shown = item if len(item) <= 40 else item[:37] + "..."
            raise InputError(f"arrivals file {path}: line {number}: {shown!r} is not a finite number; "
                             f"expected {_ALLOWED}")
        out.append(value)
    return out


def rescale(base: np.ndarray, rate: float, seconds: float) -> np.ndarray:
    """A trace played at ``rate`` per second and repeated (or cut) to fill ``[0, seconds)``.

    The trace keeps its shape (its bursts and lulls), only its time axis is stretched: its own rate is its gaps
    over its span; each repetition starts one mean gap after the previous one's last arrival, so the played
    rate is exactly ``rate`` over whole repetitions.
    """
    _check_rate(rate, seconds)
    base = np.sort(np.asarray(base, dtype=float))
    if base.size == 0:
        raise InputError("rescale: the trace has no arrival")
    base = base - base[0]
    span = float(base[-1])
    native = (base.size - 1) / span if span > 0 else rate
    scaled = base * (native / rate)
    period = float(scaled[-1]) + 1.0 / rate
    reps = int(math.ceil(seconds / period)) + 1
    tiled = (scaled[None, :] + period * np.arange(reps)[:, None]).ravel()
    return tiled[tiled < seconds]


@dataclass(frozen=True)
class Arrivals:
    """How requests arrive: ``poisson`` at ``rate``, ``closed`` (``concurrency`` clients, each sending when
    answered: no schedule) or ``replay`` of the trace at ``path`` (at ``rate`` if given, else its own)."""

    kind: ArrivalKind
    rate: float | None = None
    concurrency: int | None = None
    path: Path | None = None

    def offsets(self, seconds: float, seed: int = 0) -> np.ndarray:
        """The schedule of a run of ``seconds`` (InputError for ``closed``: the clients pace themselves)."""
        if self.kind == "poisson":
            if self.rate is None:
                raise InputError("poisson arrivals need a rate")
            return poisson(self.rate, seconds, seed)
        if self.kind == "replay":
            if self.path is None:
                raise InputError("replay arrivals need a file")
            base = replay(self.path)
            if self.rate is None:
                _check_rate(1.0, seconds)
                return base[base < seconds]
            return rescale(base, self.rate, seconds)
        raise InputError("closed arrivals have no schedule: each client sends when its answer comes")
