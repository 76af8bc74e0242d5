"""Unit tests for the compile ledger and the TensorFlow trace parsing (pure): trace -> per-module compile seconds."""

import pytest

from xla_keras.backends.tensorflow.trace_events import TraceEvent, compile_seconds_from_trace
from xla_keras.core.signatures import Leaf
from xla_keras.session.ledger import CompileLedger

PS_PER_MS = 10**9  # profiler times are in picoseconds: 1 ms = 1e9 ps
MAIN = (1, 101)


def ev(name, start_ms, dur_ms, thread=MAIN):
    return TraceEvent(thread, name, round(start_ms * PS_PER_MS), round(dur_ms * PS_PER_MS))


def seconds(events):
    return compile_seconds_from_trace(events)


def approx_list(values):
    return pytest.approx(values, abs=1e-9)


def test_trace_event_end():
    e = ev("x", 1.5, 2.0)
    assert e.start_ps == 1_500_000_000
    assert e.end_ps == 3_500_000_000


# ------------------------------------------------------------------ measured TF 2.21 CPU structure


def tf221_jit_on_trace():
    """One jit_compile=True step as measured on TF 2.21 CPU."""
    return [
        ev("__inference_one_step_on_data_1429", 120, 355),  # 120 .. 475
        ev("HLO passes through layout assignment", 209, 5),  # 209 .. 214
        ev("CpuCompiler::RunBackend", 213, 242),  # 213 .. 455
        ev("CpuCompiler::CompileCpuExecutable", 213.2, 241.6),  # 213.2 .. 454.8
        ev("JitCompiler::Compile", 335, 100),  # 335 .. 435
        ev("CpuExecutable::ExecuteAsyncOnStream", 458, 4),  # runs after the compile
        # Parallel fusion compiles on worker threads: no extra modules, not part of MAIN's span.
        ev("FusionCompiler::Compile", 250, 30, thread=(1, 202)),
        ev("FusionCompiler::Compile", 300, 40, thread=(1, 203)),
        ev("FusionCompiler::Compile", 440, 30, thread=(1, 204)),  # ends at 470, after RunBackend
    ]


def test_tf221_jit_on_one_module_from_kernel_start_to_last_compiler_event():
    # 120 ms (kernel start) .. 455 ms (RunBackend end); the execution at 458 ms is not compile.
    assert seconds(tf221_jit_on_trace()) == approx_list([0.335])


def test_tf221_trace_order_does_not_matter():
    assert seconds(list(reversed(tf221_jit_on_trace()))) == approx_list([0.335])


# ------------------------------------------------------------------ several modules


def two_modules_under_one_op(with_second_hlo_passes=False):
    events = [
        ev("_XlaCompile", 0, 500),  # 0 .. 500
        ev("CpuCompiler::RunBackend", 10, 190),  # 10 .. 200
        ev("JitCompiler::Compile", 100, 90),  # 100 .. 190
        ev("CpuCompiler::RunBackend", 250, 200),  # 250 .. 450
        ev("JitCompiler::Compile", 300, 120),  # 300 .. 420
        ev("_XlaRun", 510, 10),
    ]
    if with_second_hlo_passes:
        events.append(ev("HLO passes after optimizations", 220, 25))  # 220 .. 245
    return events


def test_two_modules_under_one_op_do_not_double_count():
    # Module 1: op start 0 .. RunBackend end 200. Module 2 would also start at the op's
    # start (0) but starts where module 1 ended: 200 .. 450.
    result = seconds(two_modules_under_one_op())
    assert result == approx_list([0.2, 0.25])
    assert sum(result) <= 0.5  # never more than the op that compiled them


def test_two_modules_with_passes_between_them_still_sum_to_the_span():
    # Which module the in-between HLO passes are charged to is a convention;
    # the two intervals stay contiguous: together they cover 0 .. 450 exactly once.
    result = seconds(two_modules_under_one_op(with_second_hlo_passes=True))
    assert len(result) == 2
    assert all(s > 0 for s in result)
    assert sum(result) == pytest.approx(0.45, abs=1e-9)


def test_separate_threads_give_separate_modules_in_compile_order():
    t1, t2 = (0, 1), (0, 2)
    events = [
        ev("__inference_a", 100, 300, thread=t1),  # 100 .. 400
        ev("CpuCompiler::RunBackend", 150, 200, thread=t1),  # 150 .. 350
        ev("__inference_b", 0, 250, thread=t2),  # 0 .. 250
        ev("CpuCompiler::RunBackend", 20, 200, thread=t2),  # 20 .. 220
    ]
    # t2's module (0 .. 220) started first; t1's (100 .. 350) overlaps it in time
    # but is on another thread, so it is not clipped.
    assert seconds(events) == approx_list([0.22, 0.25])


def test_innermost_enclosing_event_is_the_start():
    events = [
        ev("__inference_train_function_9", 0, 1000),  # 0 .. 1000
        ev("__inference_one_step_on_data_7", 100, 500),  # 100 .. 600 (innermost)
        ev("CpuCompiler::RunBackend", 200, 200),  # 200 .. 400
    ]
    assert seconds(events) == approx_list([0.3])


@pytest.mark.parametrize(
    "extra, expected",
    [
        (ev("FusionCompiler::Compile", 260, 30), 0.29),  # 260 .. 290: inside the kernel, counts
        (ev("FusionCompiler::Compile", 280, 70), 0.25),  # 280 .. 350: past the kernel's end, ignored
        (ev("FusionCompiler::Compile", 40, 20), 0.25),  # 40 .. 60: before the anchor, ignored
        (ev("CpuExecutable::ExecuteAsyncOnStream", 260, 30), 0.25),  # not a compiler event
    ],
    ids=["compiler-event-inside", "compiler-event-past-kernel", "before-anchor", "execution"],
)
def test_end_is_last_compiler_event_within_the_enclosing_event(extra, expected):
    events = [
        ev("__inference_f", 0, 300),  # 0 .. 300
        ev("CpuCompiler::RunBackend", 50, 200),  # 50 .. 250
        extra,
    ]
    assert seconds(events) == approx_list([expected])


# ------------------------------------------------------------------ fallbacks and edge cases


def fallback_trace():
    return [
        ev("__inference_f", 0, 400),  # 0 .. 400
        ev("CpuCompiler::CompileCpuExecutable", 50, 250),  # 50 .. 300
        ev("JitCompiler::Compile", 100, 150),  # 100 .. 250
        ev("CpuExecutable::ExecuteAsyncOnStream", 320, 5),
    ]


def test_without_run_backend_compile_executable_is_the_anchor():
    assert seconds(fallback_trace()) == approx_list([0.3])


def test_zero_duration_run_backend_does_not_hide_the_fallback_anchor():
    assert seconds(fallback_trace() + [ev("CpuCompiler::RunBackend", 60, 0)]) == approx_list([0.3])


def test_run_backend_takes_precedence_over_the_fallback_anchor():
    # CompileCpuExecutable nested in RunBackend must not count as a second module.
    events = [
        ev("__inference_f", 0, 400),
        ev("CpuCompiler::RunBackend", 50, 250),  # 50 .. 300
        ev("CpuCompiler::CompileCpuExecutable", 60, 230),  # 60 .. 290
    ]
    assert seconds(events) == approx_list([0.3])


@pytest.mark.parametrize(
    "events",
    [
        [],
        [ev("__inference_f", 0, 10), ev("CpuExecutable::ExecuteAsyncOnStream", 2, 5), ev("_XlaRun", 11, 1)],
        [ev("__inference_f", 0, 10), ev("CpuCompiler::RunBackend", 2, 0)],
    ],
    ids=["empty", "no-compiler-events", "zero-duration-anchor"],
)
def test_no_module_compiled(events):
    assert seconds(events) == []


def test_zero_duration_compiler_events_are_ignored():
    events = [
        ev("__inference_f", 0, 1000),  # 0 .. 1000
        ev("CpuCompiler::RunBackend", 100, 200),  # 100 .. 300
        ev("TaskDispatcher::Dispatch", 700, 0),  # would stretch the end to 700 ms
    ]
    assert seconds(events) == approx_list([0.3])


def test_without_enclosing_non_compiler_event_start_is_the_anchor():
    events = [
        ev("CpuCompiler::Compile", 50, 300),  # encloses, but is a compiler event
        ev("CpuCompiler::RunBackend", 100, 200),  # 100 .. 300
        ev("JitCompiler::Compile", 150, 100),  # 150 .. 250
        ev("__inference_late", 120, 400),  # overlaps but does not enclose
    ]
    assert seconds(events) == approx_list([0.2])


# ------------------------------------------------------------------ a one-off program's modules


def first_autoclustered_step_trace():
    """The first train step under auto-clustering as measured on TF 2.21 CPU (a Dense + BatchNormalization +
    Dropout model with Adam): TensorFlow runs the variable initialiser it made at the step's first trace
    (one cluster: Adam's slots set to zeros, by XLA's dump), then the step (two clusters here). The calls
    are traced on the Python thread, the compiles on executor threads."""
    python, executor, other = (701, 197), (701, 219), (701, 73)
    return [
        ev("EagerLocalExecute: __inference_initialize_variables_876", 777.5, 93.2, thread=python),
        ev("FunctionRun", 803.4, 12.8, thread=python),
        ev("_XlaCompile", 807.9, 62.2, thread=executor),  # 807.9 .. 870.1
        ev("CpuCompiler::RunBackend", 817.5, 52.0, thread=executor),
        ev("_XlaRun", 870.2, 0.4, thread=other),
        ev("EagerLocalExecute: __inference_one_step_on_data_1326", 1103.0, 1508.0, thread=python),
        ev("_XlaCompile", 1212.3, 614.7, thread=other),  # 1212.3 .. 1827.0
        ev("CpuCompiler::RunBackend", 1260.1, 565.1, thread=other),
        ev("_XlaRun", 1827.1, 0.9, thread=other),
        ev("_XlaCompile", 1828.3, 474.9, thread=other),  # 1828.3 .. 2303.2
        ev("CpuCompiler::RunBackend", 1851.2, 448.9, thread=other),
    ]


def test_a_module_compiled_inside_tensorflows_variable_initialiser_is_not_the_steps_program():
    from xla_keras.backends.tensorflow.trace_events import compiled_modules, xla_compile_ops

    modules = compiled_modules(first_autoclustered_step_trace())
    assert [program for _, program in modules] == ["initialize_variables", None, None]
    assert [round(seconds, 4) for seconds, _ in modules] == [0.0616, 0.6129, 0.4718]  # op start .. RunBackend end
    # The op spans (TensorFlow 2.16/2.17, whose compiler emits no events) tell the same apart.
    compiled, ops = xla_compile_ops([e for e in first_autoclustered_step_trace() if "Compiler::" not in e.name])
    assert ops == 3 and [program for _, program in compiled] == ["initialize_variables", None, None]


def test_a_module_outside_any_function_call_or_in_another_function_is_the_steps():
    from xla_keras.backends.tensorflow.trace_events import compiled_modules

    assert compiled_modules([ev("_XlaCompile", 0, 100), ev("CpuCompiler::RunBackend", 10, 80)]) == [(0.09, None)]
    nested = [  # the initialiser's call, with the step's call inside it (innermost wins)
        ev("EagerLocalExecute: __inference_initialize_variables_3", 0, 1000, thread=(1, 1)),
        ev("__inference_one_step_on_data_4", 50, 500, thread=(1, 1)),
        ev("_XlaCompile", 100, 100, thread=(1, 2)),
        ev("CpuCompiler::RunBackend", 110, 80, thread=(1, 2)),
    ]
    assert compiled_modules(nested) == [(pytest.approx(0.09), None)]


def test_the_probe_hands_each_modules_program_to_the_session(monkeypatch):
    from xla_keras.backends.tensorflow import _internals
    from xla_keras.backends.tensorflow.probe import TensorFlowProbe, _Handle
    from xla_keras.core.types import CallPlan, Notes
    from xla_keras.jit.modes import JitState

    monkeypatch.setattr(_internals, "profiler_sees_xla_compiler", lambda: True)
    monkeypatch.setattr(_internals, "stop_probe", lambda session: first_autoclustered_step_trace())
    probe = TensorFlowProbe(Notes())
    plan = CallPlan("train", 1, 1, ((0, 1, ()),), True)
    auto = JitState("autoclustering", active=None, autoclustering=True)
    seen = probe.stop(_Handle(object(), None, None), plan, auto)
    assert seen.source == "profiler" and len(seen.modules) == 3
    assert seen.programs == ("initialize_variables", None, None)
    assert [seen.program(i) for i in range(4)] == ["initialize_variables", None, None, None]


# ------------------------------------------------------------------ CompileLedger


def sig(batch):
    return (Leaf("x", "float32", (batch, 8)), Leaf("y", "float32", (batch, 1)))


@pytest.mark.parametrize("probes", [1, 2, 3])
def test_observe_new_then_probe_window_then_neither(probes):
    ledger = CompileLedger(probes_per_signature=probes)
    ledger.set_function("train", object())
    results = [ledger.observe("train", sig(64)) for _ in range(probes + 2)]
    assert results[0] == (True, True)
    assert results[1:probes] == [(False, True)] * (probes - 1)
    assert results[probes:] == [(False, False)] * 2


def test_default_probes_once():
    ledger = CompileLedger()
    assert ledger.observe("train", sig(64)) == (True, True)
    assert ledger.observe("train", sig(64)) == (False, False)


def test_different_signatures_are_tracked_separately():
    ledger = CompileLedger()
    assert ledger.observe("train", sig(64)) == (True, True)
    assert ledger.observe("train", sig(40)) == (True, True)
    assert ledger.observe("train", sig(64)) == (False, False)
    assert ledger.observe("train", sig(40)) == (False, False)


def test_phases_are_independent():
    ledger = CompileLedger()
    assert ledger.observe("train", sig(64)) == (True, True)
    assert ledger.observe("test", sig(64)) == (True, True)
    assert ledger.observe("predict", sig(64)) == (True, True)
    assert ledger.distinct_signatures() == {"train": 1, "test": 1, "predict": 1}


def test_new_function_resets_new_but_lifetime_count_is_exact():
    ledger = CompileLedger()
    first, second = object(), object()
    assert ledger.set_function("train", first) is True
    assert ledger.observe("train", sig(64)) == (True, True)
    assert ledger.observe("train", sig(40)) == (True, True)
    assert ledger.set_function("train", second) is True
    # A rebuilt function has an empty XLA cache: known signatures compile again.
    assert ledger.observe("train", sig(64)) == (True, True)
    assert ledger.observe("train", sig(32)) == (True, True)
    assert ledger.distinct_signatures() == {"train": 3, "test": 0, "predict": 0}


def test_same_function_does_not_reset():
    ledger = CompileLedger()
    token = object()
    assert ledger.set_function("train", token) is True
    assert ledger.observe("train", sig(64)) == (True, True)
    assert ledger.set_function("train", token) is False
    assert ledger.observe("train", sig(64)) == (False, False)


def test_set_function_is_per_phase():
    ledger = CompileLedger()
    token = object()
    ledger.set_function("train", token)
    ledger.observe("test", sig(64))
    assert ledger.set_function("test", token) is True
    assert ledger.observe("test", sig(64)) == (True, True)
    assert ledger.set_function("train", token) is False


def test_distinct_signatures_keys():
    ledger = CompileLedger()
    assert ledger.distinct_signatures() == {"train": 0, "test": 0, "predict": 0}
    for b in (1, 2, 3, 2, 1):
        ledger.observe("predict", sig(b))
    assert ledger.distinct_signatures() == {"train": 0, "test": 0, "predict": 3}


def test_set_function_none_is_a_function_too():
    # run_eagerly has no tf.function: None is still the first function of the phase.
    ledger = CompileLedger()
    assert ledger.set_function("train", None) is True
    assert ledger.set_function("train", None) is False


def test_forget_makes_an_unfinished_step_new_again_and_keeps_the_distinct_count():
    ledger = CompileLedger(probes_per_signature=2)
    assert ledger.observe("train", sig(64)) == (True, True)
    ledger.forget("train", sig(64))  # that step raised before it finished
    assert ledger.observe("train", sig(64)) == (True, True)
    assert ledger.observe("train", sig(64)) == (False, True)
    ledger.forget("train", sig(64))  # a later occurrence failing: back one occurrence only
    assert ledger.observe("train", sig(64)) == (False, True)
    ledger.forget("test", sig(8))  # never seen: nothing to undo
    assert ledger.distinct_signatures() == {"train": 1, "test": 0, "predict": 0}


# ------------------------------------------------------------------ op spans (a probe blind to the compiler)


@pytest.mark.parametrize(
    "kernel_ms, steady_ms, compiled",
    [
        (0.7, None, False),  # a fresh call's first kernel that did not compile (0.4-1.0 ms idle)
        (4.0, None, False),  # the same on a busy CPU (1 ms was the floor: CI counted one, 2026-12-03)
        (64.0, None, True),  # the fastest step compile seen (a Dense(1) model's predict step)
        (25.0, 10.0, False),  # under 3 steady steps: a slow step, not a compile
        (35.0, 10.0, True),
    ],
)
def test_a_blind_probe_counts_a_step_kernel_as_a_compile_only_when_compile_long(
    monkeypatch, kernel_ms, steady_ms, compiled
):
    from xla_keras.backends.tensorflow import _internals
    from xla_keras.backends.tensorflow.probe import TensorFlowProbe, _Handle
    from xla_keras.core.types import CallPlan, Notes
    from xla_keras.jit.modes import JitState

    monkeypatch.setattr(_internals, "profiler_sees_xla_compiler", lambda: False)
    monkeypatch.setattr(_internals, "stop_probe", lambda session: [ev("__inference_one_step_on_data_7", 5, kernel_ms)])
    probe = TensorFlowProbe(Notes())
    plan = CallPlan("test", 0, 1, ((0, 0, ()),), True, steady_seconds=None if steady_ms is None else steady_ms / 1e3)
    seen = probe.stop(_Handle(object(), None, None), plan, JitState("on", active=True))
    assert seen.source == "op_span" and seen.modules == (approx_list([kernel_ms / 1e3]) if compiled else ())
