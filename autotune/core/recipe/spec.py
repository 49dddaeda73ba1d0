"""The recipe's values: frozen dataclasses, one per table of the TOML file, and their JSON form.

A parsed recipe is a value, shared by the parent and every worker: :meth:`Recipe.to_dict` is what
report.json stores and what a worker request carries, :meth:`Recipe.from_dict` reads it back. The
defaults here are the format's defaults (:mod:`autotune.core.recipe.parse` fills a missing key from them);
what each field means is in :mod:`autotune.core.recipe` and README.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from autotune.core.recipe.generate import GenerateSpec

DTYPES = ("float32", "float16", "bfloat16", "int64", "int32")
INTEGER_DTYPES = ("int64", "int32")
DEFAULT_MAX_BATCH_SIZE = 65536
#: ``search.seed`` / ``--seed``: the range Optuna's samplers, numpy and ``torch.manual_seed`` all take.
SEED_LIMIT = 2**32
SEED_RANGE_TEXT = "in [0, 2**32 - 1]"


def valid_seed(value: object) -> bool:
    """An int (not a bool) that every seeded library takes."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < SEED_LIMIT


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
    #: Passed to ``forward`` by name (``model(..., name=tensor)``) instead of by position. Keyword inputs
    #: follow the positional ones, in the recipe's order.
    keyword: bool = False
    #: Integer inputs: values drawn uniformly from ``[low, high)`` (an attention mask is ``[0, 2)``); None:
    #: ``[0, vocab_size)``.
    range: tuple[int, int] | None = None

    @property
    def is_integer(self) -> bool:
        return self.dtype in INTEGER_DTYPES


@dataclass(frozen=True)
class DataSpec:
    """The user's own example batches: ``factory(batch_size=b, **kwargs)`` returns a finite iterable of them.

    Each batch is what the user's DataLoader yields: a tensor, a tuple of tensors (positional arguments of
    ``forward``) or a dict of tensors (keyword arguments). Resolved like the model factory.
    """

    factory: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    base_dir: str = "."
    #: Batches of the traffic kept per batch size (the first ones the factory yields): every candidate is
    #: gated on them and timed cycling through them.
    max_batches: int = 16
    #: Sizes a ``+buckets`` variant pads each dynamic dimension up to (None: powers of two from the
    #: smallest size seen up to the largest, which is always a bucket).
    buckets: tuple[int, ...] | None = None
    #: Value padding is filled with, per input name (default 0: pad token, mask off, zero pixels).
    pad_values: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AccuracySpec:
    """``[accuracy]``: the budget lower-precision variants (bf16, fp16, int8, autocast) are held to.

    ``metric`` (``file.py:function`` or ``module:function``, resolved like the data factory) is called as
    ``metric(outputs, batches) -> float`` (higher is better) on the ``[data]`` factory's batches: eager fp32's
    value is the reference and a variant's drop is ``reference - value`` (``relative``: over ``|reference|``).
    Without a metric the default applies (:mod:`autotune.worker.accuracy`): top-1 agreement with eager fp32 for
    classifier-shaped outputs, else per-precision closeness thresholds; ``max_drop`` then bounds the
    disagreement (default 0.01: 99% agreement).
    """

    metric: str | None = None
    #: The largest drop allowed: absolute in the metric's units, or a fraction of the reference (``relative``,
    #: written ``"1%"`` in the recipe). None: 1% relative with a metric, 0.01 disagreement without.
    max_drop: float | None = None
    relative: bool = False
    base_dir: str = "."
    #: What a variant whose drop's 95% interval straddles ``max_drop`` gets (too few samples to say): ``accept``
    #: (the default: not shown over budget, so ranked, with the verdict and the samples that would decide it in
    #: the report) or ``reject`` (only a variant shown within budget is ranked).
    undecided: str = "accept"

    @property
    def factory(self) -> str:
        """The metric's reference, under the name :func:`autotune.worker.factory.resolve_factory` reads."""
        return self.metric or ""

    def budget_text(self) -> str:
        """``drop <= 1% of eager fp32's value`` / ``drop <= 0.01``: how the report states the budget."""
        if self.max_drop is None:
            return "default"
        return f"drop <= {self.max_drop * 100:g}% of eager fp32's value" if self.relative else \
            f"drop <= {self.max_drop:g}"


#: ``accuracy.undecided``'s values.
UNDECIDED_POLICIES = ("accept", "reject")
#: ``serving.max_delay_ms``'s default: the batcher's waits tried, from none (dispatch at once) to 10 ms.
DEFAULT_MAX_DELAYS_MS = (0.0, 1.0, 2.0, 5.0, 10.0)
#: ``serving.arrivals``' named kinds; any other value is a file of arrival timestamps (``replay``).
NAMED_ARRIVALS = ("poisson", "closed")
#: ``serving.model_name``: what Triton's model repository and a URL path both take.
MAX_MODEL_NAME = 64
MODEL_NAME_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_MODEL_NAME - 1}}}")


def safe_model_name(name: str) -> str:
    """``name`` as a model name a server accepts in a URL path and as a directory (Triton's model repository):
    letters, digits, ``_``, ``.`` and ``-``, starting with a letter or digit; every other run of characters
    becomes ``_`` (``"my model/v2"`` -> ``my_model_v2``); nothing left: ``model``."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip("._-")[:MAX_MODEL_NAME].rstrip("._-")
    return cleaned or "model"


@dataclass(frozen=True)
class ServingSpec:
    """``[serving]``: the recommendation served behind a dynamic batcher under a latency SLO.

    The serving stage (:mod:`autotune.serving`) searches how the recommended model is served, not the model:
    ``instances`` (worker processes) x ``threads`` (each one's intra-op threads), the batcher's ``max_batch`` and
    ``max_delay_ms``, for the most requests per second whose ``percentile`` latency stays within ``slo_ms``; or,
    with ``rate``, the fewest cores that serve that rate within the SLO. Absent from the recipe: no serving stage,
    and the recipe's JSON form has no ``serving`` (old recipes' report.json and study fingerprints are unchanged).
    """

    #: The latency objective, per request end to end (queueing, batching and the call), in milliseconds.
    slo_ms: float
    percentile: str = "p99"  # a ServingPercentile (autotune.core.vocab)
    #: ``poisson`` (open loop, exponential gaps), ``closed`` (``concurrency`` clients, each sending when answered)
    #: or a file of arrival timestamps (seconds, one a line) replayed: stored as written, relative to ``base_dir``.
    arrivals: str = "poisson"
    concurrency: int | None = None
    #: Samples per request: a number, or ``"batch"`` (each request one of the data factory's whole batches).
    request_samples: int | Literal["batch"] = 1
    #: The traffic to serve (requests/s). None: find the highest rate within the SLO.
    rate: float | None = None
    instances: tuple[int, ...] | Literal["auto"] = "auto"
    threads: tuple[int, ...] | Literal["auto"] = "auto"
    max_batch: tuple[int, ...] | Literal["auto"] = "auto"
    max_delay_ms: tuple[float, ...] = DEFAULT_MAX_DELAYS_MS
    #: The serving stage's own budget, on top of the search's ``time_budget_s``.
    time_budget_s: float = 120.0
    #: The name the server answers to (``/v2/models/NAME``) and Triton's model directory; :func:`safe_model_name`
    #: of the recipe's name when the recipe leaves it out (filled in by the parser).
    model_name: str | None = None
    #: Configurations the simulation ranks best that are then loaded for real, the recommendation among them.
    confirm: int = 3
    base_dir: str = "."

    @property
    def arrivals_kind(self) -> str:
        """``poisson``, ``closed`` or ``replay`` (an ``Arrivals``, :mod:`autotune.core.vocab`)."""
        return self.arrivals if self.arrivals in NAMED_ARRIVALS else "replay"

    @property
    def arrivals_path(self) -> Path | None:
        """The replayed file, resolved against the recipe's directory (None for a named kind)."""
        if self.arrivals in NAMED_ARRIVALS:
            return None
        return Path(self.base_dir) / Path(self.arrivals).expanduser()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: tuples as lists, every field written (the table is new: no older form to keep)."""
        data = asdict(self)
        for key in ("instances", "threads", "max_batch", "max_delay_ms"):
            value = getattr(self, key)
            data[key] = value if isinstance(value, str) else list(value)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingSpec:
        """Inverse of :meth:`to_dict` (trusted input)."""
        fields = dict(data)
        for key in ("instances", "threads", "max_batch", "max_delay_ms"):
            if key in fields and not isinstance(fields[key], str):
                fields[key] = tuple(fields[key])
        return cls(**fields)


@dataclass(frozen=True)
class SearchSpec:
    variants: tuple[str, ...] = ("eager",)
    #: How shape-specialising variants meet the traffic's dynamic dimensions, crossed with the variants:
    #: ``dynamic`` (dynamic axes / dynamic shapes) and ``buckets`` (inputs padded up to the next of
    #: ``data.buckets``; the ``+buckets`` modifier). Without dynamic dimensions only ``dynamic`` applies.
    shapes: tuple[str, ...] = ("dynamic",)
    precisions: tuple[str, ...] = ("fp32",)
    memory_formats: tuple[str, ...] = ("contiguous",)
    #: CPU intra-op thread counts crossed with the variants (like precisions and memory formats): each
    #: variant is measured at ``threads=N`` for every N. ``"auto"``: 1, 2, 4, ... up to the cores this
    #: process may run on, and that count itself (resolved in the worker). Empty: torch's default, no
    #: ``threads=`` modifier. Ignored on GPUs, where the host threads do not run the model.
    threads: tuple[int, ...] | Literal["auto"] = ()
    #: Process environments (memory allocator, OpenMP wait policy; :mod:`autotune.core.process_env`) crossed
    #: with the variants: ``"auto"`` is every allocator found on this machine. Empty: not searched, every
    #: candidate runs with glibc's default malloc (and the field is left out of the JSON form, so older
    #: recipes' reports and study fingerprints stay the same).
    environments: tuple[str, ...] | Literal["auto"] = ()
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
    granularity: int | None = None  # None: the device's default (see autotune.variant_boundaries.granularity_for)
    memory_budget_bytes: int | None = None
    headroom: float = 0.10
    #: ``batch_sizes = "auto"``: the longest a boundary probe's forward passes may be predicted to take, and
    #: the boundary search's total seconds (None: the defaults of autotune.variant_boundaries; ``autotune
    #: batch`` applies them only when set)
    max_probe_seconds: float | None = None
    max_seconds: float | None = None


@dataclass(frozen=True)
class MeasureSpec:
    mode: str = "throughput"
    ci_target: float = 0.01
    max_seconds: float = 10.0
    timeout_s: float = 600.0
    #: Showdown: interleaved rounds over the finalists (0: no showdown) and seconds per slice.
    rounds: int = 6
    round_seconds: float = 0.5
    #: Showdown: fresh worker processes per finalist (rounds alternate between them; >= 3 to see their spread).
    processes: int = 3
    #: Showdown: stop every other staged worker while one is timed. "auto": when a finalist runs on ONNX Runtime
    #: or OpenVINO, whose idle pools spin (they took 0.05 cores from the timed finalist and disturbed a fifth of
    #: the rounds); torch finalists' ratio CIs came out wider with it (BENCHMARKS, "Quiet rounds"). true / false.
    quiet_rounds: bool | str = "auto"
    #: Showdown on a CPU: a finalist with a file form (TorchScript, ONNX, OpenVINO IR, AOTInductor) is saved as its
    #: artifact and timed from it, in workers that built nothing, as a deployment loads it (a worker that built the
    #: model served a DistilBERT 1.5-2x faster than its artifact ran: BENCHMARKS "A worker's build history").
    as_shipped: bool = True


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
    data: DataSpec | None = None
    accuracy: AccuracySpec | None = None
    serving: ServingSpec | None = None
    #: ``[generate]``: the recipe tunes ``generate()`` (:mod:`autotune.generate`), not one forward pass.
    generate: GenerateSpec | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, used in report.json and to hand the recipe to a worker."""
        data = asdict(self)
        data["model"]["kwargs"] = dict(self.model.kwargs)
        # fields added later are written only when set, so a recipe that does not use them has the same JSON
        # form (report.json, a study's fingerprint) as before they existed
        data["inputs"] = [_input_dict(i) for i in self.inputs]
        data.pop("data")
        data.pop("accuracy")
        data.pop("serving")
        data.pop("generate")
        if self.search.shapes == ("dynamic",):
            data["search"].pop("shapes")
        if self.search.environments == ():
            data["search"].pop("environments")
        elif not isinstance(self.search.environments, str):
            data["search"]["environments"] = list(self.search.environments)
        for key in ("max_probe_seconds", "max_seconds"):
            if data["batch"][key] is None:
                data["batch"].pop(key)
        if self.measure.as_shipped:
            data["measure"].pop("as_shipped")
        if self.data is not None:
            data["data"] = dict(asdict(self.data), kwargs=dict(self.data.kwargs),
                                pad_values=dict(self.data.pad_values),
                                buckets=list(self.data.buckets) if self.data.buckets else None)
        if self.accuracy is not None:
            data["accuracy"] = asdict(self.accuracy)
        if self.serving is not None:
            data["serving"] = self.serving.to_dict()
        if self.generate is not None:
            data["generate"] = self.generate.to_dict()
        for key in ("batch_sizes", "threads"):
            value = getattr(self.search, key)
            data["search"][key] = value if isinstance(value, str) else list(value)
        for key in ("variants", "precisions", "memory_formats", "shapes"):
            if key in data["search"]:
                data["search"][key] = list(data["search"][key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recipe:
        """Inverse of :meth:`to_dict` (trusted input: what to_dict produced)."""
        sd = dict(data["search"])
        sd.setdefault("shapes", ["dynamic"])
        for key in ("variants", "precisions", "memory_formats", "shapes"):
            sd[key] = tuple(sd[key])
        sd.setdefault("threads", ())  # recipes stored before the field existed (report.json, a study)
        sd.setdefault("environments", ())
        if not isinstance(sd["environments"], str):
            sd["environments"] = tuple(sd["environments"])
        for key in ("batch_sizes", "threads"):
            if not isinstance(sd[key], str):
                sd[key] = tuple(sd[key])
        return cls(
            path=data["path"],
            name=data["name"],
            description=data["description"],
            device=data["device"],
            model=ModelSpec(**data["model"]),
            inputs=tuple(InputSpec(**dict(i, shape=tuple(i["shape"]),
                                          range=tuple(i["range"]) if i.get("range") else None))
                         for i in data["inputs"]),
            search=SearchSpec(**sd),
            constraints=Constraints(**data["constraints"]),
            batch=BatchSpec(**data["batch"]),
            measure=MeasureSpec(**data["measure"]),
            data=_data_from_dict(data.get("data")),
            accuracy=AccuracySpec(**data["accuracy"]) if data.get("accuracy") else None,
            serving=ServingSpec.from_dict(data["serving"]) if data.get("serving") else None,
            generate=GenerateSpec.from_dict(data["generate"]) if data.get("generate") else None,
        )


def _input_dict(spec: InputSpec) -> dict[str, Any]:
    out = dict(asdict(spec), shape=list(spec.shape))
    if not spec.keyword:
        out.pop("keyword")
    if spec.range is None:
        out.pop("range")
    else:
        out["range"] = list(spec.range)
    return out


def _data_from_dict(raw: Mapping[str, Any] | None) -> DataSpec | None:
    if not raw:
        return None
    buckets = raw.get("buckets")
    return DataSpec(**dict(raw, buckets=tuple(buckets) if buckets else None))
