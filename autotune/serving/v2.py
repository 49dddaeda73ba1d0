"""The Open Inference Protocol's (KServe v2) inference messages over HTTP/JSON, with the binary tensor extension.

Why our own: the artifact's server (``serve.py``) must run with only the standard library and numpy, and the
load generator must speak exactly what Triton, KServe and our server accept, so that one client measures all of
them. The wire format (what ``tritonclient.http`` sends and reads):

- JSON: ``{"id": ..., "inputs": [{"name", "datatype", "shape", "data": [...]}], "outputs": [{"name"}],
  "parameters": {...}}``; ``data`` flat (row-major) or nested.
- Binary extension: the JSON header, then each binary tensor's raw little-endian bytes in input order; a binary
  input says ``"parameters": {"binary_data_size": N}`` and has no ``data``; the header's length travels in the
  HTTP header ``Inference-Header-Content-Length``. A request asks binary outputs with the top-level parameter
  ``binary_data_output: true`` or per output ``{"name": ..., "parameters": {"binary_data": true}}``.

Every function is pure (bytes in, bytes out); malformed input raises :class:`ProtocolError`, whose message names
the input and says what is allowed (the server answers it as 400). Standard library and numpy only: this file is
copied beside ``serve.py`` into the artifact.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HEADER_LENGTH = "Inference-Header-Content-Length"

#: v2 datatype -> numpy dtype (little-endian). BYTES (strings) is not supported.
DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype("<u1"), "UINT16": np.dtype("<u2"), "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"), "INT8": np.dtype("<i1"), "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"), "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
}
_BY_KIND = {(dt.kind, dt.itemsize): name for name, dt in DATATYPES.items()}
_ALLOWED = ", ".join(DATATYPES)


class ProtocolError(ValueError):
    """A message that is not a valid v2 inference message (the server answers 400 with this text)."""


@dataclass(frozen=True)
class InferRequest:
    """One decoded request: ``inputs`` by name, the outputs asked for (None: all) and how to send them."""

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: tuple[str, ...] | None = None
    #: True / False for every output, or per output name (names missing: JSON).
    binary_output: bool | dict[str, bool] = False
    parameters: dict[str, Any] = field(default_factory=dict)


def datatype_of(dtype: Any) -> str:
    """The v2 datatype of a numpy dtype (ProtocolError for one the protocol has no name for)."""
    dt = np.dtype(dtype)
    try:
        return _BY_KIND[dt.kind, dt.itemsize]
    except KeyError:
        raise ProtocolError(f"numpy dtype {dt} has no v2 datatype; allowed: {_ALLOWED}") from None


def dtype_of(datatype: Any, where: str = "datatype") -> np.dtype[Any]:
    """The numpy dtype of a v2 datatype name."""
    if datatype == "BYTES":
        raise ProtocolError(f"{where}: BYTES tensors are not supported; allowed: {_ALLOWED}")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise ProtocolError(f"{where}: unknown datatype {datatype!r}; allowed: {_ALLOWED}")
    return DATATYPES[datatype]


# ---- requests ---------------------------------------------------------------------------------------------


def encode_infer_request(inputs: Mapping[str, np.ndarray], *, binary: bool = True, outputs_binary: bool = True,
                         request_id: str | None = None,
                         outputs: Sequence[str] | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and extra HTTP headers of an infer request with ``inputs`` (binary tensors or JSON ``data``)."""
    tensors, blobs = [], []
    for name, value in inputs.items():
        arr = np.asarray(value)
        tensor: dict[str, Any] = {"name": name, "datatype": datatype_of(arr.dtype), "shape": list(arr.shape)}
        if binary:
            raw = _raw(arr)
            tensor["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            tensor["data"] = arr.ravel().tolist()
        tensors.append(tensor)
    message: dict[str, Any] = {"inputs": tensors}
    if request_id is not None:
        message["id"] = request_id
    if outputs is not None:
        message["outputs"] = [{"name": o, "parameters": {"binary_data": outputs_binary}} for o in outputs]
    elif outputs_binary:
        message["parameters"] = {"binary_data_output": True}
    return _with_blobs(message, blobs)


def decode_infer_request(body: bytes, header_length: int | None) -> InferRequest:
    """An infer request's body (``header_length``: the JSON header's length when binary tensors follow it)."""
    message, tail = _split(body, header_length)
    if not isinstance(message, dict):
        raise ProtocolError("the request must be a JSON object with \"inputs\"")
    raw_inputs = message.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError('"inputs" must be a non-empty list of {"name", "datatype", "shape", "data"} objects')
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, tensor in enumerate(raw_inputs):
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
            raise ProtocolError(f"inputs[{i}] must be an object with a string \"name\"")
        name = tensor["name"]
        if name in inputs:
            raise ProtocolError(f"input {name!r} is given twice")
        arr, offset = _tensor(tensor, f"input {name!r}", tail, offset)
        inputs[name] = arr
    if offset != len(tail):
        raise ProtocolError(f"the body has {len(tail) - offset} bytes after the binary inputs' "
                            f"{offset} (binary_data_size of every input must add up to the binary part)")
    params = _params(message.get("parameters"), "parameters")
    binary: bool | dict[str, bool] = bool(params.get("binary_data_output", False))
    outputs: tuple[str, ...] | None = None
    raw_outputs = message.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise ProtocolError('"outputs" must be a list of {"name": ...} objects')
        names, per = [], {}
        for i, out in enumerate(raw_outputs):
            if not isinstance(out, dict) or not isinstance(out.get("name"), str):
                raise ProtocolError(f"outputs[{i}] must be an object with a string \"name\"")
            names.append(out["name"])
            p = _params(out.get("parameters"), f"outputs[{i}].parameters")
            per[out["name"]] = bool(p.get("binary_data", binary))
        outputs = tuple(names)
        binary = per
    rid = message.get("id")
    if rid is not None and not isinstance(rid, str):
        raise ProtocolError('"id" must be a string')
    return InferRequest(rid, inputs, outputs, binary, params)


# ---- responses --------------------------------------------------------------------------------------------


def encode_infer_response(model_name: str, request_id: str | None, outputs: Sequence[tuple[str, np.ndarray]], *,
                          binary: bool | Mapping[str, bool]) -> tuple[bytes, dict[str, str]]:
    """The body and extra headers of a response with ``outputs`` (binary per ``binary``: all, or by name)."""
    tensors, blobs = [], []
    for name, value in outputs:
        arr = np.asarray(value)
        tensor: dict[str, Any] = {"name": name, "datatype": datatype_of(arr.dtype), "shape": list(arr.shape)}
        if binary is True or (isinstance(binary, Mapping) and binary.get(name, False)):
            raw = _raw(arr)
            tensor["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            tensor["data"] = arr.ravel().tolist()  # NaN / Infinity as Python's json writes them
        tensors.append(tensor)
    message: dict[str, Any] = {"model_name": model_name, "model_version": "1", "outputs": tensors}
    if request_id is not None:
        message["id"] = request_id
    return _with_blobs(message, blobs)


def decode_infer_response(body: bytes, header_length: int | None) -> dict[str, np.ndarray]:
    """A response's outputs by name (ProtocolError with the server's message for an error response)."""
    message, tail = _split(body, header_length)
    if isinstance(message, dict) and "error" in message:
        raise ProtocolError(str(message["error"]))
    if not isinstance(message, dict) or not isinstance(message.get("outputs"), list):
        raise ProtocolError('the response must be a JSON object with "outputs"')
    out: dict[str, np.ndarray] = {}
    offset = 0
    for i, tensor in enumerate(message["outputs"]):
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
            raise ProtocolError(f"outputs[{i}] must be an object with a string \"name\"")
        out[tensor["name"]], offset = _tensor(tensor, f"output {tensor['name']!r}", tail, offset)
    return out


# ---- helpers ----------------------------------------------------------------------------------------------


def _raw(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr, dtype=DATATYPES[datatype_of(arr.dtype)]).tobytes()


def _with_blobs(message: dict[str, Any], blobs: list[bytes]) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(message, separators=(",", ":")).encode()
    if not blobs:
        return header, {"Content-Type": "application/json"}
    return b"".join([header, *blobs]), {"Content-Type": "application/octet-stream",
                                        HEADER_LENGTH: str(len(header))}


def _split(body: bytes, header_length: int | None) -> tuple[Any, memoryview]:
    view = memoryview(body)
    if header_length is not None:
        if not 0 < header_length <= len(body):
            raise ProtocolError(f"{HEADER_LENGTH} is {header_length}, the body has {len(body)} bytes")
        head, tail = view[:header_length], view[header_length:]
    else:
        head, tail = view, view[len(body):]
    try:
        return json.loads(bytes(head)), tail
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = "the JSON header" if header_length is not None else "the body"
        raise ProtocolError(f"{where} is not valid JSON: {e}") from None


def _params(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} must be an object")
    return value


def _shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        raise ProtocolError(f"{where}: \"shape\" must be a list of non-negative integers, got {value!r}")
    return tuple(value)


def _tensor(tensor: dict[str, Any], where: str, tail: memoryview, offset: int) -> tuple[np.ndarray, int]:
    """One tensor of a message: from its binary part (advancing ``offset``) or its JSON ``data``."""
    dtype = dtype_of(tensor.get("datatype"), where)
    shape = _shape(tensor.get("shape"), where)
    count = math.prod(shape)
    params = _params(tensor.get("parameters"), f"{where}: parameters")
    size = params.get("binary_data_size")
    if size is not None:
        if "data" in tensor:
            raise ProtocolError(f"{where}: has both \"data\" and binary_data_size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ProtocolError(f"{where}: binary_data_size must be a non-negative integer, got {size!r}")
        if size != count * dtype.itemsize:
            raise ProtocolError(f"{where}: binary_data_size {size} does not match shape {list(shape)} of "
                                f"{tensor['datatype']} ({count * dtype.itemsize} bytes)")
        if offset + size > len(tail):
            raise ProtocolError(f"{where}: binary_data_size {size} runs past the body's end "
                                f"({len(tail) - offset} bytes left; is {HEADER_LENGTH} right?)")
        arr = np.frombuffer(tail[offset:offset + size], dtype=dtype).reshape(shape)
        return arr, offset + size
    if "data" not in tensor:
        raise ProtocolError(f"{where}: has neither \"data\" nor parameters.binary_data_size")
    return _json_data(tensor["data"], dtype, shape, where, tensor["datatype"]), offset


def _json_data(data: Any, dtype: np.dtype[Any], shape: tuple[int, ...], where: str, datatype: str) -> np.ndarray:
    if not isinstance(data, list):
        data = [data]
    try:
        raw = np.asarray(data)
    except ValueError:
        raise ProtocolError(f"{where}: \"data\" is a ragged nested list; give it flat or nested as {list(shape)}") \
            from None
    if raw.size != math.prod(shape):
        raise ProtocolError(f"{where}: \"data\" has {raw.size} values, shape {list(shape)} needs "
                            f"{math.prod(shape)}")
    kind = raw.dtype.kind if raw.size else dtype.kind
    allowed = {"b": "b", "u": "bui", "i": "bui", "f": "buif"}[dtype.kind]
    if kind not in allowed:
        what = {"b": "true/false", "u": "integers", "i": "integers", "f": "numbers"}[dtype.kind]
        raise ProtocolError(f"{where}: \"data\" of a {datatype} tensor must be {what}, got {raw.dtype.name} values")
    if dtype.kind in "iu" and raw.size:
        info = np.iinfo(dtype)
        if int(raw.min()) < info.min or int(raw.max()) > info.max:
            raise ProtocolError(f"{where}: a value is out of {datatype}'s range [{info.min}, {info.max}]")
    return raw.astype(dtype).reshape(shape)


__all__ = [
    "DATATYPES",
    "HEADER_LENGTH",
    "InferRequest",
    "ProtocolError",
    "datatype_of",
    "decode_infer_request",
    "decode_infer_response",
    "dtype_of",
    "encode_infer_request",
    "encode_infer_response",
]
