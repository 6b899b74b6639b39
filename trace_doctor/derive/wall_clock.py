"""When steps ran, in UTC: what support needs to find a run's requests in the service's own logs.

A cookbook run records durations, not times (FORMATS.md 1.1, 2, 5): metrics.jsonl rows have no
timestamp, logs.log lines have none, and trace_events.jsonl's `ts` is `time.perf_counter()` (on
Linux the time since boot), so a step's place on the calendar is known only when the run recorded a
wall clock of its own:
- a trace whose clock is the Unix epoch (other tracers than the cookbook's write one);
- a metric holding the wall-clock time of its row (`wall_time`, W&B's `_timestamp`), in seconds
  since the epoch: the row is written as its step ends, so the step spans [time - total, time].
Other times the run recorded are kept as anchors, not step windows: W&B's process start (UTC),
pyinstrument profiles' start times (epoch), task dumps' and timed log lines' times (local time of
the training machine, its zone not recorded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import polars as pl

from trace_doctor.model import RunTables

# A wall clock reads between these (Unix seconds). A since-boot clock would need 45 years of uptime to
# reach the first; no Tinker run is older than it.
EPOCH_FIRST_S = datetime(2015, 1, 1, tzinfo=UTC).timestamp()
EPOCH_LAST_S = datetime(2100, 1, 1, tzinfo=UTC).timestamp()
FIRST_YEAR = datetime.fromtimestamp(EPOCH_FIRST_S, tz=UTC).year
# Metrics that hold the wall-clock time of their row, in Unix seconds, in the order they are trusted.
WALL_CLOCK_METRICS = ("wall_time", "_timestamp", "timestamp", "time/wall_clock")
TRACE_BASIS = "trace timestamps (Unix epoch)"
NO_WALL_CLOCK = (
    "this run recorded no wall-clock time for its steps: the cookbook's metrics.jsonl and logs.log carry none, "
    "and trace_events.jsonl (enable_trace=True) times spans with time.perf_counter(), a clock that starts at "
    "boot, not a date. To give support a window next time: log the wall clock with each step's metrics "
    "(`ml_logger.log_metrics({'wall_time': time.time()}, step=step)`, read back as `wall_time`), or run "
    "with W&B (its history stamps each step), or note the UTC time (`date -u`) when the slowdown shows."
)


@dataclass(frozen=True)
class StepWindow:
    """One step's span on the calendar (UTC)."""

    step: int
    start: datetime | None
    end: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "start_utc": self.start.isoformat() if self.start else None,
            "end_utc": self.end.isoformat(),
            "seconds": round((self.end - self.start).total_seconds(), 6) if self.start else None,
        }


@dataclass
class WallClock:
    """The chosen steps' UTC windows and where they came from (`basis`: None when the run recorded no
    wall clock per step, said in `note`), and the other times the run recorded (`anchors`)."""

    basis: str | None
    steps: list[int] = field(default_factory=list)
    windows: list[StepWindow] = field(default_factory=list)
    anchors: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "slow_steps": [w.to_dict() for w in self.windows]
            or [{"step": s, "start_utc": None, "end_utc": None, "seconds": None} for s in self.steps],
            "other_times_recorded": self.anchors,
            "note": self.note,
        }


def _utc(seconds: float | None) -> datetime | None:
    if seconds is None or not math.isfinite(seconds) or not EPOCH_FIRST_S <= seconds <= EPOCH_LAST_S:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


def _trace_windows(run: RunTables, steps: list[int]) -> list[StepWindow] | None:
    """The steps' extents on the trace, when its clock is the epoch (every span, not only theirs)."""
    if run.height("spans") == 0:
        return None
    spans = run.scan("spans")
    bounds = spans.select(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b")).collect()
    first, last = bounds["a"][0], bounds["b"][0]
    if first is None or _utc(first / 1e6) is None or (last is not None and _utc(last / 1e6) is None):
        return None
    extent = (
        spans.filter(pl.col("step").is_in(steps))
        .group_by("step")
        .agg(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b"))
        .sort("step")
        .collect()
    )
    windows = []
    for row in extent.iter_rows(named=True):
        start, end = _utc((row["a"] or 0) / 1e6), _utc((row["b"] if row["b"] is not None else row["a"]) / 1e6)
        if end is not None:
            windows.append(StepWindow(int(row["step"]), start, end))
    return windows


def _metric_windows(run: RunTables, step_times: pl.DataFrame | None, steps: list[int]) -> tuple[str, list] | None:
    """(the metric, the steps' windows) from the first wall-clock metric whose values are epoch seconds."""
    table = run.steps
    totals: dict[int, float] = {}
    if step_times is not None and {"step", "total_s"} <= set(step_times.columns):
        totals = {s: t for s, t in step_times.select("step", "total_s").iter_rows() if s is not None and t is not None}
    live = table
    if "superseded" in table.columns:
        live = live.filter(~pl.col("superseded").fill_null(False))
    if "is_eval_row" in table.columns:
        live = live.filter(~pl.col("is_eval_row").fill_null(False))
    for name in WALL_CLOCK_METRICS:
        if name not in live.columns or not live.schema[name].is_numeric():
            continue
        stamps = live.select("step", pl.col(name).cast(pl.Float64)).drop_nulls()
        if stamps.is_empty() or any(_utc(v) is None for v in (stamps[name].min(), stamps[name].max())):
            continue
        chosen = stamps.filter(pl.col("step").is_in(steps)).group_by("step").agg(pl.col(name).max()).sort("step")
        windows = []
        for step, seconds in chosen.iter_rows():
            end = _utc(seconds)
            total = totals.get(step)
            start = _utc(seconds - total) if total is not None and math.isfinite(total) else None
            if end is not None:
                windows.append(StepWindow(int(step), start, end))
        return name, windows
    return None


def _span(label: str, values: list[Any], zone: str) -> dict[str, Any] | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    first, last = min(values), max(values)
    return {"what": label, "first": first.isoformat(), "last": last.isoformat(), "zone": zone}


def _anchors(run: RunTables) -> list[dict[str, Any]]:
    """Every other time the run recorded, first and last, with its zone."""
    anchors = []
    for meta in run.meta.wandb:
        if meta.started_at:
            anchors.append(
                {"what": "W&B process start", "first": meta.started_at, "last": meta.started_at, "zone": "UTC"}
            )
    if not run.profiles.is_empty() and "start_time" in run.profiles.columns:
        starts = [_utc(v) for v in run.profiles["start_time"].to_list()]
        found = _span("pyinstrument profile starts", starts, "UTC")
        if found:
            anchors.append(found)
    local = "local time of the training machine (zone not recorded)"
    for label, table in (("task dumps", run.task_snapshots), ("timed log lines", run.log_events)):
        if "timestamp" in table.columns and not table.is_empty():
            # A time before any run is no calendar time: a stamp that carried no date (moreutils `ts`'s default,
            # `ts -s`) is read in a year long past (parsers/logs.py DATELESS_YEAR).
            dated = [v for v in table["timestamp"].drop_nulls().to_list() if v.year >= FIRST_YEAR]
            found = _span(label, dated, local)
            if found:
                anchors.append(found)
    return anchors


def wall_clock(run: RunTables, step_times: pl.DataFrame | None, steps: list[int]) -> WallClock:
    """The UTC windows of `steps` (see the module docstring for where they can come from)."""
    anchors = _anchors(run)
    traced = _trace_windows(run, steps) if steps else None
    if traced:
        return WallClock(TRACE_BASIS, steps, traced, anchors)
    metric = _metric_windows(run, step_times, steps) if steps else None
    if metric is not None and metric[1]:
        name, windows = metric
        note = "" if all(w.start for w in windows) else "a step with no recorded total has only its end time"
        return WallClock(f"metric `{name}` (Unix seconds, written as each step ends)", steps, windows, anchors, note)
    note = NO_WALL_CLOCK if steps else "no step was timed, so there is no slow step to place in time"
    if anchors:
        note += " The times the run did record are listed under other_times_recorded."
    return WallClock(None, steps, [], anchors, note)
