"""The arrival schedules and the open-loop load generator, against a tiny v2 server written here.

The key property: the schedule is independent of the responses. A server that answers some requests slowly
must not delay the requests after them (the send lag stays small), and a slow request's latency counts from
its intended send time. Also: a closed loop keeps at most N requests outstanding, timeouts and refused
connections are counted (never raised), and ``autotune loadtest`` prints its JSON and picks its exit codes.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import InputError
from autotune.serving import loadgen, schedule

ROOT = Path(__file__).resolve().parent.parent

# ---- schedules ----------------------------------------------------------------------------------------------


def test_poisson_rate_sorted_reproducible() -> None:
    a = schedule.poisson(200.0, 20.0, seed=7)
    b = schedule.poisson(200.0, 20.0, seed=7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, schedule.poisson(200.0, 20.0, seed=8))
    assert np.all(np.diff(a) >= 0) and a[0] >= 0 and a[-1] < 20.0
    # 4000 expected arrivals: sd ~63, so within 5% is > 3 sd
    assert abs(a.size - 4000) < 200
    gaps = np.diff(a)
    assert abs(gaps.mean() - 1 / 200) < 0.05 / 200
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # exponential gaps: coefficient of variation 1


def test_poisson_small_and_bad_arguments() -> None:
    assert schedule.poisson(0.5, 1.0, seed=1).size <= 10
    for rate, seconds in ((0.0, 1.0), (-1.0, 1.0), (math.inf, 1.0), (1.0, math.nan)):
        with pytest.raises(InputError):
            schedule.poisson(rate, seconds)


def test_uniform() -> None:
    u = schedule.uniform(4.0, 2.0)
    assert np.allclose(u, np.arange(8) / 4.0)
    assert schedule.uniform(3.0, 1.0).size == 3


def test_replay_lines_json_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "arrivals.txt"
    f.write_text("# unix times\n1700000000.5\n\n1700000000.0\n1700000001.25\n")
    assert np.allclose(schedule.replay(f), [0.0, 0.5, 1.25])  # shifted to 0, sorted
    j = tmp_path / "arrivals.json"
    j.write_text("[3, 3.5, 5]")
    assert np.allclose(schedule.replay(j), [0.0, 0.5, 2.0])
    bad = tmp_path / "bad.txt"
    bad.write_text("1.0\n2.0\nsoon\n")
    with pytest.raises(InputError, match=r"bad.txt: line 3: 'soon' is not a finite number; expected one arrival"):
        schedule.replay(bad)
    bad.write_text("1.0\nnan\n")
    with pytest.raises(InputError, match="line 2"):
        schedule.replay(bad)
    bad.write_text("[1, \"x\"]")
    with pytest.raises(InputError, match="item 1 of the JSON list"):
        schedule.replay(bad)
    bad.write_text("[1, 2")
    with pytest.raises(InputError, match="line 1: not valid JSON"):
        schedule.replay(bad)
    bad.write_text("# nothing\n")
    with pytest.raises(InputError, match="no arrival"):
        schedule.replay(bad)
    with pytest.raises(InputError, match=r"missing\.txt: cannot read it"):
        schedule.replay(tmp_path / "missing.txt")


def test_rescale_plays_the_trace_at_a_rate() -> None:
    base = np.array([0.0, 0.1, 0.15, 1.0])  # 3 gaps over 1 s
    out = schedule.rescale(base, 6.0, 2.0)  # 3 gaps in 0.5 s, repeated every 4/6 s
    assert np.all(np.diff(out) >= 0) and out[-1] < 2.0
    assert out.size == 12
    assert np.allclose(out[:4], base / 2)
    a = schedule.Arrivals("replay", rate=None, path=None)
    with pytest.raises(InputError, match="need a file"):
        a.offsets(1.0)
    with pytest.raises(InputError, match="no schedule"):
        schedule.Arrivals("closed", concurrency=2).offsets(1.0)


# ---- a tiny v2 server ---------------------------------------------------------------------------------------

METADATA = {"name": "m", "versions": ["1"], "platform": "test", "max_batch_size": 8,
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]},
                       {"name": "ids", "datatype": "INT64", "shape": [-1, -1]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]}


class TinyServer:
    """An asyncio HTTP/1.1 keep-alive server in a thread: ``/v2/models/m/infer`` answers 200 after a delay
    (``slow_s`` when the body holds ``b"slow"``, else ``delay_s``); other models 404. Records each request's
    arrival time (monotonic) and the most requests in flight at once."""

    def __init__(self, *, delay_s: float = 0.0, slow_s: float = 0.3) -> None:
        self.delay_s, self.slow_s = delay_s, slow_s
        self.arrivals: list[float] = []
        self.inflight = 0
        self.max_inflight = 0
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(5)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()
        self.loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        async def shutdown() -> None:
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lower = head.lower()
                i = lower.find(b"content-length:")
                n = int(head[i + 15 : head.index(b"\r\n", i)]) if i >= 0 else 0
                body = await reader.readexactly(n) if n else b""
                method, path = head.split(b" ")[:2]
                if method == b"GET" and path == b"/v2/models/m":
                    status, out = 200, json.dumps(METADATA).encode()
                elif method == b"POST" and path == b"/v2/models/m/infer":
                    self.arrivals.append(time.monotonic())
                    self.inflight += 1
                    self.max_inflight = max(self.max_inflight, self.inflight)
                    delay = self.slow_s if b"slow" in body else self.delay_s
                    if delay:
                        await asyncio.sleep(delay)
                    self.inflight -= 1
                    status, out = 200, b'{"outputs":[]}'
                else:
                    status, out = 404, b'{"error":"unknown model"}'
                writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (status, len(out), out))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def server() -> Iterator[TinyServer]:
    s = TinyServer()
    yield s
    s.close()


def _bodies(slow_every: int = 0) -> list[tuple[bytes, dict[str, str]]]:
    fast = (b'{"inputs":[]}', {"Content-Type": "application/json"})
    if not slow_every:
        return [fast]
    return [(b'{"inputs":[],"slow":1}', {"Content-Type": "application/json"})] + [fast] * (slow_every - 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the open loop --------------------------------------------------------------------------------------------


def test_slow_answers_do_not_delay_later_sends(server: TinyServer) -> None:
    offsets = schedule.uniform(50.0, 2.0)  # 100 requests, every 5th answered after 0.3 s
    t_start = time.monotonic()
    res = loadgen.run_load(server.url, "m", _bodies(slow_every=5), offsets, timeout_s=5.0, seconds=2.0)
    assert (res.sent, res.ok, res.failed, res.timed_out, res.dropped) == (100, 100, 0, 0, 0)
    assert res.send_lag_p99_ms < 20.0, res
    lat = res.latencies_ms
    slow, fast = lat[::5], np.delete(lat, np.arange(0, 100, 5))
    assert np.all(slow >= 300.0) and np.all(slow < 300.0 + 100.0)  # from the intended time, the sleep included
    assert np.median(fast) < 20.0  # the fast ones did not queue behind the slow ones
    # the server saw the requests at the schedule's times, not pushed back by the slow answers
    seen = np.array(server.arrivals) - t_start
    assert seen.size == 100
    gaps = np.diff(seen)
    assert np.median(gaps) == pytest.approx(0.02, abs=0.005) and gaps.max() < 0.1  # a waiting client: 0.3 s gaps
    assert seen[-1] - seen[0] == pytest.approx(offsets[-1], abs=0.03)
    # up to 15 slow requests in flight at once (0.3 s x 10 slow/s, plus fast ones): the pool grew
    assert server.max_inflight >= 4 and res.connections >= server.max_inflight
    assert res.achieved_rate == pytest.approx(100 / res.elapsed_s)
    assert res.elapsed_s >= 2.0 and res.elapsed_s < 2.5
    assert res.goodput(100.0) == pytest.approx(80 / res.elapsed_s)
    assert res.p99_ci_ms[0] <= res.p99_ms <= res.p99_ci_ms[1]
    d = res.to_dict()
    assert d["ok"] == 100 and d["arrivals"] == "open" and "latencies_ms" not in d
    json.dumps(d)


def test_timeouts_are_counted(server: TinyServer) -> None:
    server.slow_s = 1.0
    res = loadgen.run_load(server.url, "m", _bodies(slow_every=4), schedule.uniform(40.0, 0.5), timeout_s=0.25,
                           seconds=0.5)
    assert (res.sent, res.timed_out, res.ok, res.dropped) == (20, 5, 15, 0)
    assert np.all(res.latencies_ms < 250.0)


def test_http_errors_are_counted_with_their_message(server: TinyServer) -> None:
    res = loadgen.run_load(server.url, "other", _bodies(), schedule.uniform(20.0, 0.5), timeout_s=2.0,
                           seconds=0.5)
    assert (res.sent, res.failed, res.ok) == (10, 10, 0)
    assert res.errors == ("HTTP 404: unknown model",)
    assert math.isnan(res.p99_ms)
    assert res.to_dict()["p99_ms"] is None and not res.all_answered


def test_refused_connection_is_counted_not_raised() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    res = loadgen.run_load(url, "m", _bodies(), schedule.uniform(20.0, 0.5), timeout_s=1.0, seconds=0.5)
    assert (res.sent, res.ok, res.dropped) == (0, 0, 10)
    assert any("cannot connect" in e for e in res.errors)
    closed = loadgen.run_closed(url, "m", _bodies(), 2, 0.3, timeout_s=1.0)
    assert closed.sent == 0 and closed.ok == 0 and closed.dropped > 0


def test_bad_arguments() -> None:
    with pytest.raises(InputError, match="expected http://HOST:PORT"):
        loadgen.run_load("https://x:1", "m", _bodies(), np.zeros(1), timeout_s=1.0, seconds=1.0)
    with pytest.raises(InputError, match="sorted"):
        loadgen.run_load("http://x:1", "m", _bodies(), np.array([1.0, 0.5]), timeout_s=1.0, seconds=1.0)
    with pytest.raises(InputError, match="no request bodies"):
        loadgen.run_load("http://x:1", "m", [], np.zeros(1), timeout_s=1.0, seconds=1.0)


def test_closed_loop_keeps_at_most_n_outstanding(server: TinyServer) -> None:
    server.delay_s = 0.02
    res = loadgen.run_closed(server.url, "m", _bodies(), 3, 0.6, timeout_s=2.0)
    assert server.max_inflight == 3
    assert res.ok == res.sent and res.failed == res.timed_out == res.dropped == 0
    assert 40 <= res.ok <= 95  # 3 clients x 0.6 s / 20 ms = 90 at most
    assert np.all(res.latencies_ms >= 19.0)
    assert res.rate is None and res.concurrency == 3 and res.send_lag_max_ms == 0.0


def test_binary_request_encoding() -> None:
    body, headers = loadgen.encode_binary_request({"x": np.arange(6, dtype=np.float32).reshape(2, 3),
                                                   "ids": np.array([[1, 2]], dtype=np.int64)})
    n = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:n])
    assert header["inputs"][0] == {"name": "x", "datatype": "FP32", "shape": [2, 3],
                                   "parameters": {"binary_data_size": 24}}
    assert header["inputs"][1]["datatype"] == "INT64" and header["parameters"] == {"binary_data_output": True}
    assert np.array_equal(np.frombuffer(body[n : n + 24], "<f4"), np.arange(6))
    assert np.array_equal(np.frombuffer(body[n + 24 :], "<i8"), [1, 2])
    with pytest.raises(InputError, match="no v2 datatype"):
        loadgen.encode_binary_request({"s": np.array(["a"])})


# ---- the CLI ------------------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "autotune", "loadtest", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=ROOT)


@pytest.mark.worker
def test_cli_json_and_exit_codes(server: TinyServer, tmp_path: Path) -> None:
    got = _cli(server.url, "--model", "m", "--rate", "40", "--seconds", "0.5", "--json")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["ok"] == doc["sent"] > 0 and doc["rate"] == 40.0 and doc["passed"] is True
    assert "dynamic dimension 1 set to 16" in got.stderr  # input "ids": [-1, -1]
    # an SLO no answer meets: exit 1, the table names it
    got = _cli(server.url, "--model", "m", "--rate", "40", "--seconds", "0.3", "--slo-ms", "0.001")
    assert got.returncode == 1, got.stderr
    assert "p99 OVER 0.001 ms" in got.stdout and "send lag" in got.stdout
    # closed loop and inputs from a file, in one run
    np.savez(tmp_path / "in.npz", x=np.zeros((4, 3), np.float32), ids=np.ones((4, 5), np.int64))
    got = _cli(server.url, "--model", "m", "--arrivals", "closed", "--concurrency", "2", "--seconds", "0.3",
               "--inputs", str(tmp_path / "in.npz"), "--samples", "2", "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["concurrency"] == 2


@pytest.mark.worker
def test_cli_bad_input_exits_2(server: TinyServer, tmp_path: Path) -> None:
    got = _cli(f"http://127.0.0.1:{_free_port()}", "--rate", "10", "--seconds", "0.2")
    assert got.returncode == 2 and "cannot reach the server" in got.stderr
    got = _cli(server.url, "--rate", "10", "--seconds", "0.2")  # default model "model": 404
    assert got.returncode == 2 and "--model model: the server" in got.stderr
    got = _cli(server.url, "--model", "m", "--rate", "-3")
    assert got.returncode == 2 and "--rate" in got.stderr
    got = _cli(server.url, "--model", "m", "--seconds", "1")
    assert got.returncode == 2 and "--rate: required" in got.stderr
    bad = tmp_path / "times.txt"
    bad.write_text("0.0\nlater\n")
    got = _cli(server.url, "--model", "m", "--arrivals", str(bad))
    assert got.returncode == 2 and "line 2" in got.stderr
    (tmp_path / "in.npz").write_text("not a zip")
    got = _cli(server.url, "--model", "m", "--rate", "5", "--inputs", str(tmp_path / "in.npz"))
    assert got.returncode == 2 and "--inputs" in got.stderr
    # a replayed trace runs
    good = tmp_path / "good.txt"
    good.write_text("\n".join(str(100 + k * 0.02) for k in range(10)))
    got = _cli(server.url, "--model", "m", "--arrivals", str(good), "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["sent"] == 10
