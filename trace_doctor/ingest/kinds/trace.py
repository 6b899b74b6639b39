"""Chrome-trace events (`trace_events.jsonl`, a converted `trace.json`, `{"traceEvents": ...}`) -> `spans`.

By far the largest input: parsed on a worker thread of its own while the other kinds are read.
"""

from __future__ import annotations

from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.trace.trace_document import has_trace_events
from trace_doctor.ingest.trace.trace_events import parse_trace_files
from trace_doctor.model import IngestWarning


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    spans, inputs = parse_trace_files(paths, warnings, progress=reading.progress, on_read=reading.on_read)
    return Parsed({"spans": spans}, inputs)


def event_line(sniffed: Sniffed) -> bool:
    return b'"ph"' in sniffed.first_line and b'"ts"' in sniffed.first_line


def trace_document(sniffed: Sniffed) -> bool:
    document = sniffed.document
    if document.startswith(b"["):
        return b'"ph"' in document[:4096]
    if not document.startswith(b"{"):
        return False
    if b'"traceEvents"' in document[:8192]:
        return True
    # A PyTorch profiler trace puts its device and distributed-run metadata first: the key is a
    # trace's when the head's top-level object reaches it (not text or a nested key).
    return b'"traceEvents"' in document and has_trace_events(document)


KIND = register(
    InputKind(
        name="trace",
        order=30,
        fills=("spans",),
        parse=parse,
        schedule="background",
        file_names=frozenset({"trace_events.jsonl"}),
        reads_gzip=True,
        content=(
            ContentTest("jsonl", event_line, rank=10, noun="trace"),
            # After the profile's test: a profile's markers are the more specific.
            ContentTest("json", trace_document, rank=20, noun="a trace"),
        ),
    )
)
