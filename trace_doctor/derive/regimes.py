"""Split steady-state steps into regimes: runs of steps at one level of step time.

A run can change speed mid-way (longer sequences from a point in the dataset, a slower service, a
host change). That is neither warm-up (the slow part is not a prefix) nor whole-run slowness, and
judging variance against one median would call a clean two-level series "inconsistent". The
change points are those of derive.warmup (binary segmentation of log step time without scheduled
eval/checkpoint phases); neighbouring pieces whose levels differ by less than `min_ratio`, and
pieces shorter than `min_steps` (spikes, not regimes), are merged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from trace_doctor.derive.warmup import MIN_POINTS, change_points, noise_sigma, work_seconds


@dataclass(frozen=True)
class Regime:
    """Consecutive steady steps of one segment at one level of step time."""

    segment: int
    first_step: int
    last_step: int
    steps: int
    median_s: float


def _pieces(x: np.ndarray, cps: list[int]) -> list[list[int]]:
    bounds = [0, *cps, len(x)]
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _level(x: np.ndarray, piece: list[int]) -> float:
    return float(np.median(x[piece]))


def _merge(x: np.ndarray, pieces: list[list[int]], min_steps: int, min_log_ratio: float) -> list[list[int]]:
    """Merge short pieces into their closer neighbour, then neighbours at nearly the same level."""
    pieces = [p for p in pieces if p]
    changed = True
    while changed and len(pieces) > 1:
        changed = False
        short = [i for i, p in enumerate(pieces) if len(p) < min_steps]
        if short:
            i = min(short, key=lambda j: len(pieces[j]))
            left = abs(_level(x, pieces[i]) - _level(x, pieces[i - 1])) if i > 0 else math.inf
            right = abs(_level(x, pieces[i]) - _level(x, pieces[i + 1])) if i + 1 < len(pieces) else math.inf
            j = i - 1 if left <= right else i + 1
            a, b = sorted((i, j))
            pieces[a : b + 1] = [pieces[a] + pieces[b]]
            changed = True
            continue
        gaps = [abs(_level(x, pieces[i]) - _level(x, pieces[i + 1])) for i in range(len(pieces) - 1)]
        i = int(np.argmin(gaps))
        if gaps[i] < min_log_ratio:
            pieces[i : i + 2] = [pieces[i] + pieces[i + 1]]
            changed = True
    return pieces


def steady_regimes(steady: pl.DataFrame, *, min_steps: int, min_ratio: float) -> list[Regime]:
    """Regimes of the steady steps, per segment in step order (one per segment when none changed)."""
    if steady.is_empty() or "total_s" not in steady.columns:
        return []
    timed = steady.filter(pl.col("total_s").is_not_null() & (pl.col("total_s") > 0)).with_columns(
        work_seconds(steady).alias("_work")
    )
    regimes: list[Regime] = []
    for segment in sorted(timed["segment"].unique().to_list()):
        part = timed.filter(pl.col("segment") == segment).sort("step")
        steps = part["step"].to_list()
        totals = part["total_s"].to_numpy()
        x = np.log(part["_work"].to_numpy())
        if len(x) < MIN_POINTS:
            pieces = [list(range(len(x)))]
        else:
            penalty = 2.0 * noise_sigma(x) ** 2 * math.log(len(x))
            pieces = _merge(x, _pieces(x, change_points(x, penalty)), min_steps, math.log(min_ratio))
        for piece in pieces:
            piece = sorted(piece)
            regimes.append(
                Regime(
                    int(segment),
                    int(steps[piece[0]]),
                    int(steps[piece[-1]]),
                    len(piece),
                    float(np.median(totals[piece])),
                )
            )
    return regimes


def regime_levels(steady: pl.DataFrame, regimes: list[Regime]) -> pl.Series:
    """Each steady row's regime median step time (null for rows outside every regime)."""
    level = pl.lit(None, dtype=pl.Float64)
    for r in regimes:
        inside = (pl.col("segment") == r.segment) & pl.col("step").is_between(r.first_step, r.last_step)
        level = pl.when(inside).then(pl.lit(r.median_s)).otherwise(level)
    return steady.select(level.alias("_level")).to_series()
