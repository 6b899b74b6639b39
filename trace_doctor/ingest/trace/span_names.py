"""Track and thread names of spans whose events do not carry them, from the trace's metadata.

A span's track and thread come from its args (the cookbook's); otherwise the track from the
`thread_name` metadata of its tid (else the tid itself) and the thread from the `process_name`
metadata of its pid (else a string pid). The first name given to a (segment, pid, tid) wins.
"""

from __future__ import annotations

import polars as pl

THREAD_KEYS = ["segment", "pid", "pid_label", "tid", "tid_label"]
PROCESS_KEYS = ["segment", "pid", "pid_label"]


class SpanNames:
    """The file's thread and process names, looked up per span."""

    def __init__(self, thread_names: pl.DataFrame, process_names: pl.DataFrame) -> None:
        self.thread_names = thread_names
        self.process_names = process_names

    @classmethod
    def from_meta(cls, meta: pl.DataFrame) -> SpanNames:
        """From the file's metadata rows (trace_parse's META_COLUMNS plus `segment`), in file order."""
        meta = meta.with_columns(pl.coalesce("_label", pl.col("args").str.json_path_match("$.name")).alias("_label"))
        thread_names = (
            meta.filter(pl.col("name") == "thread_name")
            .unique(THREAD_KEYS, keep="first", maintain_order=True)
            .select(*THREAD_KEYS, pl.col("_label").alias("_thread_name"))
        )
        process_names = (
            meta.filter(pl.col("name") == "process_name")
            .unique(PROCESS_KEYS, keep="first", maintain_order=True)
            .select(*PROCESS_KEYS, pl.col("_label").str.strip_suffix(" Thread").alias("_process_name"))
        )
        return cls(thread_names, process_names)

    @staticmethod
    def plain(spans: pl.DataFrame) -> pl.DataFrame:
        """Spans that all name their track and thread: only the derived columns."""
        return spans.with_columns(
            (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
            pl.when(pl.col("step").is_not_null()).then(pl.lit("args")).otherwise(None).alias("step_source"),
        ).drop("pid_label", "tid_label")

    def apply(self, spans: pl.DataFrame) -> pl.DataFrame:
        """Fill track/thread from the metadata: thread_name per (pid, tid), process_name per pid."""
        if spans.get_column("track").null_count() == 0 and spans.get_column("thread").null_count() == 0:
            # Every span names its track and thread (the cookbook's args): nothing to look up.
            return self.plain(spans)
        # Each name is looked up on the key columns alone and attached in row order: a join of the
        # whole spans table would copy every column of it.
        thread_name = (
            spans.select(THREAD_KEYS)
            .join(self.thread_names, on=THREAD_KEYS, how="left", nulls_equal=True, maintain_order="left")
            .get_column("_thread_name")
        )
        process_name = (
            spans.select(PROCESS_KEYS)
            .join(self.process_names, on=PROCESS_KEYS, how="left", nulls_equal=True, maintain_order="left")
            .get_column("_process_name")
        )
        spans = spans.with_columns(thread_name, process_name)
        return spans.with_columns(
            pl.coalesce("track", "_thread_name", "tid_label", pl.col("tid").cast(pl.String)).alias("track"),
            pl.coalesce("thread", "_process_name", "pid_label").alias("thread"),
            (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
            pl.when(pl.col("step").is_not_null()).then(pl.lit("args")).otherwise(None).alias("step_source"),
        ).drop("_thread_name", "_process_name", "pid_label", "tid_label")
