"""The boundary search on a real model in real worker processes, checked in fresh processes.

The model adds a known, large amount of memory per sample (two 3 MiB tensors) and runs no
oneDNN kernels, so the worker's resident-set peak moves by well under a MiB between runs and
between a reused worker and a fresh one; the budget is set half a sample between two batch
sizes. The answer of ``boundaries.find_boundaries`` (one reused worker, as ``autotune run``) must
then be confirmed by probes at b (fits) and b + 1 (does not), each in a worker of its own.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.batch import ProbeResult
from autotune.core.recipe import Recipe, load_recipe
from autotune.errors import VariantError
from autotune.runner import Runner
from autotune.validation import validate
from autotune.variant_boundaries import find_boundaries, probe_function

pytest.importorskip("torch")
pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(
        not os.access("/proc/self/clear_refs", os.W_OK), reason="needs a resettable peak RSS (Linux VmHWM)"
    ),
]

MIB = 1024**2
PER_SAMPLE = 6 * MIB  # 3 x 512 x 512 float32, twice
TARGET = 36  # the batch the budget is set for

MODEL = '''
import torch
from torch import nn


class Blowup(nn.Module):
    """Each 3x64x64 sample becomes a 3x512x512 tensor, then another one: 6 MiB a sample."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = nn.functional.interpolate(x, scale_factor=8, mode="nearest")
        return (big * 2.0).mean(dim=(2, 3))


def net() -> nn.Module:
    return Blowup()
'''

RECIPE = """
name = "blowup"
description = "6 MiB of activations a sample, no oneDNN kernels"
device = "cpu"

[model]
factory = "blowup.py:net"

[[inputs]]
name = "images"
shape = [3, 64, 64]

[search]
variants = ["eager"]

[batch]
max_batch_size = 1024
"""


def fresh_probe(recipe: Recipe, batch_size: int, budget: int | None) -> ProbeResult:
    with Runner(reuse=False) as runner:
        return probe_function(runner, recipe, "eager", budget=budget, fresh=True)(batch_size)


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_boundary_found_in_a_reused_worker_is_confirmed_in_fresh_ones(tmp_path: Path) -> None:
    (tmp_path / "blowup.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "blowup.toml").write_text(RECIPE)
    recipe = load_recipe(tmp_path / "blowup.toml")

    # Calibrate: the budget sits half a sample above TARGET on the measured line.
    one = fresh_probe(recipe, 1, None)
    assert one.fits and one.peak_memory_bytes is not None and one.baseline_bytes is not None
    budget = int(one.peak_memory_bytes + (TARGET - 1 + 0.5) * PER_SAMPLE)
    recipe = replace(recipe, batch=replace(recipe.batch, memory_budget_bytes=budget))

    with Runner() as runner:
        workload = validate(runner, recipe)
        outcome = find_boundaries(runner, recipe, workload)
        # validation in the measure worker; every probe in the one reused probe worker
        assert runner.stats.workers_started == 2
    assert not outcome.failures, outcome.failures
    doc = outcome.documents["eager"]
    found = doc["max_batch_size"]
    sizes = [p["batch_size"] for p in doc["probes"]]
    assert abs(found - TARGET) <= 2, sizes  # the worker measures what the model allocates
    assert not doc["hit_upper_bound"]
    assert all(p["baseline_bytes"] is not None for p in doc["probes"])  # passed through by the tuner
    assert len(sizes) <= 10 and max(sizes) <= 1.2 * (found + 1), sizes

    at, above = fresh_probe(recipe, found, budget), fresh_probe(recipe, found + 1, budget)
    assert at.fits, (found, at)
    assert not above.fits, (found + 1, above)


def test_a_batch_that_crashes_the_worker_is_past_the_boundary_once_a_smaller_one_ran(write_recipe) -> None:
    """A worker that dies of a signal at batch 4 (the tiny model segfaults from 4 rows on, as cuDNN did under an
    allocator cap on an H200 for a frozen resnet18, session 47) sets the boundary at 3, confirmed in fresh
    processes, and the document says the worker crashed there; the variant is not dropped."""
    from tests.support import tiny_recipe

    path = write_recipe(tiny_recipe(kwargs='kwargs = { crash = "segfault" }', variants='["eager"]',
                                    batch_sizes='"auto"') + "[batch]\nmax_batch_size = 8\n")
    recipe = load_recipe(path)
    with Runner() as runner:
        workload = validate(runner, recipe)  # batch 2: runs
        outcome = find_boundaries(runner, recipe, workload)
    assert not outcome.failures, outcome.failures
    doc = outcome.documents["eager"]
    sizes = [(p["phase"], p["batch_size"], p["fits"]) for p in doc["probes"]]
    assert doc["max_batch_size"] == 3, sizes
    assert "fresh worker process" in doc["confirmed_by"]
    assert 4 in doc["crashed_at"] and "crashed at batch" in doc["summary"]
    crashed = [p for p in doc["probes"] if p["phase"] == "confirm" and not p["fits"]]
    assert crashed and all("SIGSEGV" in p["error"] and "does not run" in p["error"] for p in crashed)


def test_a_crash_before_any_batch_ran_is_the_variants_failure(write_recipe) -> None:
    """Nothing ran, so the crash says nothing about a boundary: the variant fails with the signal in its reason."""
    from tests.support import tiny_recipe

    path = write_recipe(tiny_recipe(kwargs='kwargs = { crash = "segfault" }', variants='["eager"]',
                                    batch_sizes='"auto"') + "[batch]\nmax_batch_size = 8\n")
    recipe = load_recipe(path)
    with Runner(reuse=False) as runner, pytest.raises(VariantError, match="SIGSEGV"):
        probe_function(runner, recipe, "eager", budget=None)(8)
