"""A ``[generate]`` configuration made real: the model at its precision and attention, and ``generate``'s kwargs.

The same code builds what is measured and what the artifact's ``load.py`` builds (``load.py`` carries a copy of
:func:`generate_kwargs`' rules in its own words, and ``tests/test_generate_e2e`` holds the artifact's greedy
tokens to the measured ones). Compile is transformers' own path: with a static cache and a ``CompileConfig``,
``generate`` compiles the model's forward for the decode steps (the prefill stays eager: its shape changes with
every prompt), so what is measured is what a transformers user deploying this setting runs.
"""

from __future__ import annotations

from typing import Any

import torch

from autotune.core.recipe import GenerateConfig as Config
from autotune.errors import UnsupportedSettingError, VariantError, WorkloadError
from autotune.worker.devices import DeviceBackend

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_generative(model: torch.nn.Module, *, where: str) -> None:
    """A model ``generate`` can run: transformers' ``GenerationMixin`` with a ``config``."""
    if not callable(getattr(model, "generate", None)) or not hasattr(model, "config") \
            or not hasattr(model, "generation_config"):
        raise WorkloadError(f"{where}: field 'model.factory': returned {type(model).__name__}, which has no "
                            "transformers generate() (a [generate] recipe needs a causal LM, e.g. "
                            "AutoModelForCausalLM.from_config(...))")
    if getattr(model.config, "is_encoder_decoder", False):
        # a causal LM's output continues its prompt, and the new tokens are what follows it; an encoder-decoder's
        # decoder starts afresh, so that cut left nothing, and every token check passed on empty lists (T5)
        raise WorkloadError(f"{where}: field 'model.factory': returned {type(model).__name__}, an encoder-decoder "
                            "model (config.is_encoder_decoder): a [generate] recipe times and checks a causal LM's "
                            "generate(), whose output continues the prompt (e.g. AutoModelForCausalLM"
                            ".from_config(...))")


def vocab_size(model: torch.nn.Module) -> int:
    cfg: Any = model.config
    size = getattr(cfg, "vocab_size", None) or getattr(cfg.get_text_config(), "vocab_size", None)
    if not size:
        raise WorkloadError(f"{type(model).__name__}'s config has no vocab_size")
    return int(size)


def pad_token_id(model: torch.nn.Module) -> int:
    gc: Any = model.generation_config
    for value in (gc.pad_token_id, gc.eos_token_id, getattr(model.config, "pad_token_id", None)):
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, int):
            return value
    return 0


def prepare_model(model: torch.nn.Module, config: Config, *, backend: DeviceBackend) -> list[str]:
    """The model set to the configuration's attention and precision, in place; notes for the report."""
    notes: list[str] = []
    try:
        model.set_attn_implementation(config.attention)  # type: ignore[operator]
    except (ValueError, ImportError, AttributeError) as exc:
        raise UnsupportedSettingError(f"attention {config.attention!r}: {type(model).__name__} does not support it "
                           f"({str(exc).splitlines()[0][:200]})") from None
    if config.precision in _DTYPES:
        if config.precision != "fp32":
            _check_native(config.precision, backend)
            model.to(_DTYPES[config.precision])
        return notes
    try:
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_
    except ImportError:
        raise VariantError("torchao not installed; install with: pip install 'autotune[quant]'") from None
    if config.precision == "int4":
        if not backend.capabilities().int4_weight_only:
            raise VariantError("int4 weight-only (torchao) needs a CUDA GPU: its kernels (tinygemm) are GPU-only")
        model.to(torch.bfloat16)
        quantize_(model, Int4WeightOnlyConfig())
        notes.append("int4: bf16 activations, torchao Int4WeightOnlyConfig on every Linear")
    else:
        quantize_(model, Int8WeightOnlyConfig())
        notes.append("int8: fp32 activations, torchao Int8WeightOnlyConfig on every Linear")
    return notes


def _check_native(precision: str, backend: DeviceBackend) -> None:
    caps = backend.capabilities()
    if not (caps.bf16 if precision == "bf16" else caps.fp16):
        raise VariantError(f"{precision} is not native on this {backend.type} (on a CPU: no "
                           f"{'AVX512_BF16/AMX_BF16' if precision == 'bf16' else 'AVX512_FP16/AMX_FP16'} in "
                           "torch.cpu.get_capabilities()); emulated, it would only be slower")


def generate_kwargs(config: Config, *, pad_id: int, max_cache_len: int, backend: DeviceBackend) -> dict[str, Any]:
    """``generate``'s keyword arguments for the configuration (greedy; ``max_new_tokens`` set per call)."""
    kwargs: dict[str, Any] = {"do_sample": False, "num_beams": 1, "pad_token_id": pad_id}
    if config.cache == "static":
        kwargs["cache_implementation"] = "static"
        # sized once for the longest bucket and the most new tokens: every call then reuses one cache shape, and
        # a compiled decode step is compiled once (a cache sized per call recompiles on every new length)
        kwargs["max_cache_len"] = max_cache_len
    if config.compile != "none":
        from transformers import CompileConfig

        cc: Any = CompileConfig(mode=config.compile, fullgraph=False)
        if not backend.device_memory:
            cc._compile_all_devices = True  # transformers compiles on accelerators only unless told (CPU: here)
        kwargs["compile_config"] = cc
    else:
        kwargs["disable_compile"] = True  # a static cache on a GPU would otherwise auto-compile
    return kwargs
