"""merge_range_columns picks exactly what merge_ranges' loop over sorted pairs picks: the same values, of the
same types, signed zeros and ties included; and blocking-call's excess adds as the builtin sum does."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from trace_doctor.derive.stalls import VECTOR_MIN, merge_range_columns


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


def _messy(seed: int, n: int = 400) -> list[list[float]]:
    """Nested, touching, equal, reversed and zero-length ranges, signed zeros, in no order."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = float(rng.integers(-50, 4000))
        kind = rng.integers(0, 6)
        end = start + (0 if kind == 0 else -float(rng.integers(1, 9)) if kind == 1 else float(rng.integers(1, 40)))
        out.append([start, end])
    out += [[0.0, 5.0], [-0.0, 5.0], [-3.0, -0.0], [-3.0, 0.0], [10.0, 20.0], [10.0, 20.0], [20.0, 25.0]]
    rng.shuffle(out)
    return out


def _columns(ranges, dtype=pl.Float64):
    return pl.Series([a for a, _ in ranges], dtype=dtype), pl.Series([b for _, b in ranges], dtype=dtype)


@pytest.mark.parametrize("seed", range(6))
def test_columns_merge_as_the_loop_does(seed):
    ranges = _messy(seed)
    assert len(ranges) >= VECTOR_MIN
    expected = _plain(ranges)
    assert 1 < len(expected) < len(ranges)
    _exactly(merge_range_columns(*_columns(ranges)), expected)
    as_ints = [[int(a), int(b)] for a, b in ranges]
    _exactly(merge_range_columns(*_columns(as_ints, pl.Int64)), _plain(as_ints))


def test_edge_cases():
    assert merge_range_columns(*_columns([])) == []
    touching = [[float(i), float(i + 1)] for i in range(100)]
    _exactly(merge_range_columns(*_columns(touching)), [[0.0, 100.0]])
    nested = [[0, 100]] + [[i, i + 1] for i in range(1, 99)]
    _exactly(merge_range_columns(*_columns(nested[::-1], pl.Int64)), [[0, 100]])
    # The first of equal largest ends is kept, as max() keeps its first argument: here the sign of zero.
    ties = [[-5.0, -0.0]] + [[-4.0, 0.0]] * 70 + [[1.0, 2.0]]
    _exactly(merge_range_columns(*_columns(ties)), [[-5.0, -0.0], [1.0, 2.0]])
    short = _messy(1)[:5]
    _exactly(merge_range_columns(*_columns(short)), _plain(short))


def test_what_the_arrays_cannot_order_goes_to_the_loop():
    base = [[float(i), float(i) + 0.5] for i in range(100)]
    with_nan = [*base, [math.nan, 3.0]]
    _exactly(merge_range_columns(*_columns(with_nan)), _plain(with_nan))
    huge = [[i, i + 1] for i in range(100)] + [[2**60 + 1, 2**60 + 3], [2**60, 2**60 + 2]]
    _exactly(merge_range_columns(*_columns(huge, pl.Int64)), _plain(huge))
    with pytest.raises(TypeError):  # the loop's answer to ranges it cannot sort
        merge_range_columns(*_columns([*base, [None, 1.0], [2.0, None]]))


def test_blocked_excess_adds_in_row_order():
    from trace_doctor.derive.intervals import sum_in_order

    rng = np.random.default_rng(7)
    values = np.concatenate((rng.exponential(1e6, 5000), [1e17, 3.0, -1e17, 0.1, math.nan], rng.exponential(1.0, 50)))
    for part in (values[:5000], values[:5003], values[:5004], values[:5005], values, values[:0]):
        got, expected = sum_in_order(np.maximum(part, 0.0)), sum(max(v, 0.0) for v in part.tolist())
        assert repr(got) == repr(float(expected))
    # numpy's pairwise sum rounds these differently: the order is what the test pins.
    assert float(np.sum(values[:5000])) != sum(values[:5000].tolist())
