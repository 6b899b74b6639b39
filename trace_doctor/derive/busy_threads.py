"""When a thread sat in user code and nothing else on it moved, and whether a heartbeat outage was then.

Without thread dumps the trace is the only place a GIL stall shows (FORMATS 4: "gaps on `main` with
no open span, or submit-only SDK spans that are suddenly long"), and the SDK's heartbeat warning is
the only reading of its background thread. Each alone has an innocent reading: a main thread busy in
user code with the GIL released (sleep, I/O, a blocking `.result()`) leaves the heartbeat running; a
heartbeat that fails while the client waits on results is the network or the service. Together (the
heartbeat failed for as long as a thread ran user code while nothing on it moved) they say every
thread of the process was stopped: a GIL held by user code, or the process suspended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from trace_doctor.derive.log_signals import LogLine
from trace_doctor.knowledge.tinker import (
    RESULT_WAIT_PHASES,
    SAMPLING_CALLS,
    SAVE_FOR_SAMPLING_CALLS,
    SUBMIT_ONLY_CALLS,
)

# Time inside these spans is the SDK's or the service's: a thread there waits, it does not run user code.
NOT_USER_CODE = frozenset({*SUBMIT_ONLY_CALLS, *SAMPLING_CALLS, *SAVE_FOR_SAMPLING_CALLS, *RESULT_WAIT_PHASES})
# Spans that are nothing but waiting for the service: a heartbeat outage as long as one of these,
# stretched, reads as the network or the service being down.
SERVICE_WAITS = frozenset({*SAMPLING_CALLS, *RESULT_WAIT_PHASES})
# An event this close to an interval's edge is its neighbour starting or ending, not a sign of life inside.
EDGE_SHARE = 0.02


@dataclass(frozen=True)
class Interval:
    """A stretch of one thread's time on the trace clock: what it was and where."""

    kind: str  # "span" (a user-code span) | "gap" (the main task had no span open) | "wait"
    name: str | None
    thread: str | None
    step: int | None
    segment: int | None
    start_us: float
    end_us: float

    @property
    def seconds(self) -> float:
        return (self.end_us - self.start_us) / 1e6

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "thread": self.thread,
            "step": self.step,
            "start_us": self.start_us,
            "end_us": self.end_us,
            "dur_s": round(self.seconds, 6),
        }


_COLUMNS = ["name", "thread", "step", "segment", "pid", "start_us", "end_us"]


def _user_code_spans(spans: pl.LazyFrame, min_s: float) -> pl.DataFrame:
    return (
        spans.filter(
            pl.col("closed")
            & pl.col("dur_us").is_not_null()
            & (pl.col("dur_us") >= min_s * 1e6)
            & (pl.col("depth") >= 1)
            & ~pl.col("name").is_in(sorted(NOT_USER_CODE))
        )
        .select(_COLUMNS)
        .with_columns(pl.lit("span").alias("kind"))
        .collect()
    )


def _main_gaps(spans: pl.LazyFrame, min_s: float) -> pl.DataFrame:
    """Stretches inside the main task where none of its spans was open (untraced code ran, or nothing could)."""
    track = ["segment", "pid", "track"]
    main = spans.filter(
        ((pl.col("track") == "main") | (pl.col("track") == "sync:MainThread"))
        & (pl.col("depth") >= 1)
        & pl.col("closed")
        & pl.col("end_us").is_not_null()
    )
    return (
        main.sort([*track, "start_us", "end_us"])
        .with_columns(pl.col("end_us").cum_max().shift(1).over(track).alias("_reached"))
        .filter(pl.col("start_us") - pl.col("_reached") > min_s * 1e6)
        .select(
            pl.lit(None, pl.String).alias("name"),
            "thread",
            "step",  # the step of the span that ended the gap: the gap is before it
            "segment",
            "pid",
            pl.col("_reached").alias("start_us"),
            pl.col("start_us").alias("end_us"),
            pl.lit("gap").alias("kind"),
        )
        .collect()
    )


def _quiet(candidates: pl.DataFrame, spans: pl.LazyFrame) -> pl.DataFrame:
    """The candidates inside which no span of the same thread (pid) started or ended.

    A thread running user code with the GIL held runs nothing else, and the SDK thread cannot emit the
    completion of a call made from it either; a task that merely awaits lets its siblings run.
    """
    if candidates.is_empty():
        return candidates
    indexed = candidates.with_row_index("_i")
    margin = ((pl.col("end_us") - pl.col("start_us")) * EDGE_SHARE).alias("_margin")
    left = indexed.select("_i", "segment", "pid", "start_us", "end_us", margin).lazy()
    ends = spans.select("segment", "pid", pl.col("start_us").alias("_t"))
    ends = pl.concat(
        [ends, spans.filter(pl.col("end_us").is_not_null()).select("segment", "pid", pl.col("end_us").alias("_t"))]
    )
    ends = ends.select(pl.col("segment").alias("_segment"), pl.col("pid").alias("_pid"), "_t")
    busy = (
        left.join_where(
            ends,
            pl.col("_t") > pl.col("start_us") + pl.col("_margin"),
            pl.col("_t") < pl.col("end_us") - pl.col("_margin"),
        )
        .filter(pl.col("_segment").eq_missing(pl.col("segment")) & pl.col("_pid").eq_missing(pl.col("pid")))
        .select("_i")
        .unique()
        .collect()
    )
    return indexed.filter(~pl.col("_i").is_in(busy.get_column("_i").implode())).drop("_i")


def busy_thread_stalls(spans: pl.LazyFrame, min_s: float) -> list[Interval]:
    """Intervals of at least `min_s` where a thread ran user code (a span that is no SDK call or wait, or
    a gap in the main task) and nothing else on that thread started or ended, in time order."""
    found = pl.concat([_user_code_spans(spans, min_s), _main_gaps(spans, min_s)], how="vertical_relaxed")
    quiet = _quiet(found, spans).sort("segment", "start_us", "end_us", nulls_last=True)
    return [
        Interval(r["kind"], r["name"], r["thread"], r["step"], r["segment"], r["start_us"], r["end_us"])
        for r in quiet.iter_rows(named=True)
    ]


def stretched_waits(spans: pl.LazyFrame, ratio: float, min_s: float) -> list[Interval]:
    """Service waits (result waits, sample round trips) longer than `ratio` x their name's median and
    `min_s` beyond it: the service, or the way to it, was slow then."""
    waits = spans.filter(
        pl.col("closed") & pl.col("dur_us").is_not_null() & pl.col("name").is_in(sorted(SERVICE_WAITS))
    ).with_columns(pl.col("dur_us").median().over("name").alias("_typical"))
    rows = (
        waits.filter(
            (pl.col("dur_us") > ratio * pl.col("_typical")) & (pl.col("dur_us") - pl.col("_typical") > min_s * 1e6)
        )
        .select(_COLUMNS)
        .sort("segment", "start_us", nulls_last=True)
        .collect()
    )
    return [
        Interval("wait", r["name"], r["thread"], r["step"], r["segment"], r["start_us"], r["end_us"])
        for r in rows.iter_rows(named=True)
    ]


@dataclass(frozen=True)
class OutageMatch:
    """A heartbeat outage and the stretch of the trace as long as it."""

    outage: list[LogLine]
    seconds: float  # the longest "failed for N seconds" of the outage
    stall: Interval

    def to_dict(self) -> dict[str, Any]:
        first = self.outage[0]
        return {
            "heartbeat": dict(first.cite(), failed_for_s=self.seconds, warnings=len(self.outage)),
            "stall": self.stall.to_dict(),
        }


def _closeness(a: float, b: float) -> float:
    """How far apart two durations are, as |log ratio| (0 = equal)."""
    return abs(math.log(a / b)) if a > 0 and b > 0 else math.inf


def match_outages(
    outages: list[list[LogLine]], stalls: list[Interval], waits: list[Interval], max_ratio: float
) -> tuple[list[OutageMatch], list[list[LogLine]]]:
    """(outages matched to a busy-thread stall, outages the service's waits explain as well or better).

    Log lines carry no time, so an outage is placed by its length: the stall within `max_ratio` of the
    seconds the heartbeat reports, closest first, each stall used once. An outage that a stretched
    service wait matches at least as closely is the network's or the service's, never the GIL's.
    """
    limit = math.log(max_ratio)
    free = list(stalls)
    matched: list[OutageMatch] = []
    service: list[list[LogLine]] = []
    for outage in sorted(outages, key=lambda ep: -max(ln.values["seconds"] for ln in ep)):
        seconds = max(ln.values["seconds"] for ln in outage)
        best = min(free, key=lambda s: _closeness(s.seconds, seconds), default=None)
        best_wait = min((_closeness(w.seconds, seconds) for w in waits), default=math.inf)
        if best is None or _closeness(best.seconds, seconds) > limit:
            if best_wait <= limit:
                service.append(outage)
            continue
        if best_wait <= _closeness(best.seconds, seconds):
            service.append(outage)
            continue
        free.remove(best)
        matched.append(OutageMatch(outage, seconds, best))
    matched.sort(key=lambda m: (m.stall.segment if m.stall.segment is not None else -1, m.stall.start_us))
    return matched, service
