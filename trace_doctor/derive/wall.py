"""The run's wall time: one definition, used by the summary, every rule and the time account.

The trace is a wall clock: its extent per launch (segment), summed, is the wall time. Without a
trace, the live steps' totals summed. Summed raw totals are not a wall clock when timers overlap (a
legacy pipelined SFT `time/total` spans three iterations' work: derive/step_times de-overlaps them)
or leave time out (async RL excludes data waits), so the trace wins whenever there is one.

Launches one after the other add up; processes that wrote the run at the same time (derive/writers)
do not: their wall is the longest one's, not the sum.
"""

from __future__ import annotations

import math

import polars as pl

from trace_doctor.derive.step_times import DEOVERLAPPED_SOURCE


def _finite(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def trace_wall_time_s(spans: pl.DataFrame | pl.LazyFrame, *, concurrent: bool = False) -> float | None:
    """Wall time covered by the trace: the extent of each segment's spans, summed (the longest one's
    when the segments ran at the same time)."""
    if isinstance(spans, pl.DataFrame) and spans.is_empty():
        return None
    extent = (
        spans.lazy()
        .group_by("segment")
        .agg(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b"))
        .collect()
    )
    if extent.is_empty():
        return None
    widths = extent["b"] - extent["a"]
    total = widths.max() if concurrent else widths.sum()
    return _finite(total / 1e6) if total is not None else None


def step_totals(step_times: pl.DataFrame) -> pl.Series:
    """The finite per-step totals of live training rows."""
    if "total_s" not in step_times.columns:
        return pl.Series("total_s", [], dtype=pl.Float64)
    return step_times["total_s"].drop_nulls().drop_nans()


TRACE_BASIS = "trace extent per launch"
TOTALS_BASIS = "sum of step totals"
CONCURRENT_TRACE_BASIS = "trace extent of the longest process (processes that wrote the run at the same time)"
# Walls read off a trace's clock (the account leaves such a run to its spans).
TRACE_BASES = (TRACE_BASIS, CONCURRENT_TRACE_BASIS)
CONCURRENT_TOTALS_BASIS = "sum of step totals of the longest writer (processes that wrote the run at the same time)"
# derive/step_times.DEOVERLAPPED_SOURCE rows: the summed raw windows would count most seconds twice.
DEOVERLAPPED_BASIS = (
    "sum of step totals, legacy pipelined time/total de-overlapped (each window also holds the next step's "
    "submission and the previous step's finish)"
)


def wall_time(
    spans: pl.DataFrame | pl.LazyFrame, step_times: pl.DataFrame, *, concurrent: bool = False
) -> tuple[float | None, str]:
    """(the wall time, its basis): the trace's extent, else the live steps' totals summed (None
    when neither exists). The basis is named once here: the time account reports it.

    `concurrent`: the segments are processes that ran at the same time, so the longest one is the wall."""
    traced = trace_wall_time_s(spans, concurrent=concurrent)
    if traced is not None:
        return traced, CONCURRENT_TRACE_BASIS if concurrent else TRACE_BASIS
    if concurrent and "segment" in step_times.columns and "total_s" in step_times.columns:
        per_writer = (
            step_times.filter(pl.col("total_s").is_finite()).group_by("segment").agg(pl.col("total_s").sum())["total_s"]
        )
        basis = CONCURRENT_TOTALS_BASIS if len(per_writer) > 1 else TOTALS_BASIS
        return (_finite(per_writer.max()) if len(per_writer) else None), basis
    totals = step_totals(step_times)
    deoverlapped = "total_source" in step_times.columns and (step_times["total_source"] == DEOVERLAPPED_SOURCE).any()
    return (_finite(totals.sum()) if len(totals) else None), DEOVERLAPPED_BASIS if deoverlapped else TOTALS_BASIS


def wall_time_s(spans: pl.DataFrame | pl.LazyFrame, step_times: pl.DataFrame) -> float | None:
    """The trace's extent, else the live steps' totals summed; None when neither exists."""
    return wall_time(spans, step_times)[0]
