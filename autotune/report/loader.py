"""The loader snippet (``artifact/load.py``) and the runtime half of the reproduction code.

``load.py`` is what a service copies: it imports only torch, or only onnxruntime / openvino and
numpy, never autotune, and it defines the same three names for every kind of artifact, so one test
(and one reader) handles them all::

    predict = load()            # the artifact, loaded with the options autotune measured it with
    inputs = make_inputs()      # a random batch of the recommended size, in the recipe's dtypes
    outputs = predict(*inputs)  # the model's outputs (torch tensors; numpy arrays for the runtimes)

For eager and torch.compile, which have no file form, the artifact *is* code: ``load()`` builds the
model from the recipe's factory with the variant's transformations (precision, memory format, compile
mode, threads), as :mod:`autotune.report.reproduce` writes them.

Every function here is pure: text from the report document (no torch; the report package never
imports it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.report.schema import is_int

_REDUCED = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}
_NUMPY_DTYPES = {"float32": "np.float32", "float16": "np.float16", "int64": "np.int64", "int32": "np.int32"}


def numpy_input_lines(inputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """``make_inputs(batch_size)`` returning numpy arrays in the recipe's dtypes (runtimes take numpy)."""
    lines = ["_rng = np.random.default_rng(0)", "", "", "def make_inputs(batch_size=BATCH_SIZE):",
             '    """A random batch like the one autotune measured (normal floats, uniform tokens)."""',
             "    return ("]
    for spec in inputs:
        shape = ", ".join(["batch_size", *(str(int(d)) for d in spec.get("shape") or [])]) + (
            "" if spec.get("shape") else ",")
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
        shape = ", ".join(["batch_size", *(str(int(d)) for d in spec.get("shape") or [])]) + (
            "" if spec.get("shape") else ",")
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


def loader_script(doc: Mapping[str, Any]) -> str | None:
    """``artifact/load.py`` for a normalised document with an ``artifact`` section (None without one).

    For ``code`` artifacts (eager, torch.compile) the text is the reproduction script's model part
    (:func:`autotune.report.reproduce.model_script`).
    """
    section = doc.get("artifact")
    rec = doc.get("recommendation")
    if not isinstance(section, Mapping) or section.get("status") != "ok" or not isinstance(rec, Mapping):
        return None
    kind = str(section.get("kind"))
    recipe = doc.get("recipe") or {}
    if kind == "code":
        from autotune.report.reproduce import model_script

        return model_script(doc, section)
    batch = int(section.get("batch_size") or rec["batch_size"])
    device = str(recipe.get("device_resolved") or recipe.get("device") or "cpu")
    runtime = section.get("runtime") or {}
    threads = int(section["threads"]) if is_int(section.get("threads")) else 1
    inputs = recipe.get("inputs") or []
    head = [
        f'"""Load autotune\'s artifact for {recipe.get("name") or "this recipe"}: {section.get("variant")} at batch '
        f"size {batch} ({section.get('format')}).",
        "",
        "predict = load(); outputs = predict(*make_inputs()). Written by autotune; needs no autotune.",
        '"""',
        "",
        "from pathlib import Path",
        "",
    ]
    if kind in ("onnx", "openvino"):
        head += ["import numpy as np", "import onnxruntime as ort" if kind == "onnx" else "import openvino as ov", ""]
    else:
        head += ["import torch", ""]
    head += ["HERE = Path(__file__).resolve().parent", f"BATCH_SIZE = {batch}  # the artifact is built for it"]
    body: list[str] = []
    if kind == "onnx":
        names = [f["name"] for f in section.get("files") or [] if str(f.get("name")).endswith(".onnx")]
        body += ["", "", *onnx_lines(mode=rec.get("compile_mode"), threads=str(runtime.get("intra_op_num_threads")
                                                                                 or threads),
                                      path=f'str(HERE / "{names[0] if names else "model.onnx"}")', device=device)]
        body += ["", "", *numpy_input_lines(inputs)]
    elif kind == "openvino":
        config = dict(runtime.get("config") or {})
        request_batch = runtime.get("request_batch")
        requests = batch // int(request_batch) if is_int(request_batch) and request_batch > 0 else 1
        body += ["", f"CONFIG = {config!r}", "", "",
                 *openvino_lines(config="CONFIG", requests=str(requests), model='str(HERE / "model.xml")')]
        body += ["", "", *numpy_input_lines(inputs)]
    else:
        runtime_autocast = str(rec.get("precision") or "").startswith("autocast") and rec.get("compiler") == "script"
        body += [f"device = torch.device({device!r})"]
        if is_int(rec.get("threads")):
            body.append(f"torch.set_num_threads({rec['threads']})")
        body += ["", "", *torch_prepare_lines(rec, runtime_autocast=runtime_autocast), "", ""]
        if kind == "aoti":
            body += ["def load():",
                     '    """The AOTInductor package (runs on a machine like the one it was compiled on)."""',
                     "    import torch._inductor", "",
                     '    return _call(torch._inductor.aoti_load_package(str(HERE / "model.pt2")))']
        else:
            optimize = bool(runtime.get("optimize_for_inference"))
            body += ["def load():", '    """The TorchScript module' + (
                " (frozen; optimize_for_inference is run after loading, as autotune measured it: its output "
                "does not load back)" if optimize else "") + '."""',
                '    model = torch.jit.load(str(HERE / "model.pt"), map_location=device).eval()']
            if optimize:
                body.append("    model = torch.jit.optimize_for_inference(model)")
            body.append("    return _call(model)")
        if rec.get("cuda_graphs"):
            body.append("# autotune also captured a CUDA graph around the call: see report.md's reproduction code")
        body += ["", "", *torch_input_lines(inputs)]
    tail = ["", "", 'if __name__ == "__main__":', "    predict = load()", "    outputs = predict(*make_inputs())",
            "    flat = outputs if isinstance(outputs, (list, tuple)) else [outputs]",
            '    print("outputs:", ", ".join(str(tuple(o.shape)) for o in flat))']
    return "\n".join([*head, *body, *tail]) + "\n"


__all__ = ["loader_script", "numpy_input_lines", "onnx_lines", "openvino_lines", "torch_input_lines",
           "torch_prepare_lines"]
