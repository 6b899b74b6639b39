"""What a rule needs, declared: the engine checks it before the rule runs (Lighthouse's requiredArtifacts).

A rule lists `Requires` entries; each holds when any of its sources has data. A missing one makes
the rule "not applicable" with the entry's reason, so a rule body holds only the judgement.

    >>> needs = requires("no pyinstrument profile among the inputs", table("frames"))
    >>> needs.describe()
    'rows in frames'
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from trace_doctor.rules.context import RuleContext


@dataclass(frozen=True)
class Source:
    """One place the data can come from: a table with rows, a column with a value, or an input file found."""

    table: str | None = None
    # fnmatch patterns; the source holds when a numeric or text column matching any has a non-null value.
    columns: tuple[str, ...] = ()
    input_kind: str | None = None
    baseline: bool = False

    def holds(self, ctx: RuleContext) -> bool:
        if self.baseline:
            return ctx.baseline_ctx is not None
        if self.input_kind is not None:
            return any(i.kind == self.input_kind for i in ctx.run.inputs)
        frame = ctx.table(self.table)
        if frame.is_empty():
            return False
        if not self.columns:
            return True
        matched = [c for c in frame.columns if any(fnmatchcase(c, p) for p in self.columns)]
        return any(frame[c].null_count() < frame.height for c in matched if frame.schema[c] != pl.Null)

    def describe(self) -> str:
        if self.baseline:
            return "a baseline run (--baseline PATH)"
        if self.input_kind is not None:
            return f"a {self.input_kind} input"
        if self.columns:
            return f"{' or '.join(self.columns)} in {self.table}"
        return f"rows in {self.table}"


@dataclass(frozen=True)
class Requires:
    """An input the rule cannot judge without; `reason` is what the user reads when it is missing."""

    reason: str
    sources: tuple[Source, ...]

    def holds(self, ctx: RuleContext) -> bool:
        return any(source.holds(ctx) for source in self.sources)

    def describe(self) -> str:
        return ", or ".join(source.describe() for source in self.sources)


def requires(reason: str, *sources: Source) -> Requires:
    """Declare an input: satisfied when any of `sources` has data; else not applicable with `reason`."""
    if not sources:
        raise ValueError("a requirement needs at least one source")
    return Requires(reason, sources)


def table(name: str) -> Source:
    """A table of RunTables (or a derived series, see RuleContext.table) with at least one row."""
    return Source(table=name)


def values_in(table_name: str, *patterns: str) -> Source:
    """A column of `table_name` matching any fnmatch pattern, with at least one value."""
    return Source(table=table_name, columns=patterns)


def found(kind: str) -> Source:
    """An input file of this kind was found (even if it held no record the parsers keep)."""
    return Source(input_kind=kind)


def baseline_run() -> Source:
    """A baseline run to compare with (`--baseline PATH`)."""
    return Source(baseline=True)
