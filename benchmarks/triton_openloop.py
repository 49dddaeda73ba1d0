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


def send_at(client: Any, model: str, prepared: Sequence[Any], offsets: np.ndarray, timeout_s: float,
            start: float | None = None, first: int = 0, step: int = 1
            ) -> tuple[np.ndarray, list[float], list[str], float]:
    """Each request in a greenlet started at its intended time; latency (s, nan when it failed) from that time,
    the send lags (s), the first errors' texts and the wall time. ``start`` (``time.perf_counter``, the same clock
    in every process on Linux) is the schedule's zero; ``first`` and ``step`` pick which of the traffic's requests
    the i-th send carries (a client process sending every step-th request of a shared schedule)."""
    latency = np.full(len(offsets), np.nan)
    errors: list[str] = []

    def one(i: int, intended: float) -> None:
        try:
            client.infer(model, prepared[(first + i * step) % len(prepared)])
            latency[i] = time.perf_counter() - intended
        except Exception as exc:  # an error is a request that did not meet any SLO
            errors.append(str(exc)[:200])

    start = time.perf_counter() + 0.2 if start is None else start
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
    return _summary(rate, seconds, offsets, latency, lag, errors, wall, warm_fraction)


def _summary(rate: float, seconds: float, offsets: np.ndarray, latency: np.ndarray, lag: Sequence[float],
             errors: Sequence[str], wall: float, warm_fraction: float) -> dict[str, Any]:
    kept = latency[int(len(latency) * warm_fraction):]
    ok = kept[np.isfinite(kept)] * 1000
    failed = int(np.sum(~np.isfinite(latency)))
    # failures count as infinitely late in the percentiles, as in the served SLO
    values = np.concatenate([ok, np.full(int(np.sum(~np.isfinite(kept))), np.inf)])
    pct = {f"p{q:g}_ms": (float(np.percentile(values, q)) if values.size else float("nan")) for q in (50, 90, 99)}
    return {"rate": rate, "seconds": seconds, "sent": len(offsets), "answered": len(offsets) - failed,
            "failed": failed, "achieved_rate": (len(offsets) - failed) / wall, **pct,
            "send_lag_p99_ms": float(np.percentile(lag, 99) * 1000) if lag else 0.0, "errors": errors[:3]}


def answers_check(url: str, model: str, requests: Sequence[Mapping[str, np.ndarray]], *, distinct: int = 12,
                  repeats: int = 3, tolerance: float = 0.02, seed: int = 0) -> dict[str, Any]:
    """Each of up to ``distinct`` requests of different shapes (at least 8 requests where the traffic has fewer
    shapes) answered alone, one at a time, then all of them sent at
    once ``repeats`` times (so the server's batcher merges them, padded): every answer must have its alone shape, and
    values within ``tolerance`` of the alone answer's largest magnitude (the server's own merge tolerance).

    Why: the latency checks never look at an answer, and a merged call cut back wrongly is still fast. A segmenter's
    96 x 128 class map came back 96 x 96 whenever a 128 x 96 image shared its call (session 47)."""
    from concurrent.futures import ThreadPoolExecutor

    host = url.split("://", 1)[-1].rstrip("/")
    by_shape: dict[tuple[tuple[int, ...], ...], Mapping[str, np.ndarray]] = {}
    for r in requests:
        by_shape.setdefault(tuple(tuple(a.shape) for a in r.values()), r)
    chosen = list(by_shape.values())[:distinct]
    # a traffic of few shapes: others of the same shapes too, so that the call merges several requests
    chosen += [r for r in requests if not any(r is c for c in chosen)][:max(0, min(distinct, 8) - len(chosen))]
    meta = httpclient.InferenceServerClient(host).get_model_metadata(model)
    names = [o["name"] for o in meta["outputs"]]

    def send(request: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        client = httpclient.InferenceServerClient(host)
        try:
            got = client.infer(model, _infer_inputs(request))
            return {n: got.as_numpy(n) for n in names}
        finally:
            client.close()

    alone = [send(r) for r in chosen]
    rng = np.random.default_rng(seed)
    worst, wrong = 0.0, []
    with ThreadPoolExecutor(max(2, len(chosen))) as pool:
        for _ in range(repeats):
            order = rng.permutation(len(chosen))
            for k, got in zip(order, pool.map(lambda k: send(chosen[k]), order), strict=True):
                for n in names:
                    a, b = alone[k][n], got[n]
                    if a.shape != b.shape:
                        wrong.append(f"{n}: {b.shape} under load, {a.shape} alone")
                        continue
                    scale = float(np.max(np.abs(a))) if a.size else 0.0
                    if a.size and scale > 0 and np.issubdtype(a.dtype, np.floating):
                        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))) / scale)
                    elif a.size and not np.array_equal(a, b):
                        wrong.append(f"{n}: values differ")
    return {"requests": len(chosen), "shapes": len(by_shape), "repeats": repeats, "worst_relative": worst,
            "wrong": wrong[:5], "ok": not wrong and worst <= tolerance}


def _part(args: tuple[str, str, Sequence[Mapping[str, np.ndarray]], np.ndarray, int, int, float, float, int, int]
          ) -> tuple[np.ndarray, list[float], list[str], float]:
    """One client process's share of a schedule (run in a forked child, pinned to its CPU)."""
    import os

    url, model, requests, offsets, first, step, start, timeout_s, concurrency, cpu = args
    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})
    host = url.split("://", 1)[-1].rstrip("/")
    client = httpclient.InferenceServerClient(host, concurrency=concurrency, connection_timeout=timeout_s,
                                              network_timeout=timeout_s)
    prepared = [_infer_inputs(r) for r in requests]
    try:
        return send_at(client, model, prepared, offsets, timeout_s, start=start, first=first, step=step)
    finally:
        client.close()


def open_loop_split(url: str, model: str, requests: Sequence[Mapping[str, np.ndarray]], *, rate: float,
                    seconds: float, cpus: Sequence[int], seed: int = 1, concurrency: int = 128,
                    timeout_s: float = 30.0, warm_fraction: float = 0.1) -> dict[str, Any]:
    """:func:`open_loop` with the schedule dealt round-robin to one client process per CPU in ``cpus``.

    Why: one tritonclient process (greenlets on one core) fell behind at 1,745 requests/s against a GPU server, its
    own send lag reaching 10 ms at p99, the whole SLO (session 47); a rate like that needs several senders. The
    schedule is drawn once at the whole rate, so the arrivals the server sees are the same Poisson process, and
    every latency still counts from its intended time."""
    import multiprocessing

    offsets = poisson_offsets(rate, seconds, seed)
    n = max(1, len(cpus))
    start = time.perf_counter() + 1.0 + 0.1 * n  # the children's start-up (a fork and a client each) comes first
    jobs = [(url, model, requests, offsets[k::n], k, n, start, timeout_s, max(8, concurrency // n), int(cpus[k]))
            for k in range(n)]
    with multiprocessing.get_context("fork").Pool(n) as pool:
        parts = pool.map(_part, jobs)
    latency = np.full(len(offsets), np.nan)
    lag: list[float] = []
    errors: list[str] = []
    for k, (lat, lg, err, _) in enumerate(parts):
        latency[k::n] = lat
        lag += lg
        errors += err
    wall = max(p[3] for p in parts)
    got = _summary(rate, seconds, offsets, latency, lag, errors, wall, warm_fraction)
    got["client_processes"] = n
    return got


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
