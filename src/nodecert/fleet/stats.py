"""Robust statistics of a sample: median and the median absolute deviation (MAD).

The MAD is scaled by 1.4826 so that, for normally spread figures, it estimates the
standard deviation while one bad node (or ten) barely moves it: the spread a fleet's
outliers are measured against must not be widened by those outliers.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): MAD -> sigma for a normal distribution


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def robust_sigma(values: Sequence[float]) -> float:
    """1.4826 x MAD: the spread of the sample, robust to a minority of outliers."""
    m = median(values)
    return MAD_TO_SIGMA * median([abs(v - m) for v in values])


def deviations(value: float, med: float, sigma: float, *, floor: float = 0.0) -> float:
    """How many robust deviations `value` lies from `med` (signed). A spread below
    `floor` is taken as `floor`, so identical figures (MAD 0) do not make every tiny
    difference an infinite outlier; 0 spread and 0 floor: 0 when equal, else +-inf."""
    s = max(sigma, floor)
    if s <= 0:
        return 0.0 if value == med else (float("inf") if value > med else float("-inf"))
    return (value - med) / s


__all__ = ["MAD_TO_SIGMA", "deviations", "median", "robust_sigma"]
