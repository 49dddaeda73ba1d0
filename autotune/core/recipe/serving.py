"""Reading the recipe's ``[serving]`` table into a :class:`~autotune.core.recipe.spec.ServingSpec`.

A module of its own because the table is a small language of its own: a kind or a file (``arrivals``), a
number or a word (``request_samples``), lists or ``"auto"`` for the knobs, and rules between keys (a closed loop
needs its ``concurrency`` and has no ``rate``). Every error names the file and the dotted field and says what is
allowed, with the wording of :class:`~autotune.core.recipe.reader.TableReader`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from autotune.core.recipe.reader import TableReader, closest
from autotune.core.recipe.spec import (
    DEFAULT_MAX_DELAYS_MS,
    MAX_MODEL_NAME,
    MODEL_NAME_PATTERN,
    NAMED_ARRIVALS,
    ServingSpec,
    safe_model_name,
)
from autotune.core.vocab import SERVING_PERCENTILES

_KEYS = tuple(k for k in ServingSpec.__dataclass_fields__ if k != "base_dir")
_ARRIVALS_TEXT = "\"poisson\", \"closed\" or a path to a file of arrival timestamps (relative to the recipe)"


def parse_serving(path: Path, table: dict[str, Any] | None, *, recipe_name: str) -> ServingSpec | None:
    """``[serving]`` (see :class:`ServingSpec`); None when the recipe has no such table.

    The replayed file of ``arrivals`` must exist now (a typo found at the start, not after the search); its
    content is read by the serving stage. ``model_name`` defaults to :func:`safe_model_name` of ``recipe_name``.
    """
    if table is None:
        return None
    r = TableReader(path, table, "serving.", _KEYS)
    base_dir = path.resolve().parent
    slo_ms = r.positive("slo_ms", float, None)
    if slo_ms is None:
        raise r.error("slo_ms", "is required: the latency objective in milliseconds (e.g. slo_ms = 50)")
    arrivals = _arrivals(r, base_dir)
    concurrency = r.positive("concurrency", int, None)
    if arrivals == "closed" and concurrency is None:
        raise r.error("concurrency", "is required with arrivals = \"closed\": the number of clients, each sending "
                      "its next request when the last one is answered")
    if arrivals != "closed" and concurrency is not None:
        raise r.error("concurrency", f"only applies to arrivals = \"closed\", but arrivals is {arrivals!r}")
    rate = r.positive("rate", float, None)
    if rate is not None and arrivals == "closed":
        raise r.error("rate", "does not apply to arrivals = \"closed\": a closed loop's rate is what the server "
                      "answers; give a concurrency, or use \"poisson\" arrivals at this rate")
    model_name = r.get("model_name", str, None)
    if model_name is not None and MODEL_NAME_PATTERN.fullmatch(model_name) is None:
        raise r.error("model_name", f"{model_name!r} is not allowed; allowed: up to {MAX_MODEL_NAME} letters, "
                      "digits, '_', '.' and '-', starting with a letter or digit (it is a URL path segment and "
                      f"a directory name; e.g. {safe_model_name(model_name)!r})")
    return ServingSpec(
        slo_ms=slo_ms,
        percentile=r.choice("percentile", SERVING_PERCENTILES, "p99"),
        arrivals=arrivals,
        concurrency=concurrency,
        request_samples=_request_samples(r),
        rate=rate,
        instances=_counts(r, "instances"),
        threads=_counts(r, "threads"),
        max_batch=_counts(r, "max_batch"),
        max_delay_ms=_delays(r),
        time_budget_s=r.positive("time_budget_s", float, ServingSpec.time_budget_s),
        model_name=model_name if model_name is not None else safe_model_name(recipe_name),
        confirm=r.positive("confirm", int, ServingSpec.confirm),
        base_dir=str(base_dir),
    )


def _arrivals(r: TableReader, base_dir: Path) -> str:
    value: str = r.get("arrivals", str, "poisson")
    if value in NAMED_ARRIVALS:
        return value
    if not value.strip():
        raise r.error("arrivals", f"must not be empty; allowed: {_ARRIVALS_TEXT}")
    file = base_dir / Path(value).expanduser()
    try:
        found = file.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL character
        found = False
    if not found:
        named = "/" not in value and "\\" not in value and "." not in value
        hint = closest(value, NAMED_ARRIVALS) if named else None
        what = f"{value!r} is not allowed; allowed: {_ARRIVALS_TEXT}" if named and hint else \
            f"no file {str(file)!r} (a file of arrival timestamps is read relative to the recipe); " \
            f"allowed: {_ARRIVALS_TEXT}"
        raise r.error("arrivals", what, hint=hint)
    return value


def _request_samples(r: TableReader) -> int | Literal["batch"]:
    value = r.get("request_samples", (int, str), 1)
    if isinstance(value, str):
        if value != "batch":
            raise r.error("request_samples", f"'{value}' is not allowed; allowed: a positive integer (samples per "
                          "request) or \"batch\" (each request one of the data factory's batches)",
                          hint="batch" if closest(value, ("batch",)) else None)
        return "batch"
    if value <= 0:
        raise r.error("request_samples", f"must be a positive integer or \"batch\", got {value!r}")
    return int(value)


def _counts(r: TableReader, key: str) -> tuple[int, ...] | Literal["auto"]:
    return r.counts(key)  # type: ignore[return-value]


def _delays(r: TableReader) -> tuple[float, ...]:
    """The batcher's waits in ms: a number >= 0 or a list of them (sorted, duplicates dropped)."""
    raw = r.get("max_delay_ms", (list, float), list(DEFAULT_MAX_DELAYS_MS))
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise r.error("max_delay_ms", "must not be empty; allowed: a number of milliseconds >= 0 or a list of them "
                      "(0: dispatch at once)")
    for i, v in enumerate(items):
        where = f"max_delay_ms[{i}]" if isinstance(raw, list) else "max_delay_ms"
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise r.error(where, f"must be a finite number of milliseconds >= 0, got {v!r}")
    return tuple(sorted({float(v) for v in items}))
