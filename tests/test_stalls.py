"""Stretched round trips: picked out of the whole span table, the same rows as a window over the trips."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from trace_doctor.derive.stalls import ROUND_TRIP, stretched_round_trips


def _spans(seed: int) -> pl.DataFrame:
    """An RL-like table: per step, sample round trips of two kinds, a forward_backward, an optim_step;
    a few round trips stretched (the SDK thread starved), one name with a much slower median."""
    rng = np.random.default_rng(seed)
    names, durs, starts = [], [], []
    calls = sorted(ROUND_TRIP)[:2]
    for step in range(50):
        for i in range(8):
            name = calls[i % 2]
            base = 400_000.0 if name == calls[0] else 90_000.0
            durs.append(base * float(rng.lognormal(0, 0.1)) * (6.0 if rng.random() < 0.02 else 1.0))
            names.append(name)
            starts.append(step * 1e6 + i * 1e4)
        for name in ("forward_backward", "optim_step"):
            names.append(name)
            durs.append(2e6 * float(rng.lognormal(0, 0.3)))
            starts.append(step * 1e6 + 9e5)
    return pl.DataFrame(
        {
            "name": names,
            "segment": pl.Series([0] * len(names), dtype=pl.Int32),
            "start_us": starts,
            "dur_us": durs,
            "end_us": [s + d for s, d in zip(starts, durs, strict=True)],
        }
    )


def _window(spans: pl.DataFrame, ratio: float, min_excess_s: float) -> pl.DataFrame:
    trips = spans.filter(pl.col("name").is_in(list(ROUND_TRIP)))
    trips = trips.with_columns(pl.col("dur_us").median().over("name").alias("typical_us"))
    return trips.filter(
        (pl.col("dur_us") > ratio * pl.col("typical_us"))
        & (pl.col("dur_us") - pl.col("typical_us") > min_excess_s * 1e6)
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("ratio", "min_excess_s"), [(2.0, 0.5), (3.0, 0.1), (1.0, 0.0), (0.5, -1.0)])
def test_stretched_round_trips_are_the_window_reading(seed, ratio, min_excess_s):
    spans = _spans(seed)
    expected = _window(spans, ratio, min_excess_s)
    got = stretched_round_trips(spans, ratio, min_excess_s)
    assert got.equals(expected) and got.schema == expected.schema
    if (ratio, min_excess_s) == (2.0, 0.5):
        assert 0 < got.height < 40  # a few stretched, of both kinds


def test_no_round_trip_no_stretch():
    spans = _spans(0).filter(~pl.col("name").is_in(list(ROUND_TRIP)))
    assert stretched_round_trips(spans, 2.0, 0.5).is_empty()
