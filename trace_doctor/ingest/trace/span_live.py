"""A growing trace's spans, kept current as lines are appended (the watch command's trace reader).

The same stages as a cold read (span_stream.py), a look at a time: each look's new lines are typed
by the chunk reader (trace_parse.read_chunk), their B/E events paired behind the B events still
open (span_pairing's `carry`). `table()` is the spans table as a cold read of the file so far would
build it: the closed spans, the B events still open as unclosed spans (what each thread is inside
now), names, order and steps. The table is kept on disk and extended with what closed since the
last refresh (span_live_table.py), so a refresh costs what the run gained; what is held is the spans
closed since (folded into the table once they are many), the open stack and the X events, never
the closed spans of the whole run, the events or the file's text.

Not kept live: X events are rare in a cookbook trace and nest by time, so they are paired again at
every refresh from the ones held (they are few); the deep-stack shortcut of a cold read is not needed
for the open stack of a live run (its depth is the nesting of the code in flight).
"""

from __future__ import annotations

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.storage.stored_table import StoredTable
from trace_doctor.ingest.trace.span_args import with_track_thread
from trace_doctor.ingest.trace.span_live_table import LiveTable
from trace_doctor.ingest.trace.span_pairing import PAIRED_SCHEMA, complete_spans, pair_begin_end
from trace_doctor.ingest.trace.span_stream import Segments
from trace_doctor.ingest.trace.trace_parse import SPAN_PHASES, read_chunk

# Spans closed since the last refresh held before they are folded into the table on disk (~20 MB):
# a watch whose findings refresh waits keeps no more of the run in memory than this.
FOLD_ROWS = 200_000


class LiveSpans:
    """One followed trace file's spans (see the module docstring)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.events = 0
        self.segments = Segments()
        self.warnings = FileWarnings(source)
        self._held = pl.DataFrame()  # the latest event: its segment waits for the next look's metadata
        self._open: list[pl.DataFrame] = []  # B events still open, in line order
        self._closed: list[pl.DataFrame] = []  # spans closed since the last refresh
        self._closed_rows = 0
        self._complete: list[pl.DataFrame] = []  # X events
        self._table = LiveTable(source)
        self._fresh = False  # events read since the table was last refreshed
        self.last_ts: float | None = None  # the latest event time read (microseconds)

    def feed(self, lines: list[bytes], first_line: int) -> None:
        """Complete lines appended to the file; `first_line` is the 1-based number of lines[0]."""
        if not lines:
            return
        self._fresh = True
        read = read_chunk(b"\n".join(lines) + b"\n", self.source, False)
        self.warnings.absorb(read.bad, first_line - 1)
        shift = pl.col("line") + (first_line - 1)
        meta = _joined(read.meta).with_columns(shift) if read.meta else pl.DataFrame()
        events = _joined(read.events).with_columns(shift) if read.events else pl.DataFrame()
        if events.height:
            events = events.filter(pl.col("ph").is_in(SPAN_PHASES))
        self.segments.observe(
            meta if meta.height else _no_meta(), events.get_column("line") if events.height else _no_lines()
        )
        if events.height == 0:
            return
        self.events += events.height
        latest = events.get_column("ts").max()
        if isinstance(latest, float):
            self.last_ts = latest if self.last_ts is None else max(self.last_ts, latest)
        events = with_track_thread(events)
        pending = pl.concat([self._held, events], how="vertical") if self._held.height else events
        self._held = pending.tail(1)
        self._pair(pending.head(pending.height - 1))

    def _pair(self, events: pl.DataFrame) -> None:
        if events.height == 0:
            return
        events = events.with_columns(self.segments.expr())
        complete = events.get_column("ph") == "X"
        if bool(complete.any()):
            self._complete.append(events.filter(complete))
            events = events.filter(~complete)
        carried, self._open = self._open, []
        parts = [p for p in (*carried, events) if p.height]
        if not parts:
            return
        batch = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
        closed = pair_begin_end([batch], self.source, self.warnings, carry=self._open)
        if closed.height:
            self._closed.append(closed)
            self._closed_rows += closed.height
        if self._closed_rows >= FOLD_ROWS:
            self.table()

    def in_flight(self) -> list[str]:
        """The spans open now on the track written to last, outermost first: what the run is inside."""
        pending = [p for p in (*self._open, self._held) if p.height]
        if not pending:
            return []
        events = pl.concat([p.select("ph", "name", "track", "line") for p in pending], how="vertical")
        track = events.get_column("track")[-1]
        opened = events.filter((pl.col("track") == track) & (pl.col("ph") == "B"))
        return [str(name) for name in opened.get_column("name")]

    def table(self) -> StoredTable:
        """The spans table of the file so far (see the module docstring), on disk; the live state is
        unchanged. A table stays readable while it is referenced, however many refreshes follow."""
        if not self._fresh:
            return self._table.table
        held = self._held.with_columns(self.segments.expr()) if self._held.height else self._held
        held_x = held.height > 0 and held["ph"][0] == "X"
        complete = [*self._complete, *([held] if held_x else [])]
        pending = [p for p in (*self._open, held) if p.height and not (p is held and held_x)]
        unfinal: list[pl.DataFrame] = []
        if pending:
            # Paired with no carry: every B without its E becomes an unclosed span (the held event
            # is an E closing one of them, or one more B). Their warnings are the next look's.
            batch = pl.concat(pending, how="vertical") if len(pending) > 1 else pending[0]
            unfinal.append(pair_begin_end([batch], self.source, FileWarnings(self.source)))
        if complete:
            unfinal.append(complete_spans(pl.concat(complete, how="vertical")))
        closed, self._closed, self._closed_rows = self._closed, [], 0
        table = self._table.refresh(_spans(closed), _spans(unfinal), self.segments.boundaries)
        self._fresh = False
        return table


def _spans(frames: list[pl.DataFrame]) -> pl.DataFrame:
    frames = [f.select(list(PAIRED_SCHEMA)) for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema=PAIRED_SCHEMA)
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def _joined(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def _no_meta() -> pl.DataFrame:
    return pl.DataFrame(schema={"name": pl.String, "line": pl.Int64, "pid": pl.Int64, "pid_label": pl.String})


def _no_lines() -> pl.Series:
    return pl.Series("line", [], dtype=pl.Int64)
