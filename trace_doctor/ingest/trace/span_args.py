"""Event attributes for spans: the track and thread an event names, a span's merged B+E attributes and its step.

Cookbook events carry `{"track", "thread"}` on B and `{"track", "thread", "step"}` on E, which the
layout reader already typed; only the few other rows have their JSON args text decoded.
"""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl

from trace_doctor.ingest.reading.jsonl import as_int64, decode_json, json_text

# The args every cookbook B event carries and nothing else; matched rows need no JSON decoding.
PLAIN_ARGS = r'^\{"track": "([^"\\]*)", "thread": "([^"\\]*)"\}$'
TRACK_THREAD_PREFIX = r'^\{"track": "([^"\\]*)", "thread": "([^"\\]*)"'


def with_track_thread(events: pl.DataFrame) -> pl.DataFrame:
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


def remaining_args(texts: list[str | None]) -> dict[str, Any]:
    """The attributes of the args `texts` merged, minus track/thread (for the few non-plain rows)."""
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


def _own_args_text(text: str | None) -> str:
    """json_text(remaining_args([text])) of one event, in one decode and one encode for the usual object."""
    if text is None:
        return "{}"
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json_text(remaining_args([text]))  # NaN literals, nesting beyond orjson's limit, not JSON
    if not isinstance(value, dict):
        return json_text({"args": value})
    if "track" in value or "thread" in value:
        value = {k: v for k, v in value.items() if k not in ("track", "thread")}
    return json_text(value)


def own_args_texts(texts: pl.Series, *, batch: int = 65536) -> pl.Series:
    """Each event's attributes minus track/thread as JSON text (remaining_args of that event alone).

    Decoded a batch at a time, so the Python strings of a million events never exist at once.
    """
    parts = [
        pl.Series(texts.name, [_own_args_text(t) for t in texts.slice(start, batch).to_list()], dtype=pl.String)
        for start in range(0, texts.len(), batch)
    ]
    return pl.concat(parts) if parts else pl.Series(texts.name, [], dtype=pl.String)


def _step_of(attrs: dict[str, Any]) -> int | None:
    # A step beyond 64 bits (JSON allows any size) is no step an Int64 column can hold.
    return as_int64(attrs.get("step"))


def _step_args(step: pl.Expr) -> pl.Expr:
    """The args text a layout-read E event's lone `step` attribute stands for (orjson's compact form)."""
    return pl.concat_str([pl.lit('{"step":'), step.cast(pl.String), pl.lit("}")])


def merge_args(pairs: pl.DataFrame) -> pl.DataFrame:
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
            attrs = remaining_args([begin, end])
            rows.append(row)
            texts.append(json_text(attrs))
            end_attrs = remaining_args([end]) if end is not None else {}
            values.append(_step_of(end_attrs))
        index = pl.Series(rows, dtype=pl.UInt32)
        args = args.scatter(index, texts)
        steps = steps.scatter(index, pl.Series(values, dtype=pl.Int64))
    return pairs.with_columns(args, steps).drop(
        "_begin_args", "_plain", "_end_args", "_end_plain", "_begin_step", "_end_step"
    )
