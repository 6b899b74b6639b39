"""`metrics.jsonl` (and its `.pre_resume_N` backups): the per-step metrics -> `steps`, and the launches
that wrote them. A run with no metrics rows falls back on its console captures (logs.log, captured
stdout, W&B's output.log): the cookbook prints every metrics row there as a table, and older versions
a `Starting X` / `X took N seconds` timeline. With metrics rows, those captures are a second copy."""

from __future__ import annotations

import re
from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.console_metrics import note_second_copies, parse_console_metrics
from trace_doctor.ingest.parsers.launches import launches_of
from trace_doctor.ingest.parsers.metrics import parse_metrics_files
from trace_doctor.model import IngestWarning, RunTables

PRE_RESUME_BACKUP = re.compile(r"metrics\.jsonl\.pre_resume_\d+")
# The files a console capture can be: the log kind's and the dump kind's (captured stdout).
CONSOLE_KINDS = ("log", "dump")


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    steps, inputs = parse_metrics_files(reading.files.get("metrics", []), warnings)
    if not any(info.records for info in inputs):
        console = [path for kind in CONSOLE_KINDS for path in reading.files.get(kind, [])]
        steps, console_inputs = parse_console_metrics(console, warnings)
        inputs += console_inputs
    return Parsed({"steps": steps, "launches": launches_of(steps)}, inputs)


def complete(run: RunTables) -> None:
    """Metrics rows read from metrics.jsonl: each console capture says its tables were not read again."""
    read_from = {info.path for info in run.inputs if info.kind == "metrics" and info.records}
    captures = {info.path for info in run.inputs if info.kind in CONSOLE_KINDS}
    if read_from and not read_from & captures:
        note_second_copies(run.inputs)


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
        reads=("metrics", *CONSOLE_KINDS),
        complete=complete,
        file_names=frozenset({"metrics.jsonl"}),
        name_test=lambda name: PRE_RESUME_BACKUP.fullmatch(name) is not None,
        reads_gzip=True,
        content=(ContentTest("jsonl", any_record_line, noun="metrics", fallback=True),),
    )
)
