"""Split each segment's step-time series into a warm-up prefix and a steady regime.

Change points come from binary segmentation of log step time (without scheduled eval and
checkpoint phases, see `work_seconds`) under a mean-shift model: a split
is kept when it lowers the squared error by more than a BIC-like penalty `2·σ²·ln n` (two new
parameters per split — where and the new level — in −2·log-likelihood units of SSE/σ²), with σ
estimated robustly as 1.4826·MAD of first differences / √2, so level shifts and a few spikes do
not inflate it. The warm-up is the longest run of leading segments that are all slower than the
steps that follow them and decay (a slow block after faster steps is a stall, never warm-up),
capped at the policy's `max_warmup_share` of the segment's steps; nothing
is skipped by a fixed count. A resumed segment gets its own warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from trace_doctor.derive.robust import robust_sigma
from trace_doctor.knowledge.tinker import PERIODIC_PHASES

# Floor on σ of log step time: timings within ~2 % of each other are one regime however
# regular a synthetic or very stable series is.
MIN_LOG_SIGMA = 0.02
MIN_POINTS = 3
# A step is never judged on less than this share of its total (see work_seconds).
WORK_FLOOR_SHARE = 0.05


@dataclass
class SegmentSplit:
    """The warm-up of one segment: how many leading steps and where steady begins."""

    segment: int
    warmup_steps: int
    boundary_step: int | None
    change_points: list[int]


@dataclass
class WarmupSplit:
    """Warm-up / steady split of the whole run's step-time table."""

    warmup_steps: int
    boundary_step: int | None
    steady: pl.DataFrame
    warmup: pl.DataFrame
    method: str
    penalty: float
    segments: list[SegmentSplit] = field(default_factory=list)


def work_seconds(step_times: pl.DataFrame) -> pl.Expr:
    """Step time without scheduled evaluation/checkpoint phases, the series warm-up is judged on.

    An evaluation at step 0 (the base-model eval) makes the first step slow for the same reason
    every eval step is slow; it is periodic work, not warm-up. The floor keeps a step whose time
    is almost all eval on the log scale.
    """
    # A phase timed top-level or nested inside another (e.g. evals inside the step's window) counts once.
    periodic = [
        pl.coalesce([pl.col(c) for c in (f"phase:{n}", f"inner:{n}") if c in step_times.columns]).fill_null(0.0)
        for n in PERIODIC_PHASES
        if f"phase:{n}" in step_times.columns or f"inner:{n}" in step_times.columns
    ]
    if not periodic:
        return pl.col("total_s")
    scheduled = pl.sum_horizontal(periodic)
    return pl.max_horizontal(pl.col("total_s") - scheduled, pl.col("total_s") * WORK_FLOOR_SHARE)


def noise_sigma(x: np.ndarray) -> float:
    """Noise level of a series from the robust σ of its first differences (robust to level shifts)."""
    if len(x) < 2:
        return MIN_LOG_SIGMA
    return max(robust_sigma(np.diff(x)) / math.sqrt(2.0), MIN_LOG_SIGMA)


def _best_split(x: np.ndarray) -> tuple[int, float]:
    """Index k (split x[:k] | x[k:]) maximising the SSE reduction of a one-change mean model."""
    n = len(x)
    csum = np.cumsum(x)
    total = csum[-1]
    k = np.arange(1, n)
    left = csum[:-1]
    gain = left**2 / k + (total - left) ** 2 / (n - k) - total**2 / n
    best = int(np.argmax(gain))
    return best + 1, float(gain[best])


def change_points(x: np.ndarray, penalty: float) -> list[int]:
    """Binary segmentation: indices where a new level starts, sorted."""
    found: list[int] = []
    stack = [(0, len(x))]
    while stack:
        lo, hi = stack.pop()
        if hi - lo < 2:
            continue
        k, gain = _best_split(x[lo:hi])
        if gain > penalty:
            found.append(lo + k)
            stack += [(lo, lo + k), (lo + k, hi)]
    return sorted(found)


def following_window(n: int, max_share: float) -> int:
    """How many steps after a warm-up candidate stand for "steady" when judging it."""
    return max(MIN_POINTS * 3, int(math.ceil(max_share * n)))


def warmup_length(x: np.ndarray, cps: list[int], max_share: float, tolerance: float = 0.0) -> int:
    """Number of leading points in the warm-up: leading segments all slower than what follows, and
    decaying — each no faster than the one after it (within `tolerance`, on the log scale). A slow
    block after faster steps is a stall, not warm-up: the warm-up ends before it."""
    n = len(x)
    limit = max(1, int(math.floor(max_share * n)))
    best = 0
    bounds = [0, *cps, n]
    levels = [float(np.mean(x[bounds[i] : bounds[i + 1]])) for i in range(len(bounds) - 1)]
    for j in range(1, len(bounds) - 1):
        end = bounds[j]
        if end > limit:
            break
        if j >= 2 and levels[j - 1] > levels[j - 2] + tolerance:
            break
        # Compared with the steps that follow it, not the whole rest: a run that slows down
        # later (a mid-run regime change) must not hide its warm-up.
        rest = float(np.median(x[end : end + following_window(n, max_share)]))
        if all(float(np.mean(x[bounds[i] : bounds[i + 1]])) > rest for i in range(j)):
            best = end
    return best


def split_warmup(
    step_times: pl.DataFrame, *, max_warmup_share: float, continued: set[int] | frozenset[int] = frozenset()
) -> WarmupSplit:
    """Warm-up / steady split of a step-time table (derive.step_times), per segment."""
    if step_times.is_empty() or "total_s" not in step_times.columns:
        return WarmupSplit(0, None, step_times, step_times.clear(), "no step times", 0.0)
    timed = step_times.filter(pl.col("total_s").is_not_null() & (pl.col("total_s") > 0)).with_columns(
        work_seconds(step_times).alias("_work")
    )
    if timed.height < MIN_POINTS:
        return WarmupSplit(0, None, step_times, step_times.clear(), f"too few timed steps ({timed.height})", 0.0)

    warm_keys: list[tuple[int, int]] = []
    splits: list[SegmentSplit] = []
    penalties: list[float] = []
    for segment in sorted(timed["segment"].unique().to_list()):
        part = timed.filter(pl.col("segment") == segment).sort("step")
        x = np.log(part["_work"].to_numpy())
        steps = part["step"].to_list()
        if len(x) < MIN_POINTS:
            splits.append(SegmentSplit(segment, 0, steps[0] if steps else None, []))
            continue
        penalty = 2.0 * noise_sigma(x) ** 2 * math.log(len(x))
        penalties.append(penalty)
        cps = change_points(x, penalty)
        # A launch's warm-up is at its start; a segment continued after a relaunch rewrote its first
        # steps has none left to judge.
        length = 0 if segment in continued else warmup_length(x, cps, max_warmup_share, noise_sigma(x))
        warm_keys += [(segment, s) for s in steps[:length]]
        splits.append(
            SegmentSplit(segment, length, steps[length] if length < len(steps) else None, [steps[c] for c in cps])
        )

    warm = pl.DataFrame(
        {"segment": [k[0] for k in warm_keys], "step": [k[1] for k in warm_keys]},
        schema={"segment": pl.Int32, "step": pl.Int64},
    )
    is_warm = step_times.join(warm.with_columns(pl.lit(True).alias("_warm")), on=["segment", "step"], how="left")[
        "_warm"
    ].fill_null(False)
    # Only timed steps are judged: a row without a step time is never warm-up, even before a
    # segment's boundary, so it stays in `steady` (readers of steady step times skip it).
    first = splits[0] if splits else None
    return WarmupSplit(
        warmup_steps=len(warm_keys),
        boundary_step=first.boundary_step if first and first.warmup_steps else None,
        steady=step_times.filter(~is_warm),
        warmup=step_times.filter(is_warm),
        method="binary segmentation of log step time, BIC-like penalty 2·σ²·ln n (σ from MAD of differences)",
        penalty=round(max(penalties), 6) if penalties else 0.0,
        segments=splits,
    )
