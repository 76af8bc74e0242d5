"""Step times: steady vs compile steps, unexplained slow steps (stalls), break-even.

The steady step is what one step takes in the fit with compiles, profiler windows, stalls and the
monitor's own work left out; stalls are reported apart, as what they are (``SlowStep``, and the phase's
``Waits``: the input pipeline, each run's start). How a phase's steps are timed (``BASES``):

* ``"per_step"`` (TensorFlow): Keras turns every step's logs into floats at its batch end, so the
  device has finished each step there, and a step's own time is known: from one batch end to the next
  (Keras's loop, the other callbacks and the input pipeline's wait included, the monitor's own work at
  its batch end left out). The steady step is the median of those times: one stall between steps (a
  pipeline that waited, a callback, the machine) is one slow step, named with where it sat, never a
  share of every step. A run's start (its begin hook to its first call) is no step's time.
* ``"between_drains"`` (JAX): Keras dispatches steps asynchronously, and a step's start-to-start time
  is mostly the time Python took to queue it. The device's time is known only over an interval that
  begins and ends with the device drained (``DrainedInterval``): a run, cut by the monitor's sparse
  syncs (about once a second, and after each compile, whose interval is left out). The steady step is
  the intervals' time over their steps; an interval that held a stall (a call whose host time, start to
  next start, was far above the steady step: the loop itself stalled) or the monitor's own work is left
  out, and so is one more than ``OUTLIER_FACTOR`` times the median interval (a machine asleep).

Pure and bounded: a phase keeps its last ``window`` samples in ring buffers plus running totals, so a fit
of any length costs constant memory. The median of the steps timed on their own is recomputed lazily
(every ``_MEDIAN_EVERY`` samples on the step path): sorting on every ~1 ms step would cost more than the
step.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Deque, List, Optional, Tuple

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
# An interval whose step is this many times the intervals' median step is no steady sample (see above).
OUTLIER_FACTOR = 10.0
# JAX: host times kept per interval to find a stall in it (an interval is about a second of steps).
MAX_HOST_TIMES = 4096
# How a phase's step times were measured (see the module's docstring).
PER_STEP, BETWEEN_DRAINS = "per_step", "between_drains"
BASES = (PER_STEP, BETWEEN_DRAINS)


class PhaseTiming:
    """Steady step times of one phase (train, test or predict): steps timed on their own (``add_steady``,
    TensorFlow: the base slow steps are judged against) and intervals (``add_interval``: the steady
    step the report states)."""

    def __init__(self, window: int = 1024):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        self._recent: Deque[float] = deque(maxlen=window)
        self._intervals: Deque[Tuple[float, int]] = deque(maxlen=window)  # (seconds per step, steps)
        self.steady_count = 0  # steps timed on their own
        self.steady_total = 0.0
        self.interval_count = 0
        self.interval_steps = 0
        self._median: Optional[float] = None  # of the steps timed on their own, refreshed lazily
        self._median_at = -1
        self._interval_steady: Optional[Tuple[float, int, int]] = None  # (seconds a step, steps, intervals)

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

    def add_interval(self, seconds_per_step: float, steps: int) -> None:
        """One interval: ``steps`` steady steps that took ``seconds_per_step`` each on average (its wall
        time over its steps). Intervals are few (a run each, and about one a second under JAX)."""
        if steps < 1:
            return
        self._intervals.append((seconds_per_step, steps))
        self.interval_count += 1
        self.interval_steps += steps
        self._interval_steady = steady_of(self._intervals)

    @property
    def basis(self) -> str:
        """How the steps were timed: ``PER_STEP`` (each on its own), or ``BETWEEN_DRAINS`` (intervals only)."""
        return BETWEEN_DRAINS if self._intervals and not self.steady_count else PER_STEP

    def samples_before_refresh(self) -> int:
        """How many ``add_steady`` calls from now until one refreshes the median (at least 1): the
        median, hence ``slow_above``, is the same for every sample before that one."""
        if self.steady_count + 1 <= 2 * _MEDIAN_EVERY:
            return 1
        return max(1, _MEDIAN_EVERY - (self.steady_count - self._median_at))

    def slow_above(self) -> float:
        """The step time above which a step is slow: ``SLOW_FACTOR`` times the steady step and
        ``SLOW_MIN_EXCESS_SECONDS`` above it; the steps timed on their own are the base where there are
        some, else the intervals (inf while too few steps are steady)."""
        if self.steady_count >= MIN_STEADY_SAMPLES and self._median is not None:
            base = self._median
        elif self._interval_steady is not None and self._interval_steady[1] >= MIN_STEADY_SAMPLES:
            base = self._interval_steady[0]
        else:
            return float("inf")
        return max(SLOW_FACTOR * base, base + SLOW_MIN_EXCESS_SECONDS)

    def _refresh(self) -> None:
        self._median = median(self._recent) if self._recent else None
        self._median_at = self.steady_count

    @property
    def median_seconds(self) -> Optional[float]:
        """The steady step: the median of the steps timed on their own where there are some (TensorFlow:
        a stall between steps is one slow step, not a share of every step), else the intervals' time over
        their steps (``steady_of``: JAX, whose steps are timed between drains)."""
        if self.steady_count:
            return self.step_median_seconds
        if self._interval_steady is not None:
            return self._interval_steady[0]
        return None

    @property
    def step_median_seconds(self) -> Optional[float]:
        """The median of the steps timed on their own (None under JAX, where none are)."""
        if self._median_at != self.steady_count:
            self._refresh()
        return self._median

    @property
    def estimate_base(self) -> Optional[float]:
        """What a compile estimated from its step's time subtracts: a steady step timed on its own, else
        the steady step."""
        step = self.step_median_seconds
        return step if step is not None else self.median_seconds

    @property
    def median_samples(self) -> int:
        """The steady steps the steady step rests on (the last ``window`` samples')."""
        if self.steady_count:
            return len(self._recent)
        if self._interval_steady is not None:
            return self._interval_steady[1]
        return 0

    @property
    def compare_seconds(self) -> Optional[float]:
        """The step a comparison of two modes (XLA before a fallback against after it) rests on: the
        median of the steps timed on their own where there are some (TensorFlow), so both sides are
        measured alike (a run's set-up falls in one side's interval only: a 0.3 s epoch start once made
        the XLA steps look 2.5x faster than separate fits measured); else the intervals' (JAX)."""
        step = self.step_median_seconds
        return step if step is not None else self.median_seconds

    @property
    def compare_samples(self) -> int:
        """The steps ``compare_seconds`` rests on."""
        return len(self._recent) if self._recent else self.median_samples

    @property
    def median_intervals(self) -> int:
        """The intervals the steady step rests on (0: on steps timed one by one)."""
        if self.steady_count or self._interval_steady is None:
            return 0
        return self._interval_steady[2]

    @property
    def recent_median_seconds(self) -> Optional[float]:
        """The median of the steps timed on their own as last refreshed on the step path (at most
        _MEDIAN_EVERY samples old), else the intervals': no sort, for per-step decisions."""
        return self._median if self._median is not None else self.median_seconds

    def is_slow(self, seconds: float) -> bool:
        """Whether a known-signature step ran far above the steady median.

        Uses the median cached on the step path: no sort per step.
        """
        return seconds > self.slow_above()


def weighted_median(samples: "Deque[Tuple[float, int]] | List[Tuple[float, int]]") -> Optional[float]:
    """The median step of samples that each stand for ``steps`` steps of one time: the middle step's
    time when every step is listed by its sample's time (with one step each: ``statistics.median``)."""
    ordered = sorted(samples)
    total = sum(steps for _, steps in ordered)
    if not total:
        return None
    half, seen = total / 2, 0
    for i, (seconds, steps) in enumerate(ordered):
        seen += steps
        if seen > half:
            return seconds
        if seen == half:
            return (seconds + ordered[i + 1][0]) / 2
    return ordered[-1][0]


def steady_of(samples: "Deque[Tuple[float, int]] | List[Tuple[float, int]]") -> Optional[Tuple[float, int, int]]:
    """(seconds a step, steps, intervals) of intervals that each held ``steps`` steps of one mean time:
    their total time over their steps, those more than ``OUTLIER_FACTOR`` times the median left out."""
    middle = weighted_median(samples)
    if middle is None:
        return None
    kept = [(seconds, steps) for seconds, steps in samples if seconds <= OUTLIER_FACTOR * middle]
    steps = sum(n for _, n in kept)
    return sum(seconds * n for seconds, n in kept) / steps, steps, len(kept)


class DrainedInterval:
    """One phase's open interval: from a moment the device had nothing of the phase left to run
    (``start``, after ``step``) to the next such moment. A compile, a profiler window or a switch of the
    step function inside it spoils it under JAX (their device time is not observable); TensorFlow, where
    each call's time is known, takes such calls out (``exclude``)."""

    __slots__ = ("start", "step", "spoiled", "excluded_seconds", "excluded_steps", "host")

    def __init__(self) -> None:
        self.start: Optional[float] = None  # None: closed (the phase's next run or call opens one)
        self.step = 0
        self.spoiled: Optional[str] = None
        self.excluded_seconds = 0.0
        self.excluded_steps = 0
        self.host: List[float] = []  # JAX: the host times of the interval's calls (start to next start)

    @property
    def open(self) -> bool:
        return self.start is not None

    def open_at(self, start: float, step: int) -> None:
        self.start, self.step, self.spoiled = start, step, None
        self.excluded_seconds, self.excluded_steps = 0.0, 0
        self.host = []

    def note_host(self, seconds: float, step: int) -> None:
        """JAX: the host time of the call that ended at ``step`` (start to next start), when it is one of the
        interval's calls: a stall among them makes the interval no steady sample (``close``)."""
        if self.start is not None and step > self.step and len(self.host) < MAX_HOST_TIMES:
            self.host.append(seconds)

    def stalled(self, at: float, step: int, steady: Optional[float] = None) -> bool:
        """A call of the interval (closing at ``at`` after ``step``) whose host time was far above a step:
        the loop itself stalled there (the input pipeline, a callback) while the device ran dry. A step is
        the phase's ``steady`` step where known, else the interval's time without that call over its other
        steps. (A call's host time is mostly its dispatch; one that waited for the device's queue waited
        about a step: neither is a stall.)"""
        base = self.step_base(at, step, steady)
        return base is not None and max(self.host) > max(SLOW_FACTOR * base, base + SLOW_MIN_EXCESS_SECONDS)

    def step_base(self, at: float, step: int, steady: Optional[float] = None) -> Optional[float]:
        """What a step takes, to judge the interval's host times by: the phase's ``steady`` step, else the
        interval's time without its longest call over its other steps (None: too few to tell)."""
        if not self.host or self.start is None:
            return None
        if steady is not None:
            return steady
        steps = step - self.step - self.excluded_steps
        if steps < 2:
            return None
        return max(0.0, at - self.start - self.excluded_seconds - max(self.host)) / (steps - 1)

    def spoil(self, why: str) -> None:
        if self.start is not None and self.spoiled is None:
            self.spoiled = why

    def exclude(self, seconds: float, steps: int) -> None:
        """A call that is no steady step (a compile, a probe), timed on its own: out of the interval."""
        if self.start is not None:
            self.excluded_seconds += seconds
            self.excluded_steps += steps

    def close(self, at: float, step: int, steady: Optional[float] = None) -> Optional[Tuple[float, int]]:
        """The device drained at ``at`` with the phase's steps up to ``step`` dispatched: (seconds per steady
        step, steady steps) when the interval was clean and held one, else None (a compile, a profiler window,
        a stall: ``stalled`` against the phase's ``steady`` step). Closed after."""
        start, first, spoiled = self.start, self.step, self.spoiled
        if spoiled is None and self.stalled(at, step, steady):
            spoiled = "a stall"
        self.start, self.spoiled, self.host = None, None, []
        steps = step - first - self.excluded_steps
        if start is None or spoiled is not None or steps <= 0:
            return None
        seconds = at - start - self.excluded_seconds
        return (seconds / steps, steps) if seconds > 0 else None


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


def ms_text(seconds: Optional[float]) -> str:
    """``12.3 ms`` below a second, ``1.23 s`` from a second up; ``n/a`` when unknown."""
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.2f} s"
