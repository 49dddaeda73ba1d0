"""`search.threads`: CPU thread counts as a search dimension, through the real worker.

The pure parts (parsing, crossing, the "auto" ladder) are pinned in test_recipe and test_variants; this runs
the worker's validate and measure ops, so the counts reach the process that times the model (where
`threads=N` sets torch.set_num_threads).
"""

from __future__ import annotations

import pytest

from autotune.client import WorkerClient
from autotune.core.measure_settings import MeasureSettings
from autotune.core.measurement import Measurement
from autotune.core.recipe import load_recipe
from autotune.runner import Runner
from autotune.worker.variants import thread_counts
from tests.support import tiny_recipe

pytestmark = pytest.mark.worker  # starts a worker process: not in `make test-fast`


def test_validate_crosses_the_variants_with_the_usable_thread_counts_and_measure_runs_them(write_recipe) -> None:
    text = tiny_recipe(name="threads", variants='["eager", "frozen+threads=1"]', batch_sizes="[2]")
    recipe = load_recipe(write_recipe(text.replace("[measure]", 'threads = "auto"\n[measure]')))
    ladder = thread_counts("auto", device="cpu")
    with Runner() as runner:
        client = WorkerClient(runner)
        validated = client.validate(recipe, timeout=120)
        assert "status" not in validated, validated
        assert validated["variants"] == [*(f"eager+threads={n}" for n in ladder), "frozen+threads=1"]
        settings = MeasureSettings(mode="throughput", ci_target=0.05, max_seconds=0.3)
        res = client.measure(recipe, f"eager+threads={ladder[-1]}", 2, settings, timeout=120)
        assert res["status"] == "ok", res
        assert Measurement.from_dict(res["measurement"]).throughput > 0
