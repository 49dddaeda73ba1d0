"""A build stage of a variant: its warnings kept as notes, its failure one line a report row can hold.

Every builder (TorchScript, torch.compile, export, the ONNX Runtime and OpenVINO runtimes) runs its
stages through :func:`silenced_build`, so a failing stage becomes a :class:`VariantError` with a one-line
summary (:func:`summarize_exception`) and an out-of-memory error stays itself (the caller's to
classify as ``oom``: the one rule in :mod:`autotune.worker.devices`). Its own module so that
:mod:`autotune.worker.variants` and :mod:`autotune.worker.variants.runtimes` share it without importing each other.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

from autotune.errors import VariantError

#: Distinct warnings of one stage kept as notes (the rest are dropped).
MAX_WARNING_NOTES = 3


def summarize_exception(exc: BaseException, *, limit: int = 300) -> str:
    """``Type: the message's first informative line (file:line)`` — what a report row has room for.

    TorchScript errors start with context (blank lines, an operator schema ending in ``:``) and put
    the source location further down; the summary skips schema lines and appends the location. OpenVINO's
    conversion failures start with the C++ check that failed ("Check 'false' failed at src/frontends/...") and end
    with a ``Summary:`` of the operations it could not convert (a GPT-2 export: "No conversion rule found for
    operations: aten::diff"), which is what the row keeps.
    """
    import re

    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    informative = [ln for ln in lines if not (ln.endswith(":") and "->" in ln) and ln != ":"]
    head = (informative or lines or [""])[0].rstrip(":").strip()
    if "Summary:" in lines:  # OpenVINO's conversion report: its summary names the ops, its first line a C++ check
        head = "; ".join(ln.lstrip("- ").strip() for ln in lines[lines.index("Summary:") + 1:]) or head
    where = re.search(r'File "([^"]+)", line (\d+)', text)
    if where and where.group(0) not in head:
        head = f"{head} ({os.path.basename(where.group(1))}:{where.group(2)})"
    if len(head) > limit:
        head = head[: limit - 3].rstrip() + "..."
    return f"{type(exc).__name__}: {head}" if head else type(exc).__name__


def _is_oom(exc: BaseException) -> bool:
    """Out of memory is the caller's to classify (``oom``, not ``failed``): the one rule in devices."""
    from autotune.worker.devices import is_oom

    return is_oom(exc)


def silenced_build(stage: str, notes: list[str], body: Callable[[], Any]) -> Any:
    """Run one build stage: TorchScript deprecation warnings dropped, other warnings kept as notes,
    every exception (but out-of-memory) turned into a one-line ``VariantError``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = body()
        except VariantError:
            raise
        except Exception as exc:
            if _is_oom(exc):
                raise
            raise VariantError(f"{stage} failed: {summarize_exception(exc)}") from exc
    seen: set[str] = set()
    for w in caught:
        text = str(w.message).strip().splitlines()[0] if str(w.message).strip() else type(w.message).__name__
        if issubclass(w.category, (FutureWarning, DeprecationWarning)) and (
            "deprecat" in text.lower() or "not supported in python" in text.lower()
        ):
            continue
        if text in seen or len(seen) >= MAX_WARNING_NOTES:
            continue
        seen.add(text)
        first_sentence = text.split(". ")[0].rstrip(".")
        notes.append(f"{stage} warned: {w.category.__name__}: {first_sentence[:200]}")
    return result


def non_tensor_outputs(output: Any) -> str | None:
    """The leaves of a model's output that are not tensors, as "['past_key_values'] (DynamicCache)", with what to do
    for a transformers cache; None when every leaf is a tensor.

    Why: a traced or exported graph returns tensors only. transformers' GPT2LMHeadModel returns its key/value cache
    beside the logits while ``use_cache`` is on (its default), a ``DynamicCache`` object; trace failed with the
    tracer's dump of the logits ("Tracer cannot infer type of (tensor([[[ 0.1864, ..."), onnx and openvino with
    "non-tensor outputs", and neither said which output or what to do."""
    import torch
    import torch.utils._pytree as pytree

    odd = [(pytree.keystr(path) or "the output", type(leaf).__name__)
           for path, leaf in pytree.tree_flatten_with_path(output)[0] if not isinstance(leaf, torch.Tensor)]
    if not odd:
        return None
    text = ", ".join(f"{p} ({t})" for p, t in odd[:3]) + (f" and {len(odd) - 3} more" if len(odd) > 3 else "")
    if any("Cache" in t for _, t in odd):
        text += ("; a transformers model returns its key/value cache while use_cache is on (its default): build it "
                 "with use_cache=False in its config, or have the factory return only the tensors you need")
    return text

