"""Launches of one run: a process relaunched into the same log directory appends to the same files.

A training row whose step is at or below an earlier one starts a new launch (the relaunched process
re-runs steps from its last checkpoint). The steps a later launch rewrote stay in the table, marked
`superseded`, so every record is accounted for and every statistic sees one row per step.

Two processes writing one file *at the same time* look different: their steps go back and forth,
each returning to a sequence it left. That is reported (an ingest warning and `Launch.interleaved`),
never silently merged: each writer's rows become their own segment.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# Returns to an earlier sequence before the rows count as written concurrently: one return can be a
# trainer logging one step late; two are a pattern.
MIN_RETURNS = 2


@dataclass(frozen=True)
class Launch:
    """One process's stretch of a metrics file (JSON: `run.launches`)."""

    launch: int  # 0 for the first process
    source: str
    first_line: int
    first_step: int | None
    last_step: int | None
    rows: int
    resumed_at_step: int | None  # the step a relaunch restarted from (None for the first launch)
    rewrote_steps: int  # earlier rows this launch superseded by re-running their steps
    interleaved: bool = False  # written at the same time as another launch's rows

    def to_dict(self) -> dict:
        return {
            "launch": self.launch,
            "source": self.source,
            "first_line": self.first_line,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "rows": self.rows,
            "resumed_at_step": self.resumed_at_step,
            "rewrote_steps": self.rewrote_steps,
            "interleaved": self.interleaved,
        }


class WriterChains:
    """Each training row assigned to an increasing sequence of steps (a writer), a row at a time; returns
    counted.

    A row joins the sequence whose last step is the largest below its own (ties: the newest
    sequence), else starts a new one. A relaunch only ever starts new sequences; two concurrent
    writers keep returning to a sequence another row left: those returns are counted. Kept as rows
    come (a live metrics file's reader adds each look's rows), so a table built again does not walk
    every row again.
    """

    def __init__(self) -> None:
        # (last step, sequence) of every sequence, sorted: the one to join is the rightmost entry below
        # (step, -inf), found by bisection (a scan of every sequence per row is quadratic when steps
        # keep going down and each row starts a sequence).
        self._ends: list[tuple[int, int]] = []
        self._count = 0
        self._previous = -1
        self.owner: list[int] = []  # each row's sequence, -1 for a row that is not a training step
        self.returns = 0

    def add(self, step: int | None, is_training: bool) -> None:
        if step is None or not is_training:
            self.owner.append(-1)
            return
        ends = self._ends
        at = bisect.bisect_left(ends, (step, -1)) - 1
        if at < 0:
            best, self._count = self._count, self._count + 1
        else:
            best = ends.pop(at)[1]
        bisect.insort(ends, (step, best))
        if self._previous >= 0 and best != self._previous and best < self._previous:
            self.returns += 1
        self.owner.append(best)
        self._previous = best


def writer_chains(steps: list[int | None], training: list[bool]) -> tuple[list[int], int]:
    """Each row's sequence of steps (WriterChains) and the count of returns, for whole columns."""
    chains = WriterChains()
    for step, is_training in zip(steps, training, strict=True):
        chains.add(step, is_training)
    return chains.owner, chains.returns


def launches_of(steps) -> list[Launch]:
    """The launches of a `steps` table, in the order their rows were written (backups first)."""
    import polars as pl

    if steps.is_empty() or "segment" not in steps.columns:
        return []
    frame = steps.with_row_index("_order")
    training = pl.col("step").is_not_null()
    if "is_eval_row" in frame.columns:
        training &= ~pl.col("is_eval_row").fill_null(False)
    interleaved = pl.col("interleaved").fill_null(False) if "interleaved" in frame.columns else pl.lit(False)
    groups = (
        frame.group_by("source", "segment", maintain_order=True)
        .agg(
            pl.col("_order").min().alias("order"),
            pl.col("line").min().alias("first_line"),
            pl.len().alias("rows"),
            pl.col("step").filter(training).first().alias("first_step"),
            pl.col("step").filter(training).last().alias("last_step"),
            pl.col("step").filter(training).alias("steps"),
            interleaved.any().alias("interleaved"),
        )
        .sort("order")
    )
    launches: list[Launch] = []
    seen: dict[str, set[int]] = {}
    for index, row in enumerate(groups.iter_rows(named=True)):
        earlier = seen.setdefault(row["source"], set())
        own = {int(s) for s in row["steps"]}
        launches.append(
            Launch(
                launch=index,
                source=row["source"],
                first_line=int(row["first_line"]),
                first_step=row["first_step"],
                last_step=row["last_step"],
                rows=int(row["rows"]),
                resumed_at_step=row["first_step"] if index and not row["interleaved"] else None,
                rewrote_steps=0 if row["interleaved"] else len(own & earlier),
                interleaved=bool(row["interleaved"]),
            )
        )
        earlier |= own
    return launches
