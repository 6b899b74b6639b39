"""A finding's place (its ranges merged with its steps' windows) is what the plain per-step reading gives."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from trace_doctor.derive.intervals import float_pairs, merge
from trace_doctor.model import Finding
from trace_doctor.triage.locate import StepWindows, locate, step_windows


def _spans(step_dtype=pl.Int64) -> pl.DataFrame:
    rng = np.random.default_rng(2)
    starts = np.cumsum(rng.exponential(1000.0, 600))
    return pl.DataFrame(
        {
            "step": pl.Series([None if i % 7 == 0 else i // 3 for i in range(600)], dtype=pl.Int64).cast(step_dtype),
            "start_us": starts,
            "end_us": starts + rng.exponential(3000.0, 600),
        }
    )


def _plain_windows(spans: pl.DataFrame) -> dict[int, tuple[float, float]]:
    rows = (
        spans.filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b"))
    )
    return {int(s): (float(a), float(b)) for s, a, b in rows.iter_rows() if a is not None and b is not None}


def _plain_locate(finding: Finding, windows) -> list[tuple[float, float]]:
    ranges = [(float(r[0]), float(r[1])) for r in finding.time_ranges_us if len(r) >= 2]
    steps = frozenset(int(s) for s in finding.steps)
    return merge(ranges + [windows[s] for s in steps if s in windows])


def _finding(steps, ranges) -> Finding:
    return Finding("r", "TD0", "warning", "t", "m", "f", steps=steps, time_ranges_us=ranges)


@pytest.mark.parametrize("step_dtype", [pl.Int64, pl.Int32, pl.Float64])
def test_locate_reads_the_windows_as_the_dict_did(step_dtype):
    spans = _spans(step_dtype)
    windows, plain = step_windows(spans), _plain_windows(spans)
    many = [[float(a), float(a) + 500.0] for a in np.linspace(0, 6e5, 300)]
    for finding in (
        _finding([], []),
        _finding([3, 5, 10_000, 2**70], []),
        _finding(list(range(0, 250, 2)), many),
        _finding([1], [[10, 20], [15, 30.5], [40, 41, "extra"]]),
        _finding(list(range(200)), [[5.0, 1.0]] * 80),
    ):
        assert locate(finding, windows).intervals == _plain_locate(finding, plain)
        assert locate(finding, windows).steps == frozenset(int(s) for s in finding.steps)


def test_no_step_column_no_windows():
    windows = step_windows(pl.DataFrame({"start_us": [1.0], "end_us": [2.0]}))
    assert locate(_finding([1, 2], [[1, 2]]), windows).intervals == [(1.0, 2.0)]


def test_float_pairs_reads_what_float_reads_and_refuses_what_it_refuses():
    pairs = [[i, i + 0.5] for i in range(100)]
    a, b = float_pairs(pairs)
    assert a.tolist() == [float(i) for i in range(100)] and b.tolist() == [i + 0.5 for i in range(100)]
    a, b = float_pairs([*pairs, [math.nan, 1.0], [1.0]])
    assert len(a) == 101 and math.isnan(a[-1])
    with pytest.raises(TypeError):
        float_pairs([*pairs, [None, 1.0]])
    with pytest.raises(ValueError):
        float_pairs([*pairs, ["x", 1.0]])


def _plain_meets(a: list, b: list) -> bool:
    from trace_doctor.derive.intervals import overlap

    touching = any(x[1] == y[0] or y[1] == x[0] for x in a for y in b) if len(a) * len(b) <= 10_000 else False
    return overlap(a, b) > 0 or touching


def _intervals(rng, n: int, scale: float) -> list[list[float]]:
    starts = np.round(rng.uniform(0, scale, n))
    return [[float(a), float(a + d)] for a, d in zip(starts, np.round(rng.exponential(scale / n / 2, n)), strict=True)]


def test_locations_meet_as_the_interval_loop_says():
    none = StepWindows(np.array([], dtype=np.int64), np.array([]), np.array([]))
    seen = set()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        scale = 10 ** rng.uniform(2, 7)
        a = locate(_finding([], _intervals(rng, int(rng.integers(1, 150)), scale)), none)
        b = locate(_finding([], _intervals(rng, int(rng.integers(1, 150)), 1e4)), none)
        expected = _plain_meets(a.intervals, b.intervals)
        assert a.meets(b) == b.meets(a) == expected
        seen.add(expected)
    assert seen == {True, False}


def test_touching_and_apart():
    none = StepWindows(np.array([], dtype=np.int64), np.array([]), np.array([]))
    left = locate(_finding([], [[0.0, 10.0], [20.0, 30.0]]), none)
    for ranges, meets in (([[30.0, 40.0]], True), ([[10.0, 20.0]], True), ([[11.0, 19.0]], False), ([[5, 6]], True)):
        assert left.meets(locate(_finding([], ranges), none)) is meets
    # Past 10 000 pairs a touch is not looked for (only overlaps), as before.
    many = locate(_finding([], [[float(i), i + 0.5] for i in range(200)]), none)
    touching = locate(_finding([], [[i + 0.5, i + 0.7] for i in range(0, 200, 2)]), none)
    assert len(many.intervals) * len(touching.intervals) > 10_000
    assert many.meets(touching) is False is _plain_meets(many.intervals, touching.intervals)
    assert many.meets(locate(_finding([], [[i + 0.5, i + 0.7] for i in range(0, 40, 2)]), none)) is True
