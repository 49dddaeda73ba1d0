"""Memory sizes as people write them (``4GiB``, ``512MiB``, ``1.5GB``, ``1024``) and back.

Recipes and CLI flags carry memory budgets; one parser keeps the accepted spellings and the
error message the same everywhere. Binary (KiB, MiB, GiB, TiB: powers of 1024) and decimal
(KB, MB, GB, TB: powers of 1000) units are both accepted because both are in common use and
they differ by 7% at GiB scale. A bare letter (``4G``) is refused rather than guessed: tools
disagree on whether it means GiB or GB, and a budget silently off by 7% is the kind of error
nobody finds.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from autotune.errors import InputError

_UNITS: dict[str, int] = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_AMBIGUOUS = {"k", "m", "g", "t"}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_ALLOWED = (
    "a positive number of bytes, or a number with a unit: B, KB, MB, GB, TB (powers of 1000) "
    "or KiB, MiB, GiB, TiB (powers of 1024), e.g. '4GiB', '512MiB', '1.5GB', '1024'"
)
_FORMAT_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def parse_size(text: str | int | float, *, field: str = "size") -> int:
    """Return the number of bytes ``text`` denotes; fractions of a byte are truncated.

    Units are case-insensitive and may be separated from the number by spaces. An ``int``
    (or a whole, finite ``float``, as TOML gives for ``4e9``) is a number of bytes. Anything
    else raises :class:`InputError` naming ``field`` and the accepted spellings.
    """
    if isinstance(text, bool):
        raise InputError(f"{field}: invalid size {text!r}; expected {_ALLOWED}")
    if isinstance(text, int):
        return _positive(text, text, field)
    if isinstance(text, float):
        if not math.isfinite(text) or not text.is_integer():
            raise InputError(f"{field}: invalid size {text!r}; expected {_ALLOWED}")
        return _positive(int(text), text, field)
    if not isinstance(text, str):
        raise InputError(f"{field}: invalid size {text!r} ({type(text).__name__}); expected {_ALLOWED}")
    match = _PATTERN.match(text)
    if match is None:
        raise InputError(f"{field}: invalid size {text!r}; expected {_ALLOWED}")
    number, unit = match.group(1), match.group(2).lower()
    if unit in _AMBIGUOUS:
        raise InputError(
            f"{field}: ambiguous unit in {text!r}; write {unit.upper()}iB (powers of 1024) "
            f"or {unit.upper()}B (powers of 1000)"
        )
    multiplier = _UNITS.get(unit or "b")
    if multiplier is None:
        raise InputError(f"{field}: unknown unit {match.group(2)!r} in {text!r}; expected {_ALLOWED}")
    try:
        n_bytes = int(Decimal(number) * multiplier)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimal numbers
        raise InputError(f"{field}: invalid size {text!r}; expected {_ALLOWED}") from exc
    return _positive(n_bytes, text, field)


def _positive(n_bytes: int, text: str | int | float, field: str) -> int:
    if n_bytes <= 0:
        raise InputError(f"{field}: invalid size {text!r} (must be at least 1 byte); expected {_ALLOWED}")
    return n_bytes


def format_size(n_bytes: int | float) -> str:
    """Format a byte count with binary units for people: ``1.50 GiB``, ``512 B``.

    Whole bytes print without decimals; larger units with two, switching to the next unit
    rather than printing ``1024.00 MiB``.
    """
    value = float(n_bytes)
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value < 1024:
        return f"{sign}{value:.0f} B"
    index = 0
    while index + 1 < len(_FORMAT_UNITS) and round(value, 2) >= 1024:
        value /= 1024
        index += 1
    return f"{sign}{value:.2f} {_FORMAT_UNITS[index]}"
