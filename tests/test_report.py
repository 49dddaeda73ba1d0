"""Tests of autotune.report: validation, the three report files, plots, console table, reproduce code.

The synthetic document below has the shape autotune.report.assemble.build_document produces (rows as
autotune.candidate.candidate_record makes them). Expected values are computed from the document
in each test, never typed in.

Run as a script for the rendering benchmark: ``.venv/bin/python tests/test_report.py``.
"""

from __future__ import annotations

import base64
import copy
import html
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.errors import InputError
from autotune.report import (
    PLOT_NAMES,
    REPORT_FILES,
    SCHEMA_VERSION,
    console_table,
    load_report,
    measure_command,
    normalise_report,
    rank_candidates,
    render_html,
    render_markdown,
    render_plots,
    reproduce_code,
    validate_report,
    write_reports,
)
from autotune.report.format import fmt_ms, fmt_percent, fmt_rate, relative_half_width

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GIB = 2**30

# --------------------------------------------------------------------------- synthetic document

ENVIRONMENT = {
    "hostname": "bench-1",
    "platform": "Linux-6.1-x86_64",
    "machine": "x86_64",
    "python": "3.11.7",
    "cpu_model": "AMD EPYC 7B13",
    "cpu_logical_cores": 2,
    "cpu_physical_cores": 2,
    "cpu_affinity_cores": 2,
    "memory_total_bytes": 25 * GIB,
    "torch_version": "2.14.1",
    "torch_cuda_version": None,
    "cuda_available": False,
    "cuda_device_count": 0,
    "gpus": [],
    "packages": {"numpy": "2.4.6", "optuna": "5.0.0", "torchvision": "0.29.1"},
    "env": {"OMP_NUM_THREADS": None},
}

# variant -> (compiler, compile_mode, precision, memory_format, relative speed)
VARIANTS = {
    "eager": ("eager", None, "fp32", "contiguous", 1.0),
    "script": ("script", None, "fp32", "contiguous", 1.08),
    "frozen": ("frozen", None, "fp32", "contiguous", 1.45),
    "compile": ("compile", "default", "fp32", "contiguous", 1.3),
    "eager+channels_last": ("eager", None, "fp32", "channels_last", 1.12),
}
BATCHES = (1, 8, 32, 64)
LATENCY_LIMIT_MS = 50.0


def _trace(rng: np.random.Generator, level_ms: float, points: int, warmup_points: int) -> list[float]:
    t = np.arange(points)
    values = (
        level_ms
        * (1 + 2.0 * np.exp(-t / max(warmup_points / 4, 1)))
        * (1 + 0.01 * rng.standard_normal(points))
    )
    return [float(v) for v in values]


def _pareto(rows: list[dict[str, Any]]) -> list[int]:
    pts = [r for r in rows if r["status"] == "ok" and r["feasible"]]
    return sorted(
        r["trial"]
        for r in pts
        if not any(
            o["throughput"] >= r["throughput"]
            and o["latency_ms"]["p99"] <= r["latency_ms"]["p99"]
            and (o["throughput"] > r["throughput"] or o["latency_ms"]["p99"] < r["latency_ms"]["p99"])
            for o in pts
        )
    )


def _row(trial: int, variant: str, batch: int, **fields: Any) -> dict[str, Any]:
    compiler, mode, precision, memory_format, _ = VARIANTS.get(
        variant, ("compile", "max-autotune", "fp32", "contiguous", 1.0)
    )
    row: dict[str, Any] = {
        "trial": trial,
        "variant": variant,
        "compiler": compiler,
        "compile_mode": mode,
        "precision": precision,
        "memory_format": memory_format,
        "threads": None,
        "batch_size": batch,
        "status": "ok",
        "reason": None,
        "feasible": True,
        "violations": [],
        "throughput": None,
        "throughput_ci": None,
        "latency_ms": None,
        "peak_memory_bytes": None,
        "compile_seconds": None,
        "warmup_iterations": None,
        "classification": None,
        "relative_ci_half_width": None,
        "samples": 0,
        "stopped_by": None,
        "recompiles": 0,
        "correctness": None,
        "notes": [],
        "trace_ms": None,
    }
    row.update(fields)
    return row


def make_document(*, extra_batches: tuple[int, ...] = (), trace_points: int = 400) -> dict[str, Any]:
    """A realistic run: 5 variants x 4 batches measured, a slow no-steady-state one, constraint
    violations, one oom / rejected / failed / pruned, boundaries with probes, traces."""
    rng = np.random.default_rng(7)
    rows: list[dict[str, Any]] = []
    for variant, (compiler, _, _, _, speed) in VARIANTS.items():
        for batch in (*BATCHES, *extra_batches):
            rate = speed * 900.0 * batch / (batch + 6.0) * (1 + 0.02 * rng.standard_normal())
            p50 = 1000.0 * batch / rate
            lat = {"mean": p50 * 1.01, "p50": p50, "p90": p50 * 1.05, "p99": p50 * 1.12}
            violations = (
                [f"p99 latency {lat['p99']:.3g} ms > SLO {LATENCY_LIMIT_MS:g} ms"]
                if lat["p99"] > LATENCY_LIMIT_MS
                else []
            )
            samples, ips = 1200, 3
            rows.append(
                _row(
                    len(rows),
                    variant,
                    batch,
                    throughput=rate,
                    throughput_ci=[rate * 0.99, rate * 1.01],
                    latency_ms=lat,
                    peak_memory_bytes=int(1e8 + 1.5e7 * batch),
                    compile_seconds=0.05 if compiler == "eager" else 2.5,
                    warmup_iterations=90,
                    classification="warmup",
                    relative_ci_half_width=0.01,
                    samples=samples,
                    stopped_by="precision",
                    iterations_per_sample=ips,
                    feasible=not violations,
                    violations=violations,
                    correctness=None
                    if variant == "eager"
                    else {
                        "passed": True,
                        "max_abs_error": 2e-6,
                        "max_rel_error": 1e-5,
                        "min_cosine": 0.999999,
                        "batches": 3,
                        "reason": None,
                    },
                    notes=["TorchScript (torch.jit) is deprecated"]
                    if compiler in ("script", "frozen")
                    else [],
                    trace_ms=_trace(rng, p50, trace_points, 30),
                )
            )
    rows[-1].update(
        classification="no_steady_state",
        warmup_iterations=None,
        relative_ci_half_width=0.08,
        throughput_ci=[rows[-1]["throughput"] * 0.92, rows[-1]["throughput"] * 1.08],
        stopped_by="budget",
    )
    rows.append(
        _row(
            len(rows),
            "eager",
            1024,
            status="oom",
            reason="worker killed by the kernel (out of memory)",
            feasible=False,
            peak_memory_bytes=None,
        )
    )
    rows.append(
        _row(
            len(rows),
            "frozen+bf16",
            32,
            status="rejected",
            feasible=False,
            reason="max_abs_error 0.31 > tolerance 0.01 | cosine 0.97",
            correctness={
                "passed": False,
                "max_abs_error": 0.31,
                "max_rel_error": 0.2,
                "min_cosine": 0.97,
                "batches": 3,
                "reason": "max_abs_error 0.31 > 0.01",
            },
        )
    )
    rows.append(
        _row(
            len(rows),
            "compile:max-autotune",
            8,
            status="failed",
            feasible=False,
            reason="InductorError: no working C++ compiler found",
        )
    )
    rows.append(
        _row(
            len(rows),
            "script",
            512,
            status="pruned",
            feasible=False,
            reason="batch 512 is above script's boundary minus headroom",
        )
    )
    ok = [r for r in rows if r["status"] == "ok" and r["feasible"]]
    best = max(ok, key=lambda r: r["throughput_ci"][0] if r.get("throughput_ci") else r["throughput"])

    def boundary(per_sample: float, limit: int) -> dict[str, Any]:
        probes = []
        for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 384, 320, 288, 272):
            peak = 1e8 + per_sample * b
            probes.append(
                {
                    "batch_size": b,
                    "fits": peak < limit,
                    "peak_memory_bytes": peak if peak < limit else None,
                    "seconds": 0.4 + b / 100,
                    "error": None if peak < limit else "out of memory",
                }
            )
        fitting = max(p["batch_size"] for p in probes if p["fits"])
        return {
            "max_batch_size": fitting,
            "usable_max_batch_size": int(fitting * 0.9),
            "headroom": 0.1,
            "memory_limit_bytes": limit,
            "memory_measured_by": "peak RSS (VmHWM) of the worker",
            "probes": probes,
            "model": {"intercept_bytes": 1e8, "bytes_per_sample": per_sample},
        }

    return {
        "schema": 1,
        "tool": {"name": "autotune", "version": "0.1.0"},
        "created": "2026-11-22T10:00:00+00:00",
        "recipe": {
            "path": "recipes/quick start.toml",
            "name": "quickstart",
            "description": "resnet18 on 64x64 images",
            "device": "auto",
            "device_resolved": "cpu",
            "model": {
                "factory": "torchvision.models:resnet18",
                "kwargs": {"num_classes": 10},
                "base_dir": "recipes",
            },
            "inputs": [{"name": "x", "shape": [3, 64, 64], "dtype": "float32", "vocab_size": None}],
            "search": {
                "variants": ["all"],
                "precisions": ["fp32", "bf16"],
                "memory_formats": ["contiguous"],
                "batch_sizes": "auto",
                "objective": "throughput",
                "time_budget_s": 120.0,
                "max_trials": 0,
                "seed": 0,
            },
            "constraints": {
                "max_latency_ms": LATENCY_LIMIT_MS,
                "latency_percentile": "p99",
                "max_memory_bytes": None,
            },
            "batch": {"max_batch_size": 4096, "granularity": 1, "memory_budget_bytes": None, "headroom": 0.1},
            "measure": {"mode": "throughput", "ci_target": 0.01, "max_seconds": 10.0, "timeout_s": 300.0},
        },
        "environment": copy.deepcopy(ENVIRONMENT),
        "search": {
            "trials": len(rows),
            "wall_seconds": 95.2,
            "sampler": "GridSampler",
            "objective": "throughput",
            "study_name": "quickstart",
            "storage": "sqlite:///out/study.db",
            "stopped_by": "exhausted",
        },
        "batch_boundary": {"eager": boundary(1.5e7, 4 * GIB), "frozen": boundary(1.1e7, 4 * GIB)},
        "candidates": rows,
        "recommendation": copy.deepcopy(best),
        "pareto": _pareto(rows),
        "notes": ["torch.jit (script/trace/frozen) is deprecated upstream in favour of torch.compile"],
    }


def degenerate_document() -> dict[str, Any]:
    """Nothing could be measured: every candidate oom/failed/rejected, no boundary, no traces."""
    doc = make_document()
    doc["candidates"] = [c for c in doc["candidates"] if c["status"] != "ok"]
    doc["recommendation"] = None
    doc["pareto"] = []
    doc.pop("batch_boundary")
    return doc


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return make_document()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, document: dict[str, Any]) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("report")
    return write_reports(document, out)


# ------------------------------------------------------------------------------------ the files


def test_write_reports_writes_the_three_files_and_plots(
    written: dict[str, Any], document: dict[str, Any]
) -> None:
    assert sorted(p.name for p in (written["json"], written["md"], written["html"])) == sorted(REPORT_FILES)
    for key in ("json", "md", "html"):
        assert written[key].is_file() and written[key].stat().st_size > 0
    # every plot but the accuracy one, which needs candidates with an accuracy (test_precision_and_accuracy_...)
    assert [p.stem for p in written["plots"]] == [name for name in PLOT_NAMES if name != "accuracy"]
    for plot in written["plots"]:
        assert plot.read_bytes().startswith(PNG_MAGIC)
    leftovers = [p for p in written["json"].parent.rglob("*.tmp")]
    assert leftovers == []


def test_the_search_line_gives_the_searchs_own_seconds_and_the_trials_measured(document: dict[str, Any]) -> None:
    """The Search line's seconds are the search's, not the whole run's (serving included: "6 trials in 229 s" beside
    "Time: ... search 76 s", session 32); trials the run did not measure are said apart."""
    from autotune.report.analysis import search_summary

    doc = copy.deepcopy(document)
    assert search_summary(doc).startswith(f"{len(doc['candidates'])} trials, in 95.2 s")  # an older report
    doc["search"].update(search_seconds=74.0, measured_this_run=len(doc["candidates"]) - 1)
    assert search_summary(doc).startswith(f"{len(doc['candidates'])} trials ({len(doc['candidates']) - 1} measured "
                                          "this run), in 74.0 s")


def test_html_is_self_contained_with_plots_and_recommendation(
    written: dict[str, Any], document: dict[str, Any]
) -> None:
    page = written["html"].read_text(encoding="utf-8")
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == len(written["plots"])
    assert all(base64.b64decode(data).startswith(PNG_MAGIC) for data in images)
    assert "<script" not in page and 'src="http' not in page and "<link" not in page
    rec = document["recommendation"]
    assert f"{rec['variant']} @ batch {rec['batch_size']}" in page
    for c in document["candidates"]:  # every candidate, whatever its status, with its reason
        if c["reason"]:
            assert c["reason"] in html.unescape(page)
    assert "No feasible configuration" not in page


def test_markdown_has_sections_plots_and_speedup(written: dict[str, Any], document: dict[str, Any]) -> None:
    md = written["md"].read_text(encoding="utf-8")
    for heading in (
        "## Recommendation",
        "### Why",
        "## Plots",
        "## Candidates",
        "## Batch boundary",
        "## Environment",
        "## Notes",
        "## Reproduce",
    ):
        assert heading in md
    for plot in written["plots"]:
        assert f"]({plot.parent.name}/{plot.name})" in md
    rec = document["recommendation"]
    eager = next(
        c
        for c in document["candidates"]
        if c["variant"] == "eager" and c["status"] == "ok" and c["batch_size"] == rec["batch_size"]
    )
    assert (
        f"{rec['throughput'] / eager['throughput']:.2f}× the throughput of eager at batch {rec['batch_size']}"
        in md
    )
    # a reason containing a pipe must not break the markdown table
    rejected = next(line for line in md.splitlines() if "frozen+bf16" in line and line.startswith("|"))
    assert "\\|" in rejected
    assert measure_command(document) in md


def test_json_round_trips_and_is_stable(
    written: dict[str, Any], document: dict[str, Any], tmp_path: Path
) -> None:
    loaded = load_report(written["json"])
    assert loaded == normalise_report(document)
    assert load_report(written["json"].parent) == loaded  # a directory names its report.json
    text = written["json"].read_text(encoding="utf-8")
    assert next(iter(json.loads(text))) == "schema"
    again = write_reports(loaded, tmp_path)
    assert again["json"].read_bytes() == written["json"].read_bytes()
    # long number lists (timing traces) stay on one line each
    trace_lines = [line for line in text.splitlines() if '"trace_ms": [' in line]
    assert len(trace_lines) == sum(1 for c in document["candidates"] if c["trace_ms"]) + 1
    assert all(line.rstrip(",").endswith("]") for line in trace_lines)


def test_normalise_makes_json_able_copies_without_touching_the_input(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    doc["candidates"][0]["throughput"] = 1.5
    doc["candidates"][0]["throughput_ci"] = (np.float64(1.0), np.float64(2.0))
    doc["candidates"][0]["latency_ms"]["p90"] = float("nan")
    doc["candidates"][0]["trace_ms"] = np.array([1.0, 2.0])
    doc["candidates"][0]["samples"] = np.int64(2)
    doc.pop("notes")
    plain = normalise_report(doc)
    json.dumps(plain, allow_nan=False)
    assert plain["candidates"][0]["throughput_ci"] == [1.0, 2.0]
    assert plain["candidates"][0]["latency_ms"]["p90"] is None
    assert plain["candidates"][0]["trace_ms"] == [1.0, 2.0]
    assert plain["notes"] == []
    assert isinstance(doc["candidates"][0]["throughput_ci"], tuple)  # input untouched


def test_stale_plots_are_removed_when_rerendering(tmp_path: Path, document: dict[str, Any]) -> None:
    first = write_reports(document, tmp_path)
    assert (tmp_path / "plots" / "trace.png") in first["plots"]
    second = write_reports(degenerate_document(), tmp_path)
    assert not (tmp_path / "plots" / "trace.png").exists()
    assert all(p.exists() for p in second["plots"])


def test_reports_without_matplotlib(
    tmp_path: Path, document: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    paths = write_reports(document, tmp_path)
    assert paths["plots"] == []
    assert "data:image/png" not in paths["html"].read_text(encoding="utf-8")
    assert "## Plots" not in paths["md"].read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------ validation


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", path)]
    target: Any = doc
    for key in keys[:-1]:
        target = target[key]
    if value is KeyError:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("candidates", KeyError, "report.candidates: required field missing"),
        ("recommendation", KeyError, "report.recommendation: required field missing"),
        ("candidates[2].status", "weird", "report.candidates[2].status: expected one of ok|oom|rejected"),
        ("candidates[0].throughput", "fast", "report.candidates[0].throughput"),
        ("candidates[1].throughput", None, "report.candidates[1].throughput: a candidate with status ok"),
        (
            "candidates[0].throughput_ci",
            [1.0, 2.0, 3.0],
            "report.candidates[0].throughput_ci: expected a list of 2",
        ),
        ("candidates[3].batch_size", 0, "report.candidates[3].batch_size: expected a positive integer"),
        ("candidates[3].batch_size", True, "report.candidates[3].batch_size"),
        ("candidates[0].latency_ms.p99", "slow", "report.candidates[0].latency_ms.p99: expected a number"),
        ("candidates[0].variant", KeyError, "report.candidates[0].variant: required field missing"),
        ("batch_boundary.eager.probes[2].fits", "yes", "report.batch_boundary.eager.probes[2].fits"),
        (
            "batch_boundary.eager.model.bytes_per_sample",
            KeyError,
            "batch_boundary.eager.model.bytes_per_sample",
        ),
        ("recipe.inputs[0].shape", [3, "64"], "report.recipe.inputs[0].shape[1]"),
        ("recipe.constraints.latency_percentile", "p95", "report.recipe.constraints.latency_percentile"),
        ("search.objective", "speed", "report.search.objective"),
        ("pareto", ["a"], "report.pareto[0]: expected an integer"),
        ("notes", "one note", "report.notes: expected a list"),
        ("environment", [], "report.environment: expected an object"),
    ],
)
def test_validate_report_names_the_field(
    document: dict[str, Any], path: str, value: Any, expected: str
) -> None:
    doc = copy.deepcopy(document)
    _set(doc, path, value)
    with pytest.raises(InputError) as info:
        validate_report(doc)
    assert expected in str(info.value)


def test_validate_report_accepts_the_document_and_rejects_other_schemas(document: dict[str, Any]) -> None:
    validate_report(document)
    for bad in (SCHEMA_VERSION + 1, "1", None):
        with pytest.raises(InputError, match="schema"):
            validate_report({**document, "schema": bad})
    with pytest.raises(InputError, match="expected a JSON object"):
        validate_report([])  # type: ignore[arg-type]


def test_load_report_errors_name_the_file(tmp_path: Path, document: dict[str, Any]) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(InputError, match=re.escape(str(missing))):
        load_report(missing)
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": 1,', encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(str(broken)) + ".*not valid JSON"):
        load_report(broken)
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**normalise_report(document), "schema": SCHEMA_VERSION + 1}), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(str(future)) + ": schema"):
        load_report(future)


# ---------------------------------------------------------------------------- schema 2: raw samples

#: A real schema 2 report.json (tiny recipe, two configurations): every candidate carries its measurement.
REPORT_V2 = Path(__file__).resolve().parent / "data" / "compare-base-report-v2.json"


def test_a_schema_2_report_keeps_its_raw_samples_and_renders_from_them(tmp_path: Path) -> None:
    from autotune.core.measurement import Measurement
    from autotune.report.plots import _trace_from_measurement

    doc = load_report(REPORT_V2)
    assert doc["schema"] == SCHEMA_VERSION == 2
    for row in [*doc["candidates"], doc["recommendation"]]:
        assert row is not None and row["measurement"] is not None
        m = Measurement.from_dict(row["measurement"])
        # the row's statistics are the measurement's, copied once (autotune.candidate), not a second computation
        assert (row["throughput"], row["throughput_ci"], row["latency_ms"]) == (
            m.throughput, list(m.throughput_ci), m.latency_ms)
        assert row["samples"] == len(m.samples) and row["classification"] == m.classification
    rec = doc["recommendation"]
    assert rec is not None
    trace = _trace_from_measurement(rec)
    m = Measurement.from_dict(rec["measurement"])
    assert trace is not None and len(trace[0]) == len(m.samples) and trace[3] == m.mean_seconds * 1e3
    paths = write_reports(doc, tmp_path)
    assert (tmp_path / "plots" / "trace.png") in paths["plots"]
    text = paths["json"].read_text(encoding="utf-8")
    assert load_report(tmp_path) == doc
    assert write_reports(load_report(tmp_path), tmp_path / "again")["json"].read_bytes() == text.encode()
    assert list(json.loads(text)["candidates"][0])[-1] == "measurement"  # the long field last in each row


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("measurement.samples.count", 7, "measurement.samples: data: holds"),
        ("measurement.samples.format", "f64", "measurement.samples: format"),
        ("measurement.latency_samples", [1.0], "measurement.latency_samples: expected an object"),
        ("measurement.analysis.classification", "odd", "measurement.analysis.classification: expected one of"),
        ("measurement.stopped_by", "boredom", "measurement.stopped_by"),
        ("measurement.iterations_per_sample", 0, "measurement.iterations_per_sample"),
    ],
)
def test_validate_report_names_a_bad_measurement_field(path: str, value: Any, expected: str) -> None:
    doc = json.loads(REPORT_V2.read_text(encoding="utf-8"))
    _set(doc, "candidates[1]." + path, value)
    with pytest.raises(InputError, match=re.escape("report.candidates[1]." + expected)):
        validate_report(doc)


def test_a_schema_1_report_is_still_read_and_the_api_gives_the_measurement_where_there_is_one() -> None:
    """A schema 1 report is a schema 2 report without the measurement records (and says 1)."""
    from autotune.api import CandidateResult

    new = load_report(REPORT_V2)
    old = json.loads(REPORT_V2.read_text(encoding="utf-8"))
    old["schema"] = 1
    for row in [*old["candidates"], old["recommendation"]]:
        del row["measurement"]
    old = normalise_report(old)
    assert old["schema"] == 1
    for then, now in zip(old["candidates"], new["candidates"], strict=True):
        assert CandidateResult.from_row(then).measurement is None
        result = CandidateResult.from_row(now)
        assert result.measurement is not None and result.measurement.throughput == result.throughput


# ---------------------------------------------------------------------------- degenerate documents


def test_no_feasible_configuration_lists_the_reasons(tmp_path: Path) -> None:
    doc = degenerate_document()
    paths = write_reports(doc, tmp_path)
    md = paths["md"].read_text(encoding="utf-8")
    page = paths["html"].read_text(encoding="utf-8")
    table = console_table(doc)
    assert "No feasible configuration" in md and "No feasible configuration" in page
    assert "No feasible configuration" in table
    for c in doc["candidates"]:
        assert c["reason"] in md
        assert c["status"] in table
    assert "## Recommendation" not in md and "## Reproduce" not in md and "## Batch boundary" not in md
    assert "trace" not in {p.stem for p in paths["plots"]}
    with pytest.raises(InputError, match="recommendation"):
        reproduce_code(doc)
    assert measure_command(doc) is None


def test_empty_document_renders(tmp_path: Path) -> None:
    doc = {
        "schema": 1,
        "recipe": {},
        "environment": {},
        "search": {},
        "candidates": [],
        "recommendation": None,
    }
    paths = write_reports(doc, tmp_path)
    assert paths["plots"] == []
    assert "No candidates were evaluated" in paths["md"].read_text(encoding="utf-8")
    assert "No candidates were evaluated" in console_table(doc)
    assert "no candidate was measured" in console_table(doc)


def test_violating_recommendation_and_missing_trace_render(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    doc["recommendation"]["trace_ms"] = None
    doc["recommendation"]["classification"] = "no_steady_state"
    assert "No steady state was reached" in render_markdown(doc)
    assert "data:image/png" in render_html(doc)


def test_the_steady_state_sentence_gives_the_screens_precision_not_the_replaced_figures(
        document: dict[str, Any]) -> None:
    """After the artifact check (or the showdown) replaced the recommendation's throughput and CI, the sentence about
    its steady state still speaks of the measurement that found it: the screen's CI from the screen's samples (it
    read "95% CI half-width 18.0% from 395 samples (stopped by precision)": the plain processes' width beside the
    screen's sample count)."""
    doc = copy.deepcopy(document)
    rec = doc["recommendation"]
    screen_half = relative_half_width(rec)
    rate = rec["throughput"]
    rec.update(throughput=0.8 * rate, throughput_ci=[0.6 * rate, rate], throughput_source="artifact",
               measured_throughput=rate, measured_throughput_ci=[rate * 0.99, rate * 1.01],
               relative_ci_half_width=0.25)
    text = render_markdown(doc)
    assert f"95% CI half-width {fmt_percent(screen_half)} from {rec['samples']} samples" in text
    assert "95% CI half-width 25.0%" not in text
    doc["candidates"] = [c for c in doc["candidates"] if c.get("trial") != rec.get("trial")]
    text = render_markdown(doc)
    assert f"(classification warmup); {rec['samples']} samples (stopped by precision)." in text


def test_trace_plot_without_iterations_per_sample(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    doc["recommendation"].pop("iterations_per_sample")
    doc["recommendation"]["warmup_iterations"] = 10 * doc["recommendation"]["samples"]
    assert "trace" in render_plots(doc)


def test_report_module_imports_neither_torch_nor_optuna(tmp_path: Path) -> None:
    # The document travels as JSON: the child imports only autotune.report (never this test module).
    doc_path = tmp_path / "document.json"
    doc_path.write_text(json.dumps(degenerate_document()), encoding="utf-8")
    script = (
        "import json, sys\n"
        "from autotune.report import write_reports\n"
        f"doc = json.loads(open({str(doc_path)!r}, encoding='utf-8').read())\n"
        f"write_reports(doc, {str(tmp_path / 'out')!r})\n"
        "print(sorted(m for m in ('torch', 'optuna') if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------- console table


def _table_rows(table: str) -> list[tuple[str, int, str]]:
    """(variant, batch, status) of each candidate row of console_table's output, in order:
    measured rows (no status column: ok), then the "Not measured:" rows."""
    rows = []
    measured = True
    for line in table.splitlines():
        if line.startswith("Not measured:"):
            measured = False
        match = re.match(r"\s*(\d+)\*?\s+(\S+)\s+(\d+)\s+(\S+)", line)
        if match:
            status = "ok" if measured else match.group(4)
            rows.append((match.group(2), int(match.group(3)), status))
    return rows


def test_console_table_sorts_by_throughput_and_fits_100_columns(document: dict[str, Any]) -> None:
    table = console_table(document, top=None)
    cands = document["candidates"]

    def best_first(c: dict[str, Any]) -> tuple[float, int]:  # lower CI bound of throughput, then trial
        return (-(c["throughput_ci"][0] if c.get("throughput_ci") else c["throughput"]), c["trial"])

    feasible = sorted((c for c in cands if c["status"] == "ok" and c["feasible"]), key=best_first)
    violating = sorted((c for c in cands if c["status"] == "ok" and not c["feasible"]), key=best_first)
    others = [c for c in cands if c["status"] != "ok"]
    expected = [(c["variant"], c["batch_size"], c["status"]) for c in feasible + violating]
    rows = _table_rows(table)
    assert rows[: len(expected)] == expected
    assert sorted(rows[len(expected) :]) == sorted(
        (c["variant"], c["batch_size"], c["status"]) for c in others
    )
    assert all(len(line) <= 100 for line in table.splitlines()), max(table.splitlines(), key=len)
    assert table.isascii()
    rec = document["recommendation"]
    assert f"Recommended: {rec['variant']} at batch {rec['batch_size']}" in table
    assert "Pareto front" in table and f"Constraints: p99 latency <= {LATENCY_LIMIT_MS:g} ms" in table
    assert re.search(r"^\s*1\*\s", table, re.MULTILINE)  # the best row carries the recommendation mark


def test_console_table_top_limits_rows(document: dict[str, Any]) -> None:
    table = console_table(document, top=3)
    assert len(_table_rows(table)) == 3
    assert f"... {len(document['candidates']) - 3} more candidate(s)" in table


@pytest.mark.parametrize("objective", ["latency", "pareto"])
def test_rank_candidates_follows_the_objective(document: dict[str, Any], objective: str) -> None:
    doc = copy.deepcopy(document)
    doc["search"]["objective"] = objective
    ranked = rank_candidates(doc)
    feasible = [c for c in ranked if c["status"] == "ok" and c["feasible"]]
    assert ranked[: len(feasible)] == feasible
    if objective == "latency":
        p99 = [c["latency_ms"]["p99"] for c in feasible]
        assert p99 == sorted(p99)
    else:
        front = set(doc["pareto"])
        members = [c["trial"] in front for c in feasible]
        assert members == sorted(members, reverse=True) and any(members)
        rates = [c["throughput"] for c in feasible if c["trial"] in front]
        assert rates == sorted(rates, reverse=True)


# -------------------------------------------------------------------------------- reproduce code


@pytest.mark.parametrize(
    "rec",
    [
        {"variant": "eager", "compiler": "eager", "precision": "fp32"},
        {"variant": "script+threads=2", "compiler": "script", "threads": 2},
        {"variant": "trace+autocast-bf16", "compiler": "trace", "precision": "autocast-bf16"},
        {
            "variant": "frozen+bf16+channels_last",
            "compiler": "frozen",
            "precision": "bf16",
            "memory_format": "channels_last",
        },
        {
            "variant": "compile:max-autotune+fp16",
            "compiler": "compile",
            "compile_mode": "max-autotune",
            "precision": "fp16",
        },
        {"variant": "export", "compiler": "export"},
        {"variant": "eager+autocast-fp16+cudagraphs", "compiler": "eager", "precision": "autocast-fp16"},
        {"variant": "mystery", "compiler": "tensorrt", "precision": "int4"},
    ],
)
@pytest.mark.parametrize("factory", ["torchvision.models:resnet18", "models/net.py:make", "pkg:model"])
def test_reproduce_code_compiles(document: dict[str, Any], rec: dict[str, Any], factory: str) -> None:
    doc = copy.deepcopy(document)
    doc["recommendation"].update(
        {"compile_mode": None, "threads": None, "precision": "fp32", "memory_format": "contiguous", **rec}
    )
    doc["recipe"]["model"]["factory"] = factory
    doc["recipe"]["inputs"].append({"name": "tokens", "shape": [16], "dtype": "int64", "vocab_size": 1000})
    code = reproduce_code(doc)
    compile(code, "<reproduce>", "exec")
    assert f"BATCH_SIZE = {doc['recommendation']['batch_size']}" in code
    assert "autotune measure 'recipes/quick start.toml' --variant" in code
    if rec.get("threads"):
        assert f"torch.set_num_threads({rec['threads']})" in code
    if "cudagraphs" in rec["variant"]:
        assert "torch.cuda.CUDAGraph()" in code


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit deprecation, expected
@pytest.mark.parametrize(
    ("variant", "compiler", "precision", "memory_format", "factory", "kwargs", "shape", "out_dtype"),
    [
        (
            "eager",
            "eager",
            "fp32",
            "contiguous",
            "torch.nn:Linear",
            {"in_features": 8, "out_features": 4},
            [8],
            "float32",
        ),
        (
            "frozen+bf16",
            "frozen",
            "bf16",
            "contiguous",
            "torch.nn:Linear",
            {"in_features": 8, "out_features": 4},
            [8],
            "bfloat16",
        ),
        (
            "trace+autocast-bf16",
            "trace",
            "autocast-bf16",
            "contiguous",
            "torch.nn:Linear",
            {"in_features": 8, "out_features": 4},
            [8],
            "bfloat16",
        ),
        (
            "script+channels_last",
            "script",
            "fp32",
            "channels_last",
            "torch.nn:Conv2d",
            {"in_channels": 3, "out_channels": 4, "kernel_size": 3},
            [3, 8, 8],
            "float32",
        ),
    ],
)
def test_reproduce_code_runs(
    document: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    variant: str,
    compiler: str,
    precision: str,
    memory_format: str,
    factory: str,
    kwargs: dict[str, Any],
    shape: list[int],
    out_dtype: str,
) -> None:
    torch = pytest.importorskip("torch")
    doc = copy.deepcopy(document)
    doc["recipe"].update(
        model={"factory": factory, "kwargs": kwargs},
        device="cpu",
        inputs=[{"name": "x", "shape": shape, "dtype": "float32", "vocab_size": None}],
    )
    doc["recipe"].pop("device_resolved")
    doc["recommendation"].update(
        variant=variant,
        compiler=compiler,
        compile_mode=None,
        precision=precision,
        memory_format=memory_format,
        threads=None,
        batch_size=4,
    )
    namespace: dict[str, Any] = {"__name__": "reproduce"}
    exec(compile(reproduce_code(doc), "<reproduce>", "exec"), namespace)
    outputs = namespace["outputs"]
    assert outputs.shape[0] == 4 and outputs.dtype == getattr(torch, out_dtype)
    if memory_format == "channels_last":
        assert namespace["inputs"][0].is_contiguous(memory_format=torch.channels_last)
    printed = capsys.readouterr().out
    assert re.search(r"[\d,.]+ samples/s", printed)


# ----------------------------------------------------------------------------------- benchmark


def benchmark() -> None:
    """Time each output for a typical and a large study (for BENCHMARKS.md)."""
    import tempfile

    cases = {
        "typical (24 candidates, 400-point traces)": make_document(),
        "large (104 candidates, 400-point traces)": make_document(extra_batches=tuple(range(80, 400, 16))),
    }
    print(
        f"{'document':44} {'validate':>9} {'console':>8} {'markdown':>9} {'html+plots':>11} "
        f"{'write_reports':>14} {'json KiB':>9} {'html KiB':>9}"
    )
    for label, doc in cases.items():
        timings = {}
        for name, fn in (
            ("validate", lambda d=doc: normalise_report(d)),
            ("console", lambda d=doc: console_table(d)),
            ("markdown", lambda d=doc: render_markdown(d)),
            ("html", lambda d=doc: render_html(d)),
        ):
            start = time.perf_counter()
            fn()
            timings[name] = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            paths = write_reports(doc, out)
            timings["write"] = time.perf_counter() - start
            sizes = (paths["json"].stat().st_size / 1024, paths["html"].stat().st_size / 1024)
        print(
            f"{label:44} {timings['validate']:8.3f}s {timings['console']:7.3f}s {timings['markdown']:8.3f}s "
            f"{timings['html']:10.3f}s {timings['write']:13.3f}s {sizes[0]:9.0f} {sizes[1]:9.0f}"
        )
    assert math.isfinite(sum(timings.values()))
    from autotune.environment import machine_facts
    from autotune.worker.torch_facts import torch_facts

    for label in ("first, importing torch", "again"):
        start = time.perf_counter()
        machine_facts(torch_facts())
        print(f"environment.machine_facts(torch_facts()) ({label}): {time.perf_counter() - start:.3f}s")


if __name__ == "__main__":
    benchmark()


def test_compile_payback_is_the_samples_that_repay_the_extra_build() -> None:
    from autotune.report.analysis import compile_payback

    eager = {"variant": "eager", "compiler": "eager", "batch_size": 16, "status": "ok", "feasible": True,
             "throughput": 100.0, "compile_seconds": 0.1}
    frozen = {**eager, "variant": "frozen", "compiler": "frozen", "throughput": 200.0, "compile_seconds": 10.1}
    doc = {"candidates": [eager, frozen]}
    # 10 s more; 1/100 - 1/200 = 5 ms saved a sample: 2,000 samples, 10 s at 200/s
    text = compile_payback(doc, frozen)
    assert text is not None and "10.0 s more" in text and "2,000 samples" in text and "(10.0 s of serving)" in text
    slower = {**frozen, "throughput": 90.0}
    assert "never" in (compile_payback({"candidates": [eager, slower]}, slower) or "")
    assert compile_payback(doc, eager) is None
    assert compile_payback({"candidates": [frozen]}, frozen) is None  # no eager at that batch


# ------------------------------------------------------------------------- traffic and the data section

DATA_SHAPES = {"input_ids 8x32, attention_mask 8x32": 5, "input_ids 8x64, attention_mask 8x64": 7,
               "input_ids 8x128, attention_mask 8x128": 4}


def traffic_document() -> dict[str, Any]:
    """The synthetic run measured on [data] traffic: a data section, and traffic on the eager and compile rows
    (dynamic shapes: a bucket per shape the data had; compile recompiled) and the frozen rows (padded to buckets)."""
    doc = make_document()
    doc["data"] = {
        "source": "factory",
        "factory": "data.py:bert_batches",
        "kwargs": {"seq_min": 20, "seq_max": 128},
        "batches": 16,
        "keyword_inputs": ["input_ids", "attention_mask"],
        "dynamic_dims": ["input_ids[1]", "attention_mask[1]"],
        "shapes": [{"shape": shape, "batches": n} for shape, n in DATA_SHAPES.items()],
        "buckets": [32, 64, 128],
    }
    for c in doc["candidates"]:
        if c["status"] != "ok" or c["variant"] not in ("eager", "compile", "frozen"):
            continue
        shapes = list(DATA_SHAPES) if c["variant"] != "frozen" else list(DATA_SHAPES)[1:]
        buckets = []
        for i, shape in enumerate(shapes):
            rate = c["throughput"] * (1.4 - 0.3 * i)
            p50 = 1000.0 * c["batch_size"] / rate
            buckets.append({"shape": shape.replace("8x", f"{c['batch_size']}x"), "calls": 40 + i,
                            "samples": (40 + i) * c["batch_size"], "throughput": rate, "p50_ms": p50,
                            "p99_ms": p50 * 1.3})
        c["traffic"] = {"batches": 16, "samples_per_call": c["batch_size"] - 0.5,
                        "shape_policy": "buckets" if c["variant"] == "frozen" else "dynamic",
                        "recompiles": 2 if c["variant"] == "compile" else 0, "buckets": buckets}
    rec = doc["recommendation"]
    doc["recommendation"] = copy.deepcopy(next(c for c in doc["candidates"] if c["trial"] == rec["trial"]))
    assert "traffic" in doc["recommendation"], "the synthetic recommendation is a frozen row"
    return doc


def _traffic_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc["candidates"] if "traffic" in c]


def test_traffic_and_data_validate_and_keep_their_key_order(tmp_path: Path) -> None:
    doc = traffic_document()
    written = write_reports(doc, tmp_path)
    stored = json.loads(written["json"].read_text(encoding="utf-8"))
    assert list(stored)[:5] == ["schema", "tool", "created", "recipe", "data"]
    assert list(stored["data"]) == list(doc["data"])
    row = next(c for c in stored["candidates"] if "traffic" in c)
    assert list(row)[-1] == "traffic" and list(row["traffic"]) == list(doc["candidates"][0]["traffic"])
    assert list(row["traffic"]["buckets"][0]) == ["shape", "calls", "samples", "throughput", "p50_ms", "p99_ms"]
    assert load_report(written["json"]) == normalise_report(doc)


@pytest.mark.parametrize(
    ("where", "value", "path"),
    [
        (("candidates", 0, "traffic", "shape_policy"), "padded", r"report\.candidates\[0\]\.traffic\.shape_policy"),
        (("candidates", 0, "traffic", "buckets", 1, "shape"), None, r"candidates\[0\]\.traffic\.buckets\[1\]\.shape"),
        (("candidates", 0, "traffic", "recompiles"), 1.5, r"candidates\[0\]\.traffic\.recompiles"),
        (("data", "source"), "file", r"report\.data\.source: expected one of factory\|inputs"),
        (("data", "buckets"), [32, 0], r"report\.data\.buckets\[1\]: expected a positive integer"),
        (("data", "shapes", 0, "batches"), "5", r"report\.data\.shapes\[0\]\.batches"),
    ],
)
def test_validate_report_names_the_bad_traffic_field(where: tuple[Any, ...], value: Any, path: str) -> None:
    doc = traffic_document()
    target: Any = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(InputError, match=path):
        validate_report(doc)


def test_markdown_shows_the_data_section_and_the_traffic_by_shape() -> None:
    doc = traffic_document()
    md = render_markdown(doc)
    data = doc["data"]
    section = md.split("## Data", 1)[1].split("## Candidates", 1)[0]
    assert "data.py:bert_batches(seq_min=20, seq_max=128)" in section
    assert ", ".join(data["keyword_inputs"]) in section and ", ".join(data["dynamic_dims"]) in section
    assert f"{len(DATA_SHAPES)} shapes in {sum(DATA_SHAPES.values())} batches" in section
    assert "32, 64, 128" in section
    for shape, n in DATA_SHAPES.items():
        assert f"| {shape} | {n} |" in section
    rec = doc["recommendation"]
    recommendation = md.split("## Recommendation", 1)[1].split("### Why", 1)[0]
    traffic = rec["traffic"]
    assert (f"{traffic['batches']} batches per measurement, {traffic['samples_per_call']:.3g} samples per call; "
            f"shape policy buckets, {len(traffic['buckets'])} shapes, 0 recompiles") in recommendation
    for bucket in traffic["buckets"]:
        assert (f"| {bucket['shape']} | {bucket['calls']} | {bucket['samples']} | {fmt_rate(bucket['throughput'])} "
                f"| {fmt_ms(bucket['p50_ms'])} | {fmt_ms(bucket['p99_ms'])} |") in recommendation
    candidates = md.split("## Candidates", 1)[1].split("## Batch boundary", 1)[0]
    header = next(line for line in candidates.splitlines() if line.startswith("| # |"))
    assert "| batch | shapes | status |" in header
    compile_row = next(line for line in candidates.splitlines() if "| compile | 8 |" in line)
    assert f"| dynamic, {len(DATA_SHAPES)} shapes, 2 recompiles |" in compile_row
    by_shape = candidates.split("### Candidates by input shape", 1)[1]
    shape_lines = [line for line in by_shape.splitlines() if line.startswith("| ") and "shape policy" not in line]
    assert len(shape_lines) == sum(len(c["traffic"]["buckets"]) for c in _traffic_rows(doc))
    assert sum("★" in line for line in shape_lines) == len(traffic["buckets"])


def test_html_shows_the_data_section_and_the_traffic_by_shape() -> None:
    doc = traffic_document()
    page = html.unescape(render_html(doc, plots={}))
    assert "<h2>Data</h2>" in page and "data.py:bert_batches(seq_min=20, seq_max=128)" in page
    assert f"<summary>{len(DATA_SHAPES)} shapes</summary>" in page
    assert "<h3>By input shape</h3>" in page and "<summary>Candidates by input shape</summary>" in page
    assert "<th>shapes</th>" in page
    for c in _traffic_rows(doc):
        for bucket in c["traffic"]["buckets"]:
            assert f'<td>{bucket["shape"]}</td><td class="num">{bucket["calls"]}</td>' in page


def test_console_shows_the_traffic_and_the_data_in_100_ascii_columns() -> None:
    doc = traffic_document()
    table = console_table(doc, top=None)
    assert table.isascii() and all(len(line) <= 100 for line in table.splitlines())
    flat = " ".join(table.split())
    rec = doc["recommendation"]
    first = rec["traffic"]["buckets"][0]
    assert (f"Traffic: {rec['traffic']['batches']} batches per measurement" in flat
            and f"{first['shape']}: {fmt_rate(first['throughput'])}/s, p50 {fmt_ms(first['p50_ms'])} ms" in flat)
    assert "Data: data factory data.py:bert_batches(seq_min=20, seq_max=128), with batch_size=b;" in flat
    assert "dynamic dims input_ids[1], attention_mask[1]" in flat
    compile_line = next(line for line in table.splitlines() if re.match(r"\s*\d+\s+compile\s+8\s", line))
    assert "2 recompiles" in compile_line


def test_a_data_section_of_random_inputs_renders_what_it_has() -> None:
    doc = make_document()
    doc["data"] = {"source": "inputs", "keyword_inputs": [], "dynamic_dims": []}
    md = render_markdown(doc)
    section = md.split("## Data", 1)[1].split("## Candidates", 1)[0]
    assert "random inputs (the recipe's [[inputs]])" in section
    assert "none: positional" in section and "none: every batch has the same shape" in section
    assert "shapes seen" not in section and "buckets" not in section
    assert "| shapes |" not in md and "Candidates by input shape" not in md


def test_reports_without_traffic_render_as_before() -> None:
    """An older report (no data section, no traffic on any row) shows none of the traffic's sections, and a
    null data section renders like an absent one."""
    doc = make_document()
    md, page, table = render_markdown(doc), render_html(doc, plots={}), console_table(doc, top=None)
    assert "## Data" not in md and "By input shape" not in md and "| shapes |" not in md
    assert "<h2>Data</h2>" not in page and "<th>shapes</th>" not in page
    assert "Traffic:" not in table and "Data:" not in table
    nulled = {**doc, "data": None}
    assert render_markdown(nulled) == md and render_html(nulled, plots={}) == page
    assert console_table(nulled, top=None) == table


# ------------------------------------------------------------------------------------ precision and accuracy


def _with_precisions(document: dict[str, Any]) -> dict[str, Any]:
    """The document plus two bf16 candidates (one within the budget and the recommendation, one rejected) and an
    int8 one, as the accuracy budget writes them (autotune.worker.accuracy), with model sizes."""
    doc = copy.deepcopy(document)
    base = len(doc["candidates"])
    budget = {"kind": "metric", "metric": "data.py:metric", "reference": 0.9258, "max_drop": 0.01, "relative": True,
              "budget": "data.py:metric drop <= 1% of eager fp32's 0.9258", "batches": 16, "samples": 512,
              "data": "factory", "gating": True}
    fast = _row(base, "frozen+bf16", 32, precision="bf16", throughput=5000.0, throughput_ci=[4950.0, 5050.0],
                latency_ms={"mean": 6.4, "p50": 6.4, "p90": 6.6, "p99": 7.0}, model_bytes=23_000_000,
                trace_ms=[12.0] * 30 + [6.4] * 370, warmup_iterations=30, classification="warmup",
                accuracy=dict(budget, passed=True, value=0.9219, drop=0.0042),
                correctness={"passed": True, "max_abs_error": 0.02, "max_rel_error": 0.006, "min_cosine": 0.9999,
                             "batches": 16, "reason": None, "by": "accuracy budget"})
    broken = _row(base + 1, "eager+bf16", 32, precision="bf16", status="rejected", feasible=False,
                  model_bytes=23_000_000,
                  reason="accuracy budget: data.py:metric 0.5 against eager fp32's 0.9258 on 16 batches of the data: "
                         "drop 46% > max_drop 1%",
                  accuracy=dict(budget, passed=False, value=0.5, drop=0.46))
    int8 = _row(base + 2, "onnx+int8", 32, precision="int8", throughput=4000.0, throughput_ci=[3900.0, 4100.0],
                latency_ms={"mean": 8.0, "p50": 8.0, "p90": 8.2, "p99": 8.8}, model_bytes=12_000_000,
                accuracy=dict(budget, passed=True, value=0.9200, drop=0.0063))
    for row in doc["candidates"]:
        if row["precision"] == "fp32":
            row["model_bytes"] = 46_000_000
    doc["candidates"] += [fast, broken, int8]
    doc["recommendation"] = dict(fast, decided_by="search")
    return doc


def test_precision_and_accuracy_in_every_rendering(tmp_path: Path, document: dict[str, Any]) -> None:
    doc = _with_precisions(document)
    validate_report(normalise_report(doc))
    written = write_reports(doc, tmp_path)
    assert [p.stem for p in written["plots"]] == list(PLOT_NAMES)  # the accuracy plot is drawn now
    md = written["md"].read_text(encoding="utf-8")
    assert "## Precision and accuracy" in md
    assert "| bf16 | 5,000 (frozen+bf16 @ 32) |" in md and "1 measured, 1 rejected" in md
    assert "| data.py:metric 0.9219, drop 0.42% |" in md  # the recommendation's row
    assert "| int8 |" in md and "11.4 MiB" in md  # int8's model size, beside fp32's 43.9 MiB
    cost = ("Accuracy cost: data.py:metric 0.9219 against eager fp32's 0.9258 on 16 batches of the data "
            "(512 samples), a drop of 0.42% (budget: data.py:metric drop <= 1% of eager fp32's 0.9258).")
    assert cost.replace("<", "&lt;") in md  # in the headline and the why list (report.md escapes '<')
    assert "Outputs match the eager fp32 reference" not in md.split("## Showdown")[0].split("### Why")[1]
    assert "model size" in md and "accuracy" in md.split("## Candidates")[1].splitlines()[4]
    page = written["html"].read_text(encoding="utf-8")
    assert "<h2>Precision and accuracy</h2>" in page and 'alt="accuracy plot"' in page
    assert html.escape(cost, quote=True) in page or cost in page
    assert "Accuracy cost" in console_table(doc)
    again = load_report(written["json"])
    assert again["recommendation"]["accuracy"]["drop"] == 0.0042 and again["candidates"][-1]["model_bytes"] == 12e6


def test_accuracy_measured_on_random_inputs_is_flagged(document: dict[str, Any]) -> None:
    doc = _with_precisions(document)
    for row in doc["candidates"]:
        if row.get("accuracy"):
            row["accuracy"]["data"] = "random"
    doc["recommendation"]["accuracy"]["data"] = "random"
    md = render_markdown(doc)
    assert "Accuracy was not measured on real data" in md
    assert "Not measured on real data: the recipe has no [data] factory." in md


def test_reports_without_precision_facts_are_unchanged(document: dict[str, Any]) -> None:
    md = render_markdown(document)
    assert "Precision and accuracy" not in md and "model size" not in md and "Accuracy cost" not in md


def test_the_eager_comparison_says_screen_against_screen_when_the_headline_is_the_artifacts() -> None:
    """The headline above the sentence is the artifact's (plain processes); eager has only its screen, so the
    sentence compares screens, says so, and puts the run's own p50 (not the artifact's) beside eager's."""
    from autotune.artifact_check import as_shipped
    from autotune.report.analysis import eager_comparison

    doc = make_document()
    rec = dict(doc["recommendation"])
    eager = next(c for c in doc["candidates"] if c["variant"] == "eager" and c["status"] == "ok"
                 and c["batch_size"] == rec["batch_size"])
    own_p50 = rec["latency_ms"]["p50"]
    as_shipped(rec, {"status": "ok", "throughput": rec["throughput"] * 0.8, "ci": None, "p50_ms": 99.0,
                     "p90_ms": 99.0, "p99_ms": 99.0, "mean_ms": 99.0})
    text = eager_comparison(doc, rec)
    assert text is not None and "screen against screen" in text
    assert f"{rec['measured_throughput'] / eager['throughput']:.2f}× the throughput of eager" in text
    assert f"p50 latency {own_p50:.1f} ms" in text or f"p50 latency {own_p50:.2f} ms" in text
    assert "99.0 ms vs" not in text  # the artifact's p50 is the headline's, not this comparison's


def test_a_row_too_short_to_tell_a_steady_state_says_so_not_that_it_drifted() -> None:
    """A row whose budget held fewer samples than a steady-state verdict needs was "no steady state ... the timings
    kept drifting"; it did not drift, it was too short to tell. Its note, the recommendation's warning and the Why
    section say so; a row that did drift keeps its words."""
    import copy

    from autotune.core.warmup.offline import SHORT_MIN
    from autotune.report.analysis import _steadiness

    doc = copy.deepcopy(make_document())
    rec = doc["recommendation"]
    row = next(c for c in doc["candidates"] if c["trial"] == rec["trial"])
    for c in (rec, row):
        c["classification"], c["samples"] = "no_steady_state", SHORT_MIN - 3
    table = " ".join(console_table(doc, top=None).split())  # (the recommendation's sentence is wrapped)
    assert f"too few samples ({SHORT_MIN - 3})" in table and "kept drifting" not in _steadiness(rec)
    assert f"held {SHORT_MIN - 3} samples, too few to tell a steady state" in table
    assert f"fewer than the {SHORT_MIN} a verdict needs" in _steadiness(rec)
    for c in (rec, row):
        c["samples"] = 40
    assert "kept drifting" in _steadiness(rec)
    assert "Warning: no steady state was reached." in " ".join(console_table(doc).split())


def test_an_undecided_pick_is_undecided_against_the_leader_not_itself() -> None:
    """The rounds could not separate eager+bf16@8 from the leader eager+bf16+jemalloc@8, and the simpler one was
    picked: the recommendation read "Undecided against eager+bf16@8", the pick itself (a timm ViT, session 37)."""
    import copy

    from autotune.report.console import _recommendation_sentence

    doc = copy.deepcopy(make_document())
    rec = doc["recommendation"]
    rec["decided_by"] = "showdown"
    doc["showdown"] = {"verdict": {"leader": "eager+bf16+jemalloc@8", "pick": "eager+bf16@8", "margin": 0.02,
                                   "undecided": ["eager+bf16@8"], "standings": []}}
    text = " ".join(_recommendation_sentence(doc).split())
    assert "Undecided against eager+bf16+jemalloc@8 (CI straddles" in text and "against eager+bf16@8" not in text
    doc["showdown"]["verdict"].update(pick="eager+bf16+jemalloc@8", undecided=["eager+bf16@8", "onnx@8"])
    text = " ".join(_recommendation_sentence(doc).split())
    assert "Undecided against eager+bf16@8, onnx@8 (CI" in text


def test_what_the_search_never_tried_is_said_by_runtime() -> None:
    """A ViT's run over three runtimes, three precisions and four environments measured twelve eager rows in its
    budget; the console never said that onnx and openvino had not been tried (session 37). The document keeps the
    space and the untried combinations; the console, report.md and report.html say them by runtime."""
    import copy

    from autotune.report.sections import untried_summary

    doc = copy.deepcopy(make_document())
    assert untried_summary(doc) is None  # an older document, or a search that tried everything
    tried = sorted({str(c["variant"]).split("+")[0] for c in doc["candidates"]})
    doc["search"].update(stopped_by="time_budget", space=20,
                         untried=[f"onnx+int8@{b}" for b in (1, 8)] + [f"openvino@{b}" for b in (1, 8, 32)]
                         + [f"{tried[0]}+bf16@64"])
    text = untried_summary(doc)
    assert text is not None and text.startswith("Not tried: 6 of 20 combinations (the search's budget ran out")
    assert "onnx (none of its 2)" in text and "openvino (none of its 3)" in text and f"1 more of {tried[0]}" in text
    validate_report(doc)  # raises on a field of the wrong kind
    flat = " ".join(console_table(doc).split())
    assert "Not tried: 6 of 20 combinations" in flat
    doc["search"]["stopped_by"] = "exhausted"
    assert "the search stopped: exhausted" in (untried_summary(doc) or "")
