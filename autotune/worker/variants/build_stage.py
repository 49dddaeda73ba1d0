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
    the source location further down; the summary skips schema lines and appends the location.
    """
    import re

    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    informative = [ln for ln in lines if not (ln.endswith(":") and "->" in ln) and ln != ":"]
    head = (informative or lines or [""])[0].rstrip(":").strip()
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
