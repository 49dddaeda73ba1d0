"""The artifact's server (autotune/serving/server.py, shipped as serve.py): its padding and splitting (pure), and
the real thing in a subprocess on hand-written numpy load.py fixtures: endpoints, JSON and binary inference,
batching, padding of dynamic dims, 4xx for bad requests, SIGTERM with no child left, the flat copy, tritonclient,
calibration."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from autotune.serving import tensors, v2

SERVING = Path(__file__).resolve().parents[1] / "autotune" / "serving"


@pytest.fixture(scope="module")
def serve_py(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server as the artifact ships it: ``serve.py`` and its siblings flat in one directory (copy_server)."""
    from autotune.serving.ship import copy_server

    directory = tmp_path_factory.mktemp("flat-server")
    copy_server(directory)
    return directory / "serve.py"

STATIC = '''
import os
import time
from types import SimpleNamespace
import numpy as np
BATCH_SIZE = 8
INPUTS = ["x"]
N_POSITIONAL = 1
OUTPUTS = ["y", "s"]
SAMPLE = [("float32", [8, 3], None)]
THREADS = 0


def _form(xs):
    return xs[0]


def load():
    assert THREADS == 2, THREADS  # the server sets load.py's THREADS before load()

    def predict(x):
        x = np.asarray(x)
        if x[0, 0] == 13:
            raise ValueError("unlucky row")
        if x[0, 0] == 66:
            os._exit(3)
        time.sleep(0.5 if x[0, 0] == 7 else 0.002)
        print("noise on stdout must not break the frames")
        return {"y": x * 2, "s": x.sum(axis=1)}
    return predict


def make_inputs(batch_size=None):
    return _form([np.ones((batch_size or 8, 3), np.float32)])
'''

DYNAMIC = '''
import time
from types import SimpleNamespace
import numpy as np
BATCH_SIZE = 4
INPUTS = ["ids", "mask"]
N_POSITIONAL = 0
OUTPUTS = ["h", "n"]
SAMPLE = [("int64", [4, 5], [0, 100]), ("int64", [4, 5], [0, 2])]
DYNAMIC_DIMS = [[0, 1], [0, 1]]


def _form(xs):
    return dict(zip(INPUTS, xs))


def load():
    def predict(ids, mask):
        time.sleep(0.002)
        return [(ids * mask).astype(np.float32), mask.sum(axis=1)]
    return predict
'''

# An audio-encoder-like model: its output's length follows the input's through a stride of 2 without equalling it
# (transformers' Wav2Vec2ForCTC: 4,000 samples -> 12 frames, 15,000 -> 46), so a short request merged with a long
# one would get the long one's frame count, the extra frames made from padding.
STRIDED = DYNAMIC.replace(
    "        return [(ids * mask).astype(np.float32), mask.sum(axis=1)]",
    "        return [(ids * mask)[:, ::2].astype(np.float32), mask.sum(axis=1)]")


# A CLIP-like model: one output scores every row of the call against every other (transformers' CLIPModel's
# logits_per_image is (rows, rows)), so a request merged with others gets another answer than alone, of another shape.
COUPLED = '''
import numpy as np
BATCH_SIZE = 4
INPUTS = ["x"]
N_POSITIONAL = 1
OUTPUTS = ["e", "sim"]
SAMPLE = [("float32", [4, 3], None)]


def _form(xs):
    return xs[0]


def load():
    def predict(x):
        x = np.asarray(x)
        return [x * 2, x @ x.T]
    return predict
'''


# transformers' GPT2LMHeadModel in small: beside its logits it returns a cache object (``past_key_values``, a
# DynamicCache) that no v2 datatype carries
WITH_CACHE = COUPLED.replace('OUTPUTS = ["e", "sim"]', 'OUTPUTS = ["e", "cache"]').replace(
    "return [x * 2, x @ x.T]", "return {'e': x * 2, 'cache': DynamicCache()}").replace(
    "import numpy as np", "import numpy as np\n\n\nclass DynamicCache:\n    pass")


# torchvision's detectors in small: one dict per image, its detections' count the image's own, so a call of one image
# has half the output leaves of the artifact's sample of two
PER_IMAGE = '''
import numpy as np
BATCH_SIZE = 2
INPUTS = ["images"]
N_POSITIONAL = 1
OUTPUTS = ["output_0_boxes", "output_0_scores", "output_1_boxes", "output_1_scores"]
SAMPLE = [("float32", [2, 3], None)]


def load():
    def predict(images):
        out = []
        for row in np.asarray(images):
            k = 1 + int(abs(row[0])) % 3
            out.append({"boxes": np.full((k, 4), row.sum(), np.float32), "scores": np.full(k, row[0], np.float32)})
        return out
    return predict
'''


def _traffic(root: Path, lengths: list[int]) -> None:
    """traffic.npz beside load.py: one batch of 2 rows per length, each row padded with 0 after its own length."""
    arrays = {}
    for i, n in enumerate(lengths):
        ids = np.zeros((2, n), np.int64)
        ids[0, :n] = np.arange(1, n + 1)
        ids[1, :max(1, n - 2)] = 7
        arrays[f"b{i}.ids"], arrays[f"b{i}.mask"] = ids, (ids != 0).astype(np.int64)
    np.savez(root / "traffic.npz", **arrays)


# ---- pure: merging a batch and splitting it back ----------------------------------------------------------


def test_combine_pads_dynamic_dims_and_split_cuts_them_back() -> None:
    a = [np.array([[1, 2, 3]]), np.ones((1, 3), np.int64)]
    b = [np.array([[4, 5], [6, 7]]), np.ones((2, 2), np.int64)]
    arrays, layout = tensors.combine([a, b], [-1, 0])
    assert arrays[0].tolist() == [[1, 2, 3], [4, 5, -1], [6, 7, -1]] and arrays[1][1:, 2].tolist() == [0, 0]
    assert layout.rows == (1, 2) and layout.padded == ((3, (3, 2)), (3, (3, 2)))
    parts = tensors.split([arrays[0] * 10, arrays[1].sum(axis=1), np.float32(5)], layout)
    assert parts[0][0].tolist() == [[10, 20, 30]] and parts[1][0].tolist() == [[40, 50], [60, 70]]
    assert parts[0][1].tolist() == [3] and parts[1][1].tolist() == [2, 2] and parts[1][2] == 5


def test_combine_one_request_is_no_copy() -> None:
    x = np.zeros((2, 3))
    arrays, layout = tensors.combine([[x]], [0])
    assert arrays[0] is x and tensors.split([x], layout)[0][0].shape == (2, 3)


def _info(**over: Any) -> dict[str, Any]:
    return {"inputs": ["x"], "sample": [("float32", [8, 3], None)], "dynamic": [[]], "batch_size": 8,
            "outputs": ["y"], "output_specs": [("float32", [8, 3])], **over}


def test_interface_checks_requests() -> None:
    iface = tensors.Interface.from_info(_info())
    assert iface.metadata("m", 8)["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    _, rows = iface.check({"x": np.zeros((2, 3), np.float32)}, 8)
    assert rows == 2
    for inputs, match in [({"x": np.zeros((2, 3)), }, "datatype FP64, the model takes FP32"),
                          ({"x": np.zeros((2, 4), np.float32)}, r"shape \[2, 4\], the model takes \[-1, 3\]"),
                          ({"x": np.zeros((2,), np.float32)}, "the model takes"),
                          ({"x": np.zeros((9, 3), np.float32)}, "9 rows in one request, more than"),
                          ({"z": np.zeros((1, 3), np.float32)}, "unknown input 'z'; the model takes \\['x'\\]"),
                          ({}, "missing input 'x'")]:
        with pytest.raises(v2.ProtocolError, match=match):
            iface.check(inputs, 8)
    dyn = tensors.Interface.from_info(_info(), dynamic_dims={"x": [1]})
    assert dyn.check({"x": np.zeros((1, 7), np.float32)}, 8)[1] == 1


def test_the_traffics_extremes_and_a_merge_that_changes_an_answer(tmp_path: Path) -> None:
    _traffic(tmp_path, [3, 6, 9])
    batches = tensors.read_traffic(tmp_path / "traffic.npz")
    assert tensors.dynamic_axes(batches) == {"ids": [1], "mask": [1]}
    pair = tensors.shortest_and_longest(batches, ["ids", "mask"], {"ids": 0, "mask": 0})
    assert pair is not None and pair[0][0].shape == (1, 1) and pair[1][0].shape == (1, 9)
    assert tensors.shortest_and_longest(batches[:1] * 2, ["ids", "mask"], {}) is None  # no dim differs
    same = [[np.ones((1, 2), np.float32)], [np.ones((1, 4), np.float32)]]
    assert tensors.merge_disagrees(same, [[x.copy()] for x in (same[0][0], same[1][0])]) is None
    longer = tensors.merge_disagrees(same, [[np.ones((1, 4), np.float32)], [np.ones((1, 4), np.float32)]])
    assert longer is not None and "(1, 2) alone and (1, 4) merged" in longer
    leaked = tensors.merge_disagrees(same, [[np.full((1, 2), 1.5, np.float32)], same[1]])
    assert leaked is not None and "padding changes its answer" in leaked
    assert tensors.merge_disagrees(same, [[np.full((1, 2), 1.01, np.float32)], same[1]]) is None  # int8-like noise


def test_two_requests_of_one_shape_and_the_dims_that_follow_a_calls_rows(tmp_path: Path) -> None:
    _traffic(tmp_path, [3, 6, 9])  # rows of lengths 3, 1, 6, 4, 9, 7 (trimmed): none shares a shape
    batches = tensors.read_traffic(tmp_path / "traffic.npz")
    batches.append({"ids": np.array([[5, 6, 7, 8, 0, 0]]), "mask": np.array([[1, 1, 1, 1, 0, 0]])})
    pair = tensors.two_of_a_shape(batches, ["ids", "mask"], {"ids": 0, "mask": 0})
    assert pair is not None and pair[0][0].tolist() == [[7, 7, 7, 7]] and pair[1][0].tolist() == [[5, 6, 7, 8]]
    one = [{"ids": np.ones((1, 4), np.int64), "mask": np.ones((1, 4), np.int64)}]
    twice = tensors.two_of_a_shape(one, ["ids", "mask"], {})
    assert twice is not None and np.array_equal(twice[0][0], twice[1][0])  # no second row: the same one twice
    assert tensors.two_of_a_shape([{"ids": np.ones((0, 4), np.int64)}], ["ids"], {}) is None
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    solo = [[x[:1] * 2, x[:1] @ x[:1].T, x[:1].sum(axis=1)], [x[1:] * 2, x[1:] @ x[1:].T, x[1:].sum(axis=1)]]
    assert tensors.batch_dims(solo, [x * 2, x @ x.T, x.sum(axis=1)]) == {0: [], 1: [1], 2: []}
    coupled = tensors.merge_disagrees(solo, tensors.split([x * 2, x @ x.T, x.sum(axis=1)],
                                                          tensors.Layout((1, 1), ())), lengths=False)
    assert coupled is not None and "(1, 1) alone and (1, 2) merged with another request of its shape" in coupled
    softmax = [[np.array([[0.5]])], [np.array([[0.5]])]]
    moved = tensors.merge_disagrees(softmax, [[np.array([[0.2]])], [np.array([[0.8]])]], lengths=False)
    assert moved is not None and "depends on the other rows of the call" in moved


# ---- the server in a subprocess -----------------------------------------------------------------------------


def _artifact(root: Path, source: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "load.py").write_text(source)
    return root


class Served:
    """A running server: its process, port and an HTTP connection helper."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc, self.port = proc, port

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def infer(self, inputs: dict[str, np.ndarray], *, binary: bool = True,
              model: str = "model") -> tuple[int, dict[str, np.ndarray] | str]:
        body, headers = v2.encode_infer_request(inputs, binary=binary, outputs_binary=binary)
        status, got, data = self.request("POST", f"/v2/models/{model}/infer", body, headers)
        if status != 200:
            return status, json.loads(data)["error"]
        length = got.get(v2.HEADER_LENGTH.lower())
        return status, v2.decode_infer_response(data, int(length) if length else None)

    def children(self) -> list[int]:
        return _children(self.proc.pid)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _start(script: Path, tmp: Path, *args: str, cwd: Path | None = None) -> Served:
    ready = tmp / f"ready-{time.monotonic_ns()}.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, str(script), "--port", "0", "--ready-file", str(ready), *args],
                            cwd=cwd or tmp, env=env)
    end = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"the server did not get ready (exit {proc.poll()})")
        time.sleep(0.05)
    return Served(proc, json.loads(ready.read_text())["port"])


def _stop(served: Served) -> int:
    if served.proc.poll() is None:
        served.proc.send_signal(signal.SIGTERM)
    try:
        return served.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        raise


@pytest.fixture(scope="module")
def static(tmp_path_factory: pytest.TempPathFactory, serve_py: Path) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("static")
    art = _artifact(tmp / "art", STATIC)
    served = _start(serve_py, tmp, "--artifact", str(art), "--instances", "2", "--threads", "2",
                    "--max-delay-ms", "50")
    yield served
    _stop(served)


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory: pytest.TempPathFactory, serve_py: Path) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("dynamic")
    art = _artifact(tmp / "art", DYNAMIC)
    served = _start(serve_py, tmp, "--artifact", str(art), "--model-name", "lm",
                    "--max-delay-ms", "200", "--pad", '{"ids": 0, "mask": 0}')
    yield served
    _stop(served)


def _concurrently(fn: Any, args: list[Any]) -> list[Any]:
    results: list[Any] = [None] * len(args)

    def run(i: int) -> None:
        results[i] = fn(args[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.worker
def test_health_and_metadata(static: Served) -> None:
    assert static.request("GET", "/v2/health/live")[0] == 200
    assert static.request("GET", "/v2/health/ready")[0] == 200
    assert static.request("GET", "/v2/models/model/ready")[0] == 200
    assert json.loads(static.request("GET", "/v2")[2])["extensions"] == ["binary_tensor_data"]
    meta = json.loads(static.request("GET", "/v2/models/model")[2])
    assert meta["max_batch_size"] == 8
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 3]},
                               {"name": "s", "datatype": "FP32", "shape": [-1]}]
    assert len(static.children()) == 2


@pytest.mark.worker
@pytest.mark.parametrize("binary", [True, False])
def test_infer_json_and_binary(static: Served, binary: bool) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    status, out = static.infer({"x": x}, binary=binary)
    assert status == 200 and isinstance(out, dict)
    assert np.array_equal(out["y"], x * 2) and np.array_equal(out["s"], x.sum(axis=1))


@pytest.mark.worker
def test_concurrent_requests_are_batched_and_each_gets_its_rows(static: Served) -> None:
    static.request("DELETE", "/v2/models/model/stats")
    xs = [np.full((1 + i % 2, 3), i + 20, np.float32) for i in range(8)]
    results = _concurrently(lambda x: static.infer({"x": x}), xs)
    for x, (status, out) in zip(xs, results, strict=True):
        assert status == 200 and np.array_equal(out["y"], x * 2)
    stats = json.loads(static.request("GET", "/v2/models/model/stats")[2])
    assert stats["ok"] == 8 and sum(s for s, _ in stats["batches"]) == 12
    assert max(s for s, _ in stats["batches"]) > 2  # requests shared calls
    assert all(0 < t < 5 for _, t in stats["batches"])


@pytest.mark.worker
def test_dynamic_dims_are_padded_and_cut_back(dynamic: Served) -> None:
    reqs = [{"ids": np.arange(1, 4).reshape(1, 3), "mask": np.ones((1, 3), np.int64)},
            {"ids": np.arange(1, 11).reshape(2, 5), "mask": np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])}]
    results = _concurrently(lambda r: dynamic.infer(r, model="lm"), reqs)
    for r, (status, out) in zip(reqs, results, strict=True):
        assert status == 200
        assert np.array_equal(out["h"], (r["ids"] * r["mask"]).astype(np.float32))
        assert np.array_equal(out["n"], r["mask"].sum(axis=1))
    stats = json.loads(dynamic.request("GET", "/v2/models/lm/stats")[2])
    assert [3] == [s for s, _ in stats["batches"]]  # one call: the two requests, padded to length 5
    meta = json.loads(dynamic.request("GET", "/v2/models/lm")[2])
    assert meta["inputs"][0]["shape"] == [-1, -1]


@pytest.mark.worker
def test_lengths_are_not_merged_where_merging_changes_an_answer(tmp_path: Path, serve_py: Path) -> None:
    """At start the server merges the traffic's shortest and longest request into one padded call and compares
    each with its answer alone: the strided model's outputs do not follow the padded length, so requests of
    different lengths are served in separate calls, and each gets its own answer (same-length ones still share a
    call); the model whose outputs follow the length keeps merging."""
    art = _artifact(tmp_path / "strided", STRIDED)
    _traffic(art, [3, 6, 9])
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--model-name", "lm",
                    "--max-delay-ms", "300", "--pad", '{"ids": 0, "mask": 0}')
    try:
        ready = json.loads(next(tmp_path.glob("ready-*.json")).read_text())
        assert ready["merge_lengths"] is False and "alone and" in ready["merge_why"]
        assert ready["output_dynamic_dims"] == {"h": [1], "n": []}  # h's length follows the ids', n has none
        reqs = [{"ids": np.arange(1, n + 1).reshape(1, n), "mask": np.ones((1, n), np.int64)} for n in (3, 6, 6)]
        results = _concurrently(lambda r: served.infer(r, model="lm"), reqs)
        for r, (status, out) in zip(reqs, results, strict=True):
            assert status == 200
            assert np.array_equal(out["h"], r["ids"][:, ::2].astype(np.float32)), (r["ids"].shape, out["h"].shape)
        stats = json.loads(served.request("GET", "/v2/models/lm/stats")[2])
        assert sorted(s for s, _ in stats["batches"])[-2:] == [1, 2]  # length 3 alone, the two of length 6 together
    finally:
        assert _stop(served) == 0
    follows = _artifact(tmp_path / "follows", DYNAMIC)
    _traffic(follows, [3, 6, 9])
    for old_ready in tmp_path.glob("ready-*.json"):
        old_ready.unlink()
    served = _start(serve_py, tmp_path, "--artifact", str(follows), "--pad", '{"ids": 0, "mask": 0}')
    try:
        assert json.loads(next(tmp_path.glob("ready-*.json")).read_text())["merge_lengths"] is True
    finally:
        assert _stop(served) == 0


@pytest.mark.worker
def test_requests_never_share_a_call_where_an_output_couples_its_rows(tmp_path: Path, serve_py: Path) -> None:
    """At start the server merges two requests of one shape and compares each with its answer alone: the coupled
    model's (rows, rows) output differs, so every request is served in a call of its own, whatever max batch and
    delay it was started with, and gets its solo answer; a model without such an output keeps merging."""
    art = _artifact(tmp_path / "coupled", COUPLED)
    np.savez(art / "traffic.npz", **{"b0.x": np.arange(12, dtype=np.float32).reshape(4, 3)})
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--max-delay-ms", "300")
    try:
        ready = json.loads(next(tmp_path.glob("ready-*.json")).read_text())
        assert ready["merge_requests"] is False
        assert "output 1 ('sim') of a request is (1, 1) alone and (1, 2) merged" in ready["merge_requests_why"]
        assert ready["output_batch_dims"] == {"sim": [1]}
        xs = [np.full((1, 3), i + 1, np.float32) for i in range(3)] + [np.ones((2, 3), np.float32)]
        results = _concurrently(lambda x: served.infer({"x": x}), xs)
        for x, (status, out) in zip(xs, results, strict=True):
            assert status == 200 and np.array_equal(out["sim"], x @ x.T) and np.array_equal(out["e"], x * 2)
        stats = json.loads(served.request("GET", "/v2/models/model/stats")[2])
        assert sorted(s for s, _ in stats["batches"]) == [1, 1, 1, 2]  # one call per request, its own rows
    finally:
        assert _stop(served) == 0
    for old_ready in tmp_path.glob("ready-*.json"):
        old_ready.unlink()
    rowwise = _artifact(tmp_path / "rowwise", COUPLED.replace("x @ x.T", "x.sum(axis=1)"))
    shutil.copy(art / "traffic.npz", rowwise / "traffic.npz")
    served = _start(serve_py, tmp_path, "--artifact", str(rowwise))
    try:
        ready = json.loads(next(tmp_path.glob("ready-*.json")).read_text())
        assert ready["merge_requests"] is True and ready["output_batch_dims"] == {}
    finally:
        assert _stop(served) == 0


@pytest.mark.worker
def test_bad_requests_get_4xx_with_a_message(static: Served) -> None:
    def post(body: bytes, path: str = "/v2/models/model/infer", **headers: str) -> tuple[int, str]:
        status, _, data = static.request("POST", path, body, headers)
        return status, json.loads(data)["error"] if data else ""

    assert post(b"{nope")[0] == 400 and "not valid JSON" in post(b"{nope")[1]
    ok = np.zeros((1, 3), np.float32)
    assert static.infer({"x": ok, "z": ok}) == (400, "unknown input 'z'; the model takes ['x']")
    assert static.infer({"x": ok.astype(np.float64)}) == (400, "input 'x': datatype FP64, the model takes FP32")
    assert static.infer({"x": np.zeros((1, 4), np.float32)})[0] == 400
    assert "more than the server's maximum batch 8" in str(static.infer({"x": np.zeros((9, 3), np.float32)})[1])
    status, message = static.infer({"x": ok}, model="other")
    assert status == 404 and "unknown model 'other'" in message
    assert static.request("GET", "/v2/models/model/infer")[0] == 405
    assert static.request("GET", "/nope")[0] == 404
    assert post(b"x" * 10, **{"Transfer-Encoding": "chunked"})[0] in (400, 411)
    assert post(b"{}", **{"Inference-Header-Content-Length": "abc"})[0] == 400
    status, message = static.infer({"x": np.full((1, 3), 13, np.float32)})
    assert status == 500 and "unlucky row" in message
    assert static.infer({"x": ok})[0] == 200  # the instance lives on


@pytest.mark.worker
def test_body_over_the_limit_gets_413(static: Served) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", static.port), timeout=10) as s:
        s.sendall(b"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 413")


@pytest.mark.worker
def test_tritonclient_talks_to_the_server(static: Served) -> None:
    http = pytest.importorskip("tritonclient.http")
    client = http.InferenceServerClient(f"127.0.0.1:{static.port}")
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("model")
    assert client.get_model_metadata("model")["inputs"][0]["name"] == "x"
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for binary in (True, False):
        inp = http.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        result = client.infer("model", [inp], outputs=[http.InferRequestedOutput("s", binary_data=binary)])
        assert np.array_equal(result.as_numpy("s"), x.sum(axis=1)) and result.as_numpy("y") is None
    result = client.infer("model", [inp])  # no outputs named: all of them, binary
    assert np.array_equal(result.as_numpy("y"), x * 2)
    with pytest.raises(Exception, match="unknown input"):
        client.infer("model", [http.InferInput("w", [1, 3], "FP32").set_data_from_numpy(x[:1])])


@pytest.mark.worker
def test_sigterm_answers_what_runs_and_leaves_no_child(tmp_path: Path, serve_py: Path) -> None:
    art = _artifact(tmp_path / "art", STATIC)
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--instances", "2", "--threads", "2")
    kids = served.children()
    assert len(kids) == 2
    slow: list[Any] = []
    t = threading.Thread(target=lambda: slow.append(served.infer({"x": np.full((1, 3), 7, np.float32)})))
    t.start()
    time.sleep(0.3)  # the slow call (0.5 s) is running
    assert _stop(served) == 0
    t.join()
    assert slow[0][0] == 200  # the request running at SIGTERM was answered
    assert not any(Path(f"/proc/{pid}").exists() for pid in kids)


@pytest.mark.worker
def test_queue_timeout_gets_503_and_a_dead_instance_is_replaced(tmp_path: Path, serve_py: Path) -> None:
    art = _artifact(tmp_path / "art", STATIC)
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--threads", "2", "--timeout-s", "0.2")
    try:
        def later(v: float) -> Any:
            time.sleep(0.1 if v == 1 else 0)  # the slow call (7) runs first, 1 waits in the queue
            return served.infer({"x": np.full((1, 3), v, np.float32)})

        (slow, _), (late, message) = _concurrently(later, [7, 1])
        assert (slow, late) == (200, 503) and "waited more than 0.2 s in the queue" in str(message)
        before = served.children()
        status, message = served.infer({"x": np.full((1, 3), 66, np.float32)})
        assert status == 500 and "exited with 3" in message
        end = time.monotonic() + 20  # the replacement loads meanwhile: requests may time out (503) until then
        while (status := served.infer({"x": np.ones((1, 3), np.float32)})[0]) == 503 and time.monotonic() < end:
            pass
        assert status == 200 and served.children() != before
        stats = json.loads(served.request("GET", "/v2/models/model/stats")[2])
        assert (stats["ok"], stats["failed"]) == (2, 1) and stats["timed_out"] >= 1
    finally:
        assert _stop(served) == 0


@pytest.mark.worker
def test_flat_copy_runs_as_serve_py(tmp_path: Path) -> None:
    art = _artifact(tmp_path / "art", STATIC)
    from autotune.serving.ship import server_files

    for target, source in server_files().items():
        shutil.copy(SERVING / source, art / target)
    assert "merging.py" in server_files()  # the merging it shares with the worker, flat beside serve.py
    (art / "serving.json").write_text(json.dumps({"model_name": "flat", "threads": 2, "max_batch": 4}))
    served = _start(art / "serve.py", tmp_path, cwd=tmp_path)
    try:
        status, out = served.infer({"x": np.ones((2, 3), np.float32)}, model="flat")
        assert status == 200 and out["y"].tolist() == [[2, 2, 2]] * 2
        assert json.loads(served.request("GET", "/v2/models/flat")[2])["max_batch_size"] == 4
    finally:
        assert _stop(served) == 0


@pytest.mark.worker
def test_calibrate_prints_service_times(tmp_path: Path, serve_py: Path) -> None:
    art = _artifact(tmp_path / "art", STATIC)
    out = subprocess.run([sys.executable, str(serve_py), "--calibrate", "--artifact", str(art),
                          "--instances", "2", "--threads", "2", "--batches", "1,4", "--seconds", "0.2"],
                         capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(doc["service_s"]) == {"1", "4"} and all(0.001 < v < 0.5 for v in doc["service_s"].values())
    assert all(v >= 1.0 for v in doc["spread"].values())


# A model whose call takes 1 ms per token of its longest row: its calls' times are the traffic's lengths.
LENGTHY = DYNAMIC.replace("        time.sleep(0.002)\n", "        time.sleep(0.001 * ids.shape[1])\n")


def test_an_images_height_and_width_are_each_cut_to_its_own() -> None:
    """A 192 x 160 image in a batch padded to 256 x 224 (DETR's pixel_values with its pixel_mask, session 46): its
    height axes and its width axes are two lengths, each cut to the image's own; only the axes of the largest size
    were cut before, leaving it 192 x 224. Axes of one size in different inputs are one length (a sentence's ids and
    mask); within one input they are two (an image of a square batch: 192 x 160, not 192 x 192, session 47)."""
    def image(height: int, width: int) -> dict[str, np.ndarray]:
        pixels = np.zeros((1, 3, height, width), np.float32)
        mask = np.zeros((1, height, width), np.int64)
        pixels[:, :, :192, :160], mask[:, :192, :160] = 0.5, 1
        return {"pixel_values": pixels, "pixel_mask": mask}

    axes, pad = {"pixel_values": [2, 3], "pixel_mask": [1, 2]}, {"pixel_values": 0, "pixel_mask": 0}
    own = tensors.trim(image(256, 224), axes, pad)
    assert own["pixel_values"].shape == (1, 3, 192, 160) and own["pixel_mask"].shape == (1, 192, 160)
    assert own["pixel_mask"].all() and (own["pixel_values"] == 0.5).all()
    square = tensors.trim(image(256, 256), axes, pad)  # height and width of one size: still two lengths
    assert square["pixel_values"].shape == (1, 3, 192, 160) and square["pixel_mask"].shape == (1, 192, 160)
    assert square["pixel_mask"].all()
    ids = np.array([[101, 7, 8, 9, 102, 0, 0, 0]])
    sentence = tensors.trim({"ids": ids, "mask": (ids != 0).astype(np.int64), "types": np.zeros_like(ids)},
                            {"ids": [1], "mask": [1], "types": [1]}, {})
    assert {k: v.shape for k, v in sentence.items()} == {"ids": (1, 5), "mask": (1, 5), "types": (1, 5)}


def test_the_traffics_requests_merged_into_calls_as_the_server_merges_them(tmp_path: Path) -> None:
    _traffic(tmp_path, [2, 10, 20, 30, 40])  # rows of 2, 1, 10, 8, 20, 18, 30, 28, 40 and 38 tokens once trimmed
    batches = tensors.read_traffic(tmp_path / "traffic.npz")
    pad, names = {"ids": 0, "mask": 0}, ["ids", "mask"]
    calls = tensors.traffic_calls(batches, names, pad, 2, 32)
    assert [c[0].shape for c in calls] == [(2, 2), (2, 10), (2, 20), (2, 30), (2, 40)]
    assert calls[0][0].tolist() == [[1, 2], [7, 0]] and calls[0][1].tolist() == [[1, 1], [1, 0]]  # padded, masked
    assert [c[0].shape for c in tensors.traffic_calls(batches, names, pad, 1, 3)] == [(1, 2), (1, 1), (1, 10)]
    assert [c[0].shape for c in tensors.traffic_calls(batches, names, pad, 4, 32)] == [(4, 10), (4, 30)]
    big = tensors.traffic_calls(batches, names, pad, 16, 32)  # more rows than the traffic has: in turn again
    assert [c[0].shape for c in big] == [(16, 40)]
    assert tensors.traffic_calls([{"ids": np.ones((0, 4), np.int64)}], ["ids"], {}, 2, 32) == []


@pytest.mark.worker
def test_the_calibration_times_the_traffics_requests_not_one_repeated(tmp_path: Path, serve_py: Path) -> None:
    """The calibration timed the traffic's first batch cut to b rows, repeated: one shape's median and spread (a
    DETR on images of 160-256 px a side read p90/p50 1.04 at one row, session 46). It now cycles through the
    traffic's requests merged b at a time as the server merges them: a call of 1 ms a token, on requests of 1-40
    tokens, shows their spread, and how many distinct calls each size had."""
    art = _artifact(tmp_path / "art", LENGTHY)
    _traffic(art, [2, 10, 20, 30, 40])

    def calibrate() -> dict[str, Any]:
        out = subprocess.run([sys.executable, str(serve_py), "--calibrate", "--artifact", str(art),
                              "--instances", "1", "--threads", "1", "--batches", "1,2", "--seconds", "0.4"],
                             capture_output=True, text=True, timeout=60, check=True)
        doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return doc

    mixed = calibrate()
    assert mixed["mix"] == {"1": 10, "2": 5}
    assert mixed["spread"]["1"] > 1.5 and mixed["spread"]["2"] > 1.5  # 1-40 ms a call, not one length's
    assert 0.005 < mixed["service_s"]["1"] < 0.04
    (art / "traffic.npz").unlink()
    alone = calibrate()  # no traffic: make_inputs' one shape, as before
    assert alone["mix"] == {"1": 1, "2": 1} and alone["spread"]["1"] < 1.5


QUICK = '''
import numpy as np
BATCH_SIZE = 4
INPUTS = ["x"]
N_POSITIONAL = 1
OUTPUTS = ["y"]
SAMPLE = [("float32", [4, 3], None)]
THREADS = 0


def load():
    return lambda x: {"y": np.asarray(x) * 2}


def make_inputs(batch_size=None):
    return np.ones((batch_size or 4, 3), np.float32)
'''


@pytest.mark.worker
def test_a_pick_whose_rate_never_held_still_gets_its_curve_below_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """No hold passed (a slow model's holds fail on too few requests): the points at 50%, 80% and 90% of the rate
    the report gives are measured all the same, on a real server started by the artifact's run.sh, and the section
    reports them as fractions of that rate with a note saying the rate itself did not hold (the served detector's
    report had no percentiles under load at all, session 32)."""
    from autotune.serving import search as serving_search
    from autotune.serving.processes import ServerProcess
    from autotune.serving.search import Measured, ServingConfig, ServingSearch, Target
    from autotune.serving.ship import copy_server

    art = _artifact(tmp_path / "art", QUICK)
    copy_server(art)
    (art / "run.sh").write_text('if [ "${1:-}" = serve ]; then shift; exec "${PYTHON:-python}" '
                                '"$(dirname "$0")/serve.py" "$@"; fi\nexit 2\n')
    monkeypatch.setattr(serving_search, "CURVE_POINT_S", (1.0, 1.0))  # the suite's time, not the product's
    monkeypatch.setattr(serving_search, "CURVE_POINT_MAX_S", 1.0)
    spec = SimpleNamespace(slo_ms=200.0, percentile="p99", arrivals="poisson", request_samples=1, rate=None,
                           time_budget_s=60.0)
    target = Target(artifact=art, variant="onnx", environment="glibc", batch_size=4, threads=1, model_name="model",
                    input_names=("x",))
    search = ServingSearch(spec, target, cores=1)
    search.bodies = [v2.encode_infer_request({"x": np.full((1, 3), float(i), np.float32)}, binary=True)
                     for i in range(4)]
    pick = Measured(ServingConfig(1, 1, 1, 0.0), "naive", 60.0, 40.0, (36.0, 44.0), [], "converged")
    search.measured.append(pick)
    search._hold_failed.add(pick.config)
    search._curve_unheld(pick, time.monotonic() + 60)
    section = search._section("ok", None, 30.0)
    assert [p["fraction"] for p in section["at_fraction"]] == [0.5, 0.8, 0.9]
    assert [p["rate"] for p in section["at_fraction"]] == pytest.approx([20.0, 32.0, 36.0], rel=0.01)
    assert all(p["sent"] > 0 and p["ok"] == p["sent"] for p in section["at_fraction"]), section["at_fraction"]
    notes = " ".join(section["notes"])
    assert "measured though no hold passed" in notes and "take it as an upper bound" in notes
    # with no time left for a fresh server and its points, nothing is started and nothing claimed
    late = ServingSearch(spec, target, cores=1)
    late._curve_unheld(pick, time.monotonic() - 60)
    assert late.curve == [] and not late.notes
    # on the last hold's server, already up, the same points without starting another (after three failed holds
    # the quickstart's stage had too little grace left for a fresh server, session 36)
    warm = ServingSearch(spec, target, cores=1)
    warm.bodies = search.bodies
    warm.measured.append(pick)
    with ServerProcess(art, ["--max-batch", "1", "--model-name", "model"]) as srv:
        monkeypatch.setattr(serving_search, "ServerProcess", None)  # starting one would fail
        warm._curve_unheld(pick, time.monotonic() + 60, srv)
    assert warm._curve_fractions == [0.5, 0.8, 0.9] and all(p.ok == p.sent > 0 for p in warm.curve)
    # a curve measured for a configuration that then lost its place is not reported as the recommendation's
    warm.measured.append(Measured(ServingConfig(1, 1, 2, 0.0), "search", 60.0, 50.0, (50.0, 55.0), [], "converged"))
    assert warm._section("ok", None, 30.0)["at_fraction"] == []


@pytest.mark.worker
def test_an_output_that_is_not_a_tensor_is_left_out_and_the_tensors_are_served(tmp_path: Path, serve_py: Path) -> None:
    """A GPT-2 served with its default config returned a cache object beside the logits, and every request (even
    the metadata) failed: "numpy dtype object has no v2 datatype". The object is left out, and said; the rest is
    served and merged as usual."""
    art = _artifact(tmp_path / "cache", WITH_CACHE)
    np.savez(art / "traffic.npz", **{"b0.x": np.arange(12, dtype=np.float32).reshape(4, 3)})
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--max-delay-ms", "100")
    try:
        ready = json.loads(next(tmp_path.glob("ready-*.json")).read_text())
        assert ready["unserved_outputs"] == ["cache (DynamicCache)"] and ready["merge_requests"] is True
        meta = json.loads(served.request("GET", "/v2/models/model")[2])
        assert [o["name"] for o in meta["outputs"]] == ["e"]
        xs = [np.full((1, 3), i + 1, np.float32) for i in range(3)]
        for x, (status, out) in zip(xs, _concurrently(lambda x: served.infer({"x": x}), xs), strict=True):
            assert status == 200 and set(out) == {"e"} and np.array_equal(out["e"], x * 2)
    finally:
        assert _stop(served) == 0


@pytest.mark.worker
def test_a_model_with_one_output_entry_per_image_serves_one_image_requests(tmp_path: Path, serve_py: Path) -> None:
    """A detector's artifact of batch 2 names the outputs of two images; a request of one image has half of them,
    image by image, and failed with "IndexError: list index out of range" (SSDlite, session 37). It gets its own
    image's outputs, as the first of the names; merged requests would change an answer (the per-image lists are
    not split by rows), so each request is a call of its own; and calibration at batch 1 runs."""
    art = _artifact(tmp_path / "det", PER_IMAGE)
    np.savez(art / "traffic.npz", **{"b0.images": np.array([[1, 2, 3], [5, 0, 1]], np.float32)})
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--max-delay-ms", "50")
    try:
        ready = json.loads(next(tmp_path.glob("ready-*.json")).read_text())
        assert ready["merge_requests"] is False and "the model returns an entry per row" in ready["merge_requests_why"]
        xs = [np.array([[i, 1, 1]], np.float32) for i in range(4)] + [np.array([[2, 0, 0], [4, 1, 1]], np.float32)]
        for x, (status, out) in zip(xs, _concurrently(lambda x: served.infer({"images": x}), xs), strict=True):
            assert status == 200, out
            for j, row in enumerate(x):
                k = 1 + int(row[0]) % 3
                assert np.array_equal(out[f"output_{j}_boxes"], np.full((k, 4), row.sum(), np.float32))
                assert np.array_equal(out[f"output_{j}_scores"], np.full(k, row[0], np.float32))
            assert set(out) == {f"output_{j}_{key}" for j in range(len(x)) for key in ("boxes", "scores")}
    finally:
        assert _stop(served) == 0
    proc = subprocess.run([sys.executable, str(serve_py), "--artifact", str(art), "--calibrate", "--instances", "1",
                           "--threads", "1", "--batches", "1,2", "--seconds", "0.2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(json.loads(proc.stdout.strip().splitlines()[-1])["service_s"]) == {"1", "2"}


@pytest.mark.worker
def test_a_calibration_longer_than_the_stage_has_left_ends_within_its_promise(tmp_path: Path) -> None:
    """An artifact whose load takes longer than the serving budget (a torch.compile artifact compiling at load:
    SSDlite's stage ran 116 s of a 99-s promise in one failed calibration, whose own limit was 120 s, session 37):
    the calibration is stopped at the stage's promise, the stage fails saying why, and no process is left."""
    from autotune.serving.search import ServingSearch, Target
    from autotune.serving.ship import copy_server

    art = _artifact(tmp_path / "slow", QUICK.replace("def load():", "import time\ntime.sleep(60)\n\n\ndef load():"))
    copy_server(art)
    np.savez(art / "traffic.npz", **{"b0.x": np.ones((4, 3), np.float32)})
    (art / "run.sh").write_text('if [ "${1:-}" = serve ]; then shift; exec "${PYTHON:-python}" '
                                '"$(dirname "$0")/serve.py" "$@"; fi\nexit 2\n')
    spec = SimpleNamespace(slo_ms=200.0, percentile="p99", arrivals="poisson", request_samples=1, rate=None,
                           time_budget_s=6.0, instances="auto", threads="auto", max_batch="auto",
                           max_delay_ms=(0.0,), confirm=1, model_name="model")
    target = Target(artifact=art, variant="onnx", environment="glibc", batch_size=1, threads=1, model_name="model",
                    input_names=("x",))
    t0 = time.monotonic()
    section = ServingSearch(spec, target, cores=1).run()
    assert time.monotonic() - t0 < 6.0 * 1.1 + 1.0, time.monotonic() - t0
    assert section["status"] == "failed" and "what the serving budget had left" in section["reason"], section
    leftover = subprocess.run(["pgrep", "-f", str(art)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout


EOS_MODEL = '''
import numpy as np
BATCH_SIZE = 4
INPUTS = ["ids"]
N_POSITIONAL = 0
OUTPUTS = ["logits"]
SAMPLE = [("int64", [4, 5], [0, 30000])]


def load():
    def predict(ids):
        ids = np.asarray(ids)
        if not (ids == 102).any(axis=1).all():  # as BART's classifier: each row needs its <eos>
            raise ValueError("Each example must contain at least one <eos> token.")
        return {"logits": ids.sum(axis=1, keepdims=True).astype(np.float32)}
    return predict


def make_inputs(batch_size=None):
    return {"ids": np.random.default_rng(0).integers(0, 30000, (batch_size or 4, 5))}
'''


@pytest.mark.worker
def test_a_model_that_rejects_random_inputs_warms_up_and_calibrates_on_the_traffic(tmp_path: Path,
                                                                                    serve_py: Path) -> None:
    """A BART classifier's served artifact failed to start: its warm-up call was random ids with no <eos> in a row
    ("Each example must contain at least one <eos> token", session 38). The instance warms up, and calibrates, on
    the traffic saved in the artifact, its rows repeated to the calibrated batch size."""
    from autotune.serving.instances import traffic_inputs

    art = _artifact(tmp_path / "eos", EOS_MODEL)
    ids = np.array([[101, 7, 102, 0, 0], [101, 9, 8, 6, 102]], np.int64)
    np.savez(art / "traffic.npz", **{"b0.ids": ids, "b1.ids": ids[:1, :3]})
    got = traffic_inputs(str(art), ["ids"], 5)
    assert got is not None and np.array_equal(got[0], ids[[0, 1, 0, 1, 0]])
    assert traffic_inputs(str(art), ["other"], 5) is None and traffic_inputs(str(tmp_path), ["ids"], 1) is None
    proc = subprocess.run([sys.executable, str(serve_py), "--artifact", str(art), "--calibrate", "--instances", "1",
                           "--threads", "1", "--batches", "1,4", "--seconds", "0.2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(json.loads(proc.stdout.strip().splitlines()[-1])["service_s"]) == {"1", "4"}
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--max-delay-ms", "5")
    try:
        status, out = served.infer({"ids": ids})
        assert status == 200 and isinstance(out, dict) and out["logits"].ravel().tolist() == [210.0, 226.0]
    finally:
        assert _stop(served) == 0


@pytest.mark.worker
def test_a_server_not_ready_in_time_is_killed_at_once_and_says_what_bounded_it(tmp_path: Path) -> None:
    """A server still loading when its start's time is up holds no request: it is killed at once, not asked to
    drain for 15 s (a BART's torch.compile artifact, not ready within what the stage had left, then took the stage
    13 s past its promise, session 38), and the error says what bounded the wait."""
    from autotune.serving.processes import ServerProcess, ServingError
    from autotune.serving.ship import copy_server

    art = _artifact(tmp_path / "slow", QUICK.replace(
        "def load():", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n\n\n"
        "def load():"))
    copy_server(art)
    (art / "run.sh").write_text('if [ "${1:-}" = serve ]; then shift; exec "${PYTHON:-python}" '
                                '"$(dirname "$0")/serve.py" "$@"; fi\nexit 2\n')
    t0, stops = time.monotonic(), []
    with pytest.raises(ServingError, match=r"not ready after 2 s \(what bounded it\)"):
        with ServerProcess(art, ["--instances", "1", "--threads", "1"], start_timeout=2.0,
                           timeout_why="what bounded it", on_stop=stops.append):
            pass
    assert time.monotonic() - t0 < 4.0, time.monotonic() - t0
    assert len(stops) == 1 and 0.0 <= stops[0] < 2.0  # the stop's seconds, told to the stage (its margin)
    leftover = subprocess.run(["pgrep", "-f", str(art)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout


def test_a_square_batchs_height_and_width_are_cut_back_each_to_its_own() -> None:
    """96 x 128 and 128 x 96 images merged pad to 128 x 128: a segmenter's class map for the first must come back
    96 x 128, not 96 x 96 (both of its axes had taken the height's lengths: torchvision's LR-ASPP, session 47)."""
    a, b = np.ones((1, 3, 96, 128), np.float32), np.ones((1, 3, 128, 96), np.float32)
    arrays, layout = tensors.combine([[a], [b]], [0.0])
    assert arrays[0].shape == (2, 3, 128, 128)
    maps = np.zeros((2, 4, 128, 128), np.float32)
    for cut in (None, [[2, 3]]):
        first, second = tensors.split([maps], layout, cut)
        assert first[0].shape == (1, 4, 96, 128) and second[0].shape == (1, 4, 128, 96)
    # a padded length only one axis has: every dim of it takes that axis (as before)
    _, wide = tensors.combine([[np.ones((1, 3, 64, 96), np.float32)], [np.ones((1, 3, 64, 128), np.float32)]], [0.0])
    assert tensors.split([np.zeros((2, 128, 128))], wide)[0][0].shape == (1, 96, 96)
    # ids and mask pad alike: one axis, not two
    ids = [[np.ones((1, n), np.int64), np.ones((1, n), np.int64)] for n in (5, 9)]
    _, sentence = tensors.combine(ids, [0, 0])
    h = np.zeros((2, 9, 9), np.float32)
    assert tensors.split([h], sentence, [[1]])[0][0].shape == (1, 5, 9)


def test_the_merge_check_runs_a_tall_and_a_wide_image_between_the_extremes() -> None:
    """The shortest and the longest image lean alike (96 x 96 and 160 x 160); a tall and a wide one padded
    together make the square call whose height and width a cut can mix up (session 47). They run between the two,
    up to the call's rows, and the dims that follow the length are read from all of them."""
    def batch(*sizes: tuple[int, int]) -> dict[str, np.ndarray]:
        h, w = max(s[0] for s in sizes), max(s[1] for s in sizes)
        x = np.zeros((len(sizes), 3, h, w), np.float32)
        for i, (a, b) in enumerate(sizes):
            x[i, :, :a, :b] = 1.0
        return {"x": x}

    batches = [batch((96, 96), (96, 160)), batch((160, 96), (160, 160)), batch((128, 128), (96, 128))]
    got = tensors.merge_trial_requests(batches, ["x"], {"x": 0.0})
    assert got is not None
    assert [r[0].shape[2:] for r in got] == [(96, 96), (160, 96), (96, 160), (160, 160)]
    assert [r[0].shape[2:] for r in tensors.merge_trial_requests(batches, ["x"], {"x": 0.0}, limit=2) or []] == \
        [(96, 96), (160, 160)]  # a call of two rows: the extremes, as before
    # an answer as tall and wide as its image: the width follows too, though 96 x 96 and 96 x 128 share a height
    answers = [[np.zeros((1, 4, 96, 96))], [np.zeros((1, 4, 96, 128))], [np.zeros((1, 4, 160, 96))]]
    assert tensors.following_dims(*answers) == [[2, 3]]
    assert tensors.following_dims(answers[0], answers[1]) == [[3]]


def test_split_cuts_only_the_dims_that_follow_the_length() -> None:
    """A hidden size equal to a padded length is not a length: with the dims the merge check saw follow the input's
    length, only those are cut (a BART's hidden 128 at a padded length of 128 came back cut to 20, session 38)."""
    short, long = [np.zeros((1, 2, 4)), np.zeros((1, 3))], [np.zeros((1, 6, 4)), np.zeros((1, 3))]
    assert tensors.following_dims(short, long) == [[1], []]
    _, layout = tensors.combine([[np.ones((1, 2), np.int64)], [np.ones((1, 4), np.int64)]], [0])
    h = np.zeros((2, 4, 4), np.float32)  # (rows, padded length 4, hidden 4)
    assert tensors.split([h], layout)[0][0].shape == (1, 2, 2)  # the old cut: the hidden dim too
    assert tensors.split([h], layout, [[1]])[0][0].shape == (1, 2, 4)
    assert tensors.split([h], layout, [[1]])[1][0].shape == (1, 4, 4)


HIDDEN4 = '''
import time
import numpy as np
BATCH_SIZE = 4
INPUTS = ["ids", "mask"]
N_POSITIONAL = 0
OUTPUTS = ["h"]
SAMPLE = [("int64", [4, 6], [0, 100]), ("int64", [4, 6], [0, 2])]
DYNAMIC_DIMS = [[0, 1], [0, 1]]


def load():
    def predict(ids, mask):
        time.sleep(0.002)
        return [np.repeat((np.asarray(ids) * np.asarray(mask))[..., None], 4, axis=2).astype(np.float32)]
    return predict
'''


@pytest.mark.worker
def test_a_hidden_size_equal_to_a_padded_length_is_served_whole(tmp_path: Path, serve_py: Path) -> None:
    """Requests of lengths 2 and 4 merged into one call padded to 4, by a model whose hidden size is 4: the short
    request gets its (1, 2, 4), not (1, 2, 2). The merge check (lengths 2 and 6 in the traffic) saw that only dim 1
    follows the length."""
    art = _artifact(tmp_path / "h4", HIDDEN4)
    traffic = {"b0.ids": np.array([[5, 6]]), "b0.mask": np.ones((1, 2), np.int64),
               "b1.ids": np.array([[1, 2, 3, 4, 5, 6]]), "b1.mask": np.ones((1, 6), np.int64)}
    np.savez(art / "traffic.npz", **traffic)
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--max-delay-ms", "300", "--pad",
                    '{"ids": 0, "mask": 0}')
    try:
        ready = json.loads(next(tmp_path.glob("ready-*.json")).read_text())
        assert ready["merge_lengths"] is True, ready
        reqs = [{"ids": np.array([[7, 8]]), "mask": np.ones((1, 2), np.int64)},
                {"ids": np.array([[1, 2, 3, 4]]), "mask": np.ones((1, 4), np.int64)}]
        results = _concurrently(lambda r: served.infer(r), reqs)
        for r, (status, out) in zip(reqs, results, strict=True):
            assert status == 200, out
            assert isinstance(out, dict) and out["h"].shape == (1, r["ids"].shape[1], 4), out["h"].shape
            assert np.array_equal(out["h"][..., 0], r["ids"].astype(np.float32))
        stats = json.loads(served.request("GET", "/v2/models/model/stats")[2])
        assert [2] == [s for s, _ in stats["batches"] if s > 1]  # the two were one call
    finally:
        assert _stop(served) == 0


# A torch.compile artifact in small: the first call at each new shape is slow (a compile), and every call's shape
# is written to a file, so the test sees which shapes the server called before it said ready.
SHAPE_LOG = DYNAMIC.replace(
    "def load():\n    def predict(ids, mask):\n        time.sleep(0.002)",
    "import os\nSEEN = set()\n\n\ndef load():\n    def predict(ids, mask):\n        shape = tuple(np.shape(ids))\n"
    "        if shape not in SEEN:\n            SEEN.add(shape)\n            time.sleep(0.05)\n"
    "            with open(os.path.join(os.path.dirname(__file__), 'shapes.log'), 'a') as f:\n"
    "                f.write(f'{os.getpid()} {shape[0]} {shape[1]}\\n')")


@pytest.mark.worker
def test_a_fresh_server_calls_every_batch_size_and_the_traffics_extremes_before_ready(tmp_path: Path,
                                                                                      serve_py: Path) -> None:
    """A served torch.compile artifact compiled again at each new batch size and length it met, and a fresh server's
    first requests paid it (a BART's batched configurations failed their first points at p99 0.7-1.0 s, session
    38). Before it says ready, each instance calls predict at every batch size up to the max batch on the traffic's
    shortest request and at 1, 2 and the max on its longest; then a request of those shapes is no new shape."""
    art = _artifact(tmp_path / "compiles", SHAPE_LOG)
    assert "SEEN.add(shape)" in SHAPE_LOG
    _traffic(art, [3, 6, 9])  # rows trim to lengths 1..9: the shortest request is 1 long, the longest 9
    served = _start(serve_py, tmp_path, "--artifact", str(art), "--instances", "2", "--threads", "1",
                    "--max-batch", "4", "--max-delay-ms", "5", "--pad", '{"ids": 0, "mask": 0}')
    try:
        ready = json.loads(next(tmp_path.glob("ready-*.json")).read_text())
        assert ready["warmed"]["calls"] == 7 and ready["warmed"]["failed"] == [], ready["warmed"]
        lines = [line.split() for line in (art / "shapes.log").read_text().splitlines()]
        by_pid: dict[str, set[tuple[int, int]]] = {}
        for pid, rows, length in lines:
            by_pid.setdefault(pid, set()).add((int(rows), int(length)))
        assert len(by_pid) == 2  # both instances
        for seen in by_pid.values():
            assert {(1, 1), (2, 1), (3, 1), (4, 1), (1, 9), (2, 9), (4, 9)} <= seen, seen
        status, out = served.infer({"ids": np.arange(1, 10).reshape(1, 9), "mask": np.ones((1, 9), np.int64)})
        assert status == 200 and isinstance(out, dict) and out["h"].shape == (1, 9)
        assert len((art / "shapes.log").read_text().splitlines()) == len(lines)  # no new shape
    finally:
        assert _stop(served) == 0


def test_the_warm_up_sizes_and_calls() -> None:
    """Every size up to 16, then powers of two and the largest; a traffic of one length: its first request alone."""
    assert tensors.warm_batches(1) == [1] and tensors.warm_batches(16) == list(range(1, 17))
    assert tensors.warm_batches(64) == [1, 2, 4, 8, 16, 32, 64] and tensors.warm_batches(24) == [1, 2, 4, 8, 16, 24]
    batches = [{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}]
    calls = tensors.warm_calls(batches, ["x"], {"x": 0.0}, 3)
    assert [c[0].shape for c in calls] == [(1, 3), (2, 3), (3, 3)]
    assert np.array_equal(calls[2][0], np.repeat(batches[0]["x"][:1], 3, axis=0))


@pytest.mark.worker
def test_a_sigterm_during_the_warm_up_stops_the_server_there(tmp_path: Path, serve_py: Path) -> None:
    """A torch.compile artifact's warm-up can take minutes (a compile per call size); a SIGTERM meanwhile stops the
    server at once, exit 0, with no instance left, rather than after the warm-up."""
    art = _artifact(tmp_path / "slow-warm", SHAPE_LOG.replace("time.sleep(0.05)", "time.sleep(1.0)"))
    _traffic(art, [3, 6, 9])
    ready = tmp_path / "ready.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, str(serve_py), "--port", "0", "--ready-file", str(ready), "--artifact",
                             str(art), "--max-batch", "8", "--pad", '{"ids": 0, "mask": 0}'], cwd=tmp_path, env=env)
    try:
        end = time.monotonic() + 60
        while not (art / "shapes.log").exists() or len((art / "shapes.log").read_text().splitlines()) < 6:
            assert proc.poll() is None and time.monotonic() < end, "the warm-up did not start"
            time.sleep(0.05)
        kids = _children(proc.pid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert time.monotonic() - t0 < 6.0  # at most the call running, then the instance's stop
        assert not ready.exists() and not any(Path(f"/proc/{pid}").exists() for pid in kids)
    finally:
        if proc.poll() is None:
            proc.kill()
