"""An internal error (a bug in trace-doctor) as one line for people and a traceback in a file.

CI reads the exit code: 1 means "the gate tripped", so a crash must never exit 1 (nor print a
bare traceback a CI log buries the verdict under). A bug exits 3 with one line that says it is a
bug and where the traceback was written, so the report someone files has everything.

Both are asked to be shared ("please report it"), and an exception's message can quote the run (a
metric key, a log line, a config value): credentials in them are redacted like a bundle's.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import traceback

from trace_doctor.humanize import printable

EXIT_INTERNAL_ERROR = 3
# The exception's own message is shown up to this length: the file has the rest.
MESSAGE_CHARS = 200


def _redacted(text: str) -> str:
    """`text` without credentials; as it is if redaction itself fails (a crash report must still be written)."""
    try:
        from trace_doctor.redact.text import redact_text

        return redact_text(text)
    except Exception:  # noqa: BLE001 - the report of one bug must not be lost to another
        return text


def _command_line() -> str:
    try:
        from trace_doctor.redact.text import redact_argv

        return " ".join(redact_argv(sys.argv))
    except Exception:  # noqa: BLE001 - as _redacted
        return " ".join(sys.argv)


def write_traceback(exc: BaseException, *, context: str = "") -> str | None:
    """Write `exc`'s traceback to a new file in the temporary directory: its path, or None when
    nothing could be written there (a read-only or full /tmp)."""
    from trace_doctor import __version__

    try:
        handle, path = tempfile.mkstemp(prefix="trace-doctor-crash-", suffix=".txt")
        with os.fdopen(handle, "w", encoding="utf-8", errors="replace") as out:
            out.write(f"trace-doctor {__version__}, Python {platform.python_version()} on {platform.platform()}\n")
            out.write(f"command: {printable(_command_line())}\n")
            if context:
                out.write(f"while: {printable(_redacted(context))}\n")
            out.write("\n")
            out.write(printable(_redacted("".join(traceback.format_exception(exc)))))
    except OSError:
        return None
    return path


def describe(exc: BaseException) -> str:
    """`TypeError: first line of the message`, short enough for one line."""
    lines = _redacted(str(exc)).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 1] + "…"
    return printable(text)


def where_written(path: str | None) -> str:
    return f"traceback in {path}" if path else "the traceback could not be written to the temporary directory"


def one_line(exc: BaseException, path: str | None) -> str:
    """What the user reads: it is a bug, what broke, where the traceback is."""
    return (
        f"internal error (a bug in trace-doctor, not a problem with your run): {describe(exc)}; "
        f"{where_written(path)}; please report it"
    )
