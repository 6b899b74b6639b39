"""Robust statistics, one definition each: median, MAD, robust σ and coefficient of variation.

Every function takes any iterable of numbers (a list, a numpy array, a polars Series); missing
values (None, a Series' nulls) are left out. The median of an even count is the mean of the two
middle values, as `statistics.median` computes it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl

# The MAD of a normal sample times this estimates its σ (1 / Φ⁻¹(3/4)).
MAD_TO_SIGMA = 1.4826


def _array(values: Iterable[float | None]) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    if isinstance(values, pl.Series):
        return values.drop_nulls().cast(pl.Float64).to_numpy()
    return np.array([v for v in values if v is not None], dtype=np.float64)


def median(values: Iterable[float | None]) -> float | None:
    """The median, or None when there is no value."""
    x = _array(values)
    return float(np.median(x)) if x.size else None


def mad(values: Iterable[float | None]) -> float:
    """Median absolute deviation from the median (0.0 when there is no value)."""
    x = _array(values)
    return float(np.median(np.abs(x - np.median(x)))) if x.size else 0.0


def robust_sigma(values: Iterable[float | None]) -> float:
    """σ estimated from the MAD: insensitive to a few outliers."""
    return MAD_TO_SIGMA * mad(values)


def robust_cv(values: Iterable[float | None]) -> float:
    """Robust coefficient of variation, 1.4826·MAD / median (0.0 when the median is not positive)."""
    x = _array(values)
    centre = median(x)
    return robust_sigma(x) / centre if centre is not None and centre > 0 else 0.0
