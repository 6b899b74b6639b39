"""Chrome-trace events (`trace_events.jsonl`, a converted `trace.json`, `{"traceEvents": ...}`) -> `spans`.

One trace file is read into typed event and metadata tables (trace_read.py: chunks, threads, the
document form; trace_parse.py: the layout fast path, the typed read with bisection, the per-line
fallback), then built into spans (span_build.py: B/E pairing and nesting, segments, names, step
attribution). This module composes the two per file, with the table cache and the input's account.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl

from trace_doctor.ingest.file_warnings import FileWarnings
from trace_doctor.ingest.span_build import build_spans, empty_spans
from trace_doctor.ingest.span_stream import SpanStream
from trace_doctor.ingest.trace_read import Progress, read_trace_events
from trace_doctor.model import IngestWarning, InputFile


def parse_trace_files(
    paths: list[Path],
    warnings: list[IngestWarning],
    progress: Progress | None = None,
    *,
    on_read: Callable[[], None] | None = None,
) -> tuple[pl.DataFrame, list[InputFile]]:
    """Parse every trace file into one `spans` table (segments numbered per file).

    `on_read` is called once the last file's bytes are read (before its spans are built, the
    part that uses less than the whole machine), and in any case before returning or raising.
    """
    frames: list[pl.DataFrame] = []
    inputs: list[InputFile] = []
    try:
        for index, path in enumerate(paths):
            last = on_read if index == len(paths) - 1 else None
            frame, info = parse_trace_file(path, warnings, progress, on_read=last)
            frames.append(frame)
            inputs.append(info)
    finally:
        if on_read is not None:
            on_read()
    frames = [f for f in frames if f.height]
    if not frames:
        return empty_spans(), inputs
    return pl.concat(frames, how="vertical"), inputs


def parse_trace_file(
    path: Path,
    warnings: list[IngestWarning],
    progress: Progress | None = None,
    *,
    on_read: Callable[[], None] | None = None,
) -> tuple[pl.DataFrame, InputFile]:
    """Parse one trace file, from the table cache when it is unchanged."""
    from trace_doctor.ingest import cache

    # The file as it is before parsing: the entry is stored only if it is still so afterwards.
    snapshot = cache.snapshot(path)
    cached = cache.load(path, "spans", snapshot)
    if cached is not None:
        frame, info, cached_warnings = cached
        warnings.extend(cached_warnings)
        return frame, info
    before = len(warnings)
    frame, info = _parse_trace_file(path, warnings, progress, on_read)
    cache.store(path, "spans", frame, info, warnings[before:], snapshot)
    return frame, info


def _parse_trace_file(
    path: Path, warnings: list[IngestWarning], progress: Progress | None, on_read: Callable[[], None] | None
) -> tuple[pl.DataFrame, InputFile]:
    info = InputFile(kind="trace", path=str(path))
    source = str(path)
    bad = FileWarnings(source)
    # Spans are paired as the chunks are read: the file's whole event table never exists.
    stream = SpanStream(source)
    try:
        _, meta, broken = read_trace_events(path, bad, progress, sink=stream.feed)
    except OSError as exc:
        # A file that cannot be opened: one warning for the whole file.
        warnings.append(IngestWarning(source, None, f"cannot read file: {exc.strerror or exc}"))
        info.skipped = 1
        return empty_spans(), info
    if on_read is not None:
        on_read()
    info.records = stream.events + meta.height
    # Every warning with a line so far is a record that could not be read; a corrupt compressed
    # stream is one more (the unreadable rest), as a file that cannot be read at all always was.
    info.skipped = bad.lined + broken
    spans = build_spans(stream, meta, source, bad)
    warnings.extend(bad.close())
    info.note = f"{spans.height} spans from {info.records} events"
    return spans, info
