"""The `trace-doctor` console script: the CLI (cli.main), then the exit work and an immediate process exit."""

from __future__ import annotations

import gc
import sys

from trace_doctor.crash_report import EXIT_INTERNAL_ERROR
from trace_doctor.process_setup import end_process, stop_cleanly_on_signals
from trace_doctor.terminal import internal_error_line, terminal_safe


def run_console_script() -> None:
    """The console-script entry point: the CLI, then the exit work and an immediate process exit (end_process);
    SIGTERM ends it as cleanly. Tests call `main` (click's CliRunner), which exits normally."""
    # One short-lived command: the tables live in polars, so the cyclic collector finds nothing (~2% of a run).
    gc.disable()
    stop_cleanly_on_signals()
    try:
        from trace_doctor.cli import main

        main()
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            # A message as exit status is no verdict: never 1, which CI reads as a tripped gate.
            sys.stderr.write(terminal_safe(exc.code) + "\n")
            code = EXIT_INTERNAL_ERROR
        else:
            code = exc.code or 0
    except Exception as exc:  # noqa: BLE001 - outside any command (the group catches theirs): still one line
        sys.stderr.write(f"trace-doctor: {terminal_safe(internal_error_line(exc))}\n")
        code = EXIT_INTERNAL_ERROR
    end_process(code)
