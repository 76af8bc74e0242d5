"""The backend-neutral core, driven directly: calls in, outcomes out. Pure (no TensorFlow, no Keras).

The clock is a fake (as Lightning's timing tests patch ``time.perf_counter``), so every duration
below is exact.
"""

import dataclasses

import pytest

from xla_keras.config import MonitorConfig
from xla_keras.core.signatures import Leaf
from xla_keras.core.tags import TAG_COMPILATIONS, TAG_COMPILE_TIME, TAG_DISTINCT_SIGNATURES, TAG_STEP_TIME
from xla_keras.core.types import CompileObservation
from xla_keras.jit.modes import JitState, ProbeFacts, verdict
from xla_keras.session.build import ReportContext, build_report, estimate_notes
from xla_keras.session.session import Session

ON = JitState("on", active=True, reason="jit_compile=True")
OFF = JitState("off", active=False, reason="jit='off'")
AUTO = JitState("autoclustering", active=None, reason="auto-clustering", autoclustering=True)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def sig(rows, length=8):
    return (Leaf("x", "float32", (rows, length)), Leaf("y", "float32", (rows, 1)))


def session(clock=None, **config):
    return Session(MonitorConfig(**{"log_dir": None, **config}), clock=clock or Clock())


def step(s, clock, signature, seconds, jit=ON, phase="train", observation=None):
    if s.between_drains:  # JAX: a call opens an interval when the device is idle, as the step path asks
        s.interval_call(phase, clock.now)
    plan = s.call_began(phase, [signature], jit)
    if observation is not None:
        s.call_observed(phase, observation)
    clock.now += seconds
    return plan, s.call_ended(phase, jit)


def test_a_new_signature_is_worth_a_probe_and_a_known_one_is_not():
    clock = Clock()
    s = session(clock)
    plan, outcome = step(s, clock, sig(8), 0.5, observation=CompileObservation((0.4,), "profiler"))
    assert plan.probe and plan.new_indices == (0,) and plan.first_step == 1
    assert [(c.step, c.seconds, c.source) for c in outcome.compiles] == [(1, 0.4, "profiler")]
    assert {sc.tag for sc in outcome.scalars} == {TAG_COMPILE_TIME, TAG_COMPILATIONS, TAG_DISTINCT_SIGNATURES}
    plan, outcome = step(s, clock, sig(8), 0.001)
    assert not plan.probe and plan.new == () and outcome.compiles == []
    assert s.phases["train"].steps_run == 2 and s.phases["train"].step == 2


def test_without_a_probe_a_compile_is_estimated_from_step_time_against_the_final_median():
    clock = Clock()
    s = session(clock)
    step(s, clock, sig(8), 0.300)  # no observation: timing
    for _ in range(9):
        step(s, clock, sig(8), 0.010)
    [record] = s.phases["train"].records
    assert record.source == "timing" and record.step_seconds == pytest.approx(0.300)
    snapshot = s.snapshot()
    # The report's estimate uses the final steady median (0.010): 0.290; the stored record is untouched.
    assert snapshot.phases["train"].records[0].seconds == pytest.approx(0.290)
    assert snapshot.phases["train"].compile_seconds == pytest.approx(0.290)
    assert s.phases["train"].records[0] is record and snapshot.phases["train"].records[0] is not record


def test_building_a_report_twice_changes_nothing_it_reads():
    clock = Clock()
    s = session(clock)
    step(s, clock, sig(8), 0.3)
    step(s, clock, sig(8), 0.01)
    context = ReportContext("on", ON, ProbeFacts(used=True))
    first = build_report(s.snapshot(), context).to_dict()
    second = build_report(s.snapshot(), context).to_dict()
    assert first == second


def test_steady_steps_make_the_step_time_scalar_at_the_chosen_frequency():
    clock = Clock()
    s = session(clock, update_freq=2)
    step(s, clock, sig(8), 0.3, observation=CompileObservation((0.25,)))
    scalars = [sc for _ in range(4) for sc in step(s, clock, sig(8), 0.002)[1].scalars]
    assert [(sc.tag, sc.step) for sc in scalars] == [(TAG_STEP_TIME, 2), (TAG_STEP_TIME, 4)]
    epoch = session(Clock(), update_freq="epoch")
    assert all(sc.tag != TAG_STEP_TIME for sc in step(epoch, epoch.clock, sig(8), 0.002)[1].scalars)


def test_end_of_run_writes_the_epoch_mean_and_the_steady_step():
    """TensorFlow: the epoch's mean steady step and the phase's median, from the steps timed on their own;
    the time before the run's first step (the epoch's data iterator) is the run's start, no step's."""
    clock = Clock()
    s = session(clock)
    s.run_began("train", clock.now)
    clock.now += 0.010  # the epoch's data iterator
    step(s, clock, sig(8), 0.3, observation=CompileObservation((0.25,)))
    for seconds in (0.002, 0.004):
        step(s, clock, sig(8), seconds)
    clock.now += 0.002  # the end of the epoch's data
    s.drained("train", clock.now, boundary=True)
    scalars = {sc.tag: sc.value for sc in s.end_of_run("train")}
    assert scalars["xla/step_time_ms"] == pytest.approx(3.0)  # (0.002 + 0.004) / 2 steps
    assert scalars["xla/steady_step_time_ms"] == pytest.approx(3.0)
    assert s.phases["train"].timing.step_median_seconds == pytest.approx(0.003)  # what slow steps are judged by
    waits = s.phases["train"].waits
    assert waits.run_starts == 1 and waits.run_start_seconds == pytest.approx(0.010)


def test_a_probed_step_that_saw_no_compile_records_nothing_and_is_not_steady():
    clock = Clock()
    s = session(clock)
    step(s, clock, sig(8), 0.3, jit=AUTO, observation=CompileObservation(()))
    assert s.phases["train"].compile_count == 0 and s.phases["train"].timing.steady_count == 0


def test_a_storm_opens_at_the_threshold_th_new_signature_and_once():
    clock = Clock()
    s = session(clock, storm_threshold=3, storm_window=10)
    opened = []
    for length in (8, 9, 10, 11, 12):
        pending = step(s, clock, sig(8, length), 0.1)[1].storm
        opened.append(pending)
        if pending is not None:  # as the monitor does, at once
            storm = s.open_storm("train", *pending, action="warn")
    assert opened == [None, None, (3, 3, 1), None, None]
    assert storm.varying[0]["path"] == "x" and storm.varying[0]["axis"] == 1 and storm.compiles == 3


def test_a_smaller_last_batch_is_no_storm_until_another_batch_follows():
    clock = Clock()
    s = session(clock, storm_threshold=2)
    step(s, clock, sig(8), 0.1)
    _, outcome = step(s, clock, sig(3), 0.1)  # maybe the epoch's partial last batch
    assert outcome.storm is None
    s.end_of_run("train")  # it was
    _, outcome = step(s, clock, sig(8), 0.1)
    assert outcome.storm is None
    step(s, clock, sig(5), 0.1)
    _, outcome = step(s, clock, sig(8), 0.1)  # a smaller batch mid-epoch: it counts now
    assert outcome.storm is not None


def test_a_failed_call_forgets_its_new_signatures_so_they_compile_again():
    clock = Clock()
    s = session(clock)
    s.call_began("train", [sig(8)], ON)
    s.call_failed("train")
    plan = s.call_began("train", [sig(8)], ON)
    assert plan.new_indices == (0,) and s.ledger.distinct_count("train") == 1


def test_calls_inside_a_trace_window_are_not_steady_and_their_records_say_why_they_are_estimated():
    clock = Clock()
    s = session(clock)
    plan = s.call_began("train", [sig(8)], ON)
    s.call_in_trace_window("train")
    clock.now += 0.3
    outcome = s.call_ended("train", ON)
    record = outcome.compiles[0]
    assert record.source == "timing" and record.estimated_because == "trace_window"
    assert s.phases["train"].timing.steady_count == 0
    assert not s.notes.texts  # the note comes from the records, when the report is built
    assert plan.new


def test_past_the_probes_budget_a_new_signature_is_timed_from_its_step_and_says_why():
    from xla_keras.session.session import PROBE_ALLOWANCE_SECONDS, PROBE_SHARE

    clock = Clock()
    s = session(clock)
    s.wall.begin()
    plan, _ = step(s, clock, sig(8), 0.5, observation=CompileObservation((0.45,), "profiler"))
    assert plan.probe
    clock.now += 10.0  # 10.5 s monitored: the probes may take 0.1 s + 1% of it
    budget = PROBE_ALLOWANCE_SECONDS + PROBE_SHARE * s.wall.seconds()
    s.own_work("probes", budget + 0.001)
    plan, outcome = step(s, clock, sig(9), 0.5)
    assert not plan.probe and plan.new_indices == (0,)
    (record,) = outcome.compiles
    assert record.source == "timing" and record.estimated_because == "probe_budget" and record.step == 2
    # Auto-clustering's probes are the only way its compiles are seen: they run whatever the budget.
    assert step(s, clock, sig(10), 0.5, jit=AUTO)[0].probe
    # The monitored time grows, the budget with it: the next new signature is probed again.
    clock.now += 20.0
    assert step(s, clock, sig(11), 0.5, observation=CompileObservation((0.45,), "profiler"))[0].probe
    # Where probes cost nothing (JAX's compile events), there is no budget.
    free = Session(MonitorConfig(log_dir=None), clock=clock, probe_budget=False)
    free.own_work("probes", 10.0)
    assert step(free, clock, sig(8), 0.5, observation=CompileObservation((0.45,), "profiler"))[0].probe
    notes = estimate_notes(s.snapshot().phases["train"].records)
    assert any("1 compile time(s) estimated" in n and "compile probes had used their budget" in n for n in notes)


def test_the_monitors_own_work_in_a_run_counts_from_the_runs_begin():
    s = session()
    s.own_work("probes", 0.3)  # before the epoch: not its own
    s.run_began("train", 100.0)
    s.own_work("probes", 0.2)
    s.own_work("writes", 0.05)
    assert s.own_in_run("train") == pytest.approx(0.25)
    s.run_began("test", 101.0)  # validation inside the epoch: its own run
    s.own_work("writes", 0.01)
    assert s.own_in_run("test") == pytest.approx(0.01) and s.own_in_run("train") == pytest.approx(0.26)


def test_nothing_pending_ends_nothing():
    s = session()
    assert s.call_ended("train", ON) is None
    s.call_began("train", [sig(8)], ON)
    s.call_skipped("train")
    assert not s.call_pending("train") and s.call_ended("train", ON) is None


def test_a_function_rebuilt_outside_the_monitor_is_noted_once_per_rebuild():
    s = session()
    first, second = object(), object()
    s.function_installed("train", None, first, model_id=1, rebuilt=False, xla_now=True)
    s.function_installed("train", first, first, model_id=1, rebuilt=False, xla_now=True)  # the same one
    s.function_installed("train", second, second, model_id=1, rebuilt=False, xla_now=True)  # model.compile
    assert s.phases["train"].rebuilds == 1
    s.functions_forced(["train"])  # the monitor's own rebuild: not the user's
    s.function_installed("train", object(), object(), model_id=1, rebuilt=True, xla_now=True)
    assert s.phases["train"].rebuilds == 1


@pytest.mark.parametrize(
    "state, probe, counts, expected",
    [
        (ON, ProbeFacts(used=True), dict(measured=2, compiled=2, steps=10, fell_back=False), True),
        (OFF, ProbeFacts(used=True), dict(measured=2, compiled=2, steps=10, fell_back=False), True),  # saw it
        (OFF, ProbeFacts(used=True), dict(measured=2, compiled=2, steps=10, fell_back=True), False),
        (AUTO, ProbeFacts(used=True), dict(measured=3, compiled=3, steps=10, fell_back=False), True),
        (AUTO, ProbeFacts(used=True), dict(measured=0, compiled=0, steps=10, fell_back=False), False),
        (
            AUTO,
            ProbeFacts(off="under MultiWorkerMirroredStrategy"),
            dict(measured=0, compiled=2, steps=10, fell_back=False),
            None,
        ),
        (AUTO, ProbeFacts(busy=True), dict(measured=0, compiled=2, steps=10, fell_back=False), None),
        (
            AUTO,
            ProbeFacts(used=True, blind=True, framework="TensorFlow 2.16.2"),
            dict(measured=0, compiled=0, steps=10, fell_back=False),
            None,
        ),  # a blind probe is not a zero
    ],
)
def test_the_jit_verdict_never_reads_silence_as_an_answer(state, probe, counts, expected):
    active, reason = verdict(state, probe, **counts)
    assert active is expected and reason.startswith(state.reason)


def test_probe_labels():
    assert ProbeFacts(used=True).label == "profiler"
    assert ProbeFacts(busy=True).label == "timing"
    assert ProbeFacts(used=True, busy=True).label == "profiler+timing"
    assert ProbeFacts(off="x").label == "timing"


def test_the_snapshot_is_frozen():
    s = session()
    snapshot = s.snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.wall_seconds = 1.0


def test_a_compile_on_the_last_step_of_a_run_is_marked_last_batch():
    clock = Clock()
    s = session(clock)
    for rows in (8, 8, 8, 4):  # a partial last batch compiles at the epoch's last step
        step(
            s,
            clock,
            sig(rows),
            0.3 if rows == 4 or clock.now == 100.0 else 0.01,
            observation=CompileObservation((0.25,), "profiler") if rows == 4 or clock.now == 100.0 else None,
        )
    s.end_of_run("train")
    step(s, clock, sig(8, length=9), 0.3, observation=CompileObservation((0.25,), "profiler"))  # epoch 2, step 5
    step(s, clock, sig(8), 0.01)
    s.end_of_run("train")
    records = s.phases["train"].records
    assert [(r.step, r.last_batch) for r in records] == [(1, False), (4, True), (5, False)]
    assert s.snapshot().phases["train"].records[1].last_batch is True


# ------------------------------------------------------------------ repeats (JAX's fast path)


def _jax_calls(s, clock, signatures, seconds, jit=ON):
    """JAX's step path: a call ends when the next begins; a repeat takes the fast path."""
    taken = []
    for signature in signatures:
        if s.call_pending("train"):
            s.call_ended("train", jit, clock.now)
        scalars = s.repeats.count("train", signature, jit, clock.now)
        if scalars is None:
            s.drain("train", end=clock.now)
            s.call_began("train", [signature], jit, clock.now)
        taken.append(scalars is not None)
        clock.now += seconds
    return taken


@pytest.mark.parametrize(
    "update_freq, scalar_steps", [("epoch", []), (2, [2, 4, 6, 8, 10]), ("batch", list(range(2, 11)))]
)
def test_repeats_are_counted_at_once_and_timed_like_full_calls(update_freq, scalar_steps):
    clock = Clock()
    s = session(clock, update_freq=update_freq)
    taken = _jax_calls(s, clock, [sig(8)] * 10, 0.01)
    assert taken == [False] + [True] * 9  # the first is new; the rest repeat it
    stats = s.phases["train"]
    assert stats.step == stats.steps_run == 10 and s.ledger._occurrences["train"][hash(sig(8))] == 10
    assert stats.history.batches[hash(sig(8))] == 10
    scalars = s.drain("train", end=clock.now, timed=True)
    # Step 1 compiled (new); steps 2-10 are steady, 10 ms each, in order, at their own steps.
    assert stats.timing.steady_count == 9 and stats.timing.median_seconds == pytest.approx(0.01)
    assert [sc.step for sc in scalars if sc.tag == TAG_STEP_TIME] == [st for st in scalar_steps if st > 1]


def test_the_last_repeat_before_a_boundary_is_untimed_and_a_changed_shape_takes_the_full_path():
    clock = Clock()
    s = session(clock)
    assert _jax_calls(s, clock, [sig(8)] * 4 + [sig(4)] + [sig(8)], 0.01) == [False, True, True, True, False, False]
    s.drain("train", end=clock.now, timed=False)
    s.call_ended("train", ON, clock.now, timed=False)  # the last (full) call, at the boundary
    stats = s.phases["train"]
    assert stats.step == 6
    assert stats.timing.steady_count == 3  # repeats 2-4 ended at the next call's start; 5 and 6 are new / changed


def test_a_failed_repeat_is_uncounted_and_a_repeat_that_compiled_is_a_compile_at_its_step():
    clock = Clock()
    s = session(clock)
    _jax_calls(s, clock, [sig(8)] * 3, 0.01)
    s.call_failed("train")  # the third call (a repeat) raised
    stats = s.phases["train"]
    assert stats.step == stats.steps_run == 2 and stats.history.batches[hash(sig(8))] == 2
    _jax_calls(s, clock, [sig(8)], 0.01)
    outcome = s.repeat_observed("train", CompileObservation((0.2,), "jax"))
    assert [(c.step, c.seconds, c.source) for c in outcome.compiles] == [(3, 0.2, "jax")]
    assert stats.repeats[-1][2] is False  # its time is no steady step


def test_no_repeat_while_a_call_is_pending_or_under_auto_clustering():
    clock = Clock()
    s = session(clock)
    s.call_began("train", [sig(8)], ON, clock.now)
    assert s.repeats.count("train", sig(8), ON, clock.now) is None  # the first call has not ended
    s.call_ended("train", ON, clock.now + 0.1)
    assert s.repeats.count("train", sig(8), AUTO, clock.now) is None
    assert s.repeats.count("train", sig(8), ON, clock.now) == []


def test_a_failed_full_call_is_not_a_step_and_is_not_pending():
    clock = Clock()
    s = session(clock)
    s.call_began("train", [sig(8)], ON, clock.now)
    s.call_failed("train")
    assert not s.call_pending("train")
    assert s.call_ended("train", ON, clock.now + 1) is None  # a later boundary does not count it
    assert s.phases["train"].steps_run == 0 and s.phases["train"].step == 0


# ------------------------------------------------------------------ between drains (JAX)


def jax_session(clock):
    return Session(MonitorConfig(log_dir=None, update_freq="batch"), clock=clock, between_drains=True)


def test_under_asynchronous_dispatch_the_steady_step_waits_for_a_drain_and_is_withheld_until_then():
    """Calls that only queue steps (0.5 ms apart) say nothing of a step's time: until the device drains the
    figure is withheld, with the reason, and nothing is written for it."""
    clock = Clock()
    s = jax_session(clock)
    s.run_began("train", clock.now)
    step(s, clock, sig(8), 0.3, observation=CompileObservation((0.25,), "jax"))
    s.interval_spoiled("train", "compile")  # as the step path does for a call that compiles
    s.drained("train", clock.now)  # the wrapper waited after the compile: the next interval starts clean
    for _ in range(40):
        step(s, clock, sig(8), 0.0005)  # dispatch times
    report = build_report(s.snapshot(), ReportContext("on", ON, ProbeFacts(used=True), backend="jax"))
    assert report.steady_step_seconds is None and report.slow_step_count == 0
    assert report.step_timing["train"]["withheld"].startswith("no interval between drains yet")
    assert "withheld (no interval between drains yet" in report.summary()
    assert all(sc.tag != "xla/steady_step_time_ms" for sc in s.end_of_run("train"))
    # The device drains at the run's end: 40 steps took 1.2 s, not 40 x 0.5 ms.
    clock.now += 1.2 - 40 * 0.0005
    scalars = s.drained("train", clock.now, boundary=True)
    assert [(sc.tag, sc.step) for sc in scalars] == [("xla/step_time_ms", 41)]
    assert scalars[0].value == pytest.approx(30.0)
    report = build_report(s.snapshot(), ReportContext("on", ON, ProbeFacts(used=True), backend="jax"))
    assert report.steady_step_seconds == pytest.approx(0.030)
    assert report.step_timing["train"] == {"basis": "between_drains", "steps": 40, "intervals": 1, "withheld": None}
    assert report.slow_step_count == 0  # the quickly queued steps are no base for "slow"


def test_under_asynchronous_dispatch_a_host_stall_is_a_slow_step_once_the_steady_step_is_known():
    clock = Clock()
    s = jax_session(clock)
    s.run_began("train", clock.now)
    step(s, clock, sig(8), 0.3, observation=CompileObservation((0.25,), "jax"))
    s.interval_spoiled("train", "compile")
    s.drained("train", clock.now)
    for i in range(20):
        step(s, clock, sig(8), 0.25 if i == 5 else 0.01)  # the loop stalled 250 ms on step 7
    s.drained("train", clock.now, boundary=True)
    (slow,) = s.snapshot().phases["train"].slow
    assert (slow.step, slow.basis) == (7, "host") and slow.seconds == pytest.approx(0.25)


def test_after_a_compile_the_next_interval_opens_at_the_next_call():
    """After the wait that follows a compile the monitor records it (the ledger, the cost capture): that
    work is no step's time, so the interval opens where the phase's next call begins, not at the wait."""
    clock = Clock()
    s = jax_session(clock)
    s.run_began("train", clock.now)
    step(s, clock, sig(8), 0.3, observation=CompileObservation((0.25,), "jax"))
    s.interval_spoiled("train", "compile")
    s.drained("train", clock.now)
    clock.now += 0.5  # the monitor's own work at the compile's batch end
    for _ in range(10):
        step(s, clock, sig(8), 0.002)
    s.drained("train", clock.now, boundary=True)
    report = build_report(s.snapshot(), ReportContext("on", ON, ProbeFacts(used=True), backend="jax"))
    assert report.steady_step_seconds == pytest.approx(0.002)
    assert report.step_timing["train"]["steps"] == 10


def test_a_repeat_the_monitor_waited_after_is_no_host_time():
    """A sync after a steady call (counted as a repeat) drains the device's queue: the wait is in that call's
    start-to-start time, never a slow step of the loop's."""
    clock = Clock()
    s = jax_session(clock)
    s.run_began("train", clock.now)
    step(s, clock, sig(8), 0.3, observation=CompileObservation((0.25,), "jax"))
    s.interval_spoiled("train", "compile")
    s.drained("train", clock.now)
    s.call_ended("train", ON)  # (the compile call, ended)
    for _ in range(10):  # repeats, as the JAX step path counts them: their starts only
        assert s.repeats.count("train", sig(8), ON, clock.now) is not None
        clock.now += 0.036
    s.drained("train", clock.now)  # the sparse sync after the last one
    clock.now += 1.2  # (the wait: 30 queued steps)
    assert s.repeats.count("train", sig(8), ON, clock.now) is not None
    s.drain("train")
    s.drained("train", clock.now + 0.036, boundary=True)
    assert s.phases["train"].slow_count == 0


def test_a_fallback_compares_steps_measured_alike_on_each_side_of_the_switch():
    """TensorFlow: the run's interval is cut at the switch (no interval holds both modes), and the
    comparison rests on steps timed on their own, so a run's set-up (here a 0.3 s epoch start) that
    falls on one side only does not tilt it."""
    clock = Clock()
    s = session(clock)
    s.run_began("train", clock.now)
    clock.now += 0.3  # the epoch's set-up: the XLA side's interval holds it
    step(s, clock, sig(8), 0.2)  # the compile
    for _ in range(25):
        step(s, clock, sig(8), 0.001)
    s.fell_back("train", 26, "switched XLA off")
    s.function_installed("train", before="xla", token="no xla", model_id=1, rebuilt=True, xla_now=False)
    clock.now += 0.05  # the monitor's work on the switch: no step's
    step(s, clock, sig(8), 0.1, jit=OFF)  # the function without XLA traces: the first call is no steady step
    for _ in range(25):
        step(s, clock, sig(8), 0.002, jit=OFF)
    s.drained("train", clock.now, boundary=True)
    view = s.snapshot().fallback
    assert view["xla_steady_step_seconds"]["train"] == pytest.approx(0.001)
    assert view["steady_step_seconds_after"]["train"] == pytest.approx(0.002)
    assert view["xla_steady_steps"]["train"] == 25 and view["steady_steps_after"]["train"] == 25
    # The steady step the report states is the interval after the switch alone.
    assert s.phases["train"].timing.median_seconds == pytest.approx(0.002)


def image(rows, size):
    return (Leaf("x", "float32", (rows, size, size, 3)), Leaf("y", "int32", (rows,)))


def budget_advice(sizes, applied=()):
    """The compile budget's advice on a fit whose batches come in these sizes, each compiling for 0.9 s."""
    clock = Clock()
    s = session(clock, compile_budget_floor=0)
    s.applied_fixes = applied
    for size in sizes:
        step(s, clock, image(8, size), 1.0, observation=CompileObservation((0.9,), "profiler"))
        for _ in range(3):
            step(s, clock, image(8, size), 0.01)
    return s.snapshot().advice


def test_a_fit_on_a_fixs_output_is_not_advised_to_pad_again():
    from xla_keras.storms.fixes import AppliedLengths

    (advice,) = budget_advice([24, 28, 32, 40])  # the images as they came: over the budget, pad them
    assert advice.fix["kind"] == "pad_to_lengths" and advice.fix["lengths"] == [32, 40]
    assert budget_advice([32, 40]) == ()  # the pad fix's output: the same fix would change nothing
    # The exact alternative's output (batches of one size each) is the same shapes: recognised as applied.
    by_size = AppliedLengths("bucket_by_size", (("x", 1, (24, 28, 32, 40)), ("x", 2, (24, 28, 32, 40))))
    assert budget_advice([24, 28, 32, 40], (by_size,)) == ()


def _autoclustered_fit(s, clock, epochs=2):
    """A fit under auto-clustering of 3 full batches of 32 rows and a partial one of 4, per epoch: the first
    step compiles TensorFlow's variable initialiser (one module, a one-off program) and 3 clusters; the
    partial batch compiles the 3 clusters again; then nothing compiles."""
    s.call_segment_began("fit")
    first = CompileObservation((0.06, 0.9, 0.4, 0.3), "profiler", programs=("initialize_variables", None, None, None))
    for epoch in range(epochs):
        for i, rows in enumerate((32, 32, 32, 4)):
            observation = None
            if epoch == 0 and i == 0:
                observation = first
            elif epoch == 0 and i == 3:
                observation = CompileObservation((0.5, 0.35, 0.25), "profiler")
            elif epoch == 0:
                observation = CompileObservation(())  # auto-clustering probes the first occurrences
            step(s, clock, sig(rows), 0.002 if observation is None else 0.5, jit=AUTO, observation=observation)
        s.end_of_run("train")


def test_the_compile_budget_counts_only_the_compiles_past_the_first_signature_and_only_the_steps():
    """Every module of the call's first signature is the first compile (auto-clustering compiles one per
    cluster), and a one-off program's module is no step compile: the budget weighs the partial batch's 3
    modules (1.1 s), not 2.85 s (every module but the first record, as it did before)."""
    clock = Clock()
    s = session(clock, compile_budget=0.01, compile_budget_floor=0.0)
    _autoclustered_fit(s, clock)
    stats = s.phases["train"]
    assert stats.compile_count == 7 and (stats.outside_compiles, stats.outside_seconds) == (1, 0.06)
    (advice,) = s.snapshot().advice
    assert (advice.compiles, advice.recompiles) == (6, 3)
    assert advice.compile_seconds == pytest.approx(2.7)
    assert advice.recompile_seconds == pytest.approx(1.1)
    assert advice.advice.startswith(
        "Compile budget (train, fit 1): training compiled 6 XLA modules (3 for its first signature), 1.10 s "
        "for the 3 past it = "
    )
    report = build_report(s.snapshot(), ReportContext("autoclustering", AUTO, ProbeFacts(used=True)))
    assert report.compilation_count["train"] == 7  # every module XLA compiled, the initialiser's too
    assert report.outside_step_compilations == {"train": {"count": 1, "seconds": 0.06}}
    assert [c.outside_step for c in report.compilations] == ["initialize_variables"] + [None] * 6
    assert [c.step for c in report.compilations] == [1, 1, 1, 1, 4, 4, 4]
    assert "outside the step: train 1 module (60 ms): TensorFlow's one-off initialiser" in str(report)


def test_a_call_whose_compiles_are_all_at_its_first_signature_is_never_over_budget():
    clock = Clock()
    s = session(clock, compile_budget=0.01, compile_budget_floor=0.0)
    s.call_segment_began("fit")
    first = CompileObservation((0.06, 0.9, 0.4), "profiler", programs=("initialize_variables", None, None))
    step(s, clock, sig(32), 0.5, jit=AUTO, observation=first)
    step(s, clock, sig(32), 0.3, jit=AUTO, observation=CompileObservation((0.3,), "profiler"))  # a lazy cluster
    for _ in range(5):
        step(s, clock, sig(32), 0.002, jit=AUTO)
    assert s.phases["train"].compile_count == 4
    assert s.snapshot().advice == ()
