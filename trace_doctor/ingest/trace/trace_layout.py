"""Typed reading of trace lines in the cookbook writer's fixed byte layout, without JSON decoding.

The cookbook's TraceCollector writes every event with `json.dumps` defaults and a fixed key order:

    {"name": N, "ph": "B"|"E", "pid": P, "tid": T, "ts": TS, "args": {"track": K, "thread": H[, "step": S]}, "cat": C}
    {"name": N, "ph": "M", "pid": P, "tid": T, "ts": TS, "args": {"name": L}}

Each line is matched whole against one anchored regular expression spelling out exactly those
texts in JSON's own grammar (strings without quotes, escapes or control characters; integers and
numbers in JSON syntax), capturing the values. The expression is deterministic left to right, so
the regex engine extracts the captures in a single pass per line, and polars runs it over a
chunk's lines in parallel. A line matches only if a JSON decoder would produce exactly the
captured values, and the typed casts then reject what the columns cannot hold (integers beyond 64
bits, numbers that overflow to infinity). Every other line (escaped names, other attributes, other tools' traces,
malformed JSON) is returned for the general reader.
"""

from __future__ import annotations

import io
from typing import NamedTuple

import polars as pl

from trace_doctor.ingest.reading.jsonl import JSON_INT, JSON_NUMBER

_TEXT = r'([^"\\\x00-\x1f]*)'
_INT = f"({JSON_INT})"
_NUMBER = f"({JSON_NUMBER})"
# One expression for both layouts. The alternatives part after the common `"` of `{"track"` /
# `{"name"`, so the next byte picks the branch: the expression stays deterministic left to right
# (one-pass), which is what keeps capture extraction at DFA speed. (Branching before that quote
# made the engine fall back to a slower one: ~2x the time.) Whether the branch fits the phase
# (track args for B/E, a name for M) is checked on the captures.
EVENT_LINE = (
    r'^\{"name": "'
    + _TEXT
    + r'", "ph": "([BEM])", "pid": '
    + _INT
    + r', "tid": '
    + _INT
    + r', "ts": '
    + _NUMBER
    + r', "args": \{"(?:'
    + r'track": "'
    + _TEXT
    + r'", "thread": "'
    + _TEXT
    + r'"(?:, "step": '
    + _INT
    + r')?\}, "cat": "'
    + _TEXT
    + r'"'
    + r'|name": "'
    + _TEXT
    + r'"\}'
    + r")\}$"
)
EVENT_FIELDS = ["name", "ph", "pid", "tid", "ts", "track", "thread", "_step", "cat", "_label"]

# Columns the layout reader fills beyond the generic event columns: args.track / args.thread,
# the E event's `step`, and the M event's `args.name`.
LAYOUT_COLUMNS: dict[str, pl.DataType] = {
    "track": pl.String,
    "thread": pl.String,
    "_step": pl.Int64,
    "_label": pl.String,
}


def _typed(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Captures of EVENT_LINE as typed columns, with `_ok`: the line matched and every value fits its type."""
    typed = (
        lines.select(
            "line", pl.col("text").str.extract_groups(EVENT_LINE).struct.rename_fields(EVENT_FIELDS).alias("_m")
        )
        .unnest("_m")
        .with_columns(
            pl.col("pid", "tid", "_step").cast(pl.Int64, strict=False).name.suffix("_int"),
            pl.col("ts").cast(pl.Float64, strict=False),
        )
    )
    fits = (
        pl.col("pid_int").is_not_null()
        & pl.col("tid_int").is_not_null()
        & pl.col("ts").is_finite()
        # Metadata carries a name and span events carry a track, never the other way round.
        & ((pl.col("ph") == "M") == pl.col("_label").is_not_null())
        # Only the cookbook's E events carry a step; a B with one takes the general reader like
        # any other unexpected attribute.
        & (pl.col("_step").is_null() | ((pl.col("ph") == "E") & pl.col("_step_int").is_not_null()))
    )
    return typed.with_columns(
        (pl.col("name").is_not_null() & fits).fill_null(False).alias("_ok"),
        pl.col("pid_int").alias("pid"),
        pl.col("tid_int").alias("tid"),
        pl.col("_step_int").alias("_step"),
    )


class LayoutRead(NamedTuple):
    """A chunk read by layout: typed rows of the lines in it, 0-based indices of the other lines, and
    the chunk's line count. Line numbers are 1-based within the chunk."""

    rows: pl.DataFrame
    others: pl.Series
    lines: int


def text_lines(chunk: bytes) -> pl.DataFrame | None:
    """The chunk's lines as one String row each (`text`; a blank line is a null row), or None if it
    cannot be cut so (a NUL byte, invalid UTF-8): then the chunk needs a line-by-line reader.

    The lines are cut at the NUL byte, which no JSON text holds raw: a chunk with one is refused, so
    a cut can never hide the rest of a line.
    """
    if b"\x00" in chunk:
        return None
    try:
        raw = pl.read_csv(
            io.BytesIO(chunk),
            has_header=False,
            separator="\x00",
            quote_char=None,
            schema={"text": pl.String},
        )
    except Exception:  # noqa: BLE001 - any refusal means the general reader for this chunk
        return None
    terminated = chunk.endswith(b"\n")
    # One row per line: the rows and their newlines account for every byte of the chunk (blank
    # lines are null rows of length 0). The reader drops a `\r` before a newline, so a CRLF chunk
    # misses that test and is checked by counting its lines instead.
    text_bytes = raw.get_column("text").str.len_bytes().sum() or 0
    if text_bytes + raw.height - (0 if terminated else 1) != len(chunk):
        if raw.height != chunk.count(b"\n") + (0 if terminated else 1):
            return None
    return raw


def read_layout(chunk: bytes, event_columns: dict[str, pl.DataType]) -> LayoutRead | None:
    """The lines of `chunk` in the fixed layout, typed; None if the chunk cannot be cut into one row per line.

    None (e.g. invalid UTF-8) means the caller reads the whole chunk the general way.
    """
    raw = text_lines(chunk)
    if raw is None:
        return None
    lines = raw.lazy().with_columns(pl.int_range(1, 1 + pl.len(), dtype=pl.Int64).alias("line"))
    typed = _typed(lines).collect()
    ok = typed.get_column("_ok")
    if bool(ok.all()):
        return LayoutRead(_events(typed, event_columns), pl.Series("_index", [], dtype=pl.UInt32), raw.height)
    return LayoutRead(_events(typed.filter(ok), event_columns), ok.not_().arg_true(), raw.height)


def _events(typed: pl.DataFrame, event_columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """The matched rows in the event table's columns (what the layout does not hold is null)."""
    present = set(typed.columns)
    return typed.select(
        pl.col(name) if name in present else pl.lit(None, dtype).alias(name) for name, dtype in event_columns.items()
    )
