"""B/E pairing and X-span nesting per track: events -> spans with their depth.

B/E events are paired per (segment, pid, tid, args.track) as a LIFO stack in file (emission)
order: the cookbook writer emits each task's B and E sequentially, while ts order is unreliable
(E events of SDK calls carry completion times, and a B and an E can share a ts). The stack is
vectorised: a running +1/-1 sum reflected at zero gives each event's depth, an E arriving at depth
zero is unmatched, and each B pairs with the next event at its (key, depth). `X` events are closed
spans by construction; their depth is computed the same way from virtual begin/end points,
independently of any B/E spans on the same track.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.storage.columnwise import filter_releasing
from trace_doctor.ingest.trace.span_args import merge_args, own_args_texts

# What a track is: events pair only within one, and a resumed process (a segment) reuses pids and tids.
KEY = ["segment", "pid", "pid_label", "tid", "tid_label", "track"]
# A span as pairing leaves it, before names from metadata, durations and steps by containment.
PAIRED_SCHEMA: dict[str, pl.DataType] = {
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


def _group_starts(columns: list[str]) -> pl.Expr:
    """True on the first row of each run of equal `columns` values (the frame is sorted by them)."""
    changed = [pl.col(c).ne_missing(pl.col(c).shift(1)) for c in columns]
    return pl.any_horizontal(changed).fill_null(True)


def constant(column: pl.Series) -> bool:
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
    key = [c for c in KEY if not constant(events.get_column(c))]
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


def pair_begin_end(
    holder: list[pl.DataFrame],
    source: str,
    warnings: FileWarnings,
    *,
    carry: list[pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """Match the B/E events among the events in `holder` as a per-track stack, vectorised with
    whole-column (not per-group) scans. `holder` is emptied, so the events' columns can go as their
    spans' copies are made.

    With `carry` (a trace paired a chunk at a time), the B events still open at the end of these
    events are appended to it, in line order, instead of becoming unclosed spans: they are every
    open stack entry, so pairing them again in front of the next chunk's events continues each
    track's stack exactly where it was (depths included). Only the closed spans are returned then.
    """
    events = holder.pop()
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
        return pl.DataFrame(schema=PAIRED_SCHEMA)
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
        # Only the warnings that will be listed are written (a file of lone E events has millions).
        listed = min(warnings.room, rows.height)
        for name, line, track in rows.head(listed).iter_rows():
            warnings.add(line, f"unmatched E event {name!r} on track {track!r}: no open B; not a span")
        if rows.height > listed:
            warnings.count_unlisted(rows.height - listed, rows.get_column("line")[listed])
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
    if carry is not None:
        carry.append(events[pairs.filter(~pl.col("closed")).get_column("_row").sort()])
        pairs = pairs.filter(pl.col("closed"))
        if pairs.height == 0:
            return pl.DataFrame(schema=PAIRED_SCHEMA)
    # In line order: the begin side is then a filter of the events and the end side's gather reads
    # them front to back (several times faster than in track order), and the spans come out about in
    # start order, which the sort that writes them (span_spill.py) finds nearly done. Their order here
    # is not their order in the table.
    pairs = pairs.sort("_row")
    closed = pairs.get_column("closed")
    # Copy only the columns each side contributes: these are copies of ~half the events. The begin
    # side goes last, a column at a time, each event column released once copied.
    end = events.select("ts", "line", "args", "_plain", "_step")[pairs.get_column("_end_row").fill_null(0)]
    begin_side = [
        events.select(
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
        )
    ]
    # The begin rows in line order are a subset of the events in their own order: a filter (~10x
    # cheaper than gathering the same rows of 14 columns).
    begins = pl.repeat(False, events.height, dtype=pl.Boolean, eager=True).scatter(pairs.get_column("_row"), True)
    del events, phase, narrow, stacked
    begin = filter_releasing(begin_side, begins)
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
    return result.pipe(merge_args)


def complete_spans(events: pl.DataFrame) -> pl.DataFrame:
    """X events as closed spans, with nesting depth from virtual begin/end points per track."""
    if events.height == 0:
        return pl.DataFrame(schema=PAIRED_SCHEMA)
    spans = events.with_columns(
        pl.col("ts").alias("start_us"),
        (pl.col("ts") + pl.col("dur")).alias("end_us"),
        pl.lit(True).alias("closed"),
        pl.col("line").alias("line_begin"),
        pl.col("line").alias("line_end"),
    )
    # Order at one instant: ends before begins (siblings touch), longer begins first (parents
    # enclose children), and a zero-length span's end after its own begin. Only the columns the
    # order needs, with the track as one integer: this table has two rows per span.
    track = _track_ids(spans)
    span = pl.int_range(0, spans.height, eager=True, dtype=pl.UInt32)
    begins = pl.DataFrame(
        {
            "_span": span,
            "_track": track,
            "_t": spans.get_column("start_us"),
            "_order": pl.repeat(1, spans.height, dtype=pl.Int8, eager=True),
            "_tie": -spans.get_column("dur"),
            "_delta": pl.repeat(1, spans.height, dtype=pl.Int8, eager=True),
        }
    )
    ends = pl.DataFrame(
        {
            "_span": span,
            "_track": track,
            "_t": spans.get_column("end_us"),
            "_order": 2 - (spans.get_column("dur") > 0).cast(pl.Int8) * 2,
            "_tie": pl.repeat(0.0, spans.height, dtype=pl.Float64, eager=True),
            "_delta": pl.repeat(-1, spans.height, dtype=pl.Int8, eager=True),
        }
    )
    del track, span
    points = pl.concat([begins, ends]).sort(["_track", "_t", "_order", "_tie", "_span"], nulls_last=False)
    del begins, ends
    # Per-track running level from one global cumsum minus the sum before the track began.
    new_track = _group_starts(["_track"])
    level = pl.col("_delta").cast(pl.Int64).cum_sum()
    depth = (
        points.lazy()
        .with_columns(new_track.alias("_new"), level.alias("_global"))
        .with_columns(
            (
                pl.col("_global") - pl.when(pl.col("_new")).then(pl.col("_global") - pl.col("_delta")).forward_fill()
            ).alias("_level")
        )
        .filter(pl.col("_delta") == 1)
        .sort("_span")
        .select((pl.col("_level") - 1).clip(lower_bound=0).cast(pl.Int32).alias("depth"))
        .collect()
        .get_column("depth")
    )
    del points
    # Each span has exactly one begin point: sorted by span, the depths line up with the rows.
    spans = spans.with_columns(depth)
    return spans.with_columns(
        own_args_texts(spans.get_column("args")),
        pl.lit(None, pl.Int64).alias("step"),
    ).select(list(PAIRED_SCHEMA))
