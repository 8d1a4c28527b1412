"""Small statistics used everywhere: percentiles with one stated method, and stability tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The q-th percentile (0–100) by linear interpolation between closest ranks (numpy's default,
    the same method as Excel's PERCENTILE.INC), or None for no data. NaNs are not allowed."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def mean(values: Sequence[float] | np.ndarray) -> float | None:
    if len(values) == 0:
        return None
    return float(np.mean(np.asarray(values, dtype=np.float64)))


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over mean; +inf when undefined (fewer than two values or zero mean)."""
    if len(values) < 2:
        return math.inf
    arr = np.asarray(values, dtype=np.float64)
    m = float(arr.mean())
    if m <= 0:
        return math.inf
    return float(arr.std(ddof=1)) / m


def is_stable(window_rates: Sequence[float], *, last: int = 3, max_cv: float = 0.05) -> bool:
    """True when the last ``last`` throughput estimates agree within ``max_cv`` (coefficient of variation).

    A level's throughput is estimated over consecutive, equal, non-overlapping windows; once the most
    recent ``last`` of them vary by less than ``max_cv`` of their mean, more time would not change the
    level's figure by more than that, so the level may end early.
    """
    if last < 2:
        raise ValueError("stability needs at least two windows to compare")
    if len(window_rates) < last:
        return False
    return coefficient_of_variation(window_rates[-last:]) <= max_cv
