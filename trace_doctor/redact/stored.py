"""A table ingest left on disk (a stored table: the spans of a large trace, the step spans), redacted
as it is read rather than read whole to be redacted.

Reading such a table whole would undo what keeping it on disk is for: its rows would be held for the
rest of the analysis (the largest table of a long run, its size growing with the run's length), and a
table no reader asks for (the step spans, which no rule reads) would be parsed only to be redacted.
Instead the replacements are found on the first read, in one pass over the table's string columns
(frames.value_changes, as for a table in memory), and every read applies them. The rows a reader
sees are the rows redact_frame would have made of the whole table.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from trace_doctor.model import IngestWarning
from trace_doctor.redact.frames import renamed_columns, value_changes
from trace_doctor.redact.text import redact_text


class RedactedTable:
    """A stored table (anything with `scan()`, `height` and `late_warnings`) read with credentials
    removed from its column names and string values."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._renames: dict[str, str] | None = None  # found on the first read, as the changes are
        self._changes: list[pl.Expr] | None = None
        self._late: list[IngestWarning] = []

    @property
    def height(self) -> int:
        return self._table.height

    @property
    def late_warnings(self) -> list[IngestWarning]:
        """The table's warnings from its first read (a file changed since it was checked), redacted
        as the run's other warnings are; the run's account empties this list as it takes them."""
        found = getattr(self._table, "late_warnings", None)
        if found:
            self._late += [IngestWarning(redact_text(w.path), w.line, redact_text(w.problem)) for w in found]
            found.clear()
        return self._late

    def scan(self) -> pl.LazyFrame:
        scan = self._table.scan()
        if self._renames is None:
            self._renames = renamed_columns(scan.collect_schema().names())
        if self._renames:
            scan = scan.rename(self._renames)
        if self._changes is None:
            self._changes = value_changes(scan) if self._table.height else []
        return scan.with_columns(self._changes) if self._changes else scan

    def read(self) -> pl.DataFrame:
        return self.scan().collect()

    def is_empty(self) -> bool:
        return self.height == 0
