"""Processes that wrote one run's metrics at the same time: the split that lets each be judged alone.

Ingest gives each concurrent writer's rows their own segment and marks them `interleaved`
(ingest/parsers/metrics.py): the same column a relaunch uses, so everything that already reads
launches one at a time (live rows per segment, warm-up per segment, regimes) keeps working. What a
relaunch does not need is this: two writers ran side by side, so a series over all rows mixes two
stories (steps 6, 6, 7, 7, 8) and summing their step totals counts the same wall twice. Here each
writer becomes a run of its own rows, which a caller can judge exactly as it judges a whole run.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import polars as pl

from trace_doctor.model import RunTables


@dataclass(frozen=True)
class Writer:
    """One of the processes that wrote the metrics at the same time."""

    number: int  # 1-based, as people count them
    of: int  # how many writers there were
    segment: int  # its rows' segment in `steps`
    first_step: int | None
    last_step: int | None
    rows: int  # its training rows

    @property
    def label(self) -> str:
        return f"writer {self.number} of {self.of}"

    @property
    def key(self) -> str:
        return f"writer-{self.number}"

    def describe(self) -> str:
        """`writer 2 of 2 (steps 0–19)`: enough to find its rows in the file."""
        if self.first_step is None:
            return self.label
        return f"{self.label} (steps {self.first_step}–{self.last_step})"

    def to_dict(self) -> dict:
        return {
            "writer": self.number,
            "segment": self.segment,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "rows": self.rows,
        }


def concurrent_writers(steps: pl.DataFrame) -> list[Writer]:
    """The writers of a metrics file two or more processes wrote at once, in segment order; empty for
    a run written by one process at a time (one launch, or relaunches one after the other)."""
    if steps.is_empty() or "interleaved" not in steps.columns or "segment" not in steps.columns:
        return []
    rows = steps.filter(pl.col("interleaved").fill_null(False))
    if rows.is_empty():
        return []
    training = pl.col("step").is_not_null()
    if "is_eval_row" in rows.columns:
        training &= ~pl.col("is_eval_row").fill_null(False)
    groups = (
        rows.group_by("segment")
        .agg(
            pl.col("step").filter(training).min().alias("first"),
            pl.col("step").filter(training).max().alias("last"),
            training.sum().alias("rows"),
        )
        .sort("segment")
    )
    if groups.height < 2:
        return []
    return [
        Writer(i + 1, groups.height, int(r["segment"]), r["first"], r["last"], int(r["rows"]))
        for i, r in enumerate(groups.iter_rows(named=True))
    ]


def writer_run(run: RunTables, writer: Writer) -> RunTables:
    """The run as one writer wrote it: its own metrics rows; every other table as the run has it (a
    trace or log of two processes at once is not split by writer, so what is read from it is the same
    for every writer)."""
    run.ensure_tables()
    # Stored tables are handed over as held (a large trace is not read whole for this); the lists
    # (inputs, warnings) are the run's own, so a late warning reaches the run.
    held = {
        f.name: run._raw(f.name) if f.name in RunTables.STORED_TABLES else getattr(run, f.name)
        for f in fields(RunTables)
    }
    held["steps"] = run.steps.filter(pl.col("segment") == writer.segment)
    return RunTables(**held)
