"""Building a variant: a :class:`VariantSpec` and a model turned into a callable (:func:`build_variant`).

Every build failure becomes a one-line :class:`~autotune.errors.VariantError` (one broken variant is
reported as ``failed`` and the run goes on); torch is imported lazily, inside the functions. The
catalogue's policies (TorchScript, shapes, threads) are in :mod:`autotune.worker.variants`.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.core.variant_names import VariantSpec
from autotune.errors import VariantError
from autotune.worker.variants.availability import _device_type, _reduced_dtype, cpu_native_precision
from autotune.worker.variants.build_stage import non_tensor_outputs, silenced_build
from autotune.worker.variants.quantize import Calibration, quantize_torch
from autotune.worker.variants.quantize import torch_model_bytes as quantize_model_bytes

if TYPE_CHECKING:
    import torch

_DEPRECATION_NOTE = (
    "TorchScript (torch.jit) is deprecated since torch 2.5 in favour of torch.compile / torch.export; "
    "its deprecation warnings were silenced"
)


def _dtype_of(precision: str) -> torch.dtype | None:
    import torch

    reduced = _reduced_dtype(precision)
    if reduced is None:
        return None
    return torch.bfloat16 if reduced == "bf16" else torch.float16


@dataclass(frozen=True, eq=False)
class BuiltVariant:
    """A variant ready to call: ``fn(*prepare_inputs(inputs))`` returns the model's output.

    ``fn`` enters ``torch.inference_mode()`` (and autocast / the thread count where the variant
    needs them) itself, so callers time exactly what a deployment would run. ``build_seconds``
    covers the deep copy, casts and script/trace/freeze/export/AOT compile; ``torch.compile``
    compiles lazily, so its cost lands in the first call, which the caller times.
    """

    spec: VariantSpec
    fn: Callable[..., Any]
    build_seconds: float
    notes: tuple[str, ...] = ()
    device: str = "cpu"
    #: Built for the example's shapes: a new batch size needs a new build (or recompiles).
    shape_specialized: bool = False
    #: What a deployment saves of this build, with ``keep_artifact=True`` (:mod:`autotune.worker.artifact` writes it):
    #: the TorchScript module; for ``frozen`` the ``torch.jit.save`` bytes of the frozen module taken before
    #: ``optimize_for_inference`` (which works in place, and whose output does not load back); the path of the
    #: AOTInductor ``.pt2`` or of the exported ``.onnx``; the OpenVINO ``ov.Model`` as compiled. None for eager
    #: and torch.compile (no file form) and without ``keep_artifact``.
    artifact: Any = field(default=None, repr=False)
    #: The model's size on disk as this variant stores it (a serialized state_dict, the ``.onnx`` file, the IR's
    #: ``.bin``), where the builder knows it; None: :func:`autotune.worker.model_size.model_bytes` counts the
    #: parameters and buffers at the variant's precision.
    model_bytes: int | None = None
    _keepalive: tuple[Any, ...] = field(default=(), repr=False)

    def prepare_inputs(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """fp32 contiguous inputs -> what ``fn`` expects. Done once, outside any timing."""
        return _prepare(self.spec, inputs, device=self.device)


def _prepare(spec: VariantSpec, inputs: Sequence[Any], *, device: str) -> tuple[Any, ...]:
    import torch

    # autocast casts per op; a runtime takes fp32 tensors and applies its own inference precision
    dtype = None if spec.precision.startswith("autocast") or spec.is_runtime else _dtype_of(spec.precision)
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if x.is_floating_point():
                if dtype is not None:
                    x = x.to(dtype)
                if spec.memory_format == "channels_last" and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
        out.append(x)
    return tuple(out)


class _Runner:
    """The callable a :class:`BuiltVariant` hands out: context managers around the compiled inner call.

    ``inference_mode`` is entered here (not by the caller) so that every variant, and the eager
    baseline, pays the same per-call context cost and TorchScript/dynamo see one consistent grad mode.
    """

    def __init__(self, inner: Callable[..., Any], *, autocast: tuple[str, torch.dtype] | None,
                 threads: int | None) -> None:
        import torch

        self._torch = torch  # bound once: no per-call import lookup in the timed path
        self._inner = inner
        self._autocast = autocast
        self._threads = threads

    def __call__(self, *args: Any) -> Any:
        torch = self._torch
        if self._threads is not None and torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        with torch.inference_mode():
            if self._autocast is None:
                return self._inner(*args)
            with torch.autocast(self._autocast[0], dtype=self._autocast[1]):
                return self._inner(*args)


def _autocast_module(model: Any, device_type: str, dtype: torch.dtype) -> Any:
    """Wrap ``model`` so that autocast is part of its forward: trace/compile/export then bake it in."""
    import torch

    class AutocastWrapper(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            with torch.autocast(device_type, dtype=dtype):
                return self.inner(*args)

    return AutocastWrapper(model).eval()


def _script(model: Any, notes: list[str]) -> Any:
    """``torch.jit.script``; after a failure, forget TorchScript's cached types for the model's class.

    Otherwise the half-compiled class stays in TorchScript's compilation unit and the *next* attempt
    in this process (another variant of the same model) fails with a misleading
    "Can't redefine method: forward" instead of the real error.
    """
    import torch

    try:
        return silenced_build("torch.jit.script", notes, lambda: torch.jit.script(model))
    except VariantError:
        try:
            import torch.jit._recursive as recursive

            recursive.concrete_type_store = recursive.ConcreteTypeStore()
        except (ImportError, AttributeError):
            pass
        raise


#: What ``torch.jit.trace`` says of an output structure it cannot type (a ``ModelOutput`` nesting others).
_UNTYPED_OUTPUT = ("cannot infer type", "can be output from traced functions")


def _trace(model: Any, example: tuple[Any, ...], notes: list[str]) -> tuple[Any, Any]:
    """``torch.jit.trace`` (``strict=False``: dicts and Hugging Face outputs of tensors); the module and None, or,
    for an output the tracer cannot type, the module traced returning its flat leaves and the pytree spec that
    rebuilds the eager structure around them.

    Why: transformers' ``CLIPOutput`` holds two ``BaseModelOutputWithPooling``s, and the tracer failed with
    "Tracer cannot infer type of CLIPOutput" (session 34), so trace and frozen were never measured. Flat leaves are
    what the artifact's ``load.py`` returns anyway (as the flattened AOTInductor package does)."""
    import torch
    import torch.utils._pytree as pytree

    try:
        return silenced_build("torch.jit.trace", notes,
                              lambda: torch.jit.trace(model, example, check_trace=False, strict=False)), None
    except VariantError as exc:
        if not any(w in str(exc) for w in _UNTYPED_OUTPUT):
            raise
        reference = silenced_build("eager forward for the output structure", notes, lambda: model(*example))
        odd = non_tensor_outputs(reference)
        if odd is not None:  # flat leaves would not help: one of them is no tensor either
            raise VariantError(f"torch.jit.trace: the model returns outputs that are not tensors, which a traced "
                               f"graph cannot return: {odd}") from None
        if isinstance(reference, torch.Tensor):  # a lone tensor: nothing to flatten
            raise
        spec = pytree.tree_structure(reference)
        first_error = str(exc)
    traced = silenced_build("torch.jit.trace of the flat outputs", notes,
                            lambda: torch.jit.trace(_flat_outputs(model), example, check_trace=False, strict=False))
    notes.append(f"traced returning the output's leaves in pytree order (the call rebuilds the structure), because "
                 f"{first_error}")
    return traced, spec


def _output_structure(model: Any, example: tuple[Any, ...], notes: list[str]) -> Any:
    """The pytree spec of ``model``'s eager output on ``example``, None for a lone tensor (one forward)."""
    import torch
    import torch.utils._pytree as pytree

    reference = silenced_build("eager forward for the output structure", notes, lambda: model(*example))
    return None if isinstance(reference, torch.Tensor) else pytree.tree_structure(reference)


def _rebuilt(module: Any, spec: Any) -> Callable[..., Any]:
    """``module`` (returning flat leaves) called so that it returns the structure ``spec`` describes."""
    import torch.utils._pytree as pytree

    def call(*args: Any) -> Any:
        return pytree.tree_unflatten(list(module(*args)), spec)

    return call


def _script_or_trace(model: Any, example: tuple[Any, ...], notes: list[str], *, prefer_trace: bool
                     ) -> tuple[Any, Any]:
    """Scripted (or traced, where scripting fails or ``prefer_trace``), with the spec of flat outputs (None)."""
    if not prefer_trace:
        try:
            return _script(model, notes), None
        except VariantError as exc:
            first_error = str(exc)
        notes.append(f"frozen built from torch.jit.trace because {first_error}")
    return _trace(model, example, notes)


def _compile_kwargs(mode: str) -> dict[str, Any]:
    """``torch.compile`` options: static shapes, and isolated recompile accounting where supported.

    ``isolate_recompiles`` (newer torch) matters when many variants of one model class are compiled in
    one process: compiled code is cached per *code object* (the class's ``forward``), so without it
    the copies share one cache and its recompile limit, and after 8 entries dynamo silently falls
    back to eager.
    """
    import inspect

    import torch

    kwargs: dict[str, Any] = {"mode": mode, "dynamic": False}
    try:
        if "isolate_recompiles" in inspect.signature(torch.compile).parameters:
            kwargs["isolate_recompiles"] = True
    except (TypeError, ValueError):
        pass
    return kwargs


def compile_dynamic(spec: VariantSpec, dynamic_dims: Sequence[Sequence[int]] | None) -> bool | None:
    """``torch.compile``'s ``dynamic`` for ``spec`` on traffic dynamic in ``dynamic_dims``: None (static at
    first, dynamic after the first recompile) when a dim other than the batch varies and the variant does not
    pad it to buckets, else False (static shapes; a new batch size recompiles). The artifact's code uses it too.
    """
    if dynamic_dims is not None and any(len(d) > 1 for d in dynamic_dims) and not spec.buckets:
        return None
    return False


def build_variant(
    spec: VariantSpec,
    model: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    *,
    device: str,
    keep_artifact: bool = False,
    dynamic_dims: Sequence[Sequence[int]] | None = None,
    input_names: Sequence[str] | None = None,
    calibration: Calibration | None = None,
) -> BuiltVariant:
    """Build ``spec`` from ``model`` (never mutated) for inputs like ``example_inputs`` (fp32, on device).

    Pseudo-code::

        m = deepcopy(model).eval(), parameters requires_grad=False, on device  (grad mode off,
                                                                                 inference mode off)
        m = m.to(bf16|fp16) for pure precisions; m.to(channels_last) for channels_last
        int8 (torch compilers): m = torchao quantize_ (eager, compile) | torch.ao quantize_dynamic (TorchScript)
        x = prepare_inputs(example_inputs)
        autocast: trace/frozen/compile/export wrap m in a module whose forward enters autocast (baked
                  into the graph); eager/script enter autocast around every call instead
        set threads (inductor reads the thread count at compile time)
        inner = m | jit.script(m) | jit.trace(m, x) | optimize_for_inference(freeze(script-or-trace(m)))
                | torch.compile(m, mode, dynamic=compile_dynamic(..))   (compiles at the first call)
                | aoti_load_package(aoti_compile_and_package(export(m, x, dynamic_shapes)))
                | ONNX Runtime / OpenVINO session on an export of m, dynamic in dynamic_dims  (variants.runtimes)
        cudagraphs: capture inner(x) into a CUDA graph; calls copy inputs in and replay
        fn = inference_mode + (runtime autocast) + (threads) around inner
        bf16/fp16/int8 on CPU, not compile/runtimes: one call on x with oneDNN's verbose log -> a note naming
            the kernels (AMX / AVX512-BF16 / VNNI) it ran (variants.isa)

    Building happens with inference mode switched *off* (the caller may be inside it): TorchScript
    freezing and export need ordinary tensors, and a deep copy made in inference mode would turn the
    weights into inference tensors. Calls run in inference mode (``fn`` enters it).

    ``keep_artifact`` keeps what a deployment would save in :attr:`BuiltVariant.artifact`; off by default,
    because for ``frozen`` (a serialisation) and ``openvino`` (the converted model) it costs time and memory
    that a candidate's build and footprint must not include.

    ``dynamic_dims`` (per input, the dims that vary in the traffic, the batch dim 0 included; None: every
    shape is the example's) is how shape-specialising builders meet the traffic: ``torch.compile`` gets
    ``dynamic=None`` (static first, dynamic after the first recompile: torch's own default) when a dim other
    than the batch varies, ``export`` marks them ``Dim.DYNAMIC``, the runtimes export them as dynamic axes.
    ``input_names`` (the traffic layout's names) name the runtimes' graph inputs, so a deployment feeds them
    by the names of the user's batch.

    ``calibration`` (:class:`autotune.worker.variants.quantize.Calibration`: the traffic's batches) calibrates the
    static int8 quantizations (``onnx+int8-static``, ``openvino+int8``); quantizing and calibrating are part of
    the build, so of ``build_seconds``.

    Availability is not checked here (call :func:`available` first); whatever torch can build is
    built. Raises :class:`VariantError` with a one-line summary when a stage fails;
    ``torch.OutOfMemoryError`` propagates unchanged so the caller can classify it as ``oom``.
    """
    import torch

    kind = _device_type(device)
    dev = torch.device(device)
    notes: list[str] = []
    keepalive: list[Any] = []
    artifact: Any = None
    model_bytes: int | None = None
    reduced = _dtype_of(spec.precision)
    autocast = spec.precision.startswith("autocast")
    t0 = time.perf_counter()
    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    if kind == "cpu" and reduced is not None and cpu_native_precision(spec.precision) is False:
        notes.append(f"{spec.precision} is emulated on this CPU (no native instructions): expect it slower")

    with torch.inference_mode(False), torch.no_grad():

        def copy_model() -> Any:
            m = copy.deepcopy(model).eval()
            for p in m.parameters():
                p.requires_grad_(False)
            m = m.to(dev)
            if reduced is not None and not autocast and not spec.is_runtime:
                m = m.to(reduced)
            if spec.memory_format == "channels_last":
                m = m.to(memory_format=torch.channels_last)
            return m

        m = silenced_build("preparing the model copy", notes, copy_model)
        if spec.is_quantized and not spec.is_runtime:
            m = quantize_torch(spec.compiler, m, notes)
        example = _prepare(spec, example_inputs, device=device)
        runtime_autocast: tuple[str, torch.dtype] | None = None
        target: Any = m
        if autocast and reduced is not None:
            if spec.compiler in ("eager", "script"):
                runtime_autocast = (kind, reduced)
            else:
                target = _autocast_module(m, kind, reduced)

        inner: Callable[..., Any]
        if spec.compiler == "eager":
            inner = m
        elif spec.compiler == "script":
            inner = _script(m, notes)
            artifact = inner if keep_artifact else None
        elif spec.compiler == "trace":
            traced, flat = _trace(target, example, notes)
            artifact = traced if keep_artifact else None
            inner = traced if flat is None else _rebuilt(traced, flat)
        elif spec.compiler == "frozen":
            scripted, flat = _script_or_trace(target, example, notes, prefer_trace=target is not m)
            if target is not m:
                notes.append("frozen+autocast is built from torch.jit.trace (autocast baked into the graph)")
            frozen = silenced_build("torch.jit.freeze", notes, lambda: torch.jit.freeze(scripted.eval()))
            if keep_artifact:
                artifact = _jit_bytes(frozen)
            optimized = silenced_build("torch.jit.optimize_for_inference", notes,
                                       lambda: torch.jit.optimize_for_inference(frozen))
            inner = optimized if flat is None else _rebuilt(optimized, flat)
        elif spec.compiler == "compile":
            mode = spec.compile_mode or "default"
            kwargs = _compile_kwargs(mode)
            kwargs["dynamic"] = compile_dynamic(spec, dynamic_dims)
            if kwargs["dynamic"] is None:
                notes.append("torch.compile(dynamic=None): static at first, dynamic shapes after the first "
                             "recompile on the traffic's varying dims")
            else:
                notes.append(
                    "torch.compile compiles at the first call (static shapes: a new shape recompiles)"
                )
            inner = silenced_build(f"torch.compile(mode={mode})", notes,
                                    lambda: torch.compile(target, **kwargs))
        elif spec.compiler == "export":
            inner, tmp = _build_export(target, example, notes, single_threaded=spec.cuda_graphs,
                                       dynamic_dims=dynamic_dims)
            keepalive.append(tmp)
            artifact = os.path.join(tmp.name, "model.pt2") if keep_artifact else None
        elif spec.is_runtime:
            from autotune.worker.variants.runtimes import build_runtime

            inner, kept, artifact, model_bytes = build_runtime(
                spec, m, example, device=device, notes=notes, keep_artifact=keep_artifact,
                dynamic_dims=dynamic_dims, input_names=input_names, calibration=calibration)
            keepalive.extend(kept)
        else:  # pragma: no cover - VariantSpec validates the compiler
            raise VariantError(f"unknown compiler {spec.compiler!r}")
        if spec.is_torchscript:
            notes.append(_DEPRECATION_NOTE)

        if spec.cuda_graphs:
            from autotune.worker.devices import backend_for

            backend = backend_for(dev)
            graph_inner = inner
            if runtime_autocast is not None:
                ac_kind, ac_dtype = runtime_autocast

                def graph_inner(*args: Any) -> Any:
                    # no cast cache: the cached low-precision weight copies are freed when the autocast
                    # context exits, and a graph captured reading them replays freed memory
                    with torch.autocast(ac_kind, dtype=ac_dtype, cache_enabled=False):
                        return inner(*args)

                runtime_autocast = None
            with torch.inference_mode():
                captured = silenced_build(
                    "CUDA graph capture", notes, lambda: backend.graph_call(graph_inner, example)
                )
            inner = captured
            notes.append("CUDA graph: outputs are static buffers, overwritten by the next call")

    if (kind == "cpu" and spec.precision != "fp32" and not spec.is_runtime and spec.compiler != "compile"
            and not spec.cuda_graphs):
        from autotune.worker.variants.isa import onednn_kernels

        fn0 = _Runner(inner, autocast=runtime_autocast, threads=spec.threads)
        notes.append(silenced_build("oneDNN verbose call", notes, lambda: onednn_kernels(lambda: fn0(*example))))
    build_seconds = time.perf_counter() - t0
    if spec.is_quantized and not spec.is_runtime:
        model_bytes = quantize_model_bytes(m)
    return BuiltVariant(
        spec=spec,
        fn=_Runner(inner, autocast=runtime_autocast, threads=spec.threads),
        build_seconds=build_seconds,
        notes=tuple(notes),
        device=str(dev),
        shape_specialized=spec.compiler in ("compile", "export") or spec.is_runtime or spec.cuda_graphs,
        artifact=artifact,
        model_bytes=model_bytes,
        _keepalive=tuple(keepalive),
    )


def _jit_bytes(module: Any) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def _flat_outputs(inner: Any) -> Any:
    """``inner`` wrapped so that its forward returns its output's leaves as a tuple, in pytree order.

    An AOTInductor package stores the output's pytree spec and rebuilds it at load time; a model output class
    registered by its library (a Hugging Face ``ModelOutput``) then cannot be loaded where that library is not
    imported ("Deserializing ... in pytree is not registered"). So the package returns flat leaves (what the
    artifact's ``load.py`` returns too) and the measured call rebuilds the eager structure around them.
    """
    import torch
    import torch.utils._pytree as pytree

    class FlatOutputs(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return tuple(pytree.tree_leaves(self.inner(*args)))

    return FlatOutputs(inner).eval()


def _build_export(target: Any, example: tuple[Any, ...], notes: list[str], *,
                  single_threaded: bool, dynamic_dims: Sequence[Sequence[int]] | None = None
                  ) -> tuple[Callable[..., Any], Any]:
    """``torch.export`` then AOTInductor: compile to a ``.pt2`` package in a private temp dir and load it.

    With ``dynamic_dims`` those dims are ``Dim.DYNAMIC`` (torch.export decides their range, or specialises
    a dim the model's code fixes: the gate on the traffic's other shapes then says so). A model whose output
    is not a lone tensor is exported returning its flat leaves (:func:`_flat_outputs`) and the call rebuilds
    the structure. The temp dir object is returned so the caller keeps it alive as long as the loaded model.
    """
    import torch

    from autotune.worker.traffic import dynamic_shapes_for

    treespec = _output_structure(target, example, notes)
    if treespec is not None:
        target = _flat_outputs(target)
    shapes: Any = None
    if dynamic_dims is not None:
        shapes = dynamic_shapes_for(target, example, dynamic_dims)
        notes.append("export: dynamic dims (Dim.DYNAMIC) " + ", ".join(
            f"input {i} dims {list(d)}" for i, d in enumerate(dynamic_dims) if d))
    exported = silenced_build("torch.export.export", notes,
                              lambda: torch.export.export(target, example, dynamic_shapes=shapes))
    tmp = tempfile.TemporaryDirectory(prefix="autotune-aoti-")

    def compile_and_load() -> Any:
        import torch._inductor

        path = torch._inductor.aoti_compile_and_package(
            exported, package_path=os.path.join(tmp.name, "model.pt2")
        )
        return torch._inductor.aoti_load_package(path, run_single_threaded=single_threaded)

    try:
        loaded = silenced_build("AOTInductor compile", notes, compile_and_load)
    except BaseException:
        tmp.cleanup()
        raise
    if dynamic_dims is None:
        notes.append("export: AOTInductor package compiled for the example's shapes")
    if treespec is None:
        return loaded, tmp
    notes.append("export: the package returns the output's leaves in pytree order; the call rebuilds the "
                 "structure")
    return _rebuilt(loaded, treespec), tmp
