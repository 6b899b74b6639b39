"""Where a finding is: its time ranges and steps, and the steps' windows on the trace's clock."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from trace_doctor.derive.intervals import merge, overlap
from trace_doctor.model import Finding


def finding_key(finding: Finding) -> str:
    """The reference other findings use for it (`explained_by`): its fingerprint, as the JSON prints it."""
    return finding.fingerprint or finding.rule


def step_windows(spans: pl.DataFrame | pl.LazyFrame) -> dict[int, tuple[float, float]]:
    """Step → (first span start, last span end) in trace microseconds, for steps the trace attributes."""
    spans = spans.lazy()
    if "step" not in spans.collect_schema().names():
        return {}
    rows = (
        spans.lazy()
        .filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b"))
        .collect()
    )
    return {int(s): (float(a), float(b)) for s, a, b in rows.iter_rows() if a is not None and b is not None}


@dataclass(frozen=True)
class Location:
    """A finding's place in the run: time intervals (its own ranges and its steps' windows) and steps."""

    intervals: list[tuple[float, float]]
    steps: frozenset[int]

    @property
    def run_wide(self) -> bool:
        """Measured over the whole run (a profile, a log count): no place to compare."""
        return not self.intervals and not self.steps

    def meets(self, other: Location) -> bool:
        """Whether two findings can be about the same time: their intervals or steps intersect, or
        either is run-wide (nothing shows they are not)."""
        if self.run_wide or other.run_wide:
            return True
        if self.intervals and other.intervals:
            return overlap(self.intervals, other.intervals) > 0 or _touching(self.intervals, other.intervals)
        return bool(self.steps & other.steps)


def _touching(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    # Zero-length contact (a stall ending exactly where a step window begins) counts as meeting.
    return any(x[1] == y[0] or y[1] == x[0] for x in a for y in b) if len(a) * len(b) <= 10_000 else False


def locate(finding: Finding, windows: dict[int, tuple[float, float]]) -> Location:
    ranges = [(float(r[0]), float(r[1])) for r in finding.time_ranges_us if len(r) >= 2]
    steps = frozenset(int(s) for s in finding.steps)
    ranges += [windows[s] for s in steps if s in windows]
    return Location(merge(ranges), steps)
