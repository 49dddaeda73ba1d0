"""Size and depth limits for every file autotune parses: recipes, report.json, warmup traces.

Why: a parser given a hostile or broken file must answer with a clear error, not a traceback or a hang. A
file of gigabytes would be read whole into memory; a TOML or JSON document nested 100,000 deep makes the
parser (and every recursive walk after it: validation, ``to_dict``, ``json.dumps``) raise RecursionError.
So each reader reads at most its limit of bytes (:func:`read_text_limited`) and refuses a document nested
deeper than :data:`MAX_DEPTH` (:func:`check_depth`, an iterative walk), with a message naming the file.

The limits are far above anything autotune writes or a person writes by hand: a recipe is a few hundred
bytes and 3 levels deep; the largest report.json (hundreds of candidates with their raw samples) is tens of
megabytes and 8 levels deep.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.errors import InputError

#: Bytes read at most from each kind of file.
MAX_RECIPE_BYTES = 1 << 20  # 1 MiB
MAX_REPORT_BYTES = 512 << 20  # 512 MiB
MAX_TRACE_BYTES = 256 << 20  # 256 MiB
#: Values in a trace file (``autotune warmup``): the tool's own traces hold thousands; 10 million took 17 s and
#: 1.5 GB to read and analyse (issue 32).
MAX_TRACE_VALUES = 1_000_000
#: Elements of one sample of an ``[[inputs]]`` shape (2**34 floats: 64 GiB a sample; nothing real comes near).
MAX_SAMPLE_ELEMENTS = 1 << 34
#: Nesting of tables / arrays / objects accepted in a parsed document.
MAX_DEPTH = 64


def read_text_limited(path: Path, max_bytes: int, *, what: str) -> str:
    """The file's text (UTF-8), refusing a file over ``max_bytes`` and bytes that are not UTF-8.

    Raises :class:`InputError` naming ``path``; OSError (missing, unreadable, a name too long) is left to the
    caller, which knows what to call the file.
    """
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes:,} bytes; too large for {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r}); "
                         f"expected {what}") from None


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (dicts and lists, as a parser returns them) nests deeper than ``limit``.

    Iterative (a stack of (container, depth)), so it cannot itself run out of recursion::

        stack = [(value, 0)]
        while stack: pop (v, d); if v is a container: if d + 1 > limit: True; push its items at d + 1
        False
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def check_depth(value: Any, *, where: str, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`InputError` naming ``where`` when ``value`` nests deeper than ``limit``."""
    if depth_exceeds(value, limit):
        raise InputError(f"{where}: nested more than {limit} levels deep (tables, arrays or objects)")


def too_deep(where: str, limit: int = MAX_DEPTH) -> InputError:
    """The error for a document the parser itself could not nest into (its RecursionError)."""
    return InputError(f"{where}: nested more than {limit} levels deep (tables, arrays or objects)")
