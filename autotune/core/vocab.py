"""The closed sets of names the recipe, the candidate rows and the report share, each defined once.

Each is a ``Literal`` type (what mypy checks) and the tuple of its values read off that type (what
validation and error messages list, in this order). Pure: no imports beyond the standard library.
The worker protocol's own sets (ops, roles, a worker's outcome statuses) are in
:mod:`autotune.core.protocol`.
"""

from __future__ import annotations

from typing import Literal, get_args

#: What the search optimises (``search.objective``).
Objective = Literal["throughput", "latency", "pareto"]
OBJECTIVES: tuple[Objective, ...] = get_args(Objective)
#: How the search picks what to measure next (``search.strategy``): :mod:`autotune.study.bracket`,
#: :mod:`autotune.study.loop`.
Strategy = Literal["bracket", "tpe"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
#: What a single measurement times for (``measure.mode``).
Mode = Literal["throughput", "latency"]
MODES: tuple[Mode, ...] = get_args(Mode)
#: The latency statistics a candidate records, in ms per batch.
Percentile = Literal["mean", "p50", "p90", "p99"]
PERCENTILES: tuple[Percentile, ...] = get_args(Percentile)
#: A report row's status: a worker's outcome (:data:`autotune.core.protocol.Status`) or ``pruned``,
#: decided by the parent without running anything.
RowStatus = Literal["ok", "oom", "rejected", "failed", "pruned"]
STATUSES: tuple[RowStatus, ...] = get_args(RowStatus)
#: How a candidate feeds batches whose non-batch dimensions vary (``search.shapes``): each as it comes
#: (``dynamic``), or padded up to the recipe's ``data.buckets`` (``buckets``, the variant modifier ``+buckets``).
ShapePolicy = Literal["dynamic", "buckets"]
SHAPE_POLICIES: tuple[ShapePolicy, ...] = get_args(ShapePolicy)
#: Where a run's batches came from (the report's ``data.source``): a ``[data]`` factory or random ``[[inputs]]``.
DataSource = Literal["factory", "inputs"]
DATA_SOURCES: tuple[DataSource, ...] = get_args(DataSource)
#: The latency percentile a serving SLO is on (``serving.percentile``; the report's ``serving.percentile``): a
#: server's tail, so p95 and p99.9 too, and no mean (a mean hides the tail an SLO is about).
ServingPercentile = Literal["p50", "p90", "p95", "p99", "p99.9"]
SERVING_PERCENTILES: tuple[ServingPercentile, ...] = get_args(ServingPercentile)
#: How the serving stage's load arrives (the report's ``serving.arrivals``): an open Poisson stream, a closed loop
#: of ``serving.concurrency`` clients, or the recipe's file of timestamps replayed.
Arrivals = Literal["poisson", "closed", "replay"]
ARRIVALS: tuple[Arrivals, ...] = get_args(Arrivals)
#: The serving stage's outcome (the report's ``serving.status``).
ServingStatus = Literal["ok", "failed", "skipped"]
SERVING_STATUSES: tuple[ServingStatus, ...] = get_args(ServingStatus)
#: Why a configuration is in the serving section's table: tried by the search, one of the two baselines (one
#: instance without batching; the search's batch size in a loop), or ruled out without real load.
ServingRole = Literal["search", "naive", "batch-loop", "pruned"]
SERVING_ROLES: tuple[ServingRole, ...] = get_args(ServingRole)
#: The serving knobs, each a field of a configuration.
ServingKnobName = Literal["instances", "threads", "max_batch", "max_delay_ms"]
SERVING_KNOBS: tuple[ServingKnobName, ...] = get_args(ServingKnobName)
