"""Per-step phase times from the legacy `Starting <phase>` / `<phase> took N seconds` lines.

Cookbook versions up to 2026-03-24 time every section with `timed(key, metrics)`, which logs those
two lines and stores `time/<key>` in the step's metrics (FORMATS.md 3.5). When a capture has no
metric tables, these lines are the only per-step timing left. The lines carry no step number, so
steps are cut by the loop's structure:
- `Wrote metrics to …` (logged after every metrics row) ends a step exactly;
- a process start (`Command line invocation:`, `Logging to: <dir>`) ends one and counts again from 0;
- otherwise a step ends when one of the phases it already timed starts again.
The last rule is exact for a loop whose phases run once per step in a fixed order. A phase timed
ahead of its step (a prefetched batch) or a periodic phase at the top of the loop lands one step
off, so these rows are a coarse timeline, not the metrics rows: they carry no `time/total`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trace_doctor.ingest.parsers.log_kinds import COMMAND_LINE, LOGGING_TO, STARTING, TOOK
from trace_doctor.ingest.parsers.logs import line_message
from trace_doctor.ingest.reading.textfile import strip_ansi
from trace_doctor.knowledge.tinker import TIME_PREFIX

WROTE_METRICS = "Wrote metrics to "
# What a line the timeline reads holds (the cheap test before reading it): a phase line, a step's end, a process start.
NEEDLES = ("took ", "Starting ", WROTE_METRICS, "Command line invocation: ", "Logging to: ")


@dataclass
class TimelineStep:
    """One step cut from the timeline: its number, the line that ended it, `time/<phase>` seconds."""

    step: int
    line: int
    times: dict[str, float] = field(default_factory=dict)


def _is_process_start(message: str) -> bool:
    logging_to = LOGGING_TO.match(message)
    return COMMAND_LINE.match(message) is not None or (
        logging_to is not None and not logging_to["log_dir"].startswith(("http://", "https://"))
    )


class _Cutter:
    """The step being read and the ones finished."""

    def __init__(self) -> None:
        self.steps: list[TimelineStep] = []
        self.next_step = 0
        self.open: dict[str, float] = {}
        self.started: set[str] = set()  # phases of the open step that started (timed or not yet)
        self.last_line = 0
        self.marked = False  # the capture marks a step's end (`Wrote metrics to`)

    def close(self) -> None:
        if self.open:
            self.steps.append(TimelineStep(self.next_step, self.last_line, self.open))
            self.next_step += 1
        self.open = {}
        self.started = set()

    def restart(self) -> None:
        # A process start cuts the step in flight: in a capture that marks each step's end, that step
        # never finished (its relaunch runs it again); otherwise it is as complete as any other.
        if self.marked:
            self.open, self.started = {}, set()
        else:
            self.close()
        self.next_step = 0

    def start(self, phase: str) -> None:
        if phase in self.started:
            self.close()
        self.started.add(phase)

    def took(self, phase: str, seconds: float, line: int) -> None:
        key = TIME_PREFIX + phase
        if key in self.open:  # a `took` without its `Starting` line (cut from the capture)
            self.close()
        self.started.add(phase)
        self.open[key] = seconds
        self.last_line = line


class TimelineReader:
    """The timeline of a capture's lines taken one at a time: what it holds is the steps cut so far."""

    def __init__(self) -> None:
        self._cutter = _Cutter()
        self._index = 0

    def take(self, raw: str) -> None:
        self._index += 1
        if not any(needle in raw for needle in NEEDLES):
            return
        cutter = self._cutter
        # As the log parser reads the line: a collector's time, a quote's markers, a record's layout taken off.
        message = line_message(strip_ansi(raw))
        if (found := TOOK.match(message)) is not None:
            cutter.took(found["name"], float(found["seconds"]), self._index)
        elif (found := STARTING.match(message)) is not None:
            cutter.start(found["name"])
        elif message.startswith(WROTE_METRICS):
            cutter.marked = True
            cutter.close()
        elif _is_process_start(message):
            cutter.restart()

    def steps(self) -> list[TimelineStep]:
        """The steps of the lines taken (call once, after the last line)."""
        cutter = self._cutter
        # The phases after the last step that ended are a step that never finished (the run stopped or
        # was still going), unless the capture never marks a step's end and earlier steps were cut by a
        # phase starting again: then the last one is as complete as they were.
        if not cutter.marked and cutter.steps:
            cutter.close()
        return cutter.steps


def timeline_steps(lines: Iterable[str]) -> list[TimelineStep]:
    """The steps of `time/<phase>` seconds that the `Starting`/`took` lines of a capture describe."""
    reader = TimelineReader()
    for raw in lines:
        reader.take(raw)
    return reader.steps()
