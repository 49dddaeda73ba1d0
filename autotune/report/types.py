"""The report document's shape (report.json, schema 2) as TypedDicts: what the tuner writes, section by section.

These describe the *writer's* document (:func:`autotune.tuner.build_document`, then
:func:`autotune.deployment.write_deployment` adding ``artifact`` and ``profile``). The *reader's* contract is
the runtime validator in :mod:`autotune.report.schema`: it requires far less (reports written by older
versions lack fields added since), so code that reads a document back (:func:`autotune.report.load_report`,
the renderers) keeps using ``.get`` for anything the schema does not require. ``tests/test_report_types.py``
checks, section by section, that the two cannot drift: every field the schema validates is declared here,
every field the schema requires is required here, and the fields declared here but not validated are the
listed ones.

Nested parts whose shape belongs to another module stay ``dict[str, Any]`` with a pointer to it (the
environment fingerprint, the workload info, the recipe's sub-sections, the showdown document).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from autotune.candidate import CandidateRow
from autotune.core.vocab import (
    Arrivals,
    DataSource,
    Objective,
    ServingKnobName,
    ServingPercentile,
    ServingRole,
    ServingStatus,
)


class ToolInfo(TypedDict):
    name: str
    version: str


class RecipeSection(TypedDict):
    """``Recipe.to_dict()`` (:mod:`autotune.core.recipe`) plus the device the run resolved ``auto`` to."""

    path: str
    name: str
    description: str
    device: str
    model: dict[str, Any]  # factory, kwargs, base_dir
    inputs: list[dict[str, Any]]  # name, shape, dtype, vocab_size
    search: dict[str, Any]
    constraints: dict[str, Any]
    batch: dict[str, Any]
    measure: dict[str, Any]
    device_resolved: str
    #: Top-level fields of older recipes: validated when present, not written by this version (they are
    #: ``search.objective`` and ``search.time_budget_s`` now).
    objective: NotRequired[Objective | None]
    time_budget_s: NotRequired[float | None]


class WorkerStats(TypedDict):
    workers_started: int
    startup_seconds: list[float]
    crashes: int


class SearchSection(TypedDict):
    trials: int
    measured_this_run: int
    wall_seconds: float
    search_seconds: float
    sampler: str
    objective: str  # an Objective (autotune.core.vocab); the recipe's SearchSpec types it str
    study_name: str
    storage: str  # the URL with its password masked
    stopped_by: str
    workers: WorkerStats
    measurements_stopped_by: dict[str, int]
    space: NotRequired[int]  # the combinations the search could try (absent: not known, a rebuilt document)
    untried: NotRequired[list[str]]  # those no row holds, as variant@batch


class ProbeEntry(TypedDict):
    """One memory probe of a boundary search (``ProbeRecord.to_dict()``, :mod:`autotune.batch.probes`)."""

    phase: str
    batch_size: int
    fits: bool
    peak_memory_bytes: int | None
    baseline_bytes: int | None
    seconds: float | None
    error: str | None
    #: one steady forward pass at the batch (the cost and saturation rules; absent in older reports)
    step_seconds: NotRequired[float]


class BoundarySection(TypedDict):
    """One variant's batch boundary (``BatchBoundary.to_dict()`` plus what
    :func:`autotune.variant_boundaries.find_boundaries` adds)."""

    max_batch_size: int | None
    usable_max_batch_size: int | None
    headroom: float
    granularity: int
    upper_bound: int | None
    hit_upper_bound: bool
    memory_limit_bytes: int | None
    probes: list[ProbeEntry]
    model: dict[str, float] | None  # intercept_bytes, bytes_per_sample
    anomalies: list[str]
    memory_measured_by: str
    granularity_source: str
    limit_source: str
    footprint: str
    confirmed_by: str
    #: set when the answer was taken from the study of an earlier run under the same conditions
    reused_from_study: NotRequired[bool]
    #: what ended the search (memory, upper_bound; in a run throughput, probe_cap, time_cap), one honest
    #: sentence, and for an early stop the memory model's estimate of the limit ({low, center}, batches)
    stopped_by: NotRequired[str]
    summary: NotRequired[str]
    predicted_limit: NotRequired[dict[str, float]]
    #: batches whose probe crashed the worker (a signal) after a smaller one ran: taken as not running there
    crashed_at: NotRequired[list[int]]


class ShowdownStanding(TypedDict):
    """The pick's standing in the showdown (:func:`autotune.showdown.recommendation`)."""

    ratio_to_leader: float
    ratio_ci: list[float]
    leader: str
    tie: bool
    tied_with: list[str]
    round_spread: float
    margin: float
    rounds: int
    #: the spread of the pick's processes' means (None: fewer than two processes; absent in older reports)
    process_spread: NotRequired[float | None]
    #: finalists the rounds could not separate from the leader, and how the pick was made (absent in older reports)
    undecided: NotRequired[list[str]]
    how_picked: NotRequired[str | None]
    #: the search's screening measurement, replaced as the headline by the showdown's fresh-process rounds
    screen_throughput: NotRequired[float | None]
    screen_throughput_ci: NotRequired[list[float] | None]


class Recommendation(CandidateRow):
    """The recommended candidate's row, and what decided it.

    After a showdown (throughput objective) ``throughput`` and ``throughput_ci`` are the median of its rounds in
    fresh processes (``throughput_source`` = ``showdown``); the screen's are kept in ``showdown``.
    """

    decided_by: Literal["showdown", "search"]
    showdown: NotRequired[ShowdownStanding]
    #: ``artifact``: throughput, its CI and the latencies are the artifact's in plain processes
    #: (:func:`autotune.artifact_check.as_shipped`); the run's own are the ``measured_*`` fields
    throughput_source: NotRequired[Literal["showdown", "artifact"]]
    measured_throughput: NotRequired[float | None]
    measured_throughput_ci: NotRequired[list[float | None] | None]
    measured_throughput_source: NotRequired[Literal["showdown", "search"]]
    measured_latency_ms: NotRequired[dict[str, float | None] | None]


class _ArtifactStatus(TypedDict):
    status: Literal["ok", "failed"]
    reason: str | None


class ArtifactSection(_ArtifactStatus, total=False):
    """The deployable artifact (:func:`autotune.deployment.write_deployment`); a failed one has the status and
    reason, and whatever was known before it failed."""

    variant: str
    batch_size: int
    kind: str  # autotune.worker.artifact.KINDS' values
    format: str
    dir: str
    loader: str
    loader_code: str
    files: list[dict[str, Any]]  # name, bytes
    size_bytes: int
    build_seconds: float
    save_seconds: float
    wall_seconds: float
    threads: int | None
    runtime: dict[str, Any]
    #: how load.py's predict is called: form, inputs, outputs (autotune.worker.artifact.describe_interface)
    interface: dict[str, Any]
    notes: list[str]
    #: the process environment it was measured in and run.sh sets up: name, description, variables, run_script
    environment: dict[str, Any]
    reused: bool  # the last run's on this --out: same recommendation, recipe, autotune and machine


class ArtifactCheckSection(TypedDict, total=False):
    """The saved artifact timed as shipped: its load.py in fresh plain processes (:mod:`autotune.artifact_check`)."""

    status: Literal["ok", "failed", "skipped"]
    reason: str | None
    rounds: int
    seconds: float
    tolerance: float
    method: str
    throughputs: list[float]  # one per plain process (samples/s)
    throughput: float  # their median
    ci: list[float] | None  # t interval over the rounds (log scale)
    p50_ms: float  # per call (one batch), median over the rounds
    p99_ms: float
    calls: int
    reported: float | None  # the report's throughput of the recommendation
    ratio: float | None  # throughput / reported
    #: agrees (|ratio - 1| <= tolerance), slower / faster (outside, the CI excludes the run's figure), undecided
    verdict: Literal["agrees", "slower", "faster", "undecided"] | None
    tool_throughputs: list[float]  # the tool's staged worker, one slice per round, beside the plain processes
    paired_ratio: float  # exp(mean log(plain / tool)) over the rounds
    paired_ci: list[float] | None
    tool_note: str | None  # why there is no tool side, when there is none
    reused: bool  # the last run's check of the same artifact
    wall_seconds: float
    rounds_requested: int  # when the time budget allowed fewer rounds (or none: status skipped)
    budget_note: str  # what the budget cut, in words
    disturbed: list[bool]  # per round: another process used CPU beside a timed side (autotune.core.contention)
    compared: int  # the rounds the headline is the median of: the undisturbed ones, when at least 2
    foreign_cores: list[float | None]  # per plain process: others' CPU seconds per second of its timed window
    consumers: list[dict[str, Any]]  # the processes seen using CPU in disturbed rounds: name, pid, round, side, cores


class BudgetSection(TypedDict):
    """The run's time budget, its plan and what each phase took (:mod:`autotune.core.budget`)."""

    time_budget_s: float
    promise_s: float  # the budget plus its overrun allowance: the run's promise (the serving stage apart)
    artifact_reserve_s: float  # kept up front for the artifact step
    phases: dict[str, float]  # seconds per phase, in the order they ran
    wall_seconds: float  # the run to the end of its last phase, the serving stage apart
    within_promise: bool


class ProfileSection(TypedDict):
    """The recommendation and eager profiled at its batch (:func:`autotune.worker.artifact.deploy`)."""

    status: Literal["ok", "failed"]
    reason: str | None
    tables: list[dict[str, Any]]  # role, variant, source, iterations, totals, rows
    batch_size: NotRequired[int]


class DataShape(TypedDict):
    """One input shape the traffic had, and in how many of its batches."""

    shape: str  # every input's shape, e.g. "input_ids 8x32, attention_mask 8x32"
    batches: int


class DataSection(TypedDict):
    """The traffic the candidates were measured on: a ``[data]`` factory's batches, or the random ``[[inputs]]``.

    A candidate's own view of it (its shape policy, per-shape throughput and latency) is its row's ``traffic``
    (:class:`autotune.candidate.TrafficSummary`).
    """

    source: DataSource
    factory: str | None  # the recipe's data.factory ("file.py:function" or "module:function")
    kwargs: dict[str, Any] | None
    batches: int  # batches of the traffic used per measurement
    keyword_inputs: list[str]  # inputs passed by name (a dict batch, or keyword = true)
    dynamic_dims: list[str]  # "input_ids[1]": dimensions other than the batch that differ between batches
    shapes: list[DataShape]
    buckets: list[int] | None  # data.buckets: what the +buckets variants pad the dynamic dims up to
    samples: NotRequired[int]  # rows over all the batches (at batch size 2, when the workload was validated)
    form: NotRequired[str]  # tensor | tuple | dict: what one batch is
    inputs: NotRequired[list[str]]  # the inputs' names in call order (positional, then keyword)
    dtypes: NotRequired[list[str]]


class ServingPoint(TypedDict):
    """One offered load of a configuration (open-loop arrivals at ``rate`` requests/s) and what came back."""

    rate: float
    p50_ms: float | None
    p99_ms: float | None
    p99_ci_ms: list[float] | None  # [low, high]
    sent: int
    ok: int
    failed: int
    timed_out: int
    dropped: int
    achieved_rate: float | None  # answered requests/s
    passed: bool | None  # within the SLO (None: not judged, e.g. too few requests)
    kept: NotRequired[int]  # the requests its percentiles were read from (a p99 needs 299 to be resolved)
    #: the server's own account (its /stats): calls made, their mean rows, the median call (ms); absent before
    #: session 47
    calls: NotRequired[int]
    rows_per_call: NotRequired[float | None]
    call_p50_ms: NotRequired[float | None]


class ServingAtFraction(TypedDict):
    """The recommendation loaded at a fraction (0.5, 0.8, 1.0) of its max rate: how much headroom buys."""

    fraction: float
    rate: float
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    p99_ci_ms: list[float] | None
    sent: int
    ok: int
    failed: int
    timed_out: int
    dropped: int
    achieved_rate: float | None
    calls: NotRequired[int]  # the server's own account of the point, as in ServingPoint
    rows_per_call: NotRequired[float | None]
    call_p50_ms: NotRequired[float | None]


class ServingConfig(TypedDict):
    """One configuration the serving search considered: its knobs, predicted and measured max rate, and its role
    (``search``: tried by the search; ``naive``: one instance, no batching; ``batch-loop``: the search's batch size
    run in a loop; ``pruned``: ruled out without real load, with the reason)."""

    variant: str
    environment: str | None
    instances: int
    threads: int
    max_batch: int
    max_delay_ms: float
    predicted_max_rate: float | None
    max_rate: float | None
    max_rate_ci: list[float] | None
    role: ServingRole
    pruned_reason: str | None
    held: NotRequired[bool | None]  # a baseline's max rate held once for 10 s (None: not tried)
    bisected_max_rate: NotRequired[float | None]  # its bisection's max rate, before any hold
    points: list[ServingPoint]


class ServingRecommendation(TypedDict):
    """How to serve: the configuration with the highest max rate within the SLO (or, with a rate target, the
    fewest cores that serve it), its max rate and the latency at it."""

    variant: str
    environment: str | None
    instances: int
    threads: int
    max_batch: int
    max_delay_ms: float
    max_rate: float
    max_rate_ci: list[float] | None
    p50_ms: float | None
    p99_ms: float | None
    p99_ci_ms: list[float] | None
    goodput: float | None  # requests/s answered within the SLO at the max rate
    floor: NotRequired[bool]  # the failure above the max rate rested on too few requests: the max is a floor
    bound_requests: NotRequired[int]  # that failure's requests


class ServingKnob(TypedDict):
    """What one knob was worth: a sentence, and the max-rate ratio of having it over not (None: not measured)."""

    knob: ServingKnobName
    text: str
    ratio: float | None


class ServingBaselines(TypedDict):
    naive: ServingConfig | None
    batch_loop: ServingConfig | None


class ServingCalls(TypedDict):
    calibration_s: float
    load_s: float  # every load point, the warm-ups', the hold's and the curve's included
    hold_s: float  # the pick's max rate held on a fresh server (SUSTAIN_SECONDS, lowered until it holds)
    baseline_hold_s: NotRequired[float]  # the naive and batch-loop baselines' max rates held once each
    curve_s: float  # the curve's points below the max (50%, 80%, 90%)
    warm_s: float  # untimed load on each fresh server before its first timed point (WARMUP_SECONDS each)


class ServingServer(TypedDict):
    stack: str  # "asyncio (autotune serve.py)"
    command: str  # "./run.sh serve --port 8000"


class _ServingStatus(TypedDict):
    status: ServingStatus
    reason: str | None


class ServingSection(_ServingStatus, total=False):
    """The serving stage (recipe ``[serving]``): the configuration that serves the most requests/s within the
    latency SLO, measured under real load. A failed or skipped stage has the status and reason; ``ok`` without a
    ``recommendation`` is undecided (the reason says why)."""

    slo_ms: float
    percentile: ServingPercentile
    model_name: str
    arrivals: Arrivals
    request_samples: int | Literal["batch"]
    rate_target: float | None
    cores: int
    #: where the artifact ran (the run's resolved device); absent in reports before session 47
    device: NotRequired[str]
    recommendation: ServingRecommendation | None
    at_fraction: list[ServingAtFraction]
    configs: list[ServingConfig]
    baselines: ServingBaselines
    knobs: list[ServingKnob]
    seconds: float
    share_of_run: float | None
    hold_discount: float  # the median (max rate the holds left) / bisected max rate over the configurations held
    # (1.0: none held)
    calls: ServingCalls
    server: ServingServer
    files: list[str]
    interrupted: bool


class ReportDocument(TypedDict):
    """report.json as the tuner writes it (schema 2; a report of an older version, loaded, says 1)."""

    schema: Literal[1, 2]
    tool: ToolInfo
    created: str  # ISO 8601, UTC
    recipe: RecipeSection
    workload: dict[str, Any]  # WorkloadInfo.to_dict() (autotune.worker.model)
    environment: dict[str, Any]  # autotune.environment.machine_facts()
    search: SearchSection
    batch_boundary: dict[str, BoundarySection]  # by variant
    #: Rows as the study stores them: plain dicts read back from its JSON (see autotune.candidate.candidate_record).
    candidates: list[CandidateRow]
    showdown: dict[str, Any] | None  # autotune.showdown.run_showdown's document
    recommendation: Recommendation | None
    pareto: list[int]  # trial numbers
    notes: list[str]
    #: set after the reports are first written (``RunOptions.artifact``)
    artifact: NotRequired[ArtifactSection | None]
    artifact_check: NotRequired[ArtifactCheckSection | None]
    profile: NotRequired[ProfileSection | None]
    #: the traffic the candidates were measured on (written by versions that read a recipe's [data] table)
    data: NotRequired[DataSection | None]
    #: the serving stage (recipe [serving]; written by versions that read the table)
    serving: NotRequired[ServingSection | None]
    #: a run's document as it goes (autotune.report.assemble.RunDocument): False, with the phase it was written in
    #: (``done`` once complete), until the run ends; absent in older reports, which are complete
    complete: NotRequired[bool]
    phase: NotRequired[str]
    interrupted: NotRequired[bool]
    #: the time budget's plan and the phases' seconds (written by versions that plan it)
    budget: NotRequired[BudgetSection]


__all__ = [
    "ArtifactSection", "BoundarySection", "DataSection", "DataShape", "ProbeEntry", "ProfileSection", "RecipeSection",
    "Recommendation", "ReportDocument", "SearchSection", "ServingAtFraction", "ServingBaselines", "ServingCalls",
    "ServingConfig", "ServingKnob", "ServingPoint", "ServingRecommendation", "ServingSection", "ServingServer",
    "ShowdownStanding", "ToolInfo", "WorkerStats",
]
