"""A run directory's served recommendation as the serving benchmarks start and load it: the search's own server
arguments and CPUs, and the artifact's traffic cut into request bodies as the search cut it.

Shared by ``bench_serving_windows.py`` and ``bench_serving_fresh.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ServedRun:
    """What a serving benchmark needs of ``out``: its report's serving section, and how to start and load it."""

    doc: dict[str, Any]  # report.json
    rec: dict[str, Any]  # serving.recommendation
    model_name: str
    slo_ms: float
    percentile: float  # 99.0 for "p99"
    bodies: list[Any]  # request bodies (loadgen.encode_binary_request), the artifact's traffic cut into requests
    server_args: list[str]  # run.sh serve's arguments for the recommended configuration
    server_cpus: frozenset[int] | None
    client_cpus: frozenset[int] | None


def served_run(out: Path) -> ServedRun:
    from autotune.serving import loadgen
    from autotune.serving.requests import cut_requests, load_batches

    doc = json.loads((out / "report.json").read_text())
    s = doc["serving"]
    rec = s["recommendation"]
    names = [i["name"] for i in doc["artifact"]["interface"]["inputs"]]
    pads = (doc["recipe"].get("data") or {}).get("pad_values") or {}
    bodies = [loadgen.encode_binary_request(r) for r in
              cut_requests(load_batches(out / "artifact" / "traffic.npz", names), int(s["request_samples"]),
                           pad_values=pads)]
    cpus = s.get("cpus") or {}
    server_args = ["--instances", str(rec["instances"]), "--threads", str(rec["threads"]), "--max-batch",
                   str(rec["max_batch"]), "--max-delay-ms", f"{rec['max_delay_ms']:g}", "--model-name", s["model_name"]]
    return ServedRun(doc=doc, rec=rec, model_name=str(s["model_name"]), slo_ms=float(s["slo_ms"]),
                     percentile=float(str(s["percentile"]).lstrip("p")), bodies=bodies, server_args=server_args,
                     server_cpus=frozenset(cpus["server"]) if cpus.get("server") else None,
                     client_cpus=frozenset(cpus["client"]) if cpus.get("client") else None)
