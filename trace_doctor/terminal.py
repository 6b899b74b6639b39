"""What the command line shows on a terminal: text from a run made safe to print, the text report's
colour, ingest progress, and a bug told in one line (where its traceback was saved)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from trace_doctor.crash_report import one_line, where_written, write_traceback
from trace_doctor.humanize import printable
from trace_doctor.report.terminal_text import inert

if TYPE_CHECKING:
    from trace_doctor.fleet import Fleet
    from trace_doctor.report.progress import TerminalProgress


def terminal_safe(value: str) -> str:
    """Valid UTF-8 (printable), with nothing in it a terminal would act on (a run's name or path can hold
    escape sequences: report/terminal_text.py)."""
    return inert(printable(value))


def report_color(fmt: str) -> bool | None:
    """Whether a report printed in `fmt` keeps its colour: the text report exactly when the console
    renderer used it (FORCE_COLOR into a pipe, none with NO_COLOR); None (the printer decides) for the
    others, which never import the console renderer (rich)."""
    if fmt != "text":
        return None
    from trace_doctor.report.console import color_enabled

    return color_enabled()


def terminal_progress() -> TerminalProgress | None:
    """A progress printer for long ingests when stderr is an interactive terminal, else None (pipes, CI)."""
    if not sys.stderr.isatty() or os.environ.get("CI"):
        return None
    from trace_doctor.report.progress import TerminalProgress

    return TerminalProgress()


def internal_error_line(exc: BaseException) -> str:
    """A bug in one line: that it is one, what broke, where its traceback was written (written now)."""
    return one_line(exc, write_traceback(exc))


def fleet_internal_error_line(fleet: Fleet) -> str | None:
    """The runs of a fleet that hit a bug, in one line (the first three, and where their tracebacks
    are); None when none did."""
    crashed = fleet.internal_errors
    if not crashed:
        return None
    names = ", ".join(r.source.label for r in crashed[:3]) + (", ..." if len(crashed) > 3 else "")
    logs = "; ".join(where_written(r.crash_log) for r in crashed[:3])
    return (
        f"internal error (a bug in trace-doctor, not a problem with your runs) in "
        f"{len(crashed)} of {len(fleet.reports)} run(s) ({names}): "
        f"{crashed[0].error.removeprefix('internal error: ')}; {logs}; please report it"
    )
