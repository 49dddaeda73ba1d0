"""The open-loop load generator: HTTP/1.1 requests to a KServe v2 endpoint at times fixed before the run.

Why open loop: a client that waits for each answer before sending the next one slows down with the server and
never builds the queue real users would (coordinated omission). Here each request leaves at its intended time
(:mod:`autotune.serving.schedule`), whatever earlier requests are doing, and its latency is counted from that
intended time to the last byte of the response, so time a request spent waiting for the client (a busy
connection, a late event loop) is charged as latency, not hidden. Whether the client kept up is reported too:
the send lag (actual - intended send time), its p99 and max.

How (pseudo-code of :func:`run_load`)::

    open a few keep-alive connections (TCP_NODELAY: Nagle vs delayed ACK, see the serving notes), t0 = now
    scheduler: for each offset: sleep until t0 + offset; put the request's index on the queue;
               if more requests wait than connections are idle: open another connection (up to a cap)
    each connection: take an index; if its deadline (intended + timeout) passed before it could be sent:
                     dropped; else write the pre-built request bytes, read the status line and the
                     Content-Length body; ok (200) / failed (other status, broken connection) / timed_out
    after the last offset: wait for the answers until their deadlines; what is left is timed out or dropped

Outcomes: ``ok`` (200), ``failed`` (another status or a connection broken after the send; the first few
messages are kept), ``timed_out`` (no full answer within ``timeout_s`` of the intended send time), ``dropped``
(never sent: no connection could be opened, e.g. refused, or every connection stayed busy past the request's
deadline). ``sent`` counts the requests written. A failing server shows up in the counts, never as an
exception.

Cheap per request (it shares the machine with the server it measures): raw asyncio streams, each request's bytes
built once before the run, a response parser that reads the status code and Content-Length and nothing else,
one long-lived coroutine per connection (no task per request), the host resolved once. Measured capacity
(Python 3.11 on this 2-core machine shared with other work, against a trivial asyncio server in another process
answering 200 with a 2-byte body on loopback, Poisson arrivals for 3 s, a 64-byte binary request): 8,000
requests/s kept in every try (send lag p99 1.2 ms, max under 8 ms), up to 16,000 in quiet moments; once, at
10,000, it fell behind (send lag p99 72 ms, the pool at its 512-connection cap), which the send lag shows.
Closed loop: 17,000 requests/s on one connection, 40,000 on eight. Far above what a model server on a few cores
sustains; the send lag in every result says when the client was not keeping up. At any rate the send lag is
about 1-2 ms at p99 (the event loop wakes on millisecond timers), and a latency, counted from the intended
time, includes its request's lag.

Percentile intervals: 95% circular block bootstrap of the ok latencies in send order
(:func:`autotune.core.stats.bootstrap_percentiles`): latencies under queueing are autocorrelated (a queue drains
slowly), which an order-statistic interval for independent values would ignore.

Standard library (asyncio) and numpy; no torch (the parent runs it).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, urlsplit

import numpy as np

from autotune.core.stats import bootstrap_percentiles, replicate_interval
from autotune.errors import InputError

__all__ = ["LoadResult", "Target", "encode_binary_request", "parse_url", "resolve", "run_closed", "run_load"]

#: Requests whose first messages are kept per result.
MAX_ERRORS = 5
#: Default cap on open connections (one request in flight on each: HTTP/1.1 without pipelining).
MAX_CONNECTIONS = 512
#: Connections opened before the clock starts (more are opened while the run needs them).
WARM_CONNECTIONS = 4
#: Bootstrap resamples per percentile interval.
N_BOOT = 500

_PENDING, _OK, _FAILED, _TIMED_OUT, _DROPPED = 0, 1, 2, 3, 4

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


# ---- the wire -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where requests go: ``host:port`` and the path prefix of the server's base URL."""

    host: str
    port: int
    prefix: str
    #: The host's address, resolved once (a name would be looked up again on every connection, in a thread).
    address: str = ""

    def path(self, model: str) -> str:
        return f"{self.prefix}/v2/models/{quote(model, safe='')}/infer"


def parse_url(url: str) -> Target:
    """A server's base URL (``http://127.0.0.1:8000``, optionally with a path prefix) as a :class:`Target`."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"URL {url!r}: {exc}; expected http://HOST:PORT") from None
    if parts.scheme != "http" or not parts.hostname:
        raise InputError(f"URL {url!r}: expected http://HOST:PORT (plain HTTP; https is not supported)")
    return Target(parts.hostname, port or 80, parts.path.rstrip("/"))


def build_request(target: Target, model: str, body: bytes, headers: Mapping[str, str]) -> bytes:
    """One infer request's bytes, built once before the run: request line, headers, body."""
    lines = [f"POST {target.path(model)} HTTP/1.1", f"Host: {target.host}:{target.port}",
             f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("content-length", "host")]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def resolve(target: Target) -> Target:
    """``target`` with its host's address (InputError for a name that does not resolve)."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"URL http://{target.host}:{target.port}: cannot resolve {target.host!r} ({exc})") from None
    return replace(target, address=str(infos[0][4][0]))


async def _connect(target: Target) -> _Conn:
    reader, writer = await asyncio.open_connection(target.address or target.host, target.port)
    sock = writer.get_extra_info("socket")
    if sock is not None:  # asyncio sets it too, on TCP; said here because latency depends on it
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, close): the status line and Content-Length (chunked too); other headers are skipped."""
    head = await reader.readuntil(b"\r\n\r\n")
    if head[:5] != b"HTTP/" or len(head) < 12:
        raise ValueError(f"not an HTTP response: {head[:40]!r}")
    status = int(head[9:12])
    lower = head.lower()
    close = b"\r\nconnection: close" in lower
    i = lower.find(b"\r\ncontent-length:")
    if i >= 0:
        n = int(head[i + 17 : head.index(b"\r\n", i + 2)])
        body = await reader.readexactly(n) if n else b""
    elif b"\r\ntransfer-encoding: chunked" in lower:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, up to the blank line
                    pass
                break
            parts.append((await reader.readexactly(size + 2))[:-2])
        body = b"".join(parts)
    else:  # no length: the body runs to the end of the connection
        body, close = await reader.read(), True
    return status, body, close


def _close(conn: _Conn | None) -> None:
    if conn is not None:
        conn[1].close()


def _failure(status: int, body: bytes) -> str:
    text = body[:300].decode("utf-8", "replace")
    try:
        message = json.loads(body).get("error", text) if body[:1] == b"{" else text
    except (ValueError, AttributeError):
        message = text
    return f"HTTP {status}: {message}"


class _Client:
    """What both loops share: the target, the request bytes, the per-request exchange and the error log."""

    def __init__(self, target: Target, requests: Sequence[bytes], timeout_s: float) -> None:
        self.target = target
        self.requests = requests
        self.timeout_s = timeout_s
        self.errors: list[str] = []
        self.connections = 0  # opened, in all
        self.loop = asyncio.get_running_loop()

    def note(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS and message not in self.errors:
            self.errors.append(message)

    async def exchange(self, conn: _Conn | None, request: bytes,
                       deadline: float) -> tuple[_Conn | None, int, float, float]:
        """Send ``request`` (on ``conn``, or a new connection) and read its answer by ``deadline``.

        Returns (the connection to reuse or None, outcome, send time or nan, completion time or nan). A reused
        keep-alive connection the server closed meanwhile (EOF before any byte of the answer) is replaced and
        the request sent once more.
        """
        loop = self.loop
        sent_at = math.nan
        for attempt in (0, 1):
            reused = conn is not None
            try:
                async with asyncio.timeout_at(deadline):
                    if conn is None:
                        conn = await _connect(self.target)
                        self.connections += 1
                    now = loop.time()  # before the write: the write's system call may let other threads run
                    conn[1].write(request)
                    sent_at = now
                    status, body, close = await _read_response(conn[0])
            except TimeoutError:
                _close(conn)
                if math.isnan(sent_at):
                    self.note(f"not sent: no connection to {self.target.host}:{self.target.port} within "
                              f"the {self.timeout_s:g} s timeout")
                    return None, _DROPPED, sent_at, math.nan
                return None, _TIMED_OUT, sent_at, math.nan
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                _close(conn)
                conn = None
                stale = isinstance(exc, asyncio.IncompleteReadError) and not exc.partial
                if reused and attempt == 0 and (stale or isinstance(exc, ConnectionResetError)):
                    continue
                if math.isnan(sent_at):
                    self.note(f"not sent: cannot connect to {self.target.host}:{self.target.port} "
                              f"({getattr(exc, 'strerror', None) or exc})")
                    return None, _DROPPED, sent_at, math.nan
                self.note(f"connection broken: {type(exc).__name__}: {exc}")
                return None, _FAILED, sent_at, loop.time()
            done = loop.time()
            if close:
                _close(conn)
                conn = None
            if status == 200:
                return conn, _OK, sent_at, done
            self.note(_failure(status, body))
            return conn, _FAILED, sent_at, done
        raise AssertionError("unreachable")  # pragma: no cover


# ---- open loop ------------------------------------------------------------------------------------------------


class _OpenLoop(_Client):
    def __init__(self, target: Target, requests: Sequence[bytes], offsets: np.ndarray, timeout_s: float,
                 max_connections: int) -> None:
        super().__init__(target, requests, timeout_s)
        n = len(offsets)
        self.offsets = offsets
        self.outcome = np.zeros(n, dtype=np.int8)
        self.lag = np.full(n, math.nan)
        self.latency = np.full(n, math.nan)
        self.done = np.full(n, math.nan)
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        self.idle = 0
        self.workers: list[asyncio.Task[None]] = []
        self.max_connections = max_connections
        self.t0 = 0.0

    def _spawn(self, conn: _Conn | None) -> None:
        self.workers.append(asyncio.create_task(self._worker(conn)))

    async def run(self) -> None:
        warm = []
        for _ in range(min(WARM_CONNECTIONS, len(self.offsets), self.max_connections)):
            try:
                async with asyncio.timeout(min(self.timeout_s, 5.0)):
                    warm.append(await _connect(self.target))
                    self.connections += 1
            except (OSError, TimeoutError):
                break  # the requests themselves will say what happens (dropped, with the message)
        loop, queue, offsets = self.loop, self.queue, self.offsets
        self.t0 = t0 = loop.time() + 0.002
        for conn in warm:
            self._spawn(conn)
        for i in range(len(offsets)):
            delay = t0 + offsets[i] - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            queue.put_nowait(i)
            if queue.qsize() > self.idle and len(self.workers) < self.max_connections:
                self._spawn(None)
        for _ in self.workers:
            queue.put_nowait(-1)
        last = t0 + (float(offsets[-1]) if len(offsets) else 0.0)
        if self.workers:
            _, pending = await asyncio.wait(self.workers, timeout=max(0.0, last + self.timeout_s - loop.time()) + 2)
            for task in pending:  # past every deadline: nothing should be left
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        unsent = (self.outcome == _PENDING) & np.isnan(self.lag)
        self.outcome[unsent] = _DROPPED
        self.outcome[self.outcome == _PENDING] = _TIMED_OUT

    async def _worker(self, conn: _Conn | None) -> None:
        queue, loop, t0, requests = self.queue, self.loop, self.t0, self.requests
        n_req = len(requests)
        try:
            while True:
                self.idle += 1
                try:
                    i = await queue.get()
                finally:
                    self.idle -= 1
                if i < 0:
                    return
                intended = t0 + self.offsets[i]
                deadline = intended + self.timeout_s
                if loop.time() >= deadline:
                    self.outcome[i] = _DROPPED
                    self.note(f"not sent within the {self.timeout_s:g} s timeout: all {self.max_connections} "
                              "connections were busy")
                    continue
                conn, outcome, sent_at, done = await self.exchange(conn, requests[i % n_req], deadline)
                self.outcome[i] = outcome
                self.lag[i] = sent_at - intended
                if outcome == _OK:
                    self.latency[i] = done - intended
                    self.done[i] = done - t0
        finally:
            _close(conn)


# ---- closed loop ---------------------------------------------------------------------------------------------


class _ClosedLoop(_Client):
    def __init__(self, target: Target, requests: Sequence[bytes], timeout_s: float) -> None:
        super().__init__(target, requests, timeout_s)
        self.counter = 0
        self.counts = [0, 0, 0, 0, 0]
        self.ok: list[tuple[float, float]] = []  # (send time, latency)
        self.t0 = 0.0
        self.last_done = 0.0

    async def run(self, concurrency: int, seconds: float) -> None:
        self.t0 = self.loop.time()
        end = self.t0 + seconds
        await asyncio.gather(*(self._client(end) for _ in range(concurrency)))

    async def _client(self, end: float) -> None:
        loop, requests = self.loop, self.requests
        conn: _Conn | None = None
        try:
            while (now := loop.time()) < end:
                i = self.counter
                self.counter += 1
                conn, outcome, sent_at, done = await self.exchange(conn, requests[i % len(requests)],
                                                                   now + self.timeout_s)
                self.counts[outcome] += 1
                if outcome == _OK:
                    self.ok.append((sent_at, done - sent_at))
                    self.last_done = max(self.last_done, done - self.t0)
                elif outcome == _DROPPED:  # refused: do not spin on it
                    await asyncio.sleep(min(0.05, max(0.0, end - loop.time())))
        finally:
            _close(conn)


# ---- the result ----------------------------------------------------------------------------------------------


def _nan_to_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass(frozen=True)
class LoadResult:
    """What a load run measured. Latencies in ms, counted from the intended send time (open loop) or the send
    (closed loop), of the ok requests only, in send order; percentiles with 95% block-bootstrap intervals
    (nan when nothing was answered). ``achieved_rate``: ok requests per second of the run, whose length is
    ``elapsed_s`` = the schedule's ``seconds`` or, when answers came later, until the last ok answer."""

    arrivals: str  # "open" | "closed"
    rate: float | None  # intended (open loop); None for a closed loop
    concurrency: int | None  # closed loop
    seconds: float
    elapsed_s: float
    sent: int
    ok: int
    failed: int
    timed_out: int
    dropped: int
    achieved_rate: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p50_ci_ms: tuple[float, float]
    p90_ci_ms: tuple[float, float]
    p99_ci_ms: tuple[float, float]
    send_lag_p99_ms: float
    send_lag_max_ms: float
    connections: int
    errors: tuple[str, ...]
    latencies_ms: np.ndarray = field(repr=False, compare=False)

    @property
    def requests(self) -> int:
        """Requests in the run: sent or dropped."""
        return self.sent + self.dropped

    @property
    def all_answered(self) -> bool:
        """Every request was sent and answered 200."""
        return self.ok == self.requests and self.requests > 0

    def goodput(self, slo_ms: float) -> float:
        """Requests per second answered ok within ``slo_ms`` (the rate of useful answers)."""
        good = int(np.count_nonzero(self.latencies_ms <= slo_ms))
        return good / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self, *, latencies: bool = False) -> dict[str, Any]:
        """JSON-ready (nan -> null); the latencies themselves only when asked."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            if name == "latencies_ms":
                continue
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = [_nan_to_none(v) for v in value]
            out[name] = _nan_to_none(value)
        out["ci_method"] = "block bootstrap, 95%"
        if latencies:
            out["latencies_ms"] = [round(float(v), 4) for v in self.latencies_ms]
        return out


def _percentile_ci(lat: np.ndarray, q: float) -> tuple[float, tuple[float, float]]:
    if lat.size == 0:
        return math.nan, (math.nan, math.nan)
    value = float(np.percentile(lat, q))
    if lat.size < 2:
        return value, (value, value)
    lo, hi = replicate_interval(bootstrap_percentiles(lat, q, n_boot=N_BOOT, seed=int(q)))
    return value, (lo, hi)


def _result(*, arrivals: str, rate: float | None, concurrency: int | None, seconds: float, counts: Sequence[int],
            latencies_s: np.ndarray, lags_s: np.ndarray, last_done: float, connections: int,
            errors: Sequence[str]) -> LoadResult:
    lat = np.asarray(latencies_s, dtype=float) * 1000.0
    ok, failed, timed_out, dropped = (int(counts[k]) for k in (_OK, _FAILED, _TIMED_OUT, _DROPPED))
    elapsed = max(seconds, last_done) if math.isfinite(last_done) else seconds
    (p50, c50), (p90, c90), (p99, c99) = (_percentile_ci(lat, q) for q in (50.0, 90.0, 99.0))
    lags = np.asarray(lags_s, dtype=float)
    lags = lags[np.isfinite(lags)] * 1000.0
    return LoadResult(
        arrivals=arrivals, rate=rate, concurrency=concurrency, seconds=seconds, elapsed_s=elapsed,
        sent=ok + failed + timed_out, ok=ok, failed=failed, timed_out=timed_out, dropped=dropped,
        achieved_rate=ok / elapsed if elapsed > 0 else 0.0, p50_ms=p50, p90_ms=p90, p99_ms=p99,
        p50_ci_ms=c50, p90_ci_ms=c90, p99_ci_ms=c99,
        send_lag_p99_ms=float(np.percentile(lags, 99)) if lags.size else 0.0,
        send_lag_max_ms=float(lags.max()) if lags.size else 0.0,
        connections=connections, errors=tuple(errors), latencies_ms=lat)


def _check(bodies: Sequence[tuple[bytes, Mapping[str, str]]], timeout_s: float, seconds: float) -> None:
    if not bodies:
        raise InputError("load: no request bodies to send")
    for name, value in (("timeout_s", timeout_s), ("seconds", seconds)):
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"load: {name} must be a positive finite number, got {value!r}")


def run_load(url: str, model: str, bodies: Sequence[tuple[bytes, Mapping[str, str]]], offsets: np.ndarray, *,
             timeout_s: float, seconds: float, rate: float | None = None,
             max_connections: int = MAX_CONNECTIONS) -> LoadResult:
    """Send ``bodies`` (cycled) to ``url``'s ``/v2/models/{model}/infer`` at ``offsets`` (seconds from the start,
    sorted; :mod:`autotune.serving.schedule`), open loop; ``seconds`` is the schedule's length, ``rate`` its
    intended rate (reported; default: the offsets' count over ``seconds``).

    Each body comes with its extra headers (Content-Type, Inference-Header-Content-Length); the request bytes are
    built once. Blocks for about ``seconds`` plus the last answers (at most ``timeout_s`` more).
    """
    _check(bodies, timeout_s, seconds)
    offs = np.asarray(offsets, dtype=float).reshape(-1)
    if offs.size and (not np.all(np.isfinite(offs)) or offs[0] < 0 or np.any(np.diff(offs) < 0)):
        raise InputError("load: offsets must be finite, non-negative and sorted (seconds from the start)")
    target = resolve(parse_url(url))
    requests = [build_request(target, model, body, headers) for body, headers in bodies]

    async def main() -> _OpenLoop:
        client = _OpenLoop(target, requests, offs, timeout_s, max_connections)
        await client.run()
        return client

    c = asyncio.run(main())
    ok = c.outcome == _OK
    counts = np.bincount(c.outcome, minlength=5)
    done = c.done[ok]
    return _result(arrivals="open", rate=rate if rate is not None else offs.size / seconds, concurrency=None,
                   seconds=seconds,
                   counts=counts.tolist(), latencies_s=c.latency[ok], lags_s=c.lag,
                   last_done=float(done.max()) if done.size else math.nan, connections=c.connections,
                   errors=c.errors)


def run_closed(url: str, model: str, bodies: Sequence[tuple[bytes, Mapping[str, str]]], concurrency: int,
               seconds: float, timeout_s: float = 60.0) -> LoadResult:
    """``concurrency`` clients, each sending its next request when its answer came, for ``seconds``.

    A closed loop paces itself by the server (at most ``concurrency`` requests outstanding), so it hides
    queueing: for users whose traffic is like that (a fixed pool of callers), not for a server's max rate.
    Latency counts from each actual send; there is no send lag.
    """
    _check(bodies, timeout_s, seconds)
    if not isinstance(concurrency, int) or concurrency < 1:
        raise InputError(f"load: concurrency must be a positive integer, got {concurrency!r}")
    target = resolve(parse_url(url))
    requests = [build_request(target, model, body, headers) for body, headers in bodies]

    async def main() -> _ClosedLoop:
        client = _ClosedLoop(target, requests, timeout_s)
        await client.run(concurrency, seconds)
        return client

    c = asyncio.run(main())
    c.ok.sort()
    lat = np.array([x for _, x in c.ok], dtype=float)
    return _result(arrivals="closed", rate=None, concurrency=concurrency, seconds=seconds, counts=c.counts,
                   latencies_s=lat, lags_s=np.zeros(0), last_done=c.last_done if c.ok else math.nan,
                   connections=c.connections, errors=c.errors)


# ---- request bodies -------------------------------------------------------------------------------------------

def encode_binary_request(inputs: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """An infer request with every input as a binary tensor and binary outputs asked for: (body, headers), the
    wire format ``tritonclient.http`` sends (:func:`autotune.serving.v2.encode_infer_request`); an input numpy
    has no v2 datatype for is an InputError naming it."""
    from autotune.serving.v2 import ProtocolError, encode_infer_request

    try:
        return encode_infer_request(inputs, binary=True)
    except ProtocolError as exc:
        raise InputError(str(exc)) from exc
