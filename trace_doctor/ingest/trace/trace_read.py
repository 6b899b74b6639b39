"""A trace file -> its typed event table and metadata table (trace_parse.py types the rows).

A JSONL trace (`trace_events.jsonl`, gzipped or not) is cut into ~8 MB chunks at line boundaries,
read on two threads and taken back in file order, so the raw bytes are never all in memory at once
and the output never depends on thread timing. A JSON document (an array, a `{"traceEvents": ...}`
object, a converted `trace.json`) is cut into one line per event as it is read (trace_document.py)
and then read exactly like a JSONL trace, `line` being the event's index in its array.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.ingest.reading.jsonl import (
    CHUNK_BYTES,
    LineChunk,
    decode_json,
    iter_line_chunks,
    oversized_problem,
    without_boms,
)
from trace_doctor.ingest.storage.columnwise import concat_releasing
from trace_doctor.ingest.trace.trace_document import DocumentEvents, has_trace_events
from trace_doctor.ingest.trace.trace_parse import (
    META_COLUMNS,
    SPAN_EVENT_COLUMNS,
    ChunkRead,
    read_chunk,
)

Progress = Callable[[str, int, int], None]
# Takes one chunk's span events and metadata rows (lines numbered in the file), in file order.
ChunkSink = Callable[[pl.DataFrame, pl.DataFrame], None]

# Chunks read at once, and chunks held (read or being read) at once: two threads keep both cores of
# a small CI machine busy; holding one more lets the next chunk's bytes be ready when a thread frees.
READ_WORKERS = 2
READ_AHEAD_CHUNKS = 3
# Bytes looked at to tell a JSON document from JSONL (as much as discovery looks at).
HEAD_BYTES = 256 * 1024
# How a document's warnings name the event (its `line` is its index in the event array).
EVENT_PREFIX = "event "


class ReadEnd(NamedTuple):
    """A plain JSONL file read whole, ending with a newline: its size, and its line count."""

    offset: int
    lines: int


class TraceRead(NamedTuple):
    """One trace file's span events and metadata rows (each with its line), whether a corrupt
    compressed stream cut it short (its unreadable rest counts as one skipped record), and where a
    later read of the grown file could go on from (None: not a plain JSONL file read whole to a newline)."""

    events: pl.DataFrame
    meta: pl.DataFrame
    broken: bool
    end: ReadEnd | None = None


def read_trace_events(
    path: Path, bad: FileWarnings, progress: Progress | None, *, sink: ChunkSink | None = None
) -> TraceRead:
    """The events of one trace file; unreadable records go to `bad`. With `sink`, each chunk's
    events and metadata rows are handed to it in file order as they are read, and the returned
    event and metadata tables are empty: the whole tables never exist.

    Raises OSError when the file cannot be opened. A corrupt gzip stream or the decompression cap
    ends the read with a warning, keeping the records before it.
    """
    source = str(path)
    with InputStream(path) as stream:
        end = None
        if _is_json_document(stream.head(HEAD_BYTES)):
            document = DocumentEvents(stream)
            pieces = (LineChunk(piece.data, False, piece.oversized) for piece in document)
            events, meta, _ = read_line_chunks(pieces, source, bad, progress, stream, prefix=EVENT_PREFIX, sink=sink)
            if document.truncated is not None:
                number = document.truncated
                bad.add(number, f"event {number}: the document ends inside this event (truncated); skipped")
            if document.problem is not None:
                # As a whole-document failure always was: one skipped record at line 1.
                bad.add(None if document.found else 1, document.problem)
        else:
            chunks = iter_line_chunks(stream, CHUNK_BYTES)
            events, meta, lines = read_line_chunks(chunks, source, bad, progress, stream, sink=sink)
            end = _plain_end(path, stream, lines)
        for problem in stream.problems():
            bad.add(None, problem)
    return TraceRead(events, meta, stream.error is not None, end)


def read_appended_events(
    path: Path, start: ReadEnd, bad: FileWarnings, progress: Progress | None, sink: ChunkSink
) -> ReadEnd | None:
    """The events of a plain JSONL trace from byte `start.offset` on (the lines a read up to there did
    not see), numbered from `start.lines + 1`, each chunk handed to `sink`. Returns where this read
    ended (as read_trace_events' `end`). Raises OSError when the file cannot be opened."""
    with InputStream(path, start=start.offset) as stream:
        chunks = iter_line_chunks(stream, CHUNK_BYTES)
        _, _, lines = read_line_chunks(chunks, str(path), bad, progress, stream, sink=sink, first_line=start.lines)
        for problem in stream.problems():
            bad.add(None, problem)
        return _plain_end(path, stream, lines, start.offset)


def _plain_end(path: Path, stream: InputStream, lines: int, start: int = 0) -> ReadEnd | None:
    """Where the read of a plain file ended, when it read the whole file and the file ends with a newline."""
    if stream.compressed or stream.error is not None or start + stream.produced != stream.size or not stream.size:
        return None
    try:
        with open(path, "rb") as handle:
            last = os.pread(handle.fileno(), 1, stream.size - 1)
    except OSError:
        return None
    return ReadEnd(stream.size, lines) if last == b"\n" else None


def _is_json_document(data: bytes) -> bool:
    """True for a JSON array or a `{"traceEvents": ...}` object rather than one event per line."""
    head = without_boms(data).lstrip()
    if head.startswith(b"["):
        # A trace array opens with an event (or closes empty); a line-delimited file whose first
        # line merely starts with '[' (a log line, say) is read line by line, so it costs one line.
        return head[1:].lstrip()[:1] in (b"{", b"]", b"") or _decodes(head.split(b"\n", 1)[0])
    if not head.startswith(b"{"):
        return False
    first_line = head.split(b"\n", 1)[0]
    try:
        first = decode_json(first_line)
    except Exception:  # noqa: BLE001 - a pretty-printed object's first line is not JSON by itself
        return b'"traceEvents"' in head[:65536] or has_trace_events(head)
    return isinstance(first, dict) and "ph" not in first and "traceEvents" in first


def _decodes(raw: bytes) -> bool:
    try:
        decode_json(raw)
    except Exception:  # noqa: BLE001 - any refusal means "not JSON by itself"
        return False
    return True


def read_line_chunks(
    chunks: Iterable[LineChunk],
    source: str,
    bad: FileWarnings,
    progress: Progress | None,
    stream: InputStream,
    *,
    prefix: str = "",
    sink: ChunkSink | None = None,
    first_line: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Every readable event of the chunks' lines, typed, with its 1-based line number: (span events,
    metadata, the number of the last line read). The first chunk's first line is `first_line + 1`.

    `prefix` names the line in warnings (a document's events: "event 12: ..."). With `sink`, each
    chunk's events and metadata go to it as the chunk is taken back, and neither is returned.
    """
    frames: list[pl.DataFrame] = []
    metas: list[pl.DataFrame] = []
    # Chunks are read concurrently (polars releases the GIL while a chunk's query runs), at most
    # READ_AHEAD_CHUNKS in flight so the raw bytes held stay bounded; results, warnings included,
    # are taken back strictly in file order so the output never depends on thread timing. Each chunk
    # numbers its lines from 1 and its offset in the file is added as it is taken back, so nothing
    # has to count a chunk's lines before it can start.
    pending: deque[Future[ChunkRead]] = deque()
    line_offset = first_line

    def take_oldest() -> None:
        nonlocal line_offset
        read = pending.popleft().result()
        shift = pl.col("line") + line_offset
        events = [f.with_columns(shift) if line_offset else f for f in read.events]
        chunk_meta = [f.with_columns(shift) if line_offset else f for f in read.meta]
        bad.absorb(read.bad, line_offset, prefix=prefix)
        if sink is None:
            frames.extend(events)
            metas.extend(chunk_meta)
        else:
            sink(_one(events, SPAN_EVENT_COLUMNS), _one(chunk_meta, META_COLUMNS))
        del events
        line_offset += read.lines
        if progress is not None:
            progress(Path(source).name, stream.position(), stream.size)

    with ThreadPoolExecutor(max_workers=READ_WORKERS, thread_name_prefix="trace-chunk") as pool:
        for chunk in chunks:
            if chunk.oversized:
                pending.append(_oversized(source, chunk.oversized))
            else:
                pending.append(pool.submit(read_chunk, chunk.data, source, chunk.unterminated))
            if len(pending) >= READ_AHEAD_CHUNKS:
                take_oldest()
        while pending:
            take_oldest()
    frames = [f for f in frames if f.height]
    meta = pl.concat(metas, how="vertical", rechunk=True) if metas else pl.DataFrame(schema=META_COLUMNS)
    if not frames:
        return pl.DataFrame(schema=SPAN_EVENT_COLUMNS), meta, line_offset
    # Chunks and bisected pieces come in file order: no sort. One contiguous table, copied once
    # here: filters and struct hashes on a table of many chunks would each copy their columns into
    # one chunk again (at 1M events that cost ~100 MB of peak memory). Copied a column at a time,
    # so the chunks' columns go as they are copied: the peak is the table and one column, not two tables.
    return concat_releasing(frames), meta, line_offset


def _one(frames: list[pl.DataFrame], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A chunk's pieces as one table (most chunks are one piece)."""
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema=schema)
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def _oversized(source: str, length: int) -> Future[ChunkRead]:
    """A line too long to hold, as an already-read chunk of one line and one warning."""
    warnings = FileWarnings(source)
    warnings.add(1, oversized_problem(length))
    done: Future[ChunkRead] = Future()
    done.set_result(ChunkRead([], [], warnings, 1))
    return done
