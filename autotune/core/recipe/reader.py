"""The strict reader of one recipe table, and the wording of every recipe error it raises.

Why a strict parser: a typo in a recipe (``batch_size`` for ``batch_sizes``) would otherwise be
silently ignored and the user would tune something else than they meant, possibly for an hour.
So every unknown key is an error that suggests the closest valid key, and every error names the
file, the dotted field and what is allowed. :class:`TableReader` is that rule, written once;
:mod:`autotune.core.recipe.parse` uses one per table.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core.sizes import parse_size
from autotune.errors import RecipeError


class TableReader:
    """Reads one table of the recipe, tracking the dotted path for error messages."""

    def __init__(self, path: Path, table: Mapping[str, Any], prefix: str, allowed: tuple[str, ...]) -> None:
        self.path = path
        self.table = table
        self.prefix = prefix
        for key in table:
            if key not in allowed:
                close = closest(key, allowed)
                raise self.error(key, f"unknown key; allowed keys: {', '.join(allowed)}",
                                 hint=self.field_name(close) if close else None)

    def field_name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def error(self, key: str, what: str, *, hint: str | None = None) -> RecipeError:
        suffix = f" (did you mean '{hint}'?)" if hint else ""
        return RecipeError(f"{self.path}: field '{self.field_name(key)}': {what}{suffix}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any, *, required: bool = False) -> Any:
        if key not in self.table:
            if required:
                raise self.error(key, "is required")
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int subclass in Python; a recipe's `true` is never a number.
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(key, f"expected {_kind_names(kinds)}, got a boolean")
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds):
            raise self.error(key, f"expected {_kind_names(kinds)}, got {type(value).__name__} {value!r}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value: str = self.get(key, str, default)
        if value not in allowed:
            raise self.error(key, f"'{value}' is not allowed; allowed: {', '.join(allowed)}",
                             hint=closest(value, allowed))
        return value

    def positive(self, key: str, kind: type, default: Any, *, allow_zero: bool = False) -> Any:
        value = self.get(key, kind, default)
        if value is None:
            return None
        if (value < 0) or (value == 0 and not allow_zero) or (isinstance(value, float) and not math.isfinite(value)):
            bound = "zero or positive" if allow_zero else "positive"
            raise self.error(key, f"must be {bound}, got {value!r}")
        return value

    def fraction(self, key: str, default: float) -> float:
        """A fraction in [0, 0.5) (the equivalence margin)."""
        value = self.get(key, (float, int), default)
        if not 0.0 <= float(value) < 0.5:
            raise self.error(key, f"is a fraction and must be in [0, 0.5), got {value!r}")
        return float(value)

    def size(self, key: str) -> int | None:
        if key not in self.table:
            return None
        value = self.get(key, (str, int), None)
        try:
            return parse_size(value, field=self.field_name(key))
        except RecipeError:
            raise
        except Exception as exc:  # InputError from sizes: re-raise with the file named
            raise RecipeError(f"{self.path}: {exc}") from None

    def string_list(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.get(key, (list, str), list(default))
        if isinstance(value, str):
            value = [value]
        if not value:
            raise self.error(key, "must not be empty")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise RecipeError(
                    f"{self.path}: field '{self.field_name(key)}[{i}]': expected a string, got {item!r}"
                )
        return tuple(value)


    def counts(self, key: str, default: tuple[int, ...] | str = "auto") -> tuple[int, ...] | str:
        """``"auto"``, a positive integer or a list of them (sorted, duplicates dropped)."""
        allowed = "\"auto\", a positive integer or a list of positive integers"
        raw = self.get(key, (list, str, int), default if isinstance(default, str) else list(default))
        if isinstance(raw, str):
            if raw != "auto":
                raise self.error(key, f"'{raw}' is not allowed; allowed: {allowed}")
            return "auto"
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            raise self.error(key, f"must not be empty; allowed: {allowed}")
        for i, n in enumerate(items):
            if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
                where = f"{key}[{i}]" if isinstance(raw, list) else key
                raise self.error(where, f"must be a positive integer, got {n!r}; allowed: {allowed}")
        return tuple(sorted(set(items)))

    def choices(self, key: str, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
        """A string or a list of strings, each one of ``allowed`` (order kept, duplicates dropped)."""
        values = self.string_list(key, default)
        for i, v in enumerate(values):
            if v not in allowed:
                where = f"{key}[{i}]" if isinstance(self.table.get(key), list) else key
                raise self.error(where, f"'{v}' is not allowed; allowed: {', '.join(allowed)}",
                                 hint=closest(v, allowed))
        return tuple(dict.fromkeys(values))


def closest(word: str, options: tuple[str, ...] | list[str]) -> str | None:
    """The most similar valid spelling, for "did you mean" hints (None when nothing is close)."""
    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return found[0] if found else None


def _kind_names(kinds: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a table",
             bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
