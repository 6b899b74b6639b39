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
from typing import Any, NamedTuple

import polars as pl

from trace_doctor.ingest.bisected_read import Refused, read_bisected
from trace_doctor.ingest.file_warnings import FileWarnings
from trace_doctor.ingest.jsonl import certainly_not_an_object, decode_line, finite_float, json_text, shown
from trace_doctor.ingest.trace_layout import LAYOUT_COLUMNS, read_layout

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
    lines = chunk.split(b"\n")
    if not unterminated:
        lines.pop()  # the empty piece after the final newline
    if layout is not None:
        picked = [(lines[i], 1 + i) for i in layout.others.to_list()]
    else:
        picked = [(raw, i) for i, raw in enumerate(lines, start=1)]
    # Blank lines are no events and no problems.
    picked = [(raw, number) for raw, number in picked if raw.strip()]
    truncated_line = len(lines) if unterminated else None
    general = _read_lines([raw for raw, _ in picked], [n for _, n in picked], source, bad, truncated_line)
    if layout is not None:
        # Back into file order: later stages (segments) rely on it.
        general = [pl.concat([layout.rows, *general], how="vertical").sort("line")]
    return ChunkRead(*_split_lists(general), bad, len(lines))


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
    lines: list[bytes], numbers: list[int], source: str, bad: FileWarnings, truncated_line: int | None
) -> list[pl.DataFrame]:
    """Read lines with polars' typed JSON reader; the lines it refuses are decoded one by one, in place.

    Lines that cannot be events (they do not start with `{`: garbage, a log line) never go to polars:
    each would refuse the whole read around it and cost a bisection. They, and runs of real lines
    too short to be worth a read of their own, go straight to the per-line decoder.
    """
    frames = []
    for run_lines, run_numbers, candidates in _runs(lines, numbers):
        pieces = (
            read_bisected(run_lines, run_numbers, _typed_rows, min_lines=MIN_BISECT_LINES)
            if candidates
            else [Refused(run_lines, run_numbers)]
        )
        for piece in pieces:
            if isinstance(piece, Refused):
                rows = [
                    _decode_line(raw, number, source, bad, truncated_line)
                    for raw, number in zip(piece.lines, piece.numbers, strict=True)
                ]
                frames.append(rows_frame([r for r in rows if r is not None]))
            else:
                frames.append(piece)
    return [f for f in frames if f.height] or frames[:1]


def _runs(lines: list[bytes], numbers: list[int]) -> list[tuple[list[bytes], list[int], bool]]:
    """The lines in order as runs: (lines, numbers, whether polars should try them).

    A run polars tries holds at least MIN_BISECT_LINES lines that may be events; everything else is
    one run for the per-line decoder.
    """
    maybe = [not certainly_not_an_object(raw) for raw in lines]
    if all(maybe):
        return [(lines, numbers, True)]
    runs: list[tuple[list[bytes], list[int], bool]] = []
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and maybe[end] == maybe[start]:
            end += 1
        candidates = maybe[start] and end - start >= MIN_BISECT_LINES
        if runs and not candidates and not runs[-1][2]:
            runs[-1][0].extend(lines[start:end])
            runs[-1][1].extend(numbers[start:end])
        else:
            runs.append((lines[start:end], numbers[start:end], candidates))
        start = end
    return runs


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


def drop_incomplete(events: pl.DataFrame, source: str, bad: FileWarnings, *, prefix: str = "") -> pl.DataFrame:
    """`events` without the rows polars typed but that cannot be used (no phase, a span event without
    a timestamp, an X event without a duration), each reported in `bad` (`prefix`: see read_line_chunks)."""
    incomplete = (
        pl.col("ph").is_null()
        | (pl.col("ph").is_in(SPAN_PHASES) & pl.col("ts").is_null())
        | ((pl.col("ph") == "X") & (pl.col("dur").is_null() | (pl.col("dur") < 0)))
    )
    dropped = events.filter(incomplete)
    # Only the warnings that will be listed are written; the rest are counted.
    listed = min(bad.room, dropped.height)
    for ph, line, dur in dropped.head(listed).select("ph", "line", "dur").iter_rows():
        if ph is None:
            problem = "event without a string `ph` (phase)"
        elif ph == "X" and (dur is None or dur < 0):
            problem = f"X event `dur` is not a non-negative number ({dur!r})"
        else:
            problem = "`ts` is missing"
        bad.add(line, f"{prefix}{line}: {problem}" if prefix else problem)
    if dropped.height > listed:
        bad.count_unlisted(dropped.height - listed, dropped.get_column("line")[listed])
    return events.filter(~incomplete) if dropped.height else events


def rows_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Validated rows (see validate_event) as an EVENT_COLUMNS table."""
    return pl.DataFrame(rows, schema=EVENT_COLUMNS) if rows else pl.DataFrame(schema=EVENT_COLUMNS)


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
    ts = finite_float(value.get("ts"))
    if ph in SPAN_PHASES and ts is None:
        return {}, f"`ts` is not a finite number ({shown(value.get('ts'), 40)!r})"
    dur = finite_float(value.get("dur"))
    if ph == "X" and (dur is None or dur < 0):
        return {}, f"X event `dur` is not a non-negative number ({shown(value.get('dur'), 40)!r})"
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
