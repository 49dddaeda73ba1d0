"""The prompts a ``[generate]`` recipe is measured on, and the batches ``generate`` is called with.

Random prompts (seeded) of the recipe's lengths, or the user's factory's. Each call takes the next
``concurrency`` prompts (cyclically, so every configuration at a concurrency sees the same batches in the same
order), left-padded to a multiple of the bucket (decoder-only models pad on the left so every sequence's last
token is where decoding starts). A static batch decodes until its longest prompt's new tokens are out: the
tokens past each prompt's own count are generated and thrown away, and only the useful ones count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from autotune.core.recipe import GenerateSpec, ModelSpec, Recipe
from autotune.core.recipe.generate import bucket_length
from autotune.errors import WorkloadError
from autotune.worker.factory import one_line, resolve_factory


@dataclass(frozen=True)
class Prompt:
    ids: tuple[int, ...]
    #: the new tokens this prompt asks for (its draw from ``generate.new_tokens``)
    new_tokens: int


@dataclass(frozen=True)
class PromptBatch:
    """One ``generate`` call's inputs: which prompts, padded to ``length`` (a bucket), decoding ``new_tokens``."""

    indices: tuple[int, ...]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    new_tokens: int
    useful_tokens: int

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[1])


def make_prompts(recipe: Recipe, vocab_size: int) -> list[Prompt]:
    """The workload's prompts: the factory's, else ``prompt_count`` random ones cycling through the lengths."""
    spec = recipe.generate
    assert spec is not None
    rng = np.random.default_rng(spec.seed)
    if spec.prompts is not None:
        raw = _factory_prompts(recipe, spec)
    else:
        # ids from 3 up: small ids are often special tokens (bos, eos, pad) in real vocabularies
        low = min(3, vocab_size - 1)
        raw = [rng.integers(low, vocab_size, size=spec.prompt_lengths[i % len(spec.prompt_lengths)]).tolist()
               for i in range(spec.prompt_count)]
    draws = rng.choice(np.array(spec.new_tokens), size=len(raw))
    for i, ids in enumerate(raw):
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise WorkloadError(f"{recipe.path}: field 'generate.prompts': prompt {i} has token id {bad[0]}, "
                                f"outside the model's vocabulary [0, {vocab_size})")
    return [Prompt(tuple(int(t) for t in ids), int(n)) for ids, n in zip(raw, draws, strict=True)]


def _factory_prompts(recipe: Recipe, spec: GenerateSpec) -> list[list[int]]:
    where = f"{recipe.path}: field 'generate.prompts'"
    ref = ModelSpec(factory=str(spec.prompts), kwargs=dict(spec.prompts_kwargs), base_dir=spec.base_dir)
    factory = resolve_factory(ref, recipe_path=recipe.path, field="generate.prompts")
    try:
        got = factory(**dict(spec.prompts_kwargs))
    except Exception as exc:
        raise WorkloadError(f"{where}: '{spec.prompts}' raised: {one_line(exc)}") from None
    if not isinstance(got, Sequence) or isinstance(got, str | bytes) or not got:
        raise WorkloadError(f"{where}: '{spec.prompts}' returned {type(got).__name__}; expected a non-empty list "
                            "of prompts (token-id lists, 1-D tensors, or dicts with input_ids)")
    return [_prompt_ids(p, i, where) for i, p in enumerate(got)]


def _prompt_ids(p: Any, i: int, where: str) -> list[int]:
    mask = None
    if isinstance(p, dict):
        if "input_ids" not in p:
            raise WorkloadError(f"{where}: prompt {i} is a dict without 'input_ids' (keys: {sorted(p)})")
        mask, p = p.get("attention_mask"), p["input_ids"]
    ids = torch.as_tensor(p)
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise WorkloadError(f"{where}: prompt {i} is not a non-empty 1-D sequence of integer token ids "
                            f"(shape {tuple(ids.shape)}, dtype {ids.dtype})")
    if mask is not None:
        m = torch.as_tensor(mask).reshape(-1).bool()
        if m.shape != ids.shape:
            raise WorkloadError(f"{where}: prompt {i}'s attention_mask has {m.numel()} values for {ids.numel()} ids")
        ids = ids[m]
    return [int(t) for t in ids.tolist()]


def batches(prompts: Sequence[Prompt], concurrency: int, count: int, *, bucket: int, pad_id: int,
            device: torch.device, start: int = 0, longest: bool = False) -> list[PromptBatch]:
    """``count`` consecutive batches of ``concurrency`` prompts from call ``start`` on (prompts taken cyclically).

    ``longest``: every sequence padded to the longest bucket and every batch decoding the most new tokens (the
    memory probe's worst case), not its own.
    """
    spec_longest = bucket_length(max(len(p.ids) for p in prompts), bucket)
    most_tokens = max(p.new_tokens for p in prompts)
    out = []
    for call in range(start, start + count):
        idx = tuple((call * concurrency + j) % len(prompts) for j in range(concurrency))
        chosen = [prompts[i] for i in idx]
        length = spec_longest if longest else bucket_length(max(len(p.ids) for p in chosen), bucket)
        ids = torch.full((concurrency, length), pad_id, dtype=torch.long)
        mask = torch.zeros((concurrency, length), dtype=torch.long)
        for row, p in enumerate(chosen):
            ids[row, length - len(p.ids):] = torch.tensor(p.ids, dtype=torch.long)
            mask[row, length - len(p.ids):] = 1
        new = most_tokens if longest else max(p.new_tokens for p in chosen)
        useful = sum(most_tokens if longest else p.new_tokens for p in chosen)
        out.append(PromptBatch(idx, ids.to(device), mask.to(device), new, useful))
    return out


def calls_covering(prompts: Sequence[Prompt], concurrency: int) -> int:
    """Calls from call 0 on after which every prompt has been in a batch at least once."""
    return math.ceil(len(prompts) / concurrency)
