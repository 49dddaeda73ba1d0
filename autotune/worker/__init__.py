"""The worker (see :mod:`autotune.worker.ops`); names are re-exported lazily so importing the package needs no torch."""

from typing import Any


def __getattr__(name: str) -> Any:
    import autotune.worker.ops as ops

    try:
        return getattr(ops, name)
    except AttributeError:
        raise AttributeError(f"module 'autotune.worker' has no attribute {name!r}") from None
