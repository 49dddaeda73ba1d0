"""The deployable artifact: the recommendation saved in the form a service loads, without autotune.

``autotune run`` ends with one more worker request (op ``artifact``, :func:`deploy`): the recommended
variant is built again at the recommended batch size by :func:`autotune.worker.variants.build_variant` (the
same builder the measurement used, with ``keep_artifact=True``), and what it built is saved into a
directory of ``--out``; the same build is then profiled (:mod:`autotune.worker.profiling`) next to eager.

What is saved, per compiler (``KINDS``):

* ``script`` / ``trace`` / ``frozen`` → ``model.pt`` (``torch.jit.save``). For ``frozen`` the frozen
  module is saved *before* ``torch.jit.optimize_for_inference``: that pass rewrites the graph with
  MKLDNN-packed constants that ``torch.jit.load`` cannot read back ("required keyword attribute 'value'
  is undefined", torch 2.14), so the loader runs the pass after loading (deterministic; outputs match).
* ``export`` → ``model.pt2``, the AOTInductor package the measurement compiled
  (``torch._inductor.aoti_compile_and_package``; it builds with the machine's C++ compiler, and the
  package only runs on a machine like this one: same CPU ISA / GPU architecture and a compatible torch).
  Load with ``torch._inductor.aoti_load_package``. A structured output is exported as its flat leaves (a
  library's output class could not be rebuilt where the library is not imported).
* ``onnx`` → ``model.onnx`` (and ``model.onnx.data`` when the exporter stores weights externally), the
  file the measured session ran; the loader opens an ``InferenceSession`` with the measured options.
* ``openvino`` → ``model.xml`` + ``model.bin`` (``openvino.save_model`` with ``compress_to_fp16=False``:
  its default would halve the weights to fp16, a different model than the one measured), the
  ``ov.Model`` as compiled (its ``PartialShape``s: dim 0 bounded by the request batch, the traffic's
  varying dims unbounded); the loader compiles it with the measured configuration.
* ``eager`` / ``compile`` have no file form: the artifact is the code (:mod:`autotune.report.loader`
  writes it from the recipe: factory import, kwargs, precision, memory format, compile mode, threads).

An int8 or bf16 winner's artifact is the model that was measured at that precision (:func:`format_of` says
which): ``onnx+int8`` / ``+int8-static`` save the quantized ``.onnx`` (ONNX Runtime's dynamic or QDQ model,
alone in its directory), ``openvino+int8`` the IR with NNCF's FakeQuantize nodes and int8 weights (``bf16`` the
fp32 IR compiled with ``INFERENCE_PRECISION_HINT=bf16``, in the loader's config), ``script`` / ``trace`` /
``frozen`` ``+int8`` the TorchScript of the ``torch.ao`` dynamically quantized model, and ``eager`` /
``compile`` ``+int8`` the code that builds the model and quantizes it on load (torchao ``quantize_``). The
static quantizations are calibrated on the same traffic batches as the measured build, so the file is that
build's model.

Every kind gets ``load.py`` (the loader snippet: load, one batch, print the output shapes) written by the
parent from the document (:mod:`autotune.deployment`, which also puts this worker's directory in place), so
``autotune report`` shows the same text (:mod:`autotune.report.loader`).

The artifact serves the traffic. It is built exactly as the measured candidate was (the worker's
``_candidate_inputs``: the traffic's largest batch, padded to its bucket for ``+buckets``, with
``Traffic.build_dims()`` as the dynamic dims and the layout's names as the graph's input names), so the
shipped model is the measured one and takes every batch size from 1 to the recommended one and every shape
of the data (export and the runtimes leave those dims dynamic; TorchScript and code read sizes at run time).
What ``load.py`` needs to be called like the model is recorded by the worker in the section's ``interface``
(:func:`describe_interface`: the batch's form, each input's name, keyword or positional, dtype, first-batch
shape, integer range and dynamic dims, each output's name and pytree path); a ``+buckets`` artifact's
padding is in ``runtime["buckets"]`` (:meth:`autotune.worker.traffic.BucketPlan.describe`, with each input's padded
dims and pad value), which ``load.py`` applies before the call and undoes after it, as the measurement did.

A failure here (an export that does not serialise, a full disk, a crash) is reported in the document's
``artifact`` section with the reason; the run and everything it measured stand.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from autotune.core.protocol import directory_files

#: compiler -> kind of artifact.
KINDS: dict[str, str] = {
    "eager": "code", "compile": "code", "script": "torchscript", "trace": "torchscript", "frozen": "torchscript",
    "export": "aoti", "onnx": "onnx", "openvino": "openvino",
}
#: What each kind is, in the report's words.
FORMATS: dict[str, str] = {
    "torchscript": "TorchScript (torch.jit.save)",
    "aoti": "AOTInductor package (.pt2, torch._inductor.aoti_compile_and_package)",
    "onnx": "ONNX model (torch.onnx.export), run by ONNX Runtime",
    "openvino": "OpenVINO IR (openvino.save_model, fp32 weights)",
    "code": "no file form: the code that builds it (factory, transformations, torch.compile)",
}


def kind_of(compiler: str) -> str:
    return KINDS.get(compiler, "code")


def format_of(kind: str, precision: str, compiler: str) -> str:
    """What the saved artifact is, precision included: a quantized build's file *is* the int8 model."""
    if precision in ("int8", "int8-static"):
        return {
            "onnx": ("ONNX model quantized by onnxruntime.quantization (" + (
                "QDQ, static: calibrated scales" if precision == "int8-static" else "dynamic: int8 weights, "
                "activations quantized per call") + "), run by ONNX Runtime"),
            "openvino": "OpenVINO IR with int8 weights and FakeQuantize nodes (NNCF nncf.quantize, save_model)",
            "torchscript": "TorchScript (torch.jit.save) of the torch.ao dynamically quantized model (int8 Linear)",
            "code": "no file form: the code that builds it and quantizes it on load (torchao quantize_"
                    + (", torch.compile)" if compiler == "compile" else ")"),
        }.get(kind, FORMATS[kind])
    if kind == "openvino" and precision in ("bf16", "fp16"):
        return f"OpenVINO IR (openvino.save_model, fp32 weights), compiled with INFERENCE_PRECISION_HINT={precision}"
    return FORMATS[kind]


def save_artifact(built: Any, directory: Path, *, plan: Any = None, dynamic_dims: Any = None) -> dict[str, Any]:
    """Write ``built.artifact`` (a :class:`autotune.worker.variants.BuiltVariant` built with ``keep_artifact``) into
    ``directory``; return the kind, the files written and the runtime options a loader needs.

    ``plan`` (the :class:`autotune.worker.traffic.BucketPlan` of a ``+buckets`` variant) goes into the runtime options
    as ``buckets`` (its ``describe()``, plus per input the padded dims and the pad value), so ``load.py`` pads
    and slices back as the measured call did; ``dynamic_dims`` (what the variant was built with) decides a
    ``code`` artifact's ``torch.compile(dynamic=...)``.
    """
    import torch

    from autotune.worker.variants import compile_dynamic

    spec = built.spec
    kind = kind_of(spec.compiler)
    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    runtime: dict[str, Any] = {}
    threads = spec.threads or torch.get_num_threads()
    if kind == "torchscript":
        target = directory / "model.pt"
        if isinstance(built.artifact, bytes):  # frozen: serialised before optimize_for_inference
            target.write_bytes(built.artifact)
        else:
            torch.jit.save(built.artifact, str(target))
        runtime["optimize_for_inference"] = spec.compiler == "frozen"
    elif kind == "aoti":
        shutil.copyfile(built.artifact, directory / "model.pt2")
    elif kind == "onnx":
        source = Path(built.artifact).parent  # the exporter's directory: model.onnx and its external data
        for name in os.listdir(source):
            shutil.copyfile(source / name, directory / name)
        from autotune.worker.variants.runtimes import onnx_session_options

        opts = onnx_session_options(spec, threads)
        runtime.update(execution_mode=opts.execution_mode.name, intra_op_num_threads=opts.intra_op_num_threads,
                       inter_op_num_threads=opts.inter_op_num_threads, graph_optimization_level="ORT_ENABLE_ALL")
    elif kind == "openvino":
        import openvino as ov

        from autotune.worker.variants.runtimes import openvino_config

        ov.save_model(built.artifact, str(directory / "model.xml"), compress_to_fp16=False)
        runtime["config"] = openvino_config(spec, threads)
        first = built.artifact.inputs[0].get_partial_shape() if built.artifact.inputs else None
        bound = None
        if first is not None and first.rank.is_static and first.rank.get_length() > 0:
            dim0 = first[0]
            bound = int(dim0.get_length()) if dim0.is_static else int(dim0.get_max_length())
        runtime["request_batch"] = bound if bound is not None and bound > 0 else None
    elif spec.compiler == "compile":
        runtime["compile_dynamic"] = compile_dynamic(spec, dynamic_dims)
    if plan is not None:
        runtime["buckets"] = {**plan.describe(), "inputs": [
            {"name": n, "dims": list(d), "pad_value": v}
            for n, d, v in zip(plan.layout.names, plan.dynamic_dims, plan.pad_values, strict=True) if d]}
    return {"kind": kind, "format": format_of(kind, spec.precision, spec.compiler),
            "files": directory_files(directory),
            "save_seconds": time.perf_counter() - t0, "threads": threads, "runtime": runtime}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _profile(built: Any, prepared: tuple[Any, ...], *, device_type: str, backend: Any,
             iterations: int) -> dict[str, Any]:
    """The table of one built variant: the runtime's own profiler for runtimes, else torch.profiler."""
    from autotune.worker import profiling

    spec = built.spec
    if spec.compiler == "onnx" and built.artifact is not None:
        from autotune.worker.variants.runtimes import onnx_session_options

        arrays = [a.cpu().contiguous().numpy() for a in prepared]
        return profiling.onnx_table(built.artifact, onnx_session_options(spec, spec.threads or _threads()), arrays,
                                    providers=["CPUExecutionProvider"], iterations=iterations)
    if spec.compiler == "openvino" and built.artifact is not None:
        from autotune.worker.variants.runtimes import openvino_config

        arrays = [a.contiguous().numpy() for a in prepared]
        return profiling.openvino_table(built.artifact, openvino_config(spec, spec.threads or _threads()), arrays,
                                        iterations=iterations)
    return profiling.torch_table(lambda: built.fn(*prepared), device_type=device_type,
                                 synchronize=backend.synchronize, iterations=iterations)


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def describe_interface(traffic: Any, model: Any) -> dict[str, Any]:
    """How the artifact is called, for ``load.py``: the batch's form, each input (name, keyword or positional,
    dtype, the first batch's shape, the integer range seen or drawn from, the dims left dynamic), each
    output (its name in the exported graph, its pytree path, dtype and shape on the build example), the batch
    sizes and the sizes of each varying dim seen in the data, and the distinct batch shapes.

    ``traffic`` is the :class:`autotune.worker.traffic.Traffic` the variant was built from and ``model`` the eager
    model as the builders saw it (keyword inputs adapted): one eager call on the example gives the outputs.
    """
    import torch
    import torch.utils._pytree as pytree

    from autotune.worker.traffic import output_paths

    first = traffic.batches[0]
    dims = traffic.build_dims()
    inputs = []
    for j, (name, keyword, x) in enumerate(zip(traffic.layout.names, traffic.layout.keyword, first, strict=True)):
        integer = not x.is_floating_point() and x.dtype != torch.bool
        lo_hi = None
        if integer:  # the values seen over the whole traffic (random [[inputs]]: the range they were drawn from)
            lo_hi = [min(int(b[j].min()) for b in traffic.batches if b[j].numel()),
                     max(int(b[j].max()) for b in traffic.batches if b[j].numel()) + 1]
        inputs.append({"name": name, "keyword": bool(keyword), "dtype": str(x.dtype).replace("torch.", ""),
                       "shape": [int(d) for d in x.shape], "range": lo_hi,
                       "dynamic_dims": list(dims[j]) if dims is not None else []})
    with torch.inference_mode():
        out = model(*traffic.example)
    leaves = pytree.tree_leaves(out)
    outputs = [{"name": n, "path": p, "dtype": str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor)
                else type(t).__name__, "shape": [int(d) for d in t.shape] if isinstance(t, torch.Tensor) else None}
               for (n, p), t in zip(output_paths(out), leaves, strict=True)]
    sizes = {f"{name}[{d}]": sorted({int(b[j].shape[d]) for b in traffic.batches})
             for j, (name, dyn) in enumerate(zip(traffic.layout.names, traffic.dynamic_dims, strict=True)) for d in dyn}
    return {"source": traffic.source, "form": traffic.layout.form, "inputs": inputs, "outputs": outputs,
            "batch_size": max(traffic.rows), "batch_rows": sorted(set(traffic.rows)), "dynamic_sizes": sizes,
            "shapes": sorted(set(traffic.shape_keys()))}


#: The traffic saved beside the artifact (``traffic.npz``) for the serving search and ``serve.py``'s users: whole
#: batches, in order, until this many bytes (a large image model's 16 batches would be hundreds of MiB).
TRAFFIC_FILE = "traffic.npz"
TRAFFIC_MAX_BYTES = 32 * 2**20


def save_traffic(traffic: Any, directory: Path, *, max_bytes: int = TRAFFIC_MAX_BYTES) -> None:
    """``traffic.npz``: the batches the artifact was measured on, as numpy arrays named ``b{i}.{input}``.

    The serving search (:mod:`autotune.serving.search`) cuts them into requests, so the served load is the
    user's own traffic (their shapes, their sequence lengths), not random tensors; a parent process without
    torch reads it with numpy alone. At least the first batch is kept; later ones while under ``max_bytes``.
    """
    import numpy as np

    arrays: dict[str, Any] = {}
    total = 0
    for i, batch in enumerate(traffic.batches):
        size = sum(int(t.numel() * t.element_size()) for t in batch)
        if i and total + size > max_bytes:
            break
        total += size
        for name, t in zip(traffic.layout.names, batch, strict=True):
            arrays[f"b{i}.{name}"] = t.detach().cpu().numpy()
    np.savez(directory / TRAFFIC_FILE, **arrays)


def deploy(model: Any, inputs: Any, *, spec: Any, device: Any, backend: Any, directory: str | None,
           profile: bool, iterations: int, traffic: Any = None, plan: Any = None,
           calibration: Any = None) -> dict[str, Any]:
    """Build ``spec`` once (``keep_artifact``), save it into ``directory`` (None: no artifact), profile it and
    eager (with the same threads) at the same batch; each part fails on its own, with its reason.

    ``inputs`` are the example batch (fp32, on the device) the measurement built the variant on (padded to
    its bucket for a ``+buckets`` variant); ``traffic`` (:class:`autotune.worker.traffic.Traffic`) gives the
    dynamic dims and input names it was built with and the interface ``load.py`` offers
    (:func:`describe_interface`); ``plan`` the bucket padding; ``calibration`` the batches an int8 variant is
    calibrated on (as measured). Without ``traffic`` every shape is static.
    Returns ``{"artifact": {...} | None, "profile": {...} | None}``.
    """
    import torch

    from autotune.worker.variants import VariantSpec, build_variant, reset_compiler_state

    out: dict[str, Any] = {"artifact": None, "profile": None}
    tables: list[dict[str, Any]] = []
    notes: list[str] = []
    dynamic_dims = traffic.build_dims() if traffic is not None else None
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            built = build_variant(spec, model, inputs, device=str(device), keep_artifact=directory is not None,
                                  dynamic_dims=dynamic_dims,
                                  input_names=traffic.layout.names if traffic is not None else None,
                                  calibration=calibration)
            prepared = built.prepare_inputs(inputs)
            built.fn(*prepared)  # the first call: torch.compile compiles here, like the measured one
            backend.synchronize()
        build_seconds = time.perf_counter() - t0
    except Exception as exc:  # any build failure (VariantError, a runtime's own) is reported, never raised
        reason = f"building {spec.name} failed: {_one_line(exc)}"
        return {"artifact": {"status": "failed", "reason": reason} if directory is not None else None,
                "profile": {"status": "failed", "reason": reason, "tables": []} if profile else None}
    if directory is not None:
        try:
            saved = save_artifact(built, Path(directory), plan=plan, dynamic_dims=dynamic_dims)
            if traffic is not None:
                saved["interface"] = describe_interface(traffic, model)
                save_traffic(traffic, Path(directory))
            out["artifact"] = {"status": "ok", "reason": "", "build_seconds": build_seconds, **saved,
                               "notes": list(built.notes)}
        except Exception as exc:
            out["artifact"] = {"status": "failed", "reason": f"saving {spec.name} failed: {_one_line(exc)}",
                               "build_seconds": build_seconds}
    if not profile:
        return out
    device_type = torch.device(device).type

    def table(role: str, current: Any, current_inputs: tuple[Any, ...]) -> None:
        try:
            with torch.inference_mode():
                got = _profile(current, current_inputs, device_type=device_type, backend=backend,
                               iterations=iterations)
            tables.append({"role": role, "variant": current.spec.name, **got})
        except Exception as exc:  # a table that cannot be made is a note, not a failure
            notes.append(f"{role} ({current.spec.name}): profiling failed: {_one_line(exc)}")

    table("recommendation", built, prepared)
    del built, prepared  # the recommendation's memory back before eager is built
    if spec.compiler in ("compile", "export"):
        reset_compiler_state()
    eager_spec = VariantSpec(compiler="eager", threads=spec.threads)
    try:
        with torch.inference_mode():
            eager = build_variant(eager_spec, model, inputs, device=str(device))
            eager_inputs = eager.prepare_inputs(inputs)
        table("eager", eager, eager_inputs)
    except Exception as exc:
        notes.append(f"eager: building it failed: {_one_line(exc)}")
    out["profile"] = {"status": "ok" if tables else "failed", "reason": "; ".join(notes),
                      "batch_size": int(inputs[0].shape[0]) if inputs and inputs[0].dim() else None,
                      "tables": tables}
    return out


__all__ = ["FORMATS", "KINDS", "TRAFFIC_FILE", "deploy", "describe_interface", "format_of", "kind_of", "save_artifact",
           "save_traffic"]
