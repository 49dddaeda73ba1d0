"""Code fragments shared by the loader snippet (:mod:`autotune.report.loader`) and the reproduction code
(:mod:`autotune.report.reproduce`): inputs, the runtimes' sessions, the torch call. Pure text builders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_REDUCED = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}
_NUMPY_DTYPES = {"float32": "np.float32", "float16": "np.float16", "int64": "np.int64", "int32": "np.int32"}


def _shape_expr(spec: Mapping[str, Any]) -> str:
    """The batch's shape as code: ``batch_size, 3, 64, 64`` (``batch_size,`` for a per-sample scalar)."""
    dims = [str(int(d)) for d in spec.get("shape") or []]
    return ", ".join(["batch_size", *dims]) + ("" if dims else ",")


def numpy_input_lines(inputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """``make_inputs(batch_size)`` returning numpy arrays in the recipe's dtypes (runtimes take numpy)."""
    lines = ["_rng = np.random.default_rng(0)", "", "", "def make_inputs(batch_size=BATCH_SIZE):",
             '    """A random batch like the one autotune measured (normal floats, uniform tokens)."""',
             "    return ("]
    for spec in inputs:
        shape = _shape_expr(spec)
        dtype = str(spec.get("dtype") or "float32")
        np_dtype = _NUMPY_DTYPES.get(dtype, "np.float32")
        if dtype.startswith(("float", "bfloat")):
            cast = "" if np_dtype == "np.float32" else f".astype({np_dtype})"
            expr = f"_rng.standard_normal(({shape}), dtype=np.float32){cast}"
        else:
            expr = f"_rng.integers(0, {int(spec.get('vocab_size') or 2)}, ({shape}), dtype={np_dtype})"
        lines.append(f"        {expr},  # {spec.get('name') or 'input'}")
    return [*lines, "    )"]


def torch_input_lines(inputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """``make_inputs(batch_size)`` returning torch tensors on ``device`` in the recipe's dtypes."""
    lines = ["def make_inputs(batch_size=BATCH_SIZE):",
             '    """A random batch like the one autotune measured (normal floats, uniform tokens)."""',
             "    return ("]
    for spec in inputs:
        shape = _shape_expr(spec)
        dtype = str(spec.get("dtype") or "float32")
        dtype_expr = f"torch.{dtype}" if dtype.isidentifier() else "torch.float32"
        if dtype.startswith(("float", "bfloat")):
            expr = f"torch.randn(({shape}), device=device).to({dtype_expr})"
        else:
            high = int(spec.get("vocab_size") or 2)
            expr = f"torch.randint(0, {high}, ({shape}), device=device, dtype={dtype_expr})"
        lines.append(f"        {expr},  # {spec.get('name') or 'input'}")
    return [*lines, "    )"]


def onnx_lines(*, mode: str | None, threads: str, path: str, device: str) -> list[str]:
    """``load()`` for an ONNX model: an InferenceSession with the options autotune measured."""
    parallel = mode == "parallel"
    providers = '["CUDAExecutionProvider", "CPUExecutionProvider"]' if device.startswith("cuda") else \
        '["CPUExecutionProvider"]'
    return [
        "def load():",
        '    """An InferenceSession as autotune measured it: ORT_ENABLE_ALL, explicit thread counts."""',
        "    opts = ort.SessionOptions()",
        "    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL",
        f"    opts.execution_mode = ort.ExecutionMode.{'ORT_PARALLEL' if parallel else 'ORT_SEQUENTIAL'}",
        f"    opts.intra_op_num_threads = {threads}",
        f"    opts.inter_op_num_threads = {threads if parallel else 1}",
        f"    session = ort.InferenceSession({path}, opts, providers={providers})",
        "    names = [i.name for i in session.get_inputs()]",
        "",
        "    def predict(*arrays):",
        "        return session.run(None, dict(zip(names, arrays, strict=True)))",
        "",
        "    return predict",
    ]


def openvino_lines(*, config: str, requests: str, model: str) -> list[str]:
    """``load()`` for an OpenVINO model: compiled with the measured configuration; with ``requests`` > 1
    a call splits the batch over an AsyncInferQueue (throughput hint), as autotune measured it."""
    return [
        "def load():",
        '    """The model compiled as autotune measured it (performance hint, threads, inference precision)."""',
        f"    compiled = ov.Core().compile_model({model}, \"CPU\", {config})",
        "    n_out = len(compiled.outputs)",
        f"    requests = {requests}",
        "    if requests == 1:",
        "        request = compiled.create_infer_request()",
        "",
        "        def predict(*arrays):",
        "            request.infer(list(arrays))",
        "            return [request.get_output_tensor(i).data.copy() for i in range(n_out)]",
        "",
        "        return predict",
        "    queue = ov.AsyncInferQueue(compiled, requests)",
        "    results = [None] * requests",
        "",
        "    def done(request, index):",
        "        results[index] = [request.get_output_tensor(i).data.copy() for i in range(n_out)]",
        "",
        "    queue.set_callback(done)",
        "",
        "    def predict(*arrays):",
        "        chunk = arrays[0].shape[0] // requests",
        "        for i in range(requests):",
        "            queue.start_async([a[i * chunk:(i + 1) * chunk] for a in arrays], userdata=i)",
        "        queue.wait_all()",
        "        return [np.concatenate([r[j] for r in results]) for j in range(n_out)]",
        "",
        "    return predict",
    ]


def torch_prepare_lines(rec: Mapping[str, Any], *, runtime_autocast: bool) -> list[str]:
    precision = str(rec.get("precision") or "fp32")
    reduced = _REDUCED.get(precision.removeprefix("autocast-"))
    lines = ["def _prepare(inputs):",
             '    """Inputs as autotune fed the variant: float inputs cast to its precision, its memory format."""',
             "    out = []", "    for x in inputs:", "        if x.is_floating_point():"]
    body = []
    if reduced and not precision.startswith("autocast"):
        body.append(f"            x = x.to({reduced})")
    if rec.get("memory_format") == "channels_last":
        body += ["            if x.dim() == 4:", "                x = x.contiguous(memory_format=torch.channels_last)"]
    lines += body or ["            pass"]
    lines += ["        out.append(x)", "    return out"]
    if runtime_autocast and reduced:
        context = f"torch.inference_mode(), torch.autocast(device.type, dtype={reduced})"
    else:
        context = "torch.inference_mode()"
    return [*lines, "", "", "def _call(model):", "    def predict(*inputs):",
            f"        with {context}:", "            return model(*_prepare(inputs))", "", "    return predict"]


__all__ = ["numpy_input_lines", "onnx_lines", "openvino_lines", "torch_input_lines", "torch_prepare_lines"]
