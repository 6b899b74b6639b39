"""Training-health series of a run — losses, KL, entropy, gradient norms — and what is wrong with them:
non-finite values (the cookbook writes `NaN` / `Infinity`, kept as such by ingest) and loss spikes.

A spike is judged against the steps just before it (a trailing window's median and MAD), so the
early fall of a loss, a slow trend and batch-to-batch noise are not spikes; several spikes, or a
spike after which the series stays high, are worse than one bad batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from trace_doctor.derive.robust import MAD_TO_SIGMA
from trace_doctor.knowledge.tinker import (
    ENTROPY_NAME_MARK,
    GRAD_NAME_MARKS,
    KL_NAME_PREFIXES,
    LOSS_NAMES,
    TIME_PREFIX,
    is_eval_key,
)

# Losses a trainer computes itself (per token or per pair), preferred over the server's `loss:sum`,
# which scales with the batch's token count.
PRIMARY_LOSSES = frozenset({"train_mean_nll", "dpo_loss", "loss", "train_loss", "total_loss"})


def family(column: str) -> str | None:
    """loss | kl | entropy | grad for a training-health key (matched on its path components), else None."""
    if column.startswith(TIME_PREFIX) or "/time/" in column:
        return None
    parts = column.split("/")
    if parts[-1] in LOSS_NAMES:
        return "loss"
    for part in parts:
        if part.startswith(KL_NAME_PREFIXES):
            return "kl"
        if ENTROPY_NAME_MARK in part:
            return "entropy"
        if any(all(mark in part for mark in marks) for marks in GRAD_NAME_MARKS):
            return "grad"
    return None


def health_columns(frame: pl.DataFrame) -> dict[str, str]:
    """{column: family} of the numeric training-health columns, eval keys included (see is_eval)."""
    schema = frame.schema
    found = {}
    for column in frame.columns:
        if schema[column].is_numeric() and (kind := family(column)) is not None:
            found[column] = kind
    return found


def spike_columns(columns: dict[str, str]) -> list[str]:
    """Training series to scan for spikes: the trainer's own losses (the server's `loss:sum` only when
    there is none) and gradient norms."""
    training = {c: f for c, f in columns.items() if not is_eval_key(c)}
    primary = [c for c, f in training.items() if f == "loss" and c.split("/")[-1] in PRIMARY_LOSSES]
    losses = primary or [c for c, f in training.items() if f == "loss"]
    return sorted(losses) + sorted(c for c, f in training.items() if f == "grad")


def non_finite_steps(rows: pl.DataFrame, column: str) -> pl.DataFrame:
    """Steps where `column` is NaN or ±Infinity (null is no value, not a bad one): step, value text."""
    values = pl.col(column).cast(pl.Float64)
    return rows.filter(values.is_not_null() & ~values.is_finite()).select(
        "step",
        pl.when(values.is_nan())
        .then(pl.lit("NaN"))
        .when(values > 0)
        .then(pl.lit("Infinity"))
        .otherwise(pl.lit("-Infinity"))
        .alias("value"),
    )


@dataclass(frozen=True)
class Spike:
    """One upward excursion: its first step, peak, the local level before it, and how it ended."""

    step: int
    steps: tuple[int, ...]
    peak: float
    level: float
    sigmas: float | None
    recovered: bool | None  # None: the series ends before it could come back

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "steps": list(self.steps),
            "peak": self.peak,
            "level": self.level,
            "sigmas": None if self.sigmas is None else round(self.sigmas, 1),
            "recovered": self.recovered,
        }


def spikes(
    steps: np.ndarray,
    values: np.ndarray,
    *,
    window: int,
    min_sigmas: float,
    min_rise: float,
    recovery_steps: int,
) -> list[Spike]:
    """Upward spikes of a finite series (steps ascending): a value above the trailing window's median by
    more than both `min_sigmas` robust σ and `min_rise` × |median|; consecutive such steps are one spike."""
    found: list[Spike] = []
    i = window
    n = values.size
    while i < n:
        before = values[i - window : i]
        level = float(np.median(before))
        sigma = MAD_TO_SIGMA * float(np.median(np.abs(before - level)))
        limit = max(min_sigmas * sigma, min_rise * abs(level))
        if limit <= 0 or values[i] - level <= limit:
            i += 1
            continue
        j = i
        while j + 1 < n and values[j + 1] - level > limit:
            j += 1
        after = values[j + 1 : j + 1 + recovery_steps]
        recovered = None if after.size < recovery_steps else bool(np.median(after) - level <= limit / 2)
        if j + 1 >= n:
            recovered = False if j > i else None
        peak = float(values[i : j + 1].max())
        found.append(
            Spike(
                step=int(steps[i]),
                steps=tuple(int(s) for s in steps[i : j + 1]),
                peak=peak,
                level=level,
                sigmas=(peak - level) / sigma if sigma > 0 else None,
                recovered=recovered,
            )
        )
        i = j + 1 + (recovery_steps if recovered is False else 0)
    return found
