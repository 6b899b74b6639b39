"""Chrome-trace events (`trace_events.jsonl`, a converted `trace.json`, `{"traceEvents": ...}`) -> `spans`.

One trace file is read in chunks (trace_read.py: chunks, threads, the document form; trace_parse.py:
the layout fast path, the typed read with bisection, the per-line fallback) whose events are paired
as they arrive (span_stream.py) and spilled to disk; the spans are then written in order, named and
attributed to steps, to one Parquet file (span_spill.py) that is the table cache's entry for the
file, or a scratch file with the cache off. The spans table is that file, read lazily
(stored_table.py): the whole table is never in memory during ingest, and only if a reader asks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.storage.stored_table import MEMORY_ROWS, PartWriter, StoredTable
from trace_doctor.ingest.trace.span_build import SPAN_COLUMNS, build_spans
from trace_doctor.ingest.trace.span_extend import span_facts
from trace_doctor.ingest.trace.span_resume import SpanState
from trace_doctor.ingest.trace.span_settle import cut_for_resume
from trace_doctor.ingest.trace.span_stream import SpanStream
from trace_doctor.ingest.trace.trace_read import Progress, read_trace_events
from trace_doctor.ingest.trace.trace_resume import keep_state, resumable, resume_trace_file, settled
from trace_doctor.model import IngestWarning, InputFile


def parse_trace_files(
    paths: list[Path],
    warnings: list[IngestWarning],
    progress: Progress | None = None,
    *,
    on_read: Callable[[], None] | None = None,
) -> tuple[StoredTable, list[InputFile]]:
    """Parse every trace file into one stored `spans` table (segments numbered per file).

    `on_read` is called once the last file's bytes are read (before its spans are built, the
    part that uses less than the whole machine), and in any case before returning or raising.
    """
    tables: list[StoredTable] = []
    inputs: list[InputFile] = []
    try:
        for index, path in enumerate(paths):
            last = on_read if index == len(paths) - 1 else None
            table, info = parse_trace_file(path, warnings, progress, on_read=last)
            tables.append(table)
            inputs.append(info)
    finally:
        if on_read is not None:
            on_read()
    tables = [t for t in tables if t.height]
    if not tables:
        return empty_stored_spans(), inputs
    return StoredTable.of(tables), inputs


def empty_stored_spans() -> StoredTable:
    return StoredTable([], 0, SPAN_COLUMNS)


def parse_trace_file(
    path: Path,
    warnings: list[IngestWarning],
    progress: Progress | None = None,
    *,
    on_read: Callable[[], None] | None = None,
) -> tuple[StoredTable, InputFile]:
    """Parse one trace file, from the table cache when it is unchanged."""
    from trace_doctor.ingest.storage import cache, resume_entry

    # The file as it is before parsing: the entry is stored only if it is still so afterwards.
    # (With the bytes before where a stored read state stopped hashed in the same pass: trace_resume.py.)
    snapshot = cache.snapshot(path, mark=resume_entry.stored_offset(path, "spans"))
    cached = cache.load_stored(path, "spans", snapshot)
    if cached is not None:
        table, info, cached_warnings = cached
        warnings.extend(cached_warnings)
        return table, info
    # A file that grew since it was read: only its new bytes (trace_resume.py).
    resumed = resume_trace_file(path, warnings, progress, snapshot, on_read)
    if resumed is not None:
        return resumed
    before = len(warnings)
    out = cache.new_entry_writer("spans", SPAN_COLUMNS, memory_rows=MEMORY_ROWS, describe=span_facts)
    try:
        info, state = _parse_trace_file(path, warnings, progress, on_read, out, snapshot is not None)
    except BaseException:
        out.abandon()
        raise
    # Cut where the first resume of the grown file will cut it (span_settle.py), when one can go on from it.
    settle = (lambda written: cut_for_resume(written, state.reopened_lines())) if state is not None else None
    table = cache.adopt(path, "spans", out, info, warnings[before:], snapshot, settle=settle)
    keep_state(path, state, out, snapshot)
    return table, info


def _parse_trace_file(
    path: Path,
    warnings: list[IngestWarning],
    progress: Progress | None,
    on_read: Callable[[], None] | None,
    out: PartWriter,
    keep_state: bool,
) -> tuple[InputFile, SpanState | None]:
    """The file's spans into `out`; with `keep_state`, the state a read of the grown file can go on from."""
    info = InputFile(kind="trace", path=str(path))
    source = str(path)
    bad = FileWarnings(source)
    # Spans are paired as the chunks are read: the file's whole event table never exists.
    stream = SpanStream(source)
    try:
        try:
            read = read_trace_events(path, bad, progress, sink=stream.feed)
        except OSError as exc:
            # A file that cannot be opened: one warning for the whole file.
            warnings.append(IngestWarning(source, None, f"cannot read file: {exc.strerror or exc}"))
            info.skipped = 1
            return info, None
        if on_read is not None:
            on_read()
        info.records = stream.events + stream.meta_rows
        # Every warning with a line so far is a record that could not be read; a corrupt compressed
        # stream is one more (the unreadable rest), as a file that cannot be read at all always was.
        info.skipped = bad.lined + read.broken
        pending = settled(stream, bad, read.end) if keep_state and read.end is not None else None
        if pending is not None and not resumable(stream):
            pending = None
        spans = build_spans(stream, source, bad, out)
    finally:
        stream.discard()
    warnings.extend(bad.close())
    info.note = f"{spans} spans from {info.records} events"
    spill = stream.spill
    state = pending.complete(spill.covers(), (spill.pids, spill.segments), spill.named, spans) if pending else None
    return info, state
