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

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from autotune.errors import InputError

_KEY = re.compile(r"b(\d+)\.(.+)")


def load_batches(path: Path, names: Sequence[str] | None = None) -> list[dict[str, np.ndarray]]:
    """The traffic file's batches in order, each ``{input name: array}`` (inputs in ``names`` order if given)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            found: dict[int, dict[str, np.ndarray]] = {}
            for key in data.files:
                m = _KEY.fullmatch(key)
                if m is None:
                    raise InputError(f"{path}: key {key!r} is not of the form b<index>.<input>")
                found.setdefault(int(m.group(1)), {})[m.group(2)] = data[key]
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable traffic file (.npz): {exc}") from exc
    if not found:
        raise InputError(f"{path}: holds no batches")
    batches = [found[i] for i in sorted(found)]
    if names is not None:
        for i, b in enumerate(batches):
            if sorted(b) != sorted(names):
                raise InputError(f"{path}: batch {i} has inputs {sorted(b)}, the model takes {list(names)}")
        batches = [{n: b[n] for n in names} for b in batches]
    return batches


def _dynamic_axes(batches: Sequence[Mapping[str, np.ndarray]]) -> dict[str, list[int]]:
    """Per input, the non-batch axes whose size differs between batches."""
    out: dict[str, list[int]] = {}
    for name, first in batches[0].items():
        out[name] = [d for d in range(1, first.ndim)
                     if len({b[name].shape[d] for b in batches}) > 1]
    return out


def _trim(row: dict[str, np.ndarray], axes: Mapping[str, list[int]], pad: Mapping[str, float]) -> dict[str, np.ndarray]:
    """Cut trailing positions of each dynamic axis where every input that has that axis size holds its pad."""
    out = dict(row)
    lengths = {(n, d): row[n].shape[d] for n, ds in axes.items() for d in ds}
    if not lengths:
        return out
    size = max(lengths.values())
    keep = 0
    for n, ds in axes.items():
        for d in ds:
            a = np.moveaxis(row[n], d, 1)
            live = np.any((a != pad.get(n, 0)).reshape(a.shape[0], a.shape[1], -1), axis=(0, 2))
            idx = np.nonzero(live)[0]
            keep = max(keep, int(idx[-1]) + 1 if idx.size else 0)
    keep = max(keep, 1)
    if keep >= size:
        return out
    for n, ds in axes.items():
        for d in ds:
            if row[n].shape[d] == size:
                out[n] = np.take(out[n], np.arange(keep), axis=d)
    return out


def cut_requests(batches: Sequence[Mapping[str, np.ndarray]], samples: int | str = 1, *,
                 pad_values: Mapping[str, float] | None = None) -> list[dict[str, np.ndarray]]:
    """The traffic as requests: whole batches (``"batch"``), or ``samples`` consecutive rows each, with the
    dynamic dimensions trimmed to the rows' own length."""
    if samples == "batch":
        return [dict(b) for b in batches]
    if not isinstance(samples, int) or samples < 1:
        raise InputError(f"serving.request_samples: expected an integer >= 1 or \"batch\", got {samples!r}")
    axes = _dynamic_axes(batches)
    pad = dict(pad_values or {})
    out: list[dict[str, np.ndarray]] = []
    for b in batches:
        rows = next(iter(b.values())).shape[0]
        for start in range(0, rows - samples + 1, samples):
            row = {n: np.ascontiguousarray(a[start:start + samples]) for n, a in b.items()}
            out.append(_trim(row, axes, pad))
    if not out:
        raise InputError(f"serving.request_samples = {samples}: no batch of the traffic has that many rows")
    return out


__all__ = ["cut_requests", "load_batches"]
