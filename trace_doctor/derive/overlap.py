"""Overlapping step timers: a legacy pipelined SFT `time/total` holds three iterations' work.

The cookbook's pipelined SFT loop (2025-10-26 to 2026-03-17) runs submit_batch(k+1), then
finish_batch(k), and measures step k's `time/total` from the start of submit_batch(k) to the end
of finish_batch(k). So besides step k's own timers the window holds step k+1's submission (its
`get_batch`, evals) and step k-1's finish (its result wait `step`, its checkpoint save):
consecutive totals overlap, and their sum counts nearly every second twice.

The reading is tested, not assumed from the key set. The overlap residual
`total(k) - own(k) - submit(k+1) - finish(k-1)` must be non-negative on nearly every step (what
is left is untimed: SDK submissions, logging the example, the loss computation, writing metrics)
and much steadier than the sequential residual `total(k) - own(k)`, which in an overlapped run
swings with the neighbours' timers. In a sequential loop the overlap residual is the negative of
the neighbours' timers instead, and the totals are kept as written.

When the reading holds, step k's share of the wall clock is its own timers plus half its residual:
each overlapping pair's untimed work (submit(k+1) with finish(k)) lies in two consecutive windows,
so half of each residual is the step's own. The only untimed time in a single window is the
metrics write between two finishes; counting it by half understates the wall by at most half the
residuals, which `untimed_s` reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

# The columns `fit_overlap` reads: the raw whole-step timer, the step's timed seconds by side, and
# (for `deoverlapped`) its result wait.
OVERLAP_INPUTS = ("segment", "step", "total", "own", "submit", "finish", "wait")


@dataclass(frozen=True)
class OverlapFit:
    """How well the overlapping-window reading explains a run's `time/total` (facts, no verdict
    beyond `overlapped`)."""

    overlapped: bool
    judged_steps: int  # steps with both neighbours logged, on which the reading was tested
    fit_share: float  # share of judged steps whose overlap residual is >= -tolerance
    residual_iqr_s: float  # spread of the overlap residual
    sequential_iqr_s: float  # spread of total - own (the sequential reading's residual)
    residual_median_s: float  # the untimed seconds in a typical window

    def to_dict(self) -> dict:
        return {
            "overlapped": self.overlapped,
            "judged_steps": self.judged_steps,
            "fit_share": round(self.fit_share, 4),
            "residual_iqr_s": round(self.residual_iqr_s, 6),
            "sequential_iqr_s": round(self.sequential_iqr_s, 6),
            "residual_median_s": round(self.residual_median_s, 6),
        }


@dataclass(frozen=True)
class OverlapKnobs:
    """The shared knobs of the test (policy.shared, `overlap_*`), handed in as plain values."""

    min_steps: int
    min_fit_share: float
    max_spread_ratio: float
    tolerance_s: float


def _iqr(values: np.ndarray) -> float:
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 - q1)


def with_residuals(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (OVERLAP_INPUTS) with `residual` (overlap reading), `sequential` (total - own) and
    `interior` (both neighbours logged in the same launch)."""
    frame = frame.sort(["segment", "step"])
    by_launch = {"partition_by": "segment"}
    prev_adjacent = (pl.col("step").shift(1).over(**by_launch) == pl.col("step") - 1).fill_null(False)
    next_adjacent = (pl.col("step").shift(-1).over(**by_launch) == pl.col("step") + 1).fill_null(False)
    next_submit = pl.when(next_adjacent).then(pl.col("submit").shift(-1).over(**by_launch)).otherwise(0.0)
    prev_finish = pl.when(prev_adjacent).then(pl.col("finish").shift(1).over(**by_launch)).otherwise(0.0)
    return frame.with_columns(
        (pl.col("total") - pl.col("own") - next_submit.fill_null(0.0) - prev_finish.fill_null(0.0)).alias("residual"),
        (pl.col("total") - pl.col("own")).alias("sequential"),
        (prev_adjacent & next_adjacent).alias("interior"),
    )


def fit_overlap(frame: pl.DataFrame, knobs: OverlapKnobs) -> OverlapFit | None:
    """Test the overlapping-window reading on the steps whose neighbours were both logged; None when
    fewer than `min_steps` such steps have a total and timers."""
    judged = (
        with_residuals(frame)
        .filter(pl.col("interior") & pl.col("residual").is_not_null() & pl.col("residual").is_finite())
        .select("residual", "sequential")
    )
    if judged.height < knobs.min_steps:
        return None
    residual = judged["residual"].to_numpy()
    sequential = judged["sequential"].to_numpy()
    fit_share = float(np.mean(residual >= -knobs.tolerance_s))
    spread, seq_spread = _iqr(residual), _iqr(sequential)
    # Both spreads zero (identical synthetic steps): the readings cannot be told apart.
    steadier = seq_spread > 0 and spread <= knobs.max_spread_ratio * seq_spread
    return OverlapFit(
        overlapped=bool(fit_share >= knobs.min_fit_share and steadier),
        judged_steps=judged.height,
        fit_share=fit_share,
        residual_iqr_s=spread,
        sequential_iqr_s=seq_spread,
        residual_median_s=float(np.median(residual)),
    )


def deoverlapped(frame: pl.DataFrame, *, tolerance_s: float) -> pl.DataFrame:
    """Per step (segment, step): `total_s`, its own timers plus half its untimed residual, and that
    half as `untimed_s` (see module docstring); `previous_in_flight`: the step's submission-side
    timers (get_batch, evals) ran while the previous step was still on the service, as its result
    wait that followed was longer than `tolerance_s` (the service, not the client, set the pace
    then). Rows without a total keep nulls."""
    frame = with_residuals(frame)
    prev_adjacent = (pl.col("step").shift(1).over("segment") == pl.col("step") - 1).fill_null(False)
    return frame.select(
        "segment",
        "step",
        (pl.col("own") + pl.col("residual").clip(lower_bound=0.0) / 2).alias("total_s"),
        (pl.col("residual").clip(lower_bound=0.0) / 2).alias("untimed_s"),
        (prev_adjacent & (pl.col("wait").shift(1).over("segment") > tolerance_s).fill_null(False)).alias(
            "previous_in_flight"
        ),
    )
