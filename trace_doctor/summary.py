"""The run summary of the JSON contract: wall time, typical and steady step time, warm-up length."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from trace_doctor.derive.step_times import OVERLAPPING_TOTAL_KEY, live_training_rows
from trace_doctor.derive.wall import step_totals
from trace_doctor.model import StepSummary
from trace_doctor.rules.context import RuleContext


def _rounded(value: Any) -> float | None:
    if value is None or not math.isfinite(float(value)):
        return None
    return round(float(value), 6)


def measure_steps(ctx: RuleContext) -> StepSummary:
    """What the run's step times measure: wall, median and steady step time, warm-up length; for a run
    several processes wrote at the same time, the same for each writer (its wall is its own, the run's
    the longest of them)."""
    totals = step_totals(ctx.step_times)
    split = ctx.warmup
    steady = (
        split.steady["total_s"].drop_nulls().drop_nans()
        if split is not None and "total_s" in split.steady.columns
        else pl.Series([], dtype=pl.Float64)
    )
    overlapping = None
    fit = ctx.overlap_fit
    if fit is not None and fit.overlapped:
        # The windows as written, beside the wall they were rebuilt into: a user who summed
        # `time/total` themselves sees why this wall is about half of it.
        live = live_training_rows(ctx.run.steps)
        overlapping = {
            **fit.to_dict(),
            "summed_windows_s": _rounded(live[OVERLAPPING_TOTAL_KEY].drop_nulls().drop_nans().sum()),
        }
    return StepSummary(
        wall_time_s=_rounded(ctx.wall_s),
        step_time_p50_s=_rounded(totals.median()) if len(totals) else None,
        steady_step_time_s=_rounded(steady.median()) if len(steady) else None,
        # No step times means no warm-up could be measured, which is not "zero warm-up steps".
        warmup_steps=int(split.warmup_steps) if split is not None and len(totals) else None,
        overlapping_step_timers=overlapping,
        writers=[{**writer.to_dict(), **_writer_measures(own)} for writer, own in ctx.writers] or None,
    )


def _writer_measures(ctx: RuleContext) -> dict[str, Any]:
    measured = measure_steps(ctx)
    return {
        "wall_time_s": measured.wall_time_s,
        "wall_basis": ctx.wall[1],
        "step_time_p50_s": measured.step_time_p50_s,
        "steady_step_time_s": measured.steady_step_time_s,
    }


def summarize(ctx: RuleContext) -> dict[str, Any]:
    """The summary block's first keys, as a mapping the later stages add theirs to (training machine,
    time account, quality cause); `Analysis.run_summary` reads the whole block typed."""
    return measure_steps(ctx).to_dict()
