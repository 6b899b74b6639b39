"""Per-label cadence of asyncio task dumps and the silences where one label stopped dumping.

Each label's dumper is a task on its own event loop (`main`, `holder` = the SDK thread's loop), so
a label that stops dumping while another goes on means that label's thread could not run its loop
(FORMATS.md 5.1). Dump timestamps have one-second resolution, so a silence is measured twice: by
the clock (minus that resolution) and by how many dumps the other labels printed meanwhile (dumps
of all labels interleave in one stdout, so line order is exact even when seconds are not).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

TIMESTAMP_RESOLUTION_S = 1.0  # dump headers print `%Y-%m-%d %H:%M:%S`


@dataclass(frozen=True)
class Silence:
    """One label silent between two of its dumps (or until the end) while other labels dumped."""

    source: str
    label: str
    interval_s: float
    start: object  # datetime of the last dump before the silence
    end: object | None  # datetime of the next dump, None when the label never dumped again
    start_line: int
    end_line: int | None
    clock_gap_s: float  # end - start by the printed timestamps (to the last other dump if no end)
    lower_bound_s: float  # the shortest silence consistent with timestamps and other labels' dumps
    other_dumps: dict[str, int]  # dumps each other label printed during the silence

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "label": self.label,
            "interval_s": self.interval_s,
            "last_dump": str(self.start),
            "next_dump": str(self.end) if self.end is not None else None,
            "last_dump_line": self.start_line,
            "next_dump_line": self.end_line,
            "silent_s": round(self.clock_gap_s, 3),
            "silent_at_least_s": round(self.lower_bound_s, 3),
            "other_label_dumps": dict(sorted(self.other_dumps.items())),
        }


def dump_times(task_snapshots: pl.DataFrame) -> pl.DataFrame:
    """One row per dump block: source, label, snapshot, line, timestamp, interval_s; in file order."""
    schema = {
        "source": pl.String,
        "label": pl.String,
        "snapshot": pl.Int64,
        "line": pl.Int64,
        "timestamp": pl.Datetime("us"),
        "interval_s": pl.Float64,
    }
    if task_snapshots.is_empty():
        return pl.DataFrame(schema=schema)
    return (
        task_snapshots.group_by("source", "snapshot", "label")
        .agg(
            pl.col("line").min(),
            pl.col("timestamp").first(),
            pl.col("interval_s").first(),
        )
        .select(list(schema))
        .cast(schema)
        .sort("source", "line", "label")
    )


def cadence(task_snapshots: pl.DataFrame) -> pl.DataFrame:
    """Dump times with the gap since the same label's previous dump (seconds), for cadence charts."""
    times = dump_times(task_snapshots)
    return times.with_columns(
        (pl.col("timestamp").diff().over("source", "label").dt.total_microseconds() / 1e6).alias("gap_s")
    )


@dataclass(frozen=True)
class LongestGap:
    """A label's longest gap between two of its dumps in one file: what the cadence chart's table shows."""

    label: str
    gap_s: float
    at: object  # datetime of the dump that ended the gap
    dumps: int  # the label's dumps in all files
    interval_s: float | None  # the median interval its headers print (None: none printed)


def longest_gaps(task_snapshots: pl.DataFrame) -> list[LongestGap]:
    """Each label's longest gap by the clock (the earliest, of equal ones), labels in name order.

    Gaps are between consecutive dumps of one file, as `cadence` and the silences count them: two
    files of one label (two processes) do not make a gap between them.
    """
    timed = cadence(task_snapshots).filter(pl.col("timestamp").is_not_null() & pl.col("label").is_not_null())
    found = []
    for label in sorted(timed["label"].unique().to_list()):
        own = timed.filter(pl.col("label") == label)
        longest = own.sort(["gap_s", "timestamp"], descending=[True, False], nulls_last=True).head(1)
        if longest["gap_s"][0] is None:
            continue
        interval = own["interval_s"].drop_nulls().median()
        found.append(
            LongestGap(
                label,
                float(longest["gap_s"][0]),
                longest["timestamp"][0],
                len(own),
                float(interval) if interval is not None else None,
            )
        )
    return found


def silences(task_snapshots: pl.DataFrame, *, min_intervals: float, min_seconds: float = 0.0) -> list[Silence]:
    """Silences of at least `min_intervals` dump intervals (and `min_seconds`) while another label dumped."""
    times = dump_times(task_snapshots)
    found: list[Silence] = []
    for (source,), per_source in times.group_by(["source"], maintain_order=True):
        rows = per_source.sort("line").to_dicts()
        for label in sorted({r["label"] for r in rows}):
            found.extend(_label_silences(source, label, rows, min_intervals, min_seconds))
    return sorted(found, key=lambda s: (s.source, s.start_line, s.label))


def _label_silences(
    source: str, label: str, rows: list[dict], min_intervals: float, min_seconds: float
) -> list[Silence]:
    own = [i for i, r in enumerate(rows) if r["label"] == label]
    if not own:
        return []
    interval = _interval(rows, label)
    intervals = {lab: _interval(rows, lab) for lab in {r["label"] for r in rows}}
    found = []
    bounds = list(zip(own, own[1:] + [None], strict=False))
    for a, b in bounds:
        between = rows[a + 1 : b] if b is not None else rows[a + 1 :]
        others = [r for r in between if r["label"] != label]
        if not others:
            continue
        counts: dict[str, int] = {}
        for r in others:
            counts[r["label"]] = counts.get(r["label"], 0) + 1
        start = rows[a]["timestamp"]
        end_row = rows[b] if b is not None else others[-1]
        clock_gap = _seconds(start, end_row["timestamp"])
        # Only the other labels' own dumps prove they kept running: if every label went quiet at
        # once, that is a process-wide silence (see `process_silences`), not this label's.
        by_count = max((n - 1) * intervals[lab] for lab, n in counts.items())
        by_clock = _seconds(others[0]["timestamp"], others[-1]["timestamp"]) - TIMESTAMP_RESOLUTION_S
        lower = max(by_count, by_clock, 0.0)
        if lower >= min_intervals * interval and lower >= min_seconds:
            found.append(
                Silence(
                    source,
                    label,
                    interval,
                    start,
                    rows[b]["timestamp"] if b is not None else None,
                    rows[a]["line"],
                    rows[b]["line"] if b is not None else None,
                    max(clock_gap, lower),
                    lower,
                    counts,
                )
            )
    return found


def process_silences(task_snapshots: pl.DataFrame, *, min_intervals: float, min_seconds: float = 0.0) -> list[Silence]:
    """Gaps where no label dumped at all: every event loop stopped at once (label `*`).

    Python threads only all stop together when one thread holds the GIL in C code (or the whole
    process was suspended), so these gaps are the dump-side trace of a GIL-holding call.
    """
    times = dump_times(task_snapshots)
    found: list[Silence] = []
    for (source,), per_source in times.group_by(["source"], maintain_order=True):
        rows = per_source.sort("line").to_dicts()
        labels = {r["label"] for r in rows}
        if len(labels) < 2:
            continue
        interval = max(_interval(rows, lab) for lab in labels)
        for before, after in zip(rows, rows[1:], strict=False):
            clock_gap = _seconds(before["timestamp"], after["timestamp"])
            lower = max(clock_gap - TIMESTAMP_RESOLUTION_S, 0.0)
            if lower >= min_intervals * interval and lower >= min_seconds and lower > 0:
                found.append(
                    Silence(
                        source,
                        "*",
                        interval,
                        before["timestamp"],
                        after["timestamp"],
                        before["line"],
                        after["line"],
                        clock_gap,
                        lower,
                        {},
                    )
                )
    return found


def _interval(rows: list[dict], label: str) -> float:
    """A label's dump interval: as printed in its headers, else its median clock gap, else 1 s."""
    printed = sorted(r["interval_s"] for r in rows if r["label"] == label and r["interval_s"])
    if printed:
        return float(printed[len(printed) // 2])
    stamps = [r["timestamp"] for r in rows if r["label"] == label and r["timestamp"] is not None]
    gaps = sorted(_seconds(a, b) for a, b in zip(stamps, stamps[1:], strict=False))
    positive = [g for g in gaps if g > 0]
    return float(positive[len(positive) // 2]) if positive else 1.0


def _seconds(a: object, b: object) -> float:
    if a is None or b is None:
        return 0.0
    return max(0.0, (b - a).total_seconds())
