"""Asyncio task dumps, thread-stack watchdog blocks, `python -m asyncio ps` tables (FORMATS.md 5.1/5.2) and
`py-spy dump` printouts -> `task_snapshots` and `stack_snapshots`. Their other lines are read as a log too
(log.py)."""

from __future__ import annotations

import re
from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.dumps import parse_dump_files
from trace_doctor.model import IngestWarning

DUMP_MARKERS = (
    re.compile(rb"^===== \d{4}-\d\d-\d\d \d\d:\d\d:\d\d asyncio task dump \[", re.M),
    re.compile(rb"^# \d{4}-\d\d-\d\d \d\d:\d\d:\d\d stacks:", re.M),
    re.compile(rb"^--- \[[\w-]+\] ident=\d+", re.M),
    re.compile(rb"^\[\d\d:\d\d:\d\d\] [\w-]+:\s*$", re.M),
    re.compile(rb"^tid\s+task id\s+task name\s+coroutine stack", re.M),
    # py-spy's thread line with a frame after it (a line that only starts with `Thread` is no dump).
    re.compile(
        rb"^Thread (?:0[xX][0-9A-Fa-f]+|\d+) \((?:active|idle)(?:\+gil)?\)(?:: \"[^\n]*\")?[ \t\r]*\n"
        rb" {4}\S[^\n]* \([^()\n]*\)[ \t\r]*$",
        re.M,
    ),
)


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    tasks, stacks, inputs = parse_dump_files(paths, warnings)
    return Parsed({"task_snapshots": tasks, "stack_snapshots": stacks}, inputs)


def dump_text(sniffed: Sniffed) -> bool:
    # A dump pasted at the end of a long console capture is in its tail.
    return any(marker.search(sniffed.head) or marker.search(sniffed.tail) for marker in DUMP_MARKERS)


KIND = register(
    InputKind(
        name="dump",
        order=80,
        fills=("task_snapshots", "stack_snapshots"),
        parse=parse,
        # Before the log's test: a dump is usually in captured stdout, which a log's test also takes.
        content=(ContentTest("text", dump_text, rank=10),),
    )
)
