"""Per-variant batch boundaries for a run: probe in the worker, confirm fresh, remember in the study.

:mod:`autotune.batch` holds the search algorithm against an abstract ``probe(b)``; this module
connects it to real workers (the probe is a worker call, a worker killed by the kernel means
"does not fit") and to the study, so that a resumed ``autotune run`` does not spend minutes
probing again for an answer it already has.

Limits (``batch_sizes = "auto"`` in a run; :mod:`autotune.batch.probe_cost`): a run probes only as
far as its search can use. Each probe's cost is predicted from the previous ones, and a probe whose
forward passes would take longer than ``batch.max_probe_seconds`` (default
:data:`DEFAULT_MAX_PROBE_SECONDS`) is not run; the boundary search as a whole gets ``batch.max_seconds``
(default :data:`DEFAULT_BOUNDARY_SHARE` of ``search.time_budget_s``), each variant a share of what is
left when its turn comes (:func:`variant_share`); on a CPU it stops where throughput stopped growing (a
later variant's probes jump to where an earlier one saw it stop: :func:`saturation_hint`). On an
accelerator, where memory is usually what binds and probes are fast, a run searches as before: only caps
the recipe sets apply. ``autotune batch`` (``limited=False``) finds the exact memory boundary: it applies
the caps only when the recipe sets them, and never the saturation rule. A boundary that limits ended is
a probed fit, not confirmed in fresh processes (it lies short of the limit), and its document says what
ended it.

Each variant's answer is handed to ``on_found`` as soon as it is known (the tuner stores it in the study),
so an interrupted run keeps the boundaries it found and the next run reuses them.

Reuse rule: the stored answer is reused for a variant when everything that decided it is
unchanged: device, granularity, upper bound, headroom, the probe limits (whether limited, the
per-probe cap and the saturation rule; not the time cap, which moves with the machine's load)
and the memory limit. An explicit budget must be equal; a limit read off the machine when the run started (host memory
available, or accelerator memory free to a fresh process) moves with other processes, so it
may differ by at most the headroom fraction (the headroom is the margin the answer already
keeps). Anything else is probed again. The study's recipe fingerprint already guarantees the
same model, inputs and device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.batch import (
    CRASH_PREFIX,
    BatchBoundary,
    ProbeLimits,
    ProbeRecord,
    ProbeResult,
    candidate_batch_sizes,
    crashed_past,
    find_max_batch_size,
    refine_max_batch_size,
)
from autotune.client import WorkerClient
from autotune.core.device_names import is_accelerator
from autotune.core.events import OnEvent, emit
from autotune.core.recipe import Recipe
from autotune.errors import BatchSearchError, VariantError
from autotune.runner import Runner, WorkerCrash
from autotune.validation import ValidatedWorkload

#: Default CPU memory budget: this fraction of the memory available when the run starts.
DEFAULT_BUDGET_FRACTION = 0.5
#: What a probe's peak includes, said in the report (see ``autotune.worker.op_probe``).
FOOTPRINT_HOST = ("deployment footprint: resident memory of a process holding torch, one copy of the weights as "
                  "the variant holds them, the inputs and the forward pass at the batch; the tool's master copy "
                  "of the model, its correctness gate and its own modules beyond torch are not counted")
FOOTPRINT_ACCELERATOR = ("deployment footprint: device memory allocated for one copy of the weights as the variant "
                         "holds them, the inputs and the forward pass at the batch, under an allocator cap at the "
                         "limit (the master copy stays on the host; the runtime context is outside the limit)")
#: Study user attribute holding the boundary answers (see :meth:`BoundaryOutcome.state`).
STATE_ATTR = "batch_boundary_state"
#: Version of that attribute's layout; another version is ignored (probed again), never misread.
STATE_VERSION = 3  # 3: probe limits in the key; 2: deployment footprint (1 counted the master copy)
#: A run's per-probe cap when the recipe sets none: seconds of a probe's forward passes at one batch.
DEFAULT_MAX_PROBE_SECONDS = 5.0
#: A run's boundary search total when the recipe sets no ``batch.max_seconds``: this share of its time budget.
DEFAULT_BOUNDARY_SHARE = 0.3


#: Precisions whose kernels run best at batch multiples of the device's tensor-core width.
REDUCED_PRECISIONS = ("fp16", "bf16", "autocast-fp16", "autocast-bf16")
#: The accelerator's batch multiple for reduced precision when the recipe sets no granularity
#: (tensor cores take 8 fp16/bf16 rows at a time; 1 elsewhere).
TENSOR_CORE_MULTIPLE = 8


def granularity_for(recipe: Recipe, workload: ValidatedWorkload, variant: str) -> tuple[int, str]:
    """The batch multiple for ``variant`` and why: the recipe's, else the device's default."""
    if recipe.batch.granularity is not None:
        return recipe.batch.granularity, "recipe (batch.granularity)"
    precision = str(workload.specs.get(variant, {}).get("precision", "fp32"))
    if is_accelerator(workload.device) and precision in REDUCED_PRECISIONS:
        return TENSOR_CORE_MULTIPLE, f"default for {precision} on {workload.device} (tensor cores)"
    return 1, "default (1)"


def memory_limit(recipe: Recipe, workload: ValidatedWorkload, *, device_free: int | None = None) -> int | None:
    """The boundary's limit.

    Host memory (CPU): the recipe's budget, else a fraction of the memory available at the start.
    Accelerator: the memory free to a fresh process at the start (``device_free``: after its
    runtime context, other processes and our own idle workers are taken), lowered to the recipe's
    budget when it sets one. The headroom is kept off the batch (``usable_max_batch_size``).
    """
    budget = recipe.batch.memory_budget_bytes
    if is_accelerator(workload.device):
        free = device_free if device_free is not None else workload.device_memory_capacity
        if budget is not None:
            return budget if free is None else min(budget, free)
        return free
    if budget is not None:
        return budget
    if workload.host_memory_available is None:
        return None
    return int(workload.host_memory_available * DEFAULT_BUDGET_FRACTION)


def limit_source(recipe: Recipe, workload: ValidatedWorkload) -> str:
    """Where :func:`memory_limit` took the limit from: ``budget``, ``available`` or ``device_free``."""
    if recipe.batch.memory_budget_bytes is not None:
        return "budget"
    return "device_free" if is_accelerator(workload.device) else "available"


#: Limits read off the machine at the start, which move with other processes (see the reuse rule).
MOVING_SOURCES = ("available", "device_free")


def probe_function(runner: Runner, recipe: Recipe, variant: str, *, budget: int | None, fresh: bool = False
                   ) -> Callable[[int], ProbeResult]:
    """``probe(b)`` for the boundary search, run in the worker; a killed worker means "does not fit".

    ``fresh``: the worker drops the master model after building the variant, so the process holds
    what a deployment holds (see ``autotune.worker.op_probe``); use it with a non-reusing runner.
    """
    client, recipe_data = WorkerClient(runner), recipe.to_dict()
    fitted: list[int] = []  # batch sizes seen to fit by this probe function

    def probe(batch_size: int) -> ProbeResult:
        started = len(runner.stats.startup_seconds)
        res = client.probe(recipe_data, variant, batch_size, memory_budget_bytes=budget, fresh=fresh,
                           timeout=recipe.measure.timeout_s)
        crash = res.get("crash")
        if isinstance(crash, WorkerCrash) and crash.killed_by_kernel:
            return ProbeResult(fits=False, peak_memory_bytes=None, error=crash.reason)
        smaller = [b for b in fitted if b < batch_size]
        if isinstance(crash, WorkerCrash) and crash.crashed and smaller:
            return crashed_past(crash.reason, f"batch {max(smaller)}")
        if res["status"] == "failed":
            raise VariantError(f"probing batch {batch_size} failed: {res['reason']}")
        if res.get("fits"):
            fitted.append(batch_size)
        step = res.get("step_seconds")
        return ProbeResult(fits=bool(res["fits"]), peak_memory_bytes=res.get("peak_memory_bytes"),
                           error=res.get("reason") or None, baseline_bytes=res.get("baseline_bytes"),
                           step_seconds=float(step) if step is not None else None,
                           forward_calls=int(res.get("forward_calls") or 1),
                           overhead_seconds=sum(runner.stats.startup_seconds[started:]))

    return probe


@dataclass(frozen=True)
class BoundaryOutcome:
    """Per variant: the batch sizes the search may use and the boundary document, or why it failed."""

    batch_sizes: dict[str, tuple[int, ...]]
    documents: dict[str, dict[str, Any]]
    failures: dict[str, tuple[str, str]]  # variant -> (status, reason)
    key: Mapping[str, Any] | None = None  # what decided the answers (see boundary_key)

    def state(self) -> dict[str, Any]:
        """JSON-able form for the study (:data:`STATE_ATTR`), read back by :func:`reusable_outcome`."""
        variants: dict[str, Any] = {
            v: {"batch_sizes": list(b),
                "document": {k: x for k, x in self.documents[v].items() if k != "reused_from_study"}}
            for v, b in self.batch_sizes.items()
        }
        variants.update({v: {"failure": [status, reason]} for v, (status, reason) in self.failures.items()})
        return {"version": STATE_VERSION, "key": dict(self.key or {}), "variants": variants}


def max_probe_seconds(recipe: Recipe, *, limited: bool, accelerator: bool = False) -> float | None:
    """The per-probe cap: the recipe's, else (in a run on a CPU) :data:`DEFAULT_MAX_PROBE_SECONDS`."""
    if recipe.batch.max_probe_seconds is not None:
        return recipe.batch.max_probe_seconds
    return DEFAULT_MAX_PROBE_SECONDS if limited and not accelerator else None


def total_seconds(recipe: Recipe, *, limited: bool, accelerator: bool = False) -> tuple[float | None, str]:
    """The boundary search's total time and where it comes from (the report names it): the recipe's, else
    (in a run on a CPU) :data:`DEFAULT_BOUNDARY_SHARE` of the time budget."""
    if recipe.batch.max_seconds is not None:
        return recipe.batch.max_seconds, f"batch.max_seconds = {recipe.batch.max_seconds:g}"
    if not limited or accelerator:
        return None, ""
    share = DEFAULT_BOUNDARY_SHARE * recipe.search.time_budget_s
    return share, f"{DEFAULT_BOUNDARY_SHARE:.0%} of search.time_budget_s = {share:g} s"


def boundary_key(recipe: Recipe, workload: ValidatedWorkload, *, device_free: int | None = None,
                 limited: bool = False) -> dict[str, Any]:
    """Everything besides the model that decides a boundary answer."""
    return {
        "limits": {"limited": limited,
                   "max_probe_seconds": max_probe_seconds(recipe, limited=limited,
                                                          accelerator=is_accelerator(workload.device)),
                   "saturation": limited and not is_accelerator(workload.device)},
        "device": workload.device,
        "granularity": recipe.batch.granularity,
        "max_batch_size": recipe.batch.max_batch_size,
        "headroom": recipe.batch.headroom,
        "memory_limit_bytes": memory_limit(recipe, workload, device_free=device_free),
        "limit_source": limit_source(recipe, workload),
    }


def same_conditions(stored: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Was ``stored`` decided under the conditions ``current`` describes? (the module's reuse rule)"""
    if set(stored) != set(current):
        return False
    if any(stored[k] != current[k] for k in current if k != "memory_limit_bytes"):
        return False
    old, new = stored["memory_limit_bytes"], current["memory_limit_bytes"]
    if current["limit_source"] not in MOVING_SOURCES or old is None or new is None:
        return bool(old == new)
    return abs(new - old) <= float(current["headroom"]) * old


def reusable_outcome(state: Any, key: Mapping[str, Any], variants: tuple[str, ...]) -> BoundaryOutcome:
    """The stored answers that still hold for ``variants`` (empty when the conditions changed)."""
    sizes: dict[str, tuple[int, ...]] = {}
    docs: dict[str, dict[str, Any]] = {}
    failures: dict[str, tuple[str, str]] = {}
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        return BoundaryOutcome(sizes, docs, failures, key)
    if not same_conditions(state.get("key") or {}, key):
        return BoundaryOutcome(sizes, docs, failures, key)
    stored = state.get("variants") or {}
    for variant in variants:
        entry = stored.get(variant)
        if not isinstance(entry, Mapping):
            continue
        if "failure" in entry:
            status, reason = entry["failure"]
            failures[variant] = (str(status), str(reason))
        else:
            sizes[variant] = tuple(int(b) for b in entry["batch_sizes"])
            docs[variant] = {**entry["document"], "reused_from_study": True}
    return BoundaryOutcome(sizes, docs, failures, key)


def boundary_for(runner: Runner, recipe: Recipe, variant: str, *, limit: int | None, granularity: int,
                 accelerator: bool, limits: ProbeLimits | None = None,
                 on_probe: Callable[[ProbeRecord, float | None], None] | None = None) -> BatchBoundary:
    """Search in the (reused) worker, then confirm the answer with fresh-process probes.

    The reused worker carries state from earlier probes (baseline drift, allocator caches, the
    master model it builds variants from), a deployment starts fresh: the probes at b and
    b + granularity, each in a fresh process that builds the variant and drops the master, are
    the ground truth, and the cheap search only has to land near it. On an accelerator the limit
    is a real allocator cap, so "does not fit" is the allocator's own out-of-memory error. A search
    that ``limits`` ended before the boundary is not confirmed (its answer is a probed fit short of it).
    """
    probe = probe_function(runner, recipe, variant, budget=limit)
    boundary = find_max_batch_size(
        probe, granularity=granularity, max_batch_size=recipe.batch.max_batch_size,
        memory_limit_bytes=limit, noise_bytes=0 if accelerator else None, limits=limits, on_probe=on_probe,
        clock=time.monotonic,
    )
    if boundary.stopped_early:
        return boundary
    with Runner(reuse=False) as fresh:
        return refine_max_batch_size(probe_function(fresh, recipe, variant, budget=limit, fresh=True), boundary,
                                     on_probe=on_probe)


def probe_events(on_event: OnEvent | None) -> Callable[[str, ProbeRecord, float | None], None]:
    """``on_probe`` for :func:`find_boundaries` that tells ``on_event`` of each probe (one line in the CLI)."""

    def heard(variant: str, record: ProbeRecord, predicted: float | None) -> None:
        guess = "" if predicted is None else f", predicted {predicted:.1f} s"
        verdict = "fits" if record.fits else "does not fit"
        rate = "" if not record.step_seconds else f", {record.batch_size / record.step_seconds:,.0f} samples/s"
        emit(on_event, "boundary_probe",
             f"  {variant}: {record.phase} probe b={record.batch_size} {verdict} "
             f"({record.seconds:.1f} s{guess}{rate})",
             variant=variant, batch_size=record.batch_size, phase=record.phase, predicted_seconds=predicted,
             seconds=record.seconds, fits=record.fits)

    return heard


def device_free_bytes(runner: Runner, recipe: Recipe) -> int | None:
    """Accelerator memory free to a fresh process now (our idle measure worker closed first)."""
    runner.recycle("measure")  # its context and validated model are not a deployment's to share
    res = WorkerClient(runner).device_memory(recipe, timeout=recipe.measure.timeout_s)
    if "status" in res:  # a CallFailure: the free memory is not known
        return None
    free = res["free_bytes"]
    return int(free) if free is not None else None


def find_boundaries(runner: Runner, recipe: Recipe, workload: ValidatedWorkload, *,
                    on_variant: Callable[[str], None] | None = None,
                    stored_state: Any = None, limited: bool = False,
                    on_probe: Callable[[str, ProbeRecord, float | None], None] | None = None,
                    on_found: Callable[[str, BoundaryOutcome], None] | None = None) -> BoundaryOutcome:
    """Per variant: the largest batch that fits, and the batch sizes the search may use.

    ``stored_state`` is a study's :data:`STATE_ATTR`: variants it answers under the same
    conditions are taken from it (their documents say ``reused_from_study``), the rest probed.
    ``limited``: a run's search (the module's limits); False: the exact boundary (``autotune batch``).
    ``on_probe(variant, record, predicted_seconds)`` hears each probe; ``on_found(outcome)`` gets the
    answers so far after each ``variant`` is answered (to store them at once).
    """
    accelerator = is_accelerator(workload.device)
    device_free = device_free_bytes(runner, recipe) if accelerator else None
    key = boundary_key(recipe, workload, device_free=device_free, limited=limited)
    known = reusable_outcome(stored_state, key, workload.variants)
    limit = key["memory_limit_bytes"]
    sizes, docs, failures = dict(known.batch_sizes), dict(known.documents), dict(known.failures)
    total, total_source = total_seconds(recipe, limited=limited, accelerator=accelerator)
    end = None if total is None else time.monotonic() + total
    todo = [v for v in workload.variants if v not in sizes and v not in failures]
    for i, variant in enumerate(todo):
        if on_variant is not None:
            on_variant(variant)
        granularity, granularity_source = granularity_for(recipe, workload, variant)
        now = time.monotonic()
        limits = ProbeLimits(
            max_probe_seconds=key["limits"]["max_probe_seconds"],
            deadline=None if end is None else now + variant_share(end - now, len(todo) - i),
            deadline_source=f"{total_source}, shared among the variants",
            stop_at_saturation=bool(key["limits"]["saturation"]),
            hint=saturation_hint(docs),
        )

        def heard(record: ProbeRecord, predicted: float | None, variant: str = variant) -> None:
            if on_probe is not None:
                on_probe(variant, record, predicted)

        try:
            boundary = boundary_for(runner, recipe, variant, limit=limit, granularity=granularity,
                                    accelerator=accelerator, limits=limits, on_probe=heard)
        except BatchSearchError as exc:  # batch 1 does not fit
            failures[variant] = ("oom", str(exc))
            _found(on_found, variant, sizes, docs, failures, key, workload.variants)
            continue
        except VariantError as exc:  # the variant cannot even be built or run
            failures[variant] = ("failed", str(exc))
            _found(on_found, variant, sizes, docs, failures, key, workload.variants)
            continue
        usable = boundary.usable_max_batch_size(recipe.batch.headroom)
        doc = boundary.to_dict(headroom=recipe.batch.headroom)
        extended = extended_batch(boundary, hint=limits.hint, headroom=recipe.batch.headroom)
        if extended is not None:
            usable = extended
            doc["searched_up_to"] = extended
            doc["summary"] += (f"; batch sizes searched up to {extended}: where another variant's throughput "
                               "stopped growing, within the memory model's safe side (not probed)")
        sizes[variant] = with_peak(candidate_batch_sizes(usable, granularity=granularity), boundary.throughput_peak)
        doc["memory_measured_by"] = workload.memory_method
        doc["granularity_source"] = granularity_source
        doc["limit_source"] = key["limit_source"]
        doc["footprint"] = FOOTPRINT_ACCELERATOR if accelerator else FOOTPRINT_HOST
        doc["confirmed_by"] = ("probes at b and b + granularity, each in a fresh worker process"
                               if not boundary.stopped_early else
                               f"not confirmed: stopped by {boundary.stopped_by} short of the memory limit")
        crashed = sorted({int(p["batch_size"]) for p in doc["probes"]
                          if not p["fits"] and str(p.get("error") or "").startswith(CRASH_PREFIX)})
        if crashed:
            doc["crashed_at"] = crashed
            doc["summary"] += (f"; the worker crashed at batch {', '.join(map(str, crashed))} instead of raising an "
                               "error (taken as not running there: a deployment process would crash too)")
        docs[variant] = doc
        _found(on_found, variant, sizes, docs, failures, key, workload.variants)
    return _ordered(sizes, docs, failures, key, workload.variants)


def variant_share(left: float, variants_left: int) -> float:
    """A variant's time from what is left of the boundary search: twice an even share, all of it for the last.

    Twice: a variant's first probes cost the most (the worker's model, the variant's first build), and a
    second probe (the jump to :func:`saturation_hint`) is what makes its batch sizes useful; what a cheap
    variant leaves over goes to the later ones, and the total cap holds whatever the shares.
    """
    return max(0.0, left) * min(1.0, 2.0 / (variants_left + 1))


def extended_batch(boundary: BatchBoundary, *, hint: int | None, headroom: float) -> int | None:
    """The batch a capped variant's search may still go up to, or None: its own probes only.

    A variant the time cap ended short (its probes are dear: an export or a compile each) would otherwise be
    searched only up to the few batches it probed, though another variant of the same model saw where
    throughput stops growing (``hint``). It is searched up to that batch when the memory model's safe side
    (the band's edge, less the headroom) is beyond it: a prediction, said so in the report, never a probe::

        if stopped by time_cap (not probe_cap: larger batches are too slow), a hint and a predicted limit exist:
            b = min(hint, floor((1 - headroom) · predicted low edge)) rounded down to the granularity
            return b if b > the usable batch from the probes
    """
    if boundary.stopped_by != "time_cap" or hint is None or boundary.predicted_limit is None:
        return None
    g = boundary.granularity
    low = boundary.predicted_limit[0]
    b = (min(hint, int((1 - headroom) * low)) // g) * g
    return b if b > boundary.usable_max_batch_size(headroom) else None


def with_peak(sizes: list[int], peak: int | None) -> tuple[int, ...]:
    """The grid with the probes' throughput peak added (it is a probed batch, so it fits and is a multiple of
    the granularity): the search starts there (:func:`preferred_batches`), so it must be a candidate."""
    if peak is None or peak > sizes[-1] or peak in sizes:
        return tuple(sizes)
    return tuple(sorted([*sizes, peak]))


def preferred_batches(documents: Mapping[str, Mapping[str, Any]], batch_sizes: Mapping[str, tuple[int, ...]],
                      base_of: Mapping[str, str]) -> dict[str, int]:
    """Per variant, the batch its search starts at: its base's probed throughput peak, when it is a candidate."""
    out: dict[str, int] = {}
    for v, sizes in batch_sizes.items():
        peak = (documents.get(base_of.get(v, v)) or {}).get("throughput_peak")
        if isinstance(peak, int) and peak in sizes:
            out[v] = peak
    return out


def saturation_hint(documents: Mapping[str, Mapping[str, Any]]) -> int | None:
    """The largest batch another variant probed up to before its throughput stopped growing, or None."""
    found = [int(d["max_batch_size"]) for d in documents.values() if d.get("stopped_by") == "throughput"]
    return max(found) if found else None


def _ordered(sizes: dict[str, tuple[int, ...]], docs: dict[str, dict[str, Any]],
             failures: dict[str, tuple[str, str]], key: Mapping[str, Any], variants: tuple[str, ...]
             ) -> BoundaryOutcome:
    order = {v: i for i, v in enumerate(variants)}
    return BoundaryOutcome(
        dict(sorted(sizes.items(), key=lambda kv: order[kv[0]])),
        dict(sorted(docs.items(), key=lambda kv: order[kv[0]])),
        dict(sorted(failures.items(), key=lambda kv: order[kv[0]])),
        key,
    )


def _found(on_found: Callable[[str, BoundaryOutcome], None] | None, variant: str, sizes: dict[str, tuple[int, ...]],
           docs: dict[str, dict[str, Any]], failures: dict[str, tuple[str, str]], key: Mapping[str, Any],
           variants: tuple[str, ...]) -> None:
    if on_found is not None:
        on_found(variant, _ordered(sizes, docs, failures, key, variants))
