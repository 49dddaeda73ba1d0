"""The recipe's variant selection (names, ``"all"``, precisions x memory formats x threads) turned into specs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.core.variant_names import ALL_BASES, MEMORY_FORMATS, PRECISIONS, VariantSpec, _parse, _suggest
from autotune.errors import InputError
from autotune.worker.variants.availability import available


def expand_variants(
    names: Sequence[str],
    *,
    device: str,
    precisions: Sequence[str] = ("fp32",),
    memory_formats: Sequence[str] = ("contiguous",),
    threads: Sequence[int] = (),
    shapes: Sequence[str] = ("dynamic",),
    input_ndims: Sequence[int] = (),
    input_is_float: Sequence[bool] = (),
) -> list[VariantSpec]:
    """Turn the recipe's variant names into specs, deduplicated, in a stable order.

    Pseudo-code::

        for name in names:
            bases = [available compiler/mode of ALL_BASES on device] if name starts with "all"
                    else [the name's compiler/mode]
            for base in bases:
                for p in (name's precision,) if pinned else precisions:
                    for f in (name's memory format,) if pinned else memory_formats:
                        for t in (name's threads,) if pinned or not threads else threads:
                            yield base + name's other modifiers + p + f + t   (first occurrence wins)

    ``"all"`` (optionally with modifiers, e.g. ``"all+channels_last"``) keeps only the
    compiler/mode combinations :func:`available` accepts on ``device`` (judged at fp32/contiguous).
    Everything else is returned even when unavailable, so the caller can report *why* a requested
    variant was skipped (call :func:`available` on each). ``threads`` is the recipe's resolved list (the
    worker turns ``"auto"`` into counts and passes nothing on a GPU); empty: no ``threads=`` modifier.
    """
    for label, values, allowed in (("precisions", precisions, PRECISIONS),
                                   ("memory_formats", memory_formats, MEMORY_FORMATS)):
        for v in values:
            if v not in allowed:
                raise InputError(f"{label}: unknown value '{v}'; allowed: {', '.join(allowed)}"
                                 f"{_suggest(str(v), allowed)}")
    if not precisions or not memory_formats:
        raise InputError("precisions and memory_formats must not be empty")
    for n in threads:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"threads: thread counts must be positive integers, got {n!r}")
    out: list[VariantSpec] = []
    seen: set[VariantSpec] = set()

    def add(spec: VariantSpec) -> None:
        if spec not in seen:
            seen.add(spec)
            out.append(spec)

    for name in names:
        spec, pinned_precision, pinned_format = _parse(name, field_name="variants", allow_all=True)
        if name.strip().lower().split("+")[0].strip() == "all":
            bases = []
            for base_name in ALL_BASES:
                base = VariantSpec.parse(base_name)
                if spec.cuda_graphs and base.compiler == "compile":
                    continue
                base = _replace(base, cuda_graphs=base.cuda_graphs or spec.cuda_graphs, threads=spec.threads)
                if available(base, device=device, input_ndims=input_ndims, input_is_float=input_is_float).ok:
                    bases.append(base)
        else:
            bases = [spec]
        for base in bases:
            for p in (spec.precision,) if pinned_precision else precisions:
                for f in (spec.memory_format,) if pinned_format else memory_formats:
                    for t in (spec.threads,) if spec.threads is not None or not threads else threads:
                        for bucketed in (True,) if spec.buckets else tuple(s == "buckets" for s in shapes):
                            add(_replace(base, precision=p, memory_format=f, threads=t, buckets=bucketed))
    return out


def _replace(spec: VariantSpec, **changes: Any) -> VariantSpec:
    values = {**spec.to_dict(), **changes}
    values.pop("name")
    return VariantSpec(**values)
