"""The serving phase of a run: after the artifact is in place, the serving search on it, and what it ships.

Called by the tuner when the recipe has ``[serving]`` and the artifact built. It reads what the search needs
from the document (the artifact's directory, variant, environment and interface; the throughput pick's time
per call for the batch-loop baseline), runs :class:`autotune.serving.search.ServingSearch`, stores the section
as report.json's ``serving``, and writes the recommendation into ``artifact/serving.json`` (so
``./run.sh serve`` starts it) and the other servers' configuration files beside it. A serving stage that
fails says why in its section; the run and its artifact stand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.core.process_env import environment_of_variant
from autotune.serving.configs import device_of
from autotune.serving.search import ServingSearch, Target
from autotune.serving.ship import (
    SERVING_JSON,
    model_name_of,
    read_serving_json,
    server_files,
    write_other_servers,
    write_serving_json,
)

SERVE_COMMAND = "./run.sh serve --port 8000"


def target_of(doc: Mapping[str, Any], artifact_dir: Path, spec: Any) -> Target | None:
    """The serving target from a run's document (None without a built artifact)."""
    section = doc.get("artifact") or {}
    rec = doc.get("recommendation") or {}
    if section.get("status") != "ok" or not rec:
        return None
    recipe = doc.get("recipe") or {}
    iface = section.get("interface") or {}
    names = tuple(str(x["name"]) for x in iface.get("inputs") or []) or \
        tuple(str(x["name"]) for x in recipe.get("inputs") or [])
    variant = str(rec.get("variant"))
    batch = int(section.get("batch_size") or rec.get("batch_size") or 1)
    throughput = float(rec.get("throughput") or 0.0)
    samples = float((rec.get("traffic") or {}).get("samples_per_call") or batch)
    threads = rec.get("threads") or section.get("threads")
    return Target(artifact=artifact_dir, variant=variant, environment=environment_of_variant(variant).name,
                  batch_size=batch, threads=int(threads) if isinstance(threads, int) else 0,
                  model_name=model_name_of(str(recipe.get("name") or "model"), spec.model_name),
                  input_names=names, pad_values=dict((recipe.get("data") or {}).get("pad_values") or {}),
                  call_seconds=samples / throughput if throughput > 0 else None,
                  device=device_of(doc))


def run_serving(spec: Any, doc: dict[str, Any], out_dir: Path, *, run_started: float,
                say: Callable[[str], None] | None = None, seed: int = 0) -> dict[str, Any]:
    """The serving section for ``doc`` (also stored in it), the artifact's serving files written."""
    artifact_dir = out_dir / "artifact"
    target = target_of(doc, artifact_dir, spec)
    if target is None:
        section: dict[str, Any] = {"status": "skipped", "reason": "no artifact was built to serve",
                                   "slo_ms": spec.slo_ms, "percentile": spec.percentile}
        doc["serving"] = section
        return section
    search = ServingSearch(spec, target, on_event=say, seed=seed)
    section = search.run()
    rec = section.get("recommendation")
    files = [*server_files(), SERVING_JSON]
    if rec:
        settings = read_serving_json(artifact_dir)
        settings.update(model_name=target.model_name, instances=rec["instances"], threads=rec["threads"],
                        max_batch=rec["max_batch"], max_delay_ms=rec["max_delay_ms"],
                        slo_ms=spec.slo_ms, percentile=spec.percentile, max_rate=rec["max_rate"],
                        measured_on_cpus=(section.get("cpus") or {}).get("server"))
        write_serving_json(artifact_dir, settings)
        files += _other_servers(doc, artifact_dir, section)
    total = time.monotonic() - run_started
    section["share_of_run"] = round(section["seconds"] / total, 3) if total > 0 else None
    section["server"] = {"stack": "asyncio HTTP/1.1 of autotune's own (serve.py), instances as processes",
                         "command": SERVE_COMMAND}
    section["files"] = files
    doc["serving"] = section
    return section


def _other_servers(doc: dict[str, Any], artifact_dir: Path, section: dict[str, Any]) -> list[str]:
    """Triton, TorchServe and Ray Serve files for the recommendation, beside the artifact; notes into the
    section."""
    from autotune.serving.configs import plan_from_document, server_configs

    plan = plan_from_document({**doc, "serving": section})
    if plan is None:
        return []
    got = server_configs(plan)
    section["server_notes"] = list(got.notes)  # how to use each file (report.json; the headline keeps its own)
    return write_other_servers(artifact_dir, got.files)


__all__ = ["SERVE_COMMAND", "run_serving", "target_of"]
