"""The monitor's small parts on their own: its configuration, its output sink, its trace windows,
its backend lookup. Pure (no TensorFlow): the trace windows run against a fake profiler."""

import dataclasses
import json
import os

import pytest

from xla_keras.callback.traces import TraceWindows
from xla_keras.config import MonitorConfig
from xla_keras.core.tags import TAG_COMPILE_TIME
from xla_keras.core.types import Notes, Scalar
from xla_keras.report.schema import REPORT_FILE
from xla_keras.tensorboard.sink import FLUSH_EVERY_SECONDS, OutputSink

# ------------------------------------------------------------------ MonitorConfig


@pytest.mark.parametrize(
    "kwargs, normalised",
    [
        ({"update_freq": "batch"}, {"update_freq": 1}),
        ({"update_freq": "epoch"}, {"update_freq": "epoch"}),
        ({"profile": [3, 5]}, {"profile": (3, 5)}),
        ({"log_dir": "~/logs"}, {"log_dir": os.path.expanduser("~/logs")}),
        ({"verbose": 2, "max_records": 7}, {"verbose": 2, "max_records": 7}),
    ],
)
def test_config_normalises_what_keras_users_pass(kwargs, normalised):
    config = MonitorConfig(**kwargs)
    for key, value in normalised.items():
        assert getattr(config, key) == value


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"jit": "ON"}, ["'keep'", "'on'", "'off'", "'autoclustering'"]),
        ({"on_storm": "stop"}, ["'warn'", "'raise'", "'fallback'"]),
        ({"update_freq": 0}, ["'epoch'", "'batch'", "int >= 1"]),
        ({"profile": (5, 2)}, ["'auto'", "None", "(start, stop)"]),
        ({"storm_threshold": 1}, ["storm_threshold", ">= 2"]),
        ({"storm_window": 0}, ["storm_window", ">= 1"]),
        ({"verbose": True}, ["0, 1 or 2"]),
        ({"max_records": 0}, ["max_records"]),
    ],
)
def test_config_rejects_bad_input_naming_the_choices(kwargs, words):
    with pytest.raises(ValueError) as info:
        MonitorConfig(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_config_is_frozen():
    config = MonitorConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.jit = "on"


# ------------------------------------------------------------------ OutputSink


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


class FakeReport:
    def to_dict(self):
        return {"jit_mode": "on"}

    def to_markdown(self):
        return "## XLA report"


def test_the_sink_writes_nothing_without_a_log_dir_or_off_the_chief(tmp_path):
    nowhere = OutputSink(None)
    nowhere.scalars([Scalar("train", TAG_COMPILE_TIME, 1.0, 1)])
    nowhere.flush(report=FakeReport, text=True)
    worker = OutputSink(str(tmp_path / "logs"))
    worker.chief = False
    worker.scalars([Scalar("train", TAG_COMPILE_TIME, 1.0, 1)])
    worker.flush(report=FakeReport)
    assert not (tmp_path / "logs").exists()


def test_the_sink_throttles_flushes_and_writes_the_report_file(tmp_path):
    clock = Clock()
    sink = OutputSink(str(tmp_path), clock=clock)
    assert sink.due()  # never flushed
    sink.scalars([Scalar("train", TAG_COMPILE_TIME, 123.0, 1), Scalar("predict", TAG_COMPILE_TIME, 1.0, 1)])
    sink.flush(report=FakeReport, text=True, step=1)
    assert json.loads((tmp_path / REPORT_FILE).read_text()) == {"jit_mode": "on"}
    assert not sink.due() and not sink.report_due()
    clock.now = 1.0
    assert sink.report_due() and not sink.due()
    clock.now = FLUSH_EVERY_SECONDS + 0.1
    assert sink.due()
    sink.close()
    assert os.listdir(tmp_path / "train") and not (tmp_path / "predict").exists()  # predict writes no run


def test_an_unwritable_log_dir_is_found_before_anything_is_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert OutputSink(str(blocker / "logs")).unwritable() is not None
    assert OutputSink(str(tmp_path / "fine")).unwritable() is None
    assert OutputSink(None).unwritable() is None


# ------------------------------------------------------------------ TraceWindows


class FakeProfiler:
    def __init__(self, busy=False):
        self.busy, self.started, self.stopped = busy, [], 0

    def start_trace(self, directory):
        if self.busy:
            raise RuntimeError("AlreadyExistsError: another profiler")
        self.started.append(directory)
        os.makedirs(os.path.join(directory, "plugins", "profile", f"session{len(self.started)}"))

    def stop_trace(self):
        self.stopped += 1


def windows(profile, profiler, missing=lambda: None):
    return TraceWindows(profile, profiler, Notes(), missing)


def test_auto_traces_five_steady_steps_after_warm_up(tmp_path):
    profiler = FakeProfiler()
    traces = windows("auto", profiler)
    traces.begin_fit(first_step=1, keras_profiles=False)
    started = [
        step
        for step in range(0, 30)
        if traces.maybe_start("train", step, 1, False, 0, str(tmp_path), False)
        and (traces.after_step("train", step + 1) or True)
    ]
    assert started[0] == 10 and len(profiler.started) == 1 and profiler.stopped == 1
    assert started == list(range(10, 15))  # steps 11..15: the window closes at its stop step
    assert traces.saved == [f"steady: {tmp_path / 'train' / 'plugins' / 'profile' / 'session1'}"]


def test_traces_yield_to_keras_profiles_and_multi_worker_and_never_stop_a_profiler_they_did_not_start(tmp_path):
    for keras_profiles, multi_worker in ((True, False), (False, True)):
        profiler = FakeProfiler()
        traces = windows("auto", profiler)
        traces.begin_fit(1, keras_profiles=keras_profiles)
        assert not any(traces.maybe_start("train", s, 1, False, 0, str(tmp_path), multi_worker) for s in range(30))
        assert profiler.started == []
    busy = FakeProfiler(busy=True)
    traces = windows((1, 3), busy)
    traces.begin_fit(1, keras_profiles=False)
    assert not traces.maybe_start("train", 0, 1, False, 0, str(tmp_path), False)
    traces.stop()
    assert busy.stopped == 0 and any("another profiler" in n for n in traces.notes.texts)


def test_a_range_split_by_validation_resumes_and_a_range_behind_the_fit_is_noted(tmp_path):
    profiler = FakeProfiler()
    traces = windows((2, 6), profiler)
    traces.begin_fit(1, keras_profiles=False)
    assert traces.maybe_start("train", 2, 1, False, 0, str(tmp_path), False)
    traces.validation_begins(train_step=3)
    assert traces.open is None and traces.maybe_start("train", 3, 1, False, 0, str(tmp_path), False)
    assert len(profiler.started) == 2 and any("split" in n for n in traces.notes.texts)
    late = windows((2, 6), FakeProfiler())
    late.begin_fit(first_step=50, keras_profiles=False)
    assert any("before this fit's first step" in n for n in late.notes.texts)


def test_a_saved_trace_without_the_profile_tab_says_how_to_get_it(tmp_path):
    traces = windows((1, 1), FakeProfiler(), missing=lambda: 'pip install "tensorboard-plugin-profile==2.16.0"')
    traces.begin_fit(1, keras_profiles=False)
    traces.maybe_start("train", 0, 1, False, 0, str(tmp_path), False)
    traces.after_step("train", 1)
    assert any("tensorboard-plugin-profile==2.16.0" in n for n in traces.notes.texts)


# ------------------------------------------------------------------ backends


def test_tensorflow_and_jax_backends_are_known_and_others_are_named():
    from xla_keras.backends import backend_for

    assert backend_for("tensorflow").name == "tensorflow"
    assert backend_for("jax").name == "jax"
    with pytest.raises(RuntimeError, match="'torch' backend"):
        backend_for("torch")
