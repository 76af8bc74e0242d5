"""Step times: steady vs compile steps, unexplained slow steps, break-even.

Pure and bounded: a phase keeps its last ``window`` steady step times in a
ring buffer plus running totals, so a fit of any length costs constant memory.
The median is recomputed lazily (every ``_MEDIAN_EVERY`` samples on the step
path) because sorting on every ~1 ms step would cost more than the step.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Deque, List, Optional

_MEDIAN_EVERY = 128
# A known-signature step is "slow" only when it is both many times the median
# and far above it in absolute terms: a 1 ms step that takes 3 ms is noise, a
# 1 ms step that takes 300 ms is an event worth a line in the report.
SLOW_FACTOR = 5.0
SLOW_MIN_EXCESS_SECONDS = 0.02
MIN_STEADY_SAMPLES = 8
# A comparison of two steady medians (XLA before a fallback against after it, a break-even, compare's
# "vs off") is stated only when each side rests on at least this many steady steps: one step in the
# middle of a storm once made XLA look 2-3 times slower than it was.
MIN_COMPARE_STEPS = 20


class PhaseTiming:
    """Steady step times of one phase (train, test or predict)."""

    def __init__(self, window: int = 1024):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        self._recent: Deque[float] = deque(maxlen=window)
        self.steady_count = 0
        self.steady_total = 0.0
        self._median: Optional[float] = None
        self._median_at = -1

    def add_steady(self, seconds: float) -> None:
        self._recent.append(seconds)
        self.steady_count += 1
        self.steady_total += seconds
        # Exact while the sample is small (cheap to sort, and the median moves
        # most then); every _MEDIAN_EVERY samples after that.
        if self.steady_count <= 2 * _MEDIAN_EVERY or self.steady_count - self._median_at >= _MEDIAN_EVERY:
            self._refresh()

    def add_steady_run(self, values: List[float]) -> None:
        """``add_steady`` for each of ``values``, at once: callers keep runs within
        ``samples_before_refresh`` (the repeats' drain: 64 samples at a time)."""
        if not values:
            return
        self._recent.extend(values)
        self.steady_count += len(values)
        self.steady_total += sum(values)
        if self.steady_count <= 2 * _MEDIAN_EVERY or self.steady_count - self._median_at >= _MEDIAN_EVERY:
            self._refresh()

    def samples_before_refresh(self) -> int:
        """How many ``add_steady`` calls from now until one refreshes the median (at least 1): the
        median, hence ``slow_above``, is the same for every sample before that one."""
        if self.steady_count + 1 <= 2 * _MEDIAN_EVERY:
            return 1
        return max(1, _MEDIAN_EVERY - (self.steady_count - self._median_at))

    def slow_above(self) -> float:
        """The step time above which a step is slow: ``SLOW_FACTOR`` times the steady median and
        ``SLOW_MIN_EXCESS_SECONDS`` above it (inf while too few steps are steady)."""
        if self.steady_count < MIN_STEADY_SAMPLES or self._median is None:
            return float("inf")
        return max(SLOW_FACTOR * self._median, self._median + SLOW_MIN_EXCESS_SECONDS)

    def _refresh(self) -> None:
        self._median = median(self._recent) if self._recent else None
        self._median_at = self.steady_count

    @property
    def median_seconds(self) -> Optional[float]:
        """Median of the recent steady steps (exact at read time)."""
        if self._median_at != self.steady_count:
            self._refresh()
        return self._median

    @property
    def median_samples(self) -> int:
        """The steady steps the median rests on (the last ``window`` of them)."""
        return len(self._recent)

    @property
    def recent_median_seconds(self) -> Optional[float]:
        """The median as last refreshed on the step path (at most _MEDIAN_EVERY samples old):
        no sort, for per-step decisions."""
        return self._median

    def is_slow(self, seconds: float) -> bool:
        """Whether a known-signature step ran far above the steady median.

        Uses the median cached on the step path: no sort per step.
        """
        return seconds > self.slow_above()


def excess_over_steady(step_seconds: float, steady_seconds: Optional[float]) -> float:
    """The timing-fallback estimate of a compile: step wall time minus the
    steady median (or the whole step when no steady step is known yet)."""
    if steady_seconds is None:
        return step_seconds
    return max(0.0, step_seconds - steady_seconds)


def comparable(*steps: Optional[int]) -> bool:
    """Whether each side of a comparison rests on at least ``MIN_COMPARE_STEPS`` steady steps."""
    return all((n or 0) >= MIN_COMPARE_STEPS for n in steps)


def too_few_words(sides: str) -> str:
    """Why a comparison is withheld, e.g. ``too_few_words("3 with XLA, 40 without")``."""
    return f"too few steady steps to compare ({sides}; {MIN_COMPARE_STEPS} needed on each side)"


def share(part: float, whole: float) -> Optional[float]:
    return None if whole <= 0 else min(1.0, part / whole)


def break_even_steps(
    compile_seconds: float, xla_step: Optional[float], baseline_step: Optional[float]
) -> Optional[float]:
    """Steps after which XLA's faster steps have paid for its compiles.

    None when unknown; ``float('inf')`` when XLA's steps are not faster, so it
    never pays back (common on small CPUs: say so rather than hide it).
    """
    if xla_step is None or baseline_step is None:
        return None
    gain = baseline_step - xla_step
    if gain <= 0:
        return float("inf")
    return compile_seconds / gain
