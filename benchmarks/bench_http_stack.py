"""The HTTP stack's own cost per request: autotune's serve.py against uvicorn + Starlette and the standard
library's ThreadingHTTPServer, all answering the same KServe v2 infer request with a model that does nothing.

    python benchmarks/bench_http_stack.py [--seconds 3]

Each server decodes the binary-tensor request (autotune.serving.v2), calls a no-op "model" and encodes the
answer. serve.py does what it does in production: the batcher, then an instance process over a pipe (the
pickle frames), so its figure includes that hop; the two others call the no-op inline in the front end, which
favours them. The client is the same for all: closed loop, N threads each with a keep-alive http.client
connection (TCP_NODELAY), on the same 2 cores as the server. Reported: requests/s and the median latency at
concurrency 1 (the per-request overhead) and 8 (the front end's ceiling). The numbers are in ARCHITECTURE.md
("Serving").
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.serving.ship import copy_server  # noqa: E402
from autotune.serving.v2 import encode_infer_request  # noqa: E402

NOOP_LOAD = textwrap.dedent('''
    import numpy as np
    BATCH_SIZE = 16
    INPUTS = ["x"]
    N_POSITIONAL = 1
    OUTPUTS = ["y"]
    SAMPLE = [("float32", [1, 3, 64, 64], None)]

    def _form(xs):
        return tuple(xs)

    def load():
        def predict(x):
            return [np.zeros((x.shape[0], 10), np.float32)]
        return predict

    def make_inputs(batch_size=None):
        return (np.zeros((batch_size or 1, 3, 64, 64), np.float32),)
''')

APP = textwrap.dedent('''
    import sys
    import numpy as np
    sys.path.insert(0, {root!r})
    from autotune.serving.v2 import decode_infer_request, encode_infer_response

    def infer(body, header_length):
        req = decode_infer_request(body, header_length)
        x = next(iter(req.inputs.values()))
        out = [("y", np.zeros((x.shape[0], 10), np.float32))]
        return encode_infer_response("m", req.id, out, binary=True)
''')

STARLETTE = APP + textwrap.dedent('''
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    import uvicorn

    async def endpoint(request):
        body = await request.body()
        h = request.headers.get("inference-header-content-length")
        data, headers = infer(body, int(h) if h else None)
        return Response(data, headers=headers)

    app = Starlette(routes=[Route("/v2/models/m/infer", endpoint, methods=["POST"]),
                            Route("/v2/health/ready", lambda r: Response(b""), methods=["GET"])])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
''')

STDLIB = APP + textwrap.dedent('''
    import socket
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def setup(self):
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        def log_message(self, *a):
            pass
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            h = self.headers.get("Inference-Header-Content-Length")
            data, headers = infer(body, int(h) if h else None)
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, path: str) -> None:
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"no answer on port {port}")


def closed_loop(port: int, model: str, body: bytes, headers: dict[str, str], concurrency: int,
                seconds: float) -> tuple[float, float]:
    lat: list[float] = []
    end = time.perf_counter() + seconds

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mine = []
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            mine.append(time.perf_counter() - t0)
        lat.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(lat) / (time.perf_counter() - t0), float(np.median(lat) * 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    body, headers = encode_infer_request({"x": np.zeros((1, 3, 64, 64), np.float32)}, binary=True)
    headers = {**headers, "Content-Length": str(len(body))}
    tmp = Path(tempfile.mkdtemp())
    (tmp / "load.py").write_text(NOOP_LOAD)
    copy_server(tmp)
    (tmp / "starlette_app.py").write_text(STARLETTE.format(root=str(ROOT)))
    (tmp / "stdlib_app.py").write_text(STDLIB.format(root=str(ROOT)))
    stacks = {
        "serve.py (asyncio, batcher, 1 instance process)": (["serve.py", "--artifact", str(tmp), "--model-name", "m",
                                                              "--max-batch", "16", "--port"], "m"),
        "uvicorn + starlette (inline no-op)": (["starlette_app.py"], "m"),
        "stdlib ThreadingHTTPServer (inline no-op)": (["stdlib_app.py"], "m"),
    }
    print(f"{'stack':52s} {'c=1 req/s':>10s} {'p50 ms':>7s} {'c=8 req/s':>10s} {'p50 ms':>7s}")
    for name, (cmd, model) in stacks.items():
        port = free_port()
        proc = subprocess.Popen([sys.executable, *cmd, str(port)], cwd=tmp, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            wait_ready(port, "/v2/health/ready")
            closed_loop(port, model, body, headers, 1, 0.5)  # warm
            r1, l1 = closed_loop(port, model, body, headers, 1, args.seconds)
            r8, l8 = closed_loop(port, model, body, headers, 8, args.seconds)
            print(f"{name:52s} {r1:10.0f} {l1:7.2f} {r8:10.0f} {l8:7.2f}", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
