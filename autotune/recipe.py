"""Recipes: a TOML file that says what to tune, parsed into frozen dataclasses.

Why a strict parser: a typo in a recipe (``batch_size`` for ``batch_sizes``) would otherwise be
silently ignored and the user would tune something else than they meant, possibly for an hour.
So every unknown key is an error that suggests the closest valid key, and every error names the
file, the dotted field and what is allowed.

The format (every field documented in README.md)::

    name = "quickstart"                    # optional, defaults to the file stem
    description = "..."                    # optional
    device = "cpu"                         # auto | cpu | cuda | cuda:N | xpu | xpu:N

    [model]
    factory = "torchvision.models:resnet18"   # pkg.mod:function, or path/to/file.py:function
    kwargs = { num_classes = 10 }             # keyword arguments for the factory

    [[inputs]]                             # one table per positional input of forward()
    name = "x"
    shape = [3, 64, 64]                    # per sample: the batch dimension is added in front
    dtype = "float32"                      # float32 | float16 | bfloat16 | int64 | int32
    vocab_size = 30522                     # integer inputs only: values drawn from [0, vocab_size)

    [search]
    variants = ["eager", "frozen", "compile"]   # or "all"
    precisions = ["fp32"]
    memory_formats = ["contiguous"]
    batch_sizes = [1, 8, 32]               # or "auto": search up to the memory boundary
    objective = "throughput"               # throughput | latency | pareto
    time_budget_s = 120
    max_trials = 0                         # 0: no limit besides the time budget
    seed = 0
    strategy = "tpe"                       # tpe (Optuna's TPE, NSGA-II for pareto, over (variant, batch)
                                           # pairs, each measured in full) | bracket (experimental:
                                           # autotune.strategy, per-variant batch bracketing, short screens
                                           # raced by CI, gain per second)

    [constraints]
    max_latency_ms = 50.0                  # SLO on the latency percentile below
    latency_percentile = "p99"             # mean | p50 | p90 | p99
    max_memory = "4GiB"

    [batch]
    max_batch_size = 65536
    granularity = 1                        # batch sizes are multiples of it; default: 8 for fp16/bf16 on a
                                           # GPU (tensor cores), else 1
    memory_budget = "8GiB"                 # CPU: default a safe fraction of available memory; GPU: a cap
                                           # below the memory free at the start (the default limit)
    headroom = 0.10                        # margin below the boundary for recommended batch sizes

    [measure]
    mode = "throughput"                    # throughput | latency
    ci_target = 0.01                       # stop when the 95% CI half-width <= 1% of the mean
    max_seconds = 10.0                     # per-candidate measurement budget
    timeout_s = 600.0                      # a candidate's worker is killed after this
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from autotune.device_names import ALLOWED_TEXT, is_device_name
from autotune.errors import RecipeError
from autotune.sizes import parse_size
from autotune.vocab import MODES as MODES
from autotune.vocab import OBJECTIVES as OBJECTIVES
from autotune.vocab import PERCENTILES as PERCENTILES
from autotune.vocab import STRATEGIES as STRATEGIES

DTYPES = ("float32", "float16", "bfloat16", "int64", "int32")
INTEGER_DTYPES = ("int64", "int32")
DEFAULT_MAX_BATCH_SIZE = 65536


@dataclass(frozen=True)
class ModelSpec:
    """Where the model comes from: ``module:function`` or ``file.py:function`` plus kwargs."""

    factory: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    base_dir: str = "."  # directory of the recipe: file factories are relative to it


@dataclass(frozen=True)
class InputSpec:
    """One positional input of ``forward``: per-sample shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    vocab_size: int | None = None

    @property
    def is_integer(self) -> bool:
        return self.dtype in INTEGER_DTYPES


@dataclass(frozen=True)
class SearchSpec:
    variants: tuple[str, ...] = ("eager",)
    precisions: tuple[str, ...] = ("fp32",)
    memory_formats: tuple[str, ...] = ("contiguous",)
    batch_sizes: tuple[int, ...] | Literal["auto"] = "auto"
    objective: str = "throughput"
    time_budget_s: float = 300.0
    max_trials: int = 0
    seed: int = 0
    #: Finalists whose paired throughput (or latency) ratio to the leader is within this fraction
    #: are a tie, decided by the tie-break (autotune.showdown).
    equivalence_margin: float = 0.02
    strategy: str = "tpe"


@dataclass(frozen=True)
class Constraints:
    max_latency_ms: float | None = None
    latency_percentile: str = "p99"
    max_memory_bytes: int | None = None


@dataclass(frozen=True)
class BatchSpec:
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    granularity: int | None = None  # None: the device's default (see autotune.boundaries.granularity_for)
    memory_budget_bytes: int | None = None
    headroom: float = 0.10


@dataclass(frozen=True)
class MeasureSpec:
    mode: str = "throughput"
    ci_target: float = 0.01
    max_seconds: float = 10.0
    timeout_s: float = 600.0
    #: Showdown: interleaved rounds over the finalists (0: no showdown) and seconds per slice.
    rounds: int = 6
    round_seconds: float = 0.5
    #: Showdown: fresh worker processes per finalist (rounds alternate between them).
    processes: int = 2


@dataclass(frozen=True)
class Recipe:
    path: str
    name: str
    description: str
    device: str
    model: ModelSpec
    inputs: tuple[InputSpec, ...]
    search: SearchSpec = SearchSpec()
    constraints: Constraints = Constraints()
    batch: BatchSpec = BatchSpec()
    measure: MeasureSpec = MeasureSpec()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, used in report.json and to hand the recipe to a worker."""
        data = asdict(self)
        data["model"]["kwargs"] = dict(self.model.kwargs)
        data["inputs"] = [dict(asdict(i), shape=list(i.shape)) for i in self.inputs]
        sb = self.search.batch_sizes
        data["search"]["batch_sizes"] = sb if isinstance(sb, str) else list(sb)
        for key in ("variants", "precisions", "memory_formats"):
            data["search"][key] = list(data["search"][key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recipe:
        """Inverse of :meth:`to_dict` (trusted input: what to_dict produced)."""
        sd = dict(data["search"])
        for key in ("variants", "precisions", "memory_formats"):
            sd[key] = tuple(sd[key])
        if not isinstance(sd["batch_sizes"], str):
            sd["batch_sizes"] = tuple(sd["batch_sizes"])
        return cls(
            path=data["path"],
            name=data["name"],
            description=data["description"],
            device=data["device"],
            model=ModelSpec(**data["model"]),
            inputs=tuple(InputSpec(**dict(i, shape=tuple(i["shape"]))) for i in data["inputs"]),
            search=SearchSpec(**sd),
            constraints=Constraints(**data["constraints"]),
            batch=BatchSpec(**data["batch"]),
            measure=MeasureSpec(**data["measure"]),
        )


# --------------------------------------------------------------------------- parsing helpers


class _Reader:
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


def closest(word: str, options: tuple[str, ...] | list[str]) -> str | None:
    """The most similar valid spelling, for "did you mean" hints (None when nothing is close)."""
    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return found[0] if found else None


def _kind_names(kinds: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a table",
             bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def factory_file(model: ModelSpec) -> Path | None:
    """The file a ``path/to/file.py:function`` factory is imported from (relative to the recipe's directory);
    None for a ``package.module:function`` factory. The same rule as the worker's import."""
    target = model.factory.rpartition(":")[0]
    if not (target.endswith(".py") or "/" in target):
        return None
    file = Path(target)
    return file if file.is_absolute() else Path(model.base_dir) / file


def _package_version(module: str) -> str | None:
    """``name version`` of the installed distribution that provides ``module``'s top-level package, read from
    metadata (nothing is imported); None for a module no distribution provides."""
    top = module.split(".", 1)[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def fingerprint_parts(recipe: Recipe) -> dict[str, Any]:
    """What the recipe contributes to a study's fingerprint: the model and its inputs.

    A ``file.py:function`` factory is identified by the file's contents (SHA-256), not only by its name:
    an edited model is another study. A ``module:function`` factory by the version of the package that
    provides it. The recipe's directory is not in it (two checkouts of one project match).
    Raises :class:`RecipeError` when the factory file cannot be read.
    """
    file = factory_file(recipe.model)
    digest = None
    if file is not None:
        try:
            digest = hashlib.sha256(file.read_bytes()).hexdigest()[:16]
        except OSError as exc:
            raise RecipeError(f"{recipe.path}: field 'model.factory': cannot read '{file}': "
                              f"{exc.strerror or exc}") from None
    module = recipe.model.factory.rpartition(":")[0]
    return {
        "model.factory": recipe.model.factory,
        "model.factory_file_sha256": digest,
        "model.factory_package": None if file is not None else _package_version(module),
        "model.kwargs": json.dumps(dict(recipe.model.kwargs), sort_keys=True),
        "inputs": json.dumps([dict(name=i.name, shape=list(i.shape), dtype=i.dtype, vocab_size=i.vocab_size)
                              for i in recipe.inputs], sort_keys=True),
    }


_TOP_KEYS = ("name", "description", "device", "model", "inputs", "search", "constraints", "batch", "measure")


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file; every problem is a :class:`RecipeError`."""
    p = Path(path)
    if not p.exists():
        raise RecipeError(f"{p}: recipe file not found")
    if p.is_dir():
        raise RecipeError(f"{p}: is a directory, expected a .toml recipe file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{p}: cannot read recipe: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{p}: invalid TOML: {exc}") from None
    return parse_recipe(data, path=p)


def parse_recipe(data: Mapping[str, Any], *, path: Path) -> Recipe:
    top = _Reader(path, data, "", _TOP_KEYS)
    name = top.get("name", str, path.stem)
    description = top.get("description", str, "")
    device = top.get("device", str, "auto")
    if not is_device_name(device):
        raise top.error("device", f"'{device}' is not allowed; allowed: {ALLOWED_TEXT}")

    model_table = top.get("model", dict, None, required=True)
    mr = _Reader(path, model_table, "model.", ("factory", "kwargs"))
    factory = mr.get("factory", str, None, required=True)
    if ":" not in factory or not factory.split(":", 1)[1] or not factory.split(":", 1)[0]:
        raise mr.error(
            "factory",
            f"'{factory}' is not a factory reference; allowed: 'package.module:function' "
            "or 'path/to/file.py:function' (relative to the recipe)",
        )
    kwargs = mr.get("kwargs", dict, {})
    model = ModelSpec(factory=factory, kwargs=dict(kwargs), base_dir=str(path.resolve().parent))

    inputs = _parse_inputs(path, top.get("inputs", list, None, required=True))
    search = _parse_search(path, top.get("search", dict, {}))
    constraints = _parse_constraints(path, top.get("constraints", dict, {}))
    batch = _parse_batch(path, top.get("batch", dict, {}))
    measure = _parse_measure(path, top.get("measure", dict, {}))
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
    )


def _parse_inputs(path: Path, items: list[Any]) -> tuple[InputSpec, ...]:
    if not items:
        raise RecipeError(f"{path}: field 'inputs': at least one [[inputs]] table is required")
    specs = []
    for i, item in enumerate(items):
        prefix = f"inputs[{i}]."
        if not isinstance(item, dict):
            raise RecipeError(f"{path}: field 'inputs[{i}]': expected a table, got {item!r}")
        r = _Reader(path, item, prefix, ("name", "shape", "dtype", "vocab_size"))
        name = r.get("name", str, f"input{i}")
        shape = r.get("shape", list, None, required=True)
        for j, dim in enumerate(shape):
            if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
                raise RecipeError(
                    f"{path}: field '{prefix}shape[{j}]': dimensions must be positive integers, got {dim!r}"
                )
        dtype = r.choice("dtype", DTYPES, "float32")
        vocab = r.positive("vocab_size", int, None)
        if dtype in INTEGER_DTYPES and vocab is None:
            raise r.error("vocab_size", f"is required for integer inputs (dtype '{dtype}'): values are drawn "
                          "from [0, vocab_size)")
        if dtype not in INTEGER_DTYPES and vocab is not None:
            raise r.error("vocab_size", f"only applies to integer inputs, but dtype is '{dtype}'")
        specs.append(InputSpec(name=name, shape=tuple(shape), dtype=dtype, vocab_size=vocab))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise RecipeError(f"{path}: field 'inputs': input names must be unique, got {names}")
    return tuple(specs)


def _parse_search(path: Path, table: dict[str, Any]) -> SearchSpec:
    r = _Reader(path, table, "search.", tuple(SearchSpec.__dataclass_fields__))
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
        variants=r.string_list("variants", SearchSpec.variants),
        precisions=r.string_list("precisions", SearchSpec.precisions),
        memory_formats=r.string_list("memory_formats", SearchSpec.memory_formats),
        batch_sizes=batch_sizes,
        objective=r.choice("objective", OBJECTIVES, "throughput"),
        time_budget_s=r.positive("time_budget_s", float, SearchSpec.time_budget_s),
        max_trials=r.positive("max_trials", int, 0, allow_zero=True),
        seed=r.get("seed", int, 0),
        equivalence_margin=_fraction(r, "equivalence_margin", SearchSpec.equivalence_margin),
        strategy=r.choice("strategy", STRATEGIES, SearchSpec.strategy),
    )


def _fraction(r: _Reader, key: str, default: float) -> float:
    value = r.get(key, (float, int), default)
    if not 0.0 <= float(value) < 0.5:
        raise r.error(key, f"is a fraction and must be in [0, 0.5), got {value!r}")
    return float(value)


def _parse_constraints(path: Path, table: dict[str, Any]) -> Constraints:
    r = _Reader(path, table, "constraints.", ("max_latency_ms", "latency_percentile", "max_memory"))
    return Constraints(
        max_latency_ms=r.positive("max_latency_ms", float, None),
        latency_percentile=r.choice("latency_percentile", PERCENTILES, "p99"),
        max_memory_bytes=r.size("max_memory"),
    )


def _parse_batch(path: Path, table: dict[str, Any]) -> BatchSpec:
    r = _Reader(path, table, "batch.", ("max_batch_size", "granularity", "memory_budget", "headroom"))
    headroom = r.get("headroom", float, 0.10)
    if not 0.0 <= headroom < 1.0:
        raise r.error("headroom", f"must be in [0, 1), got {headroom!r}")
    return BatchSpec(
        max_batch_size=r.positive("max_batch_size", int, DEFAULT_MAX_BATCH_SIZE),
        granularity=r.positive("granularity", int, None),
        memory_budget_bytes=r.size("memory_budget"),
        headroom=headroom,
    )


def _parse_measure(path: Path, table: dict[str, Any]) -> MeasureSpec:
    r = _Reader(path, table, "measure.", tuple(MeasureSpec.__dataclass_fields__))
    ci_target = r.positive("ci_target", float, 0.01)
    if ci_target >= 1.0:
        raise r.error("ci_target", f"is a fraction of the mean and must be below 1, got {ci_target!r}")
    rounds = r.positive("rounds", int, MeasureSpec.rounds, allow_zero=True)
    if rounds == 1:
        raise r.error("rounds", "must be 0 (no showdown) or at least 2: a paired comparison needs rounds to pair")
    return MeasureSpec(
        mode=r.choice("mode", MODES, "throughput"),
        ci_target=ci_target,
        max_seconds=r.positive("max_seconds", float, 10.0),
        timeout_s=r.positive("timeout_s", float, 600.0),
        rounds=rounds,
        processes=r.positive("processes", int, MeasureSpec.processes),
        round_seconds=r.positive("round_seconds", float, MeasureSpec.round_seconds),
    )
