"""Estimate the service's clock cycle from how long the client waited for results.

The Tinker service batches work in clock cycles, so result waits land near whole multiples of
one cycle. For a candidate period c the phases 2π·w/c of the waits w concentrate around zero
(mean resultant length R close to 1); every divisor c/k fits as well, so the estimate is the
longest candidate whose R clears the bar. A user-supplied `clock_cycle_s` always wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.model import RunTables

# Trace spans that measure waiting for the service (round trips), and metric keys that do.
WAIT_SPAN_NAMES = ("step", "finish_batch", "sample", "sample_async", "train_step")
WAIT_METRIC_KEYS = ("time/step",)
MIN_WAITS = 8
# Candidate periods: from 10 ms (simulated services run fast) to a minute.
CANDIDATE_MIN_S = 0.01
CANDIDATE_MAX_S = 60.0
# R above this is a clear cluster at multiples (uniform phases give R ≈ 1/√n).
MIN_RESULTANT = 0.8


@dataclass(frozen=True)
class ClockCycle:
    """A clock-cycle length with where it came from and how much to trust it."""

    seconds: float
    method: str
    confidence: str  # low | medium | high
    samples: int = 0
    resultant: float | None = None

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "method": self.method, "confidence": self.confidence, "samples": self.samples, "resultant": self.resultant}


def resultant_length(waits: np.ndarray, period: float) -> float:
    """Mean resultant length of the waits' phases modulo `period` (1 = all on multiples)."""
    phases = 2.0 * np.pi * waits / period
    return float(np.hypot(np.cos(phases).mean(), np.sin(phases).mean()))


def periodic_fit(waits: np.ndarray) -> tuple[float, float] | None:
    """(period, R) of the longest period on a log grid whose R clears MIN_RESULTANT."""
    waits = waits[np.isfinite(waits) & (waits > 0)]
    if len(waits) < MIN_WAITS:
        return None
    upper = min(CANDIDATE_MAX_S, float(np.median(waits)) * 1.05)
    if upper <= CANDIDATE_MIN_S:
        return None
    # A phase-0 cluster, not merely a tight cluster: the mean phase must sit near a multiple.
    best: tuple[float, float] | None = None
    for period in np.geomspace(CANDIDATE_MIN_S, upper, 400):
        phases = 2.0 * np.pi * waits / period
        c, s = np.cos(phases).mean(), np.sin(phases).mean()
        r = float(np.hypot(c, s))
        if r >= MIN_RESULTANT and abs(float(np.arctan2(s, c))) < np.pi / 6:
            best = (float(period), r)
    return best


def _trace_waits(spans: pl.DataFrame) -> np.ndarray:
    if spans.is_empty():
        return np.array([])
    waits = spans.filter(pl.col("name").is_in(list(WAIT_SPAN_NAMES)) & pl.col("closed").fill_null(True))
    return (waits["dur_us"].cast(pl.Float64) / 1e6).drop_nulls().to_numpy()


def _metric_waits(run: RunTables) -> np.ndarray:
    rows = live_training_rows(run.steps)
    for key in WAIT_METRIC_KEYS:
        if key in rows.columns and rows.schema[key].is_numeric():
            return rows[key].drop_nulls().to_numpy().astype(float)
    return np.array([])


def estimate_clock_cycle(run: RunTables, override_s: float | None = None) -> ClockCycle | None:
    """The clock cycle: the override, else a periodic fit of trace waits, else of metric waits."""
    if override_s is not None and float(override_s) > 0:
        return ClockCycle(float(override_s), "policy override clock_cycle_s", "high")
    for waits, source in ((_trace_waits(run.spans), "trace result-wait spans"), (_metric_waits(run), "metrics time/step waits")):
        fit = periodic_fit(waits)
        if fit is None:
            continue
        period, r = fit
        confidence = "high" if r >= 0.9 and len(waits) >= 20 and source.startswith("trace") else "medium" if r >= 0.9 else "low"
        return ClockCycle(round(period, 4), f"waits cluster at multiples ({source})", confidence, len(waits), round(r, 4))
    return None
