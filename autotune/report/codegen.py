"""Values rendered into generated Python: the one way a report value enters reproduce.py, load.py and snippets.

The generated scripts (the Reproduce section, ``artifact/load.py``) are built from report.json, and report.json
may come from anywhere (a copied run directory, a file attached to a bug report): a variant name, a recipe
name, an input name or a path is data, and must never become code. Each value takes one of four routes:

- :func:`py_literal`: a Python literal of a JSON value (``repr``), for constants and arguments;
- :func:`py_int`: an integer the schema promises, checked, for sizes and counts pasted as digits;
- :func:`py_comment`: text after ``#`` on one line: every character that could end the line (or is not
  printable) is written as its escape, so nothing after it is code;
- :func:`py_doc`: text inside a triple-quoted docstring: backslashes and quotes escaped, so it cannot close
  the string, and non-printable characters escaped.

Names that are pasted as identifiers (a factory's ``module:attr``, a dtype as ``torch.<dtype>``) are checked
against their grammar where they are pasted (:func:`torch_dtype`; the factory in
:mod:`autotune.report.reproduce`), and fall back to a safe form otherwise.
"""

from __future__ import annotations

from typing import Any

#: dtypes that may be pasted as ``torch.<name>`` (the recipe's DTYPES and their aliases).
_TORCH_DTYPES = frozenset({"float32", "float", "float16", "half", "bfloat16", "float64", "double", "int64", "long",
                           "int32", "int", "int16", "short", "int8", "uint8", "bool"})


def py_literal(value: Any) -> str:
    """A Python expression equal to ``value`` (a JSON value: str, int, float, bool, None, lists and dicts of them).

    ``repr`` of these types is a literal that evaluates to the value and is always one line; nan and infinity,
    which have no literal, become ``float('nan')`` / ``float('inf')``.
    """
    if isinstance(value, float) and value != value:
        return "float('nan')"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "float('inf')" if value > 0 else "-float('inf')"
    if isinstance(value, list | tuple):
        items = ", ".join(py_literal(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, str | int | float | bool):
        return repr(value)
    return repr(str(value))


def py_int(value: Any, default: int) -> int:
    """``value`` if it is an int (not a bool), else ``default``: digits pasted into code are digits."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _escaped(char: str) -> str:
    return char if char.isprintable() else repr(char)[1:-1]


def py_comment(text: Any) -> str:
    """``text`` safe after ``#``: one line, its line breaks and other non-printable characters escaped."""
    return "".join(_escaped(c) for c in str(text))


def py_doc(text: Any) -> str:
    """``text`` safe inside a triple-quoted (non-raw) docstring: it cannot end the string nor hold a raw control
    character; what it reads as is unchanged."""
    out = []
    for c in str(text):
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        else:
            out.append(_escaped(c))
    return "".join(out)


def torch_dtype(dtype: Any, default: str = "float32") -> str:
    """``torch.<dtype>`` for a known dtype name, else ``torch.<default>``."""
    name = str(dtype)
    return f"torch.{name if name in _TORCH_DTYPES else default}"


__all__ = ["py_comment", "py_doc", "py_int", "py_literal", "torch_dtype"]
