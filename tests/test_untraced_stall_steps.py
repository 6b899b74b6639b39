"""Each untraced stall is placed before the first step that starts at or after its end (less 1 µs), as a
filter of the steps' starts finds it: steps without a start, NaN starts and stalls after the last step
included."""

from __future__ import annotations

import math
from types import SimpleNamespace

import polars as pl

from trace_doctor.rules.checks import inconsistent_step_times as rule


class _Ctx:
    def __init__(self, stepped: pl.DataFrame):
        self.run = SimpleNamespace(height=lambda table: stepped.height)
        self.thresholds = SimpleNamespace(spike_ratio=3.0)
        self._stepped = stepped

    def spans_where(self, where, columns):
        # The stepped spans' starts; the main track's spans only feed main_track_gaps, replaced here.
        return self._stepped.select(columns) if columns == rule.STEP_START_COLUMNS else pl.DataFrame()

    def finding(self, **fields):
        return fields


def _first_after(starts: pl.DataFrame, b: float) -> int | None:
    after = starts.filter(pl.col("start_us") >= b - 1)
    return int(after["step"][0]) if after.height else None


def test_each_stall_is_placed_before_the_first_step_after_it(monkeypatch):
    stepped = pl.DataFrame(
        {
            "segment": [0] * 9,
            "step": [1, 1, 2, 3, 4, 5, 6, 7, 8],
            "start_us": [100.0, 50.0, 300.0, 310.0, 900.0, None, math.nan, 1500.0, 1499.5],
        }
    )
    gaps = [[10.0, 40.0], [120.0, 301.0], [400.0, 900.5], [1000.0, 1500.0], [2000.0, 2600.0]]
    monkeypatch.setattr(rule, "main_track_gaps", lambda spans, min_gap_s: gaps)
    found = rule.untraced_stalls(_Ctx(stepped), 10.0, set())
    starts = stepped.group_by("step").agg(pl.col("start_us").min()).sort("start_us")
    expected = [_first_after(starts, b) for _, b in gaps]
    assert expected[:2] == [1, 2] and expected[-1] == 6  # NaN compares largest: after every finite start
    placed = [s["before_step"] for s in found["evidence"]["stalls"]]
    assert placed == expected
    # A stall before a step already reported as a spike is that spike's, not an untraced stall.
    found = rule.untraced_stalls(_Ctx(stepped), 10.0, {2})
    assert [s["before_step"] for s in found["evidence"]["stalls"]] == [e for e in expected if e != 2]
