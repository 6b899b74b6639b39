"""merge_ranges (and its column form) pick exactly what the plain loop over sorted pairs picks: the same
values, of the same types, signed zeros and ties included, vectorised or not."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from trace_doctor.derive.stalls import VECTOR_MIN, merge_range_columns, merge_ranges


def _plain(ranges):
    merged = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _exactly(got, expected):
    """Equal as the JSON prints them: values, types and the sign of zero."""
    assert [[repr(x) for x in r] for r in got] == [[repr(x) for x in r] for r in expected]
    assert [[type(x) for x in r] for r in got] == [[type(x) for x in r] for r in expected]


def _messy(seed: int, n: int = 400) -> list[list]:
    """Nested, touching, equal, reversed and zero-length ranges, ints beside equal floats, signed zeros."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = int(rng.integers(-50, 4000))
        kind = rng.integers(0, 6)
        end = start + (0 if kind == 0 else -int(rng.integers(1, 9)) if kind == 1 else int(rng.integers(1, 40)))
        pair = [start, end]
        if rng.random() < 0.5:
            pair[0] = float(pair[0])
        if rng.random() < 0.5:
            pair[1] = float(pair[1])
        out.append(pair)
    out += [[0.0, 5], [-0.0, 5.0], [-3, -0.0], [-3.0, 0.0], [10, 20], [10.0, 20.0], [20, 25]]
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_long_lists_merge_as_the_loop_does(seed):
    ranges = _messy(seed)
    assert len(ranges) >= VECTOR_MIN
    expected = _plain([list(r) for r in ranges])
    assert 1 < len(expected) < len(ranges)
    _exactly(merge_ranges(ranges), expected)
    _exactly(merge_ranges([tuple(r) for r in ranges]), expected)


def test_edge_cases():
    assert merge_ranges([]) == []
    touching = [[float(i), float(i + 1)] for i in range(100)]
    _exactly(merge_ranges(touching), [[0.0, 100.0]])
    nested = [[0, 100]] + [[i, i + 1] for i in range(1, 99)]
    _exactly(merge_ranges(nested[::-1]), [[0, 100]])
    # The first of equal largest ends is kept, as max() keeps its first argument.
    ties = [[0, 10.0]] + [[1, 10]] * 70
    _exactly(merge_ranges(ties), [[0, 10.0]])


def test_what_the_arrays_cannot_order_goes_to_the_loop():
    base = [[float(i), float(i) + 0.5] for i in range(100)]
    with_nan = [*base, [math.nan, 3.0]]
    assert len(merge_ranges(with_nan)) == len(_plain([list(r) for r in with_nan]))
    huge = [*base, [2**60 + 1, 2**60 + 3], [2**60, 2**60 + 2]]
    _exactly(merge_ranges(huge), _plain(huge))
    with pytest.raises(TypeError):
        merge_ranges([*base, [None, 1.0], [2.0, None]])


@pytest.mark.parametrize("dtype", [pl.Float64, pl.Int64])
def test_columns_merge_as_the_pairs_do(dtype):
    ranges = [[int(a), int(b)] for a, b in _messy(3)]
    starts = pl.Series([a for a, _ in ranges], dtype=dtype)
    ends = pl.Series([b for _, b in ranges], dtype=dtype)
    expected = _plain([[a, b] for a, b in zip(starts.to_list(), ends.to_list(), strict=True)])
    _exactly(merge_range_columns(starts, ends), expected)
    short = merge_range_columns(starts.head(5), ends.head(5))
    _exactly(short, _plain([[a, b] for a, b in zip(starts.head(5).to_list(), ends.head(5).to_list(), strict=True)]))


def test_columns_with_nulls_go_to_the_loop():
    starts = pl.Series([float(i) for i in range(100)] + [None])
    ends = pl.Series([float(i) + 2 for i in range(100)] + [None])
    with pytest.raises(TypeError):
        merge_range_columns(starts, ends)
    _exactly(merge_range_columns(starts.head(100), ends.head(100)), [[0.0, 101.0]])


def test_blocked_excess_adds_in_row_order():
    from trace_doctor.rules.checks.blocking_call_in_async import sum_in_order

    rng = np.random.default_rng(7)
    values = np.concatenate((rng.exponential(1e6, 5000), [1e17, 3.0, -1e17, 0.1, math.nan], rng.exponential(1.0, 50)))
    for part in (values[:5000], values[:5003], values[:5004], values[:5005], values, values[:0]):
        got, expected = sum_in_order(np.maximum(part, 0.0)), sum(max(v, 0.0) for v in part.tolist())
        assert repr(got) == repr(float(expected))
    # numpy's pairwise sum rounds these differently: the order is what the test pins.
    assert float(np.sum(values[:5000])) != sum(values[:5000].tolist())
