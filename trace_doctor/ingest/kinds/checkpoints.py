"""`checkpoints.jsonl`: one record per saved checkpoint -> `checkpoints`."""

from __future__ import annotations

from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.checkpoints import parse_checkpoint_files
from trace_doctor.model import IngestWarning


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    checkpoints, inputs = parse_checkpoint_files(paths, warnings)
    return Parsed({"checkpoints": checkpoints}, inputs)


def checkpoint_line(sniffed: Sniffed) -> bool:
    return b'"state_path"' in sniffed.first_line or b'"sampler_path"' in sniffed.first_line


KIND = register(
    InputKind(
        name="checkpoints",
        order=50,
        fills=("checkpoints",),
        parse=parse,
        file_names=frozenset({"checkpoints.jsonl"}),
        reads_gzip=True,
        content=(ContentTest("jsonl", checkpoint_line, rank=30, noun="checkpoints"),),
    )
)
