"""Trace facts about blocked threads: stretched round trips, overlapping spans, merged ranges.

Shared by the rules that tell a GIL stall (every thread stops, the SDK's round trips stretch) from a
main thread blocked in synchronous code (the SDK thread lives on).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from trace_doctor.derive.intervals import union_picks
from trace_doctor.derive.sample_waits import DRIVER_AND_ROLLOUT_COLUMNS, DRIVER_AND_ROLLOUT_SPANS, driver_gaps
from trace_doctor.knowledge.tinker import SAMPLING_CALLS, TRAINING_SUBMIT_CALLS

# Sample round trips stretch when the SDK thread cannot poll results.
ROUND_TRIP = frozenset(SAMPLING_CALLS)


def merge_ranges(ranges: list[list[float]]) -> list[list[float]]:
    """Union of [start, end] ranges, sorted."""
    merged: list[list[float]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


# From this many rows, merging the columns as arrays beats a list per row (a trace's thousands of long calls).
VECTOR_MIN = 64
# Ints up to this size are exact as float64, so comparing them as floats orders them as Python does.
EXACT_INT = 2.0**53


def merge_range_columns(starts: pl.Series, ends: pl.Series) -> list[list[float]]:
    """merge_ranges of the pairs (starts[i], ends[i]) of two table columns (a trace's thousands of long
    calls), without a list per pair: the same values, picked by index (intervals.union_picks). Columns
    with nulls or NaN, which a Python sort does not order, go through the lists."""
    if (
        len(starts) >= VECTOR_MIN
        and starts.dtype == ends.dtype
        and starts.dtype in (pl.Float64, pl.Int64)
        and starts.null_count() == 0
        and ends.null_count() == 0
    ):
        a, b = starts.to_numpy(), ends.to_numpy()
        fa, fb = a.astype(np.float64), b.astype(np.float64)
        exact = starts.dtype == pl.Float64 or max(np.abs(fa).max(), np.abs(fb).max()) <= EXACT_INT
        if exact and not (np.isnan(fa).any() or np.isnan(fb).any()):
            first, largest = union_picks(fa, fb)
            return [[x, y] for x, y in zip(a[first].tolist(), b[largest].tolist(), strict=True)]
    return merge_ranges([[x, y] for x, y in zip(starts.to_list(), ends.to_list(), strict=True)])


# The spans the stall readings judge: closed, with a duration.
CLOSED_WITH_DURATION = pl.col("closed") & pl.col("dur_us").is_not_null()


def round_trip_medians(spans: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Median duration (`typical_us`) per round-trip call, from the names and durations alone."""
    trips = spans.lazy().filter(pl.col("name").is_in(list(ROUND_TRIP)))
    return trips.group_by("name").agg(pl.col("dur_us").median().alias("typical_us")).collect()


def stretched_round_trips(
    spans: pl.DataFrame | pl.LazyFrame, ratio: float, min_excess_s: float, typical: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Sample round trips longer than `ratio` x their median and `min_excess_s` beyond it: the SDK thread
    that polls results could not run (or the service was slow for them).

    The medians (`typical`: round_trip_medians of the same spans, when already known) come first;
    then only the stretched trips are read whole (a round trip per sample is most of an RL trace's
    spans)."""
    trips = spans.lazy().filter(pl.col("name").is_in(list(ROUND_TRIP)))
    if typical is None:
        typical = round_trip_medians(spans)
    stretched = [
        (pl.col("name") == name)
        & (pl.col("dur_us") > ratio * typical_us)
        & (pl.col("dur_us") - typical_us > min_excess_s * 1e6)
        for name, typical_us in typical.iter_rows()
        if typical_us is not None
    ]
    if not stretched:
        return trips.head(0).with_columns(pl.lit(None, pl.Float64).alias("typical_us")).collect()
    typical_of = pl.col("name").replace_strict(
        typical.get_column("name"), typical.get_column("typical_us"), default=None, return_dtype=pl.Float64
    )
    return trips.filter(pl.any_horizontal(stretched)).with_columns(typical_of.alias("typical_us")).collect()


def overlaps(rows: pl.DataFrame, others: pl.DataFrame) -> pl.DataFrame:
    """Which spans of `others` on another thread overlap each span of `rows` in time (same launch):
    (`_row`, `_other`) index pairs, in the order of both.

    One inequality join instead of a scan of `others` per row: a run stalled for thousands of steps
    has thousands of long calls to test against thousands of stretched round trips.
    """
    left = rows.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"), "segment", "start_us", "end_us", "pid", "tid"
    )
    right = others.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("_other"),
        pl.col("segment").alias("_segment"),
        pl.col("start_us").alias("_start"),
        pl.col("end_us").alias("_end"),
        pl.col("pid").alias("_pid"),
        pl.col("tid").alias("_tid"),
    )
    if left.is_empty() or right.is_empty():
        return pl.DataFrame(schema={"_row": pl.UInt32, "_other": pl.UInt32})
    pairs = left.join_where(right, pl.col("_start") < pl.col("end_us"), pl.col("_end") > pl.col("start_us"))
    # A null in the thread test leaves the pair a hit only if the rest decides it (Kleene logic),
    # as a filter of `others` by one row's values would.
    other_thread = ~((pl.col("_tid") == pl.col("tid")) & (pl.col("_pid") == pl.col("pid")))
    return (
        pairs.filter(pl.col("_segment").eq_missing(pl.col("segment")) & other_thread)
        .select("_row", "_other")
        .sort("_row", "_other")
    )


# What span_ref cites and overlaps compares: the columns the stall readings read of a span.
CITED_COLUMNS = ["name", "track", "thread", "step", "start_us", "end_us", "dur_us", "segment", "pid", "tid"]


def span_ref(row: dict) -> dict[str, Any]:
    return {
        "name": row["name"],
        "track": row["track"],
        "thread": row["thread"],
        "step": row["step"],
        "start_us": row["start_us"],
        "end_us": row["end_us"],
        "dur_s": round(row["dur_us"] / 1e6, 6),
    }


# The spans main_track_gaps reads (a stored table is scanned for these), and the columns it uses.
MAIN_TRACK_SPANS = DRIVER_AND_ROLLOUT_SPANS
MAIN_TRACK_COLUMNS = DRIVER_AND_ROLLOUT_COLUMNS


def main_track_gaps(spans: pl.DataFrame, min_gap_s: float) -> list[list[float]]:
    """Intervals where the trainer ran nothing traced, per launch: no child span of the main task open
    (nor, in async RL, of the training task main awaits), less the async trainer's waits for samples,
    which a rollout's delivery ends (derive/sample_waits)."""
    gaps = driver_gaps(spans, min_gap_s).filter(~pl.col("delivered"))
    return sorted([a, b] for a, b in gaps.select("start_us", "end_us").iter_rows())


# The training submits and the columns read from them: their timing and their steps (a stored table is
# scanned for these).
TRAINING_SUBMITS = pl.col("name").is_in(list(TRAINING_SUBMIT_CALLS))
SUBMIT_COLUMNS = ["name", "closed", "dur_us", "step"]
# The spans step_intervals reads, and the columns it uses.
STEPPED_SPANS = pl.col("step").is_not_null()
STEP_START_COLUMNS = ["segment", "step", "start_us"]


def step_intervals(spans: pl.DataFrame) -> pl.DataFrame:
    """Per step, the time from its first span to the next step's first span (same launch)."""
    starts = (
        spans.lazy()
        .filter(pl.col("step").is_not_null())
        .group_by("segment", "step")
        .agg(pl.col("start_us").min().alias("start_us"))
        .sort("segment", "step")
        .collect()
    )
    return (
        starts.with_columns(pl.col("start_us").shift(-1).over("segment").alias("end_us"))
        .drop_nulls("end_us")
        .with_columns(((pl.col("end_us") - pl.col("start_us")) / 1e6).alias("interval_s"))
    )
