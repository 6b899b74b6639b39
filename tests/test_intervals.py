"""The vectorised interval union agrees with the plain one, interval for interval, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from trace_doctor.derive.intervals import length, merge, merge_columns, union_length_columns


def _rollout_like(seed: int, steps: int = 40, per_step: int = 16) -> list[tuple[float, float]]:
    """Sample spans the way an RL step issues them: a burst of overlapping calls per step, some
    nested, some touching the next, a few zero-length or reversed (clock noise), in shuffled order."""
    rng = np.random.default_rng(seed)
    out: list[tuple[float, float]] = []
    t = 0.0
    for _ in range(steps):
        t += float(rng.exponential(5_000.0))
        for _ in range(per_step):
            start = t + float(rng.uniform(0, 2_000))
            dur = float(rng.choice([0.0, -3.0, rng.exponential(40_000.0)]))
            out.append((start, start + dur))
        last = max(b for _, b in out)
        out.append((last, last + 100.0))  # touching: merged with what it touches
        t = last + 100.0
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_merge_columns_is_merge(seed):
    intervals = _rollout_like(seed)
    starts = pl.Series([a for a, _ in intervals])
    ends = pl.Series([b for _, b in intervals])
    expected = _plain_merge(intervals)
    assert 1 < len(expected) < len(intervals)
    assert merge_columns(starts, ends) == expected


def test_merge_columns_drops_empty_nan_and_null_intervals_and_reads_integers():
    starts = pl.Series([10, 0, 5, None, 30, 40], dtype=pl.Int64)
    ends = pl.Series([20, 6, 5, 9, None, 35], dtype=pl.Int64)
    assert merge_columns(starts, ends) == [(0.0, 6.0), (10.0, 20.0)]
    floats = pl.Series([1.0, math.nan, 2.0])
    assert merge_columns(floats, pl.Series([3.0, 4.0, math.nan])) == [(1.0, 3.0)]
    assert merge_columns(pl.Series([], dtype=pl.Float64), pl.Series([], dtype=pl.Float64)) == []


@pytest.mark.parametrize("seed", range(3))
def test_merge_of_a_long_list_is_the_plain_loop(seed):
    intervals = _rollout_like(seed, steps=60)
    assert len(intervals) > 64  # the vectorised path
    as_ints = [(int(a), int(b)) for a, b in intervals]
    for given in (intervals, as_ints, [list(pair) for pair in intervals]):
        expected = _plain_merge(given)
        assert merge(given) == expected
        assert all(type(x) is float for pair in expected for x in pair)


@pytest.mark.parametrize("seed", range(5))
def test_union_length_is_the_length_of_the_merged_list(seed):
    intervals = _rollout_like(seed, steps=200)
    starts, ends = pl.Series([a for a, _ in intervals]), pl.Series([b for _, b in intervals])
    # Added left to right as length() adds them, not pairwise as numpy's sum would.
    assert repr(union_length_columns(starts, ends)) == repr(float(length(merge_columns(starts, ends))))
    assert union_length_columns(starts.head(0), ends.head(0)) == 0.0
    assert union_length_columns(pl.Series([5.0, None]), pl.Series([1.0, 3.0])) == 0.0


def _plain_merge(intervals) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
