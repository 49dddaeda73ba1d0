"""Reading a recipe: the TOML file (:func:`load_recipe`) or its table (:func:`parse_recipe`) into a :class:`Recipe`.

One function per table of the format (documented in :mod:`autotune.core.recipe`), each reading its keys through a
:class:`~autotune.core.recipe.reader.TableReader` (unknown keys and wrong types are errors that name the field) and
adding the rules that span keys: integer inputs need a ``vocab_size``, explicit batch sizes stay within
``batch.max_batch_size``, one showdown round pairs nothing.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from autotune.core.device_names import ALLOWED_TEXT, is_device_name
from autotune.core.limits import (
    MAX_DEPTH,
    MAX_RECIPE_BYTES,
    MAX_SAMPLE_ELEMENTS,
    depth_exceeds,
    read_text_limited,
    too_deep,
)
from autotune.core.process_env import ALLOCATORS, OMP_SETTINGS, ProcessEnvironment
from autotune.core.recipe.generate import parse_generate
from autotune.core.recipe.reader import TableReader, closest
from autotune.core.recipe.serving import parse_serving
from autotune.core.recipe.spec import (
    DEFAULT_MAX_BATCH_SIZE,
    DTYPES,
    INTEGER_DTYPES,
    SEED_RANGE_TEXT,
    UNDECIDED_POLICIES,
    AccuracySpec,
    BatchSpec,
    Constraints,
    DataSpec,
    InputSpec,
    MeasureSpec,
    ModelSpec,
    Recipe,
    SearchSpec,
    valid_seed,
)
from autotune.core.vocab import MODES, OBJECTIVES, PERCENTILES, STRATEGIES
from autotune.errors import InputError, RecipeError

_TOP_KEYS = ("name", "description", "device", "model", "inputs", "data", "accuracy", "search", "constraints", "batch",
             "measure", "serving", "generate")
#: ``search.shapes``: how shape-specialising variants meet dynamic dimensions (see :class:`SearchSpec`).
SHAPE_POLICIES = ("dynamic", "buckets")


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file; every problem is a :class:`RecipeError`.

    Every OS error is one (a name too long for the file system, no permission to ``stat`` it), and so is a
    file over :data:`~autotune.core.limits.MAX_RECIPE_BYTES`, not UTF-8, or nested over
    :data:`~autotune.core.limits.MAX_DEPTH` levels.
    """
    p = Path(path)
    try:
        if p.is_dir():
            raise RecipeError(f"{p}: is a directory, expected a .toml recipe file")
        text = read_text_limited(p, MAX_RECIPE_BYTES, what="a TOML recipe")
    except FileNotFoundError:
        raise RecipeError(f"{p}: recipe file not found") from None
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read recipe: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL character in the path
        raise RecipeError(f"{str(p)!r}: cannot read recipe: {exc}") from None
    except RecipeError:
        raise
    except InputError as exc:
        raise RecipeError(str(exc)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{p}: invalid TOML: {exc}") from None
    except RecursionError:
        raise RecipeError(str(too_deep(str(p)))) from None
    return parse_recipe(data, path=p)


def parse_recipe(data: Mapping[str, Any], *, path: Path) -> Recipe:
    if depth_exceeds(data, MAX_DEPTH):
        raise RecipeError(str(too_deep(str(path))))
    top = TableReader(path, data, "", _TOP_KEYS)
    name = top.get("name", str, path.stem)
    description = top.get("description", str, "")
    device = top.get("device", str, "auto")
    if not is_device_name(device):
        raise top.error("device", f"'{device}' is not allowed; allowed: {ALLOWED_TEXT}")

    model_table = top.get("model", dict, None, required=True)
    mr = TableReader(path, model_table, "model.", ("factory", "kwargs"))
    factory = _factory_reference(mr)
    kwargs = _json_kwargs(mr, "kwargs")
    model = ModelSpec(factory=factory, kwargs=dict(kwargs), base_dir=str(path.resolve().parent))

    data_spec = _parse_data(path, top.get("data", dict, None))
    generate = parse_generate(path, top.get("generate", dict, None))
    raw_inputs = top.get("inputs", list, None, required=data_spec is None and generate is None)
    if data_spec is not None and raw_inputs:
        raise top.error("inputs", "must be left out when [data] names a factory: the inputs are the factory's "
                        "batches (their names, dtypes and shapes)")
    inputs = _parse_inputs(path, raw_inputs) if data_spec is None and raw_inputs is not None else ()
    accuracy = _parse_accuracy(path, top.get("accuracy", dict, None), has_data=data_spec is not None)
    search = _parse_search(path, top.get("search", dict, {}))
    constraints = _parse_constraints(path, top.get("constraints", dict, {}))
    batch = _parse_batch(path, top.get("batch", dict, {}))
    measure = _parse_measure(path, top.get("measure", dict, {}))
    serving = parse_serving(path, top.get("serving", dict, None), recipe_name=name)
    if isinstance(search.batch_sizes, tuple):
        for i, b in enumerate(search.batch_sizes):
            if b > batch.max_batch_size:
                raise RecipeError(
                    f"{path}: field 'search.batch_sizes[{i}]': {b} exceeds batch.max_batch_size "
                    f"({batch.max_batch_size})"
                )
    return Recipe(
        path=str(path),
        name=name,
        description=description,
        device=device,
        model=model,
        inputs=inputs,
        search=search,
        constraints=constraints,
        batch=batch,
        measure=measure,
        data=data_spec,
        accuracy=accuracy,
        serving=serving,
        generate=generate,
    )


def _factory_reference(r: TableReader) -> str:
    factory: str = r.get("factory", str, None, required=True)
    if ":" not in factory or not factory.split(":", 1)[1] or not factory.split(":", 1)[0]:
        raise r.error(
            "factory",
            f"'{factory}' is not a factory reference; allowed: 'package.module:function' "
            "or 'path/to/file.py:function' (relative to the recipe)",
        )
    return factory


def _parse_data(path: Path, table: dict[str, Any] | None) -> DataSpec | None:
    """``[data]``: the user's batches (see :class:`DataSpec`); checked for form here, for content in a worker."""
    if table is None:
        return None
    r = TableReader(path, table, "data.", ("factory", "kwargs", "max_batches", "buckets", "pad_values"))
    factory = _factory_reference(r)
    buckets_raw = r.get("buckets", list, None)
    buckets: tuple[int, ...] | None = None
    if buckets_raw is not None:
        if not buckets_raw:
            raise r.error("buckets", "must not be empty; leave it out for powers of two up to the largest size seen")
        for i, b in enumerate(buckets_raw):
            if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
                raise RecipeError(f"{path}: field 'data.buckets[{i}]': bucket sizes must be positive integers, "
                                  f"got {b!r}")
        buckets = tuple(sorted(set(buckets_raw)))
    pads = r.get("pad_values", dict, {})
    for key, value in pads.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecipeError(f"{path}: field 'data.pad_values.{key}': expected a number, got {value!r}")
    return DataSpec(factory=factory, kwargs=_json_kwargs(r, "kwargs"), base_dir=str(path.resolve().parent),
                    max_batches=r.positive("max_batches", int, DataSpec.max_batches), buckets=buckets,
                    pad_values={k: float(v) for k, v in pads.items()})


def _parse_accuracy(path: Path, table: dict[str, Any] | None, *, has_data: bool) -> AccuracySpec | None:
    """``[accuracy]`` (see :class:`AccuracySpec`): ``metric`` is a factory reference and needs ``[data]`` (a
    metric's labels belong to the user's data, not to random inputs); ``max_drop`` is a number >= 0 (absolute)
    or a percentage string ``"1%"`` (relative to eager fp32's value), below 100%."""
    if table is None:
        return None
    r = TableReader(path, table, "accuracy.", ("metric", "max_drop", "undecided"))
    metric: str | None = None
    if "metric" in table:
        metric = r.get("metric", str, None)
        assert metric is not None
        target, _, attr = metric.rpartition(":")
        if not target or not attr:
            raise r.error("metric", f"'{metric}' is not a function reference; allowed: 'path/to/file.py:function' "
                          "(relative to the recipe) or 'package.module:function'")
        if not has_data:
            raise r.error("metric", "needs a [data] factory: the metric scores the model's outputs on your batches "
                          "(random [[inputs]] have no labels)")
    raw = r.get("max_drop", (float, str), None)
    max_drop: float | None = None
    relative = False
    if isinstance(raw, str):
        text = raw.strip()
        try:
            if not text.endswith("%"):
                raise ValueError
            max_drop = float(text[:-1]) / 100.0
        except ValueError:
            raise r.error("max_drop", f"'{raw}' is not allowed; allowed: a number >= 0 (absolute, in the metric's "
                          "units) or a percentage like \"1%\" (relative to eager fp32's value)") from None
        relative = True
        if not 0.0 <= max_drop < 1.0 or max_drop != max_drop:
            raise r.error("max_drop", f"a relative drop must be in [0%, 100%), got '{raw}'")
    elif raw is not None:
        max_drop = float(raw)
        if not max_drop >= 0.0 or max_drop == float("inf"):
            raise r.error("max_drop", f"must be a finite number >= 0, got {raw!r}")
    if metric is None and max_drop is not None and max_drop >= 1.0:
        raise r.error("max_drop", f"without a metric it is the top-1 disagreement allowed, a fraction below 1; "
                      f"got {raw!r}")
    undecided = r.get("undecided", str, "accept")
    if undecided not in UNDECIDED_POLICIES:
        allowed = ", ".join(map(repr, UNDECIDED_POLICIES))
        raise r.error("undecided", f"'{undecided}' is not allowed; allowed: {allowed} (what a variant gets when "
                      "its drop's 95% interval straddles max_drop)")
    return AccuracySpec(metric=metric, max_drop=max_drop, relative=relative, base_dir=str(path.resolve().parent),
                        undecided=undecided)


def _parse_inputs(path: Path, items: list[Any]) -> tuple[InputSpec, ...]:
    if not items:
        raise RecipeError(f"{path}: field 'inputs': at least one [[inputs]] table is required")
    specs: list[InputSpec] = []
    for i, item in enumerate(items):
        prefix = f"inputs[{i}]."
        if not isinstance(item, dict):
            raise RecipeError(f"{path}: field 'inputs[{i}]': expected a table, got {item!r}")
        r = TableReader(path, item, prefix, ("name", "shape", "dtype", "vocab_size", "keyword", "range"))
        name = r.get("name", str, f"input{i}")
        shape = r.get("shape", list, None, required=True)
        for j, dim in enumerate(shape):
            if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
                raise RecipeError(
                    f"{path}: field '{prefix}shape[{j}]': dimensions must be positive integers, got {dim!r}"
                )
        if math.prod(shape) > MAX_SAMPLE_ELEMENTS:
            raise r.error("shape", f"{shape} is {math.prod(shape):,} elements per sample; at most "
                                   f"{MAX_SAMPLE_ELEMENTS:,} (the shape of one sample, without the batch dimension)")
        dtype = r.choice("dtype", DTYPES, "float32")
        vocab = r.positive("vocab_size", int, None)
        value_range = _int_range(r, dtype)
        if dtype in INTEGER_DTYPES and vocab is None and value_range is None:
            raise r.error("vocab_size", f"is required for integer inputs (dtype '{dtype}') without a 'range': "
                          "values are drawn from [0, vocab_size)")
        if dtype not in INTEGER_DTYPES and vocab is not None:
            raise r.error("vocab_size", f"only applies to integer inputs, but dtype is '{dtype}'")
        if vocab is not None and value_range is not None:
            raise r.error("range", "give either 'vocab_size' (values in [0, vocab_size)) or 'range', not both")
        keyword = r.get("keyword", bool, False)
        if specs and specs[-1].keyword and not keyword:
            raise r.error("keyword", f"positional input '{name}' follows keyword input '{specs[-1].name}'; "
                          "list the positional inputs first")
        specs.append(InputSpec(name=name, shape=tuple(shape), dtype=dtype, vocab_size=vocab, keyword=keyword,
                               range=value_range))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise RecipeError(f"{path}: field 'inputs': input names must be unique, got {names}")
    return tuple(specs)


def _int_range(r: TableReader, dtype: str) -> tuple[int, int] | None:
    raw = r.get("range", list, None)
    if raw is None:
        return None
    if dtype not in INTEGER_DTYPES:
        raise r.error("range", f"only applies to integer inputs, but dtype is '{dtype}'")
    if (len(raw) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in raw) or raw[0] >= raw[1]):
        raise r.error("range", f"expected [low, high] with integers low < high (values drawn from [low, high)), "
                      f"got {raw!r}")
    return int(raw[0]), int(raw[1])


def _names(r: TableReader, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """``variants``, ``precisions`` or ``memory_formats``, each name checked against the vocabulary here, so a
    typo names the recipe file and the field at once (it was found by a worker seconds later, as "variants: ...").
    Whether a known name runs on this machine is still the worker's to say."""
    from autotune.core.variant_names import MEMORY_FORMATS, PRECISIONS, parse_variant_name

    names = r.string_list(key, default)
    for i, name in enumerate(names):
        if key == "variants":
            try:
                parse_variant_name(name)
            except InputError as exc:
                raise r.error(f"{key}[{i}]", str(exc).removeprefix("variants: ")) from None
        else:
            allowed = PRECISIONS if key == "precisions" else MEMORY_FORMATS
            if name not in allowed:
                raise r.error(f"{key}[{i}]", f"'{name}' is not allowed; allowed: {', '.join(allowed)}",
                              hint=closest(name, allowed))
    return names


def _parse_search(path: Path, table: dict[str, Any]) -> SearchSpec:
    r = TableReader(path, table, "search.", tuple(SearchSpec.__dataclass_fields__))
    batch_sizes: tuple[int, ...] | Literal["auto"]
    raw = r.get("batch_sizes", (list, str), "auto")
    if isinstance(raw, str):
        if raw != "auto":
            raise r.error("batch_sizes", f"'{raw}' is not allowed; allowed: \"auto\" or a list of positive integers")
        batch_sizes = "auto"
    else:
        if not raw:
            raise r.error("batch_sizes", "must not be empty; use \"auto\" or a list of positive integers")
        for i, b in enumerate(raw):
            if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
                raise RecipeError(
                    f"{path}: field 'search.batch_sizes[{i}]': batch sizes must be positive integers, got {b!r}"
                )
        batch_sizes = tuple(sorted(set(raw)))
    return SearchSpec(
        variants=_names(r, "variants", SearchSpec.variants),
        precisions=_names(r, "precisions", SearchSpec.precisions),
        memory_formats=_names(r, "memory_formats", SearchSpec.memory_formats),
        shapes=_shapes(r),
        threads=_threads(path, r),
        environments=_environments(r),
        batch_sizes=batch_sizes,
        objective=r.choice("objective", OBJECTIVES, "throughput"),
        time_budget_s=r.positive("time_budget_s", float, SearchSpec.time_budget_s),
        max_trials=r.positive("max_trials", int, 0, allow_zero=True),
        seed=_seed(r),
        equivalence_margin=r.fraction("equivalence_margin", SearchSpec.equivalence_margin),
        strategy=r.choice("strategy", STRATEGIES, SearchSpec.strategy),
    )


def _json_kwargs(r: TableReader, key: str) -> dict[str, Any]:
    """A ``kwargs`` table whose values are all JSON values (strings, numbers, booleans, arrays, tables).

    The kwargs travel to the worker inside a JSON request and are stored in the study and report.json; a TOML
    date or time (``d = 1979-05-27``) is not JSON, so it is refused here, naming the field, instead of failing
    as a TypeError when the first request is encoded.
    """
    table: dict[str, Any] = dict(r.get(key, dict, {}))
    stack: list[tuple[str, Any]] = [(f"{r.field_name(key)}.{k}", v) for k, v in table.items()]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
        elif not isinstance(value, str | int | float | bool):
            raise RecipeError(f"{r.path}: field '{where}': a TOML {type(value).__name__} is not allowed in kwargs "
                              "(they reach the factory as JSON: strings, numbers, booleans, arrays, tables); "
                              "write it as a string")
    return table


def _seed(r: TableReader) -> int:
    seed: int = r.get("seed", int, 0)
    if not valid_seed(seed):
        raise r.error("seed", f"must be an integer {SEED_RANGE_TEXT}, got {seed}")
    return seed


def _shapes(r: TableReader) -> tuple[str, ...]:
    shapes = r.string_list("shapes", SearchSpec.shapes)
    if not shapes:
        raise r.error("shapes", f"must not be empty; allowed: {', '.join(SHAPE_POLICIES)}")
    for s in shapes:
        if s not in SHAPE_POLICIES:
            raise r.error("shapes", f"'{s}' is not allowed; allowed: {', '.join(SHAPE_POLICIES)}")
    return tuple(dict.fromkeys(shapes))


def _threads(path: Path, r: TableReader) -> tuple[int, ...] | Literal["auto"]:
    raw = r.get("threads", (list, str), [])
    if isinstance(raw, str):
        if raw != "auto":
            raise r.error("threads", f"'{raw}' is not allowed; allowed: \"auto\" or a list of positive integers")
        return "auto"
    for i, n in enumerate(raw):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise RecipeError(f"{path}: field 'search.threads[{i}]': thread counts must be positive integers, "
                              f"got {n!r}")
    return tuple(sorted(set(raw)))


def _environments(r: TableReader) -> tuple[str, ...] | Literal["auto"]:
    """``search.environments``: "auto" or a list of ``ALLOCATOR[+OMP]`` names, canonical and deduplicated."""
    raw = r.get("environments", (list, str), None)
    if raw is None:
        return ()
    allowed = f"\"auto\" or a list of {', '.join(ALLOCATORS)} (each optionally +{' or +'.join(OMP_SETTINGS)})"
    if isinstance(raw, str):
        if raw != "auto":
            raise r.error("environments", f"'{raw}' is not allowed; allowed: {allowed}")
        return "auto"
    if not raw:
        raise r.error("environments", f"must not be empty; leave it out for glibc's default only, or use {allowed}")
    names: list[str] = []
    for i, item in enumerate(raw):
        if not isinstance(item, str):
            raise r.error("environments", f"item {i} must be a string, got {item!r}; allowed: {allowed}")
        try:
            names.append(ProcessEnvironment.parse(item, field="environment").name)
        except InputError as exc:
            raise r.error(f"environments[{i}]", str(exc).removeprefix("environment: ")) from None
    return tuple(dict.fromkeys(names))


def _parse_constraints(path: Path, table: dict[str, Any]) -> Constraints:
    r = TableReader(path, table, "constraints.", ("max_latency_ms", "latency_percentile", "max_memory"))
    return Constraints(
        max_latency_ms=r.positive("max_latency_ms", float, None),
        latency_percentile=r.choice("latency_percentile", PERCENTILES, "p99"),
        max_memory_bytes=r.size("max_memory"),
    )


def _parse_batch(path: Path, table: dict[str, Any]) -> BatchSpec:
    r = TableReader(path, table, "batch.", ("max_batch_size", "granularity", "memory_budget", "headroom",
                                            "max_probe_seconds", "max_seconds"))
    headroom = r.get("headroom", float, 0.10)
    if not 0.0 <= headroom < 1.0:
        raise r.error("headroom", f"must be in [0, 1), got {headroom!r}")
    return BatchSpec(
        max_batch_size=r.positive("max_batch_size", int, DEFAULT_MAX_BATCH_SIZE),
        granularity=r.positive("granularity", int, None),
        memory_budget_bytes=r.size("memory_budget"),
        headroom=headroom,
        max_probe_seconds=r.positive("max_probe_seconds", float, None),
        max_seconds=r.positive("max_seconds", float, None),
    )


def _quiet_rounds(r: TableReader) -> bool | str:
    value: bool | str = r.get("quiet_rounds", (bool, str), MeasureSpec.quiet_rounds)
    if isinstance(value, str) and value != "auto":
        raise r.error("quiet_rounds", f"{value!r} is not allowed; allowed: true, false, \"auto\"")
    return value


def _parse_measure(path: Path, table: dict[str, Any]) -> MeasureSpec:
    r = TableReader(path, table, "measure.", tuple(MeasureSpec.__dataclass_fields__))
    ci_target = r.positive("ci_target", float, 0.01)
    if ci_target >= 1.0:
        raise r.error("ci_target", f"is a fraction of the mean and must be below 1, got {ci_target!r}")
    timeout_s = r.positive("timeout_s", float, 600.0)
    if timeout_s < 1.0:
        raise r.error("timeout_s", f"must be at least 1 second (a worker's start alone takes longer), "
                                   f"got {timeout_s!r}")
    rounds = r.positive("rounds", int, MeasureSpec.rounds, allow_zero=True)
    if rounds == 1:
        raise r.error("rounds", "must be 0 (no showdown) or at least 2: a paired comparison needs rounds to pair")
    return MeasureSpec(
        mode=r.choice("mode", MODES, "throughput"),
        ci_target=ci_target,
        max_seconds=r.positive("max_seconds", float, 10.0),
        timeout_s=timeout_s,
        rounds=rounds,
        processes=r.positive("processes", int, MeasureSpec.processes),
        round_seconds=r.positive("round_seconds", float, MeasureSpec.round_seconds),
        quiet_rounds=_quiet_rounds(r),
        as_shipped=r.get("as_shipped", bool, MeasureSpec.as_shipped),
    )
