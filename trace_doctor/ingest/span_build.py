"""A trace's paired spans -> the `spans` table: names, order and steps composed.

Pairing, segments and ignored phases are done as the file is read (span_stream.py).

Names. A span's track and thread come from its args (the cookbook's); otherwise the track from the
`thread_name` metadata of its tid (else the tid itself) and the thread from the `process_name`
metadata of its pid (else a string pid).
"""

from __future__ import annotations

import polars as pl

from trace_doctor.ingest.columnwise import gather_releasing
from trace_doctor.ingest.file_warnings import FileWarnings
from trace_doctor.ingest.span_pairing import constant
from trace_doctor.ingest.span_steps import attribute_steps
from trace_doctor.ingest.span_stream import SpanStream
from trace_doctor.model import SPANS_SCHEMA

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


def build_spans(stream: SpanStream, meta: pl.DataFrame, source: str, warnings: FileWarnings) -> pl.DataFrame:
    """The spans of one file, from its events as paired while they were read (span_stream.py) and
    its metadata rows (trace_parse's META_COLUMNS); the file's warnings go to `warnings`."""
    built = stream.finish()
    if built is None:
        return empty_spans()
    spans, unmatched = built
    # Ignored phases first, then unmatched E events: the order the whole-table builder reported them.
    stream.ignored_phase_warnings(warnings)
    warnings.absorb(unmatched)
    meta = meta.with_columns(stream.segments.expr())
    spans = _name_from_metadata(spans, meta)
    # Sorted before steps are attributed, whose lookup by start time then needs no sort of its own.
    # One sort key fewer when the file holds one process (the usual case): a third of the sort.
    keys = (
        ["start_us", "line_begin"] if constant(spans.get_column("segment")) else ["segment", "start_us", "line_begin"]
    )
    order = spans.select(pl.arg_sort_by(keys)).to_series()
    holder = [spans]
    del spans  # the reordering releases the spans' columns as it copies them
    spans = gather_releasing(holder, order)
    spans = attribute_steps(spans)
    return spans.with_columns(pl.lit(source).alias("source")).select(list(SPAN_COLUMNS))


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
