"""The loader snippet (``artifact/load.py``): the deployable artifact loaded without autotune.

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

from collections.abc import Mapping
from typing import Any

from autotune.report.reproduce import model_script
from autotune.report.schema import is_int
from autotune.report.snippets import (
    numpy_input_lines,
    onnx_lines,
    openvino_lines,
    torch_input_lines,
    torch_prepare_lines,
)


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


__all__ = ["loader_script"]
