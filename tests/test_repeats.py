"""The step path's steady case (session/repeats.py), driven directly. Pure: numpy batches, a fake clock.

Ground truth for the steady lane is the path it shortcuts: the same calls counted by
``Repeats.count`` alone (itself checked against full calls in test_session.py) must leave the
session in the same state, and ``SameShapes`` must agree with ``signature_of`` on every batch.
"""

import dataclasses

import numpy as np
import pytest

from xla_keras.callback.traces import QUIET_FOR_GOOD, TraceWindows
from xla_keras.config import MonitorConfig
from xla_keras.core.signatures import SameShapes, signature_of
from xla_keras.core.types import Notes
from xla_keras.jit.modes import JitState
from xla_keras.session.repeats import REPEAT_DRAIN, SteadyLane
from xla_keras.session.session import Session

ON = JitState("on", active=True, reason="jit_compile=True")
F32 = np.float32


def arrays(rows, *, y=True, dtype=F32, weights=False):
    batch = [np.zeros((rows, 4), dtype)]
    if y:
        batch.append(np.zeros((rows, 1), F32))
    if weights:
        batch.append(np.ones((rows,), F32))
    return tuple(batch) if len(batch) > 1 else batch[0]


# ------------------------------------------------------------------ SameShapes against signature_of

BATCHES = {
    "x,y": arrays(8),
    "x,y other rows": arrays(7),
    "x,y float64": arrays(8, dtype=np.float64),
    "x,y,sw": arrays(8, weights=True),
    "x only": arrays(8, y=False),
    "x only other rows": arrays(6, y=False),
    "x,y as list": list(arrays(8)),
    "x,None": (np.zeros((8, 4), F32), None),
    "x,y,None": (np.zeros((8, 4), F32), np.zeros((8, 1), F32), None),
    "dict x,y": ({"a": np.zeros((8, 3), F32), "b": np.zeros((8, 5), np.int32)}, np.zeros((8, 1), F32)),
    "dict x,y reordered": ({"b": np.zeros((8, 5), np.int32), "a": np.zeros((8, 3), F32)}, np.zeros((8, 1), F32)),
    "dict x,y longer b": ({"a": np.zeros((8, 3), F32), "b": np.zeros((8, 6), np.int32)}, np.zeros((8, 1), F32)),
    "dict x,y other key": ({"a": np.zeros((8, 3), F32), "c": np.zeros((8, 5), np.int32)}, np.zeros((8, 1), F32)),
    "dict only": {"a": np.zeros((8, 3), F32)},
    "x,y int y": (np.zeros((8, 4), F32), np.zeros((8, 1), np.int64)),
}


def _copy(batch):
    """The same structure with new arrays of the same shapes (the next batch of a steady fit)."""
    if isinstance(batch, dict):
        return {key: value.copy() for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_copy(part) for part in batch)
    return None if batch is None else batch.copy()


@pytest.mark.parametrize("reference", sorted(BATCHES))
def test_same_shapes_matches_only_batches_of_the_same_signature(reference):
    same = SameShapes.of(BATCHES[reference])
    assert same is not None
    assert same.matches(_copy(BATCHES[reference]))  # the steady case: the lane takes it
    expected = signature_of(BATCHES[reference], None)
    for name, batch in BATCHES.items():
        if same.matches(batch):  # never a batch of another signature (x vs (x, None) may go the full path)
            assert signature_of(batch, None) == expected, name
        if signature_of(batch, None) != expected:
            assert not same.matches(batch), name


class Tensorish:
    """A tensor whose .shape is not a tuple (TensorFlow's TensorShape): not for the quick test."""

    def __init__(self, *shape):
        self.shape, self.dtype = list(shape), "float32"


@pytest.mark.parametrize(
    "batch",
    [
        (Tensorish(8, 4), np.zeros((8, 1), F32)),
        ([[1, 2], [3, 4]],),
        ({"a": [np.zeros((8, 3), F32)]},),
        ({1: np.zeros((8, 3), F32)},),
        (np.zeros((8, 4), F32), 3.0),
    ],
    ids=["tensor-shape", "nested-lists", "dict-of-list", "int-key", "python-scalar"],
)
def test_a_batch_the_quick_test_cannot_read_is_left_to_the_full_signature(batch):
    assert SameShapes.of(batch) is None


# ------------------------------------------------------------------ the lane against Repeats.count


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _session(clock):
    return Session(MonitorConfig(log_dir=None, update_freq="batch"), clock=clock)


def _calls(s, clock, batches, lane=None, deadline=float("inf"), budget=QUIET_FOR_GOOD):
    """JAX's step path as its wrapper and callback/step_path.py drive it: the lane first (when given), then
    the repeat path, then a full call. Returns how each call was taken."""
    taken = []
    for batch in batches:
        signature = signature_of(batch, None)
        if lane is not None and lane.budget and lane.take(batch, clock.now):
            taken.append("lane")
        else:
            if lane is not None:
                lane.disarm()  # the full path's first step (StepPath.began)
            if s.call_pending("train"):
                s.call_ended("train", ON, clock.now)
            s.sample_batches("train", [batch])
            if s.repeats.count("train", signature, ON, clock.now) is not None:
                taken.append("repeat")
                if lane is not None:
                    s.repeats.arm_lane(lane, "train", batch, budget, deadline)
            else:
                s.drain("train", end=clock.now)
                s.call_began("train", [signature], ON, clock.now)
                taken.append("full")
        clock.now += 0.01 if len(taken) % 7 else 0.5  # every 7th call slow
    if lane is not None:
        lane.disarm()  # a phase boundary (StepPath.settle)
    s.drain("train", end=clock.now)
    if s.call_pending("train"):
        s.call_ended("train", ON, clock.now)
    return taken


def _state(s):
    stats = s.phases["train"]
    snapshot = s.snapshot().phases["train"]
    return {
        "step": stats.step,
        "steps_run": stats.steps_run,
        "history": dict(stats.history.batches),
        "occurrences": dict(s.ledger.occurrences("train")),
        "sample_seen": stats.sample.seen,
        "steady": (stats.timing.steady_count, stats.timing.median_seconds, stats.slow_count),
        "last_activity": s.wall.last_activity,
        "snapshot": dataclasses.replace(snapshot, history=None),
        "signatures": dict(stats.history.signatures),
    }


def test_the_lane_leaves_the_session_as_the_repeat_path_would():
    batches = [arrays(8)] * 150 + [arrays(5)] + [arrays(8)] * 90 + [arrays(8, weights=True)] * 3
    a_clock, b_clock = Clock(), Clock()
    a, b = _session(a_clock), _session(b_clock)
    plain, laned = _calls(a, a_clock, batches), _calls(b, b_clock, batches, SteadyLane())
    assert plain.count("full") == laned.count("full")  # the calls the repeat path could not take either
    assert laned.count("lane") > 200 and "lane" not in plain
    assert _state(a) == _state(b)


def test_the_lane_stops_at_its_budget_a_drain_the_deadline_a_new_shape_and_the_sample():
    clock = Clock()
    s = _session(clock)
    _calls(s, clock, [arrays(8)] * 20)  # a full call, then repeats (the sample gave up on floats)
    lane = SteadyLane()

    def arm(budget=10, deadline=clock.now + 1.0):
        s.repeats.arm_lane(lane, "train", arrays(8), budget, deadline)

    arm(3)
    assert lane.budget == 3
    taken = [bool(lane.budget) and lane.take(arrays(8), clock.now) for _ in range(4)]  # as the wrapper asks
    assert taken == [True, True, True, False]  # the budget
    step = s.phases["train"].step
    arm()  # arming again counts the calls taken so far
    assert s.phases["train"].step == step + 3 and lane.starts == []
    assert lane.take(arrays(8), clock.now + 1.0) is False and lane.budget == 0  # the periodic flush is due
    arm()
    assert lane.take(arrays(7), clock.now) is False and lane.budget == 0  # another shape: the full path
    waiting = len(s.phases["train"].repeats)
    arm(QUIET_FOR_GOOD, float("inf"))
    assert lane.budget == REPEAT_DRAIN - waiting  # the next drain is the full path's
    sample = s.phases["train"].sample
    sample._next = sample.seen + 2  # the sample examines the batch after next
    arm(QUIET_FOR_GOOD, float("inf"))
    assert lane.budget == 2


def _armed(budget=10):
    """A session after 20 steady calls (a full one, then repeats), and a lane armed on them."""
    clock = Clock()
    s = _session(clock)
    _calls(s, clock, [arrays(8)] * 20)
    lane = SteadyLane()
    s.repeats.arm_lane(lane, "train", arrays(8), budget, float("inf"))
    return s, clock, lane


def test_a_failed_call_the_lane_took_is_uncounted_after_the_lane_counts_its_calls():
    s, clock, lane = _armed()
    assert all(lane.take(arrays(8), clock.now) for _ in range(5))
    lane.disarm()  # Lifecycle.call_failed: the lane first,
    s.call_failed("train")  # then the failed call (the fifth) is uncounted
    stats = s.phases["train"]
    assert stats.step == stats.steps_run == 24 and stats.history.batches[hash(signature_of(arrays(8), None))] == 24


def test_a_lane_is_not_armed_for_a_batch_the_quick_test_cannot_read():
    s, _, lane = _armed()
    assert lane.budget == 10
    s.repeats.arm_lane(lane, "train", (Tensorish(8, 4), np.zeros((8, 1), F32)), 10, float("inf"))
    assert lane.budget == 0


# ------------------------------------------------------------------ quiet_steps against _decide


class NoProfiler:
    def start_trace(self, directory):
        raise AssertionError("quiet_steps never starts a trace")

    def stop_trace(self):
        pass


@pytest.mark.parametrize(
    "profile, keras_profiles, multi_worker, phase, last_new_step",
    [
        ("auto", False, False, "train", 1),
        ("auto", False, False, "train", 30),
        ("auto", True, False, "train", 1),
        ("auto", False, True, "train", 1),
        ("auto", False, False, "test", 1),
        (None, False, False, "train", 1),
        ((20, 25), False, False, "train", 1),
        ((3, 4), False, False, "train", 1),
        ((20, 25), True, False, "train", 1),
    ],
)
def test_quiet_steps_counts_the_calls_for_which_no_window_would_open(
    profile, keras_profiles, multi_worker, phase, last_new_step
):
    traces = TraceWindows(profile, NoProfiler(), Notes())
    traces.begin_fit(first_step=1, keras_profiles=keras_profiles)
    for last_step in range(0, 60, 3):
        counted = traces.quiet_steps(phase, last_step, last_new_step, "/logs", multi_worker)
        # Ground truth: the window decision itself, one call at a time from the next step on.
        quiet = 0
        while quiet < 100 and (
            phase != "train"
            or profile is None
            or traces._decide(last_step + quiet, 1, False, last_new_step, multi_worker)[0] is None
        ):
            quiet += 1
        assert min(counted, 100) == quiet, (last_step, counted, quiet)


# ------------------------------------------------------------------ the drain's runs against one by one


@pytest.mark.parametrize("after_switch", [False, True])
def test_steady_steps_in_runs_end_as_one_by_one(after_switch):
    """The repeats' drain adds 64 times at once; the median, the slow steps, the epoch sums and the
    scalars come out as if each time were added alone (the path of a TensorFlow call's end)."""
    import random

    from xla_keras.core.timing import PhaseTiming
    from xla_keras.session.phases import PhaseStats
    from xla_keras.session.recording import StepRecorder

    rng = random.Random(3)
    times = []
    for step in range(1, 1500):
        seconds = rng.uniform(0.9e-3, 1.1e-3) * (1 + step / 1500)  # drifting, so the median moves
        if rng.random() < 0.03:
            seconds += rng.choice([0.004, 0.05, 0.3])  # noise, and slow steps
        times.append((seconds, step))
    config = MonitorConfig(log_dir=None, update_freq=3)
    signature = signature_of(arrays(8), None)
    outcomes = []
    for runs in (1, REPEAT_DRAIN):
        stats = PhaseStats(max_records=1000)
        if after_switch:
            stats.after_switch = PhaseTiming()
        recorder, scalars = StepRecorder({"train": stats}, {}, config.steps_per_scalar), []
        for i in range(0, len(times), runs):
            recorder.steady_steps("train", stats, times[i : i + runs], 1, signature, scalars)
        timing = stats.timing
        outcomes.append(
            (
                timing.steady_count,
                timing.steady_total,
                timing.median_seconds,
                [(s.step, s.seconds, s.steady_seconds) for s in stats.slow],
                stats.slow_count,
                stats.epoch_steady_sum,
                stats.epoch_steady_n,
                [(s.step, s.value) for s in scalars],
                None if stats.after_switch is None else stats.after_switch.median_seconds,
            )
        )
    one_by_one, in_runs = outcomes
    assert one_by_one[4] > 10  # slow steps were found, at several medians
    sums = (1, 5)  # float sums: the same terms, added in another order
    assert [in_runs[i] for i in sums] == pytest.approx([one_by_one[i] for i in sums], rel=1e-12)
    assert [v for i, v in enumerate(in_runs) if i not in sums] == [v for i, v in enumerate(one_by_one) if i not in sums]
