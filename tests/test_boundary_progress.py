"""A limited ``batch_sizes = "auto"`` run on a real model in real workers (issue 22): it stops at its cap, says so,
tells each probe as it happens, stores each variant's boundary in the study as soon as it is known (an
interrupt keeps it) and a second run reuses it. The algorithms behind it are tests/test_probe_cost.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.core.events import Event
from autotune.core.recipe import load_recipe
from autotune.tuner import RunOptions, run_tuning
from autotune.variant_boundaries import STATE_ATTR
from tests.support import tiny_recipe

pytestmark = pytest.mark.worker


class Interrupt:
    """``on_event`` that records every event and presses Ctrl-C once the first boundary is found."""

    def __init__(self, *, stop: bool) -> None:
        self.events: list[Event] = []
        self.stop = stop

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        if self.stop and event.kind == "boundary_found":
            raise KeyboardInterrupt


def _stored(out: Path, name: str) -> dict[str, Any]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'study.db'}")
    return dict(study.user_attrs.get(STATE_ATTR) or {})


def test_capped_auto_run_stops_early_stores_each_boundary_at_once_and_reuses_it(write_recipe, tmp_path: Path) -> None:
    text = tiny_recipe(name="capped", variants='["eager", "frozen"]', batch_sizes='"auto"', time_budget_s=6,
                       max_seconds=0.2, rounds=0)
    # 1 s for the whole boundary search: every variant's first probe (batch 1) runs, then the time cap ends it
    recipe = load_recipe(write_recipe(text + "[batch]\nmax_seconds = 1\n"))
    out = tmp_path / "out"
    first = Interrupt(stop=True)
    stopped = run_tuning(recipe, RunOptions(out_dir=out, on_event=first, artifact=False))
    assert stopped["interrupted"] is True and stopped["complete"] is False  # the report of what was measured
    probes = [e for e in first.events if e.kind == "boundary_probe"]
    assert probes and probes[0].data["variant"] == "eager" and probes[0].data["batch_size"] == 1
    assert probes[0].data["fits"] is True and "eager: search probe b=1 fits" in probes[0].message
    found = [e for e in first.events if e.kind == "boundary_found"]
    assert [e.data["variant"] for e in found] == ["eager"]
    doc = found[0].data["document"]
    assert doc["stopped_by"] == "time_cap" and doc["max_batch_size"] == 1
    assert doc["summary"].startswith("fits up to 1 (probed); stopped by time_cap")
    assert "batch.max_seconds = 1" in doc["summary"] and doc["confirmed_by"].startswith("not confirmed")
    # interrupted during frozen's turn: eager's answer is in the study already, frozen's is not
    state = _stored(out, "capped")
    assert set(state["variants"]) == {"eager"}
    assert state["variants"]["eager"]["batch_sizes"] == [1]

    second = Interrupt(stop=False)
    report = run_tuning(recipe, RunOptions(out_dir=out, on_event=second, artifact=False))
    probed = {e.data["variant"] for e in second.events if e.kind == "boundary_probe"}
    assert probed == {"frozen"}  # eager's boundary came from the study
    boundaries = report["batch_boundary"]
    assert boundaries["eager"].get("reused_from_study") is True
    assert boundaries["frozen"]["stopped_by"] == "time_cap"
    assert set(_stored(out, "capped")["variants"]) == {"eager", "frozen"}
