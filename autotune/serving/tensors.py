"""The model's interface as the server sees it: requests checked against it, merged into one batch, and the
batch's outputs split back per request.

Why padding: a dynamic batcher only helps if requests of different sequence lengths can share a call, so inputs
whose non-batch dims differ between the batch's requests (the dynamic dims load.py declares) are right-padded
to the batch's largest with the input's pad value, and an output dim that equals a padded length is cut back to
each request's own length (the rule of Triton's and TorchServe's padding batchers, and of the artifact's own
``_pad`` / ``_unpad`` for buckets).

Pure (numpy only): copied beside ``serve.py`` into the artifact.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    from ..core.merging import (
        MERGE_TOLERANCE,
        Layout,
        batch_dims,
        combine,
        following_dims,
        merge_disagrees,
        split,
    )
    from .v2 import ProtocolError, datatype_of
except ImportError:  # flat files in the artifact
    from merging import (  # type: ignore[import-not-found,no-redef]
        MERGE_TOLERANCE,
        Layout,
        batch_dims,
        combine,
        following_dims,
        merge_disagrees,
        split,
    )
    from v2 import ProtocolError, datatype_of  # type: ignore[import-not-found,no-redef]


@dataclass(frozen=True)
class InputSpec:
    """One input: its dtype, its shape in the first batch (dim 0: any rows), the dims of any size, the pad value."""

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    dynamic: frozenset[int]
    pad: Any

    @property
    def datatype(self) -> str:
        return datatype_of(self.dtype)

    @property
    def metadata_shape(self) -> list[int]:
        return [-1 if d == 0 or d in self.dynamic else s for d, s in enumerate(self.shape)]


@dataclass(frozen=True)
class Interface:
    """Inputs in the order predict takes them, outputs (name, dtype, shape on the warm-up call)."""

    inputs: tuple[InputSpec, ...]
    outputs: tuple[tuple[str, str, tuple[int, ...]], ...]
    batch_size: int

    @classmethod
    def from_info(cls, info: Mapping[str, Any], pad_values: Any = None,
                  dynamic_dims: Mapping[str, Sequence[int]] | None = None) -> Interface:
        """From an instance's announcement, with pad values (a number, a list per input or a dict by name) and
        dynamic dims by input name (serving.json's) added to the ones load.py declares."""
        names = list(info["inputs"])
        specs = []
        for i, (name, (dtype, shape, _), declared) in enumerate(zip(names, info["sample"], info["dynamic"],
                                                                    strict=True)):
            if isinstance(pad_values, Mapping):
                pad = pad_values.get(name, 0)
            elif isinstance(pad_values, (list, tuple)):
                pad = pad_values[i] if i < len(pad_values) else 0
            else:
                pad = pad_values or 0
            extra = (dynamic_dims or {}).get(name, [])
            dims = frozenset(int(d) for d in [*declared, *extra] if int(d) > 0)
            specs.append(InputSpec(name, np.dtype(dtype), tuple(int(s) for s in shape), dims, pad))
        outputs = tuple((str(n), str(d), tuple(int(s) for s in shape))
                        for n, (d, shape) in zip(info["outputs"], info["output_specs"], strict=True))
        return cls(tuple(specs), outputs, int(info["batch_size"]))

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.inputs]

    def metadata(self, model_name: str, max_batch: int) -> dict[str, Any]:
        """The v2 model metadata: datatypes, shapes with -1 for the batch and the dynamic dims."""
        dynamic_sizes = {s.shape[d] for s in self.inputs for d in s.dynamic if d < len(s.shape)}
        return {
            "name": model_name, "versions": ["1"], "platform": "autotune", "max_batch_size": max_batch,
            "inputs": [{"name": s.name, "datatype": s.datatype, "shape": s.metadata_shape} for s in self.inputs],
            "outputs": [{"name": n, "datatype": datatype_of(d),
                         "shape": [-1 if i == 0 or s in dynamic_sizes else s for i, s in enumerate(shape)]}
                        for n, d, shape in self.outputs],
        }

    def check(self, inputs: Mapping[str, np.ndarray], max_batch: int) -> tuple[list[np.ndarray], int]:
        """A request's arrays in INPUTS order and its rows; ProtocolError saying what the model takes."""
        names = self.names
        for name in inputs:
            if name not in names:
                raise ProtocolError(f"unknown input {name!r}; the model takes {names}")
        arrays, rows = [], None
        for spec in self.inputs:
            x = inputs.get(spec.name)
            if x is None:
                raise ProtocolError(f"missing input {spec.name!r}; the model takes {names}")
            if x.dtype != spec.dtype:
                raise ProtocolError(f"input {spec.name!r}: datatype {datatype_of(x.dtype)}, the model takes "
                                    f"{spec.datatype}")
            want = spec.metadata_shape
            if x.ndim != len(spec.shape) or any(x.shape[d] != s for d, s in enumerate(want) if s >= 0):
                raise ProtocolError(f"input {spec.name!r}: shape {list(x.shape)}, the model takes {want} "
                                    "(-1: any size)")
            if x.shape[0] < 1 or any(x.shape[d] < 1 for d in spec.dynamic):
                raise ProtocolError(f"input {spec.name!r}: shape {list(x.shape)} is empty")
            if rows is not None and x.shape[0] != rows:
                raise ProtocolError(f"input {spec.name!r}: {x.shape[0]} rows, the other inputs have {rows}")
            rows = x.shape[0]
            arrays.append(x)
        assert rows is not None
        if rows > max_batch:
            raise ProtocolError(f"{rows} rows in one request, more than the server's maximum batch {max_batch}")
        return arrays, rows


# ---- the traffic as single requests, and whether merging lengths changes an answer --------------------------

_TRAFFIC_KEY = re.compile(r"b(\d+)\.(.+)")


def read_traffic(path: str | os.PathLike[str]) -> list[dict[str, np.ndarray]]:
    """``traffic.npz``'s batches in order, each ``{input name: array}``; ValueError for a key not ``b<i>.<name>``."""
    with np.load(path, allow_pickle=False) as data:
        found: dict[int, dict[str, np.ndarray]] = {}
        for key in data.files:
            m = _TRAFFIC_KEY.fullmatch(key)
            if m is None:
                raise ValueError(f"key {key!r} is not of the form b<index>.<input>")
            found.setdefault(int(m.group(1)), {})[m.group(2)] = data[key]
    return [found[i] for i in sorted(found)]


def dynamic_axes(batches: Sequence[Mapping[str, np.ndarray]]) -> dict[str, list[int]]:
    """Per input, the non-batch axes whose size differs between batches."""
    out: dict[str, list[int]] = {}
    for name, first in batches[0].items():
        out[name] = [d for d in range(1, first.ndim)
                     if len({b[name].shape[d] for b in batches}) > 1]
    return out


def trim(row: Mapping[str, np.ndarray], axes: Mapping[str, list[int]], pad: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Cut trailing positions of each dynamic axis where every input that has that axis size holds its pad.

    The axes of one size in the row are one length (a sentence's ``input_ids`` and ``attention_mask``), cut together
    to the longest live extent among them; axes of another size are another length, cut on their own (an image's
    height and width: a 192 x 160 image of a 256 x 224 batch is its own 192 x 160, where cutting only the largest
    size's axes left it 192 x 224, session 46). Within one input, two axes of one size are two lengths, matched
    across inputs in order (the first with the first: a ``pixel_values``' height with its ``pixel_mask``'s height):
    a 192 x 160 image of a 256 x 256 batch is its own 192 x 160 too, where it had been cut to 192 x 192 (session 47,
    as :func:`split` cuts a square batch's answers)."""
    out = dict(row)
    groups: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for n, ds in axes.items():
        seen: dict[int, int] = {}  # per size, this input's axes of it so far
        for d in ds:
            size = int(row[n].shape[d])
            nth = seen.get(size, 0)
            seen[size] = nth + 1
            groups.setdefault((size, nth), []).append((n, d))
    for (size, _), members in groups.items():
        keep = 0
        for n, d in members:
            a = np.moveaxis(row[n], d, 1)
            live = np.any((a != pad.get(n, 0)).reshape(a.shape[0], a.shape[1], -1), axis=(0, 2))
            idx = np.nonzero(live)[0]
            keep = max(keep, int(idx[-1]) + 1 if idx.size else 0)
        keep = max(keep, 1)
        if keep < size:
            for n, d in members:
                out[n] = np.take(out[n], np.arange(keep), axis=d)
    return out


def traffic_rows(batches: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], pad: Mapping[str, Any]
                 ) -> list[dict[str, np.ndarray]]:
    """The traffic's rows in order, each a one-row request at its own length (:func:`trim`)."""
    axes = dynamic_axes(batches)
    return [trim({n: b[n][i:i + 1] for n in names}, axes, pad)
            for b in batches for i in range(int(next(iter(b.values())).shape[0]))]


def shortest_and_longest(batches: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], pad: Mapping[str, Any]
                         ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """Two one-row requests of the traffic (arrays in ``names`` order) whose dynamic dims differ most: the
    shortest and the longest; None when the traffic has no dynamic dim or every row is as long as the others."""
    axes = dynamic_axes(batches)
    if not any(axes.values()):
        return None
    return _extremes(traffic_rows(batches, names, pad), axes, names)


def _extremes(rows: Sequence[Mapping[str, np.ndarray]], axes: Mapping[str, list[int]], names: Sequence[str]
              ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """The shortest and the longest of ``rows`` by their dynamic dims' total; None when all are alike."""
    size = [sum(int(r[n].shape[d]) for n in names for d in axes.get(n, [])) for r in rows]
    if not size or min(size) == max(size):
        return None
    short, long_ = rows[size.index(min(size))], rows[size.index(max(size))]
    return [short[n] for n in names], [long_[n] for n in names]


def merge_trial_requests(batches: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], pad: Mapping[str, Any],
                         limit: int = 4) -> list[list[np.ndarray]] | None:
    """The requests the server's merge check runs alone and merged (arrays in ``names`` order): the traffic's
    shortest first and its longest last (:func:`shortest_and_longest`, whose answers say which output dims follow
    the length), and between them, up to ``limit`` in all, the rows whose two dynamic axes of one input lean most
    each way (the tallest image for its width, the widest for its height). None as for the pair.

    Why the crossed ones: a tall and a wide image padded together make a square call, where an output's height and
    width are one length; a cut that mixed them up (a segmenter's 96 x 128 map came back 96 x 96, session 47)
    passed a check of the shortest and longest alone, which lean alike."""
    axes = dynamic_axes(batches)
    rows = traffic_rows(batches, names, pad) if any(axes.values()) else []
    pair = _extremes(rows, axes, names)
    if pair is None:
        return None
    short, long_ = pair
    out = [short]
    shapes = {tuple(a.shape for a in short), tuple(a.shape for a in long_)}
    for n in names:
        dims = axes.get(n, [])
        if len(dims) < 2 or len(out) >= limit - 1:
            continue
        a, b = dims[0], dims[1]
        lean = [int(r[n].shape[a]) - int(r[n].shape[b]) for r in rows]
        for pick in (lean.index(max(lean)), lean.index(min(lean))):
            row = [rows[pick][m] for m in names]
            key = tuple(x.shape for x in row)
            if key not in shapes and len(out) < limit - 1:
                shapes.add(key)
                out.append(row)
    return [*out, long_]


def two_of_a_shape(batches: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], pad: Mapping[str, Any]
                   ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """Two one-row requests of the traffic (arrays in ``names`` order) of the same shapes and, where the traffic
    has them, different contents: what any batcher merges into one call without padding. The same row twice
    when no two rows share a shape; None for a traffic without rows."""
    axes = dynamic_axes(batches)
    first: dict[tuple[tuple[int, ...], ...], dict[str, np.ndarray]] = {}
    only: dict[str, np.ndarray] | None = None
    for b in batches:
        for i in range(next(iter(b.values())).shape[0]):
            row = trim({n: b[n][i:i + 1] for n in names}, axes, pad)
            key = tuple(row[n].shape for n in names)
            other = first.setdefault(key, row)
            if other is not row and any(not np.array_equal(other[n], row[n]) for n in names):
                return [other[n] for n in names], [row[n] for n in names]
            only = only or row
    if only is None:
        return None
    return [only[n] for n in names], [only[n] for n in names]


def traffic_calls(batches: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], pad: Mapping[str, Any],
                  rows_per_call: int, limit: int) -> list[list[np.ndarray]]:
    """Calls of ``rows_per_call`` rows as the server makes them from the traffic: its requests one row each at their
    own length (:func:`trim`), taken in order and merged into a call padded to the longest (:func:`combine`); up to
    ``limit`` calls, the rows taken once each where the traffic has enough, in turn again where it has fewer than
    a call's. Each call one array per input in ``names`` order; empty for a traffic without rows.

    Why: the serving search's calibration timed one call of the traffic's first batch, repeated. Its median and
    spread were then one shape's: a DETR on images of 160-256 px a side read p90/p50 1.04 at one row, though its
    requests' calls vary by the image's size, and the simulation then predicted what one shape would serve."""
    rows = traffic_rows(batches, names, pad)
    if not rows or rows_per_call < 1:
        return []
    pads = [pad.get(n, 0) for n in names]
    count = max(1, min(limit, len(rows) // rows_per_call))
    return [combine([[rows[(k * rows_per_call + j) % len(rows)][n] for n in names] for j in range(rows_per_call)],
                    pads)[0] for k in range(count)]


def warm_batches(max_batch: int) -> list[int]:
    """The call sizes a fresh server warms up at: every size up to 16, beyond it the powers of two and the largest.

    Why every size: a torch.compile artifact of static shapes compiles once per call size its load.py pads a batch
    to (CALL_SIZES: every size lands on one), and one of dynamic shapes specializes a batch of 1 and compiles its
    dynamic graph on the second shape it meets; each compile of a BART took 8-15 s, which the first requests of a
    fresh server paid (p99 0.7-1.0 s, session 38)."""
    if max_batch <= 16:
        return list(range(1, max_batch + 1))
    return sorted({*(2 ** i for i in range(max_batch.bit_length()) if 2 ** i <= max_batch), max_batch})


def warm_calls(batches: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], pad: Mapping[str, Any],
               max_batch: int) -> list[list[np.ndarray]]:
    """The calls a fresh server makes before it says ready, each one array per input in ``names`` order: the
    traffic's shortest request repeated to every size of :func:`warm_batches`, and its longest at 1, 2 and
    ``max_batch`` rows (a dynamic graph compiled on those serves every length between); the traffic's first request
    alone where its rows are of one length. Empty for a traffic without rows."""
    pair = shortest_and_longest(batches, names, pad)
    if pair is not None:
        requests = list(pair)
    else:
        one = two_of_a_shape(batches, names, pad)
        requests = [one[0]] if one is not None else []
    pads = [pad.get(n, 0) for n in names]
    calls: list[list[np.ndarray]] = []
    for i, request in enumerate(requests):
        sizes = warm_batches(max_batch) if i == 0 else sorted({k for k in (1, 2, max_batch) if k <= max_batch})
        calls.extend(combine([request] * k, pads)[0] for k in sizes)
    return calls


__all__ = ["MERGE_TOLERANCE", "InputSpec", "Interface", "Layout", "batch_dims", "combine", "dynamic_axes",
           "following_dims", "merge_disagrees", "merge_trial_requests", "read_traffic", "shortest_and_longest",
           "split", "traffic_calls", "traffic_rows", "trim", "two_of_a_shape", "warm_batches", "warm_calls"]
