"""derive.stalls.overlaps: the spans of another thread overlapping each span, as a per-row scan finds them."""

from __future__ import annotations

import random

import polars as pl
import pytest

from trace_doctor.derive.stalls import overlaps


def scan_per_row(rows: pl.DataFrame, others: pl.DataFrame) -> list[tuple[int, int]]:
    """The reference: each row's overlapping spans found by filtering `others` with its values."""
    indexed = others.with_row_index("_other")
    found = []
    for index, row in enumerate(rows.to_dicts()):
        hits = indexed.filter(
            (pl.col("segment").eq_missing(row["segment"]))
            & (pl.col("start_us") < row["end_us"])
            & (pl.col("end_us") > row["start_us"])
            & ~((pl.col("tid") == row["tid"]) & (pl.col("pid") == row["pid"]))
        )
        found += [(index, int(j)) for j in hits.get_column("_other").to_list()]
    return found


def spans(rng: random.Random, n: int, *, nulls: bool) -> pl.DataFrame:
    def maybe(value):
        return None if nulls and rng.random() < 0.1 else value

    starts = [rng.uniform(0, 100) for _ in range(n)]
    return pl.DataFrame(
        {
            "segment": [maybe(rng.randint(0, 1)) for _ in range(n)],
            "start_us": [maybe(s) for s in starts],
            "end_us": [maybe(s + rng.choice([0.0, rng.uniform(0, 20)])) for s in starts],
            "pid": [maybe(rng.randint(1, 2)) for _ in range(n)],
            "tid": [maybe(rng.randint(1, 3)) for _ in range(n)],
        },
        schema={"segment": pl.Int32, "start_us": pl.Float64, "end_us": pl.Float64, "pid": pl.Int64, "tid": pl.Int64},
    )


# The reference compares with a row's nulls as scalars, which polars warns always gives null (as meant).
@pytest.mark.filterwarnings("ignore:Comparisons with None")
@pytest.mark.parametrize("seed", range(12))
def test_overlaps_are_what_a_scan_per_row_finds(seed):
    rng = random.Random(seed)
    rows, others = (
        spans(rng, rng.randint(0, 60), nulls=seed % 2 == 1),
        spans(rng, rng.randint(0, 60), nulls=seed % 3 == 0),
    )
    pairs = overlaps(rows, others)
    assert list(pairs.iter_rows()) == scan_per_row(rows, others)


def test_touching_spans_and_the_same_thread_do_not_overlap():
    rows = pl.DataFrame({"segment": [0], "start_us": [10.0], "end_us": [20.0], "pid": [1], "tid": [1]})
    others = pl.DataFrame(
        {
            "segment": [0, 0, 0, 1, 0],
            "start_us": [20.0, 0.0, 12.0, 12.0, 19.0],
            "end_us": [30.0, 10.0, 15.0, 15.0, 25.0],
            "pid": [1, 1, 1, 1, 1],
            "tid": [2, 2, 1, 2, 2],
        }
    )
    assert list(overlaps(rows, others).iter_rows()) == [(0, 4)]
