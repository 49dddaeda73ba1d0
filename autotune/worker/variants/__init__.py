"""The variant catalogue: the ways one model can be executed, and how to build each of them.

A *variant* is one point in a small product space of independent dimensions:

* **compiler** — ``eager``; TorchScript ``script`` / ``trace``; ``frozen`` (TorchScript +
  ``torch.jit.freeze`` + ``torch.jit.optimize_for_inference``); ``compile`` (``torch.compile`` with
  inductor, mode ``default`` / ``reduce-overhead`` / ``max-autotune`` / ``max-autotune-no-cudagraphs``);
  ``export`` (``torch.export`` + AOTInductor, an ahead-of-time compiled ``.pt2`` package);
  the deployment runtimes ``onnx`` (ONNX Runtime, option ``default`` / ``parallel``) and ``openvino``
  (option ``latency`` / ``throughput``, OpenVINO's performance hint), built in :mod:`autotune.worker.variants.runtimes`;
* **precision** — ``fp32``, pure ``bf16`` / ``fp16`` (weights and floating inputs cast), or
  ``autocast-bf16`` / ``autocast-fp16`` (fp32 weights, ``torch.autocast`` picks per-op dtypes), or ``int8`` /
  ``int8-static`` (the model quantized in the build, calibrated on the traffic where the method needs it:
  :mod:`autotune.worker.variants.quantize` says which quantizer serves which compiler, and why);
* **memory format** — ``contiguous`` or ``channels_last`` (4-D float inputs and conv weights);
* **cudagraphs** — an explicit ``torch.cuda.CUDAGraph`` capture around the call (CUDA only);
* **threads** — ``torch.set_num_threads(N)`` while the variant runs (CPU only).

A variant is named by text so that recipes, the search space, the worker protocol and the report
all speak the same language: ``COMPILER[:MODE]`` followed by ``+``-separated modifiers, e.g.
``compile:max-autotune+bf16+channels_last``, ``frozen+threads=2``, ``eager+cudagraphs``.
Defaults (``fp32``, ``contiguous``, mode ``default``) are left out of the canonical name, so
``VariantSpec.parse(spec.name) == spec`` for every spec.

Why the module is split the way it is:

* The naming half (:class:`VariantSpec`, the grammar and vocabulary) is
  :mod:`autotune.core.variant_names`, in the shared core: it imports no torch, so any process can read and
  write variant names. This package (in the worker) re-exports it, and imports torch lazily in
  :func:`available` and the build half.
* :func:`available` answers "can this run *here*, and is it worth trying" with a reason, before
  any time is spent; :func:`build_variant` turns a spec into a callable and converts every build
  failure into a one-line :class:`~autotune.errors.VariantError`, so one broken variant (a model
  TorchScript cannot compile, an export that breaks) is reported as ``failed`` and the run goes on.
* Whether the variant still computes the same function is *not* decided here: that is the
  correctness gate in :mod:`autotune.worker.correctness`, which every built variant passes before timing.

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
* **Shapes**: a variant is built per batch size (``BuiltVariant.shape_specialized``) on the traffic's
  largest batch. ``compile`` uses ``dynamic=False`` unless a non-batch dim varies in the traffic
  (:func:`compile_dynamic`; a new shape recompiles, which :func:`recompile_count` exposes); ``export`` and
  the runtimes leave the batch dim and the traffic's varying dims dynamic (``build_variant(dynamic_dims=)``),
  so a deployment takes every batch size up to the one it was built for; ``cudagraphs`` is static.
* **Threads** are applied when the variant is built (inductor bakes the thread count into its
  generated C++) and re-asserted on every call (cheap: one ``get_num_threads``), so variants with
  different thread counts can be interleaved in one process.

The package, one module per part: :mod:`~autotune.core.variant_names` (names and the grammar, no torch),
:mod:`~autotune.worker.variants.expand` (the recipe's selection turned into specs),
:mod:`~autotune.worker.variants.availability`, :mod:`~autotune.worker.variants.build` and
:mod:`~autotune.worker.variants.dynamo_state` (recompiles, graph breaks, reset). It re-exports the public names.
"""

from autotune.core.variant_names import (
    ALL_BASES,
    COMPILE_MODES,
    COMPILERS,
    DEFAULT_MODES,
    MEMORY_FORMATS,
    MODES_BY_COMPILER,
    ONNX_MODES,
    OPENVINO_MODES,
    PRECISIONS,
    RUNTIMES,
    VariantSpec,
)
from autotune.worker.variants.availability import Availability, available, cpu_native_precision, thread_counts
from autotune.worker.variants.build import BuiltVariant, build_variant, compile_dynamic
from autotune.worker.variants.build_stage import summarize_exception
from autotune.worker.variants.dynamo_state import graph_break_count, recompile_count, reset_compiler_state
from autotune.worker.variants.expand import expand_variants

__all__ = [
    "ALL_BASES",
    "COMPILERS",
    "COMPILE_MODES",
    "DEFAULT_MODES",
    "MEMORY_FORMATS",
    "MODES_BY_COMPILER",
    "ONNX_MODES",
    "OPENVINO_MODES",
    "PRECISIONS",
    "RUNTIMES",
    "Availability",
    "BuiltVariant",
    "VariantSpec",
    "available",
    "build_variant",
    "compile_dynamic",
    "cpu_native_precision",
    "expand_variants",
    "graph_break_count",
    "recompile_count",
    "reset_compiler_state",
    "summarize_exception",
    "thread_counts",
]
