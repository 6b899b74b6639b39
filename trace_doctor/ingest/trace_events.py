"""Chrome-trace events (`trace_events.jsonl`, a converted `trace.json`, `{"traceEvents": ...}`) -> `spans`.

Reading. JSONL files take a typed fast path: the bytes are cut into ~8 MB chunks at line
boundaries, read on two threads and taken back in file order. In a chunk, lines in the cookbook
writer's exact byte layout are matched and typed without JSON decoding (trace_layout.py); the other
lines are read by polars `read_ndjson` with an explicit schema (never inference), bisected around
lines it refuses, and only those go through the robust per-line decoder (NaN literals, wrong types,
truncation), so one malformed line costs that line, never the fast path for the rest of the file.
Metadata (`M`) rows are set apart as each chunk is read: they only name tracks and mark resumed
processes, and keeping them out of the event table keeps them out of pairing's copies.
JSON documents (arrays, trace objects, `.gz`) are decoded whole and validated event by event.

Pairing. B/E events are paired per (segment, pid, tid, args.track) as a LIFO stack in file
(emission) order: the cookbook writer emits each task's B and E sequentially, while ts order is
unreliable (E events of SDK calls carry completion times, and a B and an E can share a ts).
The stack is vectorised: a running +1/-1 sum reflected at zero gives each event's depth, an E
arriving at depth zero is unmatched, and each B pairs with the next event at its (key, depth).
`X` events are closed spans by construction; their depth is computed the same way from virtual
begin/end points, independently of any B/E spans on the same track.

Steps. A span's `step` is the `step` attribute of its E event when present (`step_source` =
"args"); otherwise the step of the innermost enclosing stepped span on the same pid and segment
(`step_source` = "containment"; the stepped spans are the cookbook's train-step, submit/finish
batch and evaluator spans). Spans outside every stepped span keep a null step: the cookbook gives
no reliable way to attribute them (e.g. sync RL samples before its train step).

Segments. A resumed run appends a new process to the same file: fake pids restart at 0 and a new
`process_name` metadata event is written for a pid already named in the current segment. The new
segment starts at the event that triggered that metadata (the last non-M line before it).
"""

from __future__ import annotations

import gzip
import io
import math
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson
import polars as pl

from trace_doctor.ingest.deep_json import dumps_deep
from trace_doctor.ingest.jsonl import decode_json, decode_line, iter_line_chunks
from trace_doctor.ingest.trace_layout import LAYOUT_COLUMNS, read_layout
from trace_doctor.model import SPANS_SCHEMA, IngestWarning, InputFile

Progress = Callable[[str, int, int], None]

# Bytes per polars read: large enough that per-call overhead vanishes, small enough that a
# malformed line is isolated with a few cheap re-reads, and progress moves visibly.
CHUNK_BYTES = 8 * 1024 * 1024
# Chunks read at once, and chunks held (read or being read) at once: two threads keep both cores of
# a small CI machine busy; holding one more lets the next chunk's bytes be ready when a thread frees.
READ_WORKERS = 2
READ_AHEAD_CHUNKS = 3

SPAN_PHASES = ("B", "E", "X")
PHASE_NAMES = {
    "i": "instant",
    "I": "instant",
    "n": "async instant",
    "b": "async begin",
    "e": "async end",
    "C": "counter",
    "s": "flow start",
    "t": "flow step",
    "f": "flow end",
    "P": "sample",
    "O": "object snapshot",
    "N": "object created",
    "D": "object destroyed",
    "R": "mark",
    "c": "clock sync",
    "(": "context begin",
    ")": "context end",
}

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

# The args every cookbook B event carries and nothing else; matched rows need no JSON decoding.
PLAIN_ARGS = r'^\{"track": "([^"\\]*)", "thread": "([^"\\]*)"\}$'
TRACK_THREAD_PREFIX = r'^\{"track": "([^"\\]*)", "thread": "([^"\\]*)"'
# Below this many lines a refused piece is decoded line by line instead of bisected further.
MIN_BISECT_LINES = 64

SPAN_COLUMNS: dict[str, pl.DataType] = {
    **SPANS_SCHEMA,
    "cat": pl.String,
    "step_source": pl.String,
    "line_begin": pl.Int64,
    "line_end": pl.Int64,
    "source": pl.String,
}


def empty_spans() -> pl.DataFrame:
    """The spans table with no rows (every column present)."""
    return pl.DataFrame(schema=SPAN_COLUMNS)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def parse_trace_files(
    paths: list[Path],
    warnings: list[IngestWarning],
    progress: Progress | None = None,
    *,
    on_read: Callable[[], None] | None = None,
) -> tuple[pl.DataFrame, list[InputFile]]:
    """Parse every trace file into one `spans` table (segments numbered per file).

    `on_read` is called once the last file's bytes are read (before its spans are built, the
    part that uses less than the whole machine), and in any case before returning or raising.
    """
    frames: list[pl.DataFrame] = []
    inputs: list[InputFile] = []
    try:
        for index, path in enumerate(paths):
            last = on_read if index == len(paths) - 1 else None
            frame, info = parse_trace_file(path, warnings, progress, on_read=last)
            frames.append(frame)
            inputs.append(info)
    finally:
        if on_read is not None:
            on_read()
    frames = [f for f in frames if f.height]
    if not frames:
        return empty_spans(), inputs
    return pl.concat(frames, how="vertical"), inputs


def parse_trace_file(
    path: Path,
    warnings: list[IngestWarning],
    progress: Progress | None = None,
    *,
    on_read: Callable[[], None] | None = None,
) -> tuple[pl.DataFrame, InputFile]:
    """Parse one trace file, from the table cache when it is unchanged."""
    from trace_doctor.ingest import cache

    cached = cache.load(path, "spans")
    if cached is not None:
        frame, info, cached_warnings = cached
        warnings.extend(cached_warnings)
        return frame, info
    before = len(warnings)
    frame, info = _parse_trace_file(path, warnings, progress, on_read)
    cache.store(path, "spans", frame, info, warnings[before:])
    return frame, info


def _parse_trace_file(
    path: Path, warnings: list[IngestWarning], progress: Progress | None, on_read: Callable[[], None] | None = None
) -> tuple[pl.DataFrame, InputFile]:
    info = InputFile(kind="trace", path=str(path))
    source = str(path)
    bad: list[IngestWarning] = []
    try:
        with open(path, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            total = os.fstat(raw.fileno()).st_size
            stream: BinaryIO = gzip.GzipFile(fileobj=raw) if compressed else raw
            head = stream.read(65536)
            stream.seek(0)
            if _is_json_document(head):
                events, meta = split_metadata(read_document_events(stream.read(), source, bad, progress))
            else:
                events, meta = read_jsonl_events(stream, source, bad, progress, total_bytes=total, position=raw.tell)
    except (OSError, EOFError) as exc:
        # An unreadable or corrupt (e.g. truncated gzip) file: one warning for the whole file.
        warnings.append(IngestWarning(source, None, f"cannot read file: {getattr(exc, 'strerror', None) or exc}"))
        info.skipped = 1
        return empty_spans(), info
    if on_read is not None:
        on_read()
    warnings.extend(bad)
    info.records = events.height + meta.height
    info.skipped = sum(1 for w in bad if w.line is not None)
    holder = [events]
    del events  # the builder frees the full event table as soon as it is split
    spans = _build_spans_from(holder, meta, source, warnings)
    info.note = f"{spans.height} spans from {info.records} events"
    return spans, info


def _is_json_document(data: bytes) -> bool:
    """True for a JSON array or a `{"traceEvents": ...}` object rather than one event per line."""
    head = data[:65536].lstrip()
    if head.startswith(b"["):
        # A trace array opens with an event (or closes empty); a line-delimited file whose first
        # line merely starts with '[' (a log line, say) is read line by line, so it costs one line.
        return head[1:].lstrip()[:1] in (b"{", b"]", b"") or _decodes(head.split(b"\n", 1)[0])
    if not head.startswith(b"{"):
        return False
    first_line = head.split(b"\n", 1)[0]
    try:
        first = decode_json(first_line)
    except Exception:  # noqa: BLE001 - a pretty-printed object's first line is not JSON by itself
        return b'"traceEvents"' in head
    return isinstance(first, dict) and "ph" not in first and "traceEvents" in first


def _decodes(raw: bytes) -> bool:
    try:
        decode_json(raw)
    except Exception:  # noqa: BLE001 - any refusal means "not JSON by itself"
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Reading events
# ---------------------------------------------------------------------------------------------


def read_jsonl_events(
    stream: BinaryIO,
    source: str,
    bad: list[IngestWarning],
    progress: Progress | None = None,
    *,
    total_bytes: int = 0,
    position: Callable[[], int] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every readable event of a JSONL trace, typed, with its 1-based line number: (span events, metadata).

    The stream is read a chunk at a time, so the raw bytes are never all in memory at once.
    """
    frames: list[pl.DataFrame] = []
    metas: list[pl.DataFrame] = []
    # Chunks are read concurrently (polars releases the GIL while a chunk's query runs), at most
    # READ_AHEAD_CHUNKS in flight so the raw bytes held stay bounded; results, warnings included,
    # are taken back strictly in file order so the output never depends on thread timing. Each chunk
    # numbers its lines from 1 and its offset in the file is added as it is taken back, so nothing
    # has to count a chunk's lines before it can start.
    pending: deque[Future[ChunkRead]] = deque()
    line_offset = 0

    def take_oldest() -> None:
        nonlocal line_offset
        read = pending.popleft().result()
        shift = pl.col("line") + line_offset
        frames.extend(f.with_columns(shift) if line_offset else f for f in read.events)
        metas.extend(f.with_columns(shift) if line_offset else f for f in read.meta)
        bad.extend(w if w.line is None else IngestWarning(w.path, w.line + line_offset, w.problem) for w in read.bad)
        line_offset += read.lines
        if progress is not None and position is not None:
            progress(Path(source).name, position(), total_bytes)

    with ThreadPoolExecutor(max_workers=READ_WORKERS, thread_name_prefix="trace-chunk") as pool:
        for chunk, unterminated in iter_line_chunks(stream, CHUNK_BYTES):
            pending.append(pool.submit(_read_chunk, chunk, source, unterminated))
            if len(pending) >= READ_AHEAD_CHUNKS:
                take_oldest()
        while pending:
            take_oldest()
    frames = [f for f in frames if f.height]
    meta = pl.concat(metas, how="vertical", rechunk=True) if metas else pl.DataFrame(schema=META_COLUMNS)
    if not frames:
        return pl.DataFrame(schema=SPAN_EVENT_COLUMNS), meta
    # Chunks and bisected pieces come in file order: no sort. One contiguous table, copied once
    # here: filters and struct hashes on a table of many chunks would each copy their columns into
    # one chunk again (at 1M events that cost ~100 MB of peak memory).
    events = pl.concat(frames, how="vertical", rechunk=True)
    frames.clear()  # the chunks' copies go now, not when the function returns
    return _drop_incomplete(events, source, bad), meta


def _drop_incomplete(events: pl.DataFrame, source: str, bad: list[IngestWarning]) -> pl.DataFrame:
    """Rows polars typed but that cannot be used: no phase, or a span event without a timestamp."""
    incomplete = (
        pl.col("ph").is_null()
        | (pl.col("ph").is_in(SPAN_PHASES) & pl.col("ts").is_null())
        | ((pl.col("ph") == "X") & (pl.col("dur").is_null() | (pl.col("dur") < 0)))
    )
    dropped = events.filter(incomplete)
    for ph, line, dur in dropped.select("ph", "line", "dur").iter_rows():
        if ph is None:
            problem = "event without a string `ph` (phase)"
        elif ph == "X" and (dur is None or dur < 0):
            problem = f"X event `dur` is not a non-negative number ({dur!r})"
        else:
            problem = "`ts` is missing"
        bad.append(IngestWarning(source, line, problem))
    return events.filter(~incomplete) if dropped.height else events


class ChunkRead(NamedTuple):
    """One chunk's span events and metadata rows, its warnings, and its line count (lines numbered from 1)."""

    events: list[pl.DataFrame]
    meta: list[pl.DataFrame]
    bad: list[IngestWarning]
    lines: int


def _read_chunk(chunk: bytes, source: str, unterminated: bool) -> ChunkRead:
    """Read a chunk: lines in the cookbook's fixed layout are typed without JSON decoding, the rest
    are read generally; metadata rows are set apart here, on the reading threads."""
    bad: list[IngestWarning] = []
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
    lines: list[bytes], numbers: list[int], source: str, bad: list[IngestWarning], truncated_line: int | None
) -> list[pl.DataFrame]:
    """Read lines with polars' typed JSON reader; bisect around lines it refuses and decode those one by one."""
    if not lines:
        return []
    frame = _polars_read(b"\n".join(lines) + b"\n")
    if frame is not None and frame.height == len(lines):
        return [_with_lines(frame, numbers)]
    if len(lines) <= MIN_BISECT_LINES:
        rows = [
            _decode_line(raw, number, source, bad, truncated_line) for raw, number in zip(lines, numbers, strict=False)
        ]
        return [_rows_frame([r for r in rows if r is not None])]
    half = len(lines) // 2
    return _read_lines(lines[:half], numbers[:half], source, bad, truncated_line) + _read_lines(
        lines[half:], numbers[half:], source, bad, truncated_line
    )


def _polars_read(chunk: bytes) -> pl.DataFrame | None:
    try:
        return pl.read_ndjson(io.BytesIO(chunk), schema=EVENT_SCHEMA)
    except Exception:  # noqa: BLE001 - any refusal sends the lines to bisection, never a crash
        return None


def _with_lines(frame: pl.DataFrame, numbers: list[int]) -> pl.DataFrame:
    """Attach line numbers and the columns only the layout reader fills."""
    # Labels exist for string pids/tids (kineto's "Spans"), which the typed reader never holds.
    return frame.with_columns(
        pl.lit(None, pl.String).alias("pid_label"),
        pl.lit(None, pl.String).alias("tid_label"),
        pl.Series("line", numbers, dtype=pl.Int64),
        *(pl.lit(None, dtype).alias(name) for name, dtype in LAYOUT_COLUMNS.items()),
    )


def _decode_line(
    raw: bytes, line: int, source: str, bad: list[IngestWarning], truncated_line: int | None
) -> dict[str, Any] | None:
    parsed = decode_line(raw, line, source, bad, truncated=line == truncated_line, expect_object=False)
    if parsed is None:
        return None
    value = parsed.value
    row, problem = validate_event(value)
    if problem is not None:
        bad.append(IngestWarning(source, line, problem))
        return None
    row["line"] = line
    return row


def read_document_events(
    data: bytes, source: str, bad: list[IngestWarning], progress: Progress | None = None
) -> pl.DataFrame:
    """Events of a JSON array or trace object; `line` is the 1-based index of the event."""
    try:
        document = decode_json(data)
    except Exception as exc:  # noqa: BLE001 - the whole document is unreadable: one warning
        text = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        bad.append(IngestWarning(source, 1, f"not a valid JSON trace document: {text}"))
        return pl.DataFrame(schema=EVENT_COLUMNS)
    if progress is not None:
        progress(Path(source).name, len(data), len(data))
    if isinstance(document, dict):
        events = document.get("traceEvents")
        if not isinstance(events, list):
            bad.append(IngestWarning(source, 1, "JSON object without a `traceEvents` list"))
            return pl.DataFrame(schema=EVENT_COLUMNS)
    elif isinstance(document, list):
        events = document
    else:
        bad.append(IngestWarning(source, 1, f"expected a JSON array or object, got {type(document).__name__}"))
        return pl.DataFrame(schema=EVENT_COLUMNS)
    rows: list[dict[str, Any]] = []
    for index, value in enumerate(events, start=1):
        row, problem = validate_event(value)
        if problem is not None:
            bad.append(IngestWarning(source, index, f"event {index}: {problem}"))
            continue
        row["line"] = index
        rows.append(row)
    return _rows_frame(rows)


def _rows_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=EVENT_COLUMNS) if rows else pl.DataFrame(schema=EVENT_COLUMNS)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


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


def _json_text(value: Any) -> str:
    """Compact JSON text of decoded args, however deeply nested (orjson stops at depth 255)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):
        return dumps_deep(value)


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
        return {}, f"`pid`/`tid` of unexpected type ({str(value.get('pid'))[:20]!r}, {str(value.get('tid'))[:20]!r})"
    ts = _number(value.get("ts"))
    if ph in SPAN_PHASES and ts is None:
        return {}, f"`ts` is not a finite number ({str(value.get('ts'))[:40]!r})"
    dur = _number(value.get("dur"))
    if ph == "X" and (dur is None or dur < 0):
        return {}, f"X event `dur` is not a non-negative number ({str(value.get('dur'))[:40]!r})"
    name = value.get("name")
    args = value.get("args")
    cat = value.get("cat")
    return {
        "name": name if isinstance(name, str) or name is None else str(name),
        "ph": ph,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "cat": cat if isinstance(cat, str) or cat is None else str(cat),
        "args": None if args is None else _json_text(args),
        "pid_label": pid_label,
        "tid_label": tid_label,
    }, None


# ---------------------------------------------------------------------------------------------
# From events to spans
# ---------------------------------------------------------------------------------------------


def build_spans(events: pl.DataFrame, source: str, warnings: list[IngestWarning]) -> pl.DataFrame:
    """Pair, nest, segment and step-attribute the events of one file (EVENT_COLUMNS, metadata included)."""
    events, meta = split_metadata(events)
    return _build_spans_from([events], meta, source, warnings)


def _build_spans_from(
    holder: list[pl.DataFrame], meta: pl.DataFrame, source: str, warnings: list[IngestWarning]
) -> pl.DataFrame:
    """build_spans on the events taken out of `holder`, so the last reference can go early."""
    events = holder.pop()
    if events.height == 0:
        return empty_spans()
    events = _account_ignored_phases(events, source, warnings)
    segment = _segments(events.get_column("line"), meta)
    events = events.with_columns(segment.alias("segment"))
    meta = meta.with_columns(segment.alias("segment"))
    events = _with_track_thread(events)
    if bool((events.get_column("ph") == "X").any()):
        paired = _pair_begin_end(events.filter(pl.col("ph") != "X"), source, warnings)
        complete = _complete_spans(events.filter(pl.col("ph") == "X"))
    else:  # the cookbook writes no X events
        paired = _pair_begin_end(events, source, warnings)
        complete = _complete_spans(events.clear())
    del events  # ~100 MB at 1M events: not held past pairing
    spans = pl.concat([paired, complete], how="vertical")
    spans = _name_from_metadata(spans, meta)
    # Sorted before steps are attributed, whose lookup by start time then needs no sort of its own.
    # One sort key fewer when the file holds one process (the usual case): a third of the sort.
    keys = (
        ["start_us", "line_begin"] if _constant(spans.get_column("segment")) else ["segment", "start_us", "line_begin"]
    )
    spans = spans[spans.select(pl.arg_sort_by(keys)).to_series()]
    spans = _attribute_steps(spans)
    return spans.with_columns(pl.lit(source).alias("source")).select(list(SPAN_COLUMNS))


def _account_ignored_phases(events: pl.DataFrame, source: str, warnings: list[IngestWarning]) -> pl.DataFrame:
    """Events that are neither spans nor metadata are dropped, with one warning per phase."""
    known = events.get_column("ph").is_in([*SPAN_PHASES, "M"])
    if bool(known.all()):
        return events
    ignored = (
        events.filter(~known).group_by("ph").agg(pl.len().alias("n"), pl.col("line").min().alias("first")).sort("ph")
    )
    for ph, n, first in ignored.iter_rows():
        kind = PHASE_NAMES.get(ph, "unknown phase")
        warnings.append(
            IngestWarning(
                source,
                None,
                f"{n} event(s) of phase {ph!r} ({kind}) ignored, first at line/event {first}: only B/E/X spans and M metadata are read",
            )
        )
    return events.filter(known)


def _segments(event_lines: pl.Series, meta: pl.DataFrame) -> pl.Expr:
    """Segment number per row (an expression on `line`): a repeated `process_name` for a pid marks a resumed process."""
    names = meta.filter(pl.col("name") == "process_name").select("line", "pid", "pid_label")
    if names.height <= 1:
        return pl.lit(0, pl.Int32)
    boundaries: list[int] = []
    named: set[tuple[Any, Any]] = set()
    for line, pid, label in names.iter_rows():
        if (pid, label) in named:
            # The new process's first event precedes its metadata lines.
            index = int(event_lines.search_sorted(line, side="left")) - 1
            boundary = (
                int(event_lines[index])
                if index >= 0 and (not boundaries or event_lines[index] > boundaries[-1])
                else line
            )
            boundaries.append(boundary)
            named = set()
        named.add((pid, label))
    if not boundaries:
        return pl.lit(0, pl.Int32)
    return pl.lit(pl.Series(boundaries, dtype=pl.Int64)).search_sorted(pl.col("line"), side="right").cast(pl.Int32)


def _with_track_thread(events: pl.DataFrame) -> pl.DataFrame:
    """Extract args.track / args.thread from JSON args text (the layout reader already filled them)."""
    if events.get_column("args").null_count() == events.height:
        # Every event came through the layout reader: nothing to extract, no column to copy.
        return events.with_columns(pl.lit(True).alias("_plain"))
    prefix = pl.col("args").str.extract_groups(TRACK_THREAD_PREFIX)
    events = events.with_columns(
        pl.coalesce("track", prefix.struct.field("1")).alias("track"),
        pl.coalesce("thread", prefix.struct.field("2")).alias("thread"),
        # No args text: a layout-read row, whose only extra attribute can be the E event's step.
        pl.col("args").str.contains(PLAIN_ARGS).fill_null(True).alias("_plain"),
    )
    unusual = pl.col("track").is_null() & pl.col("args").is_not_null()
    return events.with_columns(
        pl.when(unusual).then(pl.col("args").str.json_path_match("$.track")).otherwise(pl.col("track")).alias("track"),
        pl.when(unusual)
        .then(pl.col("args").str.json_path_match("$.thread"))
        .otherwise(pl.col("thread"))
        .alias("thread"),
    )


KEY = ["segment", "pid", "pid_label", "tid", "tid_label", "track"]


def _group_starts(columns: list[str]) -> pl.Expr:
    """True on the first row of each run of equal `columns` values (the frame is sorted by them)."""
    changed = [pl.col(c).ne_missing(pl.col(c).shift(1)) for c in columns]
    return pl.any_horizontal(changed).fill_null(True)


def _constant(column: pl.Series) -> bool:
    """One value (or null) in every row; for strings only all-null is checked (min/max would cost a pass)."""
    if column.null_count() == column.len():
        return True
    if column.dtype == pl.String or column.null_count():
        return False
    return column.min() == column.max()


def _key_hash(key: list[str], seed: int) -> pl.Expr:
    """A 64-bit hash of the `key` columns together: each column hashed with its own seed, XOR-ed
    (a quarter of the time of hashing them as one struct)."""
    combined = pl.col(key[0]).hash(seed=seed)
    for offset, column in enumerate(key[1:], start=1):
        combined = combined ^ pl.col(column).hash(seed=seed + offset)
    return combined


def _track_ids(events: pl.DataFrame) -> pl.Series:
    """An integer per distinct pairing key (segment, pid, tid, track)."""
    # Columns with one value everywhere (labels are null unless pids are strings; one segment
    # unless resumed; one pid in most runs) cannot tell tracks apart; leaving them out halves the
    # hashing's memory and time.
    key = [c for c in KEY if not _constant(events.get_column(c))]
    if not key:
        return pl.repeat(0, events.height, dtype=pl.UInt64, eager=True).alias("_id")
    hashes = events.select(_key_hash(key, seed=0).alias("_id"), _key_hash(key, seed=len(key)).alias("_check"))
    # Two keys sharing the 64-bit id would make it count fewer distinct values than a second,
    # independently seeded hash (unless that one collided just as often, a ~1e-17 coincidence at a
    # million tracks): then fall back to exact dense ranks. Counting distinct integers is far
    # cheaper than counting distinct keys (hundreds of thousands of tracks in a long RL run).
    counts = hashes.select(pl.all().n_unique())
    if counts.item(0, "_id") == counts.item(0, "_check"):
        return hashes.get_column("_id")
    return events.select(pl.struct(key).rank("dense").alias("_id")).get_column("_id").cast(pl.UInt64)


def _pair_begin_end(events: pl.DataFrame, source: str, warnings: list[IngestWarning]) -> pl.DataFrame:
    """Match the B/E events among `events` as a per-track stack, vectorised with whole-column (not per-group) scans."""
    phase = events.get_column("ph")
    narrow = pl.DataFrame(
        {
            "_row": pl.int_range(0, events.height, eager=True, dtype=pl.UInt32),
            "_track": _track_ids(events),
            "line": events.get_column("line"),
            "_delta": (phase == "B").cast(pl.Int64) * 2 - 1,
        }
    )
    paired_phase = phase.is_in(["B", "E"])
    if not bool(paired_phase.all()):  # the span builder passes only B/E rows: no copy then
        narrow = narrow.filter(paired_phase)
    n = narrow.height
    if n == 0:
        return pl.DataFrame(schema=_PAIRED_SCHEMA)
    # Events arrive in line order: a stable one-key sort then equals the (track, line) sort, cheaper.
    if narrow.get_column("line").is_sorted():
        narrow = narrow.sort("_track", maintain_order=True)
    else:
        narrow = narrow.sort(["_track", "line"])
    new_track = _group_starts(["_track"])
    # Per-track running sum from one global cumsum minus the sum before the track began.
    offset = 2 * n + 2
    # One lazy query, so the running sums and minima are dropped as soon as they are used.
    narrow = (
        narrow.lazy()
        .with_columns(new_track.alias("_new"), pl.col("_delta").cum_sum().alias("_global"))
        .with_columns(
            pl.col("_new").cum_sum().cast(pl.Int64).alias("_gid"),
            (
                pl.col("_global") - pl.when(pl.col("_new")).then(pl.col("_global") - pl.col("_delta")).forward_fill()
            ).alias("_sum"),
        )
        # Per-track running minimum from one global cum_min: shifting each track down by more than
        # twice any sum keeps earlier tracks from ever being the minimum.
        .with_columns(((pl.col("_sum") - pl.col("_gid") * offset).cum_min() + pl.col("_gid") * offset).alias("_min"))
        # Level reflected at zero: an E on an empty stack is dropped rather than popping below zero.
        .with_columns((pl.col("_sum") - pl.min_horizontal("_min", pl.lit(0))).alias("_level"))
        .select(
            "_row",
            "_gid",
            "line",
            "_delta",
            pl.when(pl.col("_new")).then(0).otherwise(pl.col("_level").shift(1)).alias("_before"),
        )
        .collect()
    )
    is_end = pl.col("_delta") == -1
    unmatched = narrow.filter(is_end & (pl.col("_before") == 0))
    if unmatched.height:
        rows = events[unmatched.get_column("_row").sort()].select("name", "line", "track")  # in file order
        for name, line, track in rows.iter_rows():
            warnings.append(
                IngestWarning(source, line, f"unmatched E event {name!r} on track {track!r}: no open B; not a span")
            )
    stacked = (
        narrow.filter(~(is_end & (pl.col("_before") == 0)))
        .with_columns(
            pl.when(is_end).then(pl.col("_before") - 1).otherwise(pl.col("_before")).cast(pl.Int32).alias("depth")
        )
        .select("_row", "_gid", "depth", "line", "_delta")
    )
    # At one (track, depth) pushes and pops alternate, so each B pairs with the next row if it is an E.
    # Rows are in (track, line) order, so a stable sort on one (track, depth) key yields (track, depth, line).
    levels = int(stacked.get_column("depth").max() or 0) + 1
    stacked = stacked.sort(pl.col("_gid") * levels + pl.col("depth"), maintain_order=True).with_columns(
        _group_starts(["_gid", "depth"]).shift(-1).fill_null(True).alias("_last")
    )
    pairs = stacked.with_columns(
        (~pl.col("_last") & (pl.col("_delta").shift(-1) == -1)).alias("closed"),
        pl.col("_row").shift(-1).alias("_end_row"),
    ).filter(pl.col("_delta") == 1)
    closed = pairs.get_column("closed")
    # Gather only the columns each side contributes: these are copies of ~half the events.
    begin = events.select(
        "name",
        "pid",
        "pid_label",
        "tid",
        "tid_label",
        "track",
        "thread",
        "segment",
        "cat",
        "ts",
        "line",
        "args",
        "_plain",
        "_step",
    )[pairs.get_column("_row")]
    end = events.select("ts", "line", "args", "_plain", "_step")[pairs.get_column("_end_row").fill_null(0)]
    result = begin.select(
        "name",
        "pid",
        "pid_label",
        "tid",
        "tid_label",
        "track",
        "thread",
        "segment",
        "cat",
        pl.col("ts").alias("start_us"),
    ).with_columns(
        pl.when(closed).then(end.get_column("ts")).alias("end_us"),
        pairs.get_column("depth"),
        closed,
        begin.get_column("line").alias("line_begin"),
        pl.when(closed).then(end.get_column("line")).alias("line_end"),
        begin.get_column("args").alias("_begin_args"),
        begin.get_column("_plain"),
        begin.get_column("_step").alias("_begin_step"),
        pl.when(closed).then(end.get_column("args")).alias("_end_args"),
        pl.when(closed).then(end.get_column("_plain")).otherwise(True).alias("_end_plain"),
        pl.when(closed).then(end.get_column("_step")).alias("_end_step"),
    )
    return result.pipe(_merge_args)


_PAIRED_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String,
    "pid": pl.Int64,
    "pid_label": pl.String,
    "tid": pl.Int64,
    "tid_label": pl.String,
    "track": pl.String,
    "thread": pl.String,
    "segment": pl.Int32,
    "cat": pl.String,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "depth": pl.Int32,
    "closed": pl.Boolean,
    "line_begin": pl.Int64,
    "line_end": pl.Int64,
    "args": pl.String,
    "step": pl.Int64,
}


def _remaining_args(texts: list[str | None]) -> dict[str, Any]:
    """JSON text of the merged attributes minus track/thread, for the few non-plain rows."""
    merged: dict[str, Any] = {}
    for text in texts:
        if text is None:
            continue
        try:
            value = decode_json(text.encode())
        except Exception:  # noqa: BLE001 - args text came from a decoded event; keep it verbatim
            merged.setdefault("args", text)
            continue
        if isinstance(value, dict):
            merged.update((k, v) for k, v in value.items() if k not in ("track", "thread"))
        else:
            merged["args"] = value
    return merged


def _step_of(attrs: dict[str, Any]) -> int | None:
    step = attrs.get("step")
    if isinstance(step, bool):
        return None
    if isinstance(step, int):
        return step
    if isinstance(step, float) and math.isfinite(step) and step.is_integer():
        return int(step)
    return None


def _step_args(step: pl.Expr) -> pl.Expr:
    """The args text a layout-read E event's lone `step` attribute stands for (orjson's compact form)."""
    return pl.concat_str([pl.lit('{"step":'), step.cast(pl.String), pl.lit("}")])


def _merge_args(pairs: pl.DataFrame) -> pl.DataFrame:
    """`args` = merged B+E attributes minus track/thread; `step` = the E event's `step`."""
    plain = pl.col("_plain").fill_null(True) & pl.col("_end_plain").fill_null(True) & pl.col("_begin_step").is_null()
    # Layout-read rows carry no args text; their step (if any) is all there is besides track/thread.
    pairs = pairs.with_columns(
        pl.coalesce("_begin_args", _step_args(pl.col("_begin_step"))).alias("_begin_args"),
        pl.coalesce("_end_args", _step_args(pl.col("_end_step"))).alias("_end_args"),
    )
    rich = pairs.with_row_index("_row").filter(~plain)
    args = pairs.select(
        pl.when(pl.col("_end_step").is_not_null())
        .then(_step_args(pl.col("_end_step")))
        .otherwise(pl.lit("{}"))
        .alias("args")
    ).get_column("args")
    steps = pairs.get_column("_end_step").alias("step")
    if rich.height:
        rows, texts, values = [], [], []
        for row, begin, end in rich.select("_row", "_begin_args", "_end_args").iter_rows():
            attrs = _remaining_args([begin, end])
            rows.append(row)
            texts.append(_json_text(attrs))
            end_attrs = _remaining_args([end]) if end is not None else {}
            values.append(_step_of(end_attrs))
        index = pl.Series(rows, dtype=pl.UInt32)
        args = args.scatter(index, texts)
        steps = steps.scatter(index, pl.Series(values, dtype=pl.Int64))
    return pairs.with_columns(args, steps).drop(
        "_begin_args", "_plain", "_end_args", "_end_plain", "_begin_step", "_end_step"
    )


def _complete_spans(events: pl.DataFrame) -> pl.DataFrame:
    """X events as closed spans, with nesting depth from virtual begin/end points per track."""
    if events.height == 0:
        return pl.DataFrame(schema=_PAIRED_SCHEMA)
    spans = events.with_columns(
        pl.col("ts").alias("start_us"),
        (pl.col("ts") + pl.col("dur")).alias("end_us"),
        pl.lit(True).alias("closed"),
        pl.col("line").alias("line_begin"),
        pl.col("line").alias("line_end"),
    ).with_row_index("_span")
    # Order at one instant: ends before begins (siblings touch), longer begins first (parents
    # enclose children), and a zero-length span's end after its own begin.
    begins = spans.select(
        "_span",
        *KEY,
        pl.col("start_us").alias("_t"),
        pl.lit(1).alias("_order"),
        (-pl.col("dur")).alias("_tie"),
        pl.lit(1).alias("_delta"),
    )
    ends = spans.select(
        "_span",
        *KEY,
        pl.col("end_us").alias("_t"),
        pl.when(pl.col("dur") > 0).then(0).otherwise(2).alias("_order"),
        pl.lit(0.0).alias("_tie"),
        pl.lit(-1).alias("_delta"),
    )
    points = pl.concat([begins, ends]).sort([*KEY, "_t", "_order", "_tie", "_span"], nulls_last=False)
    points = points.with_columns(_group_starts(KEY).cum_sum().alias("_track_id"))
    depths = (
        points.with_columns(pl.col("_delta").cum_sum().over("_track_id").alias("_level"))
        .filter(pl.col("_delta") == 1)
        .select("_span", (pl.col("_level") - 1).clip(lower_bound=0).cast(pl.Int32).alias("depth"))
    )
    spans = spans.join(depths, on="_span", how="left")
    args = [_json_text(_remaining_args([text])) for text in spans.get_column("args").to_list()]
    return spans.with_columns(
        pl.Series("args", args, dtype=pl.String),
        pl.lit(None, pl.Int64).alias("step"),
    ).select(list(_PAIRED_SCHEMA))


def _name_from_metadata(spans: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    """Fill track/thread from M events: thread_name per (pid, tid), process_name per pid."""
    if spans.get_column("track").null_count() == 0 and spans.get_column("thread").null_count() == 0:
        # Every span names its track and thread (the cookbook's args): nothing to look up.
        return spans.with_columns(
            (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
            pl.when(pl.col("step").is_not_null()).then(pl.lit("args")).otherwise(None).alias("step_source"),
        ).drop("pid_label", "tid_label")
    meta = meta.with_columns(pl.coalesce("_label", pl.col("args").str.json_path_match("$.name")).alias("_label"))
    thread_names = (
        meta.filter(pl.col("name") == "thread_name")
        .unique(["segment", "pid", "pid_label", "tid", "tid_label"], keep="first", maintain_order=True)
        .select("segment", "pid", "pid_label", "tid", "tid_label", pl.col("_label").alias("_thread_name"))
    )
    process_names = (
        meta.filter(pl.col("name") == "process_name")
        .unique(["segment", "pid", "pid_label"], keep="first", maintain_order=True)
        .select("segment", "pid", "pid_label", pl.col("_label").str.strip_suffix(" Thread").alias("_process_name"))
    )
    spans = spans.join(
        thread_names, on=["segment", "pid", "pid_label", "tid", "tid_label"], how="left", nulls_equal=True
    )
    spans = spans.join(process_names, on=["segment", "pid", "pid_label"], how="left", nulls_equal=True)
    return spans.with_columns(
        pl.coalesce("track", "_thread_name", "tid_label", pl.col("tid").cast(pl.String)).alias("track"),
        pl.coalesce("thread", "_process_name", "pid_label").alias("thread"),
        (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
        pl.when(pl.col("step").is_not_null()).then(pl.lit("args")).otherwise(None).alias("step_source"),
    ).drop("_thread_name", "_process_name", "pid_label", "tid_label")


# ---------------------------------------------------------------------------------------------
# Step attribution by containment
# ---------------------------------------------------------------------------------------------


def _attribute_steps(spans: pl.DataFrame) -> pl.DataFrame:
    """Give step-less spans the step of the innermost enclosing stepped span on their pid."""
    stepped = spans.filter(pl.col("step").is_not_null() & pl.col("closed")).with_row_index("_container")
    if stepped.height == 0 or stepped.height == spans.height:
        return spans
    cover, parent = _innermost_cover(stepped)
    containers = stepped.select(
        "_container",
        pl.col("start_us").alias("_c_start"),
        pl.col("end_us").alias("_c_end"),
        pl.col("step").alias("_c_step"),
    ).join(parent, on="_container", how="left")
    # Grouping by a column with one value (one process, one pid: the usual case) only costs time.
    by = [c for c in ("segment", "pid") if not _constant(spans.get_column(c))]
    lookup = (
        spans.with_row_index("_span")
        .filter(pl.col("step").is_null())
        .select("_span", *by, "start_us", pl.coalesce("end_us", "start_us").alias("_end"))
    )
    if not lookup.get_column("start_us").is_sorted():  # spans come sorted unless a run was resumed
        lookup = lookup.sort("start_us")
    found = lookup.join_asof(
        cover, left_on="start_us", right_on="_t", by=by or None, strategy="backward", check_sortedness=False
    )
    found = found.select("_span", "start_us", "_end", "_container")
    resolved: list[pl.DataFrame] = []
    # Climb from the innermost cover at the span's start to the first container that also covers
    # its end; stepped spans nest only a few levels deep.
    for _ in range(16):
        found = found.join(containers, on="_container", how="left")
        ok = found.filter(pl.col("_container").is_null() | (pl.col("_c_end") >= pl.col("_end")))
        resolved.append(ok.select("_span", "_c_step"))
        found = found.filter(pl.col("_container").is_not_null() & (pl.col("_c_end") < pl.col("_end"))).select(
            "_span", "start_us", "_end", pl.col("_parent").alias("_container")
        )
        if found.height == 0:
            break
    steps = pl.concat(resolved).filter(pl.col("_c_step").is_not_null())
    # Scattered into place rather than joined: a join would gather every (wide) span column again.
    found_step = (
        pl.Series("_c_step", [None], dtype=pl.Int64)
        .extend_constant(None, spans.height - 1)
        .scatter(steps.get_column("_span"), steps.get_column("_c_step"))
    )
    return (
        spans.with_columns(found_step)
        .with_columns(
            pl.coalesce("step", "_c_step").alias("step"),
            pl.when(pl.col("step").is_null() & pl.col("_c_step").is_not_null())
            .then(pl.lit("containment"))
            .otherwise(pl.col("step_source"))
            .alias("step_source"),
        )
        .drop("_c_step")
    )


def _innermost_cover(stepped: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Sweep the (few) stepped spans: which one is innermost from each boundary on, and each one's parent."""
    cover_rows: list[tuple[int, int, float, int | None]] = []
    parents: list[tuple[int, int | None]] = []
    for (segment, pid), group in stepped.group_by(["segment", "pid"], maintain_order=True):
        spans = sorted(group.select("_container", "start_us", "end_us").iter_rows(), key=lambda r: (r[1], -r[2], r[0]))
        points = sorted({t for _, s, e in spans for t in (s, e)})
        active: list[tuple[int, float, float]] = []
        pending = 0
        for t in points:
            active = [a for a in active if a[2] > t]
            while pending < len(spans) and spans[pending][1] <= t:
                container, start, end = spans[pending]
                enclosing = [a for a in active if a[2] >= end]
                parents.append((container, max(enclosing, key=lambda a: (a[1], -a[2]))[0] if enclosing else None))
                active.append((container, start, end))
                pending += 1
            inner = max(active, key=lambda a: (a[1], -a[2]))[0] if active else None
            cover_rows.append((segment, pid, t, inner))
    cover = pl.DataFrame(
        cover_rows,
        schema={"segment": pl.Int32, "pid": pl.Int64, "_t": pl.Float64, "_container": pl.UInt32},
        orient="row",
    ).sort("_t")
    parent = pl.DataFrame(parents, schema={"_container": pl.UInt32, "_parent": pl.UInt32}, orient="row")
    return cover, parent
