"""Choose what the HTML report embeds so it stays within its size budget for any run size.

The report keeps in full what a reader looks at (the first, the typical and the worst steps, and
the steps findings point to) and aggregates the rest; every cut is recorded as a sentence that the
report prints, so nothing is summarised silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

# Budgets at scale 1.0; html.write_html halves the scale until the written file fits.
SPAN_BUDGET = 12_000
GANTT_STEPS_MAX = 8
FINDING_STEPS_MAX = 4
STEP_POINTS_BUDGET = 4_000
FRAME_NODES_BUDGET = 2_500
PROFILES_MAX = 4
DUMP_POINTS_BUDGET = 3_000
LOG_ROWS_BUDGET = 120
WARNING_ROWS_BUDGET = 200
TRACK_ROWS_MAX = 48


@dataclass
class Budget:
    """Limits for one rendering attempt; `scaled` shrinks every limit together."""

    spans: int = SPAN_BUDGET
    step_points: int = STEP_POINTS_BUDGET
    frame_nodes: int = FRAME_NODES_BUDGET
    dump_points: int = DUMP_POINTS_BUDGET
    log_rows: int = LOG_ROWS_BUDGET
    warning_rows: int = WARNING_ROWS_BUDGET
    # None = embed every ingest warning in the JSON document.
    json_warnings: int | None = None

    def scaled(self, factor: float) -> Budget:
        def shrink(value: int) -> int:
            return max(50, int(value * factor))

        return Budget(
            spans=shrink(self.spans),
            step_points=shrink(self.step_points),
            frame_nodes=shrink(self.frame_nodes),
            dump_points=shrink(self.dump_points),
            log_rows=shrink(self.log_rows),
            warning_rows=shrink(self.warning_rows),
            json_warnings=shrink(self.json_warnings if self.json_warnings is not None else 20_000),
        )


@dataclass
class Summarised:
    """Sentences saying what the report aggregated or left out, in the order they happened."""

    notes: list[str] = field(default_factory=list)

    def add(self, note: str) -> None:
        self.notes.append(note)


@dataclass
class StepChoice:
    """Steps the Gantt shows in full, each with why it was chosen."""

    steps: list[int]
    reasons: dict[int, list[str]]


def live_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Training rows that count: not superseded by a resume, not eval-only rows."""
    frame = steps
    if "superseded" in frame.columns:
        frame = frame.filter(~pl.col("superseded").fill_null(False))
    if "is_eval_row" in frame.columns:
        frame = frame.filter(~pl.col("is_eval_row").fill_null(False))
    return frame


def choose_gantt_steps(step_times: pl.DataFrame, finding_steps: list[list[int]], traced_steps: set[int]) -> StepChoice:
    """First, typical (closest to the median) and worst traced steps, plus the first steps findings name."""
    reasons: dict[int, list[str]] = {}

    def pick(step: int | None, why: str) -> None:
        if step is None or step not in traced_steps:
            return
        if step not in reasons and len(reasons) >= GANTT_STEPS_MAX:
            return
        if why not in reasons.setdefault(step, []):
            reasons[step].append(why)

    timed = pl.DataFrame()
    if {"step", "total_s"} <= set(step_times.columns):
        timed = step_times.select("step", "total_s").drop_nulls().filter(pl.col("step").is_in(sorted(traced_steps)))
    ordered = sorted(traced_steps)
    if ordered:
        pick(ordered[0], "first")
    if len(timed):
        median = timed["total_s"].median()
        typical = timed.with_columns((pl.col("total_s") - median).abs().alias("distance")).sort(["distance", "step"])
        pick(int(typical["step"][0]), "typical")
        worst = timed.sort(["total_s", "step"], descending=[True, False])
        pick(int(worst["step"][0]), "slowest")
    elif len(ordered) > 2:
        pick(ordered[len(ordered) // 2], "middle")
    for steps in finding_steps:
        for step in sorted(steps)[:FINDING_STEPS_MAX]:
            pick(step, "in a finding")
    return StepChoice(sorted(reasons), reasons)


def step_windows(
    spans: pl.DataFrame | pl.LazyFrame, steps: list[int], step_times: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Time window (start, last end) of each chosen step: its attributed spans' extent, reaching back to
    cover the step's `time/total` when the spans the trace attributes to it cover less (a sync RL step's
    sampling and rollouts carry no step: only the train step does), never before the previous step's end.
    """
    spans = spans.lazy()
    empty = pl.DataFrame(schema={"step": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64})
    if not steps or "step" not in spans.collect_schema().names():
        return empty
    extents = (
        spans.filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("start_us").min(), pl.col("end_us").max())
        .sort("step")
        .collect()
    )
    if step_times is not None and {"step", "total_s"} <= set(step_times.columns):
        totals = step_times.group_by("step").agg(pl.col("total_s").max())
        extents = extents.join(totals, on="step", how="left").with_columns(
            pl.col("end_us").shift(1).alias("previous_end")
        )
        reach = pl.col("end_us") - pl.col("total_s").fill_null(0.0) * 1e6
        earliest = pl.max_horizontal(reach, pl.col("previous_end").fill_null(reach))
        extents = extents.with_columns(pl.min_horizontal(pl.col("start_us"), earliest).alias("start_us"))
    return extents.filter(pl.col("step").is_in(steps)).select("step", "start_us", "end_us")


def spans_in_windows(
    spans: pl.DataFrame | pl.LazyFrame, windows: pl.DataFrame, budget: int, notes: Summarised
) -> pl.DataFrame:
    """Spans overlapping any window, keeping the longest ones when more than `budget` overlap.

    Only those spans are read: on a stored table, the scan is filtered by the windows."""
    spans = spans.lazy()
    total = spans.select(pl.len()).collect().item()
    if total == 0:
        return spans.head(0).collect()
    if windows.is_empty():
        # The earliest `budget` spans: a cut on the start times alone, then the spans up to it.
        cut = spans.select(pl.col("start_us").bottom_k(budget).max()).collect().item()
        chosen = spans.filter(pl.col("start_us") <= cut).collect().sort("start_us").head(budget)
        if len(chosen) < total:
            notes.add(f"The timeline shows the first {len(chosen):,} of {total:,} spans (no span names a step).")
        return chosen
    overlap = pl.lit(False)
    for start, end in windows.select("start_us", "end_us").iter_rows():
        overlap = overlap | ((pl.col("start_us") < end) & (pl.col("end_us") > start))
    chosen = spans.filter(overlap).collect()
    if len(chosen) > budget:
        kept = chosen.sort(["dur_us", "start_us"], descending=[True, False]).head(budget)
        shortest = kept["dur_us"].min()
        notes.add(
            f"The timeline of the chosen steps holds {len(chosen):,} spans; it draws the {budget:,} longest "
            f"and leaves out {len(chosen) - budget:,} shorter than {shortest / 1000:.1f} ms."
        )
        chosen = kept
    return chosen.sort(["start_us", "depth"])


def bin_steps(frame: pl.DataFrame, columns: list[str], budget: int, notes: Summarised, what: str) -> pl.DataFrame:
    """Per-step rows as they are, or averaged over equal bins of consecutive steps above `budget` rows."""
    if len(frame) <= budget:
        return frame
    width = math.ceil(len(frame) / budget)
    binned = (
        frame.sort("step")
        .with_row_index("row")
        .with_columns((pl.col("row") // width).alias("bin"))
        .group_by("bin")
        .agg(pl.col("step").first(), *[pl.col(c).mean() for c in columns])
        .sort("bin")
        .drop("bin")
    )
    notes.add(f"{what} averages every {width} consecutive steps ({len(frame):,} steps in {len(binned):,} points).")
    return binned


def prune_frames(frames: pl.DataFrame, budget: int, notes: Summarised, profile: str) -> pl.DataFrame:
    """The heaviest frames of one profile, closed under ancestry so the icicle stays a tree."""
    if len(frames) <= budget:
        return frames
    parent_of = dict(zip(frames["frame_id"].to_list(), frames["parent_id"].to_list(), strict=True))
    keep: set[int] = set()
    for frame_id in frames.sort(["time_s", "frame_id"], descending=[True, False])["frame_id"].to_list():
        if len(keep) >= budget:
            break
        node = frame_id
        while node is not None and node not in keep:
            keep.add(node)
            node = parent_of.get(node)
    kept = frames.filter(pl.col("frame_id").is_in(sorted(keep)))
    notes.add(f"The profile {profile} shows its {len(kept):,} heaviest of {len(frames):,} frames.")
    return kept
