"""Text logs (the cookbook's `logs.log`, captured stdout) -> `log_events`: only the lines of interest.

Dumps are usually captured stdout, which also carries GIL-monitor and SDK lines, and `code.diff`
names the code the run ran: the log parser reads both kinds' files as well as its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.logs import parse_log_files
from trace_doctor.model import IngestWarning

# A record in the cookbook's layout or in Python's default one (parsers/logs.py DEFAULT_RECORD), quoted in GitHub
# markdown (`> `) or not.
LOG_RECORD = re.compile(
    rb"^(?:> ?)*+(?:[\w.<>-]+:\d+ \[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] "
    rb"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.<>-]+:(?!//))",
    re.M,
)
TEXT_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    log_events, inputs = parse_log_files(paths, warnings)
    return Parsed({"log_events": log_events}, inputs)


def log_text(sniffed: Sniffed) -> bool:
    return sniffed.suffix in TEXT_SUFFIXES or LOG_RECORD.search(sniffed.head) is not None


KIND = register(
    InputKind(
        name="log",
        order=90,
        fills=("log_events",),
        parse=parse,
        reads=("log", "dump", "code_diff"),
        # The cookbook's log by name, even with NUL runs in it (a crash mid-write leaves them).
        file_names=frozenset({"logs.log"}),
        reads_gzip=True,  # the text reader decompresses (reading/textfile.py)
        content=(ContentTest("text", log_text, rank=20),),
    )
)
