"""`timing_spans.jsonl`: the spans of each logged step -> `step_spans`.

The next largest input after the trace: parsed once the trace's bytes are read, so that it shares
the machine with span building (which leaves part of it idle) rather than with the read.
"""

from __future__ import annotations

from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.timing_spans import parse_timing_spans_files
from trace_doctor.model import IngestWarning


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    step_spans, inputs = parse_timing_spans_files(paths, warnings)
    return Parsed({"step_spans": step_spans}, inputs)


def step_line(sniffed: Sniffed) -> bool:
    return sniffed.first_line.startswith(b'{"step"') and b'"spans": [' in sniffed.first_line[:4096]


KIND = register(
    InputKind(
        name="spans",
        order=40,
        fills=("step_spans",),
        parse=parse,
        schedule="after_background_read",
        file_names=frozenset({"timing_spans.jsonl"}),
        reads_gzip=True,
        content=(ContentTest("jsonl", step_line, rank=20, noun="timing spans"),),
    )
)
