"""The concurrency boundary: how many sequences one ``generate`` call can decode before memory runs out.

The batch boundary's search (:func:`autotune.batch.find_max_batch_size`; every probe is a fresh process, so a search
that ends on memory has probed b and b + 1 as a deployment would, and needs no
:func:`autotune.batch.refine_max_batch_size`) on a different probe: ``generate`` at ``c`` sequences, first every one
at the longest prompt bucket decoding the most new tokens (the worst case a deployment of this workload meets), then
``generate.calls`` of the workload's own batches (a serving process's peak after several calls of mixed shapes is
above one call's), in a fresh worker each (torch, transformers, the model at its precision, the prompts, the KV
cache, the logits: what a deployment process holds). The limit is the recipe's ``batch.memory_budget``, else half
the host memory available at the start (CPU), or the memory free to a fresh process on the GPU, where the allocator
is capped at it and "does not fit" is its own out-of-memory error.

Why a time cap: each probe is a fresh process that imports torch and transformers and builds the model (15-25 s on
a GPU machine, where memory is large and the boundary far out: 12 probes, 220 s, against a 90-s
``generate.time_budget_s`` on an H200). The search may use :data:`BOUNDARY_SHARE` of the budget; a probe predicted
to end after that is not started (:class:`autotune.batch.ProbeLimits`' deadline), and the boundary is then the
largest concurrency probed to fit, which the document and its sentence say (``stopped_by = "time_cap"``, the
memory model's estimate beside it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autotune.batch import BatchBoundary, ProbeLimits, ProbeRecord, ProbeResult, crashed_past, find_max_batch_size
from autotune.client import WorkerClient
from autotune.core.recipe import Recipe
from autotune.errors import VariantError
from autotune.generate.configs import GenerateConfig
from autotune.runner import WorkerCrash

DEFAULT_BUDGET_FRACTION = 0.5
#: Share of ``generate.time_budget_s`` the concurrency boundary may spend (the points at each concurrency need the
#: rest).
BOUNDARY_SHARE = 0.5


def probe_function(client: WorkerClient, recipe: Recipe, config: GenerateConfig, *, budget: int | None
                   ) -> Callable[[int], ProbeResult]:
    data = recipe.to_dict()
    spec = recipe.generate
    assert spec is not None

    fitted: list[int] = []  # concurrencies seen to fit by this probe function

    def probe(c: int) -> ProbeResult:
        res = client.generate(data, config.to_dict(), c, action="probe", memory_budget_bytes=budget,
                              calls=spec.calls, timeout=recipe.measure.timeout_s)
        crash = res.get("crash")
        if isinstance(crash, WorkerCrash) and crash.killed_by_kernel:
            return ProbeResult(fits=False, error=crash.reason)
        smaller = [n for n in fitted if n < c]
        if isinstance(crash, WorkerCrash) and crash.crashed and smaller:  # as a batch boundary's probe
            return crashed_past(crash.reason, f"{max(smaller)} sequences")
        if res["status"] == "oom":
            return ProbeResult(fits=False, error=res["reason"])
        if res["status"] != "ok":
            raise VariantError(f"probing {c} sequences failed: {res['reason']}")
        got: Any = res
        if got.get("fits"):
            fitted.append(c)
        step = got.get("step_seconds")
        return ProbeResult(fits=bool(got.get("fits")), peak_memory_bytes=got.get("peak_memory_bytes"),
                           error=got.get("reason") or None, baseline_bytes=got.get("baseline_bytes"),
                           step_seconds=float(step) if step is not None else None)

    return probe


def find_concurrency_boundary(client: WorkerClient, recipe: Recipe, config: GenerateConfig, *, limit: int | None,
                              upper: int, deadline: float | None = None,
                              on_probe: Callable[[ProbeRecord, float | None], None] | None = None
                              ) -> BatchBoundary:
    """The largest concurrency (<= ``upper``) whose worst-case call fits ``limit``; confirmed at b and b + 1.

    ``deadline`` (a ``time.monotonic`` reading): no probe predicted to end after it is started (module docstring).
    """
    probe = probe_function(client, recipe, config, budget=limit)
    limits = None if deadline is None else ProbeLimits(
        deadline=deadline, deadline_source=f"{BOUNDARY_SHARE:.0%} of generate.time_budget_s")
    # every probe ran in a fresh process: a search that ended on memory probed b (fits) and b + 1 (does not) as a
    # deployment process would, which is what the batch boundary's refinement adds to its reused-worker search
    return find_max_batch_size(probe, granularity=1, max_batch_size=upper, memory_limit_bytes=limit,
                               on_probe=on_probe, clock=time.monotonic, limits=limits)


def boundary_document(found: BatchBoundary, *, limit: int | None, source: str, prompt_tokens: int,
                      new_tokens: int, config: GenerateConfig) -> dict[str, Any]:
    fits = found.max_batch_size
    sentence = (f"at {prompt_tokens} + {new_tokens} tokens, {fits} sequences fit"
                + (f" in {limit / 2**30:.2f} GiB" if limit else "")
                + ("" if found.stopped_by != "upper_bound" else
                   f" (generate.max_concurrency = {fits}: memory did not stop it)"))
    doc: dict[str, Any] = {"config": config.label(), "max_concurrency": fits, "memory_limit_bytes": limit,
                           "limit_source": source, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
                           "stopped_by": found.stopped_by, "probes": [r.to_dict() for r in found.probes],
                           "sentence": sentence}
    if found.stopped_by == "time_cap":
        estimate = ""
        if found.predicted_limit is not None:
            doc["predicted_max_concurrency"] = round(found.predicted_limit[1], 1)
            estimate = f"; the memory model puts the boundary near {found.predicted_limit[1]:.0f}"
        doc["sentence"] += (f" (the largest probed: the search stopped on its time, {found.stop_detail}"
                            f"{estimate}; more may fit)")
    return doc
