"""Per-variant batch boundaries for a run: probe in the worker, confirm fresh, remember in the study.

:mod:`autotune.batch` holds the search algorithm against an abstract ``probe(b)``; this module
connects it to real workers (the probe is a worker call, a worker killed by the kernel means
"does not fit") and to the study, so that a resumed ``autotune run`` does not spend minutes
probing again for an answer it already has.

Reuse rule: the stored answer is reused for a variant when everything that decided it is
unchanged: device, granularity, upper bound, headroom and the memory limit. An explicit
budget or a GPU's capacity must be equal; a limit derived from the memory available when the
run started moves with other processes, so it may differ by at most the headroom fraction (the
headroom is the margin the answer already keeps). Anything else is probed again. The study's
recipe fingerprint already guarantees the same model, inputs and device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.batch import (
    BatchBoundary,
    ProbeResult,
    candidate_batch_sizes,
    find_max_batch_size,
    refine_max_batch_size,
)
from autotune.errors import BatchSearchError, VariantError
from autotune.recipe import Recipe
from autotune.runner import Runner

if TYPE_CHECKING:
    from autotune.tuner import Workload

#: Default CPU memory budget: this fraction of the memory available when the run starts.
DEFAULT_BUDGET_FRACTION = 0.5
#: Study user attribute holding the boundary answers (see :meth:`BoundaryOutcome.state`).
STATE_ATTR = "batch_boundary_state"
#: Version of that attribute's layout; another version is ignored (probed again), never misread.
STATE_VERSION = 1


def memory_limit(recipe: Recipe, workload: Workload) -> int | None:
    """The boundary's limit: the recipe's CPU budget, else a fraction of available memory; GPU capacity."""
    if workload.device.startswith("cuda"):
        return workload.device_memory_capacity
    if recipe.batch.memory_budget_bytes is not None:
        return recipe.batch.memory_budget_bytes
    if workload.host_memory_available is None:
        return None
    return int(workload.host_memory_available * DEFAULT_BUDGET_FRACTION)


def limit_source(recipe: Recipe, workload: Workload) -> str:
    """Where :func:`memory_limit` took the limit from: ``device``, ``budget`` or ``available``."""
    if workload.device.startswith("cuda"):
        return "device"
    return "budget" if recipe.batch.memory_budget_bytes is not None else "available"


def probe_function(runner: Runner, recipe: Recipe, variant: str, *, budget: int | None, is_cpu: bool
                   ) -> Callable[[int], ProbeResult]:
    """``probe(b)`` for the boundary search, run in the worker; a killed worker means "does not fit"."""
    recipe_data = recipe.to_dict()

    def probe(batch_size: int) -> ProbeResult:
        res = runner.call(
            {"op": "probe", "recipe": recipe_data, "variant": variant, "batch_size": batch_size,
             "memory_budget_bytes": budget if is_cpu else None},
            timeout=recipe.measure.timeout_s,
        )
        crash = res.get("crash")
        if crash is not None and crash.killed_by_kernel:
            return ProbeResult(fits=False, peak_memory_bytes=None, error=crash.reason)
        if res["status"] == "failed":
            raise VariantError(f"probing batch {batch_size} failed: {res['reason']}")
        return ProbeResult(fits=bool(res["fits"]), peak_memory_bytes=res.get("peak_memory_bytes"),
                           error=res.get("reason") or None, baseline_bytes=res.get("baseline_bytes"))

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


def boundary_key(recipe: Recipe, workload: Workload) -> dict[str, Any]:
    """Everything besides the model that decides a boundary answer."""
    return {
        "device": workload.device,
        "granularity": recipe.batch.granularity,
        "max_batch_size": recipe.batch.max_batch_size,
        "headroom": recipe.batch.headroom,
        "memory_limit_bytes": memory_limit(recipe, workload),
        "limit_source": limit_source(recipe, workload),
    }


def same_conditions(stored: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Was ``stored`` decided under the conditions ``current`` describes? (the module's reuse rule)"""
    if set(stored) != set(current):
        return False
    if any(stored[k] != current[k] for k in current if k != "memory_limit_bytes"):
        return False
    old, new = stored["memory_limit_bytes"], current["memory_limit_bytes"]
    if current["limit_source"] != "available" or old is None or new is None:
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


def boundary_for(runner: Runner, recipe: Recipe, variant: str, *, limit: int | None, is_cpu: bool) -> BatchBoundary:
    """Search in the (reused) worker; on CPU, confirm the answer with fresh-process probes.

    The reused worker carries state from earlier probes (baseline drift, allocator caches), a
    deployment starts fresh: the fresh probes at b and b + granularity are the ground truth, and
    the cheap search only has to land near it. The CUDA allocator's peaks are exact per process.
    """
    probe = probe_function(runner, recipe, variant, budget=limit, is_cpu=is_cpu)
    boundary = find_max_batch_size(
        probe, granularity=recipe.batch.granularity, max_batch_size=recipe.batch.max_batch_size,
        memory_limit_bytes=limit, noise_bytes=None if is_cpu else 0,
    )
    if not is_cpu:
        return boundary
    with Runner(reuse=False) as fresh:
        return refine_max_batch_size(probe_function(fresh, recipe, variant, budget=limit, is_cpu=True), boundary)


def find_boundaries(runner: Runner, recipe: Recipe, workload: Workload, *,
                    on_variant: Callable[[str], None] | None = None,
                    stored_state: Any = None) -> BoundaryOutcome:
    """Per variant: the largest batch that fits, and the batch sizes the search may use.

    ``stored_state`` is a study's :data:`STATE_ATTR`: variants it answers under the same
    conditions are taken from it (their documents say ``reused_from_study``), the rest probed.
    """
    key = boundary_key(recipe, workload)
    known = reusable_outcome(stored_state, key, workload.variants)
    limit = key["memory_limit_bytes"]
    is_cpu = workload.device == "cpu"
    sizes, docs, failures = dict(known.batch_sizes), dict(known.documents), dict(known.failures)
    for variant in workload.variants:
        if variant in sizes or variant in failures:
            continue
        if on_variant is not None:
            on_variant(variant)
        try:
            boundary = boundary_for(runner, recipe, variant, limit=limit, is_cpu=is_cpu)
        except BatchSearchError as exc:  # batch 1 does not fit
            failures[variant] = ("oom", str(exc))
            continue
        except VariantError as exc:  # the variant cannot even be built or run
            failures[variant] = ("failed", str(exc))
            continue
        usable = boundary.usable_max_batch_size(recipe.batch.headroom)
        sizes[variant] = tuple(candidate_batch_sizes(usable, granularity=recipe.batch.granularity))
        doc = boundary.to_dict(headroom=recipe.batch.headroom)
        doc["memory_measured_by"] = workload.memory_method
        if is_cpu:
            doc["confirmed_by"] = "probes at b and b + granularity, each in a fresh worker process"
        docs[variant] = doc
    order = {v: i for i, v in enumerate(workload.variants)}
    return BoundaryOutcome(
        dict(sorted(sizes.items(), key=lambda kv: order[kv[0]])),
        dict(sorted(docs.items(), key=lambda kv: order[kv[0]])),
        dict(sorted(failures.items(), key=lambda kv: order[kv[0]])),
        key,
    )
