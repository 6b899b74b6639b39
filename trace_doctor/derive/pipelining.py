"""How a loop submits: forward_backward → optim_step hand-offs and SFT step transitions from the trace.

Facts, not verdicts: pipelining-gap judges them as a client problem; server-side-wait needs them to
rule the client out.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.knowledge.tinker import FORWARD_BACKWARD_CALLS, OPTIM_STEP_CALLS

# The spans fb_optim_waits and step_transitions read (a stored table is scanned for these alone).
PIPELINING_CALLS = [*FORWARD_BACKWARD_CALLS, *OPTIM_STEP_CALLS, "submit_batch", "finish_batch"]
# The columns they use: the rest (a span's `args` above all) is never read.
PIPELINING_COLUMNS = ["name", "pid", "tid", "track", "start_us", "end_us", "dur_us", "step", "segment", "closed"]


def _closed(spans: pl.DataFrame) -> pl.LazyFrame:
    # Lazy, so each query reads only the columns it uses (a span table's `args` is its bulk).
    return spans.lazy().filter(pl.col("closed").fill_null(True) & pl.col("end_us").is_not_null())


# 0.6.1 gives an SDK call timed to completion a private track `<task>:<method>:<tid>` with
# tid >= 1_000_000; the calling task is what orders its calls.
PRIVATE_TRACK_MIN_TID = 1_000_000


def caller_track(track: pl.Expr, tid: pl.Expr) -> pl.Expr:
    """The calling task's track of each span: 0.6.1 runs each SDK call on a private track
    `<caller>:<call>:<tid>` with a tid >= 1,000,000; other tracks are their own caller."""
    parts = track.str.extract_groups(r"^(.*):[^:]*:([^:]*)$")
    private = (tid >= PRIVATE_TRACK_MIN_TID) & (parts.struct.field("2") == tid.cast(pl.String))
    return pl.when(private.fill_null(False)).then(parts.struct.field("1")).otherwise(track)


def fb_optim_waits(spans: pl.DataFrame, min_wait_s: float) -> pl.DataFrame:
    """Each fb submission with the gap to the next optim submission of the same calling task."""
    key = ["segment", "pid", "_caller"]
    calls = (
        _closed(spans)
        .filter(pl.col("name").is_in(list(FORWARD_BACKWARD_CALLS + OPTIM_STEP_CALLS)))
        .with_columns(caller_track(pl.col("track"), pl.col("tid")).alias("_caller"))
        .sort([*key, "start_us"])
    )
    # An optim call right after an fb call of the same caller (in submission order) is one pair.
    follows_fb = (
        pl.all_horizontal(pl.col(c).eq_missing(pl.col(c).shift(1)) for c in key)
        & pl.col("name").shift(1).is_in(list(FORWARD_BACKWARD_CALLS))
        & pl.col("name").is_in(list(OPTIM_STEP_CALLS))
    )
    gap = (pl.col("start_us") - pl.col("end_us").shift(1)) / 1e6
    return (
        calls.select(
            follows_fb.fill_null(False).alias("_pair"),
            pl.coalesce("step", pl.col("step").shift(1)).cast(pl.Int64).alias("step"),
            pl.col("segment").cast(pl.Int32),
            pl.col("end_us").shift(1).alias("fb_end_us"),
            pl.col("start_us").alias("optim_start_us"),
            gap.alias("gap_s"),
            (gap > min_wait_s).alias("sequential"),
        )
        .filter("_pair")
        .drop("_pair")
        .collect()
    )


def step_transitions(spans: pl.DataFrame) -> pl.DataFrame:
    """SFT submit/finish pairs: was step k+1 submitted only after step k's results arrived?"""
    closed = _closed(spans).filter(pl.col("step").is_not_null())
    submit, finish = pl.collect_all(
        [
            closed.filter(pl.col("name") == "submit_batch")
            .group_by("segment", "step")
            .agg(pl.col("start_us").min().alias("sub_start"), pl.col("dur_us").sum().alias("sub_dur")),
            closed.filter(pl.col("name") == "finish_batch")
            .group_by("segment", "step")
            .agg(pl.col("end_us").max().alias("fin_end"), pl.col("dur_us").sum().alias("fin_dur")),
        ]
    )
    if submit.is_empty() or finish.is_empty():
        return pl.DataFrame(
            schema={"segment": pl.Int32, "step": pl.Int64, "sequential": pl.Boolean, "lost_s": pl.Float64}
        )
    nxt = submit.with_columns((pl.col("step") - 1).alias("step")).rename(
        {"sub_start": "next_start", "sub_dur": "next_dur"}
    )
    pairs = finish.join(nxt, on=["segment", "step"], how="inner").sort(["segment", "step"])
    return pairs.with_columns(
        (pl.col("next_start") >= pl.col("fin_end")).alias("sequential"),
        # Pipelined, step k+1's client work would have overlapped step k's result wait.
        pl.min_horizontal(pl.col("next_dur"), pl.col("fin_dur")).truediv(1e6).alias("lost_s"),
        pl.col("fin_end").alias("idle_from"),
        pl.col("next_start").alias("idle_to"),
    )
