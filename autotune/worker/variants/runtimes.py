"""Deployment runtimes as variants: ONNX Runtime (``onnx``) and OpenVINO (``openvino``).

People who deploy a PyTorch model on a CPU also try these two; a recommendation that never considers
them is only the fastest way *inside* PyTorch. Here they are ordinary variants: :func:`build_runtime` is
called by :func:`autotune.worker.variants.build_variant`, and the result goes through the same correctness
gate, warmup detection, measurement, search and showdown as ``eager`` or ``compile``.

What a built runtime variant is, and why:

* **The boundary is torch tensors.** ``fn`` takes the same torch tensors as every other variant and
  returns torch tensors in the eager model's output structure (the pytree of one eager call at build
  time, filled with the runtime's flat outputs in order). The conversion is part of every timed call,
  as in a service that receives torch tensors. On the CPU it is nearly free: ``Tensor.numpy()`` and
  ``torch.from_numpy`` share memory, and both runtimes read a C-contiguous numpy array in place
  (ONNX Runtime wraps it; OpenVINO with ``share_inputs=True``). That is also why the CPU path feeds
  numpy to ``InferenceSession.run`` instead of using IOBinding: IOBinding exists to avoid *device*
  copies; on the CPU there is no copy left to avoid. On CUDA, ONNX Runtime gets IOBinding: the input
  tensors' device pointers are bound directly and outputs are written into preallocated torch tensors
  (static buffers, overwritten by the next call, as with CUDA graphs), and the session runs on torch's
  current stream (``user_compute_stream``), so no host round trip and no cross-stream sync is needed.
* **Dynamic where the traffic varies, static elsewhere.** ``dynamic_dims`` (per input, from
  :meth:`autotune.worker.traffic.Traffic.build_dims`) holds the batch dim 0 (a deployment sees partial batches:
  the saved model must take every batch size up to the recommended one) and, with a ``[data]`` factory,
  the dims whose size varies between its batches (a sequence length). Every other dim is exported at the
  example's size, so shape propagation and constant folding still see it. ONNX: the dynamo exporter gets
  ``dynamic_shapes`` with ``torch.export.Dim.DYNAMIC`` on those dims, the TorchScript fallback
  ``dynamic_axes``; the notes list the graph's input shapes and any dim the exporter fixed anyway (the model's
  code specialised it: the gate on the traffic's other shapes then rejects the candidate). OpenVINO: the
  converted model is reshaped to a ``PartialShape`` with dim 0 bounded ``1..b`` and the other dynamic dims
  unbounded, the rest static. On full batches a dynamic batch dim costs ONNX Runtime nothing measurable and
  OpenVINO up to about 7% on a small BERT (1% on resnet18; README's artifact section), while a partial
  batch then runs its own rows instead of being padded to b (3-4x cheaper at a quarter batch).
  ``+buckets`` variants pad the dynamic dims to the recipe's buckets before the call
  (:class:`autotune.worker.traffic.BucketPlan`); the runtime model is the same dynamic one. The graph's inputs
  carry the layout's names (``input_ids``...) and its outputs their pytree paths (``logits``), so a
  deployment feeds the user's own batch by name. On CUDA, outputs whose shapes are dynamic are allocated
  by ONNX Runtime on the device each call and handed to torch without a copy (``__cuda_array_interface__``).
* **Build time is the export/conversion plus the session or compiled model** (graph optimisation
  happens there); the first inference is timed apart by the worker, as for every variant.
* **Threads are set explicitly.** ONNX Runtime's ``intra_op_num_threads`` and OpenVINO's
  ``INFERENCE_NUM_THREADS`` come from the candidate's ``threads=N``, else torch's thread count in the
  worker (one per usable core). Left at 0, each runtime sizes its own pool from the machine, and with
  torch's OpenMP pool in the same process the two oversubscribe the cores (users report torch ops tens
  of times slower). During a timed call only the runtime computes: the conversions start no torch
  kernels.
* **Precision.** Runtimes run the fp32 model. OpenVINO's ``INFERENCE_PRECISION_HINT`` is always set
  explicitly: ``f32`` for fp32 variants (on a CPU with native bf16, OpenVINO's default would silently be
  bf16), ``bf16`` / ``f16`` only for ``openvino+bf16`` / ``+fp16`` and only where the CPU has the native
  instructions *and* the plugin lists the precision (its ``OPTIMIZATION_CAPABILITIES`` lists BF16 even on
  AVX2 CPUs, where it is emulated). ONNX Runtime variants are fp32 or int8 (an fp16 ONNX graph would be a
  different model conversion). ``int8`` / ``int8-static`` quantize the exported / converted model before the
  session or compile (:mod:`autotune.worker.variants.quantize`: ORT dynamic or static QDQ, NNCF), calibrated on
  the traffic; the quantized file is what runs and what the artifact saves. A non-fp32 build names the kernels
  OpenVINO picked (the executed graph's primitive types after one inference: ``brgemm_avx512_amx_I8``...).
  ``channels_last``, ``autocast-*`` and ``cudagraphs`` are torch mechanisms and do not apply.

ONNX export, pseudo-code::

    try:    torch.onnx.export(m, x, path, dynamo=True,       # torch.export + onnxscript, opset >= 18
                              dynamic_shapes={dim: Dim.DYNAMIC per dynamic dim}, input_names, output_names)
    except: note why; torch.onnx.export(m, x, path, dynamo=False, opset 17,   # TorchScript exporter
                                        dynamic_axes={input: {dim: name}}, input_names, output_names)
    # the dynamo exporter no longer falls back by itself and the TorchScript one is deprecated,
    # so the fallback is explicit and named in the candidate's notes
    session = InferenceSession(path, ORT_ENABLE_ALL, intra_op_num_threads=threads,
                               execution_mode=SEQUENTIAL|PARALLEL, providers=[CUDA,] CPU)

OpenVINO throughput mode: a synchronous loop of one request at a time under-reports it badly (one
notebook: 145 vs 323 FPS against ``benchmark_app``), because the hint compiles several *streams* that
only help when several requests are in flight. So a call drives an ``AsyncInferQueue`` sized by the
compiled model's ``OPTIMAL_NUMBER_OF_INFER_REQUESTS`` (n)::

    k = the largest divisor of the batch b with k <= n        (k = 1: one request, said in the notes)
    compile the model for batch c = b / k                     (dynamic batch: bounded 1..c)
    call(x): split x along dim 0 into k chunks (views, no copy); start_async each on the queue;
             wait_all; concatenate each output's k chunks along dim 0 in order
             (a partial batch of r < b rows, dynamic batch only: min(k, r) near-equal chunks)

**One call = one batch of b samples through the queue, with the queue full (k requests in flight).**
The timing loop therefore stays comparable to every other variant (samples per call = b, each call
returns f(x) for its own x, so the gate checks exactly what is timed). Pipelining *across* calls
(submit this batch, return an earlier one) would also keep the queue full but return another call's
output, which no gate could check. The price: between calls the queue drains, and the output
concatenation is one copy; both are what a service that receives one batch at a time would pay.

Why one module (~650 lines): ONNX Runtime and OpenVINO share the export's interface (names, dynamic dims),
the availability rules and the call wrappers' conventions; each runtime's half is under 180 lines, and a
seventh of the length is this docstring (about 85 lines).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from autotune.errors import BatchSpecificError, VariantError
from autotune.worker.devices import cpu_native_precision
from autotune.worker.variants.build_stage import non_tensor_outputs, silenced_build
from autotune.worker.variants.quantize import (
    Calibration,
    directory_bytes,
    openvino_kernels,
    quantize_onnx,
    quantize_openvino,
)

#: The packages each runtime needs, and the command that installs them (the "unavailable" reason).
PACKAGES: dict[str, tuple[str, ...]] = {
    "onnx": ("onnxruntime", "onnx", "onnxscript"),
    "openvino": ("openvino",),
}
INSTALL: dict[str, str] = {
    "onnx": "pip install 'autotune[onnx]'",
    "openvino": "pip install 'autotune[openvino]'",
}
#: Opset for the TorchScript fallback exporter (the newest it supports well; dynamo picks its own >= 18).
TORCHSCRIPT_OPSET = 17
#: int8 (NNCF's FakeQuantize nodes run as int8 kernels) keeps f32 for what is not quantized: the CPU plugin
#: would otherwise pick bf16 for the rest on a CPU with native bf16, mixing two precision changes.
_OV_PRECISION = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
_OV_CAPABILITY = {"bf16": "BF16", "fp16": "FP16"}



class RuntimeSpec(Protocol):
    """What a runtime reads of a :class:`autotune.worker.variants.VariantSpec` (a protocol, so this module does not
    import :mod:`autotune.worker.variants`, which imports it to build these compilers)."""

    @property
    def name(self) -> str: ...
    @property
    def compiler(self) -> str: ...
    @property
    def compile_mode(self) -> str | None: ...
    @property
    def precision(self) -> str: ...
    @property
    def memory_format(self) -> str: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def cuda_graphs(self) -> bool: ...



# --------------------------------------------------------------------------------------------------
# Availability
# --------------------------------------------------------------------------------------------------


def missing_packages(compiler: str) -> list[str]:
    """The runtime's packages that cannot be found (cheap: ``find_spec``, nothing is imported).

    A module set to ``None`` in ``sys.modules`` (how an import is blocked) counts as missing.
    """
    missing = []
    for name in PACKAGES[compiler]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _device_type(device: str) -> str:
    from autotune.core.device_names import device_type

    return device_type(device)


def static_unavailable_reason(spec: RuntimeSpec) -> str | None:
    """Why the spec's modifiers cannot apply to its runtime at all, on any machine."""
    if spec.memory_format != "contiguous":
        return f"{spec.compiler} picks its own memory layouts; channels_last is a torch knob"
    if spec.cuda_graphs:
        return f"cudagraphs is a torch capture; {spec.compiler} does not run through it"
    if spec.precision.startswith("autocast"):
        return (f"autocast is a torch mechanism; {spec.compiler} runs the exported fp32 graph"
                + (" (use openvino+bf16 / +fp16 for its inference precision)" if spec.compiler == "openvino"
                   else ""))
    if spec.compiler == "onnx" and spec.precision not in ("fp32", "int8", "int8-static"):
        return ("onnx variants run the fp32 graph or its int8 quantization (an fp16 ONNX model would be another "
                "conversion)")
    return None


def runtime_unavailable_reason(spec: RuntimeSpec, *, device: str, input_ndims: Sequence[int] = (),
                               input_is_float: Sequence[bool] = ()) -> str | None:
    """``None`` when ``spec`` (an ``onnx`` / ``openvino`` variant) can run on ``device``, else why not.

    Never raises for a missing package: the reason then names the install command.
    """
    del input_ndims, input_is_float  # the runtimes take any input ranks and dtypes torch exports
    missing = missing_packages(spec.compiler)
    if missing:
        return f"{', '.join(missing)} not installed; install with: {INSTALL[spec.compiler]}"
    reason = static_unavailable_reason(spec)
    if reason is not None:
        return reason
    kind = _device_type(device)
    if spec.threads is not None and kind != "cpu":
        return f"threads=N is a CPU knob; not used on {kind}"
    if spec.precision in ("int8", "int8-static"):
        from autotune.worker.variants.quantize import runtime_int8_unavailable_reason

        if kind != "cpu":
            return f"{spec.precision} variants are built for the CPU here, not for {kind}"
        return runtime_int8_unavailable_reason(spec.compiler, spec.precision)
    if spec.compiler == "onnx":
        if kind == "cpu":
            return None
        if kind == "cuda":
            import onnxruntime as ort

            providers = ort.get_available_providers()
            if "CUDAExecutionProvider" not in providers:
                return ("this onnxruntime has no CUDAExecutionProvider (it has "
                        f"{', '.join(providers)}); install onnxruntime-gpu for onnx on CUDA")
            return None
        return f"onnx runs on the CPU and CUDA here, not on {kind}"
    # openvino
    if kind != "cpu":
        return f"openvino is compiled for its CPU device here, not for {kind}"
    if spec.precision != "fp32":
        reduced = spec.precision
        if cpu_native_precision(reduced) is False:
            need = "AVX512_BF16 or AMX_BF16" if reduced == "bf16" else "AVX512_FP16 or AMX_FP16"
            return f"this CPU has no native {reduced} arithmetic ({need}); OpenVINO would emulate it"
        import openvino as ov

        caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        if _OV_CAPABILITY[reduced] not in caps:
            return f"OpenVINO's CPU plugin does not list {_OV_CAPABILITY[reduced]} ({', '.join(caps)})"
    return None


# --------------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------------


def build_runtime(spec: RuntimeSpec, model: Any, example: tuple[Any, ...], *, device: str,
                  notes: list[str], keep_artifact: bool = False,
                  dynamic_dims: Sequence[Sequence[int]] | None = None,
                  input_names: Sequence[str] | None = None,
                  calibration: Calibration | None = None,
                  ) -> tuple[Callable[..., Any], tuple[Any, ...], Any, int | None]:
    """Export ``model`` (an fp32 eval copy on ``device``) for ``example``'s shapes, dynamic in ``dynamic_dims``
    (per input; None: every dim static), and load it in the runtime; return the inner callable (torch tensors
    in, the eager output structure out), what must stay alive with it (the temporary directory holding the
    exported files), and with ``keep_artifact`` what a deployment saves (the ``.onnx`` path; the ``ov.Model``
    as compiled, which is otherwise dropped after compiling: it holds a copy of the weights), else None.

    The graph's inputs are named ``input_names`` (the traffic layout's names; default ``input0``...) and its
    outputs after their pytree paths (:func:`autotune.worker.traffic.output_paths`: ``logits``, ``output_0``...).

    ``int8`` / ``int8-static`` quantize the exported model (:mod:`autotune.worker.variants.quantize`), calibrated
    on ``calibration`` where the method needs it; the session, and the artifact, are the quantized model. The
    last value returned is the model's size on disk in bytes (the ONNX file and its data; the OpenVINO IR as
    ``save_model`` writes it, only for int8 builds and artifacts), or None.

    Raises :class:`VariantError` with a one-line summary when a stage fails.
    """
    import torch
    import torch.utils._pytree as pytree

    from autotune.worker.traffic import output_paths

    reason = static_unavailable_reason(spec)
    if reason is not None:
        raise VariantError(f"{spec.name}: {reason}")
    missing = missing_packages(spec.compiler)
    if missing:
        raise VariantError(f"{spec.name}: {', '.join(missing)} not installed; install with: "
                           f"{INSTALL[spec.compiler]}")
    threads = spec.threads or torch.get_num_threads()
    with torch.no_grad():
        reference = silenced_build("eager forward for the output structure", notes,
                                    lambda: model(*example))
    flat_ref, treespec = pytree.tree_flatten(reference)
    odd = non_tensor_outputs(reference)
    if odd is not None:
        raise VariantError(f"{spec.name}: the model returns outputs that are not tensors, which an exported graph "
                           f"cannot reproduce: {odd}")
    graph = _GraphNames(inputs=tuple(input_names) if input_names else tuple(f"input{i}" for i in range(len(example))),
                        outputs=tuple(n for n, _ in output_paths(reference)),
                        output_ranks=tuple(t.dim() for t in flat_ref),
                        dynamic=tuple(tuple(d) for d in dynamic_dims) if dynamic_dims is not None else None)
    if len(graph.inputs) != len(example) or (graph.dynamic is not None and len(graph.dynamic) != len(example)):
        raise VariantError(f"{spec.name}: {len(example)} inputs, but {len(graph.inputs)} names and "
                           f"{len(graph.dynamic or example)} dynamic-dim entries")
    model_bytes: int | None
    if spec.compiler == "onnx":
        inner, kept, path = _build_onnx(spec, model, example, device=device, threads=threads, notes=notes,
                                        graph=graph, calibration=calibration)
        artifact = path if keep_artifact else None
        model_bytes = directory_bytes(os.path.dirname(path))
    else:
        inner, kept = _build_openvino(spec, model, example, threads=threads, notes=notes, graph=graph,
                                      calibration=calibration)
        artifact = kept[-1] if keep_artifact else None
        model_bytes = _openvino_bytes(kept[-1]) if keep_artifact or spec.precision == "int8" else None
        kept = kept[:-1]
    _check_partial_batch(spec, inner, example, graph, notes)
    n_out = len(flat_ref)

    def call(*args: Any) -> Any:
        flat = inner(*args)
        if len(flat) != n_out:
            raise VariantError(f"{spec.name}: the runtime returned {len(flat)} outputs, eager {n_out}")
        return pytree.tree_unflatten(flat, treespec)

    return call, kept, artifact, model_bytes


def _check_partial_batch(spec: RuntimeSpec, inner: Callable[..., Any], example: tuple[Any, ...], graph: _GraphNames,
                         notes: list[str]) -> None:
    """A graph declared dynamic in the batch must take a smaller batch than it was built at.

    Why: the artifact says it takes batches 1 to b, and a traffic's last batch and the server's batcher send
    fewer rows. An export can specialise the batch anyway: control flow over the batch is unrolled at the
    example's size (torchvision's detectors loop over the images; the ONNX export of fasterrcnn at batch 2 has a
    ``Split`` into two images, and a batch of one fails in it). Gated at the build batch alone, such a variant
    passed, was recommended, and its artifact failed on the first partial batch (the serving stage's calibration
    at max batch 1). A failing variant is reported, never recommended; here it fails at build, with the reason.
    """
    if not graph.dynamic or not all(0 in d for d in graph.dynamic):
        return
    rows = {int(x.shape[0]) for x in example if x.dim() > 0}
    if len(rows) != 1 or min(rows) <= 1:
        return
    b = min(rows)
    one = tuple(x[:1] for x in example)
    try:
        silenced_build("a batch of 1", notes, lambda: inner(*one))
    except VariantError as exc:
        raise BatchSpecificError(f"{spec.name}: declared dynamic in the batch (1 to {b}), but {exc}: the export "
                           f"specialised the graph to batch {b} (control flow over the batch, as a detector's "
                           "per-image loop, is unrolled), so it cannot take a partial batch") from exc


def _openvino_bytes(converted: Any) -> int | None:
    """The IR's size as ``save_model`` writes it (``compress_to_fp16=False``, as the artifact is saved)."""
    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="autotune-ov-size-") as tmp:
        try:
            ov.save_model(converted, os.path.join(tmp, "model.xml"), compress_to_fp16=False)
        except Exception:
            return None
        return directory_bytes(tmp)


@dataclass(frozen=True)
class _GraphNames:
    """The exported graph's interface: input and output names, output ranks, the dynamic dims per input."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_ranks: tuple[int, ...]
    dynamic: tuple[tuple[int, ...], ...] | None

    def dynamic_text(self) -> str:
        if not self.dynamic or not any(self.dynamic):
            return "none"
        return ", ".join(f"{n}{list(d)}" for n, d in zip(self.inputs, self.dynamic, strict=True) if d)


# ---- ONNX Runtime ---------------------------------------------------------------------------------


def export_onnx(model: Any, example: tuple[Any, ...], path: str, notes: list[str], *,
                graph: _GraphNames | None = None) -> str:
    """Export to ``path``; the dynamo exporter first, the TorchScript exporter as the explicit fallback.

    Dynamic dims (``graph.dynamic``): the dynamo exporter gets ``dynamic_shapes`` with ``Dim.DYNAMIC`` on
    them (torch.export derives the ranges and the equalities between inputs); the TorchScript exporter gets
    ``dynamic_axes`` naming them (``batch`` for dim 0, ``<input>_<dim>`` otherwise) and every output dim
    (the exporter cannot tell which follow the inputs; declaring them symbolic is always valid).

    Returns which exporter produced the file (``"dynamo"`` or ``"torchscript"``); the notes say why a
    fallback happened. Large weights may land next to ``path`` as external data.
    """
    import torch

    from autotune.worker.traffic import dynamic_shapes_for

    names: dict[str, Any] = {}
    dynamic_shapes = None
    dynamic_axes = None
    if graph is not None:
        names = {"input_names": list(graph.inputs), "output_names": list(graph.outputs)}
        if graph.dynamic is not None and any(graph.dynamic):
            dynamic_shapes = dynamic_shapes_for(model, example, graph.dynamic)
            dynamic_axes = {n: {d: "batch" if d == 0 else f"{n}_{d}" for d in dims}
                            for n, dims in zip(graph.inputs, graph.dynamic, strict=True) if dims}
            dynamic_axes.update({n: {d: f"{n}_{d}" for d in range(rank)}
                                 for n, rank in zip(graph.outputs, graph.output_ranks, strict=True) if rank})
    shapes = "fixed shapes" if dynamic_shapes is None else f"dynamic dims {graph.dynamic_text() if graph else ''}"
    try:
        silenced_build("torch.onnx.export(dynamo=True)", notes,
                        lambda: torch.onnx.export(model, example, path, dynamo=True, verbose=False,
                                                  dynamic_shapes=dynamic_shapes, **names))
        notes.append(f"onnx: exported with the dynamo exporter (torch.export), {shapes}"
                     + (" (dynamic_shapes, Dim.DYNAMIC)" if dynamic_shapes is not None else ""))
        return "dynamo"
    except VariantError as exc:
        first = str(exc)
    for name in os.listdir(os.path.dirname(path)):
        os.remove(os.path.join(os.path.dirname(path), name))
    silenced_build(
        "torch.onnx.export(dynamo=False)", notes,
        lambda: torch.onnx.export(model, example, path, dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                                  dynamic_axes=dynamic_axes, **names),
    )
    notes.append(f"onnx: the dynamo exporter failed ({first[:200]}); exported with the deprecated "
                 f"TorchScript exporter instead (opset {TORCHSCRIPT_OPSET}), {shapes}"
                 + (" (dynamic_axes)" if dynamic_axes is not None else ""))
    return "torchscript"


_ORT_TO_TORCH = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def onnx_session_options(spec: RuntimeSpec, threads: int) -> Any:
    """The ``SessionOptions`` an onnx variant runs with (also used to profile its artifact)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3  # errors only: its warnings go to stderr, not into notes
    if spec.compile_mode == "parallel":
        opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        opts.inter_op_num_threads = threads
    else:
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.inter_op_num_threads = 1
    return opts


def _build_onnx(spec: RuntimeSpec, model: Any, example: tuple[Any, ...], *, device: str, threads: int,
                notes: list[str], graph: _GraphNames, calibration: Calibration | None = None
                ) -> tuple[Callable[..., list[Any]], tuple[Any, ...], str]:
    """The run function, what it keeps alive, and the path of the model file the session runs (in a directory
    of its own: an int8 build's quantized file, alone, so the artifact is that model and nothing else)."""
    import onnxruntime as ort
    import torch

    tmp = tempfile.TemporaryDirectory(prefix="autotune-onnx-")
    try:
        path = os.path.join(tmp.name, "model.onnx")
        export_onnx(model, example, path, notes, graph=graph)
        if spec.precision in ("int8", "int8-static"):
            fp32_dir = os.path.join(tmp.name, "fp32")
            os.mkdir(fp32_dir)
            for name in os.listdir(tmp.name):
                if name != "fp32":
                    os.replace(os.path.join(tmp.name, name), os.path.join(fp32_dir, name))
            quantize_onnx(spec.precision, os.path.join(fp32_dir, "model.onnx"), path, graph.inputs, calibration,
                          notes)
            import shutil

            shutil.rmtree(fp32_dir)
        opts = onnx_session_options(spec, threads)
        dev = torch.device(device)
        providers: list[Any] = ["CPUExecutionProvider"]
        if dev.type == "cuda":
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            stream = torch.cuda.current_stream(index).cuda_stream
            providers.insert(0, ("CUDAExecutionProvider",
                                 {"device_id": index, "user_compute_stream": str(stream)}))
        session = silenced_build("onnxruntime.InferenceSession", notes,
                                  lambda: ort.InferenceSession(path, opts, providers=providers))
    except BaseException:
        tmp.cleanup()
        raise
    used = session.get_providers()
    notes.append(f"onnx: ORT_ENABLE_ALL, {opts.execution_mode.name}, intra_op_num_threads={threads}, "
                 f"providers {', '.join(used)}")
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(example):
        tmp.cleanup()
        raise VariantError(f"{spec.name}: the exported graph has {len(names)} inputs, the model takes "
                           f"{len(example)} (an unused input was dropped?)")
    if graph.dynamic is not None:
        notes.append(_onnx_shape_note(session, graph))
    if dev.type == "cuda":
        if used[0] != "CUDAExecutionProvider":
            tmp.cleanup()
            raise VariantError(f"{spec.name}: ONNX Runtime did not take the CUDA provider ({used})")
        return _onnx_cuda_call(session, names, dev, notes), (tmp, session), path

    def run(*args: Any) -> list[Any]:
        feeds = {n: a.contiguous().numpy() for n, a in zip(names, args, strict=True)}
        return [torch.from_numpy(o) for o in session.run(None, feeds)]

    return run, (tmp, session), path


def _onnx_shape_note(session: Any, graph: _GraphNames) -> str:
    """What the exported graph left dynamic: its input shapes, and the asked-for dims the exporter fixed
    (the model's code specialised them; the gate on the traffic's other shapes then rejects the variant)."""
    shapes = []
    fixed = []
    for meta, dims in zip(session.get_inputs(), graph.dynamic or (), strict=False):
        shapes.append(f"{meta.name} [{', '.join(str(d) for d in meta.shape)}]")
        fixed += [f"{meta.name}[{d}]" for d in dims if d < len(meta.shape) and isinstance(meta.shape[d], int)]
    text = "onnx: graph input shapes " + "; ".join(shapes) + " (a name is a dynamic dim)"
    return text + (f"; fixed by the exporter although dynamic in the traffic: {', '.join(fixed)}" if fixed else "")


class _CudaArray:
    """A device buffer ONNX Runtime allocated, seen by torch through ``__cuda_array_interface__`` (no copy).

    The tensor torch makes keeps this object, and so the ``OrtValue`` owning the memory, alive.
    """

    def __init__(self, value: Any, typestr: str) -> None:
        self._value = value
        self.__cuda_array_interface__ = {"shape": tuple(value.shape()), "typestr": typestr,
                                         "data": (value.data_ptr(), False), "version": 3, "stream": None}


def _onnx_cuda_call(session: Any, names: list[str], dev: Any, notes: list[str]) -> Callable[..., list[Any]]:
    """IOBinding on CUDA: inputs bound by device pointer; outputs into preallocated torch tensors when their
    shapes are static, else allocated by ONNX Runtime on the device and handed to torch without a copy."""
    import numpy as np
    import torch

    index = dev.index if dev.index is not None else torch.cuda.current_device()
    binding = session.io_binding()
    metas = session.get_outputs()
    for meta in metas:
        if meta.type not in _ORT_TO_TORCH:
            raise VariantError(f"onnx: output {meta.name} has an unknown dtype ({meta.type})")
    np_dtypes = {getattr(torch, v): np.dtype(v) for v in set(_ORT_TO_TORCH.values())}

    def bind_inputs(args: Sequence[Any]) -> None:
        for name, a in zip(names, args, strict=True):
            a = a.contiguous()
            binding.bind_input(name, "cuda", index, np_dtypes[a.dtype], tuple(a.shape), a.data_ptr())

    if all(isinstance(d, int) for meta in metas for d in meta.shape):
        outputs = []
        for meta in metas:
            dtype = getattr(torch, _ORT_TO_TORCH[meta.type])
            out = torch.empty(tuple(meta.shape), dtype=dtype, device=dev)
            binding.bind_output(meta.name, "cuda", index, np.dtype(_ORT_TO_TORCH[meta.type]), tuple(meta.shape),
                                out.data_ptr())
            outputs.append(out)

        def run(*args: Any) -> list[Any]:
            bind_inputs(args)
            session.run_with_iobinding(binding)
            return list(outputs)

        return run

    notes.append("onnx: dynamic output shapes, so ONNX Runtime allocates each call's outputs on the device")
    typestrs = [np.dtype(_ORT_TO_TORCH[meta.type]).str for meta in metas]
    for meta in metas:
        binding.bind_output(meta.name, "cuda", index)

    def run_dynamic(*args: Any) -> list[Any]:
        bind_inputs(args)
        session.run_with_iobinding(binding)
        return [torch.as_tensor(_CudaArray(v, t), device=dev) for v, t in zip(binding.get_outputs(), typestrs,
                                                                               strict=True)]

    return run_dynamic


# ---- OpenVINO -------------------------------------------------------------------------------------


def _largest_divisor_at_most(b: int, n: int) -> int:
    return max(k for k in range(1, max(1, min(b, n)) + 1) if b % k == 0)


def openvino_config(spec: RuntimeSpec, threads: int) -> dict[str, Any]:
    """The ``compile_model`` configuration an openvino variant runs with (also written into its loader)."""
    hint = "THROUGHPUT" if spec.compile_mode == "throughput" else "LATENCY"
    return {"PERFORMANCE_HINT": hint, "INFERENCE_NUM_THREADS": threads,
            "INFERENCE_PRECISION_HINT": _OV_PRECISION[spec.precision]}


def _openvino_shapes(ov: Any, example: tuple[Any, ...], graph: _GraphNames, batch: int) -> dict[int, Any]:
    """Per input, the ``PartialShape`` compiled: the example's sizes, except dim 0 (``batch``: static, or
    bounded ``1..batch`` when the batch dim is dynamic) and the other dynamic dims (unbounded)."""
    shapes = {}
    for i, x in enumerate(example):
        dyn = set(graph.dynamic[i]) if graph.dynamic is not None else set()
        dims = []
        for d, size in enumerate(x.shape):
            if d == 0:
                dims.append(ov.Dimension(1, batch) if 0 in dyn else ov.Dimension(batch))
            else:
                dims.append(ov.Dimension() if d in dyn else ov.Dimension(int(size)))
        shapes[i] = ov.PartialShape(dims)
    return shapes


def _chunks(rows: int, k: int) -> list[tuple[int, int]]:
    """``rows`` split into ``min(k, rows)`` contiguous near-equal ``(start, stop)`` ranges, in order."""
    m = max(1, min(k, rows))
    q, extra = divmod(rows, m)
    bounds = []
    start = 0
    for i in range(m):
        stop = start + q + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _build_openvino(spec: RuntimeSpec, model: Any, example: tuple[Any, ...], *, threads: int,
                    notes: list[str], graph: _GraphNames, calibration: Calibration | None = None
                    ) -> tuple[Callable[..., list[Any]], tuple[Any, ...]]:
    """The run function and what it keeps alive; the last kept item is the converted ``ov.Model`` (reshaped
    to the compiled shapes), which :func:`build_runtime` drops unless an artifact is wanted."""
    import openvino as ov
    import torch

    config = openvino_config(spec, threads)
    hint = config["PERFORMANCE_HINT"]
    core = ov.Core()
    converted = silenced_build("openvino.convert_model", notes,
                                lambda: ov.convert_model(model, example_input=example))
    for port, name in zip(converted.inputs, graph.inputs, strict=False):
        port.get_tensor().set_names({name})
    for port, name in zip(converted.outputs, graph.outputs, strict=False):
        port.get_tensor().set_names({name})
    if spec.precision == "int8":
        converted = quantize_openvino(converted, calibration, notes)
    dynamic_batch = graph.dynamic is not None and all(0 in d for d in graph.dynamic)

    def compile_for(batch: int) -> Any:
        converted.reshape(_openvino_shapes(ov, example, graph, batch))
        return silenced_build("openvino compile_model", notes,
                               lambda: core.compile_model(converted, "CPU", config))

    b = int(example[0].shape[0]) if example and example[0].dim() > 0 else 1
    compiled = compile_for(b)
    if spec.precision != "fp32":  # kernels are picked at the first inference (dynamic shapes): run one
        silenced_build("openvino kernels probe", notes, lambda: compiled.create_infer_request().infer(
            [x.contiguous().numpy() for x in example]))
        kernels = openvino_kernels(compiled)
        if kernels:
            notes.append(kernels)
    n_requests = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    streams = compiled.get_property("NUM_STREAMS")
    shapes = ("fixed shapes" if graph.dynamic is None else
              f"dynamic dims {graph.dynamic_text()} (PartialShape: dim 0 bounded 1..{b}, others unbounded)")
    notes.append(f"openvino: PERFORMANCE_HINT={hint}, NUM_STREAMS={streams}, INFERENCE_NUM_THREADS={threads}, "
                 f"INFERENCE_PRECISION_HINT={config['INFERENCE_PRECISION_HINT']}, {shapes}")
    k = _largest_divisor_at_most(b, n_requests) if hint == "THROUGHPUT" else 1
    batched = all(x.dim() > 0 and int(x.shape[0]) == b for x in example)
    if k > 1 and batched:
        chunk = b // k
        compiled = compile_for(chunk)

        def follows_batch(shape: Any) -> bool:
            if not dynamic_batch:
                return bool(shape.is_static and shape[0].get_length() == chunk)
            return bool(shape.rank.is_static and shape.rank.get_length() > 0 and shape[0].is_dynamic)

        if all(follows_batch(o.get_partial_shape()) for o in compiled.outputs):
            notes.append(f"openvino: one call = the batch of {b} as {k} requests of {chunk} in an "
                         f"AsyncInferQueue of {k} (OPTIMAL_NUMBER_OF_INFER_REQUESTS={n_requests})"
                         + ("; a partial batch of r rows as min(k, r) near-equal requests" if dynamic_batch
                            else ""))
            return _openvino_queue_call(compiled, k, chunk), (compiled, converted)
        compiled = compile_for(b)
        notes.append("openvino: outputs are not batched along dim 0, so a call is one request")
    elif hint == "THROUGHPUT":
        why = (f"OPTIMAL_NUMBER_OF_INFER_REQUESTS={n_requests}" if n_requests < 2
               else f"batch {b} has no divisor in 2..{n_requests} (OPTIMAL_NUMBER_OF_INFER_REQUESTS)")
        notes.append(f"openvino: {why}, so one request per call: throughput mode cannot overlap requests")
    request = compiled.create_infer_request()
    n_out = len(compiled.outputs)
    notes.append("openvino: outputs are the infer request's buffers, overwritten by the next call")

    def run(*args: Any) -> list[Any]:
        request.infer([a.contiguous().numpy() for a in args], share_inputs=True)
        return [torch.from_numpy(request.get_output_tensor(i).data) for i in range(n_out)]

    return run, (compiled, request, converted)


def _openvino_queue_call(compiled: Any, k: int, chunk: int) -> Callable[..., list[Any]]:
    """One call: the batch as up to k chunks in flight at once on an ``AsyncInferQueue`` of k requests.

    A full batch (k * chunk rows) is k chunks of ``chunk``; a partial one (a dynamic batch dim) of r rows is
    ``min(k, r)`` near-equal chunks (:func:`_chunks`), each within the compiled ``1..chunk``.
    """
    import openvino as ov
    import torch

    queue = ov.AsyncInferQueue(compiled, k)
    done: list[Any] = [None] * k
    n_out = len(compiled.outputs)

    def on_done(request: Any, index: int) -> None:
        done[index] = request  # its output buffers stay valid until the request is started again

    queue.set_callback(on_done)
    full = [(i * chunk, (i + 1) * chunk) for i in range(k)]

    def run(*args: Any) -> list[Any]:
        arrays = [a.contiguous().numpy() for a in args]
        rows = int(arrays[0].shape[0]) if arrays and arrays[0].ndim else k * chunk
        bounds = full if rows == k * chunk else _chunks(rows, k)
        for i, (lo, hi) in enumerate(bounds):
            queue.start_async([x[lo:hi] for x in arrays], userdata=i, share_inputs=True)
        queue.wait_all()
        return [torch.cat([torch.from_numpy(done[i].get_output_tensor(j).data) for i in range(len(bounds))])
                for j in range(n_out)]

    return run


__all__ = [
    "INSTALL",
    "PACKAGES",
    "TORCHSCRIPT_OPSET",
    "build_runtime",
    "export_onnx",
    "missing_packages",
    "onnx_session_options",
    "openvino_config",
    "runtime_unavailable_reason",
    "static_unavailable_reason",
]
