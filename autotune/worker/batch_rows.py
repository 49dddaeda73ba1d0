"""Whether dim 0 of the inputs is a batch: each row answered as if it were alone in its call.

Why: every figure of a batch loop (samples/s at batch B, the batch boundary, a server merging requests) assumes
that a call on B rows is B independent samples. A model whose dim 0 is something else breaks that silently:
``nn.LSTM``, ``nn.GRU``, ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` without
``batch_first=True`` read dim 0 as the sequence, so "batch 4" is four time steps of one sequence, its throughput
compares other computations, and the rows' answers depend on each other (an LSTM's second step carries the first's
state). An output that couples the rows on purpose (CLIP's ``(rows, rows)`` similarities, in-batch negatives, a
norm over the batch) is the same fact seen from the other side: a batch of B gives other answers than B calls of 1.

The check, at validation (two rows of the example batch: the gate's random inputs, or the traffic's)::

    solo_j   = model(row j alone)                       j = 0, 1
    merged   = model(rows 0 and 1)
    per output leaf: the dim of merged that holds both rows (twice solo's size there, equal elsewhere; an LSTM's
                     h_n holds them in dim 1), cut into the rows' parts; an output of solo's shape is one value
                     for the whole call and must equal each row's
    coupled  = no such dim (CLIP's (rows, rows) grows in two), or a part moves from its row's solo answer by more
               than MERGE_TOLERANCE of its largest value (autotune.core.merging.answer_moved, the server's
               test for merging requests; kernels chosen per batch size move float32 outputs by ~1e-6 of it)

The verdict is a warning with the reason, never an error: a coupled model may be what the user means (CLIP
scores pairs within a batch). Where the model holds a sequence-first module, the warning names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from autotune.core.merging import answer_moved

#: Modules that take ``batch_first`` and read dim 0 as the sequence when it is False (torch's default).
SEQUENCE_FIRST = (torch.nn.RNNBase, torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer,
                  torch.nn.TransformerDecoderLayer, torch.nn.Transformer)


def _leaves(out: Any) -> tuple[list[str], list[np.ndarray]]:
    """The output's tensors in pytree order as numpy (floats as float32), with their paths (``[0]``, ``['logits']``)."""
    import torch.utils._pytree as pytree

    names: list[str] = []
    arrays: list[np.ndarray] = []
    for path, leaf in pytree.tree_flatten_with_path(out)[0]:
        if isinstance(leaf, torch.Tensor):
            t = leaf.detach().cpu()
            names.append(pytree.keystr(path) or "output")
            arrays.append((t.float() if t.is_floating_point() else t).numpy())
    return names, arrays


def sequence_first_modules(model: torch.nn.Module) -> list[str]:
    """``name (nn.Class)`` of each module that reads dim 0 as the sequence (``batch_first=False``)."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, SEQUENCE_FIRST) and not getattr(module, "batch_first", True):
            found.append(f"{name or 'the model'} (nn.{type(module).__name__})")
    return found


def _parts(a: np.ndarray, m: np.ndarray) -> list[np.ndarray] | None:
    """``m`` (the two-row call's output) cut into the rows' parts along the dim that holds both rows (twice the
    one-row size there, the same size elsewhere; dim 0 first: an LSTM's ``h_n`` is ``(layers, batch, hidden)``), or
    None where no dim does."""
    if m.ndim != a.ndim:
        return None
    for d in range(m.ndim):
        n = a.shape[d]
        if n and m.shape[d] == 2 * n and all(m.shape[k] == a.shape[k] for k in range(m.ndim) if k != d):
            return [np.take(m, range(0, n), axis=d), np.take(m, range(n, 2 * n), axis=d)]
    return None


def check_rows(call: Any, batch: Sequence[torch.Tensor], model: torch.nn.Module) -> dict[str, Any] | None:
    """``{"independent": bool, "why": str | None}`` for the first two rows of ``batch`` run through ``call(batch)``
    (the traffic layout's call of the model), or None where the check cannot be made: fewer than two rows, an
    input without them, a model that fails on one row, or an output whose structure changes with the rows (a list
    with one entry per image)."""
    if not batch or any(t.dim() == 0 or t.shape[0] < 2 for t in batch):
        return None
    try:
        with torch.inference_mode():
            names, merged = _leaves(call(tuple(t[:2] for t in batch)))
            solo = [_leaves(call(tuple(t[j:j + 1] for t in batch)))[1] for j in (0, 1)]
    except Exception:  # a model that squeezes a batch of one (validation runs at 2 for it): not a verdict
        return None
    if not merged or any(len(s) != len(merged) for s in solo):
        return None
    why = None
    for i, (name, m) in enumerate(zip(names, merged, strict=True)):
        a0, a1 = solo[0][i], solo[1][i]
        parts = _parts(a0, m) if a0.shape == a1.shape else None
        if parts is None and m.shape == a0.shape == a1.shape:  # one value for the call: the same as each row's?
            parts = [m, m]
        if parts is None:
            why = (f"output {name} is {a0.shape} for one row and {m.shape} for two: no dim of it holds one part "
                   "per row (a size that follows the rows in more than one dim scores the rows against each other)")
            break
        moved = [(j, how) for j, (a, part) in enumerate(zip((a0, a1), parts, strict=True))
                 if (how := answer_moved(a, part))]
        if moved:
            j, how = moved[0]
            why = (f"output {name} of row {j} {how} when another row shares its call: its answer depends on the "
                   "other rows")
            break
    if why is None:
        return {"independent": True, "why": None}
    first = sequence_first_modules(model)
    if first:
        why += (f"; {', '.join(first[:3])} {'reads' if len(first) == 1 else 'read'} dim 0 as the sequence "
                "(batch_first=False): set batch_first=True, or give the inputs batch-first")
    return {"independent": False, "why": why}


__all__ = ["SEQUENCE_FIRST", "check_rows", "sequence_first_modules"]
