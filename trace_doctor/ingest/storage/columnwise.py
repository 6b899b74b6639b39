"""Whole-table copies made a column at a time, so the source's column goes as its copy is made.

Concatenating a file's chunk tables or reordering a million spans copies every column; done at
once, the source and the copy are both held, twice the table at the peak. Done a column at a time,
each source column is released as soon as its copy exists: the peak is the table plus one column.
The callers hand over their only reference in a list (`holder`), which these functions empty.
"""

from __future__ import annotations

import polars as pl


def concat_releasing(holder: list[pl.DataFrame]) -> pl.DataFrame:
    """The tables in `holder` (same columns, in order) as one contiguous table; `holder` is emptied."""
    frames, holder[:] = list(holder), []
    if len(frames) == 1:
        return frames[0].rechunk()
    schema = frames[0].schema
    height = sum(f.height for f in frames)
    table = pl.DataFrame({"_rows": pl.repeat(None, height, dtype=pl.Null, eager=True)})
    for name, dtype in schema.items():
        parts = [f.get_column(name) for f in frames]
        if all(part.null_count() == part.len() for part in parts):
            # A column no row has (a layout column in a trace read without the layout): a
            # constant null, which costs nothing, instead of a materialised one.
            table = table.with_columns(pl.lit(None, dtype).alias(name))
        else:
            table = table.with_columns(pl.concat(parts, rechunk=True).alias(name))
        del parts
        frames = [f.drop(name) for f in frames]
    return table.drop("_rows")


def gather_releasing(holder: list[pl.DataFrame], rows: pl.Series) -> pl.DataFrame:
    """`holder`'s table with its rows in the order of `rows` (indices); `holder` is emptied."""
    (frame,) = holder
    holder.clear()
    order = frame.columns
    columns: list[pl.Series] = []
    for name in order:
        columns.append(frame.get_column(name).gather(rows))
        frame = frame.drop(name)
    return pl.DataFrame(columns)


def filter_releasing(holder: list[pl.DataFrame], keep: pl.Series) -> pl.DataFrame:
    """`holder`'s table with only the rows where `keep` is true, in order; `holder` is emptied.
    (For rows wanted in their own order a filter is the cheaper copy: ~10x a gather of the same rows.)"""
    (frame,) = holder
    holder.clear()
    columns: list[pl.Series] = []
    for name in frame.columns:
        columns.append(frame.get_column(name).filter(keep))
        frame = frame.drop(name)
    return pl.DataFrame(columns)
