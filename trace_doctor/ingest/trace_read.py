"""A trace file -> its typed event table and metadata table (trace_parse.py types the rows).

A JSONL trace (`trace_events.jsonl`, gzipped or not) is cut into ~8 MB chunks at line boundaries,
read on two threads and taken back in file order, so the raw bytes are never all in memory at once
and the output never depends on thread timing. A JSON document (an array, a `{"traceEvents": ...}`
object, a converted `trace.json`) is decoded whole and validated event by event.
"""

from __future__ import annotations

import gzip
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from trace_doctor.ingest.jsonl import decode_json, iter_line_chunks
from trace_doctor.ingest.trace_parse import (
    EVENT_COLUMNS,
    META_COLUMNS,
    SPAN_EVENT_COLUMNS,
    ChunkRead,
    drop_incomplete,
    read_chunk,
    rows_frame,
    split_metadata,
    validate_event,
)
from trace_doctor.model import IngestWarning

Progress = Callable[[str, int, int], None]

# Bytes per polars read: large enough that per-call overhead vanishes, small enough that a
# malformed line is isolated with a few cheap re-reads, and progress moves visibly.
CHUNK_BYTES = 8 * 1024 * 1024
# Chunks read at once, and chunks held (read or being read) at once: two threads keep both cores of
# a small CI machine busy; holding one more lets the next chunk's bytes be ready when a thread frees.
READ_WORKERS = 2
READ_AHEAD_CHUNKS = 3


def read_trace_events(
    path: Path, bad: list[IngestWarning], progress: Progress | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(span events, metadata rows) of one trace file, each row with its line; unreadable records go to `bad`.

    Raises OSError or EOFError when the file itself cannot be read (e.g. a truncated gzip).
    """
    source = str(path)
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        total = os.fstat(raw.fileno()).st_size
        stream: BinaryIO = gzip.GzipFile(fileobj=raw) if compressed else raw
        head = stream.read(65536)
        stream.seek(0)
        if _is_json_document(head):
            return split_metadata(read_document_events(stream.read(), source, bad, progress))
        return read_jsonl_events(stream, source, bad, progress, total_bytes=total, position=raw.tell)


def _is_json_document(data: bytes) -> bool:
    """True for a JSON array or a `{"traceEvents": ...}` object rather than one event per line."""
    head = data[:65536].lstrip()
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
        return b'"traceEvents"' in head
    return isinstance(first, dict) and "ph" not in first and "traceEvents" in first


def _decodes(raw: bytes) -> bool:
    try:
        decode_json(raw)
    except Exception:  # noqa: BLE001 - any refusal means "not JSON by itself"
        return False
    return True


def read_jsonl_events(
    stream: BinaryIO,
    source: str,
    bad: list[IngestWarning],
    progress: Progress | None,
    *,
    total_bytes: int,
    position: Callable[[], int],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every readable event of a JSONL trace, typed, with its 1-based line number: (span events, metadata)."""
    frames: list[pl.DataFrame] = []
    metas: list[pl.DataFrame] = []
    # Chunks are read concurrently (polars releases the GIL while a chunk's query runs), at most
    # READ_AHEAD_CHUNKS in flight so the raw bytes held stay bounded; results, warnings included,
    # are taken back strictly in file order so the output never depends on thread timing. Each chunk
    # numbers its lines from 1 and its offset in the file is added as it is taken back, so nothing
    # has to count a chunk's lines before it can start.
    pending: deque[Future[ChunkRead]] = deque()
    line_offset = 0

    def take_oldest() -> None:
        nonlocal line_offset
        read = pending.popleft().result()
        shift = pl.col("line") + line_offset
        frames.extend(f.with_columns(shift) if line_offset else f for f in read.events)
        metas.extend(f.with_columns(shift) if line_offset else f for f in read.meta)
        bad.extend(w if w.line is None else IngestWarning(w.path, w.line + line_offset, w.problem) for w in read.bad)
        line_offset += read.lines
        if progress is not None:
            progress(Path(source).name, position(), total_bytes)

    with ThreadPoolExecutor(max_workers=READ_WORKERS, thread_name_prefix="trace-chunk") as pool:
        for chunk, unterminated in iter_line_chunks(stream, CHUNK_BYTES):
            pending.append(pool.submit(read_chunk, chunk, source, unterminated))
            if len(pending) >= READ_AHEAD_CHUNKS:
                take_oldest()
        while pending:
            take_oldest()
    frames = [f for f in frames if f.height]
    meta = pl.concat(metas, how="vertical", rechunk=True) if metas else pl.DataFrame(schema=META_COLUMNS)
    if not frames:
        return pl.DataFrame(schema=SPAN_EVENT_COLUMNS), meta
    # Chunks and bisected pieces come in file order: no sort. One contiguous table, copied once
    # here: filters and struct hashes on a table of many chunks would each copy their columns into
    # one chunk again (at 1M events that cost ~100 MB of peak memory).
    events = pl.concat(frames, how="vertical", rechunk=True)
    frames.clear()  # the chunks' copies go now, not when the function returns
    return drop_incomplete(events, source, bad), meta


def read_document_events(data: bytes, source: str, bad: list[IngestWarning], progress: Progress | None) -> pl.DataFrame:
    """Events of a JSON array or trace object; `line` is the 1-based index of the event."""
    try:
        document = decode_json(data)
    except Exception as exc:  # noqa: BLE001 - the whole document is unreadable: one warning
        text = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        bad.append(IngestWarning(source, 1, f"not a valid JSON trace document: {text}"))
        return pl.DataFrame(schema=EVENT_COLUMNS)
    if progress is not None:
        progress(Path(source).name, len(data), len(data))
    if isinstance(document, dict):
        events = document.get("traceEvents")
        if not isinstance(events, list):
            bad.append(IngestWarning(source, 1, "JSON object without a `traceEvents` list"))
            return pl.DataFrame(schema=EVENT_COLUMNS)
    elif isinstance(document, list):
        events = document
    else:
        bad.append(IngestWarning(source, 1, f"expected a JSON array or object, got {type(document).__name__}"))
        return pl.DataFrame(schema=EVENT_COLUMNS)
    rows: list[dict[str, Any]] = []
    for index, value in enumerate(events, start=1):
        row, problem = validate_event(value)
        if problem is not None:
            bad.append(IngestWarning(source, index, f"event {index}: {problem}"))
            continue
        row["line"] = index
        rows.append(row)
    return rows_frame(rows)
