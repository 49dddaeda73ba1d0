"""Variant names: the grammar ``COMPILER[:MODE](+MODIFIER)*``, its vocabulary and :class:`VariantSpec`.

No torch here (nor in anything this module imports), so it belongs to the shared core: a variant name is
vocabulary of recipes, requests, study rows and reports, readable in any process without paying torch's
start-up cost. The policy behind the vocabulary, and the building, is in :mod:`autotune.worker.variants`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from autotune.core.process_env import ALLOCATORS, DEFAULT, OMP_SETTINGS, ProcessEnvironment
from autotune.errors import InputError

COMPILERS: tuple[str, ...] = ("eager", "script", "trace", "frozen", "compile", "export", "onnx", "openvino")
#: Compilers that hand the model to another runtime (:mod:`autotune.worker.variants.runtimes`): fp32 graphs, their own
#: memory layouts and thread pools, tensors converted at the boundary.
RUNTIMES: tuple[str, ...] = ("onnx", "openvino")
#: Modes of ``torch.compile`` (``torch._inductor.list_mode_options()``): ``reduce-overhead`` adds CUDA
#: graphs; ``max-autotune`` benchmarks GEMM/conv templates (and adds CUDA graphs on CUDA);
#: ``max-autotune-no-cudagraphs`` is the latter without CUDA graphs. (``lite`` exists too but only
#: disables optimisations, so it is never faster and is left out.)
COMPILE_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``int8``: int8 weights, activations quantized per call where the runtime can (torchao's dynamic int8 for
#: torch, ``onnxruntime.quantization.quantize_dynamic`` for onnx) and calibrated on the data for OpenVINO (NNCF,
#: its only post-training int8); ``int8-static``: activations' scales calibrated on the data ahead of time
#: (ONNX Runtime's QDQ static quantization). :mod:`autotune.worker.variants.quantize` builds them.
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "autocast-bf16", "autocast-fp16", "int8", "int8-static")
#: The precisions whose build quantizes the model (calibrated on the traffic where the method needs it).
QUANTIZED_PRECISIONS: tuple[str, ...] = ("int8", "int8-static")
MEMORY_FORMATS: tuple[str, ...] = ("contiguous", "channels_last")
#: ONNX Runtime options: ``default`` runs the graph's nodes one after another (``ORT_SEQUENTIAL``, all
#: intra-op threads on each node); ``parallel`` (``ORT_PARALLEL``) also runs independent branches at once.
ONNX_MODES: tuple[str, ...] = ("default", "parallel")
#: OpenVINO's ``PERFORMANCE_HINT``: ``latency`` (its CPU default; one stream) or ``throughput`` (several
#: streams, driven by an ``AsyncInferQueue``; see :mod:`autotune.worker.variants.runtimes` for what a call is then).
OPENVINO_MODES: tuple[str, ...] = ("latency", "throughput")
#: The compilers that take a ``:MODE``, their modes, and the mode the bare name means (left out of names).
MODES_BY_COMPILER: dict[str, tuple[str, ...]] = {
    "compile": COMPILE_MODES, "onnx": ONNX_MODES, "openvino": OPENVINO_MODES}
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

    ``compile_mode`` is the compiler's mode (``MODES_BY_COMPILER``; the field keeps its first name because reports
    store it). It is normalised: ``None`` for compilers without modes, and the default mode
    (``DEFAULT_MODES``) when unspecified, so equal variants compare (and deduplicate) equal.
    """

    compiler: str = "eager"
    compile_mode: str | None = None
    precision: str = "fp32"
    memory_format: str = "contiguous"
    cuda_graphs: bool = False
    threads: int | None = None
    #: Pad the traffic's dynamic dimensions up to the recipe's buckets (``data.buckets``) before each call,
    #: so a shape-specialising variant sees a few fixed shapes (``+buckets``; ``search.shapes``).
    buckets: bool = False
    #: The process environment the variant runs in (:mod:`autotune.core.process_env`: ``jemalloc``,
    #: ``glibc-tuned+omp-passive``, ...); fixed when a worker starts, so the runner picks the worker by it.
    environment: str = DEFAULT

    def __post_init__(self) -> None:
        where = f"variant {self.compiler!r}"
        if self.compiler not in COMPILERS:
            raise _bad("variant", "compiler", str(self.compiler), str(self.compiler), COMPILERS)
        if self.compiler in MODES_BY_COMPILER:
            if self.compile_mode is None:
                object.__setattr__(self, "compile_mode", DEFAULT_MODES[self.compiler])
            elif self.compile_mode not in MODES_BY_COMPILER[self.compiler]:
                raise _bad("variant", f"{self.compiler} mode", str(self.compile_mode), where,
                           MODES_BY_COMPILER[self.compiler])
        elif self.compile_mode is not None:
            raise InputError(f"{where}: only {', '.join(MODES_BY_COMPILER)} take a mode (got {self.compile_mode!r})")
        if self.precision not in PRECISIONS:
            raise _bad("variant", "precision", str(self.precision), where, PRECISIONS)
        if self.memory_format not in MEMORY_FORMATS:
            raise _bad("variant", "memory format", str(self.memory_format), where, MEMORY_FORMATS)
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise InputError(f"{where}: threads must be a positive integer (got {self.threads!r})")
        object.__setattr__(self, "environment", ProcessEnvironment.parse(self.environment, field="variant").name)
        if self.cuda_graphs and self.compiler == "compile":
            raise InputError(
                f"{where}: 'cudagraphs' cannot be combined with torch.compile; "
                "use 'compile:reduce-overhead' (inductor's own CUDA graphs) instead"
            )

    @property
    def name(self) -> str:
        """Canonical text: defaults left out, modifiers in a fixed order."""
        base = self.compiler
        if self.compiler in MODES_BY_COMPILER and self.compile_mode != DEFAULT_MODES[self.compiler]:
            base = f"{self.compiler}:{self.compile_mode}"
        parts = [base]
        if self.precision != "fp32":
            parts.append(self.precision)
        if self.memory_format != "contiguous":
            parts.append(self.memory_format)
        if self.buckets:
            parts.append("buckets")
        if self.cuda_graphs:
            parts.append("cudagraphs")
        if self.threads is not None:
            parts.append(f"threads={self.threads}")
        parts.extend(self.process_environment.modifiers)
        return "+".join(parts)

    @property
    def process_environment(self) -> ProcessEnvironment:
        return ProcessEnvironment.parse(self.environment, field="variant")

    @property
    def base_name(self) -> str:
        """The name without the process environment (what the worker builds; boundaries are per base)."""
        return replace(self, environment=DEFAULT).name

    @property
    def is_torchscript(self) -> bool:
        return self.compiler in _TORCHSCRIPT

    @property
    def is_quantized(self) -> bool:
        """An int8 variant: the build quantizes the model (:data:`QUANTIZED_PRECISIONS`)."""
        return self.precision in QUANTIZED_PRECISIONS

    @property
    def is_runtime(self) -> bool:
        """Run by ONNX Runtime or OpenVINO rather than by torch (:mod:`autotune.worker.variants.runtimes`)."""
        return self.compiler in RUNTIMES

    @property
    def uses_cuda_graphs(self) -> bool:
        """Explicit capture, or a torch.compile mode that captures CUDA graphs itself."""
        return self.cuda_graphs or (
            self.compiler == "compile" and self.compile_mode in _MODES_WITH_CUDAGRAPHS
        )

    @classmethod
    def parse(cls, text: str, *, field: str = "variants") -> VariantSpec:
        """Read ``COMPILER[:MODE](+MODIFIER)*``; modifiers: a precision, a memory format, ``buckets``,
        ``cudagraphs``, ``threads=N``, a process environment's parts (an allocator, an OpenMP setting). Case and
        spaces around tokens are ignored.

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
            # only when set: spec dicts stored before the modifier existed read back the same
            **({"buckets": True} if self.buckets else {}),
            **({"environment": self.environment} if self.environment != DEFAULT else {}),
        }


_MODIFIERS_HELP: tuple[str, ...] = (*PRECISIONS, *MEMORY_FORMATS, "buckets", "cudagraphs", "threads=N",
                                     *ALLOCATORS, *OMP_SETTINGS)
_BASE_HELP: tuple[str, ...] = (*COMPILERS, *(f"{c}:{m}" for c, modes in MODES_BY_COMPILER.items() for m in modes))


def _parse_base(token: str, text: str, field_name: str) -> tuple[str, str | None]:
    compiler, sep, mode = token.partition(":")
    compiler, mode = compiler.strip(), mode.strip()
    if compiler not in COMPILERS:
        raise _bad(field_name, "compiler", token, text, _BASE_HELP)
    if not sep:
        return compiler, None
    if compiler not in MODES_BY_COMPILER:
        takes = "; ".join(f"{c}:{'|'.join(modes)}" for c, modes in MODES_BY_COMPILER.items())
        raise InputError(
            f"{field_name}: '{token}' in '{text}': only {', '.join(MODES_BY_COMPILER)} take a mode "
            f"({takes}); did you mean '{compiler}'?"
        )
    if mode not in MODES_BY_COMPILER[compiler]:
        what = "torch.compile mode" if compiler == "compile" else f"{compiler} mode"
        raise _bad(field_name, what, mode, text, MODES_BY_COMPILER[compiler])
    return compiler, mode


def parse_variant_name(text: str) -> VariantSpec:
    """A recipe's ``search.variants`` entry checked for its grammar (``all`` allowed, with modifiers); raises
    :class:`InputError` as :meth:`VariantSpec.parse` does."""
    spec, _, _ = _parse(text, field_name="variants", allow_all=True)
    return spec


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
    buckets = False
    threads: int | None = None
    allocator: str | None = None
    omp: str | None = None
    seen: set[str] = set()
    for tok in modifiers:
        key = "threads" if tok.startswith("threads") else tok
        if tok in ALLOCATORS:
            if allocator is not None:
                raise InputError(f"{field_name}: two allocators in '{text}' ('{allocator}' and '{tok}')")
            allocator = tok
            continue
        if tok in OMP_SETTINGS:
            if omp is not None:
                raise InputError(f"{field_name}: two OpenMP settings in '{text}' ('{omp}' and '{tok}')")
            omp = tok
            continue
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
        elif tok == "buckets":
            buckets = True
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
        buckets=buckets,
        environment=ProcessEnvironment(allocator=allocator or DEFAULT, omp=omp).name,
    )
    return spec, precision is not None, memory_format is not None
