"""When the async RL trainer waited for samples.

The cookbook's async loop (rl/train.py `do_async_training`, 0.6.1) collects each batch of finished
trajectory groups *before* opening the step's iteration window, on its `training_loop` task: the wait
is in no `time/*` key, and the trace shows it as an interval of that task with no span open, closed
when a rollout (`trajectory_group_worker`) delivers the group that completes the batch. Such an
interval is the trainer starved of samples, not a stall: untraced code or a blocked thread does not
end as a rollout ends. With streaming minibatches the train step itself waits on the rollout queue
between minibatches: its span is open over those waits, so it does not count as covering them.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from trace_doctor.knowledge.tinker import ASYNC_TRAINING_TRACK, ROLLOUT_WORKER_SPAN, STREAM_TRAIN_STEP_SPAN

# Between a rollout's end and the next training span the cookbook only does bookkeeping (queue put,
# sort by sampler step, a log line, opening the window): milliseconds. A gap that ends later than
# this after the last rollout ended was not ended by a delivery.
SAMPLE_WAKE_S = 0.05

# The trainer's own tracks: the main task's children, and in async RL the training task main awaits.
DRIVER_TRACKS = ("main", "sync:MainThread", ASYNC_TRAINING_TRACK)

# The spans the trainer-gap readings scan (a stored table is filtered on these): children of the
# driver tracks, and the rollouts whose ends can close a gap of the async training task.
DRIVER_AND_ROLLOUT_SPANS = (
    ((pl.col("track").is_in(sorted(DRIVER_TRACKS)) & (pl.col("depth") >= 1)) | (pl.col("name") == ROLLOUT_WORKER_SPAN))
    & pl.col("closed")
    & pl.col("end_us").is_not_null()
)
# The columns the readings of those spans use (driver_gaps, trainer_sample_waits, training_extent_s): the
# rest (a span's `args` above all) is never read.
DRIVER_AND_ROLLOUT_COLUMNS = ["name", "track", "depth", "closed", "start_us", "end_us", "segment", "pid", "step"]


def driver_gaps(spans: pl.DataFrame, min_gap_s: float) -> pl.DataFrame:
    """Intervals (`segment`, `start_us`, `end_us`, `delivered`) longer than `min_gap_s` where the trainer
    had no span open, per launch and thread; `delivered`: the interval ended as a rollout ended."""
    frame = spans.lazy().filter(DRIVER_AND_ROLLOUT_SPANS)
    driver = frame.filter(
        pl.col("track").is_in(sorted(DRIVER_TRACKS))
        & (pl.col("depth") >= 1)
        & (pl.col("name") != STREAM_TRAIN_STEP_SPAN)
    )
    # A gap opens where a span starts after every earlier span of its thread has ended: the running
    # maximum of end times, in start order, is how far coverage reached. Main and the async training
    # task run on one thread and one timeline, so their spans cover it together.
    keys = ["segment", "pid"]
    gaps = (
        driver.sort([*keys, "start_us", "end_us"])
        .with_columns(pl.col("end_us").cum_max().shift(1).over(keys).alias("_reached"))
        .filter(pl.col("start_us") - pl.col("_reached") > min_gap_s * 1e6)
        .select("segment", pl.col("_reached").alias("gap_start_us"), pl.col("start_us").alias("gap_end_us"))
        .collect()
    )
    ends = frame.filter(pl.col("name") == ROLLOUT_WORKER_SPAN).select("segment", "end_us").collect()
    delivered = []
    by_segment = {seg: np.sort(g["end_us"].to_numpy()) for (seg,), g in ends.group_by("segment")}
    for seg, a, b in gaps.iter_rows():
        seg_ends = by_segment.get(seg)
        if seg_ends is None or seg_ends.size == 0:
            delivered.append(False)
            continue
        i = int(np.searchsorted(seg_ends, b, side="right")) - 1
        delivered.append(bool(i >= 0 and seg_ends[i] > a and b - seg_ends[i] <= SAMPLE_WAKE_S * 1e6))
    return (
        gaps.rename({"gap_start_us": "start_us", "gap_end_us": "end_us"})
        .with_columns(pl.Series("delivered", delivered, dtype=pl.Boolean))
        .sort("start_us")
    )


def trainer_sample_waits(spans: pl.DataFrame) -> pl.DataFrame:
    """Each wait of the training loop for samples (`start_us`, `end_us`, `wait_s`, `step`: the step it
    held up, whose span starts at its end), in time order; empty without such a wait."""
    gaps = driver_gaps(spans, 0.0).filter(pl.col("delivered"))
    starts = (
        spans.lazy()
        .filter(pl.col("step").is_not_null() & pl.col("track").is_in(sorted(DRIVER_TRACKS)))
        .group_by("segment", "start_us")
        .agg(pl.col("step").min())
        .collect()
    )
    return (
        gaps.join(starts, left_on=["segment", "end_us"], right_on=["segment", "start_us"], how="left")
        .with_columns(((pl.col("end_us") - pl.col("start_us")) / 1e6).alias("wait_s"))
        .select("segment", "start_us", "end_us", "wait_s", "step")
        .sort("start_us")
    )


def training_extent_s(spans: pl.DataFrame) -> float:
    """Seconds from the training loop's first stepped span to its last one's end, summed over launches."""
    extent = (
        spans.lazy()
        .filter(pl.col("step").is_not_null() & pl.col("track").is_in(sorted(DRIVER_TRACKS)))
        .group_by("segment")
        .agg((pl.col("end_us").max() - pl.col("start_us").min()).alias("us"))
        .collect()
    )
    return float(extent["us"].sum()) / 1e6 if extent.height else 0.0
