"""Paired spans -> the sorted, named, step-attributed spans table on disk, in bounded memory.

Spans close in file order (at their E event), but the table is ordered by start. Two passes:

1. As spans close (span_stream.py), they are buffered and written to scratch Parquet files, each
   sorted by (segment, start, line) in row groups whose statistics give each group's start range.
   What the second pass needs of the whole file is kept on the side, and it is small: the stepped
   spans (the covers that steps are attributed from: a few per step), a sample of start times per
   segment, and whether pids, segments and names vary.
2. The table is then written in windows of start time (cut at the sampled quantiles): each window's
   spans are read back from every scratch file (row groups outside the window are skipped), named,
   sorted and attributed exactly as the whole table was, and appended to the final Parquet file.

The order is total (segment, start, line of the B event: lines are unique in a file), so sorting
window by window gives the whole table's order; names and steps of a span depend only on the span,
the file's metadata and the covers, never on its neighbours. Memory is a buffer and a window.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import polars as pl

from trace_doctor.ingest.storage.columnwise import gather_releasing
from trace_doctor.ingest.storage.stored_table import MEMORY_ROWS, PartWriter, disk_failed, scratch_file
from trace_doctor.ingest.trace.span_names import SpanNames
from trace_doctor.ingest.trace.span_pairing import PAIRED_SCHEMA
from trace_doctor.ingest.trace.span_steps import StepCovers

# Spans buffered before a scratch file is written, and spans per window of the second pass:
# ~15-30 MB of spans each, the most this stage holds, whatever the file's length. A file of at most
# MEMORY_ROWS spans is never spilled: it is sorted in memory, as one window.
BUFFER_ROWS = 200_000
WINDOW_ROWS = 250_000
SCRATCH_ROW_GROUP = 16_384
# Every SAMPLE_EVERY-th start of each scratch file is kept to cut the windows.
SAMPLE_EVERY = 512
SORT_KEYS = ["segment", "start_us", "line_begin"]
COVER_COLUMNS = ["segment", "pid", "start_us", "end_us", "step", "line_begin"]


class ColumnRange:
    """Enough of a column's values to tell whether it is constant, as span_pairing.constant does."""

    def __init__(self) -> None:
        self.rows = 0
        self.nulls = 0
        self.low: int | None = None
        self.high: int | None = None

    def observe(self, column: pl.Series) -> None:
        self.rows += column.len()
        self.nulls += column.null_count()
        if column.null_count() < column.len():
            low, high = column.min(), column.max()
            self.low = low if self.low is None else min(self.low, low)
            self.high = high if self.high is None else max(self.high, high)

    def constant(self) -> bool:
        return self.nulls == self.rows or (self.nulls == 0 and self.low == self.high)


class SpanSpill:
    """Pass one: closed spans (span_pairing's PAIRED_SCHEMA) to sorted scratch files."""

    def __init__(self) -> None:
        self.height = 0
        self.files: list[Path] = []
        self.named = True  # every span so far carries its track and thread
        self.pids = ColumnRange()
        self.segments = ColumnRange()
        self._buffer: list[pl.DataFrame] = []
        self._buffered = 0
        self._disk = True  # False once the disk refused a scratch file: the rest stays in memory
        self._covers: list[pl.DataFrame] = []
        self._samples: list[pl.DataFrame] = []

    def add(self, spans: pl.DataFrame) -> None:
        if spans.height == 0:
            return
        self.height += spans.height
        self.named = self.named and spans.get_column("track").null_count() == 0
        self.named = self.named and spans.get_column("thread").null_count() == 0
        self.pids.observe(spans.get_column("pid"))
        self.segments.observe(spans.get_column("segment"))
        stepped = spans.filter(pl.col("step").is_not_null() & pl.col("closed"))
        if stepped.height:
            self._covers.append(stepped.select(COVER_COLUMNS))
        self._buffer.append(spans)
        self._buffered += spans.height
        if self._disk and self._buffered >= (BUFFER_ROWS if self.files else max(BUFFER_ROWS, MEMORY_ROWS + 1)):
            self._flush()

    def _flush(self) -> None:
        if not self._buffer or not self._disk:
            return
        path = scratch_file("spans-pass1-")
        if path is None:  # nowhere to write: the spans stay in memory (the user is told once)
            self._disk = False
            return
        # Sorted a column at a time, each buffered column released once copied: the first flush holds
        # MEMORY_ROWS spans, and a whole-table sort would hold them twice (the peak of a long trace).
        holder = [pl.concat(self._buffer, how="vertical", rechunk=False)]
        self._buffer = []
        order = holder[0].select(pl.arg_sort_by(SORT_KEYS)).to_series()
        frame = gather_releasing(holder, order)
        try:
            frame.write_parquet(path, compression="lz4", row_group_size=SCRATCH_ROW_GROUP, statistics=True)
        except Exception as exc:  # noqa: BLE001 - a full disk is a polars ComputeError too
            with contextlib.suppress(OSError):
                path.unlink()
            disk_failed(exc)
            self._disk = False
            self._buffer = [frame]  # kept in memory (sorted, which is no matter)
            return
        self._buffered = 0
        self.files.append(path)
        usable = frame.select("segment", "start_us", "line_begin").filter(pl.col("start_us").is_finite())
        self._samples.append(usable.gather_every(SAMPLE_EVERY))

    def finish(self) -> None:
        if self.files:
            self._flush()

    def remainder(self) -> pl.DataFrame | None:
        """The spans still in memory after some were spilled (the disk refused the rest)."""
        if not self.files or not self._buffer:
            return None
        return pl.concat(self._buffer, how="vertical", rechunk=False)

    def held(self) -> pl.DataFrame | None:
        """All the spans, when none was spilled (a small file)."""
        if self.files:
            return None
        frames, self._buffer, self._buffered = self._buffer, [], 0
        if not frames:
            return pl.DataFrame(schema=PAIRED_SCHEMA)
        # Not copied into one chunk: the reordering copies every column anyway.
        return pl.concat(frames, how="vertical", rechunk=False)

    def covers(self) -> pl.DataFrame:
        """The stepped spans in table order."""
        if not self._covers:
            return pl.DataFrame(schema={c: PAIRED_SCHEMA[c] for c in COVER_COLUMNS})
        return pl.concat(self._covers, how="vertical").sort(SORT_KEYS)

    def windows(self) -> list[pl.Expr]:
        """Row filters that cut the table into consecutive windows of its order."""
        samples = (
            pl.concat(self._samples, how="vertical")
            if self._samples
            else pl.DataFrame(schema={"segment": pl.Int32, "start_us": pl.Float64, "line_begin": pl.Int64})
        )
        # Segments are numbered 0, 1, ... in a file; one with no finite start still gets its windows.
        low, high = self.segments.low, self.segments.high
        segments = range(int(low), int(high) + 1) if low is not None and high is not None else range(0)
        filters: list[pl.Expr] = []
        step = max(1, WINDOW_ROWS // SAMPLE_EVERY)
        for segment in segments:
            in_segment = pl.col("segment") == segment
            starts = (
                samples.filter(pl.col("segment") == segment)
                .select("start_us", "line_begin")
                .sort("start_us", "line_begin")
            )
            cuts = sorted(set(starts.gather_every(step, offset=step).iter_rows())) if starts.height > step else []
            filters.append(in_segment & pl.col("start_us").is_null())
            bounds: list[tuple[float, int] | None] = [None, *cuts, None]
            for lo, hi in zip(bounds, bounds[1:], strict=False):
                filters.append(in_segment & pl.col("start_us").is_not_null() & _between(lo, hi))
        return filters

    def discard(self) -> None:
        for path in self.files:
            with contextlib.suppress(OSError):
                path.unlink()
        self.files = []


def _between(lo: tuple[float, int] | None, hi: tuple[float, int] | None) -> pl.Expr:
    """Spans from the cut `lo` (a span's start and line, included) to `hi` (excluded) in (start, line)
    order. Cut by (start, line), not start alone: spans that share one start (an event repeated) are
    windows of their own instead of one window of them all. The plain range on the start goes first,
    so the row groups outside it are still skipped on their statistics."""
    start, line = pl.col("start_us"), pl.col("line_begin")
    window = pl.lit(True)
    if lo is not None and hi is not None and lo[0] == hi[0]:
        return (start == lo[0]) & (line >= lo[1]) & (line < hi[1])
    if lo is not None:
        window = window & (start >= lo[0]) & ((start > lo[0]) | (line >= lo[1]))
    if hi is not None:
        window = window & (start <= hi[0]) & ((start < hi[0]) | (line < hi[1]))
    return window


def write_sorted(spill: SpanSpill, names: SpanNames | None, source: str, out: PartWriter) -> None:
    """Pass two: the spilled spans, window by window, named, in order and attributed, into `out`."""
    from trace_doctor.ingest.trace.span_build import SPAN_COLUMNS

    spill.finish()
    covers = StepCovers.of(
        spill.covers(),
        total=spill.height,
        by=[name for name, values in (("segment", spill.segments), ("pid", spill.pids)) if not values.constant()],
    )
    held = spill.held()

    def write_window(holder: list[pl.DataFrame]) -> None:
        # Taken out of `holder`, so the caller holds no reference: columns go as they are copied.
        spans = holder.pop()
        if spans.height == 0:
            return
        spans = names.apply(spans) if names is not None else SpanNames.plain(spans)
        # Reordered a column at a time, each released once copied: the peak is the window and
        # one column, not two windows.
        order = spans.select(pl.arg_sort_by(["start_us", "line_begin"])).to_series()
        holder.append(spans)
        del spans
        spans = covers.attribute(gather_releasing(holder, order))
        out.write(spans.with_columns(pl.lit(source).alias("source")).select(list(SPAN_COLUMNS)))

    try:
        if held is not None:
            # A small file: its segments in order, each sorted whole (what the windows would do).
            segments = held.get_column("segment").unique().sort().to_list() if held.height else []
            if len(segments) <= 1:
                holder = [held]
                del held
                write_window(holder)
            else:
                for segment in segments:
                    write_window([held.filter(pl.col("segment") == segment)])
        else:
            # Spilled: more spans than `out` keeps in memory, so every window goes to disk as it is
            # written, rather than the first few being held until the count is passed (the windows
            # are the parts either way; held, they were ~60 MB on top of the window being sorted).
            out.persist()
            scan = pl.scan_parquet(spill.files)
            remainder = spill.remainder()
            for window in spill.windows():
                part = scan.filter(window).collect()
                if remainder is not None:
                    part = pl.concat([part, remainder.filter(window)], how="vertical")
                write_window([part])
    finally:
        spill.discard()
