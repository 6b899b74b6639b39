"""`metrics.jsonl` (and its `.pre_resume_N` backups): the per-step metrics -> `steps`, and the launches
that wrote them."""

from __future__ import annotations

import re
from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.launches import launches_of
from trace_doctor.ingest.parsers.metrics import parse_metrics_files
from trace_doctor.model import IngestWarning

PRE_RESUME_BACKUP = re.compile(r"metrics\.jsonl\.pre_resume_\d+")


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    steps, inputs = parse_metrics_files(paths, warnings)
    return Parsed({"steps": steps, "launches": launches_of(steps)}, inputs)


def any_record_line(sniffed: Sniffed) -> bool:
    # Any JSON-object line the other JSONL kinds do not claim is a metrics record under another name
    # (`arithmetic_metrics.jsonl`); a line with a schema version is some other tool's log.
    return b'"schema_version"' not in sniffed.first_line


KIND = register(
    InputKind(
        name="metrics",
        order=20,
        fills=("steps", "launches"),
        parse=parse,
        file_names=frozenset({"metrics.jsonl"}),
        name_test=lambda name: PRE_RESUME_BACKUP.fullmatch(name) is not None,
        reads_gzip=True,
        content=(ContentTest("jsonl", any_record_line, noun="metrics", fallback=True),),
    )
)
