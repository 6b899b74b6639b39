"""A run with no trace, drawn from its metrics: each step a slice, its timed phases inside it.

metrics.jsonl has durations (`time/*` keys) but no timestamps, so the slices are laid end to end
from the step totals (derive/step_times): step k starts where step k-1 ended, a launch's first step
where the previous launch's last one ended, and the phases of a step one after the other from its
start, in the order the metrics name them. Every slice says so in its args: the positions are a
layout, only the lengths are measured.
"""

from __future__ import annotations

import math

import polars as pl

from trace_doctor.report.export_tracks import Slice, Track

GROUP = "metrics.jsonl step times (no timestamps)"
TRACK = "steps › phases"
UNTIMED = "untimed"
LAYOUT = (
    "laid end to end from the step totals: metrics.jsonl has durations but no timestamps, so only the "
    "lengths are measured"
)
PHASE_LAYOUT = "phases laid one after the other from the step's start, in metrics key order (lengths measured)"
CLIPPED = "the phases add up to more than the step (they overlapped): cut at the step's end"


def _seconds(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _phase_slices(row: dict, phases: list[str], step: int, start: float, end: float) -> list[Slice]:
    slices = []
    cursor = start
    for column in phases:
        seconds = _seconds(row.get(column))
        if not seconds or cursor >= end:
            continue
        stop = cursor + seconds * 1e6
        args = {"step": step, "seconds": seconds, "timing": PHASE_LAYOUT}
        if stop > end:
            stop, args["clipped"] = end, CLIPPED
        slices.append(Slice(column.removeprefix("phase:"), cursor, stop, args))
        cursor = stop
    untimed = _seconds(row.get("untimed_s"))
    if untimed and cursor < end:
        args = {"step": step, "seconds": untimed, "timing": PHASE_LAYOUT, "what": "step time no time/* key names"}
        slices.append(Slice(UNTIMED, cursor, min(end, cursor + untimed * 1e6), args))
    return slices


def metrics_timeline(step_times: pl.DataFrame) -> tuple[list[Track], dict[int, tuple[float, float]]]:
    """(The steps track, each step's extent in µs) from the per-step times; ([], {}) when no step has a
    time. A step without a total is as long as its phases."""
    if step_times.is_empty() or "step" not in step_times.columns:
        return [], {}
    phases = [c for c in step_times.columns if c.startswith("phase:")]
    slices: list[Slice] = []
    extents: dict[int, tuple[float, float]] = {}
    cursor = 0.0
    for row in step_times.sort(["segment", "step"], nulls_last=True).iter_rows(named=True):
        total = _seconds(row.get("total_s"))
        named = sum(_seconds(row.get(c)) or 0.0 for c in phases)
        length = total if total is not None else named
        if not length:
            continue
        step = int(row["step"])
        start, end = cursor, cursor + length * 1e6
        args = {"step": step, "segment": row.get("segment"), "seconds": length, "timing": LAYOUT}
        if row.get("total_source"):
            args["total_source"] = row["total_source"]
        slices.append(Slice(f"step {step}", start, end, args))
        slices += _phase_slices(row, phases, step, start, end)
        extents[step] = (start, end)
        cursor = end
    if not slices:
        return [], {}
    return [Track(GROUP, TRACK, slices)], extents
