"""`py-spy dump --pid N` printouts -> rows of the stack table the thread-stack watchdog fills (FORMATS.md 5.2).

py-spy's text (src/dump.rs, stack_trace.rs): a header `Process N: <command>`, `Python v<version> (<exe>)` and,
for a subprocess, `Parent Process N: <command>`; a blank line; then per thread `Thread <id> (<state>): "<name>"`,
state `active`, `active+gil` or `idle`, the name left out when py-spy found none, the id the OS thread id
in decimal (the pthread id as `0x..` where there is none, and on macOS). Its frames follow innermost
first, `    <function> (<file>:<line>)`, or `    <function> (<file>)` when the line is unknown (the native
frames `--native` adds: `0x7f3a... (libc.so.6)`). `--locals` adds under a frame `        Arguments:` and
`        Locals:` headings, each with `            <name>: <repr>` lines. Files are shown as py-spy
shortens them (`torch/nn/functional.py`, `threading.py`), a script by the path it was run with.

The table keeps frames outermost first (frame_index 0 = outermost, as the watchdog's). Threads are labelled
as the watchdog labels them where py-spy's names say the same thread: `MainThread` is [main], and the
tinker SDK's event-loop thread (its stack runs in `tinker/lib/internal_client_holder.py`) is [holder]; any
other thread by its name, else its id.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from trace_doctor.ingest.reading.textfile import INT64_MAX, int64, strip_ansi

PROCESS = re.compile(r"^Process (?P<pid>\d+): (?P<command>\S.*?)\s*$")
PARENT_PROCESS = re.compile(r"^Parent Process \d+: ")
PYTHON_VERSION = re.compile(r"^Python v(?P<version>\d[\w.+-]*)(?: \((?P<exe>.*)\))?\s*$")
THREAD = re.compile(
    r"^Thread (?P<id>0[xX][0-9A-Fa-f]+|\d+) \((?P<state>(?:active|idle)(?:\+gil)?)\)(?:: \"(?P<name>.*)\")?\s*$"
)
# The function is everything up to the last ` (`: a native C++ frame's name has parentheses of its own.
FRAME = re.compile(r"^ {4}(?P<func>\S.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
LOCALS_HEADING = re.compile(r"^ {8}(?:Arguments|Locals):\s*$")
LOCAL = re.compile(r"^ {12}\S")
# How many lines a header may take before its first thread (`Python v`, `Parent Process`, blank lines).
HEADER_LINES = 4
MAIN_THREAD = "MainThread"
# The tinker SDK runs its event loop in a thread of its own (InternalClientHolderThreadSingleton).
SDK_LOOP_FILE = re.compile(r"(?:^|/)tinker/lib/internal_client_holder\.py$")

Warn = Callable[[int, str], None]


def thread_id(text: str) -> int | None:
    """py-spy's thread id as a number: decimal, or `0x..` hex; None when it does not fit 64 bits."""
    if text[:2].lower() != "0x":
        return int64(text)
    value = int(text, 16) if len(text) <= 18 else INT64_MAX + 1
    return value if value <= INT64_MAX else None


def opens_dump(text: str, following: list[str]) -> bool:
    """Whether a py-spy dump starts at the line `text` (`following`: the lines after it, HEADER_LINES of them
    will do): its `Process N:` header with a thread line within a few lines after it, or a thread line
    followed by a frame or another thread line. A line that merely starts with `Thread` or `Process` is none."""
    after = [strip_ansi(line) if "\x1b" in line else line for line in following[:HEADER_LINES]]
    if PROCESS.match(text):
        for line in after:
            if THREAD.match(line):
                return True
            if line.strip() and not (PYTHON_VERSION.match(line) or PARENT_PROCESS.match(line)):
                return False
        return False
    return bool(THREAD.match(text) and after and (FRAME.match(after[0]) or THREAD.match(after[0])))


def is_locals_line(text: str) -> bool:
    """A `--locals` line under a frame: its `Arguments:` / `Locals:` heading or a `name: repr` line."""
    return text.startswith("        ") and bool(LOCALS_HEADING.match(text) or LOCAL.match(text))


class PySpyDump:
    """One py-spy printout read a line at a time; `rows()` once it has ended."""

    def __init__(self, source: str, snapshot: int, warn: Warn) -> None:
        self.source = source
        self.snapshot = snapshot
        self.warn = warn
        self.process_id: int | None = None
        self.command: str | None = None
        self.python_version: str | None = None
        self._threads: list[dict[str, Any]] = []
        self._frame: dict[str, Any] | None = None

    def take(self, text: str, number: int) -> bool:
        """Take one line; False when it is not part of the dump (the dump has ended before it)."""
        if not text.strip():
            return True  # the one after the header; trailing ones are trimmed from the block's range (dumps.py)
        if (thread := THREAD.match(text)) is not None:
            ident = thread_id(thread["id"])
            if ident is None:
                self.warn(number, f"thread id {thread['id'][:40]} does not fit a 64-bit integer; kept as unknown")
            self._threads.append(
                {"id": thread["id"], "ident": ident, "state": thread["state"], "name": thread["name"], "frames": []}
            )
            self._frame = None
            return True
        if (frame := FRAME.match(text)) is not None and self._threads:
            self._frame = {"line": number, "func": frame["func"].strip(), "file": frame["file"], "at": frame["line"]}
            self._frame["locals"] = []
            self._threads[-1]["frames"].append(self._frame)
            return True
        if (LOCALS_HEADING.match(text) or LOCAL.match(text)) and self._frame is not None:
            self._frame["locals"].append(text.strip())
            return True
        if not self._threads:
            return self._header(text)
        return False

    def _header(self, text: str) -> bool:
        if (process := PROCESS.match(text)) is not None and self.process_id is None:
            self.process_id, self.command = int64(process["pid"]), process["command"]
            return True
        if (python := PYTHON_VERSION.match(text)) is not None:
            self.python_version = python["version"]
            return True
        return bool(PARENT_PROCESS.match(text))

    def rows(self) -> list[dict[str, Any]]:
        """Every frame of every thread as a stack-table row, outermost first within a thread."""
        out: list[dict[str, Any]] = []
        labels: set[str] = set()
        for thread in self._threads:
            label = _label(thread)
            if label in labels:  # two threads py-spy names alike: told apart by their ids
                label = f"{label} ({thread['id']})"
            labels.add(label)
            frames = thread["frames"]
            for index, frame in enumerate(reversed(frames)):
                out.append(
                    {
                        "source": self.source,
                        "line": frame["line"],
                        "timestamp": None,  # py-spy prints no time
                        "snapshot": self.snapshot,
                        "label": label,
                        "thread_ident": thread["ident"],
                        "frame_index": index,
                        "file_path": frame["file"],
                        "line_no": int64(frame["at"]) if frame["at"] else None,
                        "function": frame["func"],
                        "code": None,
                        "time_of_day": None,
                        "no_frame": False,
                        "thread_name": thread["name"],
                        "thread_state": thread["state"],
                        "locals": "\n".join(frame["locals"]) or None,
                        "process_id": self.process_id,
                        "command": self.command,
                        "python_version": self.python_version,
                    }
                )
        return out


def _label(thread: dict[str, Any]) -> str:
    """The watchdog's label for the threads it names ([main], [holder]); any other by its name, else its id."""
    if thread["name"] == MAIN_THREAD:
        return "main"
    if any(SDK_LOOP_FILE.search(frame["file"]) for frame in thread["frames"]):
        return "holder"
    return thread["name"] or f"Thread {thread['id']}"


def last_dump_start(lines: list[str]) -> int | None:
    """The index of the line the last py-spy dump among `lines` starts at, or None: where a reader of a growing
    file holds lines back, since a dump being written may not be whole yet."""
    if not any(line.startswith(("Process ", "Thread ")) for line in lines):
        return None
    start: int | None = None
    dump: PySpyDump | None = None
    for index, raw in enumerate(lines):
        text = strip_ansi(raw) if "\x1b" in raw else raw
        if dump is not None and not PROCESS.match(text) and dump.take(text, index + 1):
            continue
        dump = None
        if text.startswith(("Process ", "Thread ")) and opens_dump(text, lines[index + 1 : index + 1 + HEADER_LINES]):
            start, dump = index, PySpyDump("", 0, lambda line, problem: None)
            dump.take(text, index + 1)
    return start
