"""A trace's event tables -> the `spans` table: pairing, segments, names, order and steps composed.

Segments. A resumed run appends a new process to the same file: fake pids restart at 0 and a new
`process_name` metadata event is written for a pid already named in the current segment. The new
segment starts at the event that triggered that metadata (the last non-M line before it).

Names. A span's track and thread come from its args (the cookbook's); otherwise the track from the
`thread_name` metadata of its tid (else the tid itself) and the thread from the `process_name`
metadata of its pid (else a string pid).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from trace_doctor.ingest.columnwise import gather_releasing
from trace_doctor.ingest.file_warnings import FileWarnings
from trace_doctor.ingest.span_args import with_track_thread
from trace_doctor.ingest.span_pairing import complete_spans, constant, pair_begin_end
from trace_doctor.ingest.span_steps import attribute_steps
from trace_doctor.ingest.trace_parse import SPAN_PHASES
from trace_doctor.model import SPANS_SCHEMA

# Phases other than spans and metadata are counted, not read: their names make the warning readable.
PHASE_NAMES = {
    "i": "instant",
    "I": "instant",
    "n": "async instant",
    "b": "async begin",
    "e": "async end",
    "C": "counter",
    "s": "flow start",
    "t": "flow step",
    "f": "flow end",
    "P": "sample",
    "O": "object snapshot",
    "N": "object created",
    "D": "object destroyed",
    "R": "mark",
    "c": "clock sync",
    "(": "context begin",
    ")": "context end",
}

# The spans table (SPANS_SCHEMA) and what it keeps of where each span came from.
SPAN_COLUMNS: dict[str, pl.DataType] = {
    **SPANS_SCHEMA,
    "cat": pl.String,
    "step_source": pl.String,
    "line_begin": pl.Int64,
    "line_end": pl.Int64,
    "source": pl.String,
}


def empty_spans() -> pl.DataFrame:
    """The spans table with no rows (every column present)."""
    return pl.DataFrame(schema=SPAN_COLUMNS)


def build_spans(holder: list[pl.DataFrame], meta: pl.DataFrame, source: str, warnings: FileWarnings) -> pl.DataFrame:
    """The spans of one file's events (taken out of `holder`, so the last reference to them can go
    early) and metadata rows (trace_parse's SPAN_EVENT_COLUMNS and META_COLUMNS)."""
    events = holder.pop()
    if events.height == 0:
        return empty_spans()
    events = _account_ignored_phases(events, source, warnings)
    segment = _segments(events.get_column("line"), meta)
    events = events.with_columns(segment.alias("segment"))
    meta = meta.with_columns(segment.alias("segment"))
    events = with_track_thread(events)
    # Pairing takes its events over (the only reference to them), so they go as their spans are made.
    complete_events = events.get_column("ph") == "X"
    if not bool(complete_events.any()):  # the cookbook writes no X events
        complete = complete_spans(events.clear())
        holder.append(events)
    elif bool(complete_events.all()):  # a profiler's trace: no copy of the events to split them
        complete = complete_spans(events)
        holder.append(events.clear())
    else:
        complete = complete_spans(events.filter(complete_events))
        holder.append(events.filter(~complete_events))
    del events, complete_events
    paired = pair_begin_end(holder, source, warnings)
    spans = pl.concat([paired, complete], how="vertical")
    del paired, complete  # the reordering below releases their columns as it copies them
    spans = _name_from_metadata(spans, meta)
    # Sorted before steps are attributed, whose lookup by start time then needs no sort of its own.
    # One sort key fewer when the file holds one process (the usual case): a third of the sort.
    keys = (
        ["start_us", "line_begin"] if constant(spans.get_column("segment")) else ["segment", "start_us", "line_begin"]
    )
    order = spans.select(pl.arg_sort_by(keys)).to_series()
    holder.append(spans)
    del spans
    spans = gather_releasing(holder, order)
    spans = attribute_steps(spans)
    return spans.with_columns(pl.lit(source).alias("source")).select(list(SPAN_COLUMNS))


def _account_ignored_phases(events: pl.DataFrame, source: str, warnings: FileWarnings) -> pl.DataFrame:
    """Events that are neither spans nor metadata are dropped, with one warning per phase."""
    known = events.get_column("ph").is_in([*SPAN_PHASES, "M"])
    if bool(known.all()):
        return events
    ignored = (
        events.filter(~known).group_by("ph").agg(pl.len().alias("n"), pl.col("line").min().alias("first")).sort("ph")
    )
    for ph, n, first in ignored.iter_rows():
        kind = PHASE_NAMES.get(ph, "unknown phase")
        problem = (
            f"{n} event(s) of phase {ph!r} ({kind}) ignored, first at line/event {first}: "
            "only B/E/X spans and M metadata are read"
        )
        warnings.add(None, problem)
    return events.filter(known)


def _segments(event_lines: pl.Series, meta: pl.DataFrame) -> pl.Expr:
    """Segment number per row (an expression on `line`): a repeated `process_name` for a pid marks a resumed process."""
    names = meta.filter(pl.col("name") == "process_name").select("line", "pid", "pid_label")
    if names.height <= 1:
        return pl.lit(0, pl.Int32)
    boundaries: list[int] = []
    named: set[tuple[Any, Any]] = set()
    for line, pid, label in names.iter_rows():
        if (pid, label) in named:
            # The new process's first event precedes its metadata lines.
            index = int(event_lines.search_sorted(line, side="left")) - 1
            boundary = (
                int(event_lines[index])
                if index >= 0 and (not boundaries or event_lines[index] > boundaries[-1])
                else line
            )
            boundaries.append(boundary)
            named = set()
        named.add((pid, label))
    if not boundaries:
        return pl.lit(0, pl.Int32)
    return pl.lit(pl.Series(boundaries, dtype=pl.Int64)).search_sorted(pl.col("line"), side="right").cast(pl.Int32)


def _name_from_metadata(spans: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    """Fill track/thread from M events: thread_name per (pid, tid), process_name per pid."""
    if spans.get_column("track").null_count() == 0 and spans.get_column("thread").null_count() == 0:
        # Every span names its track and thread (the cookbook's args): nothing to look up.
        return spans.with_columns(
            (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
            pl.when(pl.col("step").is_not_null()).then(pl.lit("args")).otherwise(None).alias("step_source"),
        ).drop("pid_label", "tid_label")
    meta = meta.with_columns(pl.coalesce("_label", pl.col("args").str.json_path_match("$.name")).alias("_label"))
    thread_names = (
        meta.filter(pl.col("name") == "thread_name")
        .unique(["segment", "pid", "pid_label", "tid", "tid_label"], keep="first", maintain_order=True)
        .select("segment", "pid", "pid_label", "tid", "tid_label", pl.col("_label").alias("_thread_name"))
    )
    process_names = (
        meta.filter(pl.col("name") == "process_name")
        .unique(["segment", "pid", "pid_label"], keep="first", maintain_order=True)
        .select("segment", "pid", "pid_label", pl.col("_label").str.strip_suffix(" Thread").alias("_process_name"))
    )
    # Each name is looked up on the key columns alone and attached in row order: a join of the
    # whole spans table would copy every column of it.
    thread_keys = ["segment", "pid", "pid_label", "tid", "tid_label"]
    thread_name = (
        spans.select(thread_keys)
        .join(thread_names, on=thread_keys, how="left", nulls_equal=True, maintain_order="left")
        .get_column("_thread_name")
    )
    process_keys = ["segment", "pid", "pid_label"]
    process_name = (
        spans.select(process_keys)
        .join(process_names, on=process_keys, how="left", nulls_equal=True, maintain_order="left")
        .get_column("_process_name")
    )
    spans = spans.with_columns(thread_name, process_name)
    return spans.with_columns(
        pl.coalesce("track", "_thread_name", "tid_label", pl.col("tid").cast(pl.String)).alias("track"),
        pl.coalesce("thread", "_process_name", "pid_label").alias("thread"),
        (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
        pl.when(pl.col("step").is_not_null()).then(pl.lit("args")).otherwise(None).alias("step_source"),
    ).drop("_thread_name", "_process_name", "pid_label", "tid_label")
