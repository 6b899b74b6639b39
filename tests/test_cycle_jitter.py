"""The clock-cycle fit under service jitter: found at 0-20 %, confidence falling as the fit worsens,
no cycle at all when the waits sit on no multiple."""

from __future__ import annotations

import numpy as np
import pytest

from trace_doctor.derive.cycles import CANDIDATE_MIN_S, _fit, rayleigh_p, refine_cycle

CYCLE_S = 0.05
SOURCE = "trace result-wait spans"
RANK = {"low": 0, "medium": 1, "high": 2}


def waits(jitter: float, seed: int, n: int = 60) -> np.ndarray:
    """Result waits of 1-3 cycles, delivered 2 ms after the cycle ends, each off by Gaussian jitter."""
    rng = np.random.default_rng(seed)
    multiples = rng.choice([1, 2, 3], size=n, p=[0.5, 0.3, 0.2])
    return multiples * CYCLE_S + 0.002 + rng.normal(0.0, jitter * CYCLE_S, size=n)


@pytest.mark.parametrize(
    ("jitter", "n", "expected"), [(0.0, 60, "high"), (0.05, 60, "high"), (0.10, 60, "medium"), (0.20, 150, "low")]
)
def test_cycle_survives_jitter_with_falling_confidence(jitter, n, expected):
    # At 20 % jitter the phases are spread enough that 60 waits may not beat chance over the whole
    # periodogram (then the fit abstains); a run of 150 steps shows the cycle.
    for seed in range(4):
        cycle = _fit(waits(jitter, seed, n), SOURCE)
        assert cycle is not None, f"{jitter:.0%} jitter, seed {seed}: no cycle"
        assert cycle.seconds == pytest.approx(CYCLE_S, rel=0.1)
        assert cycle.confidence == expected, (jitter, seed, cycle)
        assert "Theil-Sen" in cycle.method


def test_confidence_never_rises_with_jitter():
    levels = [RANK[_fit(waits(j, seed=7, n=150), SOURCE).confidence] for j in (0.0, 0.05, 0.10, 0.20)]
    assert levels == sorted(levels, reverse=True)


def test_waits_on_no_multiple_have_no_cycle():
    rng = np.random.default_rng(5)
    for _ in range(5):
        assert _fit(rng.uniform(0.03, 0.2, 60), SOURCE) is None
    # Irregular waits of many seconds (a real distillation run's time/step): some short period always
    # fits a few dozen of them by chance; the periodogram must not call it a cycle.
    assert _fit(rng.lognormal(np.log(6.0), 0.8, 30), SOURCE) is None


def test_refinement_removes_the_delivery_offset_bias():
    # Results arrive 2 ms after the cycle: the phase fit alone reads ~53 ms, the line through the
    # multiples gives the cycle as slope and the 2 ms as intercept.
    cycle, offset, jitter = refine_cycle(waits(0.0, 1), 0.053)
    assert cycle == pytest.approx(CYCLE_S, abs=1e-9) and offset == pytest.approx(0.002, abs=1e-9)
    assert jitter < 1e-6


def test_rayleigh_p_separates_clusters_from_noise():
    assert rayleigh_p(0.45, 120) < 1e-3 / 400  # 20 % jitter over 120 waits: far from chance
    assert rayleigh_p(1 / np.sqrt(60), 60) > 0.1  # what uniform phases give
    assert CANDIDATE_MIN_S > 0
