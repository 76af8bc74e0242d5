"""Comparing two modes' step times robustly. Pure.

A mode's steps as a median with its interquartile range and the notch of a box
plot (median +- 1.58 IQR / sqrt(n): McGill, Tukey and Larsen 1978, roughly 95%
for the difference of two medians), and a ratio of two modes over paired
rounds as the geometric mean with Student's t interval on the log ratios.
"""

from __future__ import annotations

import math
from statistics import median
from typing import NamedTuple, Optional, Sequence

NOTCH = 1.58  # median +- NOTCH * IQR / sqrt(n): the notch of a box plot


class Spread(NamedTuple):
    """A mode's steady steps: median, interquartile range, count and the notch's half width. ``n`` counts
    the samples (the notch's); ``steps`` the steps they measured (a sample is one step, or under JAX one
    interval between drains)."""

    median: float
    iqr: float
    n: int
    steps: int = 0

    @property
    def half_notch(self) -> float:
        return NOTCH * self.iqr / math.sqrt(self.n)


def spread(values: Sequence[float], steps: Optional[int] = None) -> Optional[Spread]:
    """The samples' spread; ``steps``: the steps they measured (their count when each is one step)."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    return Spread(
        median(ordered), _quantile(ordered, 0.75) - _quantile(ordered, 0.25), n, n if steps is None else steps
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def separated(a: Spread, b: Spread) -> bool:
    """The two medians' notches do not overlap: different at roughly 95% confidence."""
    return abs(a.median - b.median) > a.half_notch + b.half_notch


# Student's t, two-sided 95%, by degrees of freedom (1..12); beyond: 2.18.
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18)


class Ratio(NamedTuple):
    """on/off step-time ratio over the rounds: geometric mean and its 95% interval (t on the logs)."""

    value: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, logs: Sequence[float]) -> "Ratio":
        n = len(logs)
        mean = sum(logs) / n
        if n < 2:
            return cls(math.exp(mean), 0.0, math.inf, n)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = _T95[min(n - 1, len(_T95)) - 1] * sd / math.sqrt(n)
        return cls(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)

    @property
    def excludes_one(self) -> bool:
        return self.high < 1 or self.low > 1

    @property
    def gain(self) -> float:
        """How much faster the faster mode is (0.05: 5%)."""
        return max(self.value, 1 / self.value) - 1

    def within(self, share: float) -> bool:
        """The whole interval lies within +-share of equal."""
        return self.n >= 2 and self.low >= 1 / (1 + share) and self.high <= 1 + share

    def words(self) -> str:
        if self.n < 2:
            return f"{self.value:.3f}"
        return f"{self.value:.3f} (95% interval {self.low:.3f}-{self.high:.3f})"

    def to_dict(self) -> dict:
        return {
            "on_over_off": self.value,
            "low": self.low if self.n >= 2 else None,
            "high": self.high if self.n >= 2 else None,
            "rounds": self.n,
        }
