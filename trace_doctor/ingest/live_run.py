"""A run being written, followed a look at a time: the watch command's ingest.

Each look re-lists the run's folder (a file the run creates later is followed from then on) and reads
only what each streamed file gained since the last look (reading/tail.py): metrics rows, trace
events, log and dump lines go to readers that keep their tables current (live_readers.py,
trace/span_live.py). `tables()` is the run as a cold read of the files so far would give it, put
together by the same code (read_run.assemble_run). The small side files that are not streamed (the
config, checkpoints, profiles) are parsed again by their kind's own parser, and only when one of them
changed.

Memory: per streamed file, its tail (an offset and at most one partial line) and its reader's rows,
which are the tables the analysis reads, except the two large ones a cold read keeps on disk too: a
trace's spans (on disk, extended a refresh at a time) and timing_spans.jsonl's step spans (checked a
look at a time, read only when a reader asks); never a file's text.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.discover import discover
from trace_doctor.ingest.kinds.registry import Parsed, Reading, registered
from trace_doctor.ingest.live_readers import LiveConsoleTables, LiveDumps, LiveLog, LiveMetrics, LiveStepSpans
from trace_doctor.ingest.parsers.console_metrics import NOT_CONSOLE, console_table_steps
from trace_doctor.ingest.parsers.launches import launches_of
from trace_doctor.ingest.parsers.logs import log_events_table
from trace_doctor.ingest.parsers.metrics import PRE_RESUME_RE
from trace_doctor.ingest.parsers.timing_spans import SCHEMA as TIMING_SPANS_SCHEMA
from trace_doctor.ingest.read_run import assemble_run
from trace_doctor.ingest.reading.jsonl import json_text
from trace_doctor.ingest.reading.tail import FileTail
from trace_doctor.ingest.storage.stored_table import StoredTable
from trace_doctor.ingest.trace.span_live import LiveSpans
from trace_doctor.ingest.trace.trace_events import empty_stored_spans
from trace_doctor.model import STEPS_SCHEMA, IngestWarning, InputFile, RunTables

# Kinds read a look at a time; every other kind's files are parsed whole when they change.
STREAMED = ("metrics", "trace", "log", "dump", "code_diff", "spans")
# Kinds a console capture can be (ingest/kinds/metrics.py): its metric tables are the steps of a run
# with no metrics.jsonl.
CONSOLE_KINDS = ("log", "dump")
# Files whose growth is the run's progress. A dump file is not: a hung run's watchdog keeps dumping.
PROGRESS_KINDS = ("metrics", "trace", "log")


@dataclass
class Look:
    """What one look found."""

    new_rows: list[dict[str, Any]] = field(default_factory=list)  # metrics rows appended, in file order
    # Per new row: it was read again, not written now (a copy of a row its file held before it was read afresh,
    # replaced or truncated, or a row of a `.pre_resume_N` backup): the steps a run had logged, copied by a
    # resume's rewrite, say nothing of where the writer is now. A row of a file read afresh that is no copy (a
    # relaunch that deleted the file and wrote its step 0 between two looks) was written now.
    replayed: list[bool] = field(default_factory=list)
    progressed: bool = False  # a metrics, trace or log file grew
    read_afresh: list[str] = field(default_factory=list)  # files replaced or truncated since the last look
    files: int = 0
    caught_up: bool = True  # every file was read to its end (a large file is caught up over several looks)


@dataclass
class _Followed:
    """One streamed file: its tail and the readers its lines go to."""

    path: Path
    kinds: set[str]
    tail: FileTail
    metrics: LiveMetrics | None = None
    spans: LiveSpans | None = None
    log: LiveLog | None = None
    dumps: LiveDumps | None = None
    console: LiveConsoleTables | None = None  # a log or captured stdout: its printed metric tables
    step_spans: LiveStepSpans | None = None
    # The rows read from this file so far, as fingerprints (_row_key), across its readings afresh: a row of a
    # rewrite is a copy of one of them.
    seen_rows: set[int] = field(default_factory=set)

    def replays(self, rows: list[dict[str, Any]], afresh: bool) -> list[bool]:
        """Per row: whether it was read again rather than written now (Look.replayed); remembers the rows."""
        keys = [_row_key(row) for row in rows]
        before = self.seen_rows
        history = [afresh and key in before for key in keys]
        self.seen_rows = before | set(keys)
        return history

    def make_readers(self) -> None:
        source = str(self.path)
        backup = PRE_RESUME_RE.search(self.path.name)
        self.metrics = (
            LiveMetrics(source, superseded_from=int(backup.group(1)) if backup else None)
            if "metrics" in self.kinds
            else None
        )
        self.spans = LiveSpans(source) if "trace" in self.kinds else None
        self.log = LiveLog(source) if self.kinds & {"log", "dump", "code_diff"} else None
        self.dumps = LiveDumps(source) if "dump" in self.kinds else None
        console = self.kinds & set(CONSOLE_KINDS) and self.path.name not in NOT_CONSOLE
        self.console = LiveConsoleTables(source) if console else None
        self.step_spans = LiveStepSpans(self.path) if "spans" in self.kinds else None


class LiveRun:
    """One run folder (or file) followed as it is written (see the module docstring). `only`, when given,
    says which of the files found under `path` are this run's (a sweep's run whose folder holds others)."""

    def __init__(self, path: str | Path, only: Callable[[Path], bool] | None = None) -> None:
        self.path = Path(path)
        self.only = only
        self._followed: dict[Path, _Followed] = {}
        self._files: dict[str, list[Path]] = {}
        self._passed_over: list = []
        self._side: dict[str, tuple[Any, Parsed, list[IngestWarning]]] = {}  # kind -> (signature, parse, warnings)
        self.last_progress: float | None = None  # time.monotonic() of the last look a progress file grew

    def look(self) -> Look:
        """Read what every file gained since the last look."""
        found = discover([self.path])
        self._files, self._passed_over = found.files, found.passed_over
        if self.only is not None:
            self._files = {kind: [p for p in paths if self.only(p)] for kind, paths in found.files.items()}
        look = Look()
        console_rows: list[tuple[dict[str, Any], bool]] = []
        for kind in STREAMED:
            for path in self._files.get(kind, []):
                followed = self._followed.get(path)
                if followed is None:
                    followed = self._followed[path] = _Followed(path, set(), FileTail(path))
                if kind not in followed.kinds:
                    followed.kinds.add(kind)
                    followed.make_readers()
                    followed.tail = FileTail(path)  # a new reader reads the file from its start
        for followed in self._followed.values():
            look.files += 1
            read = followed.tail.look()
            look.caught_up = look.caught_up and not read.more
            if read.reset:
                look.read_afresh.append(str(followed.path))
                followed.make_readers()
            if read.grew and followed.kinds & set(PROGRESS_KINDS):
                look.progressed = True
            if followed.metrics is not None:
                followed.metrics.feed(read.lines, read.first_line)
                rows = followed.metrics.take_new_rows()
                look.new_rows += rows
                backup = followed.metrics.steps.superseded_from is not None
                look.replayed += [backup or again for again in followed.replays(rows, read.reset)]
            if followed.spans is not None:
                followed.spans.feed(read.lines, read.first_line)
            if followed.log is not None:
                followed.log.feed(read.lines, read.first_line)
            if followed.dumps is not None:
                followed.dumps.feed(read.lines, read.first_line, settled=not read.grew)
            if followed.console is not None:
                followed.console.feed(read.lines, read.first_line)
                tables = followed.console.take_new_rows()
                console_rows += list(zip(tables, followed.replays(tables, read.reset), strict=True))
            if followed.step_spans is not None:
                followed.step_spans.feed(read.lines, followed.tail.offset - len(followed.tail.partial))
        if not self._has_metrics_rows():
            # A console-only run: its printed tables are its steps (a second copy when metrics.jsonl exists).
            look.new_rows += [row for row, _ in console_rows]
            look.replayed += [history for _, history in console_rows]
        if look.progressed:
            self.last_progress = time.monotonic()
        return look

    def _has_metrics_rows(self) -> bool:
        return any(f.metrics is not None and f.metrics.steps.rows for f in self._followed.values())

    def in_flight(self) -> list[str]:
        """What the run is inside now, outermost first: the trace spans open (the latest trace's), else the
        log's `timed()` phases open (the log written to last); [] when neither says."""
        traces = [f.spans for f in self._followed.values() if f.spans is not None and f.spans.last_ts is not None]
        if traces:
            return max(traces, key=lambda spans: spans.last_ts or 0.0).in_flight()
        logs = [f for f in self._followed.values() if f.log is not None and f.log.parser.rows]
        if not logs:
            return []
        return max(logs, key=lambda f: _stat(f.path)[1]).log.open_phases()

    def tables(self) -> RunTables:
        """The run as read so far (see the module docstring)."""
        kinds = [kind for kind in registered() if kind.parse is not None]
        parsed: dict[str, Parsed] = {}
        warnings: dict[str, list[IngestWarning]] = {}
        followed = sorted(self._followed.values(), key=lambda f: str(f.path))
        parsed["metrics"], warnings["metrics"] = self._metrics(followed)
        parsed["trace"] = self._trace(followed)
        parsed["log"] = self._logs(followed)
        parsed["dump"] = self._dumps(followed)
        parsed["spans"], warnings["spans"] = self._step_spans(followed)
        for kind in kinds:
            if kind.name in parsed:
                continue
            by_kind = {name: list(self._files.get(name, [])) for name in kind.files_read}
            paths = [path for name in kind.files_read for path in by_kind[name]]
            if not paths:
                continue
            signature = tuple((str(p), *_stat(p)) for p in paths)
            cached = self._side.get(kind.name)
            if cached is None or cached[0] != signature:
                side_warnings: list[IngestWarning] = []
                result = kind.parse(paths, side_warnings, dataclasses.replace(Reading(), files=by_kind))  # type: ignore[misc]
                cached = self._side[kind.name] = (signature, result, side_warnings)
            parsed[kind.name], warnings[kind.name] = cached[1], list(cached[2])
        run = assemble_run(kinds, parsed, warnings)
        run.passed_over = list(self._passed_over)
        run.meta.path = str(self.path)
        return run

    @staticmethod
    def _metrics(followed: list[_Followed]) -> tuple[Parsed, list[IngestWarning]]:
        """metrics.jsonl's rows; without any, the console captures' tables (as the metrics kind reads them)."""
        readers = [f for f in followed if f.metrics is not None]
        # Backups first, by their resume step, then the live file: the order a cold read keeps.
        readers.sort(
            key=lambda f: (
                (0, f.metrics.steps.superseded_from) if f.metrics.steps.superseded_from is not None else (1, 0)
            )
        )
        frames = [f.metrics.table() for f in readers if f.metrics.steps.rows]
        steps = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema=STEPS_SCHEMA)
        inputs = [InputFile(kind="metrics", path=str(f.path), records=f.metrics.steps.rows) for f in readers]
        warnings: list[IngestWarning] = []
        if not frames:
            tables = {f.path: f.console.tables for f in followed if f.console is not None and f.console.tables}
            steps, console_inputs = console_table_steps(tables, warnings) if tables else (steps, [])
            inputs += console_inputs
        return Parsed({"steps": steps, "launches": launches_of(steps)}, inputs), warnings

    @staticmethod
    def _trace(followed: list[_Followed]) -> Parsed:
        readers = [f for f in followed if f.spans is not None]
        tables = [t for t in (f.spans.table() for f in readers) if t.height]
        spans = tables[0] if len(tables) == 1 else StoredTable.of(tables) if tables else empty_stored_spans()
        inputs = [InputFile(kind="trace", path=str(f.path), records=f.spans.events) for f in readers]
        return Parsed({"spans": spans}, inputs)

    @staticmethod
    def _step_spans(followed: list[_Followed]) -> tuple[Parsed, list[IngestWarning]]:
        readers = [f.step_spans for f in followed if f.step_spans is not None]
        results = [reader.parsed() for reader in readers]
        tables = [table for table, _, _ in results if table.height]
        step_spans = StoredTable.of(tables) if tables else StoredTable([], 0, TIMING_SPANS_SCHEMA)
        warnings = [w for _, _, found in results for w in found]
        return Parsed({"step_spans": step_spans}, [info for _, info, _ in results]), warnings

    @staticmethod
    def _logs(followed: list[_Followed]) -> Parsed:
        readers = [f for f in followed if f.log is not None]
        rows = [row for f in readers for row in f.log.rows]
        inputs = [
            InputFile("code_diff" if f.path.name == "code.diff" else "log", str(f.path), records=f.log.parser.read)
            for f in readers
        ]
        return Parsed({"log_events": log_events_table(rows)}, inputs)

    @staticmethod
    def _dumps(followed: list[_Followed]) -> Parsed:
        readers = [f for f in followed if f.dumps is not None]
        pairs = [f.dumps.tables() for f in readers]
        tasks = [t for t, _ in pairs if t.height]
        stacks = [s for _, s in pairs if s.height]
        inputs = [InputFile("dump", str(f.path), records=len(f.dumps.tasks) + len(f.dumps.frames)) for f in readers]
        empty_tasks, empty_stacks = LiveDumps("").tables()
        return Parsed(
            {
                "task_snapshots": pl.concat(tasks, how="vertical") if tasks else empty_tasks,
                "stack_snapshots": pl.concat(stacks, how="vertical") if stacks else empty_stacks,
            },
            inputs,
        )


def _row_key(row: dict[str, Any]) -> int:
    """A row's fingerprint: equal for a copy of the row (a resume's rewrite keeps the rows it keeps as written)."""
    # json_text, not orjson alone: orjson stops at depth 255, and a row can nest deeper (hostile or not).
    return hash(json_text(row, sort_keys=True))


def _stat(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (-1, -1)
    return (stat.st_size, stat.st_mtime_ns)
