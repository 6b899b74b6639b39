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

from collections.abc import Callable, Hashable
from typing import Any

import polars as pl

from trace_doctor.ingest.storage.stored_table import concat_parts
from trace_doctor.model import IngestWarning
from trace_doctor.redact.frames import changes_of, renamed_columns, string_columns, suspects, value_changes
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
        renames, changes = self._found(scan)
        if renames:
            scan = scan.rename(renames)
        return scan.with_columns(changes) if changes else scan

    def _found(self, scan: pl.LazyFrame) -> tuple[dict[str, str], list[pl.Expr]]:
        """The renames and value changes, found on the first read. A table read by parts finds the
        changes per part (each part's suspects kept across analyses, part_memo), so a grown table's
        search reads only what it gained; the changes are the ones a scan of the whole table finds."""
        if self._renames is None:
            self._renames = renamed_columns(scan.collect_schema().names())
        if self._changes is None:
            renamed = scan.rename(self._renames) if self._renames else scan
            if not self._table.height:
                self._changes = []
            elif hasattr(self._table, "per_part"):
                strings = string_columns(renamed)
                renames = self._renames

                def query(part: pl.LazyFrame) -> pl.LazyFrame:
                    return (part.rename(renames) if renames else part).select(suspects(strings))

                found: dict[str, set[str]] = {name: set() for name in strings}
                key = ("redact-suspects", tuple(sorted(renames.items())), tuple(strings))
                for result in self._table.per_part(key, query) if strings else []:
                    for name, values in zip(strings, result.row(0) if result.height else (), strict=False):
                        found[name].update(v for v in values if v is not None)
                self._changes = changes_of({name: sorted(values) for name, values in found.items()})
            else:
                self._changes = value_changes(renamed)
        return self._renames, self._changes

    def per_part(self, key: Hashable, query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> list[pl.DataFrame]:
        """A part-local `query` on each part of the redacted table (StoredTable.per_part)."""
        renames, changes = self._found(self._table.scan())

        def redacted(part: pl.LazyFrame) -> pl.LazyFrame:
            part = part.rename(renames) if renames else part
            return query(part.with_columns(changes) if changes else part)

        # What the parts are redacted with is part of the query: a part's result is kept for these changes.
        changed = tuple(sorted(renames.items())), tuple(c.meta.serialize() for c in changes)
        return self._table.per_part(("redacted", changed, key), redacted)

    def where(self, where: pl.Expr, columns: list[str] | None = None) -> pl.DataFrame:
        """The redacted rows matching `where` (StoredTable.where, on the redacted values)."""
        key = ("where", where.meta.serialize(), None if columns is None else tuple(columns))

        def query(scan: pl.LazyFrame) -> pl.LazyFrame:
            scan = scan.filter(where)
            return scan.select(columns) if columns else scan

        return concat_parts(self.per_part(key, query), query(self.scan().head(0)))

    def read(self) -> pl.DataFrame:
        return self.scan().collect()

    def is_empty(self) -> bool:
        return self.height == 0
