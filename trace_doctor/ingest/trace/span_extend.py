"""The spans table of a grown trace from the table of its first part and the spans its new lines made.

The table is in (segment, start, line of the B event) order, and a span's row depends only on the
span, the step covers and whether pids and segments vary (span_spill.py). What the new lines change:
- new spans, and the covers (stepped spans) closed by the new lines, which can only change the step
  of spans that start at or after the cover does (containment starts at the cover's start);
- the spans unclosed before (the open stack): each comes again from the new read, closed or still
  open, at the same place in the order (its start and B line do not change).
So the rows before the first key among the new spans and new covers keep their place and their
step: they are copied (whole Parquet parts by a hard link, the part cut by the key rewritten), the
reopened rows among them replaced. The rows from that key on are merged with the new spans, their
containment steps taken again, and sorted: what span_spill's windows would write for them. When
pids or segments start to vary, every step can change: the whole table is done again that way (and
when the caller says a reopened row's key moved: `redo`).

The old table's parts are Parquet files, or frames held in memory (a writer with no disk to go to):
a frame part is taken over as it is where a file would be linked.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.ingest.storage.stored_table import PartWriter, StoredTable
from trace_doctor.ingest.trace.span_build import SPAN_COLUMNS
from trace_doctor.ingest.trace.span_names import SpanNames
from trace_doctor.ingest.trace.span_resume import merged_ranges
from trace_doctor.ingest.trace.span_spill import COVER_COLUMNS, SORT_KEYS, ColumnRange
from trace_doctor.ingest.trace.span_steps import StepCovers

# Runs of reopened rows among the copied ones written as parts of their own, at most.
MAX_REPLACED_RUNS = 16
# Rows of one part written, at most: the part an extension's first new key falls in is rewritten, so a
# part's size bounds what an extension that adds a few spans at the end costs.
PART_ROWS = 65_536


class Extension:
    """What the new lines made (see the module docstring)."""

    def __init__(
        self,
        spans: pl.DataFrame,
        covers: pl.DataFrame,
        reopened: pl.Series,
        ranges: tuple[ColumnRange, ColumnRange],
        old_ranges: tuple[ColumnRange, ColumnRange],
    ) -> None:
        self.spans = SpanNames.plain(spans)  # paired spans: every one names its track and thread
        self.covers = covers  # the stepped spans among them
        self.reopened = reopened  # B lines of the old table's unclosed rows: `spans` has each again
        self.ranges = ranges
        self.old_ranges = old_ranges


def extend_table(
    old: StoredTable, old_covers: pl.DataFrame, new: Extension, source: str, out: PartWriter, *, redo: bool = False
) -> int:
    """Write the grown file's spans table to `out` (see the module docstring); returns its rows.
    `redo`: every row is sorted and attributed again (a reopened row's key may have moved)."""
    by = _varying(new.old_ranges, new.ranges)
    reopened = pl.col("line_begin").is_in(new.reopened.implode())
    fresh = new.spans.filter(~reopened)
    replaced = new.spans.filter(reopened)
    covers = StepCovers.of(
        pl.concat([old_covers, new.covers.select(COVER_COLUMNS)]).sort(SORT_KEYS),
        total=old.height + fresh.height,
        by=by,
    )
    parts = [(part, _rows(part)) for part in old.read_parts()]
    first = _first_key(pl.concat([fresh.select(SORT_KEYS), new.covers.select(SORT_KEYS)]))
    if redo or by != _varying(new.old_ranges):
        split, kept = 0, replaced.clear()  # every step may change: every row is redone
    elif first is None:
        split, kept = old.height, replaced  # nothing new: only the reopened rows change
    else:
        split, kept = _rows_before(parts, first), replaced.filter(_before(first))
    out.persist()
    done = 0
    tail: list[pl.DataFrame] = []
    for part, rows in parts:
        lo, hi = done, done + rows
        done = hi
        if hi <= split and not _holds(part, new.reopened):
            if isinstance(part, pl.DataFrame):
                for offset in range(0, part.height, PART_ROWS):
                    out.write(part.slice(offset, PART_ROWS))
            else:
                out.link(part, rows)
            continue
        frame = part if isinstance(part, pl.DataFrame) else pl.read_parquet(part)
        if lo < split:
            for piece in _patched(frame.head(split - lo), kept, covers, source):
                out.write(piece)
            frame = frame.slice(split - lo)
        tail.append(frame)
    rest = pl.concat(tail, how="vertical") if tail else pl.DataFrame(schema=SPAN_COLUMNS)
    moved = replaced.filter(~pl.col("line_begin").is_in(kept.get_column("line_begin").implode()))
    merged = pl.concat(
        [_unattributed(rest.filter(~reopened)), _with_source(fresh, source), _with_source(moved, source)],
        how="vertical",
    )
    done_rows = _attributed(merged.sort(SORT_KEYS), covers)
    for offset in range(0, done_rows.height, PART_ROWS):
        out.write(done_rows.slice(offset, PART_ROWS))
    return out.height


def _varying(*ranges: tuple[ColumnRange, ColumnRange]) -> list[str]:
    """The columns among (segment, pid) that vary over the spans the ranges saw together."""
    pids = merged_ranges(*(pair[0] for pair in ranges))
    segments = merged_ranges(*(pair[1] for pair in ranges))
    return [name for name, column in (("segment", segments), ("pid", pids)) if not column.constant()]


def _rows(part) -> int:
    if isinstance(part, pl.DataFrame):
        return part.height
    return int(pl.scan_parquet(part).select(pl.len()).collect().item())


def _scan(part) -> pl.LazyFrame:
    return part.lazy() if isinstance(part, pl.DataFrame) else pl.scan_parquet(part)


def _first_key(keys: pl.DataFrame) -> tuple | None:
    if keys.height == 0:
        return None
    return keys.sort(SORT_KEYS).row(0)


def _before(key: tuple) -> pl.Expr:
    """Rows whose (segment, start, line) sorts before `key` (nulls first, NaN last, as the sort does)."""
    segment, start, line = key
    same = pl.col("segment") == segment
    if start is None:
        within = pl.col("start_us").is_null() & (pl.col("line_begin") < line)
    else:
        within = pl.col("start_us").is_null() | (pl.col("start_us") < start)
        within = within | ((pl.col("start_us") == start) & (pl.col("line_begin") < line))
    return ((pl.col("segment") < segment) | (same & within.fill_null(False))).fill_null(False)


def _rows_before(parts: list, key: tuple) -> int:
    if not parts:
        return 0
    scans = [_scan(part).select("segment", "start_us", "line_begin") for part, _ in parts]
    return int(pl.concat(scans).select(_before(key).sum()).collect().item())


def _holds(part, lines: pl.Series) -> bool:
    if lines.len() == 0:
        return False
    found = _scan(part).filter(pl.col("line_begin").is_in(lines.implode())).select(pl.len())
    return bool(found.collect().item())


def _patched(head: pl.DataFrame, kept: pl.DataFrame, covers: StepCovers, source: str) -> list[pl.DataFrame]:
    """Copied rows with the reopened ones among them replaced by their new version, at the same place,
    as pieces each written as a part: the runs of rows that did not change, and the replaced rows. A
    later extension then links the unchanged runs and rewrites only the small parts of reopened rows
    (a run's outermost spans stay open from its first line to its end)."""
    hit = head.get_column("line_begin").is_in(kept.get_column("line_begin").implode())
    where = hit.arg_true().to_list()
    if not where:
        return [head]
    again = _attributed(
        _with_source(kept.filter(pl.col("line_begin").is_in(head["line_begin"].implode())), source), covers
    )
    again = again.join(head.select("line_begin").with_row_index("_at"), on="line_begin").sort("_at")
    pieces: list[pl.DataFrame] = []
    done = 0
    runs = _runs(where)
    for first, last in runs:
        if first > done:
            pieces.append(head.slice(done, first - done))
        rows = again.filter(pl.col("_at").is_between(first, last)).drop("_at")
        pieces.append(rows)
        done = last + 1
    if done < head.height:
        pieces.append(head.slice(done))
    if len(runs) > MAX_REPLACED_RUNS:  # a deep open stack: one part, not thousands
        return [pl.concat(pieces, how="vertical")]
    return pieces


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for at in positions:
        if runs and runs[-1][1] == at - 1:
            runs[-1] = (runs[-1][0], at)
        else:
            runs.append((at, at))
    return runs


def _unattributed(rows: pl.DataFrame) -> pl.DataFrame:
    """Table rows with the steps found by containment taken off (they are found again)."""
    by_containment = pl.col("step_source") == "containment"
    return rows.with_columns(
        pl.when(by_containment).then(None).otherwise(pl.col("step")).alias("step"),
        pl.when(by_containment).then(None).otherwise(pl.col("step_source")).alias("step_source"),
    )


def _with_source(spans: pl.DataFrame, source: str) -> pl.DataFrame:
    return spans.with_columns(pl.lit(source).alias("source")).select(list(SPAN_COLUMNS))


def _attributed(spans: pl.DataFrame, covers: StepCovers) -> pl.DataFrame:
    return covers.attribute(spans).select(list(SPAN_COLUMNS))
