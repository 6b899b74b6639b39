"""A trace file that grew since its spans were cached: only the bytes it gained are read.

A cold read of a plain JSONL trace that ends with a newline leaves its state in the cache
(span_resume.py, storage/resume_entry.py): where it stopped, the hash of the bytes before, the open
stack and the rest. When a later analysis finds the file longer, its first bytes the same, and the
spans table of those bytes still cached, the stream is restored, the new bytes are read through it
exactly as a cold read would go on, and the table is extended (span_extend.py): the result is the
cold read's of the grown file, spans, warnings and counts alike (tests/test_trace_resume.py cuts
traces everywhere to hold it to that). Anything else (no state, another file, a state that does
not read, X events, spans named from metadata) reads the file whole, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.storage import cache, resume_entry
from trace_doctor.ingest.storage.stored_table import MEMORY_ROWS, PartWriter, StoredTable
from trace_doctor.ingest.trace.span_build import SPAN_COLUMNS
from trace_doctor.ingest.trace.span_extend import Extension, extend_table, span_facts
from trace_doctor.ingest.trace.span_resume import PendingState, SpanState, merged_ranges
from trace_doctor.ingest.trace.span_stream import SpanStream
from trace_doctor.ingest.trace.trace_read import Progress, ReadEnd, read_appended_events
from trace_doctor.model import IngestWarning, InputFile

TABLE = "spans"
# The new spans are held in memory (span_extend.py): an append larger than this and than what was read
# before is read whole, in a cold read's bounded memory.
MAX_HELD_APPEND_BYTES = 64 * 1024 * 1024


def resume_trace_file(
    path: Path,
    warnings: list[IngestWarning],
    progress: Progress | None,
    taken: cache.Snapshot | None,
    on_read: Callable[[], None] | None,
) -> tuple[StoredTable, InputFile] | None:
    """The spans of `path` (as `taken` saw it) from the cached read of its first bytes, or None."""
    if taken is None:
        return None
    found = resume_entry.load(path, TABLE)
    if found is None:
        return None
    offset, digest, values, frames = found
    if not 0 < offset < taken.size or taken.size - offset > max(offset, MAX_HELD_APPEND_BYTES):
        return None
    marked = taken.mark if taken.mark is not None and taken.mark.offset == offset else None
    if (marked.before if marked is not None else resume_entry.prefix_digest(path, offset)) != digest:
        return None
    old = cache.load_stored(path, TABLE, cache.Snapshot(offset, digest, (0, 0, 0, 0)))
    if old is None:
        return None
    out = cache.new_entry_writer(TABLE, SPAN_COLUMNS, memory_rows=MEMORY_ROWS, describe=span_facts)
    try:
        resumed = _resume(path, SpanState(values, frames), old[0], progress, on_read, out)
    except Exception:  # noqa: BLE001 - a state that does not fit the file: the file is read whole
        resumed = None
    except BaseException:
        out.abandon()
        raise
    if resumed is None:
        out.abandon()
        return None
    info, file_warnings, state = resumed
    warnings.extend(file_warnings)
    table = cache.adopt(path, TABLE, out, info, file_warnings, taken, read_from=offset)
    keep_state(path, state, out, taken)
    return table, info


def keep_state(path: Path, state: SpanState | None, out: PartWriter, taken: cache.Snapshot | None) -> None:
    """Store `state` when the table it goes with became the cache's entry for the file `taken` saw."""
    if state is None or taken is None or not cache.adopted(out) or state.end.offset != taken.size:
        return
    resume_entry.save(path, TABLE, taken.size, taken.digest, state.values, state.frames)


def _resume(
    path: Path,
    state: SpanState,
    old: StoredTable,
    progress: Progress | None,
    on_read: Callable[[], None] | None,
    out: PartWriter,
) -> tuple[InputFile, list[IngestWarning], SpanState | None] | None:
    source = str(path)
    stream, bad = state.restore(source)
    if old.height != state.rows:
        return None
    try:
        end = read_appended_events(path, state.end, bad, progress, stream.feed)
        if on_read is not None:
            on_read()
        info = InputFile(kind="trace", path=source, records=stream.events + stream.meta_rows, skipped=bad.lined)
        pending = settled(stream, bad, end)
        if not resumable(stream):
            return None  # X events nest over the whole file
        built = stream.finish()
        if built is None:
            return None
        spill, unmatched = built
        if not spill.named:
            return None
        stream.ignored_phase_warnings(bad)
        bad.absorb(unmatched)
        stream.imprecise_clock_warning(bad)
        new = Extension(
            _spans(spill),
            spill.covers(),
            state.reopened_lines(),
            (spill.pids, spill.segments),
            state.ranges(),
        )
        if new.spans.filter(pl.col("line_begin").is_in(new.reopened.implode())).height != new.reopened.len():
            return None  # the state's open stack is not the old table's unclosed rows
        rows = extend_table(old, state.frames["covers"], new, source, out, cut_files=True)
    finally:
        stream.discard()
    info.note = f"{rows} spans from {info.records} events"
    following = None
    if pending is not None:
        pids, segments = state.ranges()
        covers = pl.concat([state.frames["covers"], spill.covers()]).sort("segment", "start_us", "line_begin")
        ranges = (merged_ranges(pids, spill.pids), merged_ranges(segments, spill.segments))
        following = pending.complete(covers, ranges, True, rows)
    return info, bad.close(), following


def settled(stream: SpanStream, bad: FileWarnings, end: ReadEnd | None) -> PendingState | None:
    """Pair what waits (SpanStream.settle) and take the read's state at its end, before its spans are
    built (None: not a file to go on from)."""
    stream.settle()
    return PendingState(stream, bad, end) if end is not None else None


def resumable(stream: SpanStream) -> bool:
    """No X event read (settled): X spans nest over the whole file, so their depths cannot be extended."""
    held = stream._held
    return not stream._complete and not (held.height and bool((held.get_column("ph") == "X").any()))


def _spans(spill) -> pl.DataFrame:
    """The spans paired from the new lines (a few per megabyte appended: held in memory)."""
    held = spill.held()
    if held is not None:
        return held
    parts = [pl.read_parquet(spill.files)]
    remainder = spill.remainder()
    if remainder is not None:
        parts.append(remainder)
    return pl.concat(parts, how="vertical")
