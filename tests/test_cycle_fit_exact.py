"""The clock-cycle fit's shortcuts give the very numbers of the plain computations they replace."""

from __future__ import annotations

import numpy as np
import pytest

from trace_doctor.derive.cycles import spans_several_multiples, theil_sen


def _theil_sen_plain(x, y):
    n = len(x)
    dx = x[None, :] - x[:, None]
    pairs = np.triu(np.ones((n, n), dtype=bool), k=1) & (dx != 0)
    slope = float(np.median((y[None, :] - y[:, None])[pairs] / dx[pairs]))
    return slope, float(np.median(y) - slope * np.median(x))


def _waits(seed: int, n: int, cycle: float = 0.053) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 6, n)
    return k * cycle + rng.normal(0, 0.003, n) + np.where(rng.random(n) < 0.05, rng.exponential(1.0, n), 0.0)


@pytest.mark.parametrize(("seed", "n"), [(0, 1500), (1, 1499), (2, 40), (3, 2)])
def test_theil_sen_by_blocks_is_the_plain_one(seed, n):
    y = np.sort(_waits(seed, n))
    x = np.round(y / 0.053)
    assert theil_sen(x, y) == _theil_sen_plain(x, y)
    # Unsorted or with many distinct x, the plain computation runs.
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(n)
    assert theil_sen(x[shuffled], y[shuffled]) == _theil_sen_plain(x[shuffled], y[shuffled])
    distinct = np.arange(float(n))
    assert theil_sen(distinct, y) == _theil_sen_plain(distinct, y)


def test_theil_sen_with_one_x_has_no_slope():
    with pytest.warns(RuntimeWarning):
        slope, _ = theil_sen(np.ones(10), np.arange(10.0))
    assert np.isnan(slope)


def _several_plain(waits, period):
    waits = waits[np.isfinite(waits) & (waits > 0)]
    multiples, counts = np.unique(np.round(waits / period).astype(int), return_counts=True)
    support = max(2, int(0.05 * len(waits)))
    return int(((multiples > 0) & (counts >= support)).sum()) >= 2


@pytest.mark.parametrize("period", [0.053, 0.2, 1e-9, 10.0])
def test_several_multiples_counts_as_unique_does(period):
    for waits in (_waits(4, 3000), np.full(50, 0.053), np.array([np.nan, -1.0, 0.0]), np.array([])):
        assert spans_several_multiples(waits, period) == _several_plain(waits, period)


@pytest.mark.parametrize("seed", range(4))
def test_the_float32_screen_reads_the_periodogram_as_float64_does(seed):
    # The screen reduces each phase to its fraction of a turn in float64 before float32 trigonometry: its R
    # and mean phases match the exact ones far below the screen's sampling error, over the whole grid (waits
    # from milliseconds to a minute: phases of thousands of turns), so the chosen period is the same.
    from trace_doctor.derive.cycles import CANDIDATE_MIN_S, GRID_PERIODS, _phase_stats, _screen_stats

    rng = np.random.default_rng(seed)
    cycle = rng.uniform(0.05, 2.0)
    waits = np.concatenate(
        [rng.normal(k * cycle, 0.03 * cycle, 2000) for k in (1, 2, 3, 5)] + [rng.uniform(0.001, 60.0, 500)]
    )
    waits = waits[waits > 0][:8192]
    periods = np.geomspace(CANDIDATE_MIN_S, 60.0, GRID_PERIODS)
    exact_r, exact_angle = _phase_stats(waits, periods)
    screen_r, screen_angle = _screen_stats(waits, periods)
    assert np.abs(screen_r - exact_r).max() < 1e-6
    significant = exact_r > 0.05  # a mean phase is only defined where the phases cluster
    assert np.abs(screen_angle - exact_angle)[significant].max() < 1e-5
    assert np.argmax(screen_r) == np.argmax(exact_r)
