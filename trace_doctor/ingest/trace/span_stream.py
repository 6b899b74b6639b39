"""A trace's events -> paired spans a chunk at a time, so the whole event table never exists at once.

The reader hands each chunk's events over in file order (trace_read.py). B/E events are paired as
they arrive: only the B events still open at a chunk's end are carried into the next chunk's
pairing (span_pairing.py, `carry`), so what is held between chunks is the closed spans and the open
stack, not the events. X events, which nest by time rather than by file order, are kept and nested
once at the end (a cookbook trace has none).

Everything decided across the whole file is decided exactly as on the whole table:
- segments (a resumed process): a repeated `process_name` metadata row opens a segment at the last
  span event before it, which can only be the latest event read so far. That one event is held back
  from pairing until the next chunk's metadata has been seen, so its segment is final when it pairs;
- ignored phases are counted per phase (count, first line) and reported once, as before;
- unmatched E events are listed in a warning list of their own and added to the file's after the
  ignored-phase warnings, so which ones are listed and the count of the rest do not depend on chunks.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.storage.stored_table import disk_failed, scratch_file
from trace_doctor.ingest.trace.span_args import with_track_thread
from trace_doctor.ingest.trace.span_names import SpanNames
from trace_doctor.ingest.trace.span_pairing import KEY, complete_spans, pair_begin_end
from trace_doctor.ingest.trace.span_spill import BUFFER_ROWS, SpanSpill
from trace_doctor.ingest.trace.trace_parse import META_COLUMNS, SPAN_PHASES

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


# Name rows (thread_name / process_name metadata) held before they go to a scratch file.
NAMES_HELD = 100_000
# Events read before they are paired: pairing a batch costs less than pairing each chunk (fixed
# costs, and the reading threads left alone meanwhile); the batch (~25 MB) bounds what is held.
PAIR_BATCH_EVENTS = 250_000
# Carried B events beyond which only the ones a chunk's E events can reach are paired again.
DEEP_STACK = 10_000
# Timestamps are microseconds held as doubles: from 2**53 on, a double cannot tell neighbouring
# microseconds apart (epoch microseconds today are ~1.8e15, well below; a clock in nanoseconds or
# garbage such as 1e300 is above), so durations and gaps there are rounded, up to all being zero.
PRECISE_TS_LIMIT = float(2**53)


class Segments:
    """Segment boundaries found so far: a `process_name` for a pid already named in the current
    segment starts a new one at the last span event before it (else at the metadata line itself)."""

    def __init__(self) -> None:
        self.boundaries: list[int] = []
        self._named: set[tuple[Any, Any]] = set()
        self._last_event: int | None = None  # line of the latest span event read

    def observe(self, meta: pl.DataFrame, event_lines: pl.Series) -> None:
        """One chunk: its metadata rows and the (sorted) lines of its span events."""
        names = meta.filter(pl.col("name") == "process_name").select("line", "pid", "pid_label")
        for line, pid, label in names.iter_rows():
            if (pid, label) in self._named:
                index = int(event_lines.search_sorted(line, side="left")) - 1
                before = int(event_lines[index]) if index >= 0 else self._last_event
                fits = before is not None and (not self.boundaries or before > self.boundaries[-1])
                self.boundaries.append(before if fits else line)
                self._named = set()
            self._named.add((pid, label))
        if event_lines.len():
            self._last_event = int(event_lines[-1])

    def expr(self) -> pl.Expr:
        """Segment number of each row, from its `line`."""
        if not self.boundaries:
            return pl.lit(0, pl.Int32).alias("segment")
        boundaries = pl.lit(pl.Series(self.boundaries, dtype=pl.Int64))
        return boundaries.search_sorted(pl.col("line"), side="right").cast(pl.Int32).alias("segment")


class SpanStream:
    """One trace file's spans built from its events as they are read (see the module docstring)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.events = 0  # span events read (metadata rows are counted by the reader)
        self.segments = Segments()
        self._ignored: dict[str, tuple[int, int]] = {}  # phase -> (events, first line)
        self._unmatched = FileWarnings(source)
        self._held = pl.DataFrame()  # the latest span event, not yet paired (its segment may change)
        self._open: list[pl.DataFrame] = []  # B events still open, in line order
        self._waiting: list[pl.DataFrame] = []  # events read, not yet paired
        self._waiting_rows = 0
        self.spill = SpanSpill()  # spans paired so far, on disk
        self._complete: list[pl.DataFrame] = []  # X events
        self.meta_rows = 0
        # Only thread and process names are needed after the read, and only for spans whose args
        # do not name their track (never in a cookbook trace): kept, but small next to the events.
        self._names: list[pl.DataFrame] = []
        self._names_held = 0
        self._name_files: list[Path] = []
        self._peak_ts = 0.0  # largest |ts| of a span event: whether times below a microsecond survive

    def feed(self, events: pl.DataFrame, meta: pl.DataFrame) -> None:
        """One chunk's events and metadata rows (trace_parse's columns, lines numbered in the file)."""
        self.events += events.height
        self.meta_rows += meta.height
        if meta.height:
            named = meta.filter(pl.col("name").is_in(["thread_name", "process_name"]))
            if named.height:
                self._names.append(named)
                self._names_held += named.height
                if self._names_held >= NAMES_HELD:
                    self._spill_names()
        events = self._known_phases(events)
        self.segments.observe(meta, events.get_column("line"))
        if events.height == 0:
            return
        peak = events.get_column("ts").abs().max()
        if isinstance(peak, float) and peak > self._peak_ts:
            self._peak_ts = peak
        events = with_track_thread(events)
        pending = pl.concat([self._held, events], how="vertical") if self._held.height else events
        # The latest event waits for the next chunk's metadata (see the module docstring).
        self._held = pending.tail(1)
        self._waiting.append(pending.head(pending.height - 1))
        self._waiting_rows += pending.height - 1
        if self._waiting_rows >= PAIR_BATCH_EVENTS:
            self._pair(self._take_waiting(), final=False)

    def _take_waiting(self) -> pl.DataFrame:
        waiting, self._waiting, self._waiting_rows = self._waiting, [], 0
        if not waiting:
            return pl.DataFrame()
        return pl.concat(waiting, how="vertical") if len(waiting) > 1 else waiting[0]

    def settle(self) -> None:
        """Pair every event read so far but the held one, as if more lines followed: the B events
        left open are then the stack a read of the grown file goes on from (span_resume.py). The
        spans finish() then builds are the same (pairing in pieces with a carry is exact)."""
        self._pair(self._take_waiting(), final=False)

    def finish(self) -> tuple[SpanSpill, FileWarnings] | None:
        """(the paired and nested spans, spilled, before names, order and steps; the unmatched-E
        warnings), or None when the file held no span event at all."""
        if self.events == 0:
            return None
        held, self._held = self._held, pl.DataFrame()
        waiting = self._take_waiting()
        self._pair(
            pl.concat([waiting, held], how="vertical")
            if waiting.height and held.height
            else (waiting if waiting.height else held),
            final=True,
        )
        complete_events = [f for f in self._complete if f.height]
        self._complete = []
        if complete_events:
            spans = complete_spans(pl.concat(complete_events, how="vertical"))
            del complete_events
            # Added a buffer's worth at a time, so the spill sorts a buffer, never a copy of them all.
            for offset in range(0, spans.height, BUFFER_ROWS):
                self.spill.add(spans.slice(offset, BUFFER_ROWS))
        return self.spill, self._unmatched

    def names(self) -> SpanNames | None:
        """The file's thread and process names, when some span needs them (None otherwise)."""
        if self.spill.named:
            return None
        files, self._name_files = self._name_files, []
        # In file order: the rows spilled first, then those still held (all of them without a disk).
        parts = [pl.read_parquet(files)] if files else []
        parts += self._names
        self._names, self._names_held = [], 0
        for path in files:
            with contextlib.suppress(OSError):
                path.unlink()
        meta = pl.concat(parts, how="vertical") if parts else pl.DataFrame(schema=META_COLUMNS)
        return SpanNames.from_meta(meta.with_columns(self.segments.expr()))

    def _spill_names(self) -> None:
        if not self._names:
            return
        path = scratch_file("names-")
        if path is None:
            return  # nowhere to write: the names stay in memory
        try:
            pl.concat(self._names, how="vertical").write_parquet(path, compression="lz4")
        except Exception as exc:  # noqa: BLE001 - a full disk is a polars ComputeError too
            with contextlib.suppress(OSError):
                path.unlink()
            disk_failed(exc)
            return
        self._name_files.append(path)
        self._names, self._names_held = [], 0

    def discard(self) -> None:
        """Remove what is still on disk (a read that failed, or names never needed)."""
        self.spill.discard()
        for path in self._name_files:
            with contextlib.suppress(OSError):
                path.unlink()
        self._name_files = []

    def ignored_phase_warnings(self, warnings: FileWarnings) -> None:
        """One warning per ignored phase, in phase order."""
        for ph in sorted(self._ignored):
            n, first = self._ignored[ph]
            kind = PHASE_NAMES.get(ph, "unknown phase")
            warnings.add(
                None,
                f"{n} event(s) of phase {ph!r} ({kind}) ignored, first at line/event {first}: "
                "only B/E/X spans and M metadata are read",
            )

    def imprecise_clock_warning(self, warnings: FileWarnings) -> None:
        """One warning when the timestamps are too large for a double to hold their microseconds."""
        if not self._peak_ts >= PRECISE_TS_LIMIT:
            return
        step = float(np.spacing(self._peak_ts))
        warnings.add(
            None,
            f"timestamps reach {self._peak_ts:.3g} us, beyond 2^53 us (~285 years): there a double holds "
            f"times only to the nearest {step:.3g} us, so span durations and gaps are rounded to that "
            "(or to zero); Chrome-trace ts is in microseconds (a clock in nanoseconds?)",
        )

    def _known_phases(self, events: pl.DataFrame) -> pl.DataFrame:
        """The chunk's span events; the others are counted per phase."""
        known = events.get_column("ph").is_in([*SPAN_PHASES, "M"])
        if bool(known.all()):
            return events
        ignored = events.filter(~known).group_by("ph").agg(pl.len().alias("n"), pl.col("line").min().alias("first"))
        for ph, n, first in ignored.iter_rows():
            seen, earliest = self._ignored.get(ph, (0, first))
            self._ignored[ph] = (seen + n, min(earliest, first))
        return events.filter(known)

    def _pair(self, events: pl.DataFrame, *, final: bool) -> None:
        """Pair `events` (span events whose segment is final) behind the open B events; `final`:
        nothing follows, so the B events still open become unclosed spans."""
        if events.height:
            events = events.with_columns(self.segments.expr())
            complete = events.get_column("ph") == "X"
            if bool(complete.any()):
                self._complete.append(events.filter(complete))
                events = events.filter(~complete)
        if events.height == 0 and not final:
            return  # nothing new to pair: the open B events wait for the next chunk
        carried, self._open = self._open, []
        held = sum(frame.height for frame in carried)
        below: list[pl.DataFrame] = []  # carried entries this chunk's E events cannot reach
        bases = None
        if held > DEEP_STACK:
            if final:
                carried, bases = _unclosed_below(carried, events, self.source, self._unmatched, self.spill)
            else:
                below, carried, bases = _set_apart_deep(carried, events)
        parts = [p for p in (*carried, events) if p.height]
        if not parts:
            self._open = below
            return
        batch = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
        del parts, carried
        closed = pair_begin_end([batch], self.source, self._unmatched, carry=None if final else self._open)
        self._open[:0] = below
        if bases is not None and closed.height:
            # The entries left below sit under every span paired in this chunk on their track.
            closed = _raised(closed, bases)
        self.spill.add(closed)


def _raised(spans: pl.DataFrame, bases: pl.DataFrame) -> pl.DataFrame:
    """`spans` with the `_base` of their track (KEY columns, `_base`; none: 0) added to their depth."""
    spans = spans.join(bases, on=KEY, how="left", nulls_equal=True, maintain_order="left")
    return spans.with_columns((pl.col("depth") + pl.col("_base").fill_null(0)).cast(pl.Int32).alias("depth")).drop(
        "_base"
    )


def _unclosed_below(
    carried: list[pl.DataFrame], events: pl.DataFrame, source: str, warnings: FileWarnings, spill: SpanSpill
) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """At the file's end, with a deep stack: the carried B events no E of the last `events` can reach
    become unclosed spans (at their place in their track's stack) into `spill`, a carried frame at a
    time, each frame released once done (`carried` is emptied); returns (the others, to pair with `events`; how many are
    below per track). Pairing the whole stack at once held it several times over (a trace of one B
    event repeated: the stack is the file)."""
    sizes = pl.concat([f.group_by(KEY).agg(pl.len().cast(pl.Int64).alias("_n")) for f in carried], how="vertical")
    sizes = sizes.group_by(KEY).agg(pl.col("_n").sum())
    ends = events.filter(pl.col("ph") == "E").group_by(KEY).agg(pl.len().cast(pl.Int64).alias("_ends"))
    below = sizes.join(ends, on=KEY, how="left", nulls_equal=True).select(
        *KEY, (pl.col("_n") - pl.col("_ends").fill_null(0)).clip(lower_bound=0).alias("_below")
    )
    seen = below.select(*KEY, pl.lit(0, pl.Int64).alias("_seen"))  # entries of each track in earlier frames
    helpers = ["_pos", "_seen", "_below"]
    tops: list[pl.DataFrame] = []
    while carried:
        frame = carried.pop(0)
        ranked = frame.join(seen, on=KEY, how="left", nulls_equal=True, maintain_order="left").join(
            below, on=KEY, how="left", nulls_equal=True, maintain_order="left"
        )
        del frame
        ranked = ranked.with_columns((pl.int_range(pl.len(), dtype=pl.Int64).over(KEY) + pl.col("_seen")).alias("_pos"))
        is_below = pl.col("_pos") < pl.col("_below")
        tops.append(ranked.filter(~is_below).drop(helpers))
        deep = ranked.filter(is_below)
        seen = seen.join(
            ranked.group_by(KEY).agg(pl.len().cast(pl.Int64).alias("_more")), on=KEY, how="left", nulls_equal=True
        ).select(*KEY, (pl.col("_seen") + pl.col("_more").fill_null(0)).alias("_seen"))
        del ranked
        if deep.height:
            # Only B events: pairing gives each its place among them; those of earlier frames lie below.
            offsets = deep.group_by(KEY).agg(pl.col("_seen").first().alias("_base"))
            holder = [deep.drop(helpers)]
            del deep
            spill.add(_raised(pair_begin_end(holder, source, warnings), offsets))
    bases = below.filter(pl.col("_below") > 0).rename({"_below": "_base"})
    return [t for t in tops if t.height], bases


def _set_apart_deep(
    carried: list[pl.DataFrame], events: pl.DataFrame
) -> tuple[list[pl.DataFrame], list[pl.DataFrame], pl.DataFrame | None]:
    """(the carried B events no E of `events` can reach, the others, the count left below per track).

    A chunk with k E events on a track pops at most k of the entries carried on it, so only the top
    k need pairing again; re-pairing a deep stack (a million never-closed B events) with every chunk
    would make the read quadratic. Whether an E finds an open B is unchanged: with entries left
    below, the track's stack never runs empty within the chunk. Tracks without an E in the chunk are
    not looked at: nothing closes on them, so no depth needs their count."""
    ends = events.filter(pl.col("ph") == "E").group_by(KEY).agg(pl.len().cast(pl.Int64).alias("_ends"))
    if ends.height == 0:
        return carried, [], None
    tracks = ends.select(KEY)
    untouched = [f.join(tracks, on=KEY, how="anti", nulls_equal=True) for f in carried]
    reached = [f.join(tracks, on=KEY, how="semi", nulls_equal=True) for f in carried]
    reached = [f for f in reached if f.height]
    if not reached:
        return carried, [], None
    deep, top, bases = _split_deep(pl.concat(reached, how="vertical"), ends)
    return [*(f for f in untouched if f.height), deep], [top], bases


def _split_deep(carried: pl.DataFrame, ends: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """`carried` (in line order per track) as (the entries below the top `_ends` of each track, the
    top ones, how many are below per track)."""
    ranked = carried.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(KEY).alias("_pos"), pl.len().over(KEY).cast(pl.Int64).alias("_n")
    ).join(ends, on=KEY, how="left", nulls_equal=True, maintain_order="left")
    below = pl.col("_pos") < pl.col("_n") - pl.col("_ends").fill_null(0)
    helpers = ["_pos", "_n", "_ends"]
    deep = ranked.filter(below).drop(helpers)
    top = ranked.filter(~below).drop(helpers)
    bases = deep.group_by(KEY).agg(pl.len().cast(pl.Int64).alias("_base"))
    return deep, top, bases
