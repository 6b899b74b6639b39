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
from trace_doctor.knowledge.tinker import RESULT_WAIT_PHASES, SAMPLE_CALLS
from trace_doctor.model import RunTables

# Trace spans that measure waiting for the service (round trips), and metric keys that do.
WAIT_SPAN_NAMES = (*RESULT_WAIT_PHASES, *SAMPLE_CALLS, "train_step")
WAIT_METRIC_KEYS = ("time/step",)
WAIT_SPANS = pl.col("name").is_in(list(WAIT_SPAN_NAMES)) & pl.col("closed").fill_null(True)
MIN_WAITS = 8
# Candidate periods: from 10 ms (simulated services run fast) to a minute.
CANDIDATE_MIN_S = 0.01
CANDIDATE_MAX_S = 60.0
# R above this is a clear cluster at multiples (uniform phases give R ≈ 1/√n).
MIN_RESULTANT = 0.8
# Results arriving closer together than this came back in the same cycle.
SAME_CYCLE_S = 0.002
# A multiple of the cycle counts as observed when this share of the waits (and at least 2) sit on it.
MIN_MULTIPLE_SHARE = 0.05


@dataclass(frozen=True)
class ClockCycle:
    """A clock-cycle length with where it came from and how much to trust it."""

    seconds: float
    method: str
    confidence: str  # low | medium | high
    samples: int = 0
    resultant: float | None = None

    def to_dict(self) -> dict:
        return {
            "seconds": self.seconds,
            "method": self.method,
            "confidence": self.confidence,
            "samples": self.samples,
            "resultant": self.resultant,
        }


def periodic_fit(waits: np.ndarray) -> tuple[float, float] | None:
    """(period, R) of the longest period on a log grid whose R clears MIN_RESULTANT."""
    waits = waits[np.isfinite(waits) & (waits > 0)]
    if len(waits) < MIN_WAITS:
        return None
    upper = min(CANDIDATE_MAX_S, float(np.median(waits)) * 1.05)
    if upper <= CANDIDATE_MIN_S:
        return None
    screen_waits, screen_margin = 8192, 0.06  # subsample size; how far below the bar R must be to skip

    def phase_stats(sample: np.ndarray, period: float) -> tuple[float, float]:
        phases = 2.0 * np.pi * sample / period
        c, s = np.cos(phases).mean(), np.sin(phases).mean()
        return float(np.hypot(c, s)), abs(float(np.arctan2(s, c)))

    # Screen every candidate on an evenly spaced subsample (its mean vector is within ~0.01 of
    # the full one at 8k waits), then decide exactly, longest first, on all waits for each
    # candidate the screen cannot rule out by a wide (>5 sigma) margin: the same answer as
    # evaluating every candidate on every wait, without 400 passes over 100k+ waits.
    screen = (
        waits[np.linspace(0, len(waits) - 1, screen_waits).astype(np.int64)] if len(waits) > screen_waits else waits
    )
    for period in np.geomspace(CANDIDATE_MIN_S, upper, 400)[::-1]:
        if screen is not waits:
            r, angle = phase_stats(screen, period)
            if r < MIN_RESULTANT - screen_margin or angle > np.pi / 6 + screen_margin / max(r, 0.1):
                continue
        # A phase-0 cluster, not merely a tight cluster: the mean phase must sit near a multiple.
        r, angle = phase_stats(waits, period)
        if r >= MIN_RESULTANT and angle < np.pi / 6:
            return float(period), r
    return None


def spans_several_multiples(waits: np.ndarray, period: float) -> bool:
    """Whether the waits land on at least two different multiples of `period`, each repeatedly."""
    waits = waits[np.isfinite(waits) & (waits > 0)]
    multiples, counts = np.unique(np.round(waits / period).astype(int), return_counts=True)
    support = max(2, int(MIN_MULTIPLE_SHARE * len(waits)))
    return int(((multiples > 0) & (counts >= support)).sum()) >= 2


def _trace_waits(waits: pl.DataFrame) -> np.ndarray:
    """The wait spans' durations (`waits`: the WAIT_SPANS rows)."""
    if waits.is_empty():
        return np.array([])
    return (waits["dur_us"].cast(pl.Float64) / 1e6).drop_nulls().to_numpy()


def _metric_waits(run: RunTables) -> np.ndarray:
    rows = live_training_rows(run.steps)
    for key in WAIT_METRIC_KEYS:
        if key in rows.columns and rows.schema[key].is_numeric():
            return rows[key].drop_nulls().to_numpy().astype(float)
    return np.array([])


def _arrival_spacings(waits: pl.DataFrame) -> np.ndarray:
    """Time between consecutive result arrivals (ends of the WAIT_SPANS rows `waits`), per launch.

    Results are delivered at cycle boundaries, so arrivals are spaced by whole cycles even when
    every wait is equally long (a service that runs each request a fixed number of cycles late).
    Results of one cycle arrive together: spacings under SAME_CYCLE_S are not a spacing.
    """
    if waits.is_empty():
        return np.array([])
    ends = (
        waits.lazy()
        .select("segment", "end_us")
        .drop_nulls()
        .sort("segment", "end_us")
        .with_columns((pl.col("end_us").diff().over("segment") / 1e6).alias("gap"))
        .collect()
    )
    gaps = ends["gap"].drop_nulls().to_numpy()
    return gaps[gaps > SAME_CYCLE_S]


def _fit(waits: np.ndarray, source: str) -> ClockCycle | None:
    fit = periodic_fit(waits)
    if fit is None:
        return None
    period, r = fit
    # R is ~1/sqrt(n) for phases that do not cluster: 0.85 over 20+ waits is far beyond chance.
    confidence = (
        "high"
        if r >= 0.9 and len(waits) >= 20 and source.startswith("trace")
        else "medium"
        if r >= 0.9 or (r >= 0.85 and len(waits) >= 20)
        else "low"
    )
    method = f"waits cluster at multiples ({source})"
    if not spans_several_multiples(waits, period):
        # Waits that all take about the same time fit any divisor of it as well: the
        # estimate is only an upper bound on the cycle, not a measured period.
        confidence = "low"
        method = f"waits all near one value ({source}): an upper bound on the cycle"
    return ClockCycle(round(period, 4), method, confidence, len(waits), round(r, 4))


def estimate_clock_cycle(run: RunTables, override_s: float | None = None) -> ClockCycle | None:
    """The clock cycle: the override, else the first confident periodic fit of the trace's waits, of
    the spacing of result arrivals, of metric waits; else the first (low-confidence) upper bound."""
    if override_s is not None and float(override_s) > 0:
        return ClockCycle(float(override_s), "policy override clock_cycle_s", "high")
    bounds: list[ClockCycle] = []
    # Each source is read only when the ones before it gave no confident fit; both trace readings
    # use the same wait spans, read once and only the columns they use.
    wait_spans: list[pl.DataFrame] = []

    def waits() -> pl.DataFrame:
        if not wait_spans:
            wait_spans.append(run.spans_where(WAIT_SPANS, ["segment", "end_us", "dur_us"]))
        return wait_spans[0]

    for waits_of, source in (
        (lambda: _trace_waits(waits()), "trace result-wait spans"),
        (lambda: _arrival_spacings(waits()), "trace result arrivals"),
        (lambda: _metric_waits(run), "metrics time/step waits"),
    ):
        cycle = _fit(waits_of(), source)
        if cycle is None:
            continue
        if cycle.confidence != "low":
            return cycle
        bounds.append(cycle)
    return bounds[0] if bounds else None
