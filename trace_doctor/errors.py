"""What the caller asked cannot be done as asked: a problem with the request, never a bug.

Each message is complete, for a person: the command line prints it after `trace-doctor: ` and exits 2.
These live apart from the modules that raise them so that catching them imports nothing heavy.
"""

from __future__ import annotations


class RequestError(Exception):
    """The paths, outputs or options named cannot be used (the message says which and why)."""


class NothingToAnalyze(RequestError):
    """The paths do not exist or hold no readable input (the CLI exits 2 with this message)."""


class NothingToExport(RequestError):
    """The run has nothing a trace export could draw: no trace spans and no step times."""


class OutputRefused(RequestError):
    """An output named would overwrite one of the inputs, or another output named."""


class OutputNotWritten(RequestError):
    """An output file could not be written (its folder is read-only, a file stands where a folder must)."""
