"""A followed trace's spans table, kept on disk and extended a refresh at a time (the watch's).

Each refresh gives the spans that closed since the last one (final: their segment and pairing never
change again) and the rows that are not final yet: the B events still open (unclosed spans), the
span the held last event may close, and the X spans (they nest over the whole file). The table of
the last refresh is extended with them (span_extend.py): the rows that were not final then are
reopened and come again, and only the rows from the first new span or step cover on are sorted and
attributed again. So a refresh costs what the run gained, and the table lives in Parquet parts in
the scratch folder, read lazily (storage/stored_table.py): the watch holds none of it. Up to
MEMORY_ROWS rows it is held in memory instead, as a cold read holds it.

Each refresh writes a new folder (a generation): the parts that did not change are hard links to the
last one's, and a generation's folder goes when its table is no longer referenced (a RunTables being
analysed keeps the one it was given). Parts are merged as they accumulate (`_compacted`), so a long
watch keeps about two parts per PART_ROWS rows, not one or more per refresh.

A segment boundary found since the last refresh can move the held event's row to another segment:
that refresh sorts and attributes every row again (a resumed writer: rare).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import polars as pl

from trace_doctor.ingest.storage.part_memo import note_merged, piece_identities
from trace_doctor.ingest.storage.stored_table import MEMORY_ROWS, PartWriter, StoredTable, scratch_folder
from trace_doctor.ingest.trace.span_build import SPAN_COLUMNS
from trace_doctor.ingest.trace.span_extend import PART_ROWS, Extension, extend_table, may_hold, span_facts
from trace_doctor.ingest.trace.span_pairing import PAIRED_SCHEMA
from trace_doctor.ingest.trace.span_resume import merged_ranges
from trace_doctor.ingest.trace.span_spill import COVER_COLUMNS, SORT_KEYS, ColumnRange

# Chunks of a table held in memory before it is copied into one.
MAX_CHUNKS = 64
# A part under this share of PART_ROWS is small: merged with a neighbour once none of its rows is open.
SMALL_PART_SHARE = 16


class LiveTable:
    """One followed trace file's spans table at its last refresh (see the module docstring)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.table = StoredTable([], 0, SPAN_COLUMNS)
        # The stepped spans among the final rows (the covers of rows not final are given each time).
        self._covers = pl.DataFrame(schema={c: PAIRED_SCHEMA[c] for c in COVER_COLUMNS})
        self._ranges = (ColumnRange(), ColumnRange())  # (pids, segments) of every row given so far
        self._reopened = pl.Series("line", [], dtype=pl.Int64)  # B lines of the rows not final
        self._boundaries: list[int] = []

    def refresh(self, closed: pl.DataFrame, pending: pl.DataFrame, boundaries: list[int]) -> StoredTable:
        """The table extended with the spans `closed` since the last refresh (final) and `pending`, the
        rows not final (both paired spans: span_pairing's PAIRED_SCHEMA); `boundaries`: the file's
        segment boundaries now."""
        closed, pending = closed.select(list(PAIRED_SCHEMA)), pending.select(list(PAIRED_SCHEMA))
        spans = pl.concat([closed, pending], how="vertical")
        ranges = (ColumnRange(), ColumnRange())
        ranges[0].observe(spans.get_column("pid"))
        ranges[1].observe(spans.get_column("segment"))
        new = Extension(spans, _covers(spans), self._reopened, ranges, self._ranges)
        # A table of at most MEMORY_ROWS rows stays in memory, as a cold read keeps it: the rules scan it
        # at every refresh, and decoding it from disk each time would cost more than its memory is worth.
        small = self.table.height + spans.height <= MEMORY_ROWS
        # Each part's facts (first and last sort keys, B lines) kept with the table: the next refresh finds
        # where its rows go and which parts can hold a reopened row without reading the parts.
        out = PartWriter(None if small else scratch_folder("live-spans-"), SPAN_COLUMNS, describe=span_facts)
        redo = boundaries != self._boundaries and self.table.height > 0
        try:
            extend_table(self.table, self._covers, new, self.source, out, redo=redo)
            table = _compacted(out, pending.get_column("line_begin"))
        except BaseException:
            out.abandon()
            raise
        if out.folder is not None:
            weakref.finalize(table, shutil.rmtree, out.folder, True)
        self.table = table
        self._covers = pl.concat([self._covers, _covers(closed)]).sort(SORT_KEYS)
        self._ranges = (merged_ranges(self._ranges[0], ranges[0]), merged_ranges(self._ranges[1], ranges[1]))
        self._reopened = pending.get_column("line_begin").sort().alias("line")
        self._boundaries = list(boundaries)
        return table


def _covers(spans: pl.DataFrame) -> pl.DataFrame:
    return spans.filter(pl.col("step").is_not_null() & pl.col("closed")).select(COVER_COLUMNS)


def _compacted(out: PartWriter, pending: pl.Series) -> StoredTable:
    """The written table with its parts merged as they accumulate (see the module docstring). At the
    end, a binary counter: the last parts merge while the one before is less than twice the size of
    what follows it, so each row is rewritten a few times over a long watch. Elsewhere, a small part
    (the rows a span left open across refreshes was patched into, span_extend.py) merges with its
    neighbours once none of their rows is still open: while one is, the next refresh rewrites its part
    again, which must stay small. Each merge is one write."""
    written = out.stored()
    facts = dict(written.facts)
    # In memory (a small table): one frame, whose chunks each refresh's slices and merges add to.
    parts = [(_rechunked(part), _rows(part, facts)) for part in written.read_parts()]
    # The newest part stays apart: the next refresh cuts it (the step in flight began in it) and writes
    # its rows again, which costs what the part holds; merged, it would be a big part cut and re-read.
    end = len(parts) - 1
    last, size = end - 1, parts[end - 1][1] if end > 0 else 0
    while last > 0 and parts[last - 1][1] < 2 * size and parts[last - 1][1] + size <= PART_ROWS:
        last, size = last - 1, size + parts[last - 1][1]
    if 0 <= last < end - 1:
        parts[last:end] = [_merged(parts[last:end], out.folder, facts)]
    kept: list[tuple[Path | pl.DataFrame, int]] = []
    run: list[tuple[Path | pl.DataFrame, int]] = []  # consecutive parts with no open row

    def flush() -> None:
        small = any(rows < PART_ROWS // SMALL_PART_SHARE for _, rows in run)
        kept.extend([_merged(run, out.folder, facts)] if len(run) > 1 and small else run)
        run.clear()

    for index, (part, rows) in enumerate(parts):
        if sum(r for _, r in run) + rows > PART_ROWS:
            flush()
        if index == len(parts) - 1 or _holds(part, pending, facts):
            flush()
            kept.append((part, rows))
        else:
            run.append((part, rows))
    flush()
    listed = [part for part, _ in kept]
    known = {part: facts[part] for part in listed if isinstance(part, Path) and part in facts}
    return StoredTable(listed, written.height, SPAN_COLUMNS, known)


def _merged(
    run: list[tuple[Path | pl.DataFrame, int]], folder: Path | None, facts: dict
) -> tuple[Path | pl.DataFrame, int]:
    """Consecutive parts as one, written once; the merged files removed. `facts` (by file part) gets
    the merged part's."""
    frame = pl.concat([_frame(part) for part, _ in run], how="vertical")
    # What queries read of the pieces is what they read of the merged part (part_memo): taken before their
    # files go.
    pieces = piece_identities([part for part, _ in run])
    for part, _ in run:
        if isinstance(part, Path):
            facts.pop(part, None)
            with contextlib.suppress(OSError):
                part.unlink()
    merged = _stored(frame, folder)
    if isinstance(merged, Path):
        facts[merged] = {"rows": frame.height, **span_facts(frame)}
    note_merged(merged, pieces)
    return merged, frame.height


def _rechunked(part: Path | pl.DataFrame) -> Path | pl.DataFrame:
    if isinstance(part, pl.DataFrame) and part.n_chunks() > MAX_CHUNKS:
        return part.rechunk()
    return part


def _holds(part: Path | pl.DataFrame, lines: pl.Series, facts: dict) -> bool:
    """Whether the part holds a row begun at one of `lines` (a row not final yet)."""
    if lines.len() == 0:
        return False
    known = facts.get(part) if isinstance(part, Path) else None
    if known is not None and known.get("lines") is not None and not may_hold(known, lines.sort().to_list()):
        return False  # its B lines, kept when it was written, cannot include any of them
    scan = part.lazy() if isinstance(part, pl.DataFrame) else pl.scan_parquet(part)
    return bool(scan.filter(pl.col("line_begin").is_in(lines.implode())).select(pl.len()).collect().item())


def _stored(frame: pl.DataFrame, folder: Path | None) -> Path | pl.DataFrame:
    """`frame` as a new Parquet file in `folder` (kept in memory with no folder, or when the write fails)."""
    if folder is None:
        return frame
    try:
        handle, name = tempfile.mkstemp(dir=folder, prefix="merged-", suffix=".parquet")
    except OSError:
        return frame
    os.close(handle)
    path = Path(name)
    try:
        frame.write_parquet(path, compression="lz4", row_group_size=PartWriter.ROW_GROUP_ROWS, statistics=True)
    except Exception:  # noqa: BLE001 - a full disk is a polars ComputeError too: the rows stay in memory
        with contextlib.suppress(OSError):
            path.unlink()
        return frame
    return path


def _rows(part: Path | pl.DataFrame, facts: dict) -> int:
    if isinstance(part, pl.DataFrame):
        return part.height
    if isinstance(facts.get(part), dict) and isinstance(facts[part].get("rows"), int):
        return facts[part]["rows"]
    return int(pl.scan_parquet(part).select(pl.len()).collect().item())


def _frame(part: Path | pl.DataFrame) -> pl.DataFrame:
    return part if isinstance(part, pl.DataFrame) else pl.read_parquet(part)
