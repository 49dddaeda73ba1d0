"""``autotune loadtest URL``: open-loop load against a running KServe v2 server, from the command line.

The command's body, apart from cli.py (which defines its flags and exit codes): the model's metadata read from
the server (which also says whether the URL answers at all), the request bodies (an ``.npz`` of inputs or random
arrays shaped by the metadata), the schedule (Poisson, a replayed trace, or a closed loop), the run
(:mod:`autotune.serving.loadgen`) and its summary. Bad input (an unreachable URL, an unknown model, a bad file
or flag) raises :class:`InputError` naming the flag or file; cli.py prints it and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from autotune.errors import InputError
from autotune.serving import loadgen, schedule
from autotune.serving.requests import cut_requests, load_batches

#: A dynamic non-batch dimension of a random input (the metadata's -1 after the batch dim).
DYNAMIC_DIM = 16
#: Random request bodies built, then cycled.
RANDOM_BODIES = 8
#: At most this many distinct bodies from an ``--inputs`` file (the rest of its rows are not sent).
MAX_BODIES = 4096
_ARRIVALS = "poisson, closed, or a file of arrival timestamps (one per line, seconds) or a JSON list"


def run(args: argparse.Namespace) -> int:
    """Run the load test the flags describe; print its summary (or ``--json``); 0 / 1 as cli.py documents."""
    url = args.url.rstrip("/")
    loadgen.parse_url(url)  # InputError for a URL that is not http://HOST:PORT
    kind = args.arrivals
    if kind != "closed" and args.concurrency is not None:
        raise InputError("--concurrency: only with --arrivals closed (open-loop arrivals set no concurrency)")
    if kind == "poisson" and args.rate is None:
        raise InputError("--rate: required with --arrivals poisson (requests per second)")
    if kind == "closed" and args.rate is not None:
        raise InputError("--rate: not with --arrivals closed (the clients pace themselves; use --concurrency)")
    base = None
    if kind not in ("poisson", "closed"):
        path = Path(kind)
        if not path.is_file():
            raise InputError(f"--arrivals {kind}: no such file; allowed: {_ARRIVALS}")
        base = schedule.replay(path)
    metadata = fetch_metadata(url, args.model)
    notes: list[str] = []
    if args.inputs is not None:
        bodies = bodies_from_npz(args.inputs, args.samples, metadata)
    else:
        bodies = random_bodies(metadata, args.samples, args.seed, notes)
    for note in notes:
        print(f"autotune: {note}", file=sys.stderr)
    if kind == "closed":
        seconds = args.seconds or 10.0
        result = loadgen.run_closed(url, args.model, bodies, args.concurrency or 1, seconds, timeout_s=args.timeout_s)
        label = f"closed loop, {args.concurrency or 1} client(s)"
    else:
        if base is None:
            seconds = args.seconds or 10.0
            offsets = schedule.poisson(args.rate, seconds, args.seed)
            label = "poisson arrivals"
        else:
            if args.seconds is not None:
                seconds = args.seconds
            else:
                seconds = _trace_seconds(base, args.rate)
            offsets = schedule.Arrivals("replay", rate=args.rate, path=Path(kind)).offsets(seconds)
            label = f"arrivals replayed from {kind}"
        result = loadgen.run_load(url, args.model, bodies, offsets, timeout_s=args.timeout_s, seconds=seconds,
                                  rate=args.rate)
    passed = result.all_answered and (args.slo_ms is None or result.p99_ms <= args.slo_ms)
    if args.json:
        doc = result.to_dict()
        doc.update(url=url, model=args.model, samples=args.samples, slo_ms=args.slo_ms, passed=passed,
                   goodput=result.goodput(args.slo_ms) if args.slo_ms is not None else None)
        print(json.dumps(doc, indent=2))
    else:
        print(summary(result, url=url, model=args.model, label=label, slo_ms=args.slo_ms))
    return 0 if passed else 1


def _trace_seconds(base: np.ndarray, rate: float | None) -> float:
    """The trace played once (at ``rate``, if given): its span plus one mean gap."""
    span = float(base[-1])
    if span <= 0:
        return 1.0
    if rate is not None:  # schedule.rescale: n arrivals at `rate` span (n - 1) / rate, the next at n / rate
        return (base.size - 0.5) / rate
    return span * (1 + 0.5 / max(1, base.size - 1))


# ---- the server's metadata -----------------------------------------------------------------------------------


def fetch_metadata(url: str, model: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """``GET URL/v2/models/MODEL``: the model's inputs (name, datatype, shape) and ``max_batch_size``."""
    address = f"{url}/v2/models/{quote(model, safe='')}"
    try:
        with urllib.request.urlopen(address, timeout=timeout_s) as response:
            raw = response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        if exc.code == 404:
            raise InputError(f"--model {model}: the server at {url} has no such model (HTTP 404 for "
                             f"{address}: {detail}); name it with --model") from None
        raise InputError(f"{url}: GET {address} answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise InputError(f"{url}: cannot reach the server ({reason}); is it running, and is the URL "
                         "http://HOST:PORT?") from None
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise InputError(f"{url}: GET {address} did not answer a JSON object (is it a KServe v2 server?)")
    return doc


def _inputs_of(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    inputs = metadata.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(i, dict) and isinstance(i.get("name"), str)
                                               for i in inputs):
        return []
    return inputs


# ---- request bodies ----------------------------------------------------------------------------------------


def random_bodies(metadata: dict[str, Any], samples: int, seed: int,
                  notes: list[str]) -> list[tuple[bytes, dict[str, str]]]:
    """Random requests of ``samples`` rows shaped by the model's metadata.

    The first dimension is the batch (``samples`` rows) unless the model says ``max_batch_size: 0``; another
    dynamic dimension (-1) becomes :data:`DYNAMIC_DIM` (said in ``notes``). Floats are standard normal,
    integers uniform in [0, 100) (small enough for a vocabulary or class index), booleans fair coins.
    """
    inputs = _inputs_of(metadata)
    if not inputs:
        raise InputError("the model's metadata lists no inputs (name, datatype, shape): pass --inputs FILE.npz")
    batched = metadata.get("max_batch_size", 1) != 0
    rng = np.random.default_rng(seed)
    specs = []
    for spec in inputs:
        name, datatype, shape = spec["name"], spec.get("datatype"), spec.get("shape")
        dtype = _dtype(datatype, name)
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise InputError(f"input {name!r}: the metadata's shape {shape!r} is not a list of integers; "
                             "pass --inputs FILE.npz")
        dims = list(shape)
        if batched and dims:
            dims[0] = samples
        for k in range(1 if batched else 0, len(dims)):
            if dims[k] < 0:
                dims[k] = DYNAMIC_DIM
                notes.append(f"input {name!r}: dynamic dimension {k} set to {DYNAMIC_DIM} for random inputs "
                             "(pass --inputs FILE.npz for real ones)")
        specs.append((name, dtype, dims))
    bodies = []
    for _ in range(RANDOM_BODIES):
        arrays = {}
        for name, dtype, dims in specs:
            if dtype.kind == "f":
                arrays[name] = rng.standard_normal(dims).astype(dtype)
            elif dtype.kind == "b":
                arrays[name] = rng.random(dims) < 0.5
            else:
                arrays[name] = rng.integers(0, 100, size=dims).astype(dtype)
        bodies.append(loadgen.encode_binary_request(arrays))
    return bodies


_DTYPES = {"BOOL": "?", "UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "INT8": "<i1",
           "INT16": "<i2", "INT32": "<i4", "INT64": "<i8", "FP16": "<f2", "FP32": "<f4", "FP64": "<f8"}


def _dtype(datatype: Any, name: str) -> np.dtype[Any]:
    if datatype not in _DTYPES:
        raise InputError(f"input {name!r}: datatype {datatype!r} cannot be generated at random (allowed: "
                         f"{', '.join(_DTYPES)}); pass --inputs FILE.npz")
    return np.dtype(_DTYPES[datatype])


def bodies_from_npz(path: Path, samples: int, metadata: dict[str, Any]) -> list[tuple[bytes, dict[str, str]]]:
    """Requests of ``samples`` rows each from an ``.npz`` (keys: input names; first axis: rows), in row order; or
    from an artifact's ``traffic.npz`` (keys ``b<i>.<input>``), cut as the serving search cut it
    (:func:`autotune.serving.requests.cut_requests`)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except FileNotFoundError:
        raise InputError(f"--inputs {path}: no such file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"--inputs {path}: not a readable .npz of numeric arrays ({exc}); expected numpy.savez "
                         "output: one array per input name, first axis = rows") from None
    if not isinstance(arrays, dict) or not arrays:
        raise InputError(f"--inputs {path}: no arrays in it; expected one array per input name, first axis = rows")
    names = [i["name"] for i in _inputs_of(metadata)]
    if all(re.fullmatch(r"b\d+\..+", k) for k in arrays):  # an artifact's traffic.npz: its requests, as served
        reqs = cut_requests(load_batches(path, names or None), samples)
        return [loadgen.encode_binary_request(r) for r in reqs[:MAX_BODIES]]
    if names and sorted(names) != sorted(arrays):
        raise InputError(f"--inputs {path}: arrays {sorted(arrays)} do not match the model's inputs {names}")
    rows = set()
    for name, arr in arrays.items():
        if arr.ndim == 0:
            raise InputError(f"--inputs {path}: array {name!r} is a scalar; expected a first axis of rows")
        rows.add(arr.shape[0])
    if len(rows) != 1:
        raise InputError(f"--inputs {path}: the arrays have different numbers of rows ({sorted(rows)}); "
                         "the first axis must be the same for every input")
    n = rows.pop()
    if n < samples:
        raise InputError(f"--samples {samples}: --inputs {path} has only {n} rows")
    order = names or list(arrays)
    bodies = []
    for k in range(min(n // samples, MAX_BODIES)):
        part = {name: arrays[name][k * samples : (k + 1) * samples] for name in order}
        bodies.append(loadgen.encode_binary_request(part))
    return bodies


# ---- the summary ------------------------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.2f}"


def summary(result: loadgen.LoadResult, *, url: str, model: str, label: str, slo_ms: float | None) -> str:
    """A short table: rates, counts, percentiles with their intervals, the client's send lag."""
    intended = f"intended {result.rate:.1f} req/s, " if result.rate is not None else ""
    lines = [f"loadtest {url} model {model!r}: {label}, {result.seconds:g} s "
             f"({result.connections} connection(s) opened)",
             f"  rate      {intended}achieved {result.achieved_rate:.1f} req/s (ok over {result.elapsed_s:.2f} s)",
             f"  requests  sent {result.sent}, ok {result.ok}, failed {result.failed}, timed out {result.timed_out}, "
             f"dropped {result.dropped}"]
    for q, value, ci in (("p50", result.p50_ms, result.p50_ci_ms), ("p90", result.p90_ms, result.p90_ci_ms),
                         ("p99", result.p99_ms, result.p99_ci_ms)):
        lines.append(f"  {q} ms    {_ms(value)}  (95% CI {_ms(ci[0])} - {_ms(ci[1])})")
    if result.arrivals == "open":
        lines.append(f"  send lag  p99 {result.send_lag_p99_ms:.2f} ms, max {result.send_lag_max_ms:.2f} ms "
                     "(actual - intended send time: large means the client fell behind or every connection was busy)")
    if slo_ms is not None:
        verdict = "within" if math.isfinite(result.p99_ms) and result.p99_ms <= slo_ms else "OVER"
        lines.append(f"  SLO       p99 {verdict} {slo_ms:g} ms; goodput {result.goodput(slo_ms):.1f} req/s")
    lines.append("  (latency from the intended send time to the full answer; intervals: block bootstrap)"
                 if result.arrivals == "open" else "  (latency from each send to the full answer; closed loop: "
                 "queueing is hidden; intervals: block bootstrap)")
    if result.errors:
        lines.append("  errors:")
        lines += [f"    {e}" for e in result.errors]
    return "\n".join(lines)
