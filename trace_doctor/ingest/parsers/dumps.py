"""Asyncio task dumps, thread-stack watchdog blocks, `python -m asyncio ps` tables and py-spy dumps.

Formats of FORMATS.md 5.1/5.2, CPython 3.14's `Lib/asyncio/tools.py` and `py-spy dump` (pyspy.py). Dumps
are printed to stdout, so they arrive interleaved with log records and GIL-monitor lines: lines outside
a dump block are left to the log parser without comment; a line inside a block that does not fit the
format is a warning. `dump_block_lines` tells the log parser which lines dumps own; a py-spy dump's
lines it reads as well (its live-stack event), so they are not among them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.file_names import input_path
from trace_doctor.ingest.parsers.pyspy import HEADER_LINES as LOOK
from trace_doctor.ingest.parsers.pyspy import PROCESS, PySpyDump, opens_dump
from trace_doctor.ingest.reading.file_warnings import FileWarnings, WarningSink
from trace_doctor.ingest.reading.textfile import int64, read_text_lines, strip_ansi
from trace_doctor.model import STACK_SNAPSHOTS_SCHEMA, TASK_SNAPSHOTS_SCHEMA, IngestWarning, InputFile

TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
TASK_HEADER = re.compile(
    rf"^===== ({TS}) asyncio task dump \[([\w.-]+)\] (\d+) task\(s\) @ interval=(\d+(?:\.\d*)?|\.\d+)s =====\s*$"
)
TASK_FOOTER = re.compile(rf"^===== ({TS}) end \[([\w.-]+)\] =====\s*$")
_TASK_NAME = r"""^  (?P<name>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"): (?P<state>pending|cancelled|done(?: exc=.*?)?)  """
# A coroutine repr starts with '<'; that anchors where an exception message with double spaces ends.
TASK_LINE = re.compile(_TASK_NAME + r"(?P<coro><.*)$")
TASK_LINE_LENIENT = re.compile(_TASK_NAME + r"(?P<coro>\S.*)$")
BANNER = re.compile(r"^#{20,}\s*$")
STACK_TITLE = re.compile(rf"^# ({TS}) stacks:(.*)$")
THREAD_SECTION = re.compile(r"^--- \[([\w.-]+)\] ident=(\d+)( \(no frame\))? ---\s*$")
SIMPLE_HEADER = re.compile(r"^\[(\d\d:\d\d:\d\d)\] ([\w.-]+):\s*$")
FRAME_LINE = re.compile(r'^  File "(?P<file>.*)", line (?P<line>\d+), in (?P<func>.+)$')
CARETS = re.compile(r"^\s+[\^~]+\s*$")
REPEATED = re.compile(r"^  \[Previous line repeated \d+ more times?\]\s*$")
NO_THREADS = "(no threads registered yet)"
PS_HEADER = re.compile(
    r"^tid\s+task id\s+task name\s+coroutine (?:stack|chain)\s+(?:awaiter chain\s+)?awaiter name\s+awaiter id\s*$"
)
PS_RULE = re.compile(r"^-{20,}\s*$")
PS_ROW_START = re.compile(r"^(?P<tid>\d+)\s+(?P<task_id>0x[0-9a-fA-F]+)")
PS_ROW_END = re.compile(r"\s(?P<awaiter_id>0x[0-9a-fA-F]+|\S+)\s*$")
CHAIN = re.compile(r"\S+(?: -> \S+)*")
# Column widths of `python -m asyncio ps` (tools.py: f"{row[2]:<20} {row[3]:<50} ...").
PS_TASK_ID_WIDTH = 20
PS_NAME_WIDTH = 20
PS_STACK_WIDTH = 50

# Columns beyond the shared contract: the ps table's ids and awaiters; the simplified watchdog's
# time of day (its timestamp has no date) and threads without a frame.
TASK_COLUMNS: dict[str, pl.DataType] = {
    **TASK_SNAPSHOTS_SCHEMA,
    "thread_id": pl.Int64,
    "task_id": pl.String,
    "awaiter_chain": pl.String,
    "awaiter_name": pl.String,
    "awaiter_id": pl.String,
}
# py-spy's own: the thread's name and state as it printed them, a frame's `--locals` lines, and its header.
STACK_COLUMNS: dict[str, pl.DataType] = {
    **STACK_SNAPSHOTS_SCHEMA,
    "time_of_day": pl.String,
    "no_frame": pl.Boolean,
    "thread_name": pl.String,
    "thread_state": pl.String,
    "locals": pl.String,
    "process_id": pl.Int64,
    "command": pl.String,
    "python_version": pl.String,
}

# Prefixes a dump-opening line can start with: a cheap test before any regex. A py-spy dump's (`Process `,
# `Thread `) are not among them: its lines are the log parser's too (pyspy.py, Scanner.pyspy_opener).
OPENERS = ("===== ", "####", "[", "tid")


def _timestamp(text: str) -> datetime | None:
    """The header's time, or None for an impossible one (month 13, second 61)."""
    try:
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None


@dataclass
class DumpScan:
    """What one file's dump blocks hold, and which lines they cover (1-based, inclusive)."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[tuple[int, int]] = field(default_factory=list)
    # py-spy dumps' lines: read by the log parser too (its live-stack event), so not in `blocks`, which it skips.
    pyspy_blocks: list[tuple[int, int]] = field(default_factory=list)
    skipped: int = 0


@dataclass
class _Block:
    kind: str  # task | stack | simple | ps | pyspy
    start: int
    snapshot: int
    pyspy: PySpyDump | None = None
    label: str | None = None
    timestamp: datetime | None = None
    time_of_day: str | None = None
    announced: int | None = None
    interval: float | None = None
    tasks: int = 0
    thread_ident: int | None = None
    frame_index: int = 0
    last_frame: dict[str, Any] | None = None
    ps_has_chain: bool = True
    ps_ruled: bool = False


class _Scanner:
    """A line-by-line state machine over one file."""

    def __init__(self, source: str, warnings: WarningSink) -> None:
        self.source = source
        self.warnings = warnings
        self.out = DumpScan()
        self.block: _Block | None = None
        self.snapshots = 0
        self.last_date: str | None = None  # for the simplified watchdog's date-less timestamps
        self.last_simple: tuple[str, int] | None = None  # (time of day, snapshot) of the last simple block

    def warn(self, line: int, problem: str) -> None:
        self.warnings.append(IngestWarning(self.source, line, problem))

    def stamp(self, text: str, line: int) -> datetime | None:
        stamp = _timestamp(text)
        if stamp is None:
            self.warn(line, f"impossible timestamp {text!r} in a dump header; the block is kept without a time")
        return stamp

    def number(self, digits: str, line: int, what: str) -> int | None:
        value = int64(digits)
        if value is None:
            self.warn(line, f"{what} {digits[:40]} does not fit a 64-bit integer; kept as unknown")
        return value

    def open(self, kind: str, line: int, **attrs: Any) -> _Block:
        self.block = _Block(kind, line, self.snapshots, **attrs)
        self.snapshots += 1
        return self.block

    def close(self, end: int, *, complete: bool = True) -> None:
        block = self.block
        if block is None:
            return
        if block.kind == "task" and not complete:
            self.warn(
                block.start, f"task dump [{block.label}] has no end line (cut off); its {block.tasks} task(s) are kept"
            )
        if block.kind == "task" and complete and block.announced is not None and block.tasks != block.announced:
            self.warn(
                block.start, f"task dump [{block.label}] announced {block.announced} task(s), {block.tasks} were read"
            )
        if block.pyspy is not None:
            self.out.frames.extend(block.pyspy.rows())
            self.out.pyspy_blocks.append((block.start, end))
        else:
            self.out.blocks.append((block.start, end))
        self.block = None

    def pyspy_opener(self, text: str, number: int, lines: list[str], index: int) -> bool:
        """Open a py-spy dump's block if one starts at this line (pyspy.opens_dump); return whether it did."""
        if not text.startswith(("Process ", "Thread ")) or not opens_dump(text, lines[index + 1 : index + 1 + LOOK]):
            return False
        block = self.open("pyspy", number)
        block.pyspy = PySpyDump(self.source, block.snapshot, self.warn)
        block.pyspy.take(text, number)
        return True

    def opener(self, text: str, number: int, lines: list[str], index: int) -> bool:
        """Open a block if this line starts one; return whether it did."""
        if not text.startswith(OPENERS):
            return False
        if (match := TASK_HEADER.match(text)) is not None:
            stamp = self.stamp(match.group(1), number)
            self.last_date = match.group(1)[:10] if stamp else self.last_date
            self.open(
                "task",
                number,
                label=match.group(2),
                timestamp=stamp,
                announced=self.number(match.group(3), number, "task count"),
                interval=float(match.group(4)),
            )
            return True
        if BANNER.match(text) and index + 1 < len(lines) and (title := STACK_TITLE.match(strip_ansi(lines[index + 1]))):
            stamp = self.stamp(title.group(1), number + 1)
            self.last_date = title.group(1)[:10] if stamp else self.last_date
            self.open("stack", number, timestamp=stamp)
            return True
        if (
            (match := SIMPLE_HEADER.match(text)) is not None
            and index + 1 < len(lines)
            and FRAME_LINE.match(lines[index + 1])
        ):
            tod = match.group(1)
            stamp = self.stamp(f"{self.last_date} {tod}", number) if self.last_date else None
            block = self.open("simple", number, label=match.group(2), timestamp=stamp, time_of_day=tod)
            # The simplified watchdog prints one header per thread: threads printed in the same
            # second belong to one snapshot.
            if self.last_simple is not None and self.last_simple[0] == tod:
                block.snapshot = self.last_simple[1]
                self.snapshots -= 1
            self.last_simple = (tod, block.snapshot)
            return True
        if PS_HEADER.match(text):
            self.open("ps", number, label="ps", ps_has_chain="awaiter chain" in text)
            return True
        return False

    def task_line(self, text: str, number: int) -> None:
        block = self.block
        assert block is not None
        if (match := TASK_FOOTER.match(text)) is not None:
            if match.group(2) != block.label:
                self.warn(number, f"end line of [{match.group(2)}] closes a dump of [{block.label}]")
            self.close(number)
            return
        match = TASK_LINE.match(text) or TASK_LINE_LENIENT.match(text)
        if match is None:
            self.out.skipped += 1
            self.warn(number, f"unreadable line inside task dump [{block.label}]: {text[:120]!r}")
            return
        block.tasks += 1
        self.out.tasks.append(
            {
                "source": self.source,
                "line": number,
                "timestamp": block.timestamp,
                "label": block.label,
                "snapshot": block.snapshot,
                "task_count": block.announced,
                "interval_s": block.interval,
                "task_name": _unquote(match.group("name")),
                "state": match.group("state"),
                "coroutine": match.group("coro"),
            }
        )

    def stack_line(self, text: str, number: int) -> bool:
        """Consume a line of a stack block; False when the line is not part of it (block ends)."""
        block = self.block
        assert block is not None
        if not text.strip():
            return block.kind == "stack"  # the simplified version has no blank lines inside
        if block.kind == "stack":
            if BANNER.match(text) or STACK_TITLE.match(text):
                return True
            if text.strip() == NO_THREADS:
                return True
            if (section := THREAD_SECTION.match(text)) is not None:
                ident = self.number(section.group(2), number, "thread ident")
                block.label, block.thread_ident, block.frame_index, block.last_frame = section.group(1), ident, 0, None
                if section.group(3):
                    self._frame_row(number, None, no_frame=True)
                return True
        if (frame := FRAME_LINE.match(text)) is not None:
            if block.label is None:
                self.out.skipped += 1
                self.warn(number, "stack frame before any thread section")
                return True
            self._frame_row(number, frame)
            return True
        if text.startswith("    ") and block.last_frame is not None:
            if not CARETS.match(text) and block.last_frame["code"] is None:
                block.last_frame["code"] = text.strip()
            return True
        if REPEATED.match(text) or CARETS.match(text):
            return True
        if text.startswith(" "):
            self.out.skipped += 1
            self.warn(number, f"unreadable line inside stack dump: {text[:120]!r}")
            return True
        return False

    def _frame_row(self, number: int, frame: re.Match[str] | None, *, no_frame: bool = False) -> None:
        block = self.block
        assert block is not None
        row = {
            "source": self.source,
            "line": number,
            "timestamp": block.timestamp,
            "snapshot": block.snapshot,
            "label": block.label,
            "thread_ident": block.thread_ident,
            "frame_index": None if no_frame else block.frame_index,
            "file_path": frame.group("file") if frame else None,
            "line_no": self.number(frame.group("line"), number, "frame line number") if frame else None,
            "function": frame.group("func").strip() if frame else None,
            "code": None,
            "time_of_day": block.time_of_day,
            "no_frame": no_frame,
        }
        self.out.frames.append(row)
        block.last_frame = None if no_frame else row
        if not no_frame:
            block.frame_index += 1

    def ps_line(self, text: str, number: int) -> bool:
        """Consume a line of a ps table; False when the table has ended."""
        block = self.block
        assert block is not None
        if not block.ps_ruled and PS_RULE.match(text):
            block.ps_ruled = True
            return True
        if not text.strip():
            return False
        start = PS_ROW_START.match(text)
        end = PS_ROW_END.search(text, start.end()) if start else None
        if start is None or end is None:
            if text[:1].isdigit():
                self.out.skipped += 1
                self.warn(number, f"unreadable row of an asyncio ps table: {text[:120]!r}")
                return True
            return False
        # The task id column is padded to its width, then one space separates the name column.
        name_start = start.end() + max(0, PS_TASK_ID_WIDTH - len(start.group("task_id"))) + 1
        name, stack, chain, awaiter = _split_ps_middle(text[name_start : end.start() + 1], block.ps_has_chain)
        block.tasks += 1
        self.out.tasks.append(
            {
                "source": self.source,
                "line": number,
                "timestamp": None,
                "label": "ps",
                "snapshot": block.snapshot,
                "task_count": None,
                "interval_s": None,
                "task_name": name,
                "state": "pending",
                "coroutine": stack,
                "thread_id": self.number(start.group("tid"), number, "thread id"),
                "task_id": start.group("task_id"),
                "awaiter_chain": chain or None,
                "awaiter_name": awaiter or None,
                "awaiter_id": end.group("awaiter_id"),
            }
        )
        return True

    def scan(self, lines: list[str]) -> DumpScan:
        for index, raw in enumerate(lines):
            number = index + 1
            text = strip_ansi(raw) if "\x1b" in raw else raw
            block = self.block
            if block is not None and block.kind == "task":
                # Task lines are indented; a blank or flush-left line (other than the end line)
                # means the dump was cut off and this line belongs to whatever printed next.
                if (not text.startswith("  ") or not text.strip()) and not TASK_FOOTER.match(text):
                    self.close(_last_nonblank(lines, block.start, number - 1), complete=False)
                else:
                    self.task_line(text, number)
                    continue
            elif block is not None and block.kind in ("stack", "simple"):
                starts_new = text.startswith(OPENERS) and (
                    BANNER.match(text)
                    and block.kind == "simple"
                    or TASK_HEADER.match(text)
                    or SIMPLE_HEADER.match(text)
                    or PS_HEADER.match(text)
                )
                if not starts_new and (block.kind != "stack" or not _is_new_stack_banner(text, lines, index)):
                    if self.stack_line(text, number):
                        continue
                self.close(_last_nonblank(lines, block.start, number - 1))
            elif block is not None and block.kind == "ps":
                if self.ps_line(text, number):
                    continue
                self.close(_last_nonblank(lines, block.start, number - 1))
            elif block is not None and block.pyspy is not None:
                # A new dump's header ends this one (`py-spy dump` run again, or --subprocesses' next process).
                if not PROCESS.match(text) and block.pyspy.take(text, number):
                    continue
                self.close(_last_nonblank(lines, block.start, number - 1))
            if not self.opener(text, number, lines, index):
                self.pyspy_opener(text, number, lines, index)
        if self.block is not None:
            self.close(_last_nonblank(lines, self.block.start, len(lines)), complete=False)
        return self.out


def _is_new_stack_banner(text: str, lines: list[str], index: int) -> bool:
    """A banner line that opens the next watchdog block (the one after the title closes the title)."""
    return bool(BANNER.match(text)) and index + 1 < len(lines) and bool(STACK_TITLE.match(lines[index + 1]))


def _last_nonblank(lines: list[str], start: int, end: int) -> int:
    while end > start and not lines[end - 1].strip():
        end -= 1
    return end


def _unquote(text: str) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    try:
        name = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:  # a malformed escape (`\x` cut short): keep the name as printed
        return body
    # An escaped lone surrogate (`\ud800`) decodes to a character UTF-8 cannot hold.
    return name.encode("utf-8", "replace").decode("utf-8")


def _split_ps_middle(middle: str, has_chain: bool) -> tuple[str, str, str, str]:
    """Task name, coroutine stack, awaiter chain and awaiter name from a ps row's middle columns.

    Columns are left-aligned to fixed widths, but a long value pushes the rest right; function
    names never contain spaces, so a ` -> ` chain is read as a unit wherever it starts.
    """
    if len(middle) > PS_NAME_WIDTH and middle[PS_NAME_WIDTH] == " ":
        name, rest = middle[:PS_NAME_WIDTH].rstrip(), middle[PS_NAME_WIDTH + 1 :]
    else:
        name, _, rest = middle.partition(" ")
    if rest[:1] == " ":  # an empty coroutine stack column
        stack, rest = "", rest[PS_STACK_WIDTH:]
    else:
        found = CHAIN.match(rest)
        stack = found.group(0) if found else ""
        rest = rest[found.end() :] if found else rest
    rest = rest.strip()
    chain = ""
    if has_chain and rest:
        found = CHAIN.match(rest)
        # A lone word is the awaiter name when nothing follows it; a chain needs a name after it.
        if found and (" -> " in found.group(0) or rest[found.end() :].strip()):
            chain, rest = found.group(0), rest[found.end() :].strip()
    return name, stack, chain, rest


def scan_dump_lines(lines: list[str], source: str, warnings: WarningSink) -> DumpScan:
    """Every dump block in a file's lines: task rows, stack-frame rows and the lines they cover."""
    return _Scanner(source, warnings).scan(lines)


def dump_block_lines(lines: list[str]) -> list[tuple[int, int]]:
    """Line ranges (1-based, inclusive) that dump blocks own, for the log parser to skip."""
    if not any(line.startswith(OPENERS) for line in lines):
        return []
    return scan_dump_lines(lines, "", []).blocks


def opens_block(raw: str, following: str | None) -> bool:
    """Whether the scan would open a dump block at a line `raw` when no block is open (`following`: the
    next line, None at the end). The first line that does is where a file's first block starts: a
    reader that goes forward once needs to hold only the lines from there on (logs.parse_lines)."""
    text = strip_ansi(raw) if "\x1b" in raw else raw
    if not text.startswith(OPENERS):
        return False
    window = [raw] if following is None else [raw, following]
    return _Scanner("", []).opener(text, 1, window, 0)


def dump_rows_frame(rows: list[dict[str, Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame({name: [row.get(name) for row in rows] for name in schema}, schema=schema)


def parse_dump_files(
    paths: Iterable[Path], warnings: list[IngestWarning]
) -> tuple[pl.DataFrame, pl.DataFrame, list[InputFile]]:
    """Task snapshots and stack snapshots from every dump file, in file and line order."""
    tasks: list[dict[str, Any]] = []
    frames: list[dict[str, Any]] = []
    inputs: list[InputFile] = []
    for path in sorted(input_path(p) for p in paths):
        info = InputFile("dump", str(path))
        inputs.append(info)
        log = FileWarnings(str(path))
        lines = read_text_lines(path, log)
        if lines is None:
            info.skipped = 1
            warnings.extend(log.close())
            continue
        scan = scan_dump_lines(lines, str(path), log)
        warnings.extend(log.close())
        tasks.extend(scan.tasks)
        frames.extend(scan.frames)
        info.records = len(scan.tasks) + sum(1 for f in scan.frames if not f["no_frame"])
        info.skipped = scan.skipped
        if not scan.blocks and not scan.pyspy_blocks:
            info.note = "no dump blocks found"
    return dump_rows_frame(tasks, TASK_COLUMNS), dump_rows_frame(frames, STACK_COLUMNS), inputs
