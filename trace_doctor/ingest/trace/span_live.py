"""A growing trace's spans, kept current as lines are appended (the watch command's trace reader).

The same stages as a cold read (span_stream.py), a look at a time: each look's new lines are typed
by the chunk reader (trace_parse.read_chunk), their B/E events paired behind the B events still
open (span_pairing's `carry`), and the closed spans kept. `table()` is the spans table as a cold read
of the file so far would build it: the closed spans, the B events still open as unclosed spans (what
each thread is inside now), names, order and steps. What is held is the closed spans (what the
analysis reads anyway) and the open stack, never the events or the file's text.

Not kept live: X events are rare in a cookbook trace and nest by time, so they are paired in
`table()` from the ones held (they are few); the deep-stack shortcut of a cold read is not needed for
the open stack of a live run (its depth is the nesting of the code in flight).
"""

from __future__ import annotations

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.trace.span_args import with_track_thread
from trace_doctor.ingest.trace.span_build import SPAN_COLUMNS, empty_spans
from trace_doctor.ingest.trace.span_names import SpanNames
from trace_doctor.ingest.trace.span_pairing import PAIRED_SCHEMA, complete_spans, pair_begin_end
from trace_doctor.ingest.trace.span_spill import COVER_COLUMNS
from trace_doctor.ingest.trace.span_steps import StepCovers
from trace_doctor.ingest.trace.span_stream import Segments
from trace_doctor.ingest.trace.trace_parse import SPAN_PHASES, read_chunk

# Closed-span frames held before they are joined into one (a look adds one small frame).
COMPACT_FRAMES = 64


class LiveSpans:
    """One followed trace file's spans (see the module docstring)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.events = 0
        self.segments = Segments()
        self.warnings = FileWarnings(source)
        self._held = pl.DataFrame()  # the latest event: its segment waits for the next look's metadata
        self._open: list[pl.DataFrame] = []  # B events still open, in line order
        self._closed: list[pl.DataFrame] = []
        self._complete: list[pl.DataFrame] = []  # X events
        self.last_ts: float | None = None  # the latest event time read (microseconds)

    def feed(self, lines: list[bytes], first_line: int) -> None:
        """Complete lines appended to the file; `first_line` is the 1-based number of lines[0]."""
        if not lines:
            return
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
        if len(self._closed) >= COMPACT_FRAMES:
            self._closed = [pl.concat(self._closed, how="vertical")]

    def in_flight(self) -> list[str]:
        """The spans open now on the track written to last, outermost first: what the run is inside."""
        pending = [p for p in (*self._open, self._held) if p.height]
        if not pending:
            return []
        events = pl.concat([p.select("ph", "name", "track", "line") for p in pending], how="vertical")
        track = events.get_column("track")[-1]
        opened = events.filter((pl.col("track") == track) & (pl.col("ph") == "B"))
        return [str(name) for name in opened.get_column("name")]

    def table(self) -> pl.DataFrame:
        """The spans table of the file so far (see the module docstring); the live state is unchanged."""
        held = self._held.with_columns(self.segments.expr()) if self._held.height else self._held
        complete = [*self._complete, *([held] if held.height and held["ph"][0] == "X" else [])]
        pending = [p for p in (*self._open, held) if p.height and not (p is held and held["ph"][0] == "X")]
        parts = list(self._closed)
        if pending:
            # Paired with no carry: every B without its E becomes an unclosed span (the held event
            # is an E closing one of them, or one more B). Their warnings are the next look's.
            batch = pl.concat(pending, how="vertical") if len(pending) > 1 else pending[0]
            parts.append(pair_begin_end([batch], self.source, FileWarnings(self.source)))
        if complete:
            parts.append(complete_spans(pl.concat(complete, how="vertical")))
        if not parts:
            return empty_spans()
        spans = pl.concat([p.select(list(PAIRED_SCHEMA)) for p in parts], how="vertical")
        spans = SpanNames.plain(spans).sort("segment", "start_us", "line_begin")
        stepped = spans.filter(pl.col("step").is_not_null() & pl.col("closed")).select(COVER_COLUMNS)
        by = [c for c in ("segment", "pid") if spans.get_column(c).n_unique() > 1]
        spans = StepCovers.of(stepped, total=spans.height, by=by).attribute(spans)
        return spans.with_columns(pl.lit(self.source).alias("source")).select(list(SPAN_COLUMNS))


def _joined(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def _no_meta() -> pl.DataFrame:
    return pl.DataFrame(schema={"name": pl.String, "line": pl.Int64, "pid": pl.Int64, "pid_label": pl.String})


def _no_lines() -> pl.Series:
    return pl.Series("line", [], dtype=pl.Int64)
