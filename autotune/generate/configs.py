"""The ``[generate]`` configurations: cache x compile x attention x precision, named, ordered by simplicity.

Pure. The reference is dynamic-cache eager fp32 (``generate`` as a transformers user first calls it): its
greedy tokens are what every other configuration is checked against, and the ratio "static + compile vs
dynamic eager" is taken against it.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product

from autotune.core.recipe import GenerateConfig, GenerateSpec

#: Simplicity rank of each setting (lower: simpler to deploy and to trust): ties go to the simpler one.
_RANK = {"dynamic": 0, "static": 1, "none": 0, "default": 1, "reduce-overhead": 2,
         "max-autotune-no-cudagraphs": 3, "max-autotune": 3, "sdpa": 0, "eager": 1,
         "fp32": 0, "bf16": 1, "fp16": 1, "int8": 2, "int4": 3}


def lower_precision(config: GenerateConfig) -> bool:
    return config.precision != "fp32"


def simplicity(config: GenerateConfig) -> int:
    return sum(_RANK.get(v, 5) for v in (config.cache, config.compile, config.attention, config.precision)) + \
        (1 if config.threads else 0)


def reference(spec: GenerateSpec) -> GenerateConfig:
    """Dynamic cache, no compile, fp32, the recipe's first attention (sdpa when it lists it), torch's threads."""
    return reference_choices(spec)[0]


#: The attention every transformers model has: its own modules, what ``from_config`` falls back to where sdpa is
#: not supported. A model with no attention at all (Mamba, a state-space LM) accepts only this name.
OWN_ATTENTION = "eager"


def reference_choices(spec: GenerateSpec) -> list[GenerateConfig]:
    """The reference's attention in the order tried: sdpa when the recipe lists it, then the recipe's others, then
    the model's own (:data:`OWN_ATTENTION`) where the recipe does not list it. The next is tried only when the model
    does not support the one before: a Mamba under the default ``attention = ["sdpa"]`` recommended nothing,
    "sdpa: MambaForCausalLM does not support it" (session 38), where a transformers user gets eager."""
    order = (["sdpa"] if "sdpa" in spec.attention else []) + [a for a in spec.attention if a != "sdpa"]
    if OWN_ATTENTION not in order:
        order.append(OWN_ATTENTION)
    return [GenerateConfig(attention=a) for a in order]


def in_place_of(configs: list[GenerateConfig], attention: str) -> list[GenerateConfig]:
    """``configs`` with every attention replaced by ``attention``, duplicates dropped (order kept): the grid of a
    model that supports none of the recipe's attentions, measured with the one its reference runs."""
    out: list[GenerateConfig] = []
    for c in configs:
        c = replace(c, attention=attention)
        if c not in out:
            out.append(c)
    return out


def grid(spec: GenerateSpec) -> list[GenerateConfig]:
    """Every configuration the recipe asks for (compile only with the static cache), the reference first."""
    out = [reference(spec)]
    for cache, mode, attention, precision, threads in product(spec.cache, spec.compile, spec.attention,
                                                              spec.precisions, spec.threads or (0,)):
        if mode != "none" and cache != "static":
            continue
        c = GenerateConfig(cache, mode, attention, precision, threads)
        if c not in out:
            out.append(c)
    return out


def without_reference_twin(configs: list[GenerateConfig], ref: GenerateConfig,
                           default_threads: int | None) -> tuple[list[GenerateConfig], GenerateConfig | None]:
    """``configs`` without the reference's twin: the reference with its threads set to what torch's default is in
    a worker (``default_threads``), which runs exactly as the reference does; and that twin, or None.

    Why: ``threads = [1, 2]`` on a 2-core machine asked for ``dynamic/sdpa/fp32@2t`` beside the reference, whose
    torch default is 2 threads there: the same process measured twice, at every level, out of the budget (a Qwen2
    run's twins read 1,252 and 1,017 tokens/s at 4 sequences, session 41: what the machine's noise makes of one
    configuration). The other configurations keep the threads the recipe gave them."""
    if not default_threads or ref.threads:
        return configs, None
    twin = replace(ref, threads=default_threads)
    return ([c for c in configs if c != twin], twin) if twin in configs else (configs, None)


def from_label(label: str) -> GenerateConfig:
    """Inverse of :meth:`GenerateConfig.label` (for report.json read back)."""
    return GenerateConfig.from_label(label)
