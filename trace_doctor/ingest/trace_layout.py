"""Typed reading of trace lines in the cookbook writer's fixed byte layout, without JSON decoding.

The cookbook's TraceCollector writes every event with `json.dumps` defaults and a fixed key order:

    {"name": N, "ph": "B"|"E", "pid": P, "tid": T, "ts": TS, "args": {"track": K, "thread": H[, "step": S]}, "cat": C}
    {"name": N, "ph": "M", "pid": P, "tid": T, "ts": TS, "args": {"name": L}}

polars' CSV reader (no quoting) cuts each line at its commas in parallel, and every field is checked
against the exact text JSON would have there (strings without quotes, escapes or control
characters; integers and finite numbers in JSON syntax). A line passes only if all its fields do,
so a row read here equals what a JSON decoder would produce; every other line (escaped names,
other attributes, other tools' traces, malformed JSON) is returned for the general reader.
"""

from __future__ import annotations

import io

import numpy as np
import polars as pl

FIELDS = [f"_f{i}" for i in range(10)]
_INT = r"-?(?:0|[1-9][0-9]*)"
_NUMBER = _INT + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_TEXT = r'[^"\\\x00-\x1f]*'

# Columns the layout reader fills beyond the generic event columns: args.track / args.thread,
# the E event's `step`, and the M event's `args.name`.
LAYOUT_COLUMNS: dict[str, pl.DataType] = {
    "track": pl.String,
    "thread": pl.String,
    "_step": pl.Int64,
    "_label": pl.String,
}


def _matches(column: str, pattern: str) -> pl.Expr:
    return pl.col(column).str.contains(f"^{pattern}$").fill_null(False)


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in "{}[]()*+?.^$|\\" else c for c in text)


def _text_field(column: str, prefix: str, suffix: str, clean: bool) -> pl.Expr:
    """True where `column` is `prefix` + a JSON string body needing no unescaping + `suffix`.

    In a clean chunk (no backslash, no control character anywhere) the body only has to be free of
    quotes, which prefix/suffix tests and a literal search decide far faster than a regex.
    """
    if not clean:
        return _matches(column, _regex_escape(prefix) + _TEXT + _regex_escape(suffix))
    field = pl.col(column)
    return (
        field.str.starts_with(prefix)
        & field.str.ends_with(suffix)
        & (field.str.len_bytes() >= len(prefix) + len(suffix))
        & ~_between(column, prefix, suffix).str.contains('"', literal=True)
    ).fill_null(False)


# Bytes below 0x20 other than the line feed: JSON strings cannot hold them raw.
_CONTROL_LIMIT = 0x20


def is_clean(chunk: bytes, newlines: int) -> bool:
    """True when the chunk (holding `newlines` line feeds) has no backslash and no other control character."""
    if b"\\" in chunk:
        return False
    return int(np.count_nonzero(np.frombuffer(chunk, np.uint8) < _CONTROL_LIMIT)) == newlines


def _canonical_int(value: str, text: str) -> pl.Expr:
    """True where the parsed integer prints back as the field's text: JSON integer syntax, in range.

    Cheaper than a regex; the rare valid spellings it refuses (`-0`) just take the general reader.
    """
    return (pl.col(value).cast(pl.String) == pl.col(text)).fill_null(False)


def _between(column: str, prefix: str, suffix: str) -> pl.Expr:
    return pl.col(column).str.strip_prefix(prefix).str.strip_suffix(suffix)


def read_layout(
    chunk: bytes, line_offset: int, event_columns: dict[str, pl.DataType], newlines: int | None = None
) -> tuple[pl.DataFrame, pl.Series] | None:
    """(typed rows of the lines in the fixed layout, 0-based indices of the other lines), or None.

    None means the chunk could not be cut into one row per line (e.g. invalid UTF-8); the caller
    then reads the whole chunk the general way. `newlines`, when the caller has counted them,
    saves a pass over the bytes.
    """
    try:
        raw = pl.read_csv(
            io.BytesIO(chunk), has_header=False, separator=",", quote_char=None,
            schema={name: pl.String for name in FIELDS}, truncate_ragged_lines=True,
            missing_columns="insert", extra_columns="ignore",
        )
    except Exception:  # noqa: BLE001 - any refusal means the general reader for this chunk
        return None
    if newlines is None:
        newlines = chunk.count(b"\n")
    line_count = newlines + (0 if chunk.endswith(b"\n") else 1)
    if raw.height != line_count:
        return None
    ph = pl.col("_f1").str.slice(8, 1)
    is_meta = pl.col("_f1") == ' "ph": "M"'
    clean = is_clean(chunk, newlines)
    common = (
        _text_field("_f0", '{"name": "', '"', clean)
        & pl.col("_f1").is_in([' "ph": "B"', ' "ph": "E"', ' "ph": "M"']).fill_null(False)
        & pl.col("_f2").str.starts_with(' "pid": ').fill_null(False)
        & pl.col("_f3").str.starts_with(' "tid": ').fill_null(False)
        & _matches("_f4", ' "ts": ' + _NUMBER)
    )
    track = _text_field("_f5", ' "args": {"track": "', '"', clean)
    span = (
        ~is_meta
        & track
        & _text_field("_f6", ' "thread": "', '"}', clean)
        & _text_field("_f7", ' "cat": "', '"}', clean)
        & pl.col("_f8").is_null()
    )
    stepped_end = (
        (ph == "E")
        & track
        & _text_field("_f6", ' "thread": "', '"', clean)
        & pl.col("_f7").str.starts_with(' "step": ').fill_null(False)
        & pl.col("_f7").str.ends_with("}").fill_null(False)
        & _text_field("_f8", ' "cat": "', '"}', clean)
        & pl.col("_f9").is_null()
    ).fill_null(False)
    meta = is_meta & _text_field("_f5", ' "args": {"name": "', '"}}', clean) & pl.col("_f6").is_null()
    # One query: every field is checked and converted in a single parallel pass, then filtered once.
    typed = (
        raw.lazy()
        .with_columns(stepped_end.alias("_stepped"), is_meta.fill_null(False).alias("_meta"))
        .select(
            (common & (span | pl.col("_stepped") | meta)).fill_null(False).alias("_shape"),
            "_stepped",
            _between("_f2", ' "pid": ', "").alias("_pid_text"),
            _between("_f3", ' "tid": ', "").alias("_tid_text"),
            _between("_f7", ' "step": ', "}").alias("_step_text"),
            _between("_f0", '{"name": "', '"').alias("name"),
            ph.alias("ph"),
            _between("_f2", ' "pid": ', "").cast(pl.Int64, strict=False).alias("pid"),
            _between("_f3", ' "tid": ', "").cast(pl.Int64, strict=False).alias("tid"),
            _between("_f4", ' "ts": ', "").cast(pl.Float64, strict=False).alias("ts"),
            pl.lit(None, pl.Float64).alias("dur"),
            pl.when(pl.col("_stepped")).then(_between("_f8", ' "cat": "', '"}'))
            .when(~pl.col("_meta")).then(_between("_f7", ' "cat": "', '"}')).alias("cat"),
            pl.lit(None, pl.String).alias("args"),
            pl.lit(None, pl.String).alias("pid_label"),
            pl.lit(None, pl.String).alias("tid_label"),
            pl.int_range(line_offset + 1, line_offset + 1 + pl.len(), dtype=pl.Int64).alias("line"),
            pl.when(~pl.col("_meta")).then(_between("_f5", ' "args": {"track": "', '"')).alias("track"),
            pl.when(pl.col("_stepped")).then(_between("_f6", ' "thread": "', '"'))
            .when(~pl.col("_meta")).then(_between("_f6", ' "thread": "', '"}')).alias("thread"),
            pl.when(pl.col("_stepped")).then(_between("_f7", ' "step": ', "}").cast(pl.Int64, strict=False)).alias("_step"),
            pl.when(pl.col("_meta")).then(_between("_f5", ' "args": {"name": "', '"}}')).alias("_label"),
        )
        # Out-of-range integers and overflowing numbers are valid JSON the typed columns cannot hold.
        .with_columns(
            (
                pl.col("_shape") & _canonical_int("pid", "_pid_text") & _canonical_int("tid", "_tid_text")
                & pl.col("ts").is_finite().fill_null(False)
                & (~pl.col("_stepped") | _canonical_int("_step", "_step_text"))
            ).alias("_ok")
        )
        .collect()
    )
    ok = typed.get_column("_ok")
    if bool(ok.all()):
        return typed.select(list(event_columns)), pl.Series("_index", [], dtype=pl.UInt32)
    others = ok.not_().arg_true()
    return typed.filter(ok).select(list(event_columns)), others
