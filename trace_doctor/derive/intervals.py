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


def merge_columns(starts: pl.Series, ends: pl.Series) -> list[tuple[float, float]]:
    """`merge` of the intervals (starts[i], ends[i]) of two columns of a span table (hundreds of
    thousands of sample spans). Null intervals are dropped, like empty ones."""
    return _merge_arrays(starts.cast(pl.Float64).to_numpy(), ends.cast(pl.Float64).to_numpy())


def _merge_arrays(a: np.ndarray, b: np.ndarray) -> list[tuple[float, float]]:
    """`merge`, vectorised: sorted by start, a new interval begins where a start lies past the
    running maximum of the ends before it. Empty and NaN intervals are dropped."""
    keep = b > a  # False for NaN, which is also what a null becomes
    a, b = a[keep], b[keep]
    if not len(a):
        return []
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    reach = np.maximum.accumulate(b)
    first = np.flatnonzero(np.concatenate(([True], a[1:] > reach[:-1])))
    last = np.concatenate((first[1:] - 1, [len(a) - 1]))
    return list(zip(a[first].tolist(), reach[last].tolist(), strict=True))


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
