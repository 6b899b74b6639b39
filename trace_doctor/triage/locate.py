"""Where a finding is: its time ranges and steps, and the steps' windows on the trace's clock."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from trace_doctor.derive.intervals import float_pairs, merged_bounds
from trace_doctor.model import Finding


def finding_key(finding: Finding) -> str:
    """The reference other findings use for it (`explained_by`): its fingerprint, as the JSON prints it."""
    return finding.fingerprint or finding.rule


# Step types an int64 holds exactly (the trace's steps are Int64).
INT64_STEPS = (pl.Int64, pl.Int32, pl.Int16, pl.Int8, pl.UInt32, pl.UInt16, pl.UInt8)


@dataclass(frozen=True)
class StepWindows:
    """Step → (first span start, last span end) in trace microseconds, for the steps the trace
    attributes: arrays sorted by step, so a finding's thousands of steps are looked up at once."""

    steps: np.ndarray  # int64, ascending, distinct
    starts: np.ndarray  # float64
    ends: np.ndarray

    def of(self, steps: frozenset[int]) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the windows of those steps that have one, in the set's iteration order."""
        empty = np.array([], dtype=np.float64)
        if not steps or not len(self.steps):
            return empty, empty
        try:
            wanted = np.fromiter(steps, dtype=np.int64, count=len(steps))
        except OverflowError:  # a step no int64 holds has no window
            wanted = np.fromiter((s for s in steps if -(2**63) <= s < 2**63), dtype=np.int64)
        at = np.minimum(np.searchsorted(self.steps, wanted), len(self.steps) - 1)
        found = self.steps[at] == wanted
        return self.starts[at[found]], self.ends[at[found]]


def step_windows(spans: pl.DataFrame | pl.LazyFrame) -> StepWindows:
    """Each attributed step's window: its first span's start and its last span's end. `spans`: the spans,
    or any rows with the same extent per step (their `step`, `start_us`, `end_us` already reduced per part)."""
    spans = spans.lazy()
    empty = StepWindows(np.array([], dtype=np.int64), np.array([], dtype=np.float64), np.array([], dtype=np.float64))
    if "step" not in spans.collect_schema().names():
        return empty
    rows = (
        spans.filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b"))
        .drop_nulls()
    )
    if spans.collect_schema()["step"] not in INT64_STEPS:
        # Steps read as int(): several values may land on one (the last row read wins, as in a dict).
        by_step = {int(s): (float(a), float(b)) for s, a, b in rows.collect().iter_rows()}
        ordered = sorted(by_step.items())
        return StepWindows(
            np.array([s for s, _ in ordered], dtype=np.int64),
            np.array([w[0] for _, w in ordered], dtype=np.float64),
            np.array([w[1] for _, w in ordered], dtype=np.float64),
        )
    table = (
        rows.select(pl.col("step").cast(pl.Int64), pl.col("a").cast(pl.Float64), pl.col("b").cast(pl.Float64))
        .sort("step")
        .collect()
    )
    return StepWindows(*(table.get_column(c).to_numpy() for c in ("step", "a", "b")))


@dataclass(frozen=True)
class Location:
    """A finding's place in the run: time intervals (its own ranges and its steps' windows, merged:
    ascending, each ending before the next starts) and steps."""

    starts: np.ndarray
    ends: np.ndarray
    steps: frozenset[int]

    @property
    def intervals(self) -> list[tuple[float, float]]:
        return list(zip(self.starts.tolist(), self.ends.tolist(), strict=True))

    @property
    def run_wide(self) -> bool:
        """Measured over the whole run (a profile, a log count): no place to compare."""
        return not len(self.starts) and not self.steps

    def meets(self, other: Location) -> bool:
        """Whether two findings can be about the same time: their intervals or steps intersect, or
        either is run-wide (nothing shows they are not)."""
        if self.run_wide or other.run_wide:
            return True
        if len(self.starts) and len(other.starts):
            return _overlapping(self, other) or _touching(self, other)
        return bool(self.steps & other.steps)


def _overlapping(a: Location, b: Location) -> bool:
    """Whether the intervals of a and b share more than a point (intervals.overlap(a, b) > 0: each
    pair that does adds a positive length). Merged intervals have ascending ends too, so the intervals
    of b that an interval of a overlaps, those ending after it starts and starting before it ends,
    are a run found by two binary searches."""
    ending_after = np.searchsorted(b.ends, a.starts, side="right")
    starting_before = np.searchsorted(b.starts, a.ends, side="left")
    return bool((ending_after < starting_before).any())


def _touching(a: Location, b: Location) -> bool:
    # Zero-length contact (a stall ending exactly where a step window begins) counts as meeting.
    if len(a.starts) * len(b.starts) > 10_000:
        return False
    return bool(np.isin(a.ends, b.starts).any() or np.isin(b.ends, a.starts).any())


def locate(finding: Finding, windows: StepWindows) -> Location:
    starts, ends = float_pairs(finding.time_ranges_us)
    steps = frozenset(int(s) for s in finding.steps)
    window_starts, window_ends = windows.of(steps)
    return Location(*merged_bounds(np.concatenate((starts, window_starts)), np.concatenate((ends, window_ends))), steps)
