"""XlaMonitor in-process: modes, read-back, wrapping, faults and TensorBoard files."""

import json
import logging
import os
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import xla_keras
from xla_keras.backends.tensorflow import (
    _internals,
    flags,
)
from xla_keras.callback import lifecycle as monitor_module

pytestmark = pytest.mark.slow  # every test here fits (in process or in a subprocess)


def _data(n=200, features=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, features), dtype=np.float32), rng.random((n, 1), dtype=np.float32)


def _model(jit_compile="auto", run_eagerly=False, layers=()):
    model = keras.Sequential(
        [keras.Input((4,)), *layers, keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse", jit_compile=jit_compile, run_eagerly=run_eagerly)
    return model


def _events(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"jit": "maybe"}, ValueError, ["'keep'", "'on'", "'off'", "'autoclustering'", "'maybe'"]),
        ({"jit": True}, ValueError, ["'keep'", "True"]),
        ({"update_freq": "sometimes"}, ValueError, ["'epoch'", "'batch'", "int"]),
        ({"update_freq": 0}, ValueError, ["int >= 1"]),
        ({"update_freq": True}, ValueError, ["'epoch'"]),
        ({"verbose": 5}, ValueError, ["0, 1 or 2"]),
        ({"log_dir": 3}, TypeError, ["os.PathLike"]),
        ({"max_records": 0}, ValueError, ["max_records"]),
    ],
)
def test_constructor_rejects_bad_input_naming_the_choices(kwargs, error, words):
    with pytest.raises(error) as info:
        xla_keras.XlaMonitor(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_jit_on_is_read_back_from_the_function_that_runs(tmp_path):
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.fit(*_data(), batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.jit_active is True and report.jit_mode == "on"
    assert report.compilation_count["train"] == 2  # 64 and the partial batch of 8
    # The wrapper does not outlive the fit, and the model keeps the jit setting.
    assert not hasattr(model.train_function, "_xla_keras_original")
    assert _internals.function_jit_flag(_internals.find_step_function(model.train_function)) is True


def test_second_fit_reuses_the_compiled_function():
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    x, y = _data()
    model.fit(x, y, batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    fn = model.train_function
    model.fit(x, y, batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    assert model.train_function is fn
    assert monitor.report.compilation_count["train"] == 2
    assert monitor.report.steps["train"] == 8


def test_keras_refusing_jit_is_reported_with_the_layer():
    from log_sources import NoJit

    model = _model(jit_compile=False, layers=[NoJit(name="no_jit_layer")])
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    with pytest.warns(xla_keras.XlaKerasWarning, match="no_jit_layer"):  # asked for XLA: said even at verbose=0
        model.fit(*_data(), batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.jit_active is False
    assert "Keras refused jit_compile=True" in report.jit_reason and "no_jit_layer" in report.jit_reason
    assert report.total_compilations == 0


def test_run_eagerly_is_reported():
    model = _model(jit_compile=False, run_eagerly=True)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.fit(*_data(64), batch_size=32, epochs=1, callbacks=[monitor], verbose=0)
    assert monitor.report.jit_active is False
    assert "run_eagerly=True" in monitor.report.jit_reason


@pytest.mark.parametrize("mode, before", [("autoclustering", False), ("off", True)])
def test_global_autoclustering_switch_is_restored_after_fit(mode, before):
    flags.set_autoclustering(before)
    try:
        seen = []

        class Spy(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                seen.append(_internals.autoclustering_enabled())

        model = _model(jit_compile=False)
        monitor = xla_keras.XlaMonitor(log_dir=None, jit=mode, verbose=0)
        model.fit(*_data(64), batch_size=32, epochs=1, callbacks=[monitor, Spy()], verbose=0)
        assert set(seen) == {mode == "autoclustering"}
        assert _internals.autoclustering_enabled() is before
    finally:
        flags.set_autoclustering(False)


def test_event_files_match_the_report(tmp_path):
    log_dir = str(tmp_path / "logs")
    model = _model(jit_compile=False)
    x, y = _data(200)
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", update_freq="batch", verbose=0)
    model.fit(x, y, batch_size=64, epochs=2, validation_data=_data(100, seed=1), callbacks=[monitor], verbose=0)
    report = monitor.report
    train = _events(os.path.join(log_dir, "train"))
    records = [c for c in report.compilations if c.phase == "train"]
    expected = [(c.step, c.seconds * 1e3) for c in records]
    assert [s for s, _ in train["xla/compile_time_ms"]] == [s for s, _ in expected]
    # A probe's figure is written as measured; an estimate from step time (past the probes' budget on a
    # loaded machine) is written against the steady step known then, and the report's rests on the final one.
    measured = [
        (got, want)
        for (_, got), (_, want), c in zip(train["xla/compile_time_ms"], expected, records)
        if c.source != "timing"
    ]
    assert measured and records[0].source != "timing"
    for got, want in measured:
        assert got == pytest.approx(want, rel=1e-4)
    assert train["xla/compilations"] == [(s, float(i + 1)) for i, (s, _) in enumerate(expected)]
    # update_freq="batch": one step time per steady (non-compile) train step.
    steady_steps = report.steps["train"] - report.compilation_count["train"] - report.slow_step_count
    assert len(train["xla/step_time_ms"]) == steady_steps
    validation = _events(os.path.join(log_dir, "validation"))
    assert len(validation["xla/compilations"]) == report.compilation_count["test"] == 2
    with open(os.path.join(log_dir, "xla_report.json")) as f:
        saved = json.load(f)
    assert saved["compilation_count"] == report.compilation_count
    assert saved["compile_seconds"] == pytest.approx(report.compile_seconds)


def test_update_freq_epoch_writes_one_step_time_per_epoch(tmp_path):
    log_dir = str(tmp_path / "logs")
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="off", verbose=0)
    model.fit(*_data(256), batch_size=32, epochs=3, callbacks=[monitor], verbose=0)
    steps = [s for s, _ in _events(os.path.join(log_dir, "train"))["xla/step_time_ms"]]
    assert steps == [8, 16, 24]


def test_log_dir_none_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.fit(*_data(64), batch_size=32, epochs=1, callbacks=[monitor], verbose=0)
    assert os.listdir(tmp_path) == []
    assert monitor.report.total_compilations == 1


def test_evaluate_and_predict_are_monitored_on_their_own():
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    x, _ = _data(100)
    model.predict(x, batch_size=64, callbacks=[monitor], verbose=0)
    model.evaluate(*_data(100), batch_size=64, callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.compilation_count == {"train": 0, "test": 2, "predict": 2}
    assert report.distinct_signatures == {"train": 0, "test": 2, "predict": 2}
    assert not hasattr(model.test_function, "_xla_keras_original")
    assert not hasattr(model.predict_function, "_xla_keras_original")


def test_known_signature_step_far_above_steady_is_reported_as_slow():
    class Stall(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 20:
                time.sleep(0.3)

    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="off", verbose=0)
    # Stall runs before the monitor's batch end, so its sleep lands inside the step.
    model.fit(*_data(32 * 30), batch_size=32, epochs=1, callbacks=[Stall(), monitor], verbose=0)
    report = monitor.report
    assert report.slow_step_count == 1
    slow = report.slow_steps[0]
    assert slow.step == 21 and slow.seconds > 0.3 and slow.steady_seconds < 0.05


def test_internal_error_disables_the_monitor_once_and_training_finishes(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    from xla_keras.backends.tensorflow import TensorFlowBackend

    monkeypatch.setattr(TensorFlowBackend, "signature", broken)
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    with caplog.at_level(logging.ERROR, logger="xla_keras"):
        history = model.fit(*_data(), batch_size=32, epochs=2, callbacks=[monitor], verbose=0)
    assert len(history.history["loss"]) == 2
    assert len([r for r in caplog.records if "disabled itself" in r.getMessage()]) == 1
    assert any("injected" in note for note in monitor.report.notes)
    assert not hasattr(model.train_function, "_xla_keras_original")


def test_interrupted_fit_keeps_compile_events_and_next_fit_removes_the_leftover_wrapper(tmp_path, monkeypatch):
    log_dir = str(tmp_path / "logs")
    # An interruption the monitor cannot see (e.g. Ctrl-C in Keras's own loop code between hooks).
    monkeypatch.setattr(monitor_module, "guard_callback_list", lambda *args: None)

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                raise KeyboardInterrupt

    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", verbose=0)
    with pytest.raises(KeyboardInterrupt):
        model.fit(*_data(), batch_size=32, epochs=1, callbacks=[monitor, Interrupt()], verbose=0)
    assert hasattr(model.train_function, "_xla_keras_original")  # on_train_end never ran
    events = _events(os.path.join(log_dir, "train"))
    assert events["xla/compilations"] == [(1, 1.0)]
    model.fit(*_data(), batch_size=32, epochs=1, callbacks=[xla_keras.XlaMonitor(log_dir=None, verbose=0)], verbose=0)
    assert not hasattr(model.train_function, "_xla_keras_original")


def test_verbose_prints_status_and_report(capsys):
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="off", verbose=1)
    model.fit(*_data(64), batch_size=32, epochs=1, callbacks=[monitor], verbose=0)
    assert "xla_keras" not in capsys.readouterr().out  # the fit asked for silence: the monitor keeps it
    model.fit(*_data(64), batch_size=32, epochs=1, callbacks=[monitor], verbose=2)
    out = capsys.readouterr().out
    assert "xla_keras: jit='off' -> XLA OFF" in out
    summary = out[out.index("xla_keras: XLA did not run (jit='off')") :].splitlines()
    assert summary == monitor.report.summary().splitlines() and len(summary) <= 12  # the short form
    assert summary[2].startswith("  steady step  : train ") and "XLA report" not in out


def test_two_monitors_in_one_fit_both_observe():
    model = _model(jit_compile=False)
    a = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    b = xla_keras.XlaMonitor(log_dir=None, verbose=0)
    model.fit(*_data(), batch_size=64, epochs=1, callbacks=[a, b], verbose=0)
    for monitor in (a, b):
        assert monitor.report.steps["train"] == 4
        assert monitor.report.distinct_signatures["train"] == 2
    assert a.report.compilation_count["train"] == 2  # the outer probe saw both compiles
    assert not hasattr(model.train_function, "_xla_keras_original")


def test_model_error_restores_global_state_and_the_next_call_is_monitored(tmp_path):
    class Boom(keras.layers.Layer):
        def call(self, x):
            tf.debugging.assert_less(tf.reduce_max(x), 10.0, message="boom")
            return x

    flags.set_autoclustering(False)
    model = _model(jit_compile=False, layers=[Boom()])
    monitor = xla_keras.XlaMonitor(log_dir=str(tmp_path / "logs"), jit="autoclustering", verbose=0)
    x, y = _data(128)
    x[100] = 50.0  # the model raises in the second batch
    with pytest.raises(tf.errors.InvalidArgumentError, match="boom"):
        model.fit(x, y, batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    assert _internals.autoclustering_enabled() is False
    assert not hasattr(model.train_function, "_xla_keras_original")
    assert not monitor.in_call
    assert os.path.exists(tmp_path / "logs" / "xla_report.json")
    model.evaluate(*_data(64), batch_size=32, callbacks=[monitor], verbose=0)
    assert monitor.report.steps["test"] == 2


def test_a_callback_error_leaves_no_stale_fit_behind():
    class Fails(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise ValueError("callback bug")

    flags.set_autoclustering(False)
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    with pytest.raises(ValueError, match="callback bug"):
        model.fit(*_data(), batch_size=64, epochs=1, callbacks=[monitor, Fails()], verbose=0)
    wall_after_fit = monitor.report.wall_seconds
    model.evaluate(*_data(64), batch_size=32, callbacks=[monitor], verbose=0)
    assert not monitor.in_call
    assert not hasattr(model.train_function, "_xla_keras_original")
    assert not hasattr(model.test_function, "_xla_keras_original")
    assert monitor.report.wall_seconds >= wall_after_fit > 0


@pytest.mark.timed  # compiles found from step times: nothing beside it (conftest)
def test_timing_fallback_splits_a_multi_batch_call(tmp_path):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=4)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    x, y = _data(32 * 3 + 8)
    tf.profiler.experimental.start(str(tmp_path))
    try:
        # batch sizes 32, 32, 32, 8 in one call: 2 new signatures in the first call
        model.fit(x, y, batch_size=32, epochs=3, callbacks=[monitor], verbose=0)
    finally:
        tf.profiler.experimental.stop()
    report = monitor.report
    assert {c.source for c in report.compilations} == {"timing"}
    assert report.compilation_count["train"] == 2
    assert report.compile_seconds <= report.wall_seconds
    first_call = [c for c in report.compilations if c.call_batches == 4]
    assert len(first_call) == 2 and all(c.call_compiles == 2 for c in first_call)


# ------------------------------------------------------------- one monitor, several models


def test_each_model_has_its_own_report_and_its_own_files(tmp_path, capsys):
    first, second = _model(jit_compile=False), _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=str(tmp_path), jit="on", verbose=1)
    x, y = _data()
    first.fit(x, y, batch_size=64, epochs=1, callbacks=[monitor], verbose=0)  # 64 and the last batch of 8
    first.compile("sgd", "mse")  # re-compiled: still the same model
    first.fit(x[:128], y[:128], batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    assert len(monitor.reports) == 1
    after_first = monitor.report
    second.fit(x[:128], y[:128], batch_size=32, epochs=1, callbacks=[monitor], verbose=2)
    out = capsys.readouterr().out
    assert out.count("xla_keras: this monitor now watches another model") == 1  # said once
    reports = monitor.reports
    assert len(reports) == 2 and reports[-1].to_dict() == monitor.report.to_dict()
    # Never merged: the first model's counts are what they were; the second's are its own.
    assert reports[0].steps == after_first.steps and reports[0].steps["train"] == 4 + 2
    assert reports[0].compilation_count == after_first.compilation_count
    assert reports[1].steps["train"] == 4 and reports[1].distinct_signatures["train"] == 1
    assert reports[1].compilation_count["train"] == 1
    # Each model's files stay apart: the first in log_dir, the second in log_dir/model_2.
    first_file = json.loads((tmp_path / "xla_report.json").read_text())
    second_file = json.loads((tmp_path / "model_2" / "xla_report.json").read_text())
    assert first_file["steps"]["train"] == 6 and second_file["steps"]["train"] == 4
    assert (tmp_path / "model_2" / "train").is_dir()
    # Back to the first model: its own report goes on (no third report, no recompile of known shapes).
    first.fit(x[:128], y[:128], batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    reports = monitor.reports
    assert len(reports) == 2 and reports[0].steps["train"] == 8 and reports[1].steps["train"] == 4
    assert reports[0].compilation_count == after_first.compilation_count
    assert json.loads((tmp_path / "xla_report.json").read_text())["steps"]["train"] == 8
    assert capsys.readouterr().out.count("now watches another model") == 0


def test_keras_2_style_callback_questions_are_answered_and_a_foreign_model_is_skipped_not_fatal():
    """tf_keras asks callbacks _implements_*_batch_hooks() before any hook (a real tf_keras fit is in
    tests/test_compat.py); a model that is not a Keras 3 model goes unobserved, with one warning,
    and the monitor goes on watching Keras 3 models."""
    monitor = xla_keras.XlaMonitor(log_dir=None, verbose=0)
    assert monitor._implements_train_batch_hooks() is True

    class NotKeras3:
        name = "legacy"

    legacy = NotKeras3()
    monitor.set_model(legacy)
    with pytest.warns(xla_keras.XlaKerasWarning, match="observes Keras 3 models"):
        monitor.on_train_begin()
    monitor.on_train_batch_end(0)
    monitor.on_train_end()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per model
        monitor.on_train_begin()
    model = _model(jit_compile=False)
    model.fit(*_data(), batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    assert monitor.report.steps["train"] == 4 and monitor.report.jit_active is False


# ------------------------------------------------- a probe that cannot see XLA's compiler


def _without_compiler_events(monkeypatch, known):
    """What TensorFlow 2.16/2.17 give the probe: every event but the compiler's; ``known``: whether
    that is known for the version (CPU) or must be found out (2.16/2.17 with a GPU)."""
    real = _internals.stop_probe
    monkeypatch.setattr(
        _internals, "stop_probe", lambda session: [e for e in real(session) if "Compiler::" not in e.name]
    )
    monkeypatch.setattr(_internals, "profiler_sees_xla_compiler", lambda: False if known else None)


@pytest.mark.timed  # compiles found from step times: nothing beside it (conftest)
@pytest.mark.parametrize("known", [True, False])
def test_a_probe_blind_to_the_compiler_times_each_compile_from_op_spans(monkeypatch, known):
    _without_compiler_events(monkeypatch, known)
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    x, y = _data(200)
    model.fit(x, y, batch_size=64, epochs=2, callbacks=[monitor], verbose=0)  # batches of 64 and 8
    report = monitor.report
    assert report.jit_active is True
    assert report.compilation_count["train"] == 2  # never "0 compiles" because the probe was blind
    assert [c.source for c in report.compilations] == ["op_span", "op_span"]
    assert [c.signature[0].shape[0] for c in report.compilations] == [64, 8]
    for c in report.compilations:  # a compile of ~0.1 s, inside its own step
        assert 0.01 < c.seconds <= c.step_seconds
    notes = [n for n in report.notes if "emits no profiler events" in n]
    assert len(notes) == 1 and ("known for this version" in notes[0]) is known


@pytest.mark.timed  # compiles found from step times: nothing beside it (conftest)
def test_a_signature_another_monitor_compiled_is_no_op_span_compile(monkeypatch):
    """A fresh monitor's ledger is empty, but the function already compiled these shapes: their
    kernels run step-sized, so nothing is counted (the reviewer's fit-then-evaluate repro)."""
    _without_compiler_events(monkeypatch, known=True)
    model = _model(jit_compile=False)
    x, y = _data(128)
    model.fit(
        x,
        y,
        batch_size=64,
        epochs=1,
        validation_data=(x, y),
        verbose=0,
        callbacks=[xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)],
    )
    fresh = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.evaluate(x, y, batch_size=64, callbacks=[fresh], verbose=0)
    assert fresh.report.compilation_count["test"] == 0 and fresh.report.steps["test"] == 2


def test_on_a_version_whose_compiler_is_visible_silence_means_nothing_compiled(monkeypatch):
    real = _internals.stop_probe
    monkeypatch.setattr(
        _internals, "stop_probe", lambda session: [e for e in real(session) if "Compiler::" not in e.name]
    )
    monkeypatch.setattr(_internals, "profiler_sees_xla_compiler", lambda: True)
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.fit(*_data(128), batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    assert not any("emits no profiler events" in n for n in monitor.report.notes)


@pytest.mark.timed  # compiles found from step times: nothing beside it (conftest)
def test_op_spans_that_cannot_be_matched_to_batches_fall_back_to_timing(monkeypatch):
    _without_compiler_events(monkeypatch, known=True)
    real = _internals.stop_probe
    monkeypatch.setattr(
        _internals,
        "stop_probe",
        lambda session: [e for e in real(session) if not e.name.startswith("__inference_one_step_on_data")],
    )
    model = _model(jit_compile=False)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.fit(*_data(200), batch_size=64, epochs=2, callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.compilation_count["train"] == 2
    assert {c.source for c in report.compilations} == {"timing"}
