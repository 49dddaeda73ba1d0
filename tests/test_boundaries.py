"""The study remembers batch boundaries: when a resumed run may reuse them, and when it must probe.

The end-to-end half (a second ``autotune run`` on the same study reuses the real boundary and
probes nothing) is in tests/test_cli.py::test_run_with_auto_batch_sizes_stays_within_the_boundary.
"""

from __future__ import annotations

from typing import Any

import pytest

from autotune.variant_boundaries import (
    STATE_VERSION,
    BoundaryOutcome,
    reusable_outcome,
    same_conditions,
)

KEY: dict[str, Any] = {
    "limits": {"limited": True, "max_probe_seconds": 5.0, "saturation": True},
    "device": "cpu",
    "granularity": 1,
    "max_batch_size": 4096,
    "headroom": 0.1,
    "memory_limit_bytes": 8_000_000_000,
    "limit_source": "available",
}


def _outcome() -> BoundaryOutcome:
    return BoundaryOutcome(
        batch_sizes={"eager": (1, 2, 4, 8), "compile": (1, 2, 4)},
        documents={"eager": {"max_batch_size": 9, "probes": [{"batch_size": 9, "fits": True}]},
                   "compile": {"max_batch_size": 5, "reused_from_study": True}},
        failures={"trace": ("failed", "probing batch 1 failed: boom")},
        key=KEY,
    )


def test_state_round_trips_for_the_same_conditions() -> None:
    state = _outcome().state()
    assert state["version"] == STATE_VERSION
    assert "reused_from_study" not in state["variants"]["compile"]["document"]  # stored as measured
    back = reusable_outcome(state, dict(KEY), ("eager", "compile", "trace", "script"))
    assert back.batch_sizes == {"eager": (1, 2, 4, 8), "compile": (1, 2, 4)}
    assert back.documents["eager"]["max_batch_size"] == 9 and back.documents["eager"]["reused_from_study"]
    assert back.failures == {"trace": ("failed", "probing batch 1 failed: boom")}
    assert "script" not in back.batch_sizes and "script" not in back.failures  # never probed: probe it


@pytest.mark.parametrize(
    ("change", "reused"),
    [
        ({}, True),
        ({"memory_limit_bytes": 8_500_000_000}, True),  # available memory moved by < headroom
        ({"memory_limit_bytes": 7_300_000_000}, True),
        ({"memory_limit_bytes": 7_000_000_000}, False),  # shrank by more than the headroom
        ({"memory_limit_bytes": 9_000_000_000}, False),
        ({"headroom": 0.2}, False),
        ({"granularity": 8}, False),
        ({"max_batch_size": 512}, False),
        ({"device": "cuda:0"}, False),
        ({"limit_source": "budget"}, False),
        ({"memory_limit_bytes": None}, False),
        # an exact boundary (autotune batch) is not a limited run's, nor one under another per-probe cap
        ({"limits": {"limited": False, "max_probe_seconds": None, "saturation": False}}, False),
        ({"limits": {"limited": True, "max_probe_seconds": 2.0, "saturation": True}}, False),
    ],
)
def test_reuse_rule(change: dict[str, Any], reused: bool) -> None:
    assert same_conditions(KEY, {**KEY, **change}) is reused
    back = reusable_outcome(_outcome().state(), {**KEY, **change}, ("eager",))
    assert bool(back.batch_sizes) is reused


def test_an_explicit_budget_or_gpu_capacity_must_be_equal() -> None:
    for source in ("budget", "device"):
        key = {**KEY, "limit_source": source}
        assert same_conditions(key, dict(key))
        assert not same_conditions(key, {**key, "memory_limit_bytes": KEY["memory_limit_bytes"] + 1})


@pytest.mark.parametrize("state", [None, {}, {"version": STATE_VERSION + 1, "key": KEY, "variants": {}}, "junk"])
def test_missing_or_foreign_state_means_probe_everything(state: Any) -> None:
    back = reusable_outcome(state, KEY, ("eager",))
    assert back.batch_sizes == {} and back.documents == {} and back.failures == {}
    assert back.key == KEY
