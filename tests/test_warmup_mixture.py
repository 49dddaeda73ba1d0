"""A stationary mixture of two speeds is a steady state: its mean and CI are the mixture's (synthetic traces).

The detection's constants (:mod:`autotune.core.warmup.mixture`) were set from what a mixture and a regime
change are, not fitted; these traces use seeds of their own (none of them is in the labelled set), and the
labelled set and the held-out suite are scored by ``benchmarks/bench_warmup.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from autotune.core.warmup import WarmupAnalysis, analyze, replay
from autotune.core.warmup.mixture import find_mixture
from autotune.traces import synthetic_trace
from tests.support import is_reported_wander

SEED = 4242  # not a seed of the labelled traces or of the held-out suite


def _mixture(rng: np.random.Generator, n: int, share: float | np.ndarray, ratio: float, *, cv: float = 0.01,
             level: float = 1e-3) -> np.ndarray:
    slow = rng.random(n) < share
    return level * np.where(slow, ratio, 1.0) * (1.0 + cv * rng.standard_normal(n))


@pytest.mark.parametrize(("share", "ratio"), [(0.3, 1.5), (0.5, 1.2), (0.15, 2.0), (0.7, 1.1)])
def test_a_random_alternation_of_two_speeds_is_steady_at_the_mixtures_mean(share: float, ratio: float) -> None:
    rng = np.random.default_rng(SEED)
    for _ in range(2):
        x = _mixture(rng, 1500, share, ratio)
        a = analyze(x)
        truth = 1e-3 * (1.0 + share * (ratio - 1.0))
        # steady (flat; or, when the share's chance wander between the halves reaches the 2% margin, from a
        # later start: a steady state all the same)
        assert a.steady and a.classification in ("flat", "warmup") and a.bimodal, a
        assert a.steady_start is not None
        tail = x[a.steady_start :]
        assert a.steady_mean == pytest.approx(float(tail.mean()), rel=1e-12)  # every call, fast or slow
        assert a.ci is not None
        half = (a.ci[1] - a.ci[0]) / 2
        # the CI is the mixture's: as wide as the share's sampling noise, and around the truth
        share_noise = 1e-3 * (ratio - 1.0) * np.sqrt(share * (1 - share) / tail.size)
        assert 1.5 * share_noise < half < 4.0 * share_noise
        assert abs(a.steady_mean - truth) < 1.5 * half
        assert a.levels[0] == pytest.approx(1e-3, rel=0.01) and a.levels[1] == pytest.approx(1e-3 * ratio, rel=0.01)
        assert a.share_high == pytest.approx(share, abs=0.05)


def test_a_warmup_before_the_mixture_is_found() -> None:
    rng = np.random.default_rng(SEED + 1)
    x = _mixture(rng, 2000, 0.4, 1.4)
    x[:300] *= np.linspace(3.0, 1.0, 300)  # a decaying warmup
    a = analyze(x)
    assert a.steady and a.classification == "warmup" and a.bimodal
    assert a.steady_start is not None and 250 <= a.steady_start <= 450
    assert a.steady_mean == pytest.approx(1e-3 * 1.16, rel=0.015)


def test_a_mixture_whose_share_moves_is_not_steady() -> None:
    """The slow calls go from 10% to 90% of the calls: the mixture itself trends. (A drift of the share is
    seen as a drift of the block means; a slower one in a shorter series can stay within their noise, as any
    drift within noise does.)"""
    rng = np.random.default_rng(SEED + 2)
    n = 3000
    x = _mixture(rng, n, np.linspace(0.1, 0.9, n), 1.5)
    assert find_mixture(x) is not None
    assert analyze(x).classification == "no_steady_state"


def test_regimes_and_steps_are_not_mixtures() -> None:
    """A few long runs of different levels (the suite's regime shape: no steady state) and a step stay what
    the ordinary analysis says; so does a series with a few isolated spikes."""
    for seed in range(SEED, SEED + 8):
        regime = synthetic_trace("regime", seed=seed)
        assert find_mixture(regime.values) is None
        a = analyze(regime.values)
        assert a.classification == "no_steady_state" or is_reported_wander(a, regime.values), (seed, a)
        step = synthetic_trace("step", seed=seed)
        assert find_mixture(step.values) is None
        spiky = synthetic_trace("spiky", seed=seed)
        assert find_mixture(spiky.values) is None


def test_the_online_detector_and_the_stored_analysis_keep_the_mixture() -> None:
    rng = np.random.default_rng(SEED + 3)
    x = _mixture(rng, 1500, 0.3, 1.5)
    online = replay(x).result()
    assert online.steady and online.bimodal
    a = analyze(x)
    back = WarmupAnalysis.from_dict(a.to_dict())
    assert back == a and a.to_dict()["levels"] == list(a.levels)
    plain = analyze(1e-3 * (1.0 + 0.01 * rng.standard_normal(500)))
    assert not plain.bimodal and "levels" not in plain.to_dict()


def test_the_report_notes_a_bimodal_candidate() -> None:
    from autotune.report.format import bimodal_note

    rng = np.random.default_rng(SEED + 4)
    a = analyze(_mixture(rng, 1500, 0.3, 1.5))
    note = bimodal_note({"measurement": {"analysis": a.to_dict()}})
    assert note is not None and note.startswith("bimodal: calls alternate between 1.000 and 1.50 ms, 30%")
    assert bimodal_note({"measurement": {"analysis": analyze(np.full(100, 1e-3)).to_dict()}}) is None
