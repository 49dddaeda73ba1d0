"""The Open Inference Protocol's messages (autotune.serving.v2): round trips for every datatype, binary and JSON,
flat and nested data, interoperation with tritonclient's own encoder/decoder, and malformed input -> ProtocolError."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autotune.serving import v2


def _decode_req(body: bytes, headers: dict[str, str]) -> v2.InferRequest:
    length = headers.get(v2.HEADER_LENGTH)
    return v2.decode_infer_request(body, int(length) if length is not None else None)


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("datatype", sorted(v2.DATATYPES))
def test_request_and_response_round_trip(datatype: str, binary: bool) -> None:
    dtype = v2.DATATYPES[datatype]
    x = (np.arange(12) % 2 == 0) if dtype.kind == "b" else np.arange(12).astype(dtype)
    x = x.reshape(3, 4)
    body, headers = v2.encode_infer_request({"x": x, "y": x[:1]}, binary=binary, request_id="r1")
    assert (v2.HEADER_LENGTH in headers) is binary
    req = _decode_req(body, headers)
    assert req.id == "r1" and list(req.inputs) == ["x", "y"]
    for name, want in (("x", x), ("y", x[:1])):
        assert req.inputs[name].dtype == dtype and np.array_equal(req.inputs[name], want)
    assert req.binary_output is True
    body, headers = v2.encode_infer_response("m", "r1", [("out", x)], binary=binary)
    out = v2.decode_infer_response(body, int(headers[v2.HEADER_LENGTH]) if binary else None)
    assert out["out"].dtype == dtype and np.array_equal(out["out"], x)


def test_nested_json_data_and_per_output_binary() -> None:
    msg = {"id": "a", "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4.5]]}],
           "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}]}
    req = v2.decode_infer_request(json.dumps(msg).encode(), None)
    assert req.inputs["x"].tolist() == [[1, 2], [3, 4.5]] and req.inputs["x"].dtype == np.float32
    assert req.outputs == ("y", "z") and req.binary_output == {"y": True, "z": False}
    body, headers = v2.encode_infer_response("m", None, [("y", np.ones(2)), ("z", np.zeros(2))],
                                             binary=req.binary_output)
    head = json.loads(body[:int(headers[v2.HEADER_LENGTH])])
    assert "data" in head["outputs"][1] and head["outputs"][0]["parameters"]["binary_data_size"] == 16


def test_big_endian_and_non_contiguous_arrays_are_sent_little_endian() -> None:
    x = np.arange(6, dtype=">i4").reshape(2, 3)[:, ::2]
    body, headers = v2.encode_infer_request({"x": x})
    got = _decode_req(body, headers).inputs["x"]
    assert got.dtype == np.dtype("<i4") and got.tolist() == x.tolist()


def test_tritonclient_interoperates() -> None:
    http = pytest.importorskip("tritonclient.http")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for binary in (True, False):
        inp = http.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        body, json_size = http.InferenceServerClient.generate_request_body(
            [inp], outputs=[http.InferRequestedOutput("y", binary_data=binary)])
        req = v2.decode_infer_request(body, json_size)
        assert np.array_equal(req.inputs["x"], x) and req.binary_output == {"y": binary}
        out, headers = v2.encode_infer_response("m", None, [("y", x * 2)], binary=req.binary_output)
        length = headers.get(v2.HEADER_LENGTH)
        result = http.InferResult.from_response_body(out, header_length=int(length) if length else None)
        assert np.array_equal(result.as_numpy("y"), x * 2)


_X = {"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}


@pytest.mark.parametrize(("message", "match"), [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"inputs": []}', "non-empty list"),
    (b'{"inputs": [{"datatype": "FP32"}]}', "string \"name\""),
    (json.dumps({"inputs": [_X, _X]}).encode(), "given twice"),
    (json.dumps({"inputs": [{**_X, "datatype": "FP8"}]}).encode(), "unknown datatype 'FP8'; allowed: BOOL"),
    (json.dumps({"inputs": [{**_X, "datatype": "BYTES"}]}).encode(), "BYTES tensors are not supported"),
    (json.dumps({"inputs": [{**_X, "shape": [1, -2]}]}).encode(), "non-negative integers"),
    (json.dumps({"inputs": [{**_X, "shape": "1x2"}]}).encode(), "non-negative integers"),
    (json.dumps({"inputs": [{**_X, "shape": [1, 3]}]}).encode(), "has 2 values, shape \\[1, 3\\] needs 3"),
    (json.dumps({"inputs": [{**_X, "data": [[1, 2], [3]]}]}).encode(), "ragged"),
    (json.dumps({"inputs": [{**_X, "data": ["a", "b"]}]}).encode(), "must be numbers"),
    (json.dumps({"inputs": [{**_X, "datatype": "INT64", "data": [1.5, 2]}]}).encode(), "must be integers"),
    (json.dumps({"inputs": [{**_X, "datatype": "INT8", "data": [1, 300]}]}).encode(), "out of INT8's range"),
    (json.dumps({"inputs": [{**_X, "datatype": "BOOL"}]}).encode(), "must be true/false"),
    (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]}).encode(), "neither \"data\""),
    (json.dumps({"inputs": [_X], "outputs": {"name": "y"}}).encode(), '"outputs" must be a list'),
    (json.dumps({"inputs": [_X], "parameters": [1]}).encode(), "parameters must be an object"),
    (json.dumps({"inputs": [_X], "id": 5}).encode(), '"id" must be a string'),
])
def test_malformed_requests_raise_protocol_error(message: bytes, match: str) -> None:
    with pytest.raises(v2.ProtocolError, match=match):
        v2.decode_infer_request(message, None)


def test_malformed_binary_requests_raise_protocol_error() -> None:
    body, headers = v2.encode_infer_request({"x": np.ones((2, 3), np.float32)})
    length = int(headers[v2.HEADER_LENGTH])
    with pytest.raises(v2.ProtocolError, match="runs past the body's end"):
        v2.decode_infer_request(body[:-4], length)
    with pytest.raises(v2.ProtocolError, match="bytes after the binary inputs"):
        v2.decode_infer_request(body + b"1234", length)
    with pytest.raises(v2.ProtocolError, match="Inference-Header-Content-Length is"):
        v2.decode_infer_request(body, len(body) + 1)
    with pytest.raises(v2.ProtocolError, match="not valid JSON"):
        v2.decode_infer_request(body, length - 1)
    head = json.loads(body[:length])
    head["inputs"][0]["parameters"]["binary_data_size"] = 20
    with pytest.raises(v2.ProtocolError, match="does not match shape \\[2, 3\\] of FP32 \\(24 bytes\\)"):
        new = json.dumps(head).encode()
        v2.decode_infer_request(new + body[length:], len(new))


def test_error_responses_and_unsupported_dtypes() -> None:
    with pytest.raises(v2.ProtocolError, match="boom"):
        v2.decode_infer_response(b'{"error": "boom"}', None)
    with pytest.raises(v2.ProtocolError, match="has no v2 datatype"):
        v2.encode_infer_response("m", None, [("y", np.zeros(2, np.complex64))], binary=True)
