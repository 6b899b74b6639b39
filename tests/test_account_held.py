"""Attribution weighs a claim against the time earlier claims hold, read from merged intervals as arrays:
the same shares as the lists of pairs gave (intervals.merge, overlap, length), to the last digit."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from trace_doctor.derive.intervals import length, merge, overlap
from trace_doctor.model import Finding
from trace_doctor.triage.account import attribute

EMPTY = pl.DataFrame()


def _finding(rule: str, seconds: float, ranges) -> Finding:
    return Finding(
        rule=rule, code="TD000", severity="warning", title=rule, message="", fix="",
        time_ranges_us=[list(r) for r in ranges], seconds_lost=seconds, fingerprint=rule,
    )  # fmt: skip


def _ranges(seed: int, n: int) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0, 9e6, n))
    return [(float(a), float(a + d)) for a, d in zip(starts, rng.exponential(3e4, n), strict=True)]


def test_shares_of_held_time_are_the_list_computation():
    first, second = _ranges(1, 300), _ranges(2, 40)  # the vectorised and the plain merge
    gap = _finding("pipelining-gap", 2.0, first)
    stall = _finding("gil-stall", 3.0, second)
    # Later in the guide's order than both: weighed against what both hold, spread over the run.
    late = _finding("inconsistent-step-times", 1.0, [])
    out, _ = attribute([gap, stall, late], wall_s=10.0, spans=EMPTY, step_times=EMPTY, trainer="sl", clock_cycle=None)
    by_rule = {f.rule: f for f in out}
    held = merge(first)
    ranges = merge(second)
    shared, span = overlap(ranges, held), length(ranges)
    assert 0 < shared < span
    assert by_rule["gil-stall"].evidence["overlapping_earlier_causes_s"] == round(3.0 * shared / span, 6)
    held = merge(held + ranges)
    assert by_rule["inconsistent-step-times"].evidence["overlapping_earlier_causes_s"] == round(
        1.0 * min(length(held) / 1e6 / 10.0, 1.0), 6
    )


def _waits(seed: int, n: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    start = np.round(rng.uniform(0, 1000, n), 1)
    end = start + np.round(rng.choice([-5.0, 0.0, 0.5, 3.0, 40.0], n), 1)
    start[rng.uniform(size=n) < 0.03] = np.nan
    end[rng.uniform(size=n) < 0.03] = np.nan
    frame = pl.DataFrame(
        {
            "name": rng.choice(["sample_async", "step", "finish_batch", "forward_backward"], n),
            "closed": pl.Series([(None, True, False)[i] for i in rng.integers(0, 3, n)], dtype=pl.Boolean),
            "start_us": start,
            "end_us": end,
        }
    )
    # Some missing times, and some touching intervals.
    return frame.with_columns(
        pl.when(pl.int_range(pl.len()) % 37 == 0).then(None).otherwise(pl.col("end_us")).alias("end_us"),
        pl.when(pl.int_range(pl.len()) % 11 == 0)
        .then(pl.col("end_us").shift(1))
        .otherwise(pl.col("start_us"))
        .alias("start_us"),
    )


@pytest.mark.parametrize("seed", range(6))
def test_the_wait_union_of_each_part_gives_the_service_time_of_the_whole(seed):
    from trace_doctor.triage.account import service_time_s, wait_union_rows

    spans = _waits(seed, 3000)
    no_steps = pl.DataFrame()
    whole = service_time_s(spans, no_steps)
    cuts = sorted(np.random.default_rng(seed).choice(np.arange(1, 3000), 4, replace=False).tolist())
    parts = [spans.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, 3000], strict=True)]
    rows = pl.concat([wait_union_rows(part.lazy()).collect() for part in parts])
    assert service_time_s(rows, no_steps) == whole  # exactly: the same union, added in the same order
    assert rows.height < spans.height
