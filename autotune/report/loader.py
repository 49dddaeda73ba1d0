"""The loader snippet (``artifact/load.py``): the deployable artifact loaded without autotune.

``load.py`` is what a service copies: it imports only torch, or only onnxruntime / openvino and
numpy, never autotune, and it defines the same names for every kind of artifact, so one test
(and one reader) handles them all::

    predict = load()            # the artifact, loaded with the options autotune measured it with
    batch = make_inputs()       # the saved traffic's typical batch (random without one), in predict's form
    outputs = predict(**batch)  # keyword tensors (a dict batch), predict(*batch) for positional ones

``predict`` takes one batch in the form the model was measured with: positional tensors, keyword tensors
(``predict(input_ids=..., attention_mask=...)``) or both; torch tensors or numpy arrays. It takes every
batch size from 1 to the recommended one and every shape seen in the data (the exported graphs are dynamic
in those dims: :mod:`autotune.worker.variants.runtimes`), and pads to the buckets of a ``+buckets``
recommendation before the call and slices the outputs back, as :class:`autotune.worker.traffic.BucketPlan` did
in the measurement.

Outputs: the file artifacts (TorchScript, AOTInductor, ONNX, OpenVINO) return a flat list of the model's
output tensors in pytree order (torch tensors; numpy arrays for the runtimes), named in ``OUTPUTS`` and in
the docstring with their paths (``[0] logits: path ['logits']``): an exported graph has no output classes,
and a Hugging Face ``ModelOutput`` could not be rebuilt without its library. For eager and torch.compile,
which have no file form, the artifact *is* code: ``load()`` builds the model from the recipe's factory with
the variant's transformations (:func:`autotune.report.reproduce.model_script`), and ``predict`` returns the
model's own output.

What the interface is comes from the worker (:func:`autotune.worker.artifact.describe_interface`, the section's
``interface``); reports written before it existed get one from the recipe's ``[[inputs]]``.

Every function here is pure: text from the report document (no torch; the report package never
imports it).

Process environment: a recommendation measured with another allocator or OpenMP setting (``frozen+jemalloc``,
:mod:`autotune.core.process_env`) must run in it, and such a setting is read when a process starts. ``load.py``
says so at its top and, run as a script, starts itself again once with it; a service imports ``load.py`` from a
process started by ``artifact/run.sh`` (``./run.sh python service.py``), which :func:`run_script` writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.core.process_env import environment_of_variant, python_prelude
from autotune.core.process_env import run_script as process_run_script
from autotune.report.codegen import py_int, py_literal
from autotune.report.reproduce import model_script
from autotune.report.schema import is_int
from autotune.report.snippets import (
    bucket_lines,
    call_line,
    doc_text,
    interface_doc_lines,
    interface_lines,
    interface_of,
    leaves_lines,
    main_batch_lines,
    numpy_make_inputs_lines,
    onnx_lines,
    openvino_lines,
    torch_context,
    torch_make_inputs_lines,
    torch_predict_lines,
    torch_prepare_lines,
    traffic_batch_lines,
)

_OUTPUTS_ARE = {
    "onnx": "a list of numpy arrays, one per output of the model, in pytree order",
    "openvino": "a list of numpy arrays, one per output of the model, in pytree order",
    "torchscript": "a list of torch tensors, the model's output flattened in pytree order",
    "aoti": "a list of torch tensors, the model's output flattened in pytree order",
}


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
        return model_script(doc, section)
    batch = py_int(section.get("batch_size") or rec["batch_size"], 1)
    device = str(recipe.get("device_resolved") or recipe.get("device") or "cpu")
    runtime = section.get("runtime") or {}
    threads = int(section["threads"]) if is_int(section.get("threads")) else 1
    iface = interface_of(recipe, section, batch)
    buckets = runtime.get("buckets") if isinstance(runtime.get("buckets"), Mapping) else None
    runtime_kind = kind in ("onnx", "openvino")
    name = " ".join(str(recipe.get("name") or "this recipe").split())
    head = [
        '"""' + doc_text(f"Load autotune's artifact for {name}: {section.get('variant')} at batch size {batch} "
                         f"({section.get('format')})."),
        "",
        "Written by autotune; needs no autotune (only "
        + ({"onnx": "numpy and onnxruntime", "openvino": "numpy and openvino"}.get(kind) or "torch") + ").",
        "",
        "    predict = load()",
        *interface_doc_lines(iface, batch=batch, outputs_are=_OUTPUTS_ARE.get(kind, "the model's output"),
                             buckets=buckets),
        '"""',
        "",
        *python_prelude(environment_of_variant(str(rec.get("variant") or ""))),
        "from pathlib import Path",
        "",
    ]
    if runtime_kind:
        head += ["import numpy as np", "import onnxruntime as ort" if kind == "onnx" else "import openvino as ov", ""]
    else:
        head += ["import torch", ""]
    head += ["HERE = Path(__file__).resolve().parent", *interface_lines(iface, batch=batch)]
    names = [str(x["name"]) for x in iface["inputs"]]
    if buckets:
        head += ["", "", *bucket_lines(buckets, names, numpy=runtime_kind)]
    body: list[str] = []
    if kind == "onnx":
        files = [f["name"] for f in section.get("files") or [] if str(f.get("name")).endswith(".onnx")]
        model_file = files[0] if files else "model.onnx"
        n_threads = py_int(runtime.get("intra_op_num_threads"), threads) or threads
        body += ["", "", f"THREADS = {n_threads}  # the session's intra-op threads (serve.py sets its own)", "",
                 "", *onnx_lines(mode=rec.get("compile_mode"), threads="THREADS",
                                 path=f"str(HERE / {model_file!r})", device=device, interface=True,
                                 buckets=bool(buckets))]
        body += ["", "", *numpy_make_inputs_lines()]
    elif kind == "openvino":
        config = dict(runtime.get("config") or {})
        request_batch = runtime.get("request_batch")
        requests = batch // int(request_batch) if is_int(request_batch) and request_batch > 0 else 1
        body += ["", "", f"CONFIG = {py_literal(config)}", "", "",
                 *openvino_lines(config="CONFIG", requests=str(requests), model='str(HERE / "model.xml")',
                                 interface=True, buckets=bool(buckets))]
        body += ["", "", *numpy_make_inputs_lines()]
    else:
        runtime_autocast = str(rec.get("precision") or "").startswith("autocast") and rec.get("compiler") == "script"
        context = torch_context(rec, runtime_autocast=runtime_autocast)
        body += ["", "", f"device = torch.device({device!r})"]
        if is_int(rec.get("threads")):
            body.append(f"torch.set_num_threads({int(rec['threads'])})")
        body += ["", "", *torch_prepare_lines(rec), "", "", *leaves_lines(), "", ""]
        predict = torch_predict_lines(context=context, call="model(*xs)", flat=True, buckets=bool(buckets))
        if kind == "aoti":
            body += ["def load():",
                     '    """The AOTInductor package (runs on a machine like the one it was compiled on)."""',
                     "    import torch._inductor", "",
                     '    model = torch._inductor.aoti_load_package(str(HERE / "model.pt2"))', "", *predict]
        else:
            optimize = bool(runtime.get("optimize_for_inference"))
            body += ["def load():", '    """The TorchScript module' + (
                " (frozen; optimize_for_inference is run after loading, as autotune measured it: its output "
                "does not load back)" if optimize else "") + '."""',
                '    model = torch.jit.load(str(HERE / "model.pt"), map_location=device).eval()']
            if optimize:
                body.append("    model = torch.jit.optimize_for_inference(model)")
            body += ["", *predict]
        if rec.get("cuda_graphs"):
            body.append("# autotune also captured a CUDA graph around the call: see report.md's reproduction code")
        body += ["", "", *torch_make_inputs_lines()]
    tail = ["", "", *traffic_batch_lines(), "", "", 'if __name__ == "__main__":', "    predict = load()",
            *main_batch_lines(),
            f"    outputs = {call_line(iface)}",
            '    print("outputs:", ", ".join(str(tuple(o.shape)) for o in outputs))']
    return "\n".join([*head, *body, *tail]) + "\n"


def run_script(doc: Mapping[str, Any]) -> str | None:
    """``artifact/run.sh``: starts ``load.py`` (no arguments) or the command given in the process environment the
    recommendation was measured in (None without a recommendation)."""
    rec = doc.get("recommendation")
    if not isinstance(rec, Mapping):
        return None
    return process_run_script(environment_of_variant(str(rec.get("variant") or "")),
                              default_command='${PYTHON:-python} "$(dirname "$0")/load.py"',
                              commands={"serve": ('${PYTHON:-python} "$(dirname "$0")/serve.py"',
                                                  "serves the model over HTTP (KServe v2): serve.py --help")})


__all__ = ["loader_script", "run_script"]
