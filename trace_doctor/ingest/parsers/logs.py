"""Text logs -> the `log_events` table: only the lines of interest, each with its line number.

Inputs: the cookbook's `logs.log` (`logger:lineno [LEVEL] message`, no timestamps, multi-line
records), Python's default logging layout (`LEVEL:logger:message`, DEFAULT_RECORD), console captures such as
W&B `output.log` (ANSI colours, bare prints, tracebacks), captured stdout that also holds dumps (dump blocks are
skipped: the dump parser owns them), W&B `requirements.txt` (pip freeze) and `code.diff`; a log pasted into GitHub
markdown (quoted with `> `, inside ``` fences) is read as the lines it quotes; a collector's time before each line
(LINE_STAMP, DATELESS_STAMP) is taken off and kept as the line's timestamp. Every line read counts as a record;
events are emitted for the kinds in log_kinds.py. Identical warning lines (a renderer warning repeated
thousands of times) collapse into one event carrying `repeats` and `last_line`. A timed log's last timed line,
when no event is on it and it is later than every event, is kept as a `last-timed-line` event: where the log's
times end.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from trace_doctor.file_names import input_path
from trace_doctor.ingest.parsers import pyspy
from trace_doctor.ingest.parsers.dumps import OPENERS, dump_block_lines, opens_block
from trace_doctor.ingest.parsers.log_kinds import (
    FAULT_THREAD,
    PYSPY_PROCESS,
    PYSPY_THREAD,
    WATCHDOG_TIMEOUT,
    Classified,
    classify_exception_line,
    classify_message,
    fault_frame,
    guide_printout,
    interesting,
    kill_report,
    live_stack_start,
    native_crash,
    pyspy_frame,
    tinker_run_ids,
    versions_in,
)
from trace_doctor.ingest.reading.textfile import strip_ansi, text_lines
from trace_doctor.knowledge.errors import decode_error
from trace_doctor.model import LOG_EVENTS_SCHEMA, IngestWarning, InputFile

RECORD = re.compile(
    r"^(?P<logger>[\w.<>-]+):(?P<lineno>\d+) \[(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\] (?P<msg>.*)$"
)
# The time a log collector puts before each line it keeps: `kubectl logs --timestamps` and `docker logs -t` (RFC 3339
# with nanoseconds, `2026-03-05T10:00:01.123456789Z `), moreutils `ts` with a date format, a bracketed stamp, or a
# log viewer's copy that puts each line's time on a line of its own before it (`2025-12-03 02:45:45`, then the
# line). The line is read without it, at that time: a cookbook record behind it is still a record.
LINE_STAMP = re.compile(
    r"^\[?(?P<stamp>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?P<fraction>[.,]\d+)?(?P<zone>Z|[+-]\d\d:?\d\d)?\]?(?:\s+|$)"
)
# Python's default logging layout, `logging.basicConfig()` with no format (`%(levelname)s:%(name)s:%(message)s`;
# the cookbook's own eval scripts call it so, eval/run_inspect_evals.py): `INFO:tinker_cookbook.rl.train:Starting
# train`, `ERROR:__main__:...`. Read as the cookbook's records are, with no line number. A URL (`INFO:https://...`)
# is not a logger.
DEFAULT_RECORD = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.<>-]+):(?!//)(?P<msg>.*)$")
DEFAULT_RECORD_STARTS = ("DEBUG:", "INFO:", "WARNING:", "ERROR:", "CRITICAL:")
# moreutils `ts` with its default format (`%b %d %H:%M:%S`: `Mar 05 10:00:01 line`), or `ts -s` (the time since
# the start, `00:00:05 line`) or a format of the time alone: a time with no year or no date. It is read in
# DATELESS_YEAR (a leap year, so `Feb 29` reads; long before any run, so derive/wall_clock.py takes no calendar
# time from it), a day or a year later each time the clock goes back past midnight or New Year: the times
# between lines are right, the date is not known.
DATELESS_STAMP = re.compile(
    r"^(?:(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (?P<day>\d\d) )?"
    r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)(?P<fraction>\.\d+)?(?:\s+|$)"
)
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTH_INITIALS = frozenset(month[0] for month in MONTHS)
# How a line with a collector's time before it starts: a digit, a bracket, a month's name.
STAMP_INITIALS = frozenset("0123456789[") | MONTH_INITIALS
DATELESS_YEAR = 1904
# How far a dateless clock must go back to have passed midnight (a time alone) or New Year (a month and day).
MIDNIGHT_BACK = timedelta(hours=12)
NEW_YEAR_BACK = timedelta(days=180)
# GitHub markdown around a pasted log: a block quote's `>` (and the one space after it), nested or not, and a code
# fence's line (``` or ~~~, with its language). The quoted line is read without its markers; a fence line is read as
# a blank line (a traceback pasted across two fenced blocks stays one). Python's prompt `>>> ` is no quote.
QUOTE_MARKERS = re.compile(r"^(?:>(?: |$))+")
FENCE = re.compile(r"^\s*(?:`{3,}|~{3,})[\w+.-]*\s*$")
TRACEBACK_START = "Traceback (most recent call last):"
# A terminal echoes Ctrl-C as `^C` just before Python prints the KeyboardInterrupt's traceback.
TRACEBACK_STARTS = (TRACEBACK_START, "^C" + TRACEBACK_START)
BARE_INTERRUPT = "KeyboardInterrupt"
# rich's traceback handler (`rich.traceback.install()`) draws the frames in a box whose top border carries the
# title and whose other lines start with a box-drawing character; the `Type: message` line follows the box.
RICH_TRACEBACK_TOP = "╭"
RICH_TRACEBACK_TITLE = TRACEBACK_START.rstrip(":")
RICH_TRACEBACK_BODY = ("│", "╰", "╭")
# loguru's traceback (`logger.exception`, `@logger.catch`) marks the frame it was caught in with `> File ...`.
LOGURU_FRAME = "> File "
# IPython's traceback (a notebook cell's output saved or pasted): `<Type>   Traceback (most recent call last)` under a
# rule of dashes, then `Cell In[N], line L` / `File <path>:<line>, in <func>` headers with numbered source lines
# (`--> 120` marks the line that raised), and the `Type: message` line.
IPYTHON_TRACEBACK_HEADER = re.compile(r"^[A-Za-z_][\w.]*\s{2,}Traceback \(most recent call last\)\s*$")
IPYTHON_TRACEBACK_BODY = ("Cell In[", "Input In [", "File ", "-->", "---->")
# Python 3.11's exception group (an asyncio.TaskGroup's, anyio's): `  + Exception Group Traceback (most recent
# call last):`, then the group's frames and each sub-exception's traceback behind a `| ` border, numbered by
# `+-+---- 1 ----` rules; the sub-exceptions' final lines are the errors that ended the run.
EXCEPTION_GROUP_START = re.compile(r"^\s*\+ Exception Group Traceback \(most recent call last\):\s*$")
EXCEPTION_GROUP_BORDER = re.compile(r"^\s*(?:\| ?|(?=\+[-+]))")
EXCEPTION_GROUP_RULE = re.compile(r"^\+[-+]*(?: *(?:\d+|\.\.\.)[^-]*-*)?\s*$")
# The crashing thread's frames kept from a faulthandler dump, innermost first.
FAULT_FRAMES_KEPT = 20
LIVE_THREADS_KEPT = 16
# How the lines that open a live stack dump start (its header, its first thread's block).
LIVE_STACK_STARTS = ("Process ", "Python v", "Parent Process ", "Timeout (", "Thread ")
COLLAPSIBLE = frozenset({"warning", "renderer"})
# A `Logging to:` line this close after `Command line invocation:` is the same process start.
RESTART_WINDOW_LINES = 10
VERDICT_WINDOW_LINES = 5


@dataclass
class _FileState:
    """Per-file parsing state: the open record, the traceback inside it, dedup memories."""

    source: str
    freeze_file: bool
    rows: list[dict[str, Any]] = field(default_factory=list)
    record_event: dict[str, Any] | None = None  # the event emitted for the open record, if any
    in_record: bool = False
    traceback_line: int | None = None  # line of "Traceback (most recent call last):" being read
    collapsed: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    seen_versions: set[tuple[str, str]] = field(default_factory=set)
    seen_ids: set[str] = field(default_factory=set)
    last_restart: int | None = None
    last_model_dump: int | None = None  # line of the serialization test's `model_dump() took`
    fatal_event: dict[str, Any] | None = None  # faulthandler's `Fatal Python error` event, its frames still read
    in_crashed_thread: bool = False  # reading faulthandler's `Current thread` block
    in_exception_group: bool = False  # reading an exception group's bordered traceback
    live_event: dict[str, Any] | None = None  # a live process's stack dump being read (py-spy, faulthandler watchdog)
    live_thread: dict[str, Any] | None = None  # its thread whose frames are being read
    dump_header: tuple[int, str] | None = None  # a live stack dump's header (line, text), its threads to come
    rich_width: int | None = None  # the width of rich's traceback box being read: its console's, where it wraps
    # A rich traceback's last final-line line read, the row it is on, and the width rich wrapped it at.
    wrapped_error: tuple[dict[str, Any], str, int] | None = None
    stamp: datetime | None = None  # the time a collector put before the line being read (LINE_STAMP)
    stamp_ahead: datetime | None = None  # a time on a line of its own: the next line's
    # A dateless clock's (DATELESS_STAMP) last time read, and the days or years it went round since the first.
    dateless_last: datetime | None = None
    dateless_turns: int = 0
    # The last line with a time (its number, time, text), and the latest time an event was emitted with.
    last_timed: tuple[int, datetime, str] | None = None
    latest_event_stamp: datetime | None = None

    def emit(
        self,
        line: int,
        kind: str,
        message: str,
        fields: dict[str, Any],
        logger: str | None = None,
        level: str | None = None,
    ) -> dict[str, Any] | None:
        if kind in COLLAPSIBLE:
            key = (kind, message)
            previous = self.collapsed.get(key)
            if previous is not None:
                previous["_fields"]["repeats"] += 1
                previous["_fields"]["last_line"] = line
                return None
        if kind == "restart":
            if (
                fields.get("marker") == "logging-to"
                and self.last_restart is not None
                and line - self.last_restart <= RESTART_WINDOW_LINES
            ):
                return None
            self.last_restart = line if fields.get("marker") == "command-line" else None
        if self.stamp is not None and (self.latest_event_stamp is None or self.stamp > self.latest_event_stamp):
            self.latest_event_stamp = self.stamp
        row = {
            "source": self.source,
            "line": line,
            "timestamp": self.stamp,
            "logger": logger,
            "level": level,
            "kind": kind,
            "message": message[:2000],
            "_fields": dict(fields),
        }
        if kind in COLLAPSIBLE:
            row["_fields"].update(repeats=1, last_line=line)
            self.collapsed[(kind, message)] = row
        self.rows.append(row)
        return row

    def table_rows(self) -> list[dict[str, Any]]:
        """The events, with the last timed line in its place among them when no event is on it and its time is
        later than every event's (the lines after the last event, a collapsed warning's repeats): the log's times
        end there, not at its last event."""
        if self.last_timed is None:
            return self.rows
        line, stamp, text = self.last_timed
        if self.latest_event_stamp is not None and stamp <= self.latest_event_stamp:
            return self.rows
        at = bisect_right(self.rows, line, key=lambda row: row["line"])
        if at and self.rows[at - 1]["line"] == line:
            return self.rows
        row = {
            "source": self.source,
            "line": line,
            "timestamp": stamp,
            "logger": None,
            "level": None,
            "kind": "last-timed-line",
            "message": text.strip()[:2000],
            "_fields": {},
        }
        return [*self.rows[:at], row, *self.rows[at:]]


def _handle_versions(state: _FileState, line: int, text: str) -> None:
    for package, version, evidence in versions_in(text, freeze_file=state.freeze_file):
        if (package, version) in state.seen_versions:
            continue
        state.seen_versions.add((package, version))
        state.emit(line, "version", text.strip(), {"package": package, "version": version, "evidence": evidence})


def _handle_ids(state: _FileState, line: int, text: str, logger: str | None, level: str | None) -> None:
    for run_id in tinker_run_ids(text):
        if "run:" + run_id not in state.seen_ids:
            state.seen_ids.add("run:" + run_id)
            state.emit(line, "session", text.strip(), {"run_id": run_id}, logger, level)


def _finish_traceback(state: _FileState, line: int, text: str, exc_type: str, exc_message: str | None) -> None:
    """Attach a traceback's final line to its record's event, or emit it as an error of its own."""
    fields = {
        "exception_type": exc_type,
        "exception_message": exc_message,
        "exception_line": line,
        "traceback_line": state.traceback_line,
    }
    known = decode_error(text)
    if known is not None:
        fields["error_id"] = known.id
    # Only a WARNING/ERROR record owns the traceback after it; after an INFO line it is stderr
    # output interleaved with the log, an error of its own.
    event = (
        state.record_event
        if state.in_record and state.record_event and state.record_event["level"] in ("WARNING", "ERROR", "CRITICAL")
        else None
    )
    if event is not None:
        # A chained traceback ("During handling of the above exception ...") ends once per exception: the
        # record keeps the last one's fields and, in order, the type of each (an interrupt that a shutdown
        # error followed is told from a crash by it).
        event["_fields"]["exception_chain"] = [*event["_fields"].get("exception_chain", []), exc_type]
        if (
            "error_id" in event["_fields"]
            and "error_id" in fields
            and event["_fields"]["error_id"] != fields["error_id"]
        ):
            fields["exception_error_id"] = fields.pop("error_id")
        event["_fields"].update({k: v for k, v in fields.items() if v is not None})
    else:
        event = state.emit(line, "error", text.strip(), {k: v for k, v in fields.items() if v is not None})
    state.traceback_line = None
    # rich prints the final line at its console's width, word-wrapped: the lines that follow may be its rest.
    width, state.rich_width = state.rich_width, None
    state.wrapped_error = (event, text.rstrip(), width) if width is not None and event is not None else None


# A wrapped final line is taken onto its error up to this length: rich wraps a message over a few lines, and
# each line taken decodes the joined message again (a screen of full-width lines after a traceback would
# otherwise cost a decode of a longer message per line).
MAX_WRAPPED_CHARS = 2000


def _wrapped_rest(state: _FileState, text: str) -> bool:
    """Whether `text` is the next line of a rich traceback's final line that rich word-wrapped at its console's
    width (the box's): the line before it was no wider, and could not take this line's first word. Taken onto the
    error, which is decoded again whole; whether the line was one."""
    if state.wrapped_error is None:
        return False
    event, before, width = state.wrapped_error
    words = text.split()
    fields = event["_fields"]
    if (
        not words
        or len(before) > width
        or len(before) + 1 + len(words[0]) <= width
        # What follows a traceback on a terminal (the shell's `Killed`, the next traceback) is never its rest,
        # however wide the line before it.
        or text.lstrip().startswith(TRACEBACK_STARTS)
        or kill_report(text)
        or len(fields.get("exception_message") or "") + len(text) > MAX_WRAPPED_CHARS
    ):
        state.wrapped_error = None
        return False
    joined = f"{fields.get('exception_message') or ''} {text.strip()}".strip()
    fields["exception_message"] = joined
    if event["kind"] == "error" and event["logger"] is None:
        event["message"] = f"{event['message']} {text.strip()}"[:2000]
    known = decode_error(f"{fields.get('exception_type')}: {joined}")
    if known is not None:
        fields["error_id"] = known.id
    state.wrapped_error = (event, text.rstrip(), width)
    return True


def _continuation(state: _FileState, line: int, text: str) -> None:
    """A line that is not a record start: inside a record, a traceback, or a bare print."""
    if EXCEPTION_GROUP_START.match(text):
        state.in_exception_group = True
        state.traceback_line = line
        return
    if state.in_exception_group:
        if (border := EXCEPTION_GROUP_BORDER.match(text)) is not None:
            # The group's own tracebacks and each sub-exception's, read as plain tracebacks once the border
            # is off: each final line is an error of its own.
            inner = text[border.end() :]
            if inner.strip() and not EXCEPTION_GROUP_RULE.match(inner):
                _continuation_inside(state, line, inner)
            return
        state.in_exception_group = False
    _continuation_inside(state, line, text)


def _continuation_inside(state: _FileState, line: int, text: str) -> None:
    """_continuation for a line outside an exception group's border (or with the border taken off)."""
    if _wrapped_rest(state, text):
        return
    if text.startswith(RICH_TRACEBACK_TOP) and RICH_TRACEBACK_TITLE in text:
        state.rich_width = len(text.rstrip())
    if (
        text.startswith(TRACEBACK_STARTS)
        or (text.startswith(RICH_TRACEBACK_TOP) and RICH_TRACEBACK_TITLE in text)
        or (RICH_TRACEBACK_TITLE in text and IPYTHON_TRACEBACK_HEADER.match(text) is not None)
    ):
        state.traceback_line = line
        return
    if state.traceback_line is not None:
        if text.startswith((" ", *RICH_TRACEBACK_BODY, LOGURU_FRAME, *IPYTHON_TRACEBACK_BODY)) or not text.strip():
            _handle_versions(state, line, text)
            return
        if text.startswith(("During handling of the above exception", "The above exception was the direct cause")):
            return
        final = classify_exception_line(text.strip())
        if final is not None:
            _finish_traceback(state, line, text, *final)
            return
        state.traceback_line = None
    if not text.strip():
        return
    if _live_stack(state, line, text) or _faulthandler_dump(state, line, text):
        return
    if text.strip() == BARE_INTERRUPT:
        # Ctrl-C with its traceback suppressed (a handler that prints the exception's name, `^C` echoed on
        # the line before): the interrupt's own name on a line of its own ends the run, with no traceback.
        state.in_record = False
        state.emit(line, "error", BARE_INTERRUPT, {"exception_type": BARE_INTERRUPT, "exception_line": line})
        return
    if state.in_record:
        # Continuation lines of a record (tables, examples) are not events of their own, but a
        # version, run id or GIL-monitor line printed into the middle of a record still is.
        # stderr lines (warnings.warn output) interleave with records in console captures.
        # A progress bar (stderr) lands after a record the same way.
        if "[GIL monitor]" in text or "Warning: " in text or "%|" in text or guide_printout(text) or kill_report(text):
            _bare(state, line, text)
            return
        _handle_versions(state, line, text)
        _handle_ids(state, line, text, None, None)
        return
    _bare(state, line, text)


def _live_stack(state: _FileState, line: int, text: str) -> bool:
    """A live process's stack dump (log_kinds.live_stack_start): one event, each thread's name and frames
    (innermost first) on it; whether the line was part of one."""
    live = state.live_event
    if live is not None:
        threads = live["_fields"]["threads"]
        thread = FAULT_THREAD.match(text) or PYSPY_THREAD.match(text)
        if thread is not None and len(threads) < LIVE_THREADS_KEPT:
            name = thread.groupdict().get("name") or ("current" if thread.groupdict().get("current") else "")
            state.live_thread = {"name": name or text.split(" (", 1)[0], "frames": []}
            threads.append(state.live_thread)
            return True
        frame = fault_frame(text) or pyspy_frame(text)
        if frame is not None or thread is not None or pyspy.is_locals_line(text):
            if (
                frame is not None
                and state.live_thread is not None
                and len(state.live_thread["frames"]) < FAULT_FRAMES_KEPT
            ):
                state.live_thread["frames"].append(frame)
            return True
        state.live_event = state.live_thread = None
    if not text.startswith(LIVE_STACK_STARTS):  # the cheap test: most lines are none of a dump's
        state.dump_header = None
        return False
    if PYSPY_PROCESS.match(text) or WATCHDOG_TIMEOUT.match(text):
        # A dump's header (py-spy's `Process N: <command>` and `Python vX (<path>)`, faulthandler's `Timeout
        # (H:MM:SS)!`): the dump is one when a thread's block follows it.
        state.dump_header = (line, text.strip())
        return False
    if state.dump_header is not None and text.startswith(("Python v", "Parent Process ")):
        return False
    header, state.dump_header = state.dump_header, None
    opens = PYSPY_THREAD.match(text) or (header is not None and FAULT_THREAD.match(text))
    found = live_stack_start(header[1] if header and header[1].startswith("Timeout") else text.strip())
    if not opens or found is None:
        return False
    state.in_record = False
    state.live_event = state.emit(header[0] if header else line, found.kind, found.message, found.fields)
    return _live_stack(state, line, text) if state.live_event is not None else True


def _faulthandler_dump(state: _FileState, line: int, text: str) -> bool:
    """A native crash's report (log_kinds.native_crash) and, after faulthandler's `Fatal Python error`, the
    frames of the thread that crashed, kept on its event; whether the line was one of these."""
    fatal = state.fatal_event
    if fatal is not None and (thread := FAULT_THREAD.match(text)) is not None:
        state.in_crashed_thread = thread["current"] == "Current thread"
        if state.in_crashed_thread:
            fatal["_fields"]["traceback_line"] = line
        return True
    if fatal is not None and (frame := fault_frame(text)) is not None:
        frames = fatal["_fields"].setdefault("frames", [])
        if state.in_crashed_thread and len(frames) < FAULT_FRAMES_KEPT:
            frames.append(frame)
        return True
    state.in_crashed_thread = False
    if not text.startswith(("Fatal Python error: ", "zsh: ")) and not any(
        word in text for word in ("fault", "Abort", "error", "instruction", "exception")
    ):
        return False
    crash = native_crash(text.strip())
    if crash is None:
        return False
    state.in_record = False
    row = state.emit(line, crash.kind, crash.message, {**crash.fields, "exception_line": line})
    if text.startswith("Fatal Python error: "):
        state.fatal_event = row
    return True


def _bare(state: _FileState, line: int, text: str) -> None:
    """A line printed outside any log record (console capture, stdout, freeze, diff)."""
    stripped = text.strip()
    if interesting(stripped):
        classified = classify_message(stripped, None, None)
        if classified is not None and "verdict" in classified.fields:
            # A bare `WARNING: ...` is only the serialization test's verdict right after its timing.
            if state.last_model_dump is None or line - state.last_model_dump > VERDICT_WINDOW_LINES:
                classified = None
        if classified is not None:
            if "model_dump_s" in classified.fields:
                state.last_model_dump = line
            state.emit(line, classified.kind, classified.message, classified.fields)
    _handle_versions(state, line, stripped)
    _handle_ids(state, line, stripped, None, None)


def _record(state: _FileState, line: int, logger: str, level: str, message: str) -> None:
    state.in_record = True
    state.traceback_line = None
    state.wrapped_error = None
    state.record_event = None
    state.in_exception_group = False
    classified: Classified | None = None
    if level in ("WARNING", "ERROR", "CRITICAL") or interesting(message):
        classified = classify_message(message, level, logger)
    if classified is not None:
        if classified.kind == "session":
            key = "session:" + next(iter(classified.fields.values()))
            if key in state.seen_ids:
                classified = None
            else:
                state.seen_ids.add(key)
    if classified is not None:
        state.record_event = state.emit(line, classified.kind, classified.message, classified.fields, logger, level)
    _handle_versions(state, line, message)
    _handle_ids(state, line, message, logger, level)


class LogLines:
    """One file's lines parsed as they come (a live run's log, a look at a time): the parsing state (the
    open record, a traceback being read, what was already reported) is kept between batches."""

    def __init__(self, source: str, *, freeze_file: bool = False, code_diff: bool = False) -> None:
        self.state = _FileState(source, freeze_file)
        self.code_diff = code_diff  # only its versions are read (parse_code_diff)
        self.read = 0  # lines read: every line outside dump blocks

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The table's rows so far (_FileState.table_rows)."""
        return self.state.table_rows()

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events emitted so far, in line order, each once (rows less the last timed line)."""
        return self.state.rows

    def feed(self, lines: list[str], first_line: int = 1) -> None:
        """Lines of the file, the first numbered `first_line` (1-based); dump blocks among them are skipped."""
        state = self.state
        if self.code_diff:
            for index, raw in enumerate(lines):
                _handle_versions(state, index + first_line, raw.strip())
            self.read += len(lines)
            return
        skip = bytearray(len(lines) + 2)
        for start, end in dump_block_lines(lines):
            skip[start : end + 1] = b"\x01" * (end - start + 1)
        for index, raw in enumerate(lines):
            if skip[index + 1]:
                state.in_record = False
                state.traceback_line = None
                continue
            self.read += _parse_line(state, index + first_line, raw)


def parse_lines(lines: Iterable[str], source: str, *, freeze_file: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Events from one file's lines and the number of lines read (every line outside dump blocks).

    The lines are taken once, in order, and held only from the first line that opens a dump block on
    (the blocks are found with look-ahead there): a log without dumps costs a line at a time."""
    state = _FileState(source, freeze_file)
    read = 0
    number = 0
    any_opener = False
    ahead = iter(lines)
    current = next(ahead, None)
    while current is not None:
        following = next(ahead, None)
        any_opener = any_opener or current.startswith(OPENERS)
        if opens_block(current, following):
            rest = [current] if following is None else [current, following, *ahead]
            read += _parse_with_dumps(state, rest, number, any_opener)
            return state.table_rows(), read
        number += 1
        read += _parse_line(state, number, current)
        current = following
    return state.table_rows(), read


def parse_code_diff(lines: Iterable[str], source: str) -> tuple[list[dict[str, Any]], int]:
    """`code.diff`: the code the run ran, not its output. Only the versions it records are read (the repository's
    commit, the module's install path): its diff lines are the user's code, where a `Killed`, a traceback or an
    error message is text of the code, not something that happened to the run."""
    reader = LogLines(source, code_diff=True)
    reader.feed(list(lines))
    return reader.rows, reader.read


def _parse_with_dumps(state: _FileState, rest: list[str], before: int, any_opener: bool) -> int:
    """Parse the lines from the first dump block on (`before` lines came first), skipping the blocks'
    lines; returns the lines read. As the whole file's scan would, the blocks count only when some
    line starts as an opener does before its colours are stripped."""
    if not (any_opener or any(line.startswith(OPENERS) for line in rest)):
        return sum(_parse_line(state, before + index, raw) for index, raw in enumerate(rest, 1))
    skip = bytearray(len(rest) + 2)
    for start, end in dump_block_lines(rest):
        skip[start : end + 1] = b"\x01" * (end - start + 1)
    read = 0
    for index, raw in enumerate(rest, 1):
        if skip[index]:
            state.in_record = False
            state.traceback_line = None
            continue
        read += _parse_line(state, before + index, raw)
    return read


def _line_stamp(found: re.Match[str]) -> datetime | None:
    """A LINE_STAMP match as a naive UTC time (nanoseconds cut to microseconds), or None when it is no date."""
    fraction = (found["fraction"] or "").replace(",", ".")[:7]
    zone = found["zone"] or ""
    try:
        stamp = datetime.fromisoformat(found["stamp"].replace(" ", "T") + fraction + zone.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.astimezone(UTC).replace(tzinfo=None) if stamp.tzinfo is not None else stamp


def _dateless_stamp(state: _FileState, found: re.Match[str]) -> datetime | None:
    """A DATELESS_STAMP match as a time in DATELESS_YEAR, turned a day (a time alone) or a year (a month and day)
    further each time the clock goes back past midnight or New Year; None when it is no time."""
    micro = int((found["fraction"] or ".0")[1:7].ljust(6, "0"))
    clock = (int(found["hour"]), int(found["minute"]), int(found["second"]), micro)
    try:
        if found["month"] is None:
            turn = timedelta(days=1)
            stamp = datetime(DATELESS_YEAR, 1, 1, *clock) + turn * state.dateless_turns
            if state.dateless_last is not None and stamp < state.dateless_last - MIDNIGHT_BACK:
                state.dateless_turns += 1
                stamp += turn
        else:
            month, day = MONTHS.index(found["month"]) + 1, int(found["day"])
            stamp = datetime(DATELESS_YEAR + state.dateless_turns, month, day, *clock)
            if state.dateless_last is not None and stamp < state.dateless_last - NEW_YEAR_BACK:
                state.dateless_turns += 1
                stamp = datetime(DATELESS_YEAR + state.dateless_turns, month, day, *clock)
    except ValueError:
        return None
    state.dateless_last = stamp
    return stamp


def _take_stamp(state: _FileState, text: str) -> tuple[str, datetime | None]:
    """The line without the time a collector put before it, and that time (None when it has none)."""
    if text[:1].isdigit() or text.startswith("["):
        found = LINE_STAMP.match(text)
        if found is not None and (stamp := _line_stamp(found)) is not None:
            return text[found.end() :], stamp
    if text[:1].isdigit() or (text[:1] in MONTH_INITIALS and text[:3] in MONTHS):
        found = DATELESS_STAMP.match(text)
        if found is not None and (stamp := _dateless_stamp(state, found)) is not None:
            return text[found.end() :], stamp
    return text, None


def _parse_line(state: _FileState, number: int, raw: str) -> int:
    """Take one line outside dump blocks into `state` (it counts as read: 1)."""
    text = strip_ansi(raw) if "\x1b" in raw else raw
    if text.startswith(">") and (quote := QUOTE_MARKERS.match(text)) is not None:
        text = text[quote.end() :]
    stamp = None
    if text[:1] in STAMP_INITIALS:  # the cheap test: most lines start with none of a stamp's first characters
        text, stamp = _take_stamp(state, text)
    if stamp is not None and not text.strip():
        # A time on a line of its own (a log viewer's copy) is the next line's; it does not end a
        # traceback being read.
        state.stamp_ahead = stamp
        return 1
    state.stamp = stamp if stamp is not None else state.stamp_ahead
    state.stamp_ahead = None
    if state.stamp is not None:
        state.last_timed = (number, state.stamp, text)
    if ("```" in text or "~~~" in text) and FENCE.match(text) is not None:
        text = ""
    if not text.strip() and state.traceback_line is None:
        state.wrapped_error = None  # a blank line ends what rich wrapped
        return 1
    match = RECORD.match(text) if "] " in text else None
    if match is None and text.startswith(DEFAULT_RECORD_STARTS):
        match = DEFAULT_RECORD.match(text)
    if match is not None:
        _record(state, number, match["logger"], match["level"], match["msg"])
    else:
        _continuation(state, number, text)
    return 1


def line_message(text: str) -> str:
    """A line's message as the parser reads it: GitHub markdown's quote markers, a collector's time before it
    (LINE_STAMP, DATELESS_STAMP) and a record's layout (the cookbook's, Python's default) taken off. For readers
    of a capture's lines that keep no parsing state (parsers/console_timeline.py)."""
    if text.startswith(">") and (quote := QUOTE_MARKERS.match(text)) is not None:
        text = text[quote.end() :]
    if text[:1].isdigit() or text.startswith("[") or text[:3] in MONTHS:
        stamp = LINE_STAMP.match(text) or DATELESS_STAMP.match(text)
        text = text[stamp.end() :] if stamp is not None else text
    record = RECORD.match(text) if "] " in text else None
    if record is None and text.startswith(DEFAULT_RECORD_STARTS):
        record = DEFAULT_RECORD.match(text)
    return (record["msg"] if record is not None else text).strip()


def log_events_table(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The `log_events` table of parse_lines' rows."""
    if not rows:
        return pl.DataFrame(schema=LOG_EVENTS_SCHEMA)
    columns = {name: [row.get(name) for row in rows] for name in LOG_EVENTS_SCHEMA if name != "fields"}
    columns["fields"] = [orjson.dumps(row["_fields"], option=orjson.OPT_SORT_KEYS).decode() for row in rows]
    return pl.DataFrame(columns, schema=LOG_EVENTS_SCHEMA)


def parse_log_files(paths: Iterable[Path], warnings: list[IngestWarning]) -> tuple[pl.DataFrame, list[InputFile]]:
    """Lines of interest from every text log, in file then line order."""
    rows: list[dict[str, Any]] = []
    inputs: list[InputFile] = []
    for path in sorted(set(input_path(p) for p in paths)):
        info = InputFile("code_diff" if path.name == "code.diff" else "log", str(path))
        inputs.append(info)
        # A dump file is read here too (its log lines) after the dump parser warned about it.
        already = {(w.line, w.problem) for w in warnings if w.path == str(path)}
        fresh: list[IngestWarning] = []
        lines = text_lines(path, fresh)
        if lines is None:
            info.skipped = 1
        else:
            file_rows, info.records = (
                parse_code_diff(lines, str(path))
                if path.name == "code.diff"
                else parse_lines(lines, str(path), freeze_file=path.name == "requirements.txt")
            )
            rows.extend(file_rows)
        # After the read: the reader warns as it goes (bytes that are not text, a line cut).
        warnings.extend(w for w in fresh if (w.line, w.problem) not in already)
    return log_events_table(rows), inputs
