"""The requests the serving search sends: the user's traffic (``artifact/traffic.npz``) cut into requests.

The artifact step saves the batches the recommendation was measured on (:func:`autotune.worker.artifact.
save_traffic`). A deployer's requests are usually one sample each, so by default every batch is cut into its
rows; a dynamic dimension (a sequence padded to the batch's longest) is trimmed back to the row's own length:
the trailing positions where every input holds its pad value (``data.pad_values``, 0 by default: the pad
token, mask off). ``request_samples = "batch"`` keeps the factory's batches whole, as a client that batches
itself would send them; ``request_samples = k`` sends k consecutive rows per request.

Pure numpy: the parent reads the file without torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from autotune.errors import InputError
from autotune.serving.tensors import dynamic_axes, read_traffic, trim


def load_batches(path: Path, names: Sequence[str] | None = None) -> list[dict[str, np.ndarray]]:
    """The traffic file's batches in order, each ``{input name: array}`` (inputs in ``names`` order if given)."""
    try:
        batches = read_traffic(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable traffic file (.npz): {exc}") from exc
    if not batches:
        raise InputError(f"{path}: holds no batches")
    if names is not None:
        for i, b in enumerate(batches):
            if sorted(b) != sorted(names):
                raise InputError(f"{path}: batch {i} has inputs {sorted(b)}, the model takes {list(names)}")
        batches = [{n: b[n] for n in names} for b in batches]
    return batches


def cut_requests(batches: Sequence[Mapping[str, np.ndarray]], samples: int | str = 1, *,
                 pad_values: Mapping[str, float] | None = None) -> list[dict[str, np.ndarray]]:
    """The traffic as requests: whole batches (``"batch"``), or ``samples`` consecutive rows each, with the
    dynamic dimensions trimmed to the rows' own length."""
    if samples == "batch":
        return [dict(b) for b in batches]
    if not isinstance(samples, int) or samples < 1:
        raise InputError(f"serving.request_samples: expected an integer >= 1 or \"batch\", got {samples!r}")
    axes = dynamic_axes(batches)
    pad = dict(pad_values or {})
    out: list[dict[str, np.ndarray]] = []
    for b in batches:
        rows = next(iter(b.values())).shape[0]
        for start in range(0, rows - samples + 1, samples):
            row = {n: np.ascontiguousarray(a[start:start + samples]) for n, a in b.items()}
            out.append(trim(row, axes, pad))
    if not out:
        raise InputError(f"serving.request_samples = {samples}: no batch of the traffic has that many rows")
    return out


__all__ = ["cut_requests", "load_batches"]
