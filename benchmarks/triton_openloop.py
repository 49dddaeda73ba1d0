"""An open-loop load client built on ``tritonclient.http`` alone: the independent check of served figures.

The serving search measures with autotune's own client (:mod:`autotune.serving.loadgen`); a figure that only
that client confirms could share its bugs. This one shares nothing with it: the schedule is drawn here with
numpy (Poisson arrivals fixed before the run), requests go out through NVIDIA's ``tritonclient.http``
(geventhttpclient underneath, a pool of ``concurrency`` connections), each in a greenlet started at its
intended send time, and latency counts from that intended time to the answer, so a request that waited for a
free connection, or a server that fell behind, shows in the latency (no coordinated omission).

    python benchmarks/triton_openloop.py http://127.0.0.1:8000 --model quickstart --rate 200 --seconds 30 \
        --inputs out/artifact/traffic.npz
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gevent
import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype


def requests_from_npz(path: str, rows: int = 1) -> list[dict[str, np.ndarray]]:
    """The traffic file's batches cut into requests of ``rows`` rows (no trimming of padding: the plain way)."""
    batches: dict[int, dict[str, np.ndarray]] = {}
    with np.load(path) as data:
        for key in data.files:
            m = re.fullmatch(r"b(\d+)\.(.+)", key)
            if m:
                batches.setdefault(int(m.group(1)), {})[m.group(2)] = data[key]
    out = []
    for i in sorted(batches):
        b = batches[i]
        n = next(iter(b.values())).shape[0]
        out += [{k: np.ascontiguousarray(v[s:s + rows]) for k, v in b.items()} for s in range(0, n - rows + 1, rows)]
    return out


def _infer_inputs(request: Mapping[str, np.ndarray]) -> list[Any]:
    out = []
    for name, arr in request.items():
        x = httpclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        x.set_data_from_numpy(arr, binary_data=True)
        out.append(x)
    return out


def poisson_offsets(rate: float, seconds: float, seed: int) -> np.ndarray:
    """Send times (seconds from the start) of a Poisson schedule at ``rate``, drawn here with numpy."""
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * seconds * 1.5) + 10))
    return offsets[offsets < seconds]


def send_at(client: Any, model: str, prepared: Sequence[Any], offsets: np.ndarray, timeout_s: float
            ) -> tuple[np.ndarray, list[float], list[str], float]:
    """Each request in a greenlet started at its intended time; latency (s, nan when it failed) from that time,
    the send lags (s), the first errors' texts and the wall time."""
    latency = np.full(len(offsets), np.nan)
    errors: list[str] = []

    def one(i: int, intended: float) -> None:
        try:
            client.infer(model, prepared[i % len(prepared)])
            latency[i] = time.perf_counter() - intended
        except Exception as exc:  # an error is a request that did not meet any SLO
            errors.append(str(exc)[:200])

    start = time.perf_counter() + 0.2
    greenlets = []
    lag = []
    for i, off in enumerate(offsets):
        intended = start + float(off)
        wait = intended - time.perf_counter()
        if wait > 0:
            gevent.sleep(wait)
        lag.append(time.perf_counter() - intended)
        greenlets.append(gevent.spawn(one, i, intended))
    gevent.joinall(greenlets, timeout=timeout_s + 5)
    return latency, lag, errors, time.perf_counter() - start


def open_loop(url: str, model: str, requests: Sequence[Mapping[str, np.ndarray]], *, rate: float, seconds: float,
              seed: int = 1, concurrency: int = 128, timeout_s: float = 30.0, warm_fraction: float = 0.1
              ) -> dict[str, Any]:
    """Poisson arrivals at ``rate`` for ``seconds``; latency percentiles of the answered requests (the first
    ``warm_fraction`` of the schedule left out), errors counted."""
    host = url.split("://", 1)[-1].rstrip("/")
    client = httpclient.InferenceServerClient(host, concurrency=concurrency, connection_timeout=timeout_s,
                                              network_timeout=timeout_s)
    prepared = [_infer_inputs(r) for r in requests]
    offsets = poisson_offsets(rate, seconds, seed)
    latency, lag, errors, wall = send_at(client, model, prepared, offsets, timeout_s)
    client.close()
    kept = latency[int(len(latency) * warm_fraction):]
    ok = kept[np.isfinite(kept)] * 1000
    failed = int(np.sum(~np.isfinite(latency)))
    # failures count as infinitely late in the percentiles, as in the served SLO
    values = np.concatenate([ok, np.full(int(np.sum(~np.isfinite(kept))), np.inf)])
    pct = {f"p{q:g}_ms": (float(np.percentile(values, q)) if values.size else float("nan")) for q in (50, 90, 99)}
    return {"rate": rate, "seconds": seconds, "sent": len(offsets), "answered": len(offsets) - failed,
            "failed": failed, "achieved_rate": (len(offsets) - failed) / wall, **pct,
            "send_lag_p99_ms": float(np.percentile(lag, 99) * 1000) if lag else 0.0, "errors": errors[:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--model", required=True)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--inputs", required=True, help="a traffic.npz (keys b<i>.<input>)")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    got = open_loop(args.url, args.model, requests_from_npz(args.inputs, args.rows), rate=args.rate,
                    seconds=args.seconds, seed=args.seed)
    print(json.dumps(got, indent=2))


if __name__ == "__main__":
    main()
