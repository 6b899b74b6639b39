"""Estimate the service's clock cycle from how long the client waited for results.

The Tinker service batches work in clock cycles, so result waits land near whole multiples of
one cycle. For a candidate period c the phases 2π·w/c of the waits w concentrate around zero
(mean resultant length R close to 1). The search is a Rayleigh periodogram (circular statistics,
Mardia & Jupp 2000, ch. 6): R over a log grid of periods, kept where the Rayleigh test rejects
uniform phases (p from Zar's approximation, Bonferroni over the grid). Jitter in the service's
timings spreads the phases: with Gaussian jitter of s·c, R ≈ exp(-2π²s²), 0.82 at 10 %, 0.45 at 20 %, so no fixed R bar
survives it; but a divisor c/k spreads k times faster, so the true period is the strongest peak,
and where noise is too small to tell them apart (R ≈ 1 for every divisor) the longest of the peaks
as strong as the best. The period is then refined by a Theil–Sen line through (multiple, wait)
(slope = cycle, intercept = the delivery offset; robust to the stalled waits that sit on no
multiple), and the spread of the residuals (1.4826·MAD, as a share of the cycle) grades the
confidence: the worse the fit, the lower. A user-supplied `clock_cycle_s` always wins.
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
# R above this is a clear cluster at multiples (uniform phases give R ≈ 1/√n): kept as the bar of
# the periodogram's screen, which only reads the strongest peak below it when it is significant.
MIN_RESULTANT = 0.8
# The Rayleigh test's p-value a periodogram peak must beat to be a cycle rather than chance, over the
# whole periodogram: each of its GRID_PERIODS candidates is one test (Bonferroni), or a few dozen
# irregular waits always fit some short period by chance.
MAX_RAYLEIGH_P = 1e-3
GRID_PERIODS = 400
# Peaks within this share of the strongest one's R are equally good fits: the longest of them is the
# cycle (the others are its divisors, indistinguishable without noise).
PEAK_TIE_SHARE = 0.9
# Residual spread of the refined fit, as a share of the cycle: up to the first a fit is tight (service
# jitter of a few percent), up to the second usable, up to the third only a rough (low) estimate; past
# it the waits sit on no multiple at all and there is no cycle.
TIGHT_JITTER, USABLE_JITTER, MAX_JITTER = 0.07, 0.15, 0.25
# Theil–Sen is quadratic in its points: the refinement reads an evenly spaced subsample of this many.
REFINE_POINTS = 1500
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


def rayleigh_p(r: float, n: int) -> float:
    """P-value of the Rayleigh test of uniform phases for mean resultant length `r` over `n` angles
    (Zar, Biostatistical Analysis, eq. 27.4)."""
    rn = r * n
    return float(min(1.0, np.exp(np.sqrt(1.0 + 4.0 * n + 4.0 * (n * n - rn * rn)) - (1.0 + 2.0 * n))))


def _phase_stats(sample: np.ndarray, periods: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R and |mean phase| of the waits for each candidate period (chunked: 400 periods x 8k waits)."""
    rs, angles = [], []
    # 2π·w once, not once per chunk: the same product each time, so the same phases (2π·w/c).
    turns = 2.0 * np.pi * sample
    chunks = np.array_split(periods, max(1, len(periods) // 50))
    # One buffer each for the phases and their cosines and sines, reused by every chunk.
    phases_of, trig_of = np.empty((len(chunks[0]), len(turns))), np.empty((len(chunks[0]), len(turns)))
    for chunk in chunks:
        phases, trig = phases_of[: len(chunk)], trig_of[: len(chunk)]
        np.divide(turns[None, :], chunk[:, None], out=phases)
        c = np.cos(phases, out=trig).mean(axis=1)
        s = np.sin(phases, out=trig).mean(axis=1)
        rs.append(np.hypot(c, s))
        angles.append(np.abs(np.arctan2(s, c)))
    return np.concatenate(rs), np.concatenate(angles)


def _screen_stats(sample: np.ndarray, periods: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_phase_stats for the periodogram's screen, with the cosines and sines in float32: each wait's phase is
    first reduced to its fraction of a turn in float64 (w/c - floor(w/c)), so float32 adds an error under
    1e-6 to R (measured: 5e-9 at 400 periods x 8192 waits), far below the screen's own sampling error
    (~1/√8192 ≈ 0.011); the float32 trigonometry is vectorised ~6x faster. The chosen period's R is
    computed exactly (_phase_stats)."""
    rs, angles = [], []
    chunks = np.array_split(periods, max(1, len(periods) // 50))
    turns_of = np.empty((len(chunks[0]), len(sample)))
    for chunk in chunks:
        turns = turns_of[: len(chunk)]
        np.divide(sample[None, :], chunk[:, None], out=turns)
        turns -= np.floor(turns)
        phases = (turns * (2.0 * np.pi)).astype(np.float32)
        c = np.cos(phases).mean(axis=1, dtype=np.float64)
        s = np.sin(phases).mean(axis=1, dtype=np.float64)
        rs.append(np.hypot(c, s))
        angles.append(np.abs(np.arctan2(s, c)))
    return np.concatenate(rs), np.concatenate(angles)


def periodic_fit(waits: np.ndarray) -> tuple[float, float] | None:
    """(period, R) of the periodogram's cycle: the longest grid period whose phases cluster around a
    multiple as strongly as the best one's, significantly (Rayleigh test); None when none does."""
    period = periodogram_period(waits)
    if period is None:
        return None
    r, _ = _phase_stats(waits[np.isfinite(waits) & (waits > 0)], np.array([period]))
    return period, float(r[0])


def periodogram_period(waits: np.ndarray) -> float | None:
    """The period periodic_fit chooses, without its R over every wait (the refined fit computes its own)."""
    waits = waits[np.isfinite(waits) & (waits > 0)]
    if len(waits) < MIN_WAITS:
        return None
    upper = min(CANDIDATE_MAX_S, float(np.median(waits)) * 1.05)
    if upper <= CANDIDATE_MIN_S:
        return None
    # The periodogram reads an evenly spaced subsample (its mean vector is within ~0.01 of the full
    # one at 8k waits); the chosen period's R is then computed on every wait.
    screen_waits = 8192
    screen = (
        waits[np.linspace(0, len(waits) - 1, screen_waits).astype(np.int64)] if len(waits) > screen_waits else waits
    )
    periods = np.geomspace(CANDIDATE_MIN_S, upper, GRID_PERIODS)
    rs, angles = _screen_stats(screen, periods)
    # A phase-0 cluster, not merely a tight cluster: the mean phase must sit near a multiple.
    valid = (angles < np.pi / 6) & np.array(
        [rayleigh_p(float(r), len(screen)) < MAX_RAYLEIGH_P / GRID_PERIODS for r in rs]
    )
    if not valid.any():
        return None
    best = float(rs[valid].max())
    chosen = np.flatnonzero(valid & (rs >= PEAK_TIE_SHARE * best))[-1]
    return float(periods[chosen])


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Theil–Sen line (Sen 1968): the median of the slopes of every pair of points with distinct x, and
    the intercept median(y) - slope·median(x), as scipy.stats.theilslopes computes them (numpy only:
    the JSON report never imports scipy, whose import costs the CI run its startup time)."""
    if len(x) > 1 and bool(np.all(x[1:] >= x[:-1])):
        slopes = _ordered_pair_slopes(x, y)
        if slopes is not None:
            slope = float(np.median(slopes, overwrite_input=True))
            return slope, float(np.median(y) - slope * np.median(x))
    # Every pair i < j as the upper triangle of the n x n differences: the same differences, in the
    # same (row-major) order as indexing by np.triu_indices, without its 1.1M-pair index arrays.
    n = len(x)
    dx = x[None, :] - x[:, None]
    pairs = np.triu(np.ones((n, n), dtype=bool), k=1) & (dx != 0)
    slope = float(np.median((y[None, :] - y[:, None])[pairs] / dx[pairs]))
    return slope, float(np.median(y) - slope * np.median(x))


# Up to this many distinct x, theil_sen reads the pairs block by block (the waits' multiples are a few).
MAX_X_BLOCKS = 64


def _ordered_pair_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """The slopes (y[j] - y[i]) / (x[j] - x[i]) of every pair i < j with x[i] < x[j], for x sorted:
    block by block of equal x, one block against all later ones, instead of n x n matrices of which
    most is the lower triangle and pairs of equal x. The same divisions of the same differences, so
    the same values (their order does not change a median); None past MAX_X_BLOCKS blocks."""
    bounds = np.flatnonzero(x[1:] != x[:-1]) + 1
    if len(bounds) >= MAX_X_BLOCKS:
        return None
    begins, ends = np.concatenate(([0], bounds)), np.concatenate((bounds, [len(x)]))
    sizes = (ends - begins) * (len(x) - ends)
    slopes = np.empty(int(sizes.sum()))
    at = 0
    for begin, end, size in zip(begins.tolist(), ends.tolist(), sizes.tolist(), strict=True):
        if size:
            block = slopes[at : at + size].reshape(end - begin, len(x) - end)
            np.divide(y[None, end:] - y[begin:end, None], x[None, end:] - x[begin:end, None], out=block)
            at += size
    return slopes


def refine_cycle(waits: np.ndarray, period: float) -> tuple[float, float, float] | None:
    """(cycle, offset, jitter): a Theil–Sen line wait = k·cycle + offset through the waits' nearest
    multiples k of `period`, and the residuals' robust spread (1.4826·MAD) as a share of the cycle."""
    waits = waits[np.isfinite(waits) & (waits > 0)]
    if len(waits) > REFINE_POINTS:
        # Polars' single-threaded sort of a trace's ~1M waits takes two thirds of numpy's; positive
        # finite floats have one order, so the same array.
        waits = pl.Series(values=waits).sort(multithreaded=False).to_numpy()
        waits = waits[np.linspace(0, len(waits) - 1, REFINE_POINTS).astype(np.int64)]
    else:
        waits = np.sort(waits)
    multiples = np.round(waits / period)
    keep = multiples >= 1
    waits, multiples = waits[keep], multiples[keep]
    if len(np.unique(multiples)) < 2:
        # One multiple only: no slope to fit; the period itself, and the spread around it.
        cycle, offset = period, 0.0
    else:
        cycle, offset = theil_sen(multiples, waits)
    if not np.isfinite(cycle) or cycle <= 0:
        return None
    residuals = waits - (multiples * cycle + offset)
    jitter = 1.4826 * float(np.median(np.abs(residuals - np.median(residuals)))) / cycle
    return float(cycle), float(offset), jitter


def spans_several_multiples(waits: np.ndarray, period: float) -> bool:
    """Whether the waits land on at least two different multiples of `period`, each repeatedly."""
    waits = waits[np.isfinite(waits) & (waits > 0)]
    nearest = np.round(waits / period).astype(int)
    support = max(2, int(MIN_MULTIPLE_SHARE * len(waits)))
    if len(nearest) and 0 <= nearest.min() and nearest.max() <= 4 * len(nearest):
        # Counted by value, without sorting every wait (np.unique sorts): the same counts.
        counts = np.bincount(nearest)
        multiples = np.arange(len(counts))
    else:
        multiples, counts = np.unique(nearest, return_counts=True)
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
    grid_period = periodogram_period(waits)
    if grid_period is None:
        return None
    refined = refine_cycle(waits, grid_period)
    if refined is None:
        return None
    period, _, jitter = refined
    if jitter > MAX_JITTER:
        return None
    finite = waits[np.isfinite(waits) & (waits > 0)]
    r_at, _ = _phase_stats(finite, np.array([period]))
    r = float(r_at[0])
    confidence = (
        "high"
        if jitter <= TIGHT_JITTER and len(waits) >= 20 and source.startswith("trace")
        else "medium"
        if jitter <= TIGHT_JITTER or (jitter <= USABLE_JITTER and len(waits) >= 20)
        else "low"
    )
    method = f"waits cluster at multiples ({source}; Theil-Sen fit, jitter {jitter:.0%} of the cycle)"
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
