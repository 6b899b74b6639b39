"""Trace bytes -> typed event rows: a JSONL chunk's lines, or the events of a decoded JSON document.

Every event is read into one typed projection (EVENT_COLUMNS, `line` = its 1-based line, or its
index in a document). In a JSONL chunk, lines in the cookbook writer's exact byte layout are typed
without JSON decoding (trace_layout.py); the other lines are read by polars `read_ndjson` with an
explicit schema (never inference), halved around the lines it refuses (bisected_read.py), and only
those go through the lenient per-line decoder (NaN literals, wrong types, truncation), each bad line
becoming an ingest warning. Metadata (`M`) rows are set apart as each chunk is read: they only name
tracks and mark resumed processes, and keeping them out of the event table keeps them out of
pairing's copies.
"""

from __future__ import annotations

import io
import math
import re
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from trace_doctor.ingest.reading.bisected_read import Refused, read_bisected
from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.jsonl import JSON_NUMBER, decode_line, finite_float, json_text, shown
from trace_doctor.ingest.trace.chunk_lines import BLANK, GARBAGE, ChunkLines, runs
from trace_doctor.ingest.trace.trace_layout import LAYOUT_COLUMNS, read_layout

SPAN_PHASES = ("B", "E", "X")

# The typed projection every event is read into (fast path and fallback alike). `args` stays JSON
# text: the few attributes needed are extracted from it, and the rest is kept verbatim.
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String,
    "ph": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "cat": pl.String,
    "args": pl.String,
}
EVENT_COLUMNS = {**EVENT_SCHEMA, "pid_label": pl.String, "tid_label": pl.String, "line": pl.Int64, **LAYOUT_COLUMNS}
# Metadata rows and the other events are kept apart once read (see split_metadata).
META_COLUMNS = {c: EVENT_COLUMNS[c] for c in ("name", "pid", "pid_label", "tid", "tid_label", "args", "_label", "line")}
SPAN_EVENT_COLUMNS = {c: t for c, t in EVENT_COLUMNS.items() if c != "_label"}

# Below this many lines a refused piece is decoded line by line instead of bisected further.
MIN_BISECT_LINES = 64


class ChunkRead(NamedTuple):
    """One chunk's span events and metadata rows, its warnings, and its line count (lines numbered from 1)."""

    events: list[pl.DataFrame]
    meta: list[pl.DataFrame]
    bad: FileWarnings
    lines: int


def read_chunk(chunk: bytes, source: str, unterminated: bool) -> ChunkRead:
    """Read a chunk: lines in the cookbook's fixed layout are typed without JSON decoding, the rest
    are read generally; metadata rows are set apart here, on the reading threads."""
    bad = FileWarnings(source)
    layout = read_layout(chunk, EVENT_COLUMNS)
    if layout is not None and layout.others.is_empty():
        return ChunkRead(*_split_lists([layout.rows]), bad, layout.lines)
    lines = ChunkLines(chunk, unterminated)
    others = layout.others.to_numpy() if layout is not None else np.arange(lines.count)
    truncated_line = lines.count if unterminated else None
    general = [drop_incomplete(frame, bad) for frame in _read_lines(lines, others, source, bad, truncated_line)]
    # In line order, whichever reader took each line (the per-line decoder, or the typed read whose
    # unusable rows drop_incomplete reports after it).
    bad.sort_listed()
    if layout is not None:
        # Back into file order: later stages (segments) rely on it.
        general = [pl.concat([layout.rows, *general], how="vertical").sort("line")]
    return ChunkRead(*_split_lists(general), bad, lines.count)


def _split_lists(frames: list[pl.DataFrame]) -> tuple[list[pl.DataFrame], list[pl.DataFrame]]:
    """split_metadata over a chunk's frames: (their event parts, their metadata parts)."""
    events, meta = [], []
    for frame in frames:
        span_part, meta_part = split_metadata(frame)
        events.append(span_part)
        meta.append(meta_part)
    return events, meta


def split_metadata(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the events that are not metadata, the `M` metadata rows), each with only the columns it needs.

    Metadata (a fifth of a cookbook trace: one thread_name per task) only names tracks and marks
    resumed processes; keeping it out of the event table keeps it out of pairing's copies.
    """
    # A row without a phase is no metadata: it stays with the events, where it is reported.
    is_meta = (events.get_column("ph") == "M").fill_null(False)
    if not bool(is_meta.any()):
        return events.drop("_label"), pl.DataFrame(schema=META_COLUMNS)
    return events.filter(~is_meta).drop("_label"), events.filter(is_meta).select(list(META_COLUMNS))


def _read_lines(
    lines: ChunkLines, indices: np.ndarray, source: str, bad: FileWarnings, truncated_line: int | None
) -> list[pl.DataFrame]:
    """Read the lines at `indices` (0-based, in order) generally, as runs of one kind of line.

    Blank lines are no events and no problems. Lines that may be objects are read with polars'
    typed JSON reader, the lines it refuses decoded one by one, in place; a run too short to be
    worth a read of its own is decoded line by line. Lines that cannot be events (garbage, a log
    line) never go to polars, where each would refuse the whole read around it: each is a warning,
    and past the warnings listed they are only counted, so a file of garbage costs no Python object
    per line. Runs are taken in line order, so warnings come in line order.
    """
    frames = []
    for start, stop, kind in runs(indices, lines.kinds):
        if kind == BLANK:
            continue
        run = indices[start:stop]
        if kind == GARBAGE:
            listed = min(bad.room, run.size)
            for index in run[:listed].tolist():
                _decode_line(lines.line(index), index + 1, source, bad, truncated_line)
            if run.size > listed:
                bad.count_unlisted(int(run.size - listed), int(run[listed]) + 1)
            continue
        numbers = (run + 1).tolist()
        raw = [lines.line(index) for index in run.tolist()]
        pieces = (
            read_bisected(raw, numbers, _typed_rows, min_lines=MIN_BISECT_LINES)
            if run.size >= MIN_BISECT_LINES
            else [Refused(raw, numbers)]
        )
        for piece in pieces:
            if isinstance(piece, Refused):
                rows = [
                    _decode_line(line, number, source, bad, truncated_line)
                    for line, number in zip(piece.lines, piece.numbers, strict=True)
                ]
                frames.append(rows_frame([r for r in rows if r is not None]))
            else:
                frames.append(piece)
    return [f for f in frames if f.height] or [rows_frame([])]


def _typed_rows(data: bytes, numbers: list[int]) -> pl.DataFrame | None:
    """The lines of `data` typed by polars, with their line `numbers`; None if it refuses any of them."""
    try:
        frame = pl.read_ndjson(io.BytesIO(data), schema=EVENT_SCHEMA)
    except Exception:  # noqa: BLE001 - any refusal sends the lines to bisection, never a crash
        return None
    if frame.height != len(numbers):
        return None
    # Labels exist for string pids/tids (kineto's "Spans"), which the typed reader never holds; the
    # layout columns are only the layout reader's.
    return frame.with_columns(
        pl.lit(None, pl.String).alias("pid_label"),
        pl.lit(None, pl.String).alias("tid_label"),
        pl.Series("line", numbers, dtype=pl.Int64),
        *(pl.lit(None, dtype).alias(name) for name, dtype in LAYOUT_COLUMNS.items()),
    )


def _decode_line(
    raw: bytes, line: int, source: str, bad: FileWarnings, truncated_line: int | None
) -> dict[str, Any] | None:
    parsed = decode_line(raw, line, source, bad, truncated=line == truncated_line, expect_object=False)
    if parsed is None:
        return None
    value = parsed.value
    row, problem = validate_event(value)
    if problem is not None:
        bad.add(line, problem)
        return None
    row["line"] = line
    return row


def drop_incomplete(events: pl.DataFrame, bad: FileWarnings) -> pl.DataFrame:
    """`events` without the rows polars typed but that cannot be used (no phase, a span event without
    a timestamp, an X event without a duration), each reported in `bad`."""
    incomplete = (
        pl.col("ph").is_null()
        | (pl.col("ph").is_in(SPAN_PHASES) & pl.col("ts").is_null())
        | ((pl.col("ph") == "X") & (pl.col("dur").is_null() | (pl.col("dur") < 0)))
    )
    dropped = events.filter(incomplete)
    if not dropped.height:
        return events
    # Only the warnings that will be listed are written; the rest are counted.
    listed = min(bad.room, dropped.height)
    for ph, line, dur in dropped.head(listed).select("ph", "line", "dur").iter_rows():
        if ph is None:
            problem = "event without a string `ph` (phase)"
        elif ph == "X" and (dur is None or dur < 0):
            problem = f"X event `dur` is not a non-negative number ({dur!r})"
        else:
            problem = "`ts` is missing"
        bad.add(line, problem)
    if dropped.height > listed:
        bad.count_unlisted(dropped.height - listed, dropped.get_column("line")[listed])
    return events.filter(~incomplete)


def rows_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Validated rows (see validate_event) as an EVENT_COLUMNS table."""
    return pl.DataFrame(rows, schema=EVENT_COLUMNS) if rows else pl.DataFrame(schema=EVENT_COLUMNS)


# A JSON number spelled as a string: Perfetto's JSON importer takes `ts` and `dur` so (some tools
# write them as strings to keep every digit), and so does this reader.
_NUMBER_TEXT = re.compile(JSON_NUMBER)


def time_value(value: Any) -> float | None:
    """A `ts` or `dur` as a finite float: a number, or a number written as a string; else None."""
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value):
        return finite_float(float(value))
    return finite_float(value)


def _ident(value: Any) -> tuple[int | None, str | None, bool]:
    """(int id, text label, ok): Chrome traces allow string pids/tids, which keep a label."""
    if isinstance(value, bool):
        return None, None, False
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)  # an integer the decoder gave as a float (e.g. beyond 64 bits)
    if isinstance(value, int):
        return (value, None, True) if -(2**63) <= value < 2**63 else (None, str(value), True)
    if isinstance(value, str):
        return None, value, True
    return None, None, value is None


def validate_event(value: Any) -> tuple[dict[str, Any], str | None]:
    """One decoded event as an EVENT_COLUMNS row, or the reason it cannot be used."""
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {type(value).__name__}"
    ph = value.get("ph")
    if not isinstance(ph, str):
        return {}, "event without a string `ph` (phase)"
    pid, pid_label, pid_ok = _ident(value.get("pid"))
    tid, tid_label, tid_ok = _ident(value.get("tid"))
    if not (pid_ok and tid_ok):
        return {}, f"`pid`/`tid` of unexpected type ({shown(value.get('pid'), 20)!r}, {shown(value.get('tid'), 20)!r})"
    # The same words as drop_incomplete's for what the typed read lets through (a missing `ts`, a
    # negative or missing `dur`), so a line's warning does not depend on which reader took it.
    ts = time_value(value.get("ts"))
    if ph in SPAN_PHASES and ts is None:
        if value.get("ts") is None:
            return {}, "`ts` is missing"
        return {}, f"`ts` is not a finite number ({shown(value.get('ts'), 40)!r})"
    dur = time_value(value.get("dur"))
    if ph == "X" and (dur is None or dur < 0):
        shown_dur = dur if dur is not None or value.get("dur") is None else shown(value.get("dur"), 40)
        return {}, f"X event `dur` is not a non-negative number ({shown_dur!r})"
    name = value.get("name")
    args = value.get("args")
    cat = value.get("cat")
    return {
        "name": name if isinstance(name, str) or name is None else shown(name),
        "ph": ph,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "cat": cat if isinstance(cat, str) or cat is None else shown(cat),
        "args": None if args is None else json_text(args),
        "pid_label": pid_label,
        "tid_label": tid_label,
    }, None
