"""One input file's ingest warnings, bounded: the first ones listed in full, every one counted.

A damaged file can hold millions of bad lines. Listing each costs a few hundred bytes of memory and
a row of every report, and nobody reads past the first screen. A reader therefore collects its
warnings here: the first MAX_LISTED of a file are kept with their line numbers (enough to find and
fix the damage), the others are only counted, and `close()` adds one warning saying how many were
not listed and from which line. The record account never depends on the list: readers take their
skipped counts from the exact counters (`total`, `lined`), not from the listed warnings.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from trace_doctor.model import IngestWarning

# Warnings listed per input file. Fixtures and the corpus stay far below it (at most 3 per file);
# a damaged file lists enough to show the pattern, and the JSON stays readable.
MAX_LISTED = 1000


class WarningSink(Protocol):
    """Where a reader puts its warnings: a FileWarnings, or a plain list when nothing can be unbounded."""

    def append(self, warning: IngestWarning, /) -> None: ...


class FileWarnings:
    """A file's warnings as `append`ed: the first `limit` kept, every one counted (see module docstring)."""

    def __init__(self, path: str, *, limit: int | None = None) -> None:
        self.path = path
        self.limit = MAX_LISTED if limit is None else limit
        self.listed: list[IngestWarning] = []
        self.total = 0  # every warning added, listed or not
        self.lined = 0  # of those, the ones with a line number
        self.first_unlisted: int | None = None  # line of the first warning not listed, if it had one

    def __len__(self) -> int:
        return self.total

    @property
    def room(self) -> int:
        """How many more warnings would still be listed."""
        return max(self.limit - len(self.listed), 0)

    def append(self, warning: IngestWarning) -> None:
        self.total += 1
        if warning.line is not None:
            self.lined += 1
        if len(self.listed) < self.limit:
            self.listed.append(warning)
        elif self.first_unlisted is None:
            self.first_unlisted = warning.line

    def add(self, line: int | None, problem: str) -> None:
        """A warning about this file at `line` (None: the file as a whole)."""
        self.append(IngestWarning(self.path, line, problem))

    def extend(self, warnings: Iterable[IngestWarning]) -> None:
        for warning in warnings:
            self.append(warning)

    def count_unlisted(self, count: int, first_line: int | None) -> None:
        """`count` more line warnings that are past the listed ones, counted without being built."""
        if count <= 0:
            return
        self.total += count
        self.lined += count
        if self.first_unlisted is None:
            self.first_unlisted = first_line

    def absorb(self, other: FileWarnings, line_offset: int = 0, *, prefix: str = "") -> None:
        """Another part of this file's warnings (a chunk read on its own), lines shifted by `line_offset`
        and problems prefixed by `prefix` (with the line: `prefix` ends in a space)."""
        for w in other.listed:
            line = None if w.line is None else w.line + line_offset
            self.append(IngestWarning(w.path, line, f"{prefix}{line}: {w.problem}" if prefix and line else w.problem))
        unlisted = other.total - len(other.listed)
        if unlisted:
            # The other part's unlisted warnings come after all of its listed ones.
            unlisted_lined = other.lined - sum(1 for w in other.listed if w.line is not None)
            self.total += unlisted
            self.lined += unlisted_lined
            if self.first_unlisted is None and other.first_unlisted is not None:
                self.first_unlisted = other.first_unlisted + line_offset

    def sort_listed(self) -> None:
        """Put the listed warnings in line order (whole-file ones first), e.g. after two readers each added theirs."""
        self.listed.sort(key=lambda w: -1 if w.line is None else w.line)

    def close(self) -> list[IngestWarning]:
        """The listed warnings, then one saying how many more there were (when some were not listed)."""
        unlisted = self.total - len(self.listed)
        if not unlisted:
            return list(self.listed)
        where = f", from line {self.first_unlisted:,} on" if self.first_unlisted is not None else ""
        summary = (
            f"{unlisted:,} more warning(s) about this file are not listed{where} (only the first {self.limit:,} "
            "of a file are); every skipped record is still counted in this input's `skipped`"
        )
        return [*self.listed, IngestWarning(self.path, None, summary)]
