"""Unions and intersections of time intervals, in linear time on sorted input."""

from __future__ import annotations

from itertools import chain

import numpy as np
import polars as pl

# Below this many intervals the plain loop is quicker than setting up arrays.
VECTOR_MIN = 64


def merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, non-overlapping union of intervals."""
    if len(intervals) >= VECTOR_MIN:
        flat = np.fromiter(chain.from_iterable(intervals), dtype=np.float64, count=2 * len(intervals))
        return _merge_arrays(flat[0::2], flat[1::2])
    out: list[tuple[float, float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def float_pairs(ranges: list) -> tuple[np.ndarray, np.ndarray]:
    """The (float(r[0]), float(r[1])) of the ranges with two values or more (a finding's
    `time_ranges_us`), as two arrays: one conversion of the whole list when it is a table of pairs."""
    if len(ranges) >= VECTOR_MIN and set(map(type, ranges)) <= {list, tuple} and set(map(len, ranges)) == {2}:
        try:
            flat = np.fromiter(chain.from_iterable(ranges), dtype=np.float64, count=2 * len(ranges))
        except (TypeError, ValueError, OverflowError):
            flat = None  # what float() refuses: the plain reading raises it
        # numpy reads None as NaN, which float() refuses: with a NaN the plain reading decides.
        if flat is not None and not np.isnan(flat).any():
            return flat[0::2], flat[1::2]
    flat = [(float(r[0]), float(r[1])) for r in ranges if len(r) >= 2]
    if not flat:
        return np.array([], dtype=np.float64), np.array([], dtype=np.float64)
    pairs = np.array(flat, dtype=np.float64)
    return pairs[:, 0], pairs[:, 1]


def merge_columns(starts: pl.Series, ends: pl.Series) -> list[tuple[float, float]]:
    """`merge` of the intervals (starts[i], ends[i]) of two columns of a span table (hundreds of
    thousands of sample spans). Null intervals are dropped, like empty ones."""
    return _merge_arrays(starts.cast(pl.Float64).to_numpy(), ends.cast(pl.Float64).to_numpy())


def union_length_columns(starts: pl.Series, ends: pl.Series) -> float:
    """length(merge_columns(starts, ends)) without the list of intervals: the same lengths, added in
    the same order."""
    a, b = merged_bounds(starts.cast(pl.Float64).to_numpy(), ends.cast(pl.Float64).to_numpy())
    return sum_in_order(b - a)


def sum_in_order(values: np.ndarray) -> float:
    """0.0 + values[0] + values[1] + ..., left to right, as the builtin sum adds floats (numpy's sum adds
    pairwise, which rounds differently): a running total's last value."""
    return float(np.cumsum(np.concatenate(([0.0], values)))[-1])


def _merge_arrays(a: np.ndarray, b: np.ndarray) -> list[tuple[float, float]]:
    """`merge`, vectorised (merged_bounds)."""
    starts, ends = merged_bounds(a, b)
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def merged_bounds(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The starts and ends of `merge`'s intervals: sorted by start, a new interval begins where a start
    lies past the running maximum of the ends before it. Empty and NaN intervals are dropped."""
    keep = b > a  # False for NaN, which is also what a null becomes
    if not keep.all():
        a, b = a[keep], b[keep]
    if not len(a):
        return a, b
    # Spans come in start order mostly: then the stable sort would leave them where they are.
    if not (a[1:] >= a[:-1]).all():
        order = np.argsort(a, kind="stable")
        a, b = a[order], b[order]
    reach = np.maximum.accumulate(b)
    first = np.flatnonzero(np.concatenate(([True], a[1:] > reach[:-1])))
    last = np.concatenate((first[1:] - 1, [len(a) - 1]))
    return a[first], reach[last]


def union_picks(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the ranges (starts[i], ends[i]) (no NaN) as a loop over them in (start, end) order
    builds it, where a range joins the current one when its start is at most the current end, which
    becomes the larger of the two: for each merged range, the index of the range it begins with and of
    the first of its ranges with its largest end (a later equal end does not replace it).

    A range's start is compared with the largest end of every range before it, not only the current
    one's: the earlier merged ranges all end before the current one starts, so the answers agree
    (reversed ranges included, whose end is below their start)."""
    if not len(starts):
        empty = np.array([], dtype=np.int64)
        return empty, empty
    order = np.lexsort((ends, starts))  # stable: equal ranges keep their given order
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.concatenate(([True], s[1:] > reach[:-1])))
    top = np.maximum.reduceat(e, first)
    sizes = np.diff(np.append(first, len(e)))
    at_top = np.where(e == np.repeat(top, sizes), np.arange(len(e)), len(e))
    return order[first], order[np.minimum.reduceat(at_top, first)]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the intersection of two merged interval lists (linear merge)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
