"""Reproducing the recommendation: the ``autotune measure`` command and a standalone Python script.

The script mirrors how autotune builds a variant (``autotune.worker.model`` for the factory,
``autotune.worker.variants`` for the order: eval, device, precision, memory format, then the compiler)
without importing autotune, so it can be pasted anywhere torch is installed. For ``onnx`` / ``openvino``
recommendations it exports / converts the fp32 model as :mod:`autotune.worker.variants.runtimes` does and times the
runtime's session with the measured options (numpy arrays in and out). With ``timed=False`` it is the
artifact of an eager / torch.compile recommendation (:mod:`autotune.report.loader`).
"""

from __future__ import annotations

import keyword
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core.process_env import environment_of_variant, python_prelude
from autotune.environment import summary_line
from autotune.errors import InputError
from autotune.report.canonical import normalise_report
from autotune.report.codegen import py_comment, py_int, py_literal, torch_dtype
from autotune.report.format import fmt_ms, fmt_rate, latency_ms
from autotune.report.schema import is_int
from autotune.report.snippets import (
    bucket_lines,
    call_line,
    doc_text,
    interface_doc_lines,
    interface_lines,
    interface_of,
    main_batch_lines,
    onnx_lines,
    openvino_lines,
    row_padding_doc_lines,
    row_padding_lines,
    rows_padded,
    torch_context,
    torch_make_inputs_lines,
    torch_predict_lines,
    torch_prepare_lines,
    traffic_batch_lines,
)

_FLOAT_DTYPES = {"float32", "float", "float16", "half", "bfloat16", "float64", "double"}
#: Names the generated script defines itself; a factory imported under one of them is renamed.
_RESERVED_NAMES = {
    "torch",
    "time",
    "model",
    "inputs",
    "outputs",
    "device",
    "run",
    "synchronize",
    "BATCH_SIZE",
    "ITERATIONS",
    "importlib",
    "factory",
    "AutocastModel",
    # the runtimes' reproduction code and the loader's interface
    "np", "ort", "ov", "arrays", "predict", "load", "make_inputs", "THREADS", "CONFIG", "REQUESTS", "ov_model",
    "probe",
}
_REDUCED = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}
#: Compilers run by another runtime: the model is exported from fp32 torch, the runtime takes numpy arrays.
_RUNTIMES = ("onnx", "openvino")
_OV_PRECISION = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}


def measure_line(doc: Mapping[str, Any]) -> str | None:
    """``measure_command`` for a normalised document."""
    rec = doc.get("recommendation")
    if rec is None:
        return None
    recipe_path = (doc.get("recipe") or {}).get("path") or "RECIPE.toml"
    return (
        f"autotune measure {shlex.quote(str(recipe_path))} --variant {shlex.quote(str(rec['variant']))} "
        f"--batch-size {int(rec['batch_size'])}"
    )


def py_call(callee: str, kwargs: Mapping[str, Any] | None) -> str:
    """``callee(k=v, ...)`` as Python source; keys that are not identifiers go through ``**{...}``."""
    if not kwargs:
        return f"{callee}()"
    if all(isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k) for k in kwargs):
        return f"{callee}(" + ", ".join(f"{k}={py_literal(v)}" for k, v in kwargs.items()) + ")"
    return f"{callee}(**{py_literal(dict(kwargs))})"


def _factory_lines(model_spec: Mapping[str, Any]) -> tuple[list[str], str]:
    """Import lines and the callable's expression for the recipe's factory.

    Mirrors ``autotune.worker.model.resolve_factory``: ``package.module:attr`` is imported,
    ``path/to/file.py:attr`` is loaded from the file (relative to the recipe's directory).
    """
    factory = model_spec.get("factory")
    if not factory:
        return ["# The recipe names no model factory: build your model here."], "torch.nn.Identity"
    target, _, attr = str(factory).rpartition(":")
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_absolute():
            path = Path(str(model_spec.get("base_dir") or ".")) / path
        return (
            [
                "",
                f"_spec = importlib.util.spec_from_file_location('autotune_model', {str(path)!r})",
                "_module = importlib.util.module_from_spec(_spec)",
                "_spec.loader.exec_module(_module)",
                f"factory = getattr(_module, {attr!r})",
            ],
            "factory",
        )
    if (
        target
        and all(p.isidentifier() for p in target.split("."))
        and attr.isidentifier()
        and not keyword.iskeyword(attr)
    ):
        if attr in _RESERVED_NAMES:
            return [f"from {target} import {attr} as factory_{attr}"], f"factory_{attr}"
        return [f"from {target} import {attr}"], attr
    return (
        ["", f"factory = getattr(importlib.import_module({target!r}), {attr!r})"],
        "factory",
    )


def _variant_tokens(rec: Mapping[str, Any]) -> set[str]:
    return {token.strip().lower() for token in str(rec.get("variant") or "").split("+")}


def _compiler_lines(compiler: str, mode: str | None, *, dynamic: bool | None = False) -> list[str]:
    """Lines that turn ``model`` into the compiled callable, as ``autotune.worker.variants`` builds it (``dynamic``:
    torch.compile's, :func:`autotune.worker.variants.compile_dynamic`)."""
    if compiler == "eager":
        return []
    if compiler == "script":
        return ["model = torch.jit.script(model)"]
    if compiler == "trace":
        return ["model = torch.jit.trace(model, inputs, check_trace=False, strict=False)"]
    if compiler == "frozen":
        return [
            "model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model).eval()))",
            "# (autotune falls back to torch.jit.trace when torch.jit.script cannot compile the model)",
        ]
    if compiler == "compile":
        return [f"model = torch.compile(model, mode={mode or 'default'!r}, dynamic={dynamic!r})"]
    if compiler == "export":
        return [
            "import torch._inductor",
            "",
            "exported = torch.export.export(model, inputs)",
            'package = torch._inductor.aoti_compile_and_package(exported, package_path="model.pt2")',
            "model = torch._inductor.aoti_load_package(package)",
        ]
    return [f"# compiler {compiler!r} is not known to this report version: apply it here"]


def _int8_lines(compiler: str, precision: str) -> list[str]:
    """Quantize ``model`` as ``autotune.worker.variants.quantize`` does (torch); for a runtime, say where the
    quantized model is (its calibration needs the data, so the artifact's file is the model)."""
    if compiler in ("eager", "compile"):
        return ["# int8: torchao's dynamic int8 (int8 weights per channel, activations quantized per call) on the",
                "# Linear layers, as autotune measured it",
                "from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_",
                "",
                "quantize_(model, Int8DynamicActivationInt8WeightConfig())"]
    if compiler in ("script", "trace", "frozen"):
        return ["# int8: torch.ao's dynamic quantization of the Linear layers (TorchScript cannot hold torchao's)",
                "model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)"]
    if compiler in _RUNTIMES:
        return [f"# {precision}: autotune quantized the exported model ("
                + ("onnxruntime.quantization" if compiler == "onnx" else "NNCF") + ", calibrated on the data where "
                "static); the artifact's model file is that model: load it rather than this fp32 export"]
    return [f"# {precision}: not offered for {compiler}"]


def _runtime_lines(compiler: str, mode: str | None, precision: str, device: str) -> list[str]:
    """Export / convert the fp32 ``model`` and load it in the runtime as autotune measured it (``predict``)."""
    if compiler == "onnx":
        convert = [
            "# torch.onnx.export with the dynamo exporter, the batch dim dynamic as autotune measured it (it falls",
            "# back to dynamo=False, opset_version=17, dynamic_axes when it fails; the report's notes say so)",
            "dynamic = tuple({0: torch.export.Dim.DYNAMIC} for _ in inputs) if BATCH_SIZE > 1 else None",
            "with torch.no_grad():",
            '    torch.onnx.export(model, inputs, "model.onnx", dynamo=True, verbose=False, dynamic_shapes=dynamic)',
        ]
        load = onnx_lines(mode=mode, threads="THREADS", path='"model.onnx"', device=device)
    else:
        hint = "THROUGHPUT" if mode == "throughput" else "LATENCY"
        convert = [
            "# openvino.convert_model from the module, reshaped to the batch's shapes, dim 0 bounded 1..batch",
            "ov_model = ov.convert_model(model, example_input=inputs)",
            "",
            "",
            "def reshape(batch):",
            "    ov_model.reshape({i: ov.PartialShape([ov.Dimension(1, batch) if BATCH_SIZE > 1 else batch,",
            "                                          *x.shape[1:]]) for i, x in enumerate(inputs)})",
            "",
            "",
            "reshape(BATCH_SIZE)",
            f'CONFIG = {{"PERFORMANCE_HINT": "{hint}", "INFERENCE_NUM_THREADS": THREADS, '
            f'"INFERENCE_PRECISION_HINT": "{_OV_PRECISION.get(precision, "f32")}"}}',
            "REQUESTS = 1",
            'if CONFIG["PERFORMANCE_HINT"] == "THROUGHPUT":',
            "    # as autotune measures it: the batch split over the largest divisor <= OpenVINO's optimal number",
            "    # of requests, run at once on an AsyncInferQueue",
            '    probe = ov.Core().compile_model(ov_model, "CPU", CONFIG)',
            '    n = int(probe.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))',
            "    REQUESTS = max(k for k in range(1, max(1, min(BATCH_SIZE, n)) + 1) if BATCH_SIZE % k == 0)",
            "    reshape(BATCH_SIZE // REQUESTS)",
        ]
        load = openvino_lines(config="CONFIG", requests="REQUESTS", model="ov_model")
    return [*convert, "arrays = [x.cpu().contiguous().numpy() for x in inputs]", "", "", *load, "", "",
            "predict = load()", ""]


def _prelude(rec: Mapping[str, Any]) -> list[str]:
    """The lines that start the script again in the recommendation's process environment (none for glibc's
    default): an allocator or OpenMP setting is read when a process starts (:mod:`autotune.core.process_env`)."""
    return python_prelude(environment_of_variant(str(rec.get("variant") or "")))


def _seed(recipe: Mapping[str, Any]) -> int:
    seed = (recipe.get("search") or {}).get("seed") if isinstance(recipe.get("search"), Mapping) else None
    return seed if is_int(seed) else 0


def _loader_tail(lines: list[str], rec: Mapping[str, Any], doc: Mapping[str, Any], section: Mapping[str, Any] | None,
                 *, runtime_autocast: bool, static_compile: bool) -> str:
    """The artifact's interface after the model is built: ``load()``, ``make_inputs()``, a main that runs one
    batch. ``predict`` takes one batch in the traffic's form (:mod:`autotune.report.loader`) and returns the
    model's own output (padded to buckets and cut back for a ``+buckets`` recommendation; ``static_compile``, a
    torch.compile of static shapes: its rows padded up to a call size and cut back,
    :func:`autotune.report.snippets.row_padding_lines`)."""
    recipe = doc.get("recipe") or {}
    batch = py_int((section or {}).get("batch_size") or rec["batch_size"], 1)
    iface = interface_of(recipe, section, batch)
    runtime = (section or {}).get("runtime") or {}
    buckets = runtime.get("buckets") if isinstance(runtime.get("buckets"), Mapping) else None
    rows = static_compile and rows_padded(iface, batch)
    names = [str(x["name"]) for x in iface["inputs"]]
    call = "model(*xs[:N_POSITIONAL], **dict(zip(INPUTS[N_POSITIONAL:], xs[N_POSITIONAL:])))"
    doc_lines = interface_doc_lines(iface, batch=batch, buckets=buckets,
                                    outputs_are="the model's own output; its tensors in pytree order")
    if rows:
        doc_lines += row_padding_doc_lines(batch)
    shapes = len((buckets or {}).get("buckets") or []) or 1
    return "\n".join([
        '"""' + doc_text(f"autotune's artifact for {recipe.get('name') or 'this recipe'}: {rec['variant']} at batch "
                         f"size {batch}."), "", "    predict = load()", *doc_lines, '"""', "",
        *_prelude(rec), *lines, "", "", *interface_lines(iface, batch=batch),
        *(["", "", *bucket_lines(buckets, names, numpy=False)] if buckets else []),
        *(["", "", *row_padding_lines(batch, shapes)] if rows else []),
        "", "", *torch_prepare_lines(rec), "", "",
        "def load():", '    """The model built above, called as autotune measured it."""',
        *torch_predict_lines(context=torch_context(rec, runtime_autocast=runtime_autocast), call=call, flat=False,
                             buckets=bool(buckets), rows=rows),
        "", "", *torch_make_inputs_lines(), "", "", *traffic_batch_lines(), "", "", 'if __name__ == "__main__":',
        "    predict = load()", *main_batch_lines(), f"    outputs = {call_line(iface)}", "    synchronize()",
        "    flat = list(outputs.values()) if isinstance(outputs, dict) else outputs",
        "    flat = flat if isinstance(flat, (list, tuple)) else [flat]",
        '    print("outputs:", ", ".join(str(tuple(o.shape)) for o in flat if hasattr(o, "shape")))']) + "\n"


def model_script(doc: Mapping[str, Any], section: Mapping[str, Any] | None = None) -> str:
    """The artifact of an eager / torch.compile recommendation: the code that builds it and runs one batch."""
    return reproduce_script(doc, timed=False, section=section)


def reproduce_script(doc: Mapping[str, Any], *, timed: bool = True, section: Mapping[str, Any] | None = None) -> str:
    """``reproduce_code`` for a normalised document (``timed=False``: the artifact of an eager / torch.compile
    recommendation, ``section`` its artifact section: build and run one batch, no timing)."""
    rec = doc.get("recommendation")
    if rec is None:
        raise InputError("recommendation: the report has none, so there is nothing to reproduce")
    recipe = doc.get("recipe") or {}
    if timed and isinstance(recipe.get("data"), Mapping):
        return traffic_script(doc)
    model_spec = recipe.get("model") or {}
    device = str(recipe.get("device_resolved") or recipe.get("device") or "cpu")
    batch = py_int(rec["batch_size"], 1)
    tokens = _variant_tokens(rec)
    compiler = str(
        rec.get("compiler")
        or next(iter(sorted(tokens & {"eager", "script", "trace", "frozen", "export"})), None)
        or next((t.partition(":")[0] for t in sorted(tokens) if t.partition(":")[0] in _RUNTIMES), "eager")
    ).lower()
    runtime = compiler in _RUNTIMES
    precision = str(rec.get("precision") or "fp32").lower()
    autocast = precision.startswith("autocast")
    reduced = None if runtime else _REDUCED.get(precision.removeprefix("autocast-"))
    memory_format = str(rec.get("memory_format") or "contiguous").lower()
    cuda_graphs = bool(rec.get("cuda_graphs")) or "cudagraphs" in tokens
    import_lines, callee = _factory_lines(model_spec)
    measured = (
        f"{fmt_rate(rec.get('throughput'))} samples/s, p50 {fmt_ms(latency_ms(rec, 'p50'))} ms, "
        f"p99 {fmt_ms(latency_ms(rec, 'p99'))} ms"
    )

    stdlib = [
        statement
        for statement, needle in (
            ("import importlib", "importlib.import_module"),
            ("import importlib.util", "importlib.util"),
        )
        if any(needle in line for line in import_lines)
    ]
    name = " ".join(str(recipe.get("name") or "this recipe").split())  # one line: it goes into a comment
    if timed:
        header = [
            f"# Reproduce autotune's recommendation for {py_comment(name)}: "
            f"{py_comment(rec['variant'])} at batch size {batch}.",
            f"# autotune measured {py_comment(measured)}",
            f"# on {py_comment(summary_line(doc.get('environment') or {}))}.",
            "# For a measurement with warmup detection and confidence intervals run:",
            f"#   {py_comment(measure_line(doc))}",
        ]
    else:
        header = [  # after the interface's docstring (_loader_tail)
            f"# {'torch.compile' if compiler == 'compile' else 'eager'} has no file form, so the artifact is this "
            "code: the recipe's factory with the variant's transformations.",
            "# It builds the model and runs one batch (python load.py); it needs torch and the factory's package.",
        ]
    runtime_imports = {"onnx": ["import numpy as np", "import onnxruntime as ort"],
                       "openvino": ["import numpy as np", "import openvino as ov"]}.get(compiler, [])
    lines = [
        *header,
        *(_prelude(rec) if timed else []),
        *stdlib,
        *(["import time"] if timed else []),
        "",
        *runtime_imports,
        "import torch",
        *import_lines,
        "",
        *([f"BATCH_SIZE = {batch}", "ITERATIONS = 50"] if timed else []),
        "",
        f"torch.manual_seed({_seed(recipe)})  # the seed autotune built the model with (random weights match)",
    ]
    if is_int(rec.get("threads")):
        lines.append(f"torch.set_num_threads({int(rec['threads'])})")
    if runtime:
        lines.append("THREADS = torch.get_num_threads()  # the runtime's pool, set explicitly as autotune does")
    if device == "auto":
        lines.append('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")')
    else:
        lines.append(f"device = torch.device({device!r})")
    lines += [
        "",
        "",
        "def synchronize():",
        '    if device.type == "cuda":',
        "        torch.cuda.synchronize(device)",
        "",
        "",
    ]
    if precision not in ("fp32", "bf16", "fp16", "autocast-bf16", "autocast-fp16", "int8", "int8-static"):
        lines.append(f"# precision {precision!r} is not known to this report version: apply it here")
    lines += [f"model = {py_call(callee, model_spec.get('kwargs'))}", "model = model.eval().to(device)"]
    if precision.startswith("int8"):
        lines += _int8_lines(compiler, precision)
    if reduced and not autocast:
        lines.append(f"model = model.to({reduced})  # {precision}: weights and float inputs")
    if memory_format == "channels_last":
        lines.append("model = model.to(memory_format=torch.channels_last)")

    if timed:  # the loader (timed=False) makes its inputs in make_inputs()
        lines += ["", "inputs = ("]
        for spec in recipe.get("inputs") or []:
            shape = ", ".join(["BATCH_SIZE", *(str(py_int(d, 1)) for d in spec.get("shape") or [])])
            dtype = str(spec.get("dtype") or "float32")
            dtype_expr = torch_dtype(dtype)
            if dtype in _FLOAT_DTYPES:
                cast = reduced if reduced and not autocast else dtype_expr
                expr = f"torch.randn({shape}, device=device, dtype={cast})"
                if memory_format == "channels_last" and len(spec.get("shape") or []) == 3:
                    expr += ".contiguous(memory_format=torch.channels_last)"
            else:
                high = py_int(spec.get("vocab_size"), 2)
                expr = f"torch.randint(0, {high}, ({shape},), device=device, dtype={dtype_expr})"
            lines.append(f"    {expr},  # {py_comment(spec.get('name') or 'input')}")
        lines += [")", ""]

    # autocast: eager/script enter it around every call; the graph compilers get it baked in
    # through a wrapper module (as autotune.worker.variants does).
    runtime_autocast = autocast and reduced is not None and compiler in ("eager", "script")
    if autocast and reduced is not None and not runtime_autocast:
        lines += [
            "",
            "class AutocastModel(torch.nn.Module):",
            "    def __init__(self, inner):",
            "        super().__init__()",
            "        self.inner = inner",
            "",
            "    def forward(self, *args):",
            f"        with torch.autocast(device.type, dtype={reduced}):",
            "            return self.inner(*args)",
            "",
            "",
            "model = AutocastModel(model)",
        ]
    context = "torch.inference_mode()" + (
        f", torch.autocast(device.type, dtype={reduced})" if runtime_autocast else ""
    )
    runtime_options = (section or {}).get("runtime") or {}
    build = [] if runtime else _compiler_lines(compiler, rec.get("compile_mode"),
                                                dynamic=runtime_options.get("compile_dynamic", False))
    if runtime:
        lines += _runtime_lines(compiler, rec.get("compile_mode"), precision, device)
    if any(line and not line.startswith("#") for line in build):
        lines += ["with torch.no_grad():", *("    " + line if line else "" for line in build), ""]
    else:
        lines += [*build, ""] if build else []
    if cuda_graphs:
        lines += [
            "# CUDA graph: capture one call on static inputs, then replay it (outputs are overwritten).",
            "stream = torch.cuda.Stream()",
            "stream.wait_stream(torch.cuda.current_stream())",
            f"with torch.cuda.stream(stream), {context}:",
            "    for _ in range(3):",
            "        model(*inputs)",
            "torch.cuda.current_stream().wait_stream(stream)",
            "graph = torch.cuda.CUDAGraph()",
            f"with torch.cuda.graph(graph), {context}:",
            "    static_outputs = model(*inputs)",
            "",
            "",
            "def run():",
            "    graph.replay()",
            "    return static_outputs",
        ]
    elif runtime:
        lines += ["", "def run():", "    return predict(*arrays)"]
    elif timed:
        lines += ["", "def run():", f"    with {context}:", "        return model(*inputs)"]
    if not timed:
        return _loader_tail(lines, rec, doc, section, runtime_autocast=runtime_autocast,
                            static_compile=(compiler == "compile" and not cuda_graphs
                                            and runtime_options.get("compile_dynamic", False) is False))
    lines += [
        "",
        "",
        "start = time.perf_counter()",
        "outputs = run()  # first call: lazy initialisation / compilation, not steady state",
        "synchronize()",
        'print(f"first call: {time.perf_counter() - start:.3f} s")',
        "for _ in range(max(ITERATIONS // 5, 1)):  # warm up",
        "    run()",
        "synchronize()",
        "start = time.perf_counter()",
        "for _ in range(ITERATIONS):",
        "    outputs = run()",
        "synchronize()",
        "elapsed = time.perf_counter() - start",
        'print(f"{BATCH_SIZE * ITERATIONS / elapsed:,.1f} samples/s, '
        '{1000 * elapsed / ITERATIONS:.2f} ms per batch of {BATCH_SIZE}")',
    ]
    return "\n".join(lines) + "\n"


def traffic_script(doc: Mapping[str, Any]) -> str:
    """The reproduction of a ``[data]`` recipe's recommendation: its artifact on the user's own batches.

    With a data factory the measured thing is the artifact (the same build: dynamic dims, bucket padding,
    the keyword interface) serving the factory's batches in turn; so the script loads ``artifact/load.py``
    (which needs no autotune), draws the factory's first ``max_batches`` batches at the recommended batch
    size with the seed autotune used, and times whole passes over them, as autotune did.
    """
    rec = doc["recommendation"]
    recipe = doc.get("recipe") or {}
    data = recipe.get("data") or {}
    batch = py_int(rec["batch_size"], 1)
    name = " ".join(str(recipe.get("name") or "this recipe").split())
    import_lines, callee = _factory_lines(data)
    import_lines = [line.replace("'autotune_model'", "'autotune_data'").replace("factory = ", "batches_of = ")
                    for line in import_lines]
    if callee == "factory":
        callee = "batches_of"
    measured = (f"{fmt_rate(rec.get('throughput'))} samples/s, p50 {fmt_ms(latency_ms(rec, 'p50'))} ms, "
                f"p99 {fmt_ms(latency_ms(rec, 'p99'))} ms")
    kwargs = dict(data.get("kwargs") or {})
    call_expr = py_call(callee, {"batch_size": 0, **kwargs}).replace("batch_size=0", "batch_size=BATCH_SIZE", 1)
    if "BATCH_SIZE" not in call_expr:  # keys that are not identifiers went through **{...}
        call_expr = f"{callee}(batch_size=BATCH_SIZE, **{py_literal(kwargs)})"
    lines = [
        f"# Reproduce autotune's recommendation for {py_comment(name)}: {py_comment(rec['variant'])} at batch size "
        f"{batch}, on the",
        "# recipe's own data: the saved artifact (artifact/load.py, no autotune) serving the data factory's batches.",
        f"# autotune measured {py_comment(measured)}",
        f"# on {py_comment(summary_line(doc.get('environment') or {}))}.",
        "# For a measurement with warmup detection and confidence intervals run:",
        f"#   {py_comment(measure_line(doc))}",
        *_prelude(rec),
        "import importlib.util",
        "import runpy",
        "import time",
        "",
        "import torch",
        *import_lines,
        "",
        f"BATCH_SIZE = {batch}",
        f"MAX_BATCHES = {py_int(data.get('max_batches'), 16)}",
        "SECONDS = 5.0",
        "",
        "predict = runpy.run_path('artifact/load.py')['load']()  # run from the run's directory (--out)",
        f"torch.manual_seed({_seed(recipe)})  # the seed autotune drew the batches with",
        "batches = []",
        f"for batch in {call_expr}:",
        "    batches.append(batch)",
        "    if len(batches) == MAX_BATCHES:",
        "        break",
        "",
        "",
        "def call(batch):",
        "    if isinstance(batch, dict):",
        "        return predict(**batch)",
        "    if isinstance(batch, (tuple, list)):",
        "        return predict(*batch)",
        "    return predict(batch)",
        "",
        "",
        "rows = sum(int(next(iter(b.values())).shape[0]) if isinstance(b, dict)",
        "           else int((b[0] if isinstance(b, (tuple, list)) else b).shape[0]) for b in batches)",
        "start = time.perf_counter()",
        "for batch in batches:  # every shape's first call: compiles and specialisations land here",
        "    call(batch)",
        'print(f"first pass: {time.perf_counter() - start:.3f} s over {len(batches)} batches")',
        "passes, start = 0, time.perf_counter()",
        "while time.perf_counter() - start < SECONDS:",
        "    for batch in batches:",
        "        call(batch)",
        "    passes += 1",
        "elapsed = time.perf_counter() - start",
        'print(f"{passes * rows / elapsed:,.1f} samples/s over {passes} passes of {len(batches)} batches")',
    ]
    return "\n".join(lines) + "\n"


def measure_command(doc: Mapping[str, Any]) -> str | None:
    """``autotune measure RECIPE --variant NAME --batch-size N`` for the recommendation (None
    without one)."""
    return measure_line(normalise_report(doc))


def reproduce_code(doc: Mapping[str, Any]) -> str:
    """Python code that builds the recommended configuration and times it briefly.

    It rebuilds the model from the recipe's factory and kwargs, applies the variant in the
    order autotune does (eval, device, precision, memory format, then the compiler), makes
    random inputs at the recommended batch size and runs a short timed loop. The header
    comment holds the ``autotune measure`` command, which measures properly (warmup
    detection, confidence intervals). Raises ``InputError`` when there is no recommendation.
    """
    return reproduce_script(normalise_report(doc))
