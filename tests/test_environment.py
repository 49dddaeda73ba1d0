"""Tests of autotune.environment (the machine's facts, read in the parent without torch, and their one-line
summary) and of autotune.worker.torch_facts (torch's facts, read in the worker and merged into the same fields)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune import environment
from autotune.core.protocol import unknown_torch_facts
from autotune.environment import ENV_VARS, PACKAGES, machine_facts, summary_line
from autotune.worker.torch_facts import torch_facts

KEYS = (
    "hostname", "platform", "machine", "python", "python_implementation",
    "cpu_model", "cpu_logical_cores", "cpu_physical_cores", "cpu_affinity_cores", "cpu_quota_cores",
    "cpu_flags",
    "memory_total_bytes", "memory_available_bytes", "memory_limit_bytes",
    "torch_version", "torch_cuda_version", "torch_cudnn_version", "torch_threads", "torch_interop_threads",
    "torch_parallel_backend", "mkl_available", "mkl_version", "mkldnn_available", "openmp_available",
    "cuda_available", "cuda_device_count", "cuda_driver_version", "gpus", "packages", "env",
)  # fmt: skip


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    return machine_facts(json.loads(json.dumps(torch_facts())))  # the facts as the validate reply carries them


def test_machine_facts_describe_this_machine(env: dict[str, Any]) -> None:
    assert set(KEYS) <= set(env)
    json.dumps(env, allow_nan=False)  # stored as-is in report.json
    assert env["python"] == platform.python_version()
    assert env["cpu_logical_cores"] == os.cpu_count()
    assert env["cpu_affinity_cores"] == len(os.sched_getaffinity(0))
    if env["cpu_physical_cores"] is not None:
        assert 1 <= env["cpu_physical_cores"] <= env["cpu_logical_cores"]
    if Path("/proc/meminfo").exists():
        assert env["memory_total_bytes"] > env["memory_available_bytes"] > 0
    if Path("/proc/cpuinfo").exists() and platform.machine() == "x86_64":
        assert env["cpu_model"]
    assert set(env["packages"]) == set(PACKAGES) and set(env["env"]) == set(ENV_VARS)
    assert env["packages"]["numpy"] == __import__("numpy").__version__


def test_torch_facts_are_read_without_initialising_cuda(env: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    assert env["torch_version"] == torch.__version__
    assert env["torch_threads"] == torch.get_num_threads()
    assert env["cuda_device_count"] == torch.cuda.device_count()
    # Reading them creates no CUDA context (GPU memory the measurements would miss, fork safety).
    before = torch.cuda.is_initialized()
    torch_facts()
    assert torch.cuda.is_initialized() == before
    if not env["cuda_device_count"]:
        assert env["gpus"] == [] and env["cuda_available"] is False
    elif shutil.which("nvidia-smi") or before:
        assert len(env["gpus"]) >= 1 and all(gpu["name"] for gpu in env["gpus"])


@pytest.mark.cuda
def test_torch_facts_with_cuda_properties() -> None:
    torch = pytest.importorskip("torch")
    env = machine_facts(torch_facts(initialize_cuda=True))
    assert len(env["gpus"]) == torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    assert env["gpus"][0]["name"] == props.name
    assert env["gpus"][0]["capability"] == f"{props.major}.{props.minor}"
    assert env["gpus"][0]["multiprocessors"] == props.multi_processor_count
    assert "no GPU" not in summary_line(env)


def test_machine_facts_never_raise_when_sources_are_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(environment, "_CPUINFO", tmp_path / "no-cpuinfo")
    monkeypatch.setattr(environment, "_MEMINFO", tmp_path / "no-meminfo")
    monkeypatch.setattr(environment, "_CGROUP_ROOT", tmp_path / "no-cgroup")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setattr(environment.shutil, "which", lambda name: None)
    assert torch_facts() == unknown_torch_facts()
    env = machine_facts(torch_facts())
    none = machine_facts(None)  # no worker reply: every torch fact unknown, the same fields
    assert list(none) == list(env) and all(none[k] == env[k] for k in unknown_torch_facts())
    assert set(KEYS) <= set(env)
    assert env["torch_version"] is None and env["gpus"] == [] and env["cuda_available"] is None
    assert env["cpu_flags"] is None and env["cpu_quota_cores"] is None and env["memory_limit_bytes"] is None
    assert env["python"] == platform.python_version()  # the rest still answers
    assert "torch unknown" in summary_line(env)


@pytest.mark.parametrize(
    ("files", "quota", "limit"),
    [
        ({"cpu.max": "200000 100000\n", "memory.max": "1073741824\n"}, 2.0, 2**30),
        ({"cpu.max": "max 100000\n", "memory.max": "max\n"}, None, None),
        ({"cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n",
          "memory/memory.limit_in_bytes": str(2**63 - 4096)}, 1.5, None),
    ],
)  # fmt: skip
def test_cgroup_limits(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    files: dict[str, str],
    quota: float | None,
    limit: int | None,
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(environment, "_CGROUP_ROOT", tmp_path)
    env = machine_facts(None)
    assert env["cpu_quota_cores"] == quota
    assert env["memory_limit_bytes"] == limit


def test_parse_nvidia_smi() -> None:
    text = (
        "0, NVIDIA H100 80GB HBM3, 81559, 9.0, 550.54.15\n"
        "1, NVIDIA H100 80GB HBM3, [N/A], [N/A], 550.54.15\n"
        "No devices were found\n"
    )
    gpus = environment._parse_nvidia_smi(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0] == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 81559 * 2**20, "capability": "9.0",
        "multiprocessors": None, "driver_version": "550.54.15",
    }  # fmt: skip
    assert gpus[1]["memory_total_bytes"] is None and gpus[1]["capability"] is None


def test_merge_prefers_torch_and_fills_the_driver() -> None:
    from_torch = [{"index": 0, "name": "NVIDIA H200", "memory_total_bytes": 150 * 2**30, "capability": "9.0",
                   "multiprocessors": 132, "driver_version": None}]  # fmt: skip
    from_smi = environment._parse_nvidia_smi(
        "0, NVIDIA H200, 143771, 9.0, 570.86\n1, NVIDIA H200, 143771, 9.0, 570.86"
    )
    merged = environment._merge_gpus(from_torch, from_smi)
    assert (
        len(merged) == 1 and merged[0]["driver_version"] == "570.86" and merged[0]["multiprocessors"] == 132
    )
    assert environment._merge_gpus([], from_smi) == from_smi


def test_summary_line(env: dict[str, Any]) -> None:
    line = summary_line(env)
    assert line.startswith(f"cpu: {env['cpu_model'] or 'unknown CPU'} (")
    if env["torch_version"]:
        assert f"torch {env['torch_version']}" in line
    if not env["gpus"] and not env["cuda_device_count"]:
        assert line.endswith("no GPU")
    gpu = {
        "name": "NVIDIA H100",
        "memory_total_bytes": 80 * 2**30,
        "capability": "9.0",
        "driver_version": "550.54",
    }
    two = summary_line({**env, "gpus": [gpu, dict(gpu, index=1)]})
    assert two.endswith("2x NVIDIA H100 (80.0 GiB, sm_90, driver 550.54)")
    assert summary_line({}) == "cpu: unknown CPU (? cores), torch unknown, no GPU"
    restricted = summary_line(
        {"cpu_model": "X", "cpu_logical_cores": 16, "cpu_affinity_cores": 16, "cpu_quota_cores": 2.0}
    )
    assert "(2 of 16 cores)" in restricted


@pytest.mark.parametrize("gpus", [True, 3, "H100", {"name": "H100"}])
def test_summary_line_of_a_report_whose_gpus_is_not_a_list(gpus: Any) -> None:
    """A report.json is data (``environment`` is any mapping to its schema): ``autotune report DIR`` on one whose
    ``gpus`` was edited to a non-list rendered a TypeError traceback (found by the slow fuzz suite, session 42)."""
    assert summary_line({"gpus": gpus}).endswith("no GPU")
    assert summary_line({"gpus": gpus, "cuda_device_count": 2}).endswith("2 GPU(s)")


def test_machine_facts_import_no_torch_in_the_parent() -> None:
    """The parent reads the machine without torch: only the worker's reply says what torch knows."""
    code = ("import sys, autotune.environment as e; env = e.machine_facts(None); "
            "print('torch' in sys.modules, env['torch_version'], 'packages' in env)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "None", "True"]
