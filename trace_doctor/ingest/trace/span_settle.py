"""A cold read's spans table cut, before it becomes a cache entry, where the first resume will cut it.

The first resume of a grown trace (span_extend.py, `cut_files`) writes again the rows left open at the
end of the read (a run's outermost spans, its step in flight) with the short runs around them, and
links the rest of the parts that hold them as slices of their files: slices the cold analysis never
saw, so each per-part query of the next analysis read them anew (part_memo keeps a result per part and
slice: 250,000 rows of the first part, scanned 14 times, at 12000x64). It also cuts the last part where
the step in flight began and writes that part's rows again.

Cut here into the very slices the resume will link (the same start and rows, found by the same runs:
span_extend.reopened_runs) and the short runs it will write again, and with the last TAIL_ROWS rows a
slice of their own, the cold analysis's per-part results are kept for the slices the resume links,
and the next analysis reads only what the run gained. The rows and their order do not change; no row
is written: a part becomes consecutive slices of its file (stored_table.FileRows).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from trace_doctor.ingest.storage.stored_table import PartWriter
from trace_doctor.ingest.trace.span_extend import MAX_REPLACED_RUNS, TAIL_ROWS, may_hold, reopened_runs, span_facts
from trace_doctor.ingest.trace.span_spill import SORT_KEYS


def cut_for_resume(out: PartWriter, reopened: pl.Series) -> None:
    """Cut `out`'s file parts (a cold read's, written and on disk) around the rows begun at the B lines
    `reopened` (the spans left open: the resume's reopened rows) and before the table's last TAIL_ROWS
    rows (see the module docstring)."""
    lines = reopened.sort().to_list()
    files = [part for part in out.parts if isinstance(part, Path)]
    if not files or len(files) != len(out.parts):
        return  # slices of other files, or rows in memory: not a cold read's parts
    for index, part in enumerate(files):
        known = out.facts.get(part)
        if not isinstance(known, dict) or not isinstance(known.get("rows"), int):
            continue
        last = index == len(files) - 1
        holds = known.get("lines") is not None and may_hold(known, lines)
        if not holds and not (last and known["rows"] > TAIL_ROWS):
            continue
        keys = pl.scan_parquet(part).select(SORT_KEYS).collect()
        if keys.height != known["rows"]:
            continue
        cuts = _cuts(keys, lines if holds else [], last)
        if cuts is not None:
            out.cut(
                part, [(start, rows, {"rows": rows, **span_facts(keys.slice(start, rows))}) for start, rows in cuts]
            )


def _cuts(keys: pl.DataFrame, lines: list[int], last: bool) -> list[tuple[int, int]] | None:
    """(start, rows) of the slices a part of these `keys` is cut into: the runs the resume writes again
    around the reopened rows and the slices between them it links, the last TAIL_ROWS rows apart in the
    table's last part; None when it stays whole (too many runs: the resume writes it again whole)."""
    rows = keys.height
    positions = keys.select(pl.col("line_begin").is_in(lines)).to_series().arg_true().to_list() if lines else []
    runs = reopened_runs(positions, rows)
    if len(runs) > MAX_REPLACED_RUNS:
        return None
    bounds = {0, rows}
    for first, end in runs:
        bounds |= {first, end + 1}
    if last and rows > TAIL_ROWS:
        tail = rows - TAIL_ROWS
        # Inside a run the resume writes again whole: the run is the cut, not the tail's start.
        if not any(first < tail <= end for first, end in runs):
            bounds.add(tail)
    edges = sorted(bounds)
    cuts = [(start, end - start) for start, end in zip(edges, edges[1:], strict=False) if end > start]
    return cuts if len(cuts) > 1 else None
