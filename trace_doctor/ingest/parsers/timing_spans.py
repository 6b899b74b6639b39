"""`timing_spans.jsonl` -> the `step_spans` table: one row per span of each logged step.

A line is `{"step": N, "spans": [{"name", "duration", "wall_start", "wall_end"}, ...]}`; wall times
are relative to the step's earliest span, so they compare only within a line. The file is appended
on resume, so a step can appear again: each repeat of an already-seen step starts a new `segment`.

Reading: ~8 MB of lines at a time through polars with an explicit schema; a chunk polars refuses is
read by layout group and halved down to the lines it refuses (bisected_read.py, shared with the
trace reader), and only those are decoded one by one.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl
import xxhash

from trace_doctor.ingest.parsers import timing_spans_resume
from trace_doctor.ingest.reading.bisected_read import Refused, read_bisected
from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.ingest.reading.jsonl import (
    CHUNK_BYTES,
    JSON_INT,
    JSON_NUMBER,
    MAX_LINE_BYTES,
    LineChunk,
    as_int64,
    certainly_not_an_object,
    decode_line,
    finite_float,
    iter_line_chunks,
    oversized_problem,
)
from trace_doctor.ingest.storage.stored_table import DeferredPart, PartWriter, StoredTable, scratch_folder
from trace_doctor.ingest.trace.trace_layout import text_lines
from trace_doctor.model import STEP_SPANS_SCHEMA, IngestWarning, InputFile

SCHEMA: dict[str, pl.DataType] = {**STEP_SPANS_SCHEMA, "index": pl.Int32, "segment": pl.Int32, "source": pl.String}


def parse_timing_spans_files(paths: list[Path], warnings: list[IngestWarning]) -> tuple[StoredTable, list[InputFile]]:
    """Parse every timing_spans file into one stored `step_spans` table (on disk, read lazily)."""
    tables: list[StoredTable] = []
    inputs: list[InputFile] = []
    for path in paths:
        table, info = parse_timing_spans_file(path, warnings)
        tables.append(table)
        inputs.append(info)
    tables = [t for t in tables if t.height]
    if not tables:
        return StoredTable([], 0, SCHEMA), inputs
    return StoredTable.of(tables), inputs


LINE_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64,
    "spans": pl.List(
        pl.Struct({"name": pl.String, "duration": pl.Float64, "wall_start": pl.Float64, "wall_end": pl.Float64})
    ),
}
# The cookbook writes each line with `json.dumps` defaults, so its bytes follow one layout:
#   {"step": N, "spans": [{"name": S, "duration": D, "wall_start": W, "wall_end": W}, ...]}
# spelled here in JSON's own string and number grammar.
_TEXT = r'[^"\\\x00-\x1f]*'
# The same grammar bounded so that every value fits its column: a step within 64 bits (18 digits),
# a number at most ~1e299 (200 digits, a two-digit exponent), which no float overflows to infinity.
_SMALL_INT = r"-?(?:0|[1-9][0-9]{0,17})"
_FINITE_NUMBER = r"-?(?:0|[1-9][0-9]{0,199})(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,2})?"


def _line_layout(step: str, number: str) -> str:
    span = (
        r'\{"name": "'
        + _TEXT
        + r'", "duration": '
        + number
        + r', "wall_start": '
        + number
        + r', "wall_end": '
        + number
        + r"\}"
    )
    return r'^\{"step": ' + step + r', "spans": \[(?:' + span + r"(?:, " + span + r")*)?\]\}$"


# Used to sort lines when a file needs care: lines in this layout are read together, others one
# piece at a time.
LINE_LAYOUT = _line_layout(JSON_INT, JSON_NUMBER)
# A line the reader keeps whole, every span of it, with nothing to report: what the check before
# the read looks for (see parse_timing_spans_file).
CLEAN_LINE = _line_layout(_SMALL_INT, _FINITE_NUMBER)
# Each span of a line in the layout holds this text once, and no name can (names hold no quote).
SPAN_MARK = '"wall_end": '
# The step_spans columns read from the file (the rest are added per file).
SPAN_COLUMNS = ("step", "name", "duration_s", "wall_start_s", "wall_end_s", "line", "index")


class Typed(NamedTuple):
    """Lines polars read: their steps (`line`, `step`) and their spans, one row each."""

    steps: pl.DataFrame
    spans: pl.DataFrame


# Below this many lines a piece polars refuses is decoded line by line instead of halved again
# (RL lines are tens of kB to MBs, so a few lines already make a meaningful read).
MIN_BISECT_LINES = 8


class Segments:
    """Segment per line, line by line in file order: a step already logged in the current segment
    starts a new one (a resumed process re-logs steps from its checkpoint)."""

    def __init__(self) -> None:
        self.segment = 0
        self._seen: set[int] = set()

    def of(self, steps: list[int]) -> list[int]:
        segments = []
        for step in steps:
            if step in self._seen:
                self.segment += 1
                self._seen = set()
            self._seen.add(step)
            segments.append(self.segment)
        return segments


def _read_typed(data: bytes, numbers: pl.Series) -> Typed | None:
    """The lines of `data` (file line `numbers`) through polars with an explicit schema, or None if any needs care."""
    try:
        lines = pl.read_ndjson(io.BytesIO(data), schema=LINE_SCHEMA)
    except Exception:  # noqa: BLE001 - any refusal means a closer look at these lines
        return None
    if lines.height != numbers.len() or lines.get_column("step").null_count() or lines.get_column("spans").null_count():
        return None  # blank lines, or lines that are not {"step", "spans"}: number and report them one by one
    lines = lines.with_columns(numbers.alias("line"))
    # One row per span, exploded once: checked here and kept as the result.
    spans = (
        lines.with_columns(pl.int_ranges(0, pl.col("spans").list.len(), dtype=pl.Int32).alias("index"))
        .explode(["spans", "index"])
        .filter(pl.col("index").is_not_null())  # an empty span list explodes to one null row
        .unnest("spans")
    )
    # Every span must be what the per-line decoder would keep as is: a name and a finite duration,
    # wall times finite or absent.
    wall_ok = [pl.col(c).is_null() | pl.col(c).is_finite() for c in ("wall_start", "wall_end")]
    fits = spans.select(
        pl.all_horizontal(pl.col("name").is_not_null(), pl.col("duration").is_finite(), *wall_ok).fill_null(False).all()
    )
    if not fits.item():
        return None
    return Typed(
        lines.select("line", "step"),
        spans.select(
            "step",
            "name",
            pl.col("duration").alias("duration_s"),
            pl.col("wall_start").alias("wall_start_s"),
            pl.col("wall_end").alias("wall_end_s"),
            "line",
            "index",
        ),
    )


def _texts(lines: list[bytes]) -> pl.Series:
    """Each line as text; null where it is not UTF-8 or too long (the per-line decoder reports those)."""
    texts: list[str | None] = []
    for raw in lines:
        try:
            texts.append(raw.decode("utf-8") if len(raw) <= MAX_LINE_BYTES else None)
        except UnicodeDecodeError:
            texts.append(None)
    return pl.Series("text", texts, dtype=pl.String)


def _read_numbered(data: bytes, numbers: list[int]) -> Typed | None:
    """_read_typed for the bisected reader, which numbers lines with a list."""
    return _read_typed(data, pl.Series(numbers, dtype=pl.Int64))


def _read_lines(lines: list[bytes], first: int) -> tuple[list[Typed], list[int]]:
    """(typed pieces, numbers of the lines the per-line decoder must read); `lines[0]` is line `first`."""
    typed: list[Typed] = []
    others: list[int] = []
    # Something needs care. Lines in the writer's exact byte layout are read together; the rest are
    # halved down to the lines polars refuses, so a bad line costs about one more read of its chunk.
    # A line that is no object at all (garbage) goes straight to the per-line decoder: it would only
    # make polars refuse the lines around it.
    in_layout = _texts(lines).str.contains(LINE_LAYOUT).fill_null(False).to_list()
    garbage = [not flag and certainly_not_an_object(raw) for raw, flag in zip(lines, in_layout, strict=True)]
    others.extend(first + i for i, flag in enumerate(garbage) if flag)
    for wanted in (True, False):
        indices = [i for i, flag in enumerate(in_layout) if flag is wanted and not garbage[i]]
        group = [lines[i] for i in indices]
        for piece in read_bisected(group, [first + i for i in indices], _read_numbered, min_lines=MIN_BISECT_LINES):
            if isinstance(piece, Refused):
                others.extend(piece.numbers)
            else:
                typed.append(piece)
    return typed, sorted(others)


class _Decoded:
    """The lines polars refused, decoded one by one: their spans as columns, their steps by line."""

    def __init__(self, source: str, warnings: FileWarnings) -> None:
        self.source = source
        self.warnings = warnings
        self.columns: dict[str, list[Any]] = {name: [] for name in SPAN_COLUMNS}
        self.steps_by_line: dict[int, int] = {}
        self.span_warnings = 0  # warnings about one span of a kept line (not a skipped record)

    def line(self, raw: bytes, number: int, truncated: bool) -> None:
        warnings = self.warnings
        parsed = decode_line(raw, number, self.source, warnings, truncated=truncated)
        if parsed is None:
            return
        row = parsed.value
        step = as_int64(row.get("step"))
        spans = row.get("spans")
        if step is None or not isinstance(spans, list):
            warnings.add(parsed.line, 'expected {"step": <int>, "spans": [...]}; line skipped')
            return
        self.steps_by_line[parsed.line] = step
        columns = self.columns
        for index, span in enumerate(spans):
            name = span.get("name") if isinstance(span, dict) else None
            duration = finite_float(span.get("duration")) if isinstance(span, dict) else None
            if not isinstance(name, str) or duration is None:
                warnings.add(parsed.line, f"span {index} of step {step} has no name or finite duration; span skipped")
                self.span_warnings += 1
                continue
            columns["step"].append(step)
            columns["name"].append(name)
            columns["duration_s"].append(duration)
            columns["wall_start_s"].append(finite_float(span.get("wall_start")))
            columns["wall_end_s"].append(finite_float(span.get("wall_end")))
            columns["line"].append(parsed.line)
            columns["index"].append(index)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.columns, schema={name: SCHEMA[name] for name in self.columns})


class Checked(NamedTuple):
    """A file whose every line is CLEAN_LINE: its lines, its spans, and the bytes checked."""

    lines: int
    spans: int
    size: int


def parse_timing_spans_file(path: Path, warnings: list[IngestWarning]) -> tuple[StoredTable, InputFile]:
    """Parse one file; a line (= one step) counts as one record, a bad span inside it as a warning.

    No rule reads the step spans (exports and the bundle do), so a file the cookbook wrote is only
    checked here: when every line is in its exact layout with values that fit their columns, the
    read would keep every line and span and report nothing, so its records and spans are counted
    and the read itself waits until a reader asks for the table (of the bytes checked, should the
    file grow meanwhile). Any other file is read now, for its warnings.
    """
    checked = _check(path)
    if checked is None:
        return _parse(path, warnings)
    return checked_table(path, checked)


def checked_table(path: Path, checked: Checked) -> tuple[StoredTable, InputFile]:
    """The table of a file whose first `checked.size` bytes were checked clean: counted, its read
    deferred until a reader asks for it (parse_timing_spans_file)."""
    info = InputFile(kind="spans", path=str(path), records=checked.lines)
    late: list[IngestWarning] = []

    def produce() -> StoredTable:
        # Nothing to report unless the file changed since the check (removed, rewritten, cut).
        table = _parse(path, late, limit=checked.size)[0]
        if table.height != checked.spans and not late:
            late.append(
                IngestWarning(
                    str(path),
                    None,
                    f"changed after it was checked: {table.height:,} step span(s) read from it now, "
                    f"{checked.spans:,} when the run was analysed",
                )
            )
        return table

    return StoredTable([DeferredPart(produce, checked.spans, late)], checked.spans, SCHEMA), info


def _check(path: Path) -> Checked | None:
    """The file's lines and spans if every line is CLEAN_LINE (None: the read must look at it). A file
    checked clean before and grown since is checked from where that check ended (timing_spans_resume.py)."""
    found = timing_spans_resume.resumed(path)
    counts, hashed = found if found is not None else (timing_spans_resume.Counts(), xxhash.xxh3_128())
    start = counts.size
    try:
        with InputStream(path, start=start) as stream:
            for chunk in iter_line_chunks(stream, CHUNK_BYTES):
                # An oversized or unterminated line, a CR: things the reader reports or treats
                # apart (text_lines refuses a NUL).
                if chunk.oversized or chunk.unterminated or b"\r" in chunk.data:
                    return None
                counted = _clean_lines(chunk.data)
                if counted is None:
                    return None
                counts.lines += counted[0]
                counts.spans += counted[1]
                hashed.update(chunk.data)
            if stream.problems():
                return None
            counts.size = start + stream.produced
            compressed = stream.compressed
    except OSError:
        return None  # the read reports it
    if not compressed:
        timing_spans_resume.keep(path, counts, hashed)
    return Checked(counts.lines, counts.spans, counts.size)


def check_lines(lines: list[bytes]) -> tuple[int, int] | None:
    """(lines, spans) of whole lines (without their newlines) appended to a file, if `_check` would find
    them clean: the sums over a file's lines are its check's (a followed file, checked a look at a time)."""
    if not lines or any(len(line) > MAX_LINE_BYTES or b"\r" in line for line in lines):
        return None
    return _clean_lines(b"\n".join(lines) + b"\n")


def _clean_lines(data: bytes) -> tuple[int, int] | None:
    """(lines, spans) of a chunk of whole lines, if every line is CLEAN_LINE."""
    raw = text_lines(data)
    if raw is None:
        return None
    text = pl.col("text")
    found = raw.select(
        text.str.contains(CLEAN_LINE).fill_null(False).all().alias("clean"),
        text.str.count_matches(SPAN_MARK, literal=True).sum().alias("spans"),
    )
    if not found.item(0, "clean"):
        return None
    return raw.height, int(found.item(0, "spans"))


def _parse(path: Path, warnings: list[IngestWarning], *, limit: int | None = None) -> tuple[StoredTable, InputFile]:
    """Read the file (its first `limit` bytes), each chunk's spans written to disk as soon as the
    chunk is read (its lines' segments follow from the lines before them), so the file's spans are
    never all in memory."""
    info = InputFile(kind="spans", path=str(path))
    source = str(path)
    log = FileWarnings(source)
    try:
        stream = InputStream(path, limit=limit)
    except OSError as exc:
        warnings.append(IngestWarning(source, None, f"cannot read file: {exc.strerror or exc}"))
        info.skipped = 1
        return StoredTable([], 0, SCHEMA), info
    # Straight to disk, however small: no rule reads the step spans (exports and the bundle do).
    out = PartWriter(scratch_folder("step-spans-"), SCHEMA)
    segments = Segments()
    span_warnings = 0  # warnings about one span of a kept line (not a skipped record)
    count = 0
    try:
        with stream:
            # A chunk at a time: the raw bytes and polars' parse of them are held for one chunk,
            # not the whole file (RL steps log hundreds of spans each: ~100 MB over 6,000 steps).
            for chunk in iter_line_chunks(stream, CHUNK_BYTES):
                if chunk.oversized:
                    log.add(count + 1, oversized_problem(chunk.oversized))
                    count += 1
                    continue
                # Lines polars refused are decoded one by one as their chunk is read (a few, unless
                # the file is damaged), so no chunk's lines outlive it.
                decoded = _Decoded(source, log)
                pieces = _read_chunk(chunk, count, decoded)
                span_warnings += decoded.span_warnings
                count += chunk.lines
                info.records += _write_chunk(pieces, decoded, segments, source, out)
            for problem in stream.problems():
                log.add(None, problem)
    except BaseException:
        out.abandon()
        raise
    # Skipped records are whole lines (and the unreadable rest of a corrupt gzip file); a bad span
    # inside a kept line is a warning, not a record.
    info.skipped = log.lined - span_warnings + (stream.error is not None)
    warnings.extend(log.close())
    out.close()
    return out.stored(), info


def _read_chunk(chunk: LineChunk, count: int, decoded: _Decoded) -> list[Typed]:
    """The chunk's lines polars read (in pieces grouped by layout when the chunk needed care); the
    others go through `decoded`. `count`: lines before the chunk."""
    numbers = pl.int_range(count + 1, count + chunk.lines + 1, dtype=pl.Int64, eager=True)
    # The chunk straight from its bytes first: one read when nothing needs care, and no per-line
    # Python objects (their memory would stay with the C allocator after they are freed).
    whole = None if chunk.unterminated else _read_typed(chunk.data, numbers)
    if whole is not None:
        return [whole]
    lines = chunk.data.split(b"\n")
    if not chunk.unterminated:
        lines.pop()
    typed, others = _read_lines(lines, count + 1)
    last = count + chunk.lines
    for number in others:
        decoded.line(lines[number - count - 1], number, chunk.unterminated and number == last)
    return typed


def _write_chunk(pieces: list[Typed], decoded: _Decoded, segments: Segments, source: str, out: PartWriter) -> int:
    """Write one chunk's spans in (line, index) order with their segments; returns its records (lines)."""
    steps_by_line = dict(pl.concat([p.steps for p in pieces]).iter_rows()) if pieces else {}
    steps_by_line.update(decoded.steps_by_line)
    layout = (
        pl.concat([p.spans for p in pieces]) if pieces else pl.DataFrame(schema={k: SCHEMA[k] for k in SPAN_COLUMNS})
    )
    spans = layout.cast({name: SCHEMA[name] for name in SPAN_COLUMNS})
    if len(pieces) != 1 or decoded.steps_by_line:
        # Pieces grouped by layout, decoded lines apart: back into file order. Chunks hold
        # consecutive lines, so the file's order is each chunk's in turn.
        spans = pl.concat([spans, decoded.frame()]).sort("line", "index")
    ordered = sorted(steps_by_line.items())
    segment = segments.of([step for _, step in ordered])
    if any(segment):
        segment_of = pl.DataFrame(
            {"line": [line for line, _ in ordered], "segment": segment}, schema={"line": pl.Int64, "segment": pl.Int32}
        )
        spans = spans.join(segment_of, on="line", how="left", maintain_order="left")
    else:  # one process so far (no step logged twice): no join of every span against its line
        spans = spans.with_columns(pl.lit(0, pl.Int32).alias("segment"))
    out.write(spans.with_columns(pl.lit(source).alias("source")).select(list(SCHEMA)).cast(SCHEMA))
    return len(ordered)
