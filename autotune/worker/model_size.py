"""A variant's model size as it stores it: the report's ``model size`` (``model_bytes`` in the measure result)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from autotune.worker.variants import BuiltVariant


def model_bytes(built: BuiltVariant, model: torch.nn.Module) -> int | None:
    """The model's size as the variant stores it: what its builder measured (``BuiltVariant.model_bytes``: an
    ``.onnx`` file, an IR's ``.bin``, a quantized state_dict), else the eager model's parameters and buffers at the
    variant's precision (each storage once; floats at 2 bytes for a ``+bf16``/``+fp16`` cast, as they are for
    autocast and the runtimes: fp32 weights, converted per op or inside the runtime). None for int8 without a
    builder's number (its size depends on what the quantizer packed)."""
    if built.model_bytes is not None:
        return int(built.model_bytes)
    precision = built.spec.precision
    if precision == "int8":
        return None
    half = precision in ("bf16", "fp16") and not built.spec.is_runtime
    seen: dict[tuple[int, int], int] = {}
    for t in [*model.parameters(), *model.buffers()]:
        size = 2 if half and t.is_floating_point() else t.element_size()
        key = (int(t.untyped_storage().data_ptr()), int(t.storage_offset()))
        seen[key] = t.numel() * size
    return sum(seen.values())


__all__ = ["model_bytes"]
