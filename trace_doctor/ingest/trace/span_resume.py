"""A trace read's state at its last line, as plain data, and a SpanStream restored from it.

What a read of more lines needs from the read before (span_stream.py): the B events still open (the
stack, with their segments), the held last event (its segment waits for the next metadata), the
segment boundaries and the pids named in the current segment, the ignored phases counted, the
warnings so far (the parse's and the unmatched E events', each with its listing cap), the event and
metadata counts, the largest timestamp and the line count. What the finalisation of the grown file
needs from the spans table built then (span_extend.py): its stepped spans (the step covers), whether
its pids and segments vary, and which of its rows were unclosed (the open stack's B events).

Only a file whose spans all name their track and thread (the cookbook's) and that holds no X event
is resumable: names from metadata can rename earlier spans, and X spans nest over the whole file.
The state is JSON values and three small tables (span_resume never pickles: issue 30's rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.trace.span_spill import COVER_COLUMNS, ColumnRange
from trace_doctor.ingest.trace.span_stream import SpanStream
from trace_doctor.ingest.trace.trace_read import ReadEnd
from trace_doctor.model import IngestWarning

STATE_VERSION = 1


@dataclass
class SpanState:
    """Everything a read of the grown file goes on from (see the module docstring)."""

    values: dict[str, Any]  # JSON values
    frames: dict[str, pl.DataFrame]  # open, held, covers

    @property
    def end(self) -> ReadEnd:
        return ReadEnd(int(self.values["offset"]), int(self.values["lines"]))

    @property
    def rows(self) -> int:
        """Rows of the spans table built at this state."""
        return int(self.values["rows"])

    def reopened_lines(self) -> pl.Series:
        """The B lines of the spans left unclosed at this state: the grown file's read gives them again."""
        held = self.frames["held"].filter(pl.col("ph") == "B").get_column("line")
        return pl.concat([self.frames["open"].get_column("line"), held]).sort()

    def ranges(self) -> tuple[ColumnRange, ColumnRange]:
        """(pids, segments) of the spans table built at this state."""
        return _range(self.values["pids"]), _range(self.values["segments"])

    def restore(self, source: str) -> tuple[SpanStream, FileWarnings]:
        """A stream and parse warnings as the read left them (raises on a malformed state)."""
        v = self.values
        if v.get("version") != STATE_VERSION:
            raise ValueError("another state version")
        stream = SpanStream(source)
        stream.events, stream.meta_rows = _int(v["events"]), _int(v["meta_rows"])
        segments = stream.segments
        segments.boundaries = [_int(b) for b in v["boundaries"]]
        segments._named = {(pid, label) for pid, label in v["named"]}
        segments._last_event = None if v["last_event"] is None else _int(v["last_event"])
        stream._ignored = {str(ph): (_int(n), _int(first)) for ph, (n, first) in v["ignored"].items()}
        stream._unmatched = _warnings(source, v["unmatched"])
        stream._peak_ts = float(v["peak_ts"])
        stream._held = self.frames["held"]
        stream._open = [self.frames["open"]] if self.frames["open"].height else []
        return stream, _warnings(source, v["bad"])


class PendingState:
    """A read's state taken after SpanStream.settle(), before its spans are built; `complete()` adds
    what the built table says and gives the SpanState (None: the file is not resumable)."""

    def __init__(self, stream: SpanStream, bad: FileWarnings, end: ReadEnd) -> None:
        segments = stream.segments
        self.values: dict[str, Any] = {
            "version": STATE_VERSION,
            "offset": end.offset,
            "lines": end.lines,
            "events": stream.events,
            "meta_rows": stream.meta_rows,
            "boundaries": list(segments.boundaries),
            "named": [list(pair) for pair in segments._named],
            "last_event": segments._last_event,
            "ignored": {ph: list(counted) for ph, counted in stream._ignored.items()},
            "unmatched": _dump(stream._unmatched),
            "peak_ts": stream._peak_ts,
            "bad": _dump(bad),
        }
        opened = [f for f in stream._open if f.height]
        held = stream._held
        self.frames = {
            "open": pl.concat(opened, how="vertical") if opened else held.clear().with_columns(_no_segment()),
            "held": held,
        }

    def complete(
        self, covers: pl.DataFrame, ranges: tuple[ColumnRange, ColumnRange], named: bool, rows: int
    ) -> SpanState | None:
        """The state, given the built table's step covers, (pids, segments) ranges, whether every span
        named its track and thread, and its rows."""
        if not named or self.frames["held"].height == 0:
            return None
        values = {**self.values, "rows": rows, "pids": _range_dump(ranges[0]), "segments": _range_dump(ranges[1])}
        return SpanState(values, {**self.frames, "covers": covers.select(COVER_COLUMNS)})


def _no_segment() -> pl.Expr:
    return pl.lit(None, pl.Int32).alias("segment")


def _dump(warnings: FileWarnings) -> dict[str, Any]:
    return {
        "limit": warnings.limit,
        "listed": [[w.line, w.problem] for w in warnings.listed],
        "total": warnings.total,
        "lined": warnings.lined,
        "first_unlisted": warnings.first_unlisted,
    }


def _warnings(source: str, raw: dict[str, Any]) -> FileWarnings:
    warnings = FileWarnings(source, limit=_int(raw["limit"]))
    for line, problem in raw["listed"]:
        if not isinstance(problem, str):
            raise ValueError("malformed warning")
        warnings.listed.append(IngestWarning(source, None if line is None else _int(line), problem))
    warnings.total, warnings.lined = _int(raw["total"]), _int(raw["lined"])
    first = raw["first_unlisted"]
    warnings.first_unlisted = None if first is None else _int(first)
    return warnings


def _range_dump(column: ColumnRange) -> list[Any]:
    return [column.rows, column.nulls, column.low, column.high]


def _range(raw: list[Any]) -> ColumnRange:
    column = ColumnRange()
    rows, nulls, low, high = raw
    column.rows, column.nulls = _int(rows), _int(nulls)
    column.low, column.high = (None if low is None else _int(low)), (None if high is None else _int(high))
    return column


def merged_ranges(*ranges: ColumnRange) -> ColumnRange:
    """One range over the values the ranges saw together."""
    merged = ColumnRange()
    for column in ranges:
        merged.rows += column.rows
        merged.nulls += column.nulls
        for value in (column.low, column.high):
            if value is not None:
                merged.low = value if merged.low is None else min(merged.low, value)
                merged.high = value if merged.high is None else max(merged.high, value)
    return merged


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("not an integer")
    return value
