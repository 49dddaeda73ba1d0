"""Requests merged into one call along dim 0 and the call's outputs split back per request, and whether merging
changed an answer: the server's batcher and the validation's check that dim 0 is a batch share this.

Why one module for both: the question is the same. A server that merges requests, and a batch loop that runs B
samples per call, both assume that a row's answer does not depend on the other rows of its call. The server asks it
of the traffic when it starts (:mod:`autotune.serving.server`); the worker asks it of the model when it validates
the workload (:func:`autotune.worker.model.check_forward`), so that a model whose dim 0 is not a batch (an
``nn.LSTM`` without ``batch_first=True`` reads it as time) is said before its batch sizes are compared.

Pure (numpy only, no autotune import): copied beside ``serve.py`` into the artifact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


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


def split(outputs: Sequence[np.ndarray], layout: Layout,
          length_dims: Sequence[Sequence[int]] | None = None) -> list[list[np.ndarray]]:
    """Each request's rows of every output, dims of a padded length cut back to the request's own length
    (an output without the batch's rows goes whole to every request).

    ``length_dims``: per output, the dims known to follow the input's length (:func:`following_dims`); only those
    are cut. Without it, any dim of a padded length is. Why: a size can equal a padded length by chance. A BART's
    ``encoder_last_hidden_state`` of hidden size 128, merged at a padded length of 128, was cut to ``(1, 20, 20)``
    (session 38): at another padded length the cut would have gone unnoticed."""
    total = sum(layout.rows)
    parts: list[list[np.ndarray]] = [[] for _ in layout.rows]
    axes = _axes_by_length(layout)
    for k, o in enumerate(outputs):
        offset = 0
        known = length_dims[k] if length_dims is not None and k < len(length_dims) else None
        for j, n in enumerate(layout.rows):
            part = o[offset:offset + n] if o.ndim >= 1 and o.shape[0] == total else o
            offset += n
            if layout.padded and part.ndim > 1:
                index: list[slice] = []
                taken: dict[int, int] = {}  # per padded length, the output dims of that length cut so far
                for d in range(1, part.ndim):
                    size = int(part.shape[d])
                    own = None
                    if size in axes and (known is None or d in known):
                        nth = taken.get(size, 0)
                        taken[size] = nth + 1
                        own = axes[size][min(nth, len(axes[size]) - 1)][j]
                    index.append(slice(0, own))
                part = part[(slice(None), *index)]
            parts[j].append(part)
    return parts


def _axes_by_length(layout: Layout) -> dict[int, list[tuple[int, ...]]]:
    """Per padded length, the distinct padded axes of that length (each as the per-request lengths), in input order.

    Why in order: a square batch pads an image's height and width to one length (96 x 128 and 128 x 96 merged to
    128 x 128), and a segmenter's class map is as tall and wide as its image. Matched by size alone, both of the
    map's axes took the height's lengths, and a 96 x 128 image's answer came back 96 x 96 (torchvision's LR-ASPP,
    session 47). The n-th output dim of a padded length now takes the n-th distinct axis of that length (height
    before width, as the input has them); axes that pad alike (a sentence's ids and its mask) are one."""
    out: dict[int, list[tuple[int, ...]]] = {}
    for length, lengths in layout.padded:
        seen = out.setdefault(int(length), [])
        if tuple(lengths) not in seen:
            seen.append(tuple(lengths))
    return out


def following_dims(short: Sequence[np.ndarray], long: Sequence[np.ndarray],
                   *others: Sequence[np.ndarray]) -> list[list[int]]:
    """Per output, the non-batch dims whose size differs between a short request's answer and a long one's (each
    alone), or any of ``others``' (a tall and a wide image: a 96 x 128 and a 160 x 128 image differ in height alone,
    and a width that follows its input shows only beside a third): the dims that follow the input's length, the only
    ones :func:`split` may cut."""
    out: list[list[int]] = []
    for k, a in enumerate(short):
        a = np.asarray(a)
        dims: set[int] = set()
        same_rank = True
        for answer in (long, *others):
            if k >= len(answer):
                continue
            b = np.asarray(answer[k])
            if a.ndim != b.ndim:
                same_rank = False
                break
            dims |= {d for d in range(1, a.ndim) if a.shape[d] != b.shape[d]}
        out.append(sorted(dims) if same_rank else [])
    return out


def batch_dims(solo: Sequence[Sequence[np.ndarray]], merged: Sequence[np.ndarray]) -> dict[int, list[int]]:
    """Per output index, the non-batch dims whose size grew with the rows of the call: the one-row requests'
    answers alone (``solo``) against the raw outputs of their merged call (``merged``, before :func:`split`).

    Why: an output such as CLIP's ``logits_per_image`` is ``(rows, rows)``, every row scored against every other
    one in the call; its second dim is a batch dim too, which a server that merges requests cannot cut back."""
    rows = len(solo)
    out: dict[int, list[int]] = {}
    for k, m in enumerate(merged[:len(solo[0])]):  # (a model with an entry per row has more outputs merged)
        a, m = np.asarray(solo[0][k]), np.asarray(m)
        if a.ndim == m.ndim and m.ndim >= 1 and m.shape[0] == rows * a.shape[0]:
            out[k] = [d for d in range(1, m.ndim) if m.shape[d] != a.shape[d]]
    return out


#: How far a merged request's output may be from its solo one, relative to the solo output's largest magnitude:
#: kernels chosen per batch size move float32 outputs by ~1e-6 of it, dynamic int8 (activation scales over the
#: whole batch) by up to ~1e-2; padding that leaks into an answer (a model that ignores its mask) moves it by far more.
MERGE_TOLERANCE = 0.02


def merge_disagrees(solo: Sequence[Sequence[np.ndarray]], merged: Sequence[Sequence[np.ndarray]], *,
                    lengths: bool = True, names: Sequence[str] = ()) -> str | None:
    """Why merging requests (of different lengths, or with ``lengths=False`` of one shape) into one call changes
    an answer, or None when each request's outputs from the merged call (:func:`combine`, the model,
    :func:`split`) are its solo ones.

    Why: :func:`split` cuts an output dim back only where it equals a padded input length. A model whose output
    length is a function of the input's but not equal to it (an audio encoder's strided convolutions: 4,000
    samples give 12 frames, 15,000 give 46) returns the long request's frame count to the short one, the frames
    past its own made from padding (transformers' Wav2Vec2ForCTC, session 32). Requests of one shape need no
    padding, yet an output that couples a call's rows (CLIP's ``(rows, rows)`` similarity, a softmax or a norm
    over the batch) still gives each request another answer merged than alone (``lengths=False``)."""
    other = "a request of another length" if lengths else "another request of its shape"
    for j, (own, got) in enumerate(zip(solo, merged, strict=True)):
        if len(own) != len(got):  # an entry per row (a detector's dict per image): the call's rows set the count
            return (f"a request has {len(own)} outputs alone and {len(got)} merged with {other} (the model returns "
                    "an entry per row of the call)")
        for i, (a, b) in enumerate(zip(own, got, strict=True)):
            a, b = np.asarray(a), np.asarray(b)
            k = f"{i} ({names[i]!r})" if i < len(names) else str(i)  # the output's index, and its name if given
            if a.shape != b.shape:
                return (f"output {k} of a request is {a.shape} alone and {b.shape} merged with {other} "
                        + ("(its length follows the input's without equalling it)" if lengths else
                           "(its size follows the rows of the call)"))
            how = answer_moved(a, b)
            if how is not None:
                return (f"output {k} of request {j} {how} when merged with {other}"
                        + ("" if how == "changes" else ": " + ("the padding changes its answer" if lengths else
                                                              "its answer depends on the other rows of the call")))
    return None


def answer_moved(alone: np.ndarray, beside: np.ndarray) -> str | None:
    """How an answer of one shape moved between a call of its own (``alone``) and a call it shared, or None within
    :data:`MERGE_TOLERANCE` of its largest magnitude (floats; anything else must be equal): "moves by 0.07
    (largest value 0.08)", or "changes"."""
    a, b = np.asarray(alone), np.asarray(beside)
    if a.dtype.kind in "fc" and a.size:
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        a64, b64 = a.astype(wide), b.astype(wide)
        apart = ~((a64 == b64) | (np.isnan(a64) & np.isnan(b64)))  # a NaN or an infinity in both places agrees
        if not apart.any():
            return None
        if not (np.isfinite(a64[apart]).all() and np.isfinite(b64[apart]).all()):
            return "changes"
        finite = np.abs(a64[np.isfinite(a64)])
        scale = (float(finite.max()) if finite.size else 0.0) or 1.0
        diff = float(np.max(np.abs(a64[apart] - b64[apart])))
        return None if diff <= MERGE_TOLERANCE * scale else f"moves by {diff:.3g} (largest value {scale:.3g})"
    return "changes" if a.size and not np.array_equal(a, b) else None


__all__ = ["MERGE_TOLERANCE", "Layout", "answer_moved", "batch_dims", "combine", "following_dims", "merge_disagrees",
           "split"]
