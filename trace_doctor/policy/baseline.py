"""Thresholds of the regression rules that compare a run with a baseline."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import Bounds, threshold


@dataclass(frozen=True)
class StepTimeRegressionPolicy:
    min_relative_effect: float = threshold(
        0.10,
        unit="share of the baseline's median",
        why="Below a 10% slower median step a statistically significant change is noise CI should not fail on.",
    )
    alpha: float = threshold(
        0.05,
        unit="p-value",
        why="Significance level of the one-sided Mann-Whitney U test.",
        bounds=Bounds(0.0, 1.0, low_open=True, high_open=True),
    )
    min_steady_steps: int = threshold(
        5,
        unit="steps per run",
        why="With 5 vs 5 the smallest one-sided p is 1/252 = 0.004, so the test can still reach alpha; "
        "fewer gives the verdict inconclusive.",
        bounds=Bounds(2.0, None),
    )


@dataclass(frozen=True)
class NewFindingPolicy:
    """Matches findings by fingerprint only: nothing to tune."""
