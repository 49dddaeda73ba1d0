"""Recipes: a TOML file that says what to tune, parsed into frozen dataclasses.

Strictly: an unknown key or a wrong value is a :class:`~autotune.errors.RecipeError` that names the file and
the dotted field, with a "did you mean" hint (why: :mod:`autotune.core.recipe.reader`).

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
    range = [0, 2]                         # integer inputs: values drawn from [low, high) instead
    keyword = false                        # true: passed by name, model(..., x=tensor); after the positional ones

    [data]                                 # instead of [[inputs]]: the user's own batches
    factory = "data.py:batches"            # called as batches(batch_size=b, **kwargs): a finite iterable of
    kwargs = {}                            # batches, each a tensor, a tuple (positional) or a dict (keyword)
    max_batches = 16                       # batches kept per batch size (the traffic every candidate is timed on)
    buckets = [32, 64, 128]                # +buckets variants pad dynamic dims up to these sizes
    pad_values = { input_ids = 0 }         # what padding is filled with (default 0)

    [accuracy]                             # the budget of lower-precision variants (bf16, fp16, int8)
    metric = "data.py:metric"              # metric(outputs, batches) -> float, higher is better; needs [data]
    max_drop = "1%"                        # absolute (0.01, the metric's units) or relative ("1%"); without a
                                           # metric: the top-1 disagreement allowed (default 0.01)

    [serving]                              # optional: the recommendation served behind a dynamic batcher
    slo_ms = 50.0                          # required: the latency objective per request
    percentile = "p99"                     # p50 | p90 | p95 | p99 | p99.9
    arrivals = "poisson"                   # poisson | closed | a file of arrival timestamps (relative to the recipe)
    concurrency = 8                        # closed loop only (required there): clients
    request_samples = 1                    # samples per request, or "batch" (the data factory's whole batches)
    rate = 400.0                           # traffic to serve (requests/s): then the fewest cores that serve it
    instances = "auto"                     # or a list; and threads, max_batch likewise
    max_delay_ms = [0, 1, 2, 5, 10]        # the batcher's waits tried
    time_budget_s = 120                    # the serving stage's own budget
    model_name = "resnet"                  # default: the recipe's name made safe
    confirm = 3                            # configurations confirmed with real load after the simulation

    [search]
    variants = ["eager", "frozen", "compile"]   # or "all"
    precisions = ["fp32"]
    memory_formats = ["contiguous"]
    shapes = ["dynamic", "buckets"]        # dynamic dims: dynamic shapes, and/or padding to data.buckets
    threads = [1, 2]                       # CPU: intra-op threads crossed with the variants, or "auto"
                                           # (1, 2, 4, ... up to the usable cores); default: torch's own
    batch_sizes = [1, 8, 32]               # or "auto": search up to the memory boundary
    objective = "throughput"               # throughput | latency | pareto
    time_budget_s = 120
    max_trials = 0                         # 0: no limit besides the time budget
    seed = 0
    strategy = "tpe"                       # tpe (Optuna's TPE, NSGA-II for pareto, over (variant, batch)
                                           # pairs, each measured in full) | bracket (experimental:
                                           # autotune.study.bracket, per-variant batch bracketing, short screens
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
    max_probe_seconds = 5.0                # "auto" runs: no probe whose forward passes are predicted longer
    max_seconds = 60.0                     # "auto" runs: the boundary search's total (default: a share of
                                           # search.time_budget_s); `autotune batch` uses them only if set

    [measure]
    mode = "throughput"                    # throughput | latency
    ci_target = 0.01                       # stop when the 95% CI half-width <= 1% of the mean
    max_seconds = 10.0                     # per-candidate measurement budget
    timeout_s = 600.0                      # a candidate's worker is killed after this

Where each part lives (one concept per module; this package re-exports the public names, so
``from autotune.core.recipe import Recipe, load_recipe`` is the import to use):

* :mod:`~autotune.core.recipe.spec`: the frozen dataclasses (:class:`Recipe`, :class:`ModelSpec`, :class:`InputSpec`,
  :class:`DataSpec`, :class:`AccuracySpec`, :class:`ServingSpec`,
  :class:`SearchSpec`, :class:`Constraints`, :class:`BatchSpec`, :class:`MeasureSpec`) and the JSON form
  (``Recipe.to_dict`` / ``Recipe.from_dict``) that report.json and the workers carry;
* :mod:`~autotune.core.recipe.reader`: the strict reader of one table and the wording of its errors (why strict:
  there), :func:`closest` for "did you mean" hints;
* :mod:`~autotune.core.recipe.parse`: :func:`load_recipe` and :func:`parse_recipe`, one function per table;
  :mod:`~autotune.core.recipe.serving` the ``[serving]`` table's (:class:`ServingSpec`),
  :mod:`~autotune.core.recipe.generate` the ``[generate]`` table and its :class:`GenerateSpec`.

What a recipe adds to a study's fingerprint (the factory file's hash, the inputs) reads files and metadata
beyond the recipe, in the parent only: :mod:`autotune.study.model_identity`.

Part of the shared core (:mod:`autotune.core`): the parent parses recipes, and every worker request carries
one as its JSON form, which the worker reads back with ``Recipe.from_dict``. Dependencies point one way:
``parse`` -> ``reader``, ``spec``. No torch.
"""

from __future__ import annotations

from autotune.core.recipe.generate import GenerateConfig, GenerateSpec
from autotune.core.recipe.parse import load_recipe, parse_recipe
from autotune.core.recipe.reader import closest
from autotune.core.recipe.spec import (
    DEFAULT_MAX_BATCH_SIZE,
    DTYPES,
    INTEGER_DTYPES,
    SEED_RANGE_TEXT,
    AccuracySpec,
    BatchSpec,
    Constraints,
    DataSpec,
    InputSpec,
    MeasureSpec,
    ModelSpec,
    Recipe,
    SearchSpec,
    ServingSpec,
    safe_model_name,
    valid_seed,
)
from autotune.core.vocab import MODES, OBJECTIVES, PERCENTILES, SERVING_PERCENTILES, STRATEGIES

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "DTYPES",
    "INTEGER_DTYPES",
    "MODES",
    "OBJECTIVES",
    "PERCENTILES",
    "SEED_RANGE_TEXT",
    "SERVING_PERCENTILES",
    "STRATEGIES",
    "AccuracySpec",
    "BatchSpec",
    "Constraints",
    "DataSpec",
    "GenerateConfig",
    "GenerateSpec",
    "InputSpec",
    "MeasureSpec",
    "ModelSpec",
    "Recipe",
    "SearchSpec",
    "ServingSpec",
    "closest",
    "load_recipe",
    "parse_recipe",
    "safe_model_name",
    "valid_seed",
]
