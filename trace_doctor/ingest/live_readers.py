"""Readers that take a growing file's new lines a look at a time and keep its table current.

Each reader holds the parsing state a cold read holds while it walks the file (the metrics' columns,
the log's open record, the trace's open stack) and the rows parsed so far, and builds its table on
demand. The trace's reader is ingest/trace/span_live.py. A file read afresh (replaced, truncated)
gets a new reader: live_run.py drops the old one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.parsers.console_metrics import console_value
from trace_doctor.ingest.parsers.console_tables import ConsoleTable, whole_tables
from trace_doctor.ingest.parsers.dumps import OPENERS, STACK_COLUMNS, TASK_COLUMNS, dump_rows_frame, scan_dump_lines
from trace_doctor.ingest.parsers.logs import LogLines
from trace_doctor.ingest.parsers.metrics import StepsBuilder
from trace_doctor.ingest.parsers.pyspy import last_dump_start
from trace_doctor.ingest.parsers.timing_spans import Checked, check_lines, checked_table, parse_timing_spans_file
from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.jsonl import decode_line
from trace_doctor.ingest.storage.stored_table import StoredTable
from trace_doctor.model import STEPS_SCHEMA, IngestWarning, InputFile


def text_lines(lines: list[bytes]) -> list[str]:
    """Raw lines as the text readers see them (undecodable bytes replaced, a CR before the newline dropped)."""
    return [raw.decode("utf-8", "replace").removesuffix("\r") for raw in lines]


class LiveMetrics:
    """metrics.jsonl: each new line decoded and added to the steps columns (StepsBuilder)."""

    def __init__(self, source: str, *, superseded_from: int | None = None) -> None:
        self.warnings = FileWarnings(source)
        self.steps = StepsBuilder(source, self.warnings, superseded_from=superseded_from)
        self.new_rows: list[dict[str, Any]] = []  # rows added since the caller last took them

    def feed(self, lines: list[bytes], first_line: int) -> None:
        for index, raw in enumerate(lines, start=first_line):
            parsed = decode_line(raw, index, self.warnings.path, self.warnings)
            if parsed is not None:
                self.steps.add(parsed.value, parsed.line)
                self.new_rows.append(parsed.value)

    def take_new_rows(self) -> list[dict[str, Any]]:
        rows, self.new_rows = self.new_rows, []
        return rows

    def table(self) -> pl.DataFrame:
        return self.steps.frame() if self.steps.rows else pl.DataFrame(schema=STEPS_SCHEMA)


class LiveLog:
    """A text log: its new lines through the log parser, whose state carries over (LogLines)."""

    def __init__(self, source: str) -> None:
        name = Path(source).name
        self.parser = LogLines(source, freeze_file=name == "requirements.txt", code_diff=name == "code.diff")
        # The cookbook's `timed()` phases open now (`Starting X` with no `X took` yet), outermost first, as
        # run_end's stack reads them: kept as the lines come, for the live status of a run with no trace.
        self._phases: list[str] = []
        self._seen = 0  # parser rows already read into the stack

    def feed(self, lines: list[bytes], first_line: int) -> None:
        self.parser.feed(text_lines(lines), first_line)

    def open_phases(self) -> list[str]:
        """The phases open now, outermost first (a process start clears them: a new launch)."""
        rows = self.parser.events
        for row in rows[self._seen :]:
            kind = row.get("kind")
            if kind == "restart":
                self._phases.clear()
            elif kind == "took":
                fields = _fields(row)
                name = fields.get("name")
                if not isinstance(name, str):
                    continue
                if fields.get("phase") == "start":
                    self._phases.append(name)
                elif name in self._phases:
                    # A phase ends the innermost open one of its name, and the phases opened inside it.
                    del self._phases[len(self._phases) - 1 - self._phases[::-1].index(name) :]
        self._seen = len(rows)
        return list(self._phases)

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.parser.rows


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    """A parsed log row's fields: as the parser keeps them (`_fields`), else as JSON text (`fields`)."""
    held = row.get("_fields")
    if isinstance(held, dict):
        return held
    raw = row.get("fields")
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class LiveStepSpans:
    """timing_spans.jsonl: each look's new lines checked as a cold read checks the file (timing_spans.py:
    no rule reads the step spans, so a file in the cookbook's exact layout is counted and its read
    deferred until a reader asks). While every line is clean, the table is that deferred one of the
    complete lines looked at, as a cold read of them gives it, at no cost that grows with the file;
    once a line is not, the file is parsed whole at each refresh, as a cold read does (for its warnings)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clean = True
        self.checked = Checked(0, 0, 0)

    def feed(self, lines: list[bytes], end: int) -> None:
        """Complete new lines; `end`: the file's bytes up to the newline of the last one."""
        if not lines or not self.clean:
            return
        counted = check_lines(lines)
        if counted is None:
            self.clean = False
            return
        self.checked = Checked(self.checked.lines + counted[0], self.checked.spans + counted[1], end)

    def parsed(self) -> tuple[StoredTable, InputFile, list[IngestWarning]]:
        """(the step spans, the file's account, its warnings)."""
        if self.clean and self.checked.lines:
            return (*checked_table(self.path, self.checked), [])
        warnings: list[IngestWarning] = []
        return (*parse_timing_spans_file(self.path, warnings), warnings)


class LiveConsoleTables:
    """A console capture's metric tables, the steps of a run with no metrics.jsonl: a table is taken once
    it is whole (its bottom border, or a line after it, was read); the lines of one still being printed,
    or the title above a header not written yet, wait for the next look. Memory: the whole tables (the
    steps table's own size) and at most one table's lines."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tables: list[ConsoleTable] = []
        self.new_rows: list[dict[str, Any]] = []  # one per whole table since the caller last took them
        self._pending: list[str] = []
        self._first = 1  # the line number of _pending[0]

    def feed(self, lines: list[bytes], first_line: int) -> None:
        if not lines:
            return
        if not self._pending:
            self._first = first_line
        self._pending += text_lines(lines)
        found, keep = whole_tables(self._pending)
        shift = self._first - 1
        for table in found:
            table.line += shift
            table.cut_line = table.cut_line + shift if table.cut_line is not None else None
            for cell in table.cells:
                cell.line += shift
            self.tables.append(table)
            row = {} if table.step is None else {"step": table.step}
            for cell in table.cells:
                row.setdefault(cell.key, console_value(cell.value))
            self.new_rows.append(row)
        self._pending = self._pending[keep:]
        self._first += keep

    def take_new_rows(self) -> list[dict[str, Any]]:
        rows, self.new_rows = self.new_rows, []
        return rows


class LiveDumps:
    """Task dumps, stack blocks and py-spy dumps. A block is scanned once the next one begins (or the file
    has stopped growing): the lines from the last block opener on are held back, since a dump being
    written may not be whole yet. Snapshot numbers and lines continue across looks."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.warnings = FileWarnings(source)
        self.tasks: list[dict[str, Any]] = []
        self.frames: list[dict[str, Any]] = []
        self._pending: list[str] = []
        self._first = 1  # the line number of _pending[0]
        self._snapshots = 0

    def feed(self, lines: list[bytes], first_line: int, *, settled: bool) -> None:
        """New lines (none when the file did not grow); `settled`: nothing more is being written now."""
        if not self._pending:
            self._first = first_line
        self._pending += text_lines(lines)
        cut = len(self._pending)
        if not settled:
            openers = [i for i, text in enumerate(self._pending) if text.startswith(OPENERS)]
            pyspy = last_dump_start(self._pending)
            openers += [pyspy] if pyspy is not None else []
            cut = max(openers) if openers else cut
        if cut == 0:
            return
        batch, self._pending = self._pending[:cut], self._pending[cut:]
        scan = scan_dump_lines(batch, self.source, _Shifted(self.warnings, self._first - 1))
        shift, base = self._first - 1, self._snapshots
        for row in (*scan.tasks, *scan.frames):
            row["line"] = row["line"] + shift if row.get("line") is not None else None
            row["snapshot"] = row["snapshot"] + base
        numbers = [row["snapshot"] for row in (*scan.tasks, *scan.frames)]
        self._snapshots = max(numbers) + 1 if numbers else self._snapshots
        self.tasks += scan.tasks
        self.frames += scan.frames
        self._first += cut

    def tables(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        return dump_rows_frame(self.tasks, TASK_COLUMNS), dump_rows_frame(self.frames, STACK_COLUMNS)


class _Shifted:
    """A warning sink that numbers a batch's lines as the file's."""

    def __init__(self, warnings: FileWarnings, shift: int) -> None:
        self.warnings, self.shift = warnings, shift

    def append(self, warning) -> None:
        line = warning.line + self.shift if warning.line is not None else None
        self.warnings.add(line, warning.problem)
