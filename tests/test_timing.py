"""Unit tests for xla_keras.timing (pure)."""

import math

import pytest

from xla_keras.core.timing import (
    MIN_STEADY_SAMPLES,
    SLOW_FACTOR,
    SLOW_MIN_EXCESS_SECONDS,
    PhaseTiming,
    break_even_steps,
    excess_over_steady,
    share,
)


def filled(n, seconds, window=1024):
    t = PhaseTiming(window=window)
    for _ in range(n):
        t.add_steady(seconds)
    return t


# ------------------------------------------------------------------ median


def test_median_is_none_without_samples():
    assert PhaseTiming().median_seconds is None


def test_median_is_exact_at_every_read():
    t = PhaseTiming()
    expected = [1.0, 2.0, 2.0, 2.5, 3.0]
    for sample, want in zip([1.0, 3.0, 2.0, 10.0, 4.0], expected):
        t.add_steady(sample)
        assert t.median_seconds == want


def test_median_is_exact_between_lazy_refreshes():
    # 40 samples cross the every-32 refresh on the step path; reads stay exact.
    t = PhaseTiming()
    for i in range(1, 41):
        t.add_steady(float(i))
    assert t.median_seconds == 20.5
    t.add_steady(1000.0)
    assert t.median_seconds == 21.0


def test_median_covers_only_the_window():
    t = PhaseTiming(window=3)
    for s in (1.0, 2.0, 3.0, 100.0, 200.0):
        t.add_steady(s)
    assert t.median_seconds == 100.0
    assert t.steady_count == 5
    assert t.steady_total == 306.0


def test_ring_buffer_is_bounded():
    t = PhaseTiming(window=100)
    for i in range(10_000):
        t.add_steady(i * 0.001)
    assert len(t._recent) == 100
    assert t.steady_count == 10_000
    assert t.steady_total == pytest.approx(sum(i * 0.001 for i in range(10_000)))
    # Median of the last 100 samples, 9.900 .. 9.999 s.
    assert t.median_seconds == pytest.approx(9.9495)


def test_window_of_one_is_allowed():
    t = PhaseTiming(window=1)
    t.add_steady(5.0)
    t.add_steady(7.0)
    assert t.median_seconds == 7.0


@pytest.mark.parametrize("window", [0, -1, -100])
def test_window_below_one_raises(window):
    with pytest.raises(ValueError):
        PhaseTiming(window=window)


# ------------------------------------------------------------------ is_slow


def test_constants_are_as_documented():
    assert (SLOW_FACTOR, SLOW_MIN_EXCESS_SECONDS, MIN_STEADY_SAMPLES) == (5.0, 0.02, 8)


@pytest.mark.parametrize("n", range(MIN_STEADY_SAMPLES))
def test_never_slow_before_min_steady_samples(n):
    assert filled(n, 0.01).is_slow(10.0) is False


def test_slow_once_min_steady_samples_are_in():
    assert filled(MIN_STEADY_SAMPLES, 0.01).is_slow(10.0) is True


@pytest.mark.parametrize(
    "median, step, expected",
    [
        (0.01, 0.1, True),  # 10x and 90 ms above: both
        (0.1, 0.6, True),  # 6x and 500 ms above: both
        (0.001, 0.015, False),  # 15x but only 14 ms above: factor only
        (0.1, 0.3, False),  # 200 ms above but only 3x: excess only
        (0.001, 0.004, False),  # neither
        (0.0078125, 0.0390625, False),  # exactly 5x (not more), 31 ms above
        (0.0078125, 0.0390626, True),  # just over 5x, 31 ms above
    ],
)
def test_is_slow_needs_both_factor_and_excess(median, step, expected):
    t = filled(MIN_STEADY_SAMPLES, median)
    assert t.median_seconds == median
    assert t.is_slow(step) is expected


def test_is_slow_uses_a_median_of_the_min_steady_samples():
    t = PhaseTiming()
    t.add_steady(0.5)  # warm-up outlier
    for _ in range(MIN_STEADY_SAMPLES - 1):
        t.add_steady(0.001)
    # Do not read t.median_seconds here: reading it refreshes the cached median.
    # (Regression: the step-path median used to be refreshed at samples 1, 33, 65...)
    # The median of the 8 samples is 1 ms; a 300 ms step is 300x and 299 ms above it.
    assert t.is_slow(0.3) is True


# ------------------------------------------------------------------ helpers


@pytest.mark.parametrize(
    "step, steady, expected",
    [
        (0.5, None, 0.5),
        (0.5, 0.125, 0.375),
        (0.05, 0.1, 0.0),
        (0.1, 0.1, 0.0),
    ],
)
def test_excess_over_steady(step, steady, expected):
    assert excess_over_steady(step, steady) == expected


@pytest.mark.parametrize(
    "part, whole, expected",
    [
        (1.0, 4.0, 0.25),
        (0.0, 4.0, 0.0),
        (4.0, 4.0, 1.0),
        (5.0, 4.0, 1.0),
        (1.0, 0.0, None),
        (1.0, -2.0, None),
    ],
)
def test_share(part, whole, expected):
    assert share(part, whole) == expected


@pytest.mark.parametrize(
    "compile_s, xla, baseline, expected",
    [
        (1.0, None, 0.03, None),
        (1.0, 0.01, None, None),
        (1.0, None, None, None),
        (1.0, 0.03, 0.03, math.inf),
        (1.0, 0.05, 0.03, math.inf),
        (2.0, 0.25, 0.5, 8.0),
        (0.0, 0.25, 0.5, 0.0),
    ],
)
def test_break_even_steps(compile_s, xla, baseline, expected):
    assert break_even_steps(compile_s, xla, baseline) == expected


def test_break_even_steps_inexact_values():
    assert break_even_steps(1.0, 0.01, 0.03) == pytest.approx(50.0)


# ------------------------------------------------------------------ intervals


def test_a_weighted_median_of_one_step_samples_is_the_median():
    import statistics

    from xla_keras.core.timing import weighted_median

    for values in ([1.0], [1.0, 3.0], [3.0, 1.0, 2.0], [5.0, 1.0, 3.0, 2.0]):
        assert weighted_median([(v, 1) for v in values]) == statistics.median(values)
    # An interval of 10 steps outweighs one of 3: the middle step is one of the 10.
    assert weighted_median([(1.0, 10), (5.0, 3)]) == 1.0
    assert weighted_median([(1.0, 5), (5.0, 5)]) == 3.0
    assert weighted_median([]) is None


def test_steps_timed_alone_make_the_steady_step_and_a_stall_is_no_share_of_it():
    """TensorFlow: each step's own time is known, so the steady step is their median: a stall between steps
    is one slow step, never spread over every step as a run's wall time over its steps would."""
    t = PhaseTiming()
    for _ in range(20):
        t.add_steady(0.001)  # each step's own time (TensorFlow)
    t.add_steady(0.0012)
    t.add_interval(0.0050, 10)  # a run's wall time per step with a stall in it: not the steady step
    assert t.median_seconds == pytest.approx(0.001)
    assert t.basis == "per_step" and t.median_samples == 21 and t.median_intervals == 0
    assert t.step_median_seconds == pytest.approx(0.001) and t.estimate_base == pytest.approx(0.001)
    assert t.slow_above() == pytest.approx(0.001 + SLOW_MIN_EXCESS_SECONDS)  # against the step's own time


def test_between_drains_only_the_intervals_judge():
    t = PhaseTiming()
    assert t.slow_above() == math.inf
    t.add_interval(0.030, 40)  # JAX: no step is timed on its own
    assert t.basis == "between_drains" and t.median_seconds == pytest.approx(0.030)
    assert t.step_median_seconds is None and t.estimate_base == pytest.approx(0.030)
    assert t.slow_above() == pytest.approx(SLOW_FACTOR * 0.030)


def test_a_drained_interval_is_a_sample_only_when_clean():
    from xla_keras.core.timing import DrainedInterval

    interval = DrainedInterval()
    assert interval.close(1.0, 10) is None  # never opened
    interval.open_at(10.0, 100)
    assert interval.open
    assert interval.close(12.0, 150) == (pytest.approx(0.04), 50) and not interval.open
    interval.open_at(20.0, 150)
    interval.spoil("compile")
    assert interval.close(22.0, 200) is None  # a compile's device time is unknown: no sample
    interval.open_at(30.0, 200)
    interval.exclude(1.5, 1)  # TensorFlow: a compiling call, taken out by its own time
    assert interval.close(32.5, 251) == (pytest.approx(0.02), 50)
    interval.open_at(40.0, 251)
    assert interval.close(40.0, 251) is None  # no step
