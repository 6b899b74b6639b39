"""The spans table of a grown trace from the table of its first part and the spans its new lines made.

The table is in (segment, start, line of the B event) order, and a span's row depends only on the
span, the step covers and whether pids and segments vary (span_spill.py). What the new lines change:
- new spans, and the covers (stepped spans) closed by the new lines, which can only change the step
  of spans that start at or after the cover does (containment starts at the cover's start);
- the spans unclosed before (the open stack): each comes again from the new read, closed or still
  open, at the same place in the order (its start and B line do not change).
So the rows before the first key among the new spans and new covers keep their place and their
step: they are copied (whole Parquet parts by a hard link, the part cut by the key rewritten, or with
`cut_files` linked as a slice of its file), the reopened rows among them replaced. The rows from that
key on are merged with the new spans, their containment steps taken again, and sorted: what
span_spill's windows would write for them. When pids or segments start to vary, every step can
change: the whole table is done again that way (and when the caller says a reopened row's key moved:
`redo`).

The old table's parts are Parquet files, slices of them, or frames held in memory (a writer with no
disk to go to): a frame part is taken over as it is where a file would be linked.

What a resume costs should follow the append, not the file (a watch-like analysis every few minutes
for a day): which parts lie before the first new key and which can hold a reopened row is known from
each part's facts (span_facts: rows, first and last key, B-line range; kept in the cache entry's
header), not from reading the parts; a cut part is linked as slices around the rows that change; and
as every resume cuts the last part and adds one, a trailing run of more than MAX_SMALL_PARTS small
parts is written again as one with the new rows, so the parts stay few (15 after 50 resumes of
3000x64 by 20 KB, against 627 when each resume rewrote the part it cut and added).
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path

import polars as pl

from trace_doctor.ingest.storage.stored_table import Facts, FileRows, PartWriter, StoredTable
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
# A part smaller than this is small: a trailing run of more than MAX_SMALL_PARTS of them (each extension
# cuts the last part and adds one) is written again as one part.
SMALL_PART_ROWS = PART_ROWS // 4
MAX_SMALL_PARTS = 16
# The table's last rows written as a small part of their own: the next extension cuts the table where the
# step in flight began (its first new key, most often among the last few thousand rows) and writes the
# cut part's rows again, so the cut costs what this part holds, not a whole PART_ROWS part.
TAIL_ROWS = 4096
# Rows that did not change linked as a slice of their file (stored_table.FileRows) when at least this
# many lie together; fewer are written again with the reopened rows next to them.
LINKED_ROWS = 4096


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
    old: StoredTable,
    old_covers: pl.DataFrame,
    new: Extension,
    source: str,
    out: PartWriter,
    *,
    redo: bool = False,
    cut_files: bool = False,
) -> int:
    """Write the grown file's spans table to `out` (see the module docstring); returns its rows.
    `redo`: every row is sorted and attributed again (a reopened row's key may have moved).
    `cut_files`: a file part cut by the first new key, or around reopened rows, is linked as slices of
    its unchanged rows (stored_table.FileRows) rather than rewritten, and a trailing run of more than
    MAX_SMALL_PARTS small parts is written again as one (so the parts stay few however many times the
    table is extended)."""
    by = _varying(new.old_ranges, new.ranges)
    reopened = pl.col("line_begin").is_in(new.reopened.implode())
    fresh = new.spans.filter(~reopened)
    replaced = new.spans.filter(reopened)
    parts = old.read_parts()
    facts = [_facts(old, part) for part in parts]
    keys = _PartKeys(parts)
    first = _first_key(pl.concat([fresh.select(SORT_KEYS), new.covers.select(SORT_KEYS)]))
    everything = redo or by != _varying(new.old_ranges)
    if everything:
        split, kept = 0, replaced.clear()  # every step may change: every row is redone
    elif first is None:
        split, kept = old.height, replaced  # nothing new: only the reopened rows change
    else:
        split, kept = _rows_before(keys, facts, first), replaced.filter(_before(first))
    all_covers = pl.concat([old_covers, new.covers.select(COVER_COLUMNS)]).sort(SORT_KEYS)
    total = old.height + fresh.height
    covers = StepCovers.of(
        all_covers if everything else _covers_for(all_covers, first, kept.get_column("start_us"), total),
        total=total,
        by=by,
    )
    lines = new.reopened.sort().to_list()
    # The reopened rows that keep their place, as table rows: attributed once, whichever parts they are in.
    again = _attributed(_with_source(kept, source), covers)
    compacted = _compacted_run(facts, split) if cut_files else range(0)
    out.persist()
    done = 0
    run: list[pl.DataFrame] = []  # the compacted run's rows, written as one when it ends
    settled: list[pl.DataFrame] = []  # rows before the split written with the rows after it
    tail: list[pl.DataFrame] = []
    for index, (part, known) in enumerate(zip(parts, facts, strict=True)):
        rows = known["rows"]
        lo, hi = done, done + rows
        done = hi
        if index in compacted:
            run.append(_patched_frame(_frame(part), again))
            continue
        if run:
            _write(out, pl.concat(run, how="vertical"))
            run = []
        if lo >= split:
            tail.append(_frame(part))
            continue
        holds = may_hold(known, lines) and _holds(keys.of(index), new.reopened)
        if hi <= split and not holds:
            if isinstance(part, pl.DataFrame):
                for offset in range(0, part.height, PART_ROWS):
                    out.write(part.slice(offset, PART_ROWS))
            else:
                out.link(part, rows, known)
            continue
        linked: pl.DataFrame | None | bool = False
        if cut_files and not isinstance(part, pl.DataFrame):
            linked = _link_patched(part, keys.of(index).head(split - lo), again, out)
        if linked is not False:
            if isinstance(linked, pl.DataFrame) and hi > split:
                settled.append(linked)  # written with the rows that follow: one part
            elif isinstance(linked, pl.DataFrame):
                out.write(linked)
            if hi > split:
                tail.append(_slice(part, split - lo, hi - split).scan().collect())
            continue
        frame = _frame(part)
        for piece in _patched(frame.head(split - lo), again):
            out.write(piece)
        tail.append(frame.slice(split - lo))
    if run:
        _write(out, pl.concat(run, how="vertical"))
    rest = pl.concat(tail, how="vertical") if tail else pl.DataFrame(schema=SPAN_COLUMNS)
    moved = replaced.filter(~pl.col("line_begin").is_in(kept.get_column("line_begin").implode()))
    merged = pl.concat(
        [_unattributed(rest.filter(~reopened)), _with_source(fresh, source), _with_source(moved, source)],
        how="vertical",
    )
    _write(out, pl.concat([*settled, _attributed(merged.sort(SORT_KEYS), covers)], how="vertical"), tail=TAIL_ROWS)
    return out.height


# Reopened rows attributed in place beyond this many: every cover is kept (_covers_for).
MAX_STABBED_ROWS = 256


def _covers_for(covers: pl.DataFrame, first: tuple | None, again: pl.Series, total: int) -> pl.DataFrame:
    """The step covers that can enclose a row this extension attributes: the rows from the first new key on
    (in its segment, a cover ending before that key's start encloses none of them; later segments, all),
    and the reopened rows kept in place (the covers around each one's start). Containment by the covers
    kept is containment by all of them: every cover around a row's start is kept, and with it every cover
    around that cover (StepCovers finds the innermost cover at a row's start among those around it, and
    climbs to the ones around that). So a refresh's sweep reads the recent covers, not the whole run's.
    (A table whose every span is a cover is kept whole: StepCovers then attributes nothing, by `total`.)"""
    if covers.height == total or again.len() > MAX_STABBED_ROWS or again.is_null().any() or again.is_nan().any():
        return covers
    if first is None:
        recent = pl.lit(False)
    elif first[0] is None or first[1] is None or math.isnan(first[1]):
        return covers
    else:
        segment, start = first[0], first[1]
        recent = (pl.col("segment") > segment) | ((pl.col("segment") == segment) & (pl.col("end_us") >= start))
    around = [(pl.col("start_us") <= s) & (pl.col("end_us") >= s) for s in again.to_list()]
    return covers.filter(pl.any_horizontal(recent, *around).fill_null(True))


def _write(out: PartWriter, rows: pl.DataFrame, *, tail: int = 0) -> None:
    """Rows written as parts of at most PART_ROWS rows; with `tail`, their last `tail` rows as a part of
    their own."""
    body = rows.height - tail if rows.height > tail else rows.height
    for offset in range(0, body, PART_ROWS):
        out.write(rows.slice(offset, min(PART_ROWS, body - offset)))
    if body < rows.height:
        out.write(rows.slice(body))


def span_facts(frame: pl.DataFrame) -> Facts:
    """What a spans part's header keeps of its rows (stored_table.Facts; `rows` is the writer's): its
    first and last sort keys (the table is in that order: which part a key falls in is found without
    reading any) and its lowest and highest B line (whether it can hold a reopened row)."""
    if frame.height == 0:
        return {"first": None, "last": None, "lines": None}
    keys = frame.select(SORT_KEYS)
    lines = frame.get_column("line_begin")
    return {"first": list(keys.row(0)), "last": list(keys.row(-1)), "lines": [lines.min(), lines.max()]}


def _facts(table: StoredTable, part) -> Facts:
    """A part's facts: as its table knows them, else read (a table written without them)."""
    known = table.facts.get(part) if not isinstance(part, pl.DataFrame) else None
    if known is not None and {"rows", "last", "lines"} <= known.keys():
        return known
    frame = _scan(part).select(SORT_KEYS).collect()
    return {"rows": frame.height, **span_facts(frame)}


def _compacted_run(facts: list[Facts], split: int) -> range:
    """The trailing run of small parts before the part the split falls in, when it is longer than
    MAX_SMALL_PARTS (its rows are then written again as one part); else no part. Each resume cuts the
    last part and adds one: this bounds their count, each row written again about once per
    MAX_SMALL_PARTS resumes until its part is no longer small."""
    done, at = 0, len(facts)
    for index, known in enumerate(facts):
        if done + known["rows"] > split:
            at = index
            break
        done += known["rows"]
    start = at
    while start > 0 and facts[start - 1]["rows"] < SMALL_PART_ROWS:
        start -= 1
    return range(start, at) if at - start > MAX_SMALL_PARTS else range(0)


def _varying(*ranges: tuple[ColumnRange, ColumnRange]) -> list[str]:
    """The columns among (segment, pid) that vary over the spans the ranges saw together."""
    pids = merged_ranges(*(pair[0] for pair in ranges))
    segments = merged_ranges(*(pair[1] for pair in ranges))
    return [name for name, column in (("segment", segments), ("pid", pids)) if not column.constant()]


def _scan(part) -> pl.LazyFrame:
    if isinstance(part, FileRows):
        return part.scan()
    return part.lazy() if isinstance(part, pl.DataFrame) else pl.scan_parquet(part)


def _frame(part) -> pl.DataFrame:
    if isinstance(part, pl.DataFrame):
        return part
    return part.scan().collect() if isinstance(part, FileRows) else pl.read_parquet(part)


def _slice(part: Path | FileRows, start: int, rows: int) -> FileRows:
    """Rows [start, start + rows) of a file part."""
    if isinstance(part, FileRows):
        return FileRows(part.path, part.start + start, rows)
    return FileRows(part, start, rows)


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


class _PartKeys:
    """The sort keys of a part's rows, read once for all that asks (which part holds reopened rows, how
    many rows sort before the first new key, where to cut)."""

    def __init__(self, parts: list) -> None:
        self.parts = parts
        self._read: dict[int, pl.DataFrame] = {}

    def of(self, index: int) -> pl.DataFrame:
        if index not in self._read:
            self._read[index] = _scan(self.parts[index]).select(SORT_KEYS).collect()
        return self._read[index]


def _rows_before(keys: _PartKeys, facts: list[Facts], key: tuple) -> int:
    """Rows of the table that sort before `key`: every row of the parts whose last row does (the table
    is in key order), and those of the next part, read."""
    parts = keys.parts
    if not parts:
        return 0
    lasts = pl.DataFrame(
        [known["last"] for known in facts],
        schema={name: SPAN_COLUMNS[name] for name in SORT_KEYS},
        orient="row",
    )
    before = lasts.select(_before(key)).to_series().to_list()
    at = before.index(False) if False in before else len(parts)
    rows = sum(known["rows"] for known in facts[:at])
    if at < len(parts):
        rows += int(keys.of(at).select(_before(key).sum()).item())
    return rows


def may_hold(known: Facts, lines: list[int]) -> bool:
    """Whether a part whose B lines span `known["lines"]` can hold one of `lines` (sorted)."""
    if not lines or known["lines"] is None:
        return False
    low, high = known["lines"]
    at = bisect.bisect_left(lines, low)
    return at < len(lines) and lines[at] <= high


def _holds(keys: pl.DataFrame, lines: pl.Series) -> bool:
    return lines.len() > 0 and bool(keys.get_column("line_begin").is_in(lines.implode()).any())


def _link_patched(
    part: Path | FileRows, keys: pl.DataFrame, again: pl.DataFrame, out: PartWriter
) -> pl.DataFrame | None | bool:
    """A file part's first rows (`keys`: their sort keys) with the reopened ones among them replaced, as
    _patched gives them, but the long runs of rows that did not change linked as slices of the file, not written:
    the reopened rows, with the short runs between them, are written as parts of their own. Returns the
    written rows that end the head (the caller writes them with the rows that follow), None when the
    head ends with a linked slice, or False (nothing written) when they make too many runs."""
    is_kept = pl.col("line_begin").is_in(again.get_column("line_begin").implode())
    head_rows = keys.height  # the keys of the part's first rows, those linked or written here
    runs = reopened_runs(keys.select(is_kept).to_series().arg_true().to_list(), head_rows)
    if len(runs) > MAX_REPLACED_RUNS:
        return False
    done = 0
    last_written = None
    for first, last in [*runs, (head_rows, head_rows - 1)]:
        if first > done:
            piece = keys.slice(done, first - done)
            out.link(_slice(part, done, piece.height), piece.height, {"rows": piece.height, **span_facts(piece)})
        if first <= last:
            rows = _scan(part).slice(first, last - first + 1).collect()
            last_written = _patched_frame(rows, again)
            if last + 1 < head_rows:
                out.write(last_written)
        done = last + 1
    return last_written if runs and runs[-1][1] == head_rows - 1 else None


def reopened_runs(positions: list[int], rows: int) -> list[tuple[int, int]]:
    """The (first, last) runs of rows to write among `rows` to place the reopened rows at `positions`:
    their runs, joined when fewer than LINKED_ROWS rows lie between them (or before the first, or after
    the last), which are written again rather than linked as a slice of their own."""
    runs: list[tuple[int, int]] = []
    for at in positions:
        if runs and at - runs[-1][1] - 1 < LINKED_ROWS:
            runs[-1] = (runs[-1][0], at)
        else:
            runs.append((0 if at < LINKED_ROWS else at, at))
    if runs and rows - runs[-1][1] - 1 < LINKED_ROWS:
        runs[-1] = (runs[-1][0], rows - 1)
    return runs


def _patched_frame(head: pl.DataFrame, again: pl.DataFrame) -> pl.DataFrame:
    """Copied rows with the reopened ones among them replaced by their new version, as one frame."""
    pieces = _patched(head, again)
    return pieces[0] if len(pieces) == 1 else pl.concat(pieces, how="vertical")


def _patched(head: pl.DataFrame, again: pl.DataFrame) -> list[pl.DataFrame]:
    """Copied rows with the reopened ones among them replaced by their new version (`again`: the kept
    reopened rows as table rows, attributed once for every part), at the same place,
    as pieces each written as a part: the runs of rows that did not change, and the replaced rows. A
    later extension then links the unchanged runs and rewrites only the small parts of reopened rows
    (a run's outermost spans stay open from its first line to its end)."""
    hit = head.get_column("line_begin").is_in(again.get_column("line_begin").implode())
    where = hit.arg_true().to_list()
    if not where:
        return [head]
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
