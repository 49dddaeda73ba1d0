"""The variant catalogue: the ways one model can be executed, and how to build each of them.

A *variant* is one point in a small product space of independent dimensions:

* **compiler** — ``eager``; TorchScript ``script`` / ``trace``; ``frozen`` (TorchScript +
  ``torch.jit.freeze`` + ``torch.jit.optimize_for_inference``); ``compile`` (``torch.compile`` with
  inductor, mode ``default`` / ``reduce-overhead`` / ``max-autotune`` / ``max-autotune-no-cudagraphs``);
  ``export`` (``torch.export`` + AOTInductor, an ahead-of-time compiled ``.pt2`` package);
  the deployment runtimes ``onnx`` (ONNX Runtime, option ``default`` / ``parallel``) and ``openvino``
  (option ``latency`` / ``throughput``, OpenVINO's performance hint), built in :mod:`autotune.runtimes`;
* **precision** — ``fp32``, pure ``bf16`` / ``fp16`` (weights and floating inputs cast), or
  ``autocast-bf16`` / ``autocast-fp16`` (fp32 weights, ``torch.autocast`` picks per-op dtypes);
* **memory format** — ``contiguous`` or ``channels_last`` (4-D float inputs and conv weights);
* **cudagraphs** — an explicit ``torch.cuda.CUDAGraph`` capture around the call (CUDA only);
* **threads** — ``torch.set_num_threads(N)`` while the variant runs (CPU only).

A variant is named by text so that recipes, the search space, the worker protocol and the report
all speak the same language: ``COMPILER[:MODE]`` followed by ``+``-separated modifiers, e.g.
``compile:max-autotune+bf16+channels_last``, ``frozen+threads=2``, ``eager+cudagraphs``.
Defaults (``fp32``, ``contiguous``, mode ``default``) are left out of the canonical name, so
``VariantSpec.parse(spec.name) == spec`` for every spec.

Why the module is split the way it is:

* The naming/parsing half (:class:`VariantSpec`, :func:`expand_variants`) imports no torch at
  module import time, so the recipe validator and the search space in the parent process can
  use it without paying torch's start-up cost. :func:`available` and the build half import torch
  lazily.
* :func:`available` answers "can this run *here*, and is it worth trying" with a reason, before
  any time is spent; :func:`build_variant` turns a spec into a callable and converts every build
  failure into a one-line :class:`~autotune.errors.VariantError`, so one broken variant (a model
  TorchScript cannot compile, an export that breaks) is reported as ``failed`` and the run goes on.
* Whether the variant still computes the same function is *not* decided here: that is the
  correctness gate in :mod:`autotune.correctness`, which every built variant passes before timing.

Policy decisions (documented here because the report quotes them):

* **Reduced precision on CPU** is offered only where the CPU has native arithmetic for it
  (bf16: AVX512_BF16 or AMX_BF16; fp16: AVX512_FP16 or AMX_FP16). Without it PyTorch emulates the
  type and is far slower than fp32 — 4-30x on an AVX2 EPYC for an MLP and a small conv net — so
  searching it wastes budget. ``available(..., allow_emulated_precision=True)`` overrides this
  (the benchmark uses it to show the cost). On CPUs whose capabilities torch cannot report
  (non-x86) reduced precision is allowed.
* **TorchScript** (script / trace / frozen) is deprecated since torch 2.5 in favour of
  ``torch.compile`` / ``torch.export``; it still runs and is often the fastest CPU option for
  convnets (freezing folds batch norm and pre-packs MKLDNN weights), so it stays in the catalogue.
  Its ``FutureWarning``s are silenced inside the tool and the deprecation is carried in
  :attr:`BuiltVariant.notes` for the report.
* **Shapes**: ``compile`` uses ``dynamic=False`` and ``export`` / ``cudagraphs`` are built for the
  example's shapes. A variant is therefore built per batch size (``BuiltVariant.shape_specialized``);
  with ``compile`` a new shape would recompile, which :func:`recompile_count` exposes.
* **Threads** are applied when the variant is built (inductor bakes the thread count into its
  generated C++) and re-asserted on every call (cheap: one ``get_num_threads``), so variants with
  different thread counts can be interleaved in one process.
"""

from __future__ import annotations

import copy
import difflib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.build_stage import silenced_build, summarize_exception
from autotune.errors import InputError, VariantError

if TYPE_CHECKING:
    import torch

COMPILERS: tuple[str, ...] = ("eager", "script", "trace", "frozen", "compile", "export", "onnx", "openvino")
#: Compilers that hand the model to another runtime (:mod:`autotune.runtimes`): fp32 graphs, their own
#: memory layouts and thread pools, tensors converted at the boundary.
RUNTIMES: tuple[str, ...] = ("onnx", "openvino")
#: Modes of ``torch.compile`` (``torch._inductor.list_mode_options()``): ``reduce-overhead`` adds CUDA
#: graphs; ``max-autotune`` benchmarks GEMM/conv templates (and adds CUDA graphs on CUDA);
#: ``max-autotune-no-cudagraphs`` is the latter without CUDA graphs. (``lite`` exists too but only
#: disables optimisations, so it is never faster and is left out.)
COMPILE_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "autocast-bf16", "autocast-fp16")
MEMORY_FORMATS: tuple[str, ...] = ("contiguous", "channels_last")
#: ONNX Runtime options: ``default`` runs the graph's nodes one after another (``ORT_SEQUENTIAL``, all
#: intra-op threads on each node); ``parallel`` (``ORT_PARALLEL``) also runs independent branches at once.
ONNX_MODES: tuple[str, ...] = ("default", "parallel")
#: OpenVINO's ``PERFORMANCE_HINT``: ``latency`` (its CPU default; one stream) or ``throughput`` (several
#: streams, driven by an ``AsyncInferQueue``; see :mod:`autotune.runtimes` for what a call is then).
OPENVINO_MODES: tuple[str, ...] = ("latency", "throughput")
#: The compilers that take a ``:MODE``, their modes, and the mode the bare name means (left out of names).
MODES: dict[str, tuple[str, ...]] = {"compile": COMPILE_MODES, "onnx": ONNX_MODES, "openvino": OPENVINO_MODES}
DEFAULT_MODES: dict[str, str] = {"compile": "default", "onnx": "default", "openvino": "latency"}
#: The compiler/mode combinations that ``"all"`` stands for, in the order they are tried; each is
#: kept only where :func:`available` accepts it on the device.
ALL_BASES: tuple[str, ...] = (
    "eager",
    "script",
    "trace",
    "frozen",
    "compile",
    "compile:reduce-overhead",
    "compile:max-autotune",
    "compile:max-autotune-no-cudagraphs",
    "export",
    "onnx",
    "openvino",
    "openvino:throughput",
    "eager+cudagraphs",
)

_TORCHSCRIPT = ("script", "trace", "frozen")
_MODES_WITH_CUDAGRAPHS = ("reduce-overhead", "max-autotune")
_DEPRECATION_NOTE = (
    "TorchScript (torch.jit) is deprecated since torch 2.5 in favour of torch.compile / torch.export; "
    "its deprecation warnings were silenced"
)


# --------------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------------


def _suggest(token: str, allowed: Sequence[str]) -> str:
    close = difflib.get_close_matches(token, list(allowed), n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""


def _bad(field_name: str, what: str, token: str, text: str, allowed: Sequence[str]) -> InputError:
    return InputError(
        f"{field_name}: unknown {what} '{token}' in '{text}'; allowed: {', '.join(allowed)}"
        f"{_suggest(token, allowed)}"
    )


@dataclass(frozen=True)
class VariantSpec:
    """One execution variant; its text form is :attr:`name` and :meth:`parse` reads it back.

    ``compile_mode`` is the compiler's mode (``MODES``; the field keeps its first name because reports
    store it). It is normalised: ``None`` for compilers without modes, and the default mode
    (``DEFAULT_MODES``) when unspecified, so equal variants compare (and deduplicate) equal.
    """

    compiler: str = "eager"
    compile_mode: str | None = None
    precision: str = "fp32"
    memory_format: str = "contiguous"
    cuda_graphs: bool = False
    threads: int | None = None

    def __post_init__(self) -> None:
        where = f"variant {self.compiler!r}"
        if self.compiler not in COMPILERS:
            raise _bad("variant", "compiler", str(self.compiler), str(self.compiler), COMPILERS)
        if self.compiler in MODES:
            if self.compile_mode is None:
                object.__setattr__(self, "compile_mode", DEFAULT_MODES[self.compiler])
            elif self.compile_mode not in MODES[self.compiler]:
                raise _bad("variant", f"{self.compiler} mode", str(self.compile_mode), where,
                           MODES[self.compiler])
        elif self.compile_mode is not None:
            raise InputError(f"{where}: only {', '.join(MODES)} take a mode (got {self.compile_mode!r})")
        if self.precision not in PRECISIONS:
            raise _bad("variant", "precision", str(self.precision), where, PRECISIONS)
        if self.memory_format not in MEMORY_FORMATS:
            raise _bad("variant", "memory format", str(self.memory_format), where, MEMORY_FORMATS)
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise InputError(f"{where}: threads must be a positive integer (got {self.threads!r})")
        if self.cuda_graphs and self.compiler == "compile":
            raise InputError(
                f"{where}: 'cudagraphs' cannot be combined with torch.compile; "
                "use 'compile:reduce-overhead' (inductor's own CUDA graphs) instead"
            )

    @property
    def name(self) -> str:
        """Canonical text: defaults left out, modifiers in a fixed order."""
        base = self.compiler
        if self.compiler in MODES and self.compile_mode != DEFAULT_MODES[self.compiler]:
            base = f"{self.compiler}:{self.compile_mode}"
        parts = [base]
        if self.precision != "fp32":
            parts.append(self.precision)
        if self.memory_format != "contiguous":
            parts.append(self.memory_format)
        if self.cuda_graphs:
            parts.append("cudagraphs")
        if self.threads is not None:
            parts.append(f"threads={self.threads}")
        return "+".join(parts)

    @property
    def is_torchscript(self) -> bool:
        return self.compiler in _TORCHSCRIPT

    @property
    def is_runtime(self) -> bool:
        """Run by ONNX Runtime or OpenVINO rather than by torch (:mod:`autotune.runtimes`)."""
        return self.compiler in RUNTIMES

    @property
    def uses_cuda_graphs(self) -> bool:
        """Explicit capture, or a torch.compile mode that captures CUDA graphs itself."""
        return self.cuda_graphs or (
            self.compiler == "compile" and self.compile_mode in _MODES_WITH_CUDAGRAPHS
        )

    @classmethod
    def parse(cls, text: str, *, field: str = "variants") -> VariantSpec:
        """Read ``COMPILER[:MODE](+MODIFIER)*``; modifiers: a precision, a memory format,
        ``cudagraphs``, ``threads=N``. Case and spaces around tokens are ignored.

        Raises :class:`InputError` naming ``field``, the bad token, the allowed values and the
        closest valid one, for unknown parts and contradictions (two precisions, a modifier twice).
        """
        spec, _, _ = _parse(text, field_name=field)
        return spec

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "compiler": self.compiler,
            "compile_mode": self.compile_mode,
            "precision": self.precision,
            "memory_format": self.memory_format,
            "cuda_graphs": self.cuda_graphs,
            "threads": self.threads,
        }


_MODIFIERS_HELP: tuple[str, ...] = (*PRECISIONS, *MEMORY_FORMATS, "cudagraphs", "threads=N")
_BASE_HELP: tuple[str, ...] = (*COMPILERS, *(f"{c}:{m}" for c, modes in MODES.items() for m in modes))


def _parse_base(token: str, text: str, field_name: str) -> tuple[str, str | None]:
    compiler, sep, mode = token.partition(":")
    compiler, mode = compiler.strip(), mode.strip()
    if compiler not in COMPILERS:
        raise _bad(field_name, "compiler", token, text, _BASE_HELP)
    if not sep:
        return compiler, None
    if compiler not in MODES:
        takes = "; ".join(f"{c}:{'|'.join(modes)}" for c, modes in MODES.items())
        raise InputError(
            f"{field_name}: '{token}' in '{text}': only {', '.join(MODES)} take a mode "
            f"({takes}); did you mean '{compiler}'?"
        )
    if mode not in MODES[compiler]:
        what = "torch.compile mode" if compiler == "compile" else f"{compiler} mode"
        raise _bad(field_name, what, mode, text, MODES[compiler])
    return compiler, mode


def _parse(text: str, *, field_name: str, allow_all: bool = False) -> tuple[VariantSpec, bool, bool]:
    """Parse one name; also say whether it pinned a precision / a memory format (for crossing)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{field_name}: empty variant name; allowed: {', '.join(_BASE_HELP)} "
                         f"with '+'-separated modifiers ({', '.join(_MODIFIERS_HELP)})")
    clean = text.strip().lower()
    tokens = [t.strip() for t in clean.split("+")]
    if any(not t for t in tokens):
        raise InputError(f"{field_name}: empty part in variant '{text}' (stray '+')")
    head, modifiers = tokens[0], tokens[1:]
    if head == "all" and allow_all:
        compiler, mode = "eager", None
    else:
        if head == "all":
            raise InputError(f"{field_name}: 'all' is a selection, not a single variant ('{text}')")
        compiler, mode = _parse_base(head, text, field_name)
    precision: str | None = None
    memory_format: str | None = None
    cuda_graphs = False
    threads: int | None = None
    seen: set[str] = set()
    for tok in modifiers:
        key = "threads" if tok.startswith("threads") else tok
        if key in seen:
            raise InputError(f"{field_name}: '{tok}' given twice in '{text}'")
        seen.add(key)
        if tok in PRECISIONS:
            if precision is not None:
                raise InputError(
                    f"{field_name}: two precisions in '{text}' ('{precision}' and '{tok}'); pick one of "
                    f"{', '.join(PRECISIONS)}"
                )
            precision = tok
        elif tok in MEMORY_FORMATS:
            if memory_format is not None:
                raise InputError(
                    f"{field_name}: two memory formats in '{text}' ('{memory_format}' and '{tok}')"
                )
            memory_format = tok
        elif tok == "cudagraphs":
            cuda_graphs = True
        elif tok.startswith("threads"):
            _, eq, value = tok.partition("=")
            value = value.strip()
            if not eq or not value.isdigit() or int(value) < 1:
                raise InputError(
                    f"{field_name}: bad '{tok}' in '{text}'; write threads=N with N a positive integer"
                )
            threads = int(value)
        elif tok in COMPILERS or tok.partition(":")[0] in COMPILERS:
            raise InputError(
                f"{field_name}: two compilers in '{text}' ('{head}' and '{tok}'); the compiler comes first "
                "and only once"
            )
        else:
            raise _bad(field_name, "modifier", tok, text, _MODIFIERS_HELP)
    if cuda_graphs and compiler == "compile":
        raise InputError(
            f"{field_name}: 'cudagraphs' cannot be combined with torch.compile in '{text}'; "
            "use 'compile:reduce-overhead' (inductor's own CUDA graphs) instead"
        )
    spec = VariantSpec(
        compiler=compiler,
        compile_mode=mode,
        precision=precision or "fp32",
        memory_format=memory_format or "contiguous",
        cuda_graphs=cuda_graphs,
        threads=threads,
    )
    return spec, precision is not None, memory_format is not None


def expand_variants(
    names: Sequence[str],
    *,
    device: str,
    precisions: Sequence[str] = ("fp32",),
    memory_formats: Sequence[str] = ("contiguous",),
    input_ndims: Sequence[int] = (),
    input_is_float: Sequence[bool] = (),
) -> list[VariantSpec]:
    """Turn the recipe's variant names into specs, deduplicated, in a stable order.

    Pseudo-code::

        for name in names:
            bases = [available compiler/mode of ALL_BASES on device] if name starts with "all"
                    else [the name's compiler/mode]
            for base in bases:
                for p in (name's precision,) if pinned else precisions:
                    for f in (name's memory format,) if pinned else memory_formats:
                        yield base + name's other modifiers + p + f   (first occurrence wins)

    ``"all"`` (optionally with modifiers, e.g. ``"all+channels_last"``) keeps only the
    compiler/mode combinations :func:`available` accepts on ``device`` (judged at fp32/contiguous).
    Everything else is returned even when unavailable, so the caller can report *why* a requested
    variant was skipped (call :func:`available` on each).
    """
    for label, values, allowed in (("precisions", precisions, PRECISIONS),
                                   ("memory_formats", memory_formats, MEMORY_FORMATS)):
        for v in values:
            if v not in allowed:
                raise InputError(f"{label}: unknown value '{v}'; allowed: {', '.join(allowed)}"
                                 f"{_suggest(str(v), allowed)}")
    if not precisions or not memory_formats:
        raise InputError("precisions and memory_formats must not be empty")
    out: list[VariantSpec] = []
    seen: set[VariantSpec] = set()

    def add(spec: VariantSpec) -> None:
        if spec not in seen:
            seen.add(spec)
            out.append(spec)

    for name in names:
        spec, pinned_precision, pinned_format = _parse(name, field_name="variants", allow_all=True)
        if name.strip().lower().split("+")[0].strip() == "all":
            bases = []
            for base_name in ALL_BASES:
                base = VariantSpec.parse(base_name)
                if spec.cuda_graphs and base.compiler == "compile":
                    continue
                base = _replace(base, cuda_graphs=base.cuda_graphs or spec.cuda_graphs, threads=spec.threads)
                if available(base, device=device, input_ndims=input_ndims, input_is_float=input_is_float).ok:
                    bases.append(base)
        else:
            bases = [spec]
        for base in bases:
            for p in (spec.precision,) if pinned_precision else precisions:
                for f in (spec.memory_format,) if pinned_format else memory_formats:
                    add(_replace(base, precision=p, memory_format=f))
    return out


def _replace(spec: VariantSpec, **changes: Any) -> VariantSpec:
    values = {**spec.to_dict(), **changes}
    values.pop("name")
    return VariantSpec(**values)


# --------------------------------------------------------------------------------------------------
# Availability
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str | None = None


def _device_type(device: str) -> str:
    from autotune.device_names import device_type

    return device_type(device)


def _capabilities(device: str) -> Any:
    """The device's :class:`autotune.devices.Capabilities` (the backend knows; nothing here asks the type)."""
    from autotune.devices import backend_for

    return backend_for(device).capabilities()


def _torch_version() -> tuple[int, int]:
    import torch

    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def _cpp_compiler() -> str | None:
    """The C++ compiler inductor will use, found without importing inductor (seconds of start-up).

    Mirrors ``torch._inductor.config.cpp.cxx``: ``$CXX`` if set, else g++ (clang++ on macOS); inductor
    does not look for other names, so neither do we.
    """
    cxx = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    return cxx if shutil.which(cxx.split()[0]) else None


def _has_triton() -> bool:
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    try:
        return bool(has_triton())
    except Exception:
        return False


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_native_precision(precision: str) -> bool | None:
    """Whether this CPU does the precision's arithmetic natively (a device fact: see
    :func:`autotune.devices.cpu_native_precision`)."""
    from autotune.devices import cpu_native_precision as native

    return native(precision)


def _reduced_dtype(precision: str) -> str | None:
    if precision in ("bf16", "autocast-bf16"):
        return "bf16"
    if precision in ("fp16", "autocast-fp16"):
        return "fp16"
    return None


def available(
    spec: VariantSpec,
    *,
    device: str,
    input_ndims: Sequence[int] = (),
    input_is_float: Sequence[bool] = (),
    allow_emulated_precision: bool = False,
) -> Availability:
    """Can ``spec`` run on ``device`` for inputs of these ranks, and is it worth trying? With a reason.

    ``input_ndims`` / ``input_is_float`` describe the model's inputs (empty: unknown, and then
    ``channels_last`` is not ruled out). Cheap: no model is built and inductor is not imported.
    """
    import torch

    from autotune.device_names import ALLOWED_TEXT, DEVICE_TYPES, INDEXED_TYPES

    kind = _device_type(device)
    if kind not in DEVICE_TYPES:
        return Availability(False, f"device '{device}' is not supported ({ALLOWED_TEXT})")
    accelerator = kind in INDEXED_TYPES
    if accelerator:
        module = getattr(torch, kind, None)
        if module is None or not module.is_available():
            return Availability(False, f"{kind.upper()} is not available on this machine")

    if spec.is_runtime:
        from autotune.runtimes import runtime_unavailable_reason

        reason = runtime_unavailable_reason(spec, device=device, input_ndims=input_ndims,
                                            input_is_float=input_is_float)
        return Availability(reason is None, reason)

    # compiler
    if spec.is_torchscript:
        if sys.version_info >= (3, 14):
            return Availability(False, "TorchScript is not supported on Python 3.14+")
    elif spec.compiler in ("compile", "export"):
        if sys.version_info >= (3, 15):
            return Availability(False, "torch.compile/export are not supported on Python 3.15+")
        if kind == "cpu" and _cpp_compiler() is None:
            return Availability(False, f"{spec.compiler} on CPU needs a C++ compiler (g++/clang++ or $CXX)")
        if accelerator and not _has_triton():
            return Availability(False, f"{spec.compiler} on {kind.upper()} needs triton, which is not installed")
    if spec.compiler == "compile" and kind == "cpu":
        if spec.compile_mode == "reduce-overhead":
            return Availability(
                False, "compile:reduce-overhead only adds CUDA graphs; on CPU it is compile:default"
            )
        if spec.compile_mode == "max-autotune-no-cudagraphs":
            return Availability(False, "compile:max-autotune-no-cudagraphs is compile:max-autotune on CPU")
    if spec.compiler == "export":
        import importlib.util

        if _torch_version() < (2, 6) or importlib.util.find_spec("torch.export") is None:
            return Availability(
                False, f"export needs torch >= 2.6 (AOTInductor packaging); have {torch.__version__}"
            )

    # precision
    reduced = _reduced_dtype(spec.precision)
    if reduced is not None:
        if spec.precision.startswith("autocast"):
            is_av = getattr(torch.amp, "is_autocast_available", None)
            if is_av is not None and not is_av(kind):
                return Availability(False, f"torch.autocast is not available for '{kind}'")
        if kind == "cpu":
            native = cpu_native_precision(spec.precision)
            if native is False and not allow_emulated_precision:
                need = "AVX512_BF16 or AMX_BF16" if reduced == "bf16" else "AVX512_FP16 or AMX_FP16"
                return Availability(
                    False,
                    f"this CPU has no native {reduced} arithmetic ({need}); emulated {reduced} is several "
                    "times slower than fp32, so it is not tried",
                )
        elif reduced == "bf16" and not _capabilities(device).bf16:
            return Availability(False, f"this {kind.upper()} device has no native bf16 "
                                       "(CUDA: needs compute capability >= 8.0)")

    # memory format
    if spec.memory_format == "channels_last" and input_ndims:
        same_len = len(input_is_float) == len(input_ndims)
        floats = list(input_is_float) if same_len else [True] * len(input_ndims)
        if not any(nd == 4 and fl for nd, fl in zip(input_ndims, floats, strict=True)):
            return Availability(False, "channels_last needs a 4-D floating-point input (N, C, H, W)")

    # cuda graphs / threads
    if spec.cuda_graphs and not (accelerator and _capabilities(device).graphs):
        return Availability(False, "CUDA graphs need a CUDA device")
    if spec.threads is not None:
        if kind != "cpu":
            return Availability(False, f"threads=N is a CPU knob (torch.set_num_threads); not used on {kind}")
        cpus = _usable_cpus()
        if spec.threads > cpus:
            return Availability(False, f"threads={spec.threads} exceeds the {cpus} usable CPU cores")
    return Availability(True)


# --------------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------------


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
    #: What a deployment saves of this build, with ``keep_artifact=True`` (:mod:`autotune.artifact` writes it):
    #: the TorchScript module; for ``frozen`` the ``torch.jit.save`` bytes of the frozen module taken before
    #: ``optimize_for_inference`` (which works in place, and whose output does not load back); the path of the
    #: AOTInductor ``.pt2`` or of the exported ``.onnx``; the OpenVINO ``ov.Model`` as compiled. None for eager
    #: and torch.compile (no file form) and without ``keep_artifact``.
    artifact: Any = field(default=None, repr=False)
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


def _script_or_trace(model: Any, example: tuple[Any, ...], notes: list[str], *, prefer_trace: bool) -> Any:
    import torch

    if not prefer_trace:
        try:
            return _script(model, notes)
        except VariantError as exc:
            first_error = str(exc)
        notes.append(f"frozen built from torch.jit.trace because {first_error}")
    return silenced_build(
        "torch.jit.trace", notes, lambda: torch.jit.trace(model, example, check_trace=False, strict=False)
    )


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


def build_variant(
    spec: VariantSpec,
    model: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    *,
    device: str,
    keep_artifact: bool = False,
) -> BuiltVariant:
    """Build ``spec`` from ``model`` (never mutated) for inputs like ``example_inputs`` (fp32, on device).

    Pseudo-code::

        m = deepcopy(model).eval(), parameters requires_grad=False, on device  (grad mode off,
                                                                                 inference mode off)
        m = m.to(bf16|fp16) for pure precisions; m.to(channels_last) for channels_last
        x = prepare_inputs(example_inputs)
        autocast: trace/frozen/compile/export wrap m in a module whose forward enters autocast (baked
                  into the graph); eager/script enter autocast around every call instead
        set threads (inductor reads the thread count at compile time)
        inner = m | jit.script(m) | jit.trace(m, x) | optimize_for_inference(freeze(script-or-trace(m)))
                | torch.compile(m, mode, dynamic=False)            (compiles at the first call)
                | aoti_load_package(aoti_compile_and_package(export(m, x)))
                | ONNX Runtime / OpenVINO session on a fixed-shape export of m   (autotune.runtimes)
        cudagraphs: capture inner(x) into a CUDA graph; calls copy inputs in and replay
        fn = inference_mode + (runtime autocast) + (threads) around inner

    Building happens with inference mode switched *off* (the caller may be inside it): TorchScript
    freezing and export need ordinary tensors, and a deep copy made in inference mode would turn the
    weights into inference tensors. Calls run in inference mode (``fn`` enters it).

    ``keep_artifact`` keeps what a deployment would save in :attr:`BuiltVariant.artifact`; off by default,
    because for ``frozen`` (a serialisation) and ``openvino`` (the converted model) it costs time and memory
    that a candidate's build and footprint must not include.

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
            inner = silenced_build(
                "torch.jit.trace", notes,
                lambda: torch.jit.trace(target, example, check_trace=False, strict=False),
            )
            artifact = inner if keep_artifact else None
        elif spec.compiler == "frozen":
            scripted = _script_or_trace(target, example, notes, prefer_trace=target is not m)
            if target is not m:
                notes.append("frozen+autocast is built from torch.jit.trace (autocast baked into the graph)")
            frozen = silenced_build("torch.jit.freeze", notes, lambda: torch.jit.freeze(scripted.eval()))
            if keep_artifact:
                artifact = _jit_bytes(frozen)
            inner = silenced_build("torch.jit.optimize_for_inference", notes,
                                   lambda: torch.jit.optimize_for_inference(frozen))
        elif spec.compiler == "compile":
            mode = spec.compile_mode or "default"
            inner = silenced_build(f"torch.compile(mode={mode})", notes,
                                    lambda: torch.compile(target, **_compile_kwargs(mode)))
            notes.append(
                "torch.compile compiles at the first call (static shapes: a new batch size recompiles)"
            )
        elif spec.compiler == "export":
            inner, tmp = _build_export(target, example, notes, single_threaded=spec.cuda_graphs)
            keepalive.append(tmp)
            artifact = os.path.join(tmp.name, "model.pt2") if keep_artifact else None
        elif spec.is_runtime:
            from autotune.runtimes import build_runtime

            inner, kept, artifact = build_runtime(spec, m, example, device=device, notes=notes,
                                                  keep_artifact=keep_artifact)
            keepalive.extend(kept)
        else:  # pragma: no cover - VariantSpec validates the compiler
            raise VariantError(f"unknown compiler {spec.compiler!r}")
        if spec.is_torchscript:
            notes.append(_DEPRECATION_NOTE)

        if spec.cuda_graphs:
            from autotune.devices import backend_for

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

    build_seconds = time.perf_counter() - t0
    return BuiltVariant(
        spec=spec,
        fn=_Runner(inner, autocast=runtime_autocast, threads=spec.threads),
        build_seconds=build_seconds,
        notes=tuple(notes),
        device=str(dev),
        shape_specialized=spec.compiler in ("compile", "export") or spec.is_runtime or spec.cuda_graphs,
        artifact=artifact,
        _keepalive=tuple(keepalive),
    )


def _jit_bytes(module: Any) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def _build_export(target: Any, example: tuple[Any, ...], notes: list[str], *,
                  single_threaded: bool) -> tuple[Callable[..., Any], Any]:
    """``torch.export`` then AOTInductor: compile to a ``.pt2`` package in a private temp dir and load it.

    The temp dir object is returned so the caller keeps it alive as long as the loaded model.
    """
    import torch

    exported = silenced_build("torch.export.export", notes, lambda: torch.export.export(target, example))
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
    notes.append("export: AOTInductor package compiled for the example's shapes")
    return loaded, tmp


# --------------------------------------------------------------------------------------------------
# Compiler state
# --------------------------------------------------------------------------------------------------


def recompile_count() -> int:
    """Graphs dynamo has compiled in this process (``counters["stats"]["unique_graphs"]``).

    Dynamo has no counter named "recompiles"; every compiled graph (first compile, recompile after a
    guard failure, or a graph after a graph break) increments ``unique_graphs``. Read it before and
    after a steady-state measurement: any increase there is a recompilation. 0 if dynamo was never
    imported (it is not imported here just to answer).
    """
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def graph_break_count() -> int:
    """Graph breaks dynamo has recorded in this process (sum over reasons); 0 if dynamo is unused."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


def reset_compiler_state() -> None:
    """Forget compiled code between candidates in a reused worker: ``torch._dynamo.reset()`` (code
    caches, guards, CUDA graph trees) and dynamo's counters. Cheap no-op if dynamo was never used.

    Counters are cleared too so a long-lived worker's numbers stay per-candidate; callers still
    compare before/after values rather than absolute ones.
    """
    if "torch._dynamo" not in sys.modules:
        return
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


__all__ = [
    "ALL_BASES",
    "COMPILERS",
    "COMPILE_MODES",
    "DEFAULT_MODES",
    "MEMORY_FORMATS",
    "MODES",
    "ONNX_MODES",
    "OPENVINO_MODES",
    "PRECISIONS",
    "RUNTIMES",
    "Availability",
    "BuiltVariant",
    "VariantSpec",
    "available",
    "build_variant",
    "cpu_native_precision",
    "expand_variants",
    "graph_break_count",
    "recompile_count",
    "reset_compiler_state",
    "summarize_exception",
]
