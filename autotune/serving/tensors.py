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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    from .v2 import ProtocolError, datatype_of
except ImportError:  # a flat file in the artifact
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


@dataclass(frozen=True)
class Layout:
    """How a batch was merged: each request's rows, and per padded (input, dim) the batch's and each one's size."""

    rows: tuple[int, ...]
    padded: tuple[tuple[int, tuple[int, ...]], ...]  # (padded length, per-request lengths)


def combine(requests: Sequence[Sequence[np.ndarray]], pads: Sequence[Any]) -> tuple[list[np.ndarray], Layout]:
    """The requests' arrays concatenated along dim 0, dims that differ right-padded with ``pads[i]``."""
    rows = tuple(int(r[0].shape[0]) for r in requests)
    if len(requests) == 1:
        return list(requests[0]), Layout(rows, ())
    out: list[np.ndarray] = []
    padded: list[tuple[int, tuple[int, ...]]] = []
    for i, pad in enumerate(pads):
        xs = [r[i] for r in requests]
        shapes = [x.shape for x in xs]
        if all(s == shapes[0] for s in shapes):
            out.append(np.concatenate(xs))
            continue
        target = [max(s[d] for s in shapes) for d in range(len(shapes[0]))]
        for d in range(1, len(target)):
            lengths = tuple(s[d] for s in shapes)
            if any(n != target[d] for n in lengths):
                padded.append((target[d], lengths))
        merged = np.full([sum(rows), *target[1:]], pad, dtype=xs[0].dtype)
        offset = 0
        for x in xs:
            merged[(slice(offset, offset + x.shape[0]), *(slice(0, n) for n in x.shape[1:]))] = x
            offset += x.shape[0]
        out.append(merged)
    return out, Layout(rows, tuple(padded))


def split(outputs: Sequence[np.ndarray], layout: Layout) -> list[list[np.ndarray]]:
    """Each request's rows of every output, dims of a padded length cut back to the request's own length
    (an output without the batch's rows goes whole to every request)."""
    total = sum(layout.rows)
    parts: list[list[np.ndarray]] = [[] for _ in layout.rows]
    for o in outputs:
        offset = 0
        for j, n in enumerate(layout.rows):
            part = o[offset:offset + n] if o.ndim >= 1 and o.shape[0] == total else o
            offset += n
            if layout.padded and part.ndim > 1:
                index: list[slice] = []
                for d in range(1, part.ndim):
                    own = next((lengths[j] for length, lengths in layout.padded if length == part.shape[d]), None)
                    index.append(slice(0, own))
                part = part[(slice(None), *index)]
            parts[j].append(part)
    return parts


__all__ = ["InputSpec", "Interface", "Layout", "combine", "split"]
