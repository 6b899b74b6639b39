"""The run summary of the JSON contract: wall time, typical and steady step time, warm-up length."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from trace_doctor.rules.context import RuleContext


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def trace_wall_time_s(spans: pl.DataFrame) -> float | None:
    """Wall time covered by the trace: the extent of each segment's spans, summed."""
    if spans.is_empty():
        return None
    extent = spans.group_by("segment").agg(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b"))
    total = (extent["b"] - extent["a"]).sum()
    return _finite(total / 1e6) if total is not None else None


def _rounded(value: Any) -> float | None:
    value = _finite(value)
    return None if value is None else round(value, 6)


def summarize(ctx: RuleContext) -> dict[str, Any]:
    times = ctx.step_times
    totals = (
        times["total_s"].drop_nulls().drop_nans() if "total_s" in times.columns else pl.Series([], dtype=pl.Float64)
    )
    wall = _finite(totals.sum()) if len(totals) else None
    # The trace is a wall clock; summed step totals are not when timers overlap (legacy pipelined
    # SFT's time/total spans two iterations) or leave time out (async RL excludes data waits).
    traced = trace_wall_time_s(ctx.run.spans)
    if traced is not None:
        wall = traced
    split = ctx.warmup
    steady = (
        split.steady["total_s"].drop_nulls().drop_nans()
        if split is not None and "total_s" in split.steady.columns
        else pl.Series([], dtype=pl.Float64)
    )
    return {
        "wall_time_s": _rounded(wall),
        "step_time_p50_s": _rounded(totals.median()) if len(totals) else None,
        "steady_step_time_s": _rounded(steady.median()) if len(steady) else None,
        # No step times means no warm-up could be measured, which is not "zero warm-up steps".
        "warmup_steps": int(split.warmup_steps) if split is not None and len(totals) else None,
    }
