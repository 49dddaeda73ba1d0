"""The report document's shape (report.json, schema 1) as TypedDicts: what the tuner writes, section by section.

These describe the *writer's* document (:func:`autotune.tuner.build_document`, then
:func:`autotune.artifact.write_deployment` adding ``artifact`` and ``profile``). The *reader's* contract is
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
from autotune.vocab import Objective


class ToolInfo(TypedDict):
    name: str
    version: str


class RecipeSection(TypedDict):
    """``Recipe.to_dict()`` (:mod:`autotune.recipe`) plus the device the run resolved ``auto`` to."""

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
    objective: str  # an Objective (autotune.vocab); the recipe's SearchSpec types it str
    study_name: str
    storage: str  # the URL with its password masked
    stopped_by: str
    workers: WorkerStats
    measurements_stopped_by: dict[str, int]


class ProbeEntry(TypedDict):
    """One memory probe of a boundary search (``ProbeRecord.to_dict()``, :mod:`autotune.batch.probes`)."""

    phase: str
    batch_size: int
    fits: bool
    peak_memory_bytes: int | None
    baseline_bytes: int | None
    seconds: float | None
    error: str | None


class BoundarySection(TypedDict):
    """One variant's batch boundary (``BatchBoundary.to_dict()`` plus what :func:`autotune.boundaries.find_boundaries`
    adds)."""

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


class Recommendation(CandidateRow):
    """The recommended candidate's row, and what decided it."""

    decided_by: Literal["showdown", "search"]
    showdown: NotRequired[ShowdownStanding]


class _ArtifactStatus(TypedDict):
    status: Literal["ok", "failed"]
    reason: str | None


class ArtifactSection(_ArtifactStatus, total=False):
    """The deployable artifact (:func:`autotune.artifact.write_deployment`); a failed one has the status and
    reason, and whatever was known before it failed."""

    variant: str
    batch_size: int
    kind: str  # autotune.artifact.KINDS' values
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
    #: how load.py's predict is called: form, inputs, outputs (autotune.artifact.describe_interface)
    interface: dict[str, Any]
    notes: list[str]


class ProfileSection(TypedDict):
    """The recommendation and eager profiled at its batch (:func:`autotune.artifact.deploy`)."""

    status: Literal["ok", "failed"]
    reason: str | None
    tables: list[dict[str, Any]]  # role, variant, source, iterations, totals, rows
    batch_size: NotRequired[int]


class ReportDocument(TypedDict):
    """report.json as the tuner writes it (schema 1)."""

    schema: Literal[1]
    tool: ToolInfo
    created: str  # ISO 8601, UTC
    recipe: RecipeSection
    workload: dict[str, Any]  # WorkloadInfo.to_dict() (autotune.workload)
    environment: dict[str, Any]  # autotune.environment.fingerprint()
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
    profile: NotRequired[ProfileSection | None]


__all__ = [
    "ArtifactSection", "BoundarySection", "ProbeEntry", "ProfileSection", "RecipeSection", "Recommendation",
    "ReportDocument", "SearchSection", "ShowdownStanding", "ToolInfo", "WorkerStats",
]
