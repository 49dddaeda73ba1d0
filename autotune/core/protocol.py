"""The worker protocol: the requests the parent sends, the replies a worker sends back, and their vocabularies.

One JSON request per line on the worker's stdin, one response per line on its protocol pipe::

    request : {"id": 3, "op": "measure", ...op fields}
    response: {"id": 3, "ok": true, "result": {...}}
            | {"id": 3, "ok": false, "error": {"type": "WorkloadError", "message": "...", "input_error": true}}

The messages are TypedDicts, not dataclasses, because the JSON shape *is* the contract: the parent
(:mod:`autotune.client`, :mod:`autotune.runner`, no torch) and the child (:mod:`autotune.worker.ops`) both
import this module, so what goes over the pipe is what the types say, key for key. Requests are built in
one place, :class:`autotune.client.WorkerClient` (one method per op); the one exception is :data:`HELLO`,
the fixed handshake every new worker process answers first (:class:`autotune.runner.WorkerProcess`).
``id`` and ``timeout_s`` (the parent's timeout for the request, which the worker enforces on itself a grace
period later: :mod:`autotune.worker.lifeline`) are added by :meth:`autotune.runner.WorkerProcess.request`;
callers leave them out. Each closed set of names
(ops, roles, statuses) is a ``Literal`` type, and its tuple of values is read off that type, so each
is written once. This module imports nothing beyond the standard library (the measurement record's
type is imported for type checking only).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, get_args

if TYPE_CHECKING:
    from autotune.core.measurement import MeasurementRecord

#: The ops a worker serves (:data:`autotune.worker.ops.OPS` maps each to its function).
OpName = Literal["hello", "validate", "measure", "probe", "device_memory", "parse_variant", "stage", "slice",
                 "artifact", "generate"]
OP_NAMES: tuple[OpName, ...] = get_args(OpName)

#: Worker roles. A ``probe`` worker pins allocator settings the memory probes need; a ``measure``
#: worker times candidates in the state a plain deployment process has, so the two never share a process.
Role = Literal["measure", "probe"]
ROLES: tuple[Role, ...] = get_args(Role)
#: Ops each role serves: timing never happens in a process whose allocator was pinned for probes.
ROLE_OPS: dict[Role, frozenset[OpName]] = {
    "measure": frozenset(OP_NAMES) - {"probe", "device_memory"},
    "probe": frozenset(OP_NAMES) - {"measure", "stage", "slice"},
}
#: The role that serves each op; ops not listed go to a ``measure`` worker.
ROLE_OF_OP: dict[str, Role] = {"probe": "probe", "device_memory": "probe"}

#: A candidate's outcome as a worker (or the runner, for a crash) reports it. A report row adds
#: ``"pruned"`` (:data:`autotune.core.vocab.STATUSES`), decided by the parent without running anything.
Status = Literal["ok", "failed", "rejected", "oom"]
OUTCOME_STATUSES: tuple[Status, ...] = get_args(Status)
#: How an out-of-memory error was recognised (:func:`autotune.worker.devices.oom_kind`).
OomKind = str


# --------------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------------


class HelloRequest(TypedDict):
    op: Literal["hello"]
    id: NotRequired[int]


#: Environment variable through which the parent tells each worker its pid, so the worker dies with it.
PARENT_ENV = "AUTOTUNE_PARENT_PID"

#: The handshake: a request without fields, so a constant of the protocol rather than something built per
#: call. :class:`autotune.runner.WorkerProcess` sends it to every worker it starts (the transport's own
#: request, below :mod:`autotune.client`, which builds all the others).
HELLO: HelloRequest = {"op": "hello"}


class ValidateRequest(TypedDict):
    op: Literal["validate"]
    recipe: dict[str, Any]  # Recipe.to_dict()
    id: NotRequired[int]


class MeasureSettingsData(TypedDict):
    """:class:`autotune.core.measure_settings.MeasureSettings` as JSON (its ``to_dict``; its fields, one for one)."""

    mode: str
    ci_target: float
    max_seconds: float
    block_target_seconds: float
    max_samples: int
    per_call_seconds: float
    margin: float


class MeasureRequest(TypedDict):
    op: Literal["measure"]
    recipe: dict[str, Any]
    variant: str
    batch_size: int
    settings: MeasureSettingsData
    id: NotRequired[int]


class ProbeRequest(TypedDict):
    op: Literal["probe"]
    recipe: dict[str, Any]
    variant: str
    batch_size: int
    memory_budget_bytes: NotRequired[int | None]
    #: Drop the master copy before the forward: the process then holds what a deployment holds.
    fresh: NotRequired[bool]
    id: NotRequired[int]


class DeviceMemoryRequest(TypedDict):
    op: Literal["device_memory"]
    recipe: dict[str, Any]
    id: NotRequired[int]


class ParseVariantRequest(TypedDict):
    op: Literal["parse_variant"]
    recipe: dict[str, Any]
    variant: str
    id: NotRequired[int]


class StageRequest(TypedDict):
    op: Literal["stage"]
    recipe: dict[str, Any]
    variant: str
    batch_size: int
    warmup_iterations: NotRequired[int]
    warmup_seconds: NotRequired[float]
    #: Stage the finalist as shipped: its saved artifact, loaded by its own load.py (autotune.core.artifact_child's
    #: spec), in a worker that builds nothing; absent: built from the recipe, as the search measured it.
    shipped: NotRequired[dict[str, Any]]
    id: NotRequired[int]


class SliceRequest(TypedDict):
    op: Literal["slice"]
    seconds: float
    per_call: NotRequired[bool]
    percentile: NotRequired[str]  # "p99" by default
    warmup_seconds: NotRequired[float]  # untimed calls first, for this long (a worker just continued after SIGSTOP)
    id: NotRequired[int]


GenerateAction = Literal["measure", "probe", "artifact"]


class GenerateRequest(TypedDict):
    """op ``generate`` (a ``[generate]`` recipe): one configuration of ``model.generate`` at a concurrency.

    ``action``: ``measure`` (the check prompts' greedy tokens, then ``calls`` timed calls after a first one),
    ``probe`` (does ``concurrency`` fit: the peak of one call at the longest bucket and the most new tokens,
    against ``memory_budget_bytes``), ``artifact`` (the configuration saved into ``directory``).
    """

    op: Literal["generate"]
    recipe: dict[str, Any]
    config: dict[str, Any]  # GenerateConfig.to_dict(): cache, compile, attention, precision, threads
    concurrency: int
    action: GenerateAction
    calls: int
    memory_budget_bytes: int | None
    directory: NotRequired[str]


class ArtifactRequest(TypedDict):
    """Build the recommendation once, save it into ``directory`` (None: no artifact) and profile it and eager."""

    op: Literal["artifact"]
    recipe: dict[str, Any]
    variant: str
    batch_size: int
    directory: str | None
    profile: NotRequired[bool]  # True by default
    iterations: NotRequired[int]  # profiled forward passes, 10 by default
    id: NotRequired[int]


Request = (HelloRequest | ValidateRequest | MeasureRequest | ProbeRequest | DeviceMemoryRequest
           | ParseVariantRequest | StageRequest | SliceRequest | ArtifactRequest | GenerateRequest)


# --------------------------------------------------------------------------------------------------
# Results (the ``result`` of an ok response)
# --------------------------------------------------------------------------------------------------


class HelloResult(TypedDict):
    pid: int
    python: str
    torch: str
    import_seconds: float
    threads: int


class UnavailableVariant(TypedDict):
    variant: str
    reason: str | None


class TorchFacts(TypedDict):
    """What torch says about the machine (:func:`autotune.worker.torch_facts.torch_facts`), read in the worker
    and merged by the parent into report.json's ``environment`` (:func:`autotune.environment.machine_facts`),
    so the parent reports torch's view without importing it. ``None`` where unknown; ``gpus`` is torch's
    list (empty unless CUDA was initialised; the parent fills it from nvidia-smi)."""

    torch_version: str | None
    torch_cuda_version: str | None
    torch_cudnn_version: int | None
    torch_threads: int | None
    torch_interop_threads: int | None
    torch_parallel_backend: str | None
    mkl_available: bool | None
    mkl_version: str | None
    mkldnn_available: bool | None
    openmp_available: bool | None
    cuda_available: bool | None
    cuda_device_count: int | None
    gpus: list[dict[str, Any]]


def unknown_torch_facts() -> TorchFacts:
    """Every torch fact unknown: what a worker without torch reports, and the parent's default without a reply."""
    return {"torch_version": None, "torch_cuda_version": None, "torch_cudnn_version": None, "torch_threads": None,
            "torch_interop_threads": None, "torch_parallel_backend": None, "mkl_available": None,
            "mkl_version": None, "mkldnn_available": None, "openmp_available": None, "cuda_available": None,
            "cuda_device_count": None, "gpus": []}


class ValidateResult(TypedDict):
    device: str
    workload: dict[str, Any]  # WorkloadInfo.to_dict()
    variants: list[str]
    unavailable: list[UnavailableVariant]
    specs: dict[str, dict[str, Any]]  # name -> VariantSpec.to_dict()
    memory_method: str
    host_memory_available: int | None
    device_memory_capacity: int | None
    seconds: float
    torch_facts: TorchFacts  # read before the model is built (no CUDA context of the worker's own yet)


class DeviceMemoryResult(TypedDict):
    device: str
    free_bytes: int | None
    total_bytes: int | None
    device_memory: bool


class ParseVariantResult(TypedDict):
    status: Literal["ok"]
    spec: dict[str, Any]
    name: str


class Outcome(TypedDict):
    """A candidate op's result: ``status`` and ``reason`` always, the rest by op and status."""

    status: Status
    reason: str
    #: Set on ``oom``: the worker's state may be damaged, so the runner replaces it.
    dirty: NotRequired[bool]
    oom_kind: NotRequired[OomKind]
    #: Set on ``failed`` when only batches above 1 fail (:class:`autotune.errors.BatchSpecificError`).
    batch_specific: NotRequired[bool]
    #: Set on ``failed`` when the model lacks a setting (:class:`autotune.errors.UnsupportedSettingError`).
    unsupported: NotRequired[bool]


class MeasureOutcome(Outcome, total=False):
    """op ``measure``: ``ok`` has the measurement; ``rejected`` the gate's verdict."""

    measurement: MeasurementRecord  # Measurement.to_dict(): raw samples, encoded, and their analysis
    build_seconds: float
    first_call_seconds: float
    compile_seconds: float
    peak_memory_bytes: int
    peak_memory_scope: str
    recompiles: int
    load: dict[str, Any]  # CpuLoad.to_dict()
    correctness: dict[str, Any]  # GateResult.to_dict(), or AccuracyResult.correctness() for lower precision
    notes: list[str]
    #: the model's size as the variant stores it (autotune.worker.accuracy.model_bytes; None: unknown)
    model_bytes: int | None
    #: AccuracyResult.to_dict(): a lower-precision variant's accuracy budget (or an [accuracy] recipe's score)
    accuracy: dict[str, Any]


class StageOutcome(Outcome, total=False):
    first_call_seconds: float
    warmup_calls: int
    #: Staged as shipped: the mean samples per call of the artifact's traffic cycle (its saved batches).
    samples_per_call: float


class SliceOutcome(Outcome, total=False):
    calls: int
    seconds_per_call: float
    latency_seconds: float | None
    load: dict[str, Any]


class ProbeOutcome(Outcome, total=False):
    """op ``probe``: ``fits`` and ``peak_memory_bytes`` are always set (False / None after a failure)."""

    fits: bool
    peak_memory_bytes: int | None
    baseline_bytes: int
    raw_peak_memory_bytes: int
    drift_bytes: int
    excluded_bytes: int
    #: wall seconds of one steady forward pass at the batch (after the probe's own calls), and how many
    #: forward passes the probe ran in all (the boundary search's cost and saturation rules)
    step_seconds: float | None
    forward_calls: int


class GenerateOutcome(Outcome, total=False):
    """op ``generate``: the raw per-call series (seconds), in call order; the parent computes the statistics.

    ``ttft`` one per call (prompt in, first token out), ``itl`` one list per call (each decode step),
    ``useful_tokens`` per call (each prompt's own new tokens, summed), ``generated_tokens`` per call (the batch
    decoded to its longest), ``tokens`` the check prompts' first greedy tokens.
    """

    ttft: list[float]
    itl: list[list[float]]
    call_seconds: list[float]
    useful_tokens: list[int]
    generated_tokens: list[int]
    tokens: list[list[int]]
    first_call_seconds: float
    recompiles: int
    peak_memory_bytes: int
    baseline_bytes: int
    fits: bool
    step_seconds: float | None
    model: dict[str, Any]  # model_type, layers, parameters, vocab_size
    notes: list[str]
    files: list[str]
    threads: int  # torch's intra-op threads the calls ran with (the config's, else the worker's default)
    load: dict[str, Any]  # the timed calls' CPU window (core.contention.CpuLoad.to_dict): other processes' cores


class ArtifactResult(TypedDict):
    """op ``artifact``: each part's own status and reason (``autotune.worker.artifact.deploy``); None when not asked."""

    artifact: dict[str, Any] | None
    profile: NotRequired[dict[str, Any] | None]


def directory_files(directory: Path) -> list[dict[str, Any]]:
    """The artifact section's ``files``: ``[{"name", "bytes"}]`` of the regular files in ``directory``, by name.

    Listed by the worker for what it saved and again by the parent (:mod:`autotune.deployment`) once it has
    added ``load.py``, so both sides list files the same way.
    """
    return [{"name": p.name, "bytes": p.stat().st_size} for p in sorted(directory.iterdir()) if p.is_file()]


Result = (HelloResult | ValidateResult | DeviceMemoryResult | ParseVariantResult | Outcome | MeasureOutcome
          | StageOutcome | SliceOutcome | ProbeOutcome | ArtifactResult | GenerateOutcome)


# --------------------------------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------------------------------


class ErrorInfo(TypedDict):
    type: str
    message: str
    #: Bad recipe content found by the worker: the runner raises InputError (no candidate could do better).
    input_error: bool
    traceback: NotRequired[str]


class OkResponse(TypedDict):
    id: int | None
    ok: Literal[True]
    result: Result


class ErrorResponse(TypedDict):
    id: int | None
    ok: Literal[False]
    error: ErrorInfo


Response = OkResponse | ErrorResponse
