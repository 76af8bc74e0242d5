"""A demanding user tries to break XlaMonitor: bad arguments, an unwritable
log_dir, Ctrl-C / model errors / callback errors mid-epoch and inside a
profiler trace window, a Ctrl-C landing inside the profiler itself, internal
errors with a trace window open, a busy profiler, and an interrupted run's log
dir opened in a real TensorBoard.

After every fault: the user gets their own exception, the profiler is free,
TensorFlow's global jit level is what it was, the files on disk are readable
and say what ran, and the same monitor works for the next fit.
"""

import _thread
import json
import logging
import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tensorboard_server import get_json, running_tensorboard

import xla_keras
from xla_keras.backends.tensorflow import _internals
from xla_keras.backends.tensorflow import jit as jit_module
from xla_keras.report.schema import REPORT_FILE
from xla_keras.tensorboard.metadata import TAG_REPORT
from xla_keras.tensorboard.sink import SummaryWriters

pytestmark = pytest.mark.xdist_group("test_faults")  # its module fixtures' runs happen once, on one worker

BATCH, EPOCH_STEPS = 8, 8
K = 11  # the faulting train step (global, 1-based): epoch 2, its 3rd batch
WINDOW = (K - 1, K + 2)  # profile=(start, stop): a trace window open when the fault hits

# Regressions these tests guard against (each was a real bug).
BUG_LOG_DIR_EMPTY = (
    "log_dir='' is accepted: the monitor writes a 'train' dir into the cwd, then "
    "os.makedirs('') fails mid-epoch and it disables itself"
)
BUG_BOOL_INT = "a bool/float passes the int check (True == 1, 1.0 == 1)"
BUG_CONFIGURE_TRUTHY = "configure(cpu_autoclustering='no') turns CPU auto-clustering ON (truthiness)"
BUG_UNWRITABLE = (
    "an unwritable log_dir is found only when the first event is written, after step 1 ran; "
    "the monitor then disables itself with a logged FailedPreconditionError"
)
BUG_CALLBACK_FAULT = (
    "an exception from another callback (or a Ctrl-C landing in one) ends the fit "
    "without on_train_end and outside the monitor's step wrapper: the trace window "
    "stays open (profiler busy), the global jit level is not restored, "
    "xla_report.json and the last events are stale until the next fit or exit"
)
BUG_PROFILER_CTRL_C = (
    "a Ctrl-C landing inside tf.profiler.experimental.start/stop leaves TF's "
    "module-level profiler session set: the profiler is busy for the whole process"
)
BUG_DISABLE_TRACE = (
    "_disable() does not stop the monitor's open trace window (the profiler stays busy "
    "after the fit) and does not rewrite xla_report.json, which never says it disabled itself"
)
BUG_NO_TEXT_REPORT = (
    "a fit interrupted in its first epoch leaves no xla/report text summary: the "
    "error path flushes without text=True, so TensorBoard's Text tab is empty"
)


# ------------------------------------------------------------------ helpers


@pytest.fixture(autouse=True)
def _leave_tensorflow_as_found():
    """Whatever a test (or an expected failure) leaves behind, the next test
    finds the profiler free and TensorFlow's jit level as it was."""
    level = _internals.autoclustering_setting()
    yield
    _free_the_profiler()
    _internals.restore_autoclustering_setting(level)


def _free_the_profiler():
    from tensorflow.python.profiler import profiler_v2

    if profiler_v2._profiler is not None:
        try:
            tf.profiler.experimental.stop()
        except Exception:  # noqa: BLE001 - a broken session: drop it
            profiler_v2._profiler = None


def _profiler_is_free(tmp_path) -> bool:
    """What a user does next: start their own trace, then stop it."""
    try:
        tf.profiler.experimental.start(str(tmp_path / "users_own_trace"))
    except Exception:  # noqa: BLE001 - "Another profiler is running"
        return False
    tf.profiler.experimental.stop()
    return True


def _xy(n=EPOCH_STEPS * BATCH, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 4), dtype=np.float32), rng.random((n, 1), dtype=np.float32)


def _dataset(at=None, fault=None):
    """EPOCH_STEPS batches per epoch from a Python generator. ``fault(x)`` is
    called for the ``at``-th batch produced (global, 1-based): it raises, or
    returns the batch to use instead."""
    x, y = _xy()
    produced = [0]

    def gen():
        for i in range(EPOCH_STEPS):
            produced[0] += 1
            xb = x[i * BATCH : (i + 1) * BATCH]
            if produced[0] == at:
                xb = fault(xb)
            yield xb, y[i * BATCH : (i + 1) * BATCH]

    return tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec((None, None), tf.float32), tf.TensorSpec((None, 1), tf.float32))
    )


class _AtRun(keras.layers.Layer):
    """Identity, except that its ``at``-th execution calls ``action`` from a
    tf.py_function: inside the step, as TensorFlow runs it."""

    def __init__(self, at, action, **kwargs):
        super().__init__(**kwargs)
        self.at, self.action, self.runs = at, action, 0

    def call(self, x):
        def run(value):
            self.runs += 1
            if self.runs == self.at:
                self.action()
            return value

        out = tf.py_function(run, [x], tf.float32)
        out.set_shape(x.shape)
        return out


class _Assert(keras.layers.Layer):
    def call(self, x):
        tf.debugging.assert_less(tf.reduce_max(x), 10.0, message="boom: input out of range")
        return x


class _RaiseAtBatchEnd(keras.callbacks.Callback):
    """Raises ``error`` from on_train_batch_end of the ``at``-th train step."""

    def __init__(self, at, error):
        super().__init__()
        self.at, self.error, self.seen = at, error, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.at:
            raise self.error


class _BatchBegins(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.count = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.count += 1


def _model(layers=()):
    model = keras.Sequential(
        [keras.Input((4,)), *layers, keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse")
    return model


def _raiser(error):
    def fault(*_):
        raise error

    return fault


def _accumulator(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    return acc


@pytest.fixture
def written(monkeypatch):
    """Every scalar the monitor hands its writers: {run_phase: {tag: [(step, value)]}}."""
    seen = {}
    original = SummaryWriters.scalar

    def spy(self, phase, tag, value, step):
        seen.setdefault(phase, {}).setdefault(tag, []).append((int(step), float(value)))
        return original(self, phase, tag, value, step)

    monkeypatch.setattr(SummaryWriters, "scalar", spy)
    return seen


def _sessions(log_dir):
    profile_dir = os.path.join(log_dir, "train", "plugins", "profile")
    if not os.path.isdir(profile_dir):
        return []
    return [
        os.path.join(profile_dir, d)
        for d in sorted(os.listdir(profile_dir))
        if any(f.endswith(".xplane.pb") for f in os.listdir(os.path.join(profile_dir, d)))
    ]


# ------------------------------------------------------------ 1. bad arguments


def _case(kwargs, error, words, bug=None):
    # bug: the regression this case guards against (it once passed unchecked).
    return pytest.param(kwargs, error, words, id=",".join(f"{k}={v!r}" for k, v in kwargs.items()))


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        _case({"jit": "ON"}, ValueError, ["'keep'", "'on'", "'off'", "'autoclustering'", "'ON'"]),
        _case({"jit": None}, ValueError, ["'keep'", "'autoclustering'", "None"]),
        _case({"jit": ["on"]}, ValueError, ["'keep'", "['on']"]),
        _case({"storm_threshold": 1}, ValueError, ["storm_threshold", "int >= 2", "1"]),
        _case({"storm_threshold": 2.5}, ValueError, ["storm_threshold", "int >= 2"]),
        _case({"storm_threshold": "8"}, ValueError, ["storm_threshold", "int >= 2", "'8'"]),
        _case({"storm_threshold": True}, ValueError, ["storm_threshold", "int >= 2"]),
        _case({"storm_threshold": None}, ValueError, ["storm_threshold", "int >= 2"]),
        _case({"storm_window": 0}, ValueError, ["storm_window", "int >= 1"]),
        _case({"storm_window": -5}, ValueError, ["storm_window", "int >= 1"]),
        _case({"storm_window": 1.5}, ValueError, ["storm_window", "int >= 1"]),
        _case({"storm_window": False}, ValueError, ["storm_window", "int >= 1"]),
        _case({"storm_window": None}, ValueError, ["storm_window", "int >= 1"]),
        _case({"on_storm": "ignore"}, ValueError, ["'warn'", "'raise'", "'fallback'", "'ignore'"]),
        _case({"on_storm": "WARN"}, ValueError, ["'warn'", "'raise'", "'fallback'"]),
        _case({"on_storm": None}, ValueError, ["'warn'", "'raise'", "'fallback'"]),
        _case({"on_storm": True}, ValueError, ["'warn'", "'raise'", "'fallback'"]),
        _case({"profile": True}, ValueError, ["'auto', None or (start, stop)"]),
        _case({"profile": False}, ValueError, ["'auto', None or (start, stop)"]),
        _case({"profile": 3}, ValueError, ["'auto', None or (start, stop)"]),
        _case({"profile": (1, True)}, ValueError, ["'auto', None or (start, stop)"]),
        _case({"profile": (None, None)}, ValueError, ["'auto', None or (start, stop)"]),
        _case({"profile": "none"}, ValueError, ["'auto', None or (start, stop)"]),
        _case({"update_freq": -1}, ValueError, ["'epoch'", "'batch'", "int >= 1"]),
        _case({"update_freq": 1.5}, ValueError, ["'epoch'", "'batch'", "int >= 1"]),
        _case({"update_freq": None}, ValueError, ["'epoch'", "'batch'", "int >= 1"]),
        _case({"update_freq": "Batch"}, ValueError, ["'epoch'", "'batch'", "int >= 1"]),
        _case({"verbose": -1}, ValueError, ["0, 1 or 2"]),
        _case({"verbose": "1"}, ValueError, ["0, 1 or 2"]),
        _case({"verbose": None}, ValueError, ["0, 1 or 2"]),
        _case({"max_records": -1}, ValueError, ["max_records", "int >= 1"]),
        _case({"max_records": 1.5}, ValueError, ["max_records", "int >= 1"]),
        _case({"max_records": "10"}, ValueError, ["max_records", "int >= 1"]),
        _case({"max_records": None}, ValueError, ["max_records", "int >= 1"]),
        _case({"max_records": False}, ValueError, ["max_records", "int >= 1"]),
        _case({"compile_budget": 0}, ValueError, ["compile_budget", "(0, 1)", "None"]),
        _case({"compile_budget": 1.5}, ValueError, ["compile_budget", "(0, 1)", "None"]),
        _case({"compile_budget": "10%"}, ValueError, ["compile_budget", "(0, 1)", "None"]),
        _case({"compile_budget": True}, ValueError, ["compile_budget", "(0, 1)", "None"]),
        _case({"compile_budget_floor": -1}, ValueError, ["compile_budget_floor", ">= 0", "1.0"]),
        _case({"compile_budget_floor": "1s"}, ValueError, ["compile_budget_floor", ">= 0", "1.0"]),
        _case({"compile_budget_floor": float("inf")}, ValueError, ["compile_budget_floor", ">= 0"]),
        _case({"compile_budget_floor": True}, ValueError, ["compile_budget_floor", ">= 0"]),
        _case({"log_dir": b"logs"}, TypeError, ["log_dir", "os.PathLike", "bytes"]),
        _case({"log_dir": ["logs"]}, TypeError, ["log_dir", "os.PathLike", "list"]),
        _case({"log_dir": ""}, ValueError, ["log_dir"], bug=BUG_LOG_DIR_EMPTY),
        _case({"max_records": True}, ValueError, ["max_records", "int >= 1"], bug=BUG_BOOL_INT),
        _case({"verbose": 1.0}, ValueError, ["0, 1 or 2"], bug=BUG_BOOL_INT),
    ],
)
def test_constructor_rejects_more_bad_input_naming_the_choices(kwargs, error, words):
    with pytest.raises(error) as info:
        xla_keras.XlaMonitor(**{"verbose": 0, **kwargs})
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.fixture
def isolated_configure(monkeypatch):
    """configure() without touching this process: its opt-in record, the CPU
    flag and TF_XLA_FLAGS are put back by monkeypatch."""
    monkeypatch.setattr(jit_module, "_opt_in", dict(jit_module._opt_in))
    calls = []
    monkeypatch.setattr(_internals, "set_cpu_global_jit", lambda enabled: calls.append(enabled) or True)
    monkeypatch.setenv("TF_XLA_FLAGS", os.environ.get("TF_XLA_FLAGS", ""))
    return calls


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        _case({"cache_dir": 3}, (TypeError, ValueError), ["cache_dir", "directory path"]),
        _case({"cache_dir": ""}, (TypeError, ValueError), ["cache_dir", "directory path"]),
        _case({"cache_dir": b"cache"}, (TypeError, ValueError), ["cache_dir", "directory path"]),
        _case({"cache_dir": ["cache"]}, (TypeError, ValueError), ["cache_dir", "directory path"]),
        _case({"no_such_option": True}, TypeError, ["no_such_option"]),
        _case(
            {"cpu_autoclustering": "no"},
            (TypeError, ValueError),
            ["cpu_autoclustering", "True", "False"],
            bug=BUG_CONFIGURE_TRUTHY,
        ),
        _case(
            {"cpu_autoclustering": 1},
            (TypeError, ValueError),
            ["cpu_autoclustering", "True", "False"],
            bug=BUG_CONFIGURE_TRUTHY,
        ),
    ],
)
def test_configure_rejects_bad_input_and_changes_nothing(isolated_configure, kwargs, error, words):
    flags = os.environ["TF_XLA_FLAGS"]
    opt_in = dict(jit_module._opt_in)
    with pytest.raises(error) as info:
        xla_keras.configure(**kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert isolated_configure == [] and jit_module._opt_in == opt_in and os.environ["TF_XLA_FLAGS"] == flags


def test_configure_cache_dir_under_a_regular_file_names_the_path(isolated_configure, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    flags, asked = os.environ["TF_XLA_FLAGS"], jit_module._opt_in["cache_dir"]
    with pytest.raises(OSError, match="a_file"):
        xla_keras.configure(cache_dir=str(blocker / "cache"))
    assert os.environ["TF_XLA_FLAGS"] == flags and jit_module._opt_in["cache_dir"] == asked


@pytest.mark.slow
@pytest.mark.parametrize("where", ["path_under_a_regular_file", "log_dir_is_a_regular_file"])
def test_unwritable_log_dir_fails_at_set_up_naming_the_path(tmp_path, where):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    log_dir = str(blocker / "logs") if where == "path_under_a_regular_file" else str(blocker)
    model = _model()
    begins = _BatchBegins()
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", profile=(1, 2), verbose=0)
    with pytest.raises((OSError, ValueError)) as info:
        model.fit(*_xy(), batch_size=BATCH, epochs=1, callbacks=[monitor, begins], verbose=0)
    assert begins.count == 0, "the error came mid-epoch, after a batch ran"
    assert log_dir in str(info.value)
    assert _profiler_is_free(tmp_path)


# ------------------------------------------------ 2. faults mid-epoch, mid-trace


def _ctrl_c(*_):
    _thread.interrupt_main()  # a real Ctrl-C: KeyboardInterrupt in the main thread when the step returns


# kind: (jit, where the fault is, what reaches the user, train steps completed before the fault)
FAULTS = {
    "ctrl_c_during_step": ("autoclustering", "layer", KeyboardInterrupt, None, K - 1),
    "keyboard_interrupt_in_layer": (
        "autoclustering",
        "layer",
        tf.errors.UnknownError,
        "KeyboardInterrupt: raised in a layer",
        K - 1,
    ),
    "keyboard_interrupt_in_data": (
        "on",
        "data",
        tf.errors.UnknownError,
        "KeyboardInterrupt: raised in the data",
        K - 1,
    ),
    "xla_compile_error_at_new_shape": ("on", "data", tf.errors.InvalidArgumentError, "Matrix size-incompatible", K - 1),
    "assert_in_model": ("autoclustering", "data", tf.errors.InvalidArgumentError, "boom: input out of range", K - 1),
    "ctrl_c_in_a_later_callback": ("autoclustering", "callback_after", KeyboardInterrupt, None, K),
    "ctrl_c_in_an_earlier_callback": ("on", "callback_before", KeyboardInterrupt, None, K),
}


def _fault_setup(kind):
    jit, where, _, _, _ = FAULTS[kind]
    layers, data, callback = [], _dataset(), None
    if kind == "ctrl_c_during_step":
        layers = [_AtRun(K, _ctrl_c)]
    elif kind == "keyboard_interrupt_in_layer":
        layers = [_AtRun(K, _raiser(KeyboardInterrupt("raised in a layer")))]
    elif kind == "keyboard_interrupt_in_data":
        data = _dataset(K, _raiser(KeyboardInterrupt("raised in the data")))
    elif kind == "xla_compile_error_at_new_shape":
        data = _dataset(K, lambda xb: np.ones((BATCH, 5), np.float32))  # 5 features: Dense(8) cannot take it
    elif kind == "assert_in_model":
        layers = [_Assert()]
        data = _dataset(K, lambda xb: xb + 50.0)
    else:
        callback = _RaiseAtBatchEnd(K, KeyboardInterrupt("raised in a callback"))
    return jit, where, layers, data, callback


CASES = [pytest.param(kind, True, id=f"{kind}-in_trace_window") for kind in FAULTS]
CASES += [
    pytest.param("xla_compile_error_at_new_shape", False, id="xla_compile_error_at_new_shape-probe_open"),
    pytest.param("ctrl_c_in_a_later_callback", False, id="ctrl_c_in_a_later_callback-no_window"),
]


@pytest.mark.slow
@pytest.mark.parametrize("kind, in_window", CASES)
def test_fault_mid_epoch_leaves_everything_usable(kind, in_window, tmp_path, written, caplog):
    jit, where, expected, message, completed = FAULTS[kind]
    jit, where, layers, data, callback = _fault_setup(kind)
    log_dir = str(tmp_path / "logs")
    level = tf.config.optimizer.get_jit()
    model = _model(layers)
    monitor = xla_keras.XlaMonitor(
        log_dir=log_dir, jit=jit, profile=WINDOW if in_window else None, update_freq="batch", verbose=0
    )
    callbacks = {"callback_after": [monitor, callback], "callback_before": [callback, monitor]}.get(where, [monitor])
    with caplog.at_level(logging.ERROR, logger="xla_keras"):
        with pytest.raises(BaseException) as info:
            model.fit(data, epochs=3, callbacks=callbacks, verbose=0)

    problems = []
    # The user's own exception, unchanged (the same type and message as a fit without the monitor).
    if type(info.value) is not expected:
        problems.append(f"raised {type(info.value).__name__}: {info.value!r}, not {expected.__name__}")
    if callback is not None and info.value is not callback.error:
        problems.append("the callback's exception object was replaced")
    if message is not None and message not in str(info.value):
        problems.append(f"{message!r} not in the error message")
    logged = [" ".join(r.getMessage().split())[:200] for r in caplog.records if r.name.startswith("xla_keras")]
    if logged:
        problems.append(f"the monitor logged errors: {logged}")
    # Nothing of TensorFlow's global state is left taken or changed.
    if not _profiler_is_free(tmp_path):
        problems.append("the profiler is still busy")
    if tf.config.optimizer.get_jit() != level:
        problems.append(f"global jit level {tf.config.optimizer.get_jit()!r}, was {level!r}")
    if hasattr(model.train_function, "_xla_keras_original"):
        problems.append("model.train_function is still the monitor's wrapper")
    # The files say what ran before the fault.
    train_written = written.get("train", {})
    if not train_written:
        problems.append("the monitor wrote no train scalar before the fault")
    acc = _accumulator(os.path.join(log_dir, "train"))
    on_disk = set(acc.Tags()["scalars"])
    for tag, points in train_written.items():
        got = [(e.step, e.value) for e in acc.Scalars(tag)] if tag in on_disk else []
        if [s for s, _ in got] != [s for s, _ in points] or any(
            g != pytest.approx(p, rel=1e-6) for (_, g), (_, p) in zip(got, points)
        ):
            problems.append(f"{tag}: on disk {got}, written {points}")
    with open(os.path.join(log_dir, REPORT_FILE)) as f:
        saved = json.load(f)
    if saved["steps"]["train"] != completed or monitor.report.steps["train"] != completed:
        problems.append(
            f"steps['train']: json {saved['steps']['train']}, report {monitor.report.steps['train']}, ran {completed}"
        )
    sessions = _sessions(log_dir)
    if in_window and not (sessions and any(t.startswith("range: ") for t in saved["traces"])):
        problems.append(f"no saved trace session for the open window (json traces {saved['traces']})")
    if not in_window and sessions:
        problems.append(f"a trace session without a window: {sessions}")
    assert not problems, "\n".join(problems)

    # The same monitor watches the next fit.
    x, y = _xy(seed=1)
    history = model.fit(x, y, batch_size=BATCH, epochs=1, callbacks=[monitor], verbose=0)
    assert len(history.history["loss"]) == 1
    assert monitor.report.steps["train"] == completed + EPOCH_STEPS
    with open(os.path.join(log_dir, REPORT_FILE)) as f:
        assert json.load(f)["steps"]["train"] == completed + EPOCH_STEPS
    assert not hasattr(model.train_function, "_xla_keras_original")
    assert tf.config.optimizer.get_jit() == level
    assert _profiler_is_free(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("during", ["trace_start", "trace_export"])
def test_ctrl_c_landing_inside_the_profiler_frees_it(during, tmp_path, monkeypatch):
    """The monitor's own trace start/stop take tens to hundreds of ms (the stop
    writes the trace): a Ctrl-C lands there sooner or later. Simulated: the
    real profiler call completes, then KeyboardInterrupt."""
    from tensorflow.python.profiler import profiler_v2

    real = profiler_v2._pywrap_profiler

    pending = [during]  # one Ctrl-C only

    class Session:
        def __init__(self):
            self._session = real.ProfilerSession()

        def start(self, *args):
            self._session.start(*args)
            if pending == ["trace_start"]:
                pending.clear()
                raise KeyboardInterrupt

        def export_to_tb(self):
            self._session.export_to_tb()
            if pending == ["trace_export"]:
                pending.clear()
                raise KeyboardInterrupt

        def stop(self):
            return self._session.stop()

    monkeypatch.setattr(profiler_v2, "_pywrap_profiler", type("Module", (), {"ProfilerSession": Session}))
    level = tf.config.optimizer.get_jit()
    model = _model()
    monitor = xla_keras.XlaMonitor(log_dir=str(tmp_path / "logs"), jit="autoclustering", profile=(4, 6), verbose=0)
    with pytest.raises(KeyboardInterrupt):
        model.fit(*_xy(), batch_size=BATCH, epochs=2, callbacks=[monitor], verbose=0)
    monkeypatch.undo()
    assert _profiler_is_free(tmp_path)
    assert tf.config.optimizer.get_jit() == level
    assert not hasattr(model.train_function, "_xla_keras_original")


# ------------------------------------------- 3. an interrupted run in TensorBoard


@pytest.fixture(scope="module")
def interrupted_tensorboard(tmp_path_factory):
    """A real TensorBoard on the log dir of a fit stopped by Ctrl-C in its
    first epoch, inside a profile=(4, 6) window."""
    root = tmp_path_factory.mktemp("interrupted")
    log_dir = str(root / "logs")
    model = _model([_AtRun(5, _ctrl_c)])
    monitor = xla_keras.XlaMonitor(
        log_dir=log_dir, jit="autoclustering", profile=(4, 6), update_freq="batch", verbose=0
    )
    with pytest.raises(KeyboardInterrupt):
        model.fit(*_xy(), batch_size=BATCH, epochs=2, callbacks=[monitor], verbose=0)
    _free_the_profiler()
    report = monitor.report

    def ready(base):  # up, and done with its first load of the log dir
        return "xla/distinct_signatures" in get_json(base + "/data/plugin/scalars/tags", 5).get("train", {})

    with running_tensorboard(log_dir, root, ready) as base:
        yield base, report


@pytest.mark.slow
def test_interrupted_run_opens_in_a_real_tensorboard(interrupted_tensorboard):
    base, report = interrupted_tensorboard
    assert report.steps["train"] == 4 and len(report.traces) == 1
    plugins = get_json(base + "/data/plugins_listing")
    for name in ("scalars", "custom_scalars", "profile"):
        assert plugins[name]["enabled"], name
    tags = set(get_json(base + "/data/plugin/scalars/tags")["train"])
    assert "xla/distinct_signatures" in tags
    series = get_json(base + "/data/plugin/scalars/scalars?run=train&tag=xla/distinct_signatures")
    assert [(point[1], point[2]) for point in series] == [(1, 1.0)]
    if "xla/step_time_ms" in tags:  # absent when auto-clustering is live on CPU: steps 1-3 are then probed
        series = get_json(base + "/data/plugin/scalars/scalars?run=train&tag=xla/step_time_ms")
        assert 0 < max(point[1] for point in series) < 4  # step 4 ran in the window, step 5 was interrupted
    runs = get_json(base + "/data/plugin/profile/runs")
    assert runs == ["train/" + os.path.basename(report.traces[0].split(": ", 1)[1])]


@pytest.mark.slow
def test_interrupted_run_has_its_text_report_in_tensorboard(interrupted_tensorboard):
    base, _ = interrupted_tensorboard
    assert get_json(base + "/data/plugins_listing")["text"]["enabled"]
    assert get_json(base + "/data/plugin/text/tags") == {"train": [TAG_REPORT]}


# ----------------------------------- 4. internal errors with a trace window open


def _markdown_fails(monkeypatch, monitor_box):
    from xla_keras.report import model as report_module

    def broken(self):
        raise RuntimeError("injected: markdown report at epoch end")

    monkeypatch.setattr(report_module.XlaReport, "to_markdown", broken)


def _writer_flush_fails_inside_the_window(monkeypatch, monitor_box):
    original = SummaryWriters.flush

    def broken(self):
        if monitor_box and monitor_box[0].traces.open is not None:
            raise OSError(28, "injected: No space left on device")
        return original(self)

    monkeypatch.setattr(SummaryWriters, "flush", broken)


INJECTIONS = {
    # on_epoch_end at step 8, window (7, 10) open: the text report cannot be rendered.
    "on_epoch_end_markdown": (_markdown_fails, "injected: markdown", None),
    # The partial last batch (step 8) compiles inside the window: its event flush fails (disk full).
    "writer_flush_at_a_compile": (_writer_flush_fails_inside_the_window, "No space left on device", 4),
}


@pytest.fixture(scope="module", params=sorted(INJECTIONS))
def injected(request, tmp_path_factory):
    """One fit per injection point, shared by the tests below: what it logged,
    what it left behind, checked right after the fit."""
    inject, words, partial = INJECTIONS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    log_dir = str(tmp / "logs")
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(level=logging.DEBUG)
    logger = logging.getLogger("xla_keras")
    logger.addHandler(handler)
    level = _internals.autoclustering_setting()
    jit_level = tf.config.optimizer.get_jit()
    monitor_box = []
    jit = "on" if partial else "autoclustering"
    try:
        with pytest.MonkeyPatch.context() as mp:
            inject(mp, monitor_box)
            x, y = _xy(EPOCH_STEPS * BATCH - (BATCH - partial if partial else 0))
            model = _model()
            monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit=jit, profile=(7, 10), verbose=0)
            monitor_box.append(monitor)
            history = model.fit(x, y, batch_size=BATCH, epochs=3, callbacks=[monitor], verbose=0)
            result = {
                "words": words,
                "epochs": len(history.history["loss"]),
                "notes": monitor.report.notes,
                "errors": [r for r in records if r.levelno >= logging.ERROR],
                "jit_before": jit_level,
                "jit_after": tf.config.optimizer.get_jit(),
                "wrapped": hasattr(model.train_function, "_xla_keras_original"),
                "profiler_free": _profiler_is_free(tmp),
                "log_dir": log_dir,
            }
            # And the next fit is not broken by a disabled monitor.
            result["next_epochs"] = len(
                model.fit(x, y, batch_size=BATCH, epochs=1, callbacks=[monitor], verbose=0).history["loss"]
            )
    finally:
        logger.removeHandler(handler)
        _free_the_profiler()
        _internals.restore_autoclustering_setting(level)
    return result


@pytest.mark.slow
def test_internal_error_inside_a_trace_window_disables_once_and_training_finishes(injected):
    assert injected["epochs"] == 3 and injected["next_epochs"] == 1
    errors = injected["errors"]
    assert len(errors) == 1 and "disabled itself" in errors[0].getMessage()
    assert injected["words"] in errors[0].getMessage()
    assert any("disabled itself" in n and injected["words"] in n for n in injected["notes"])
    assert injected["jit_after"] == injected["jit_before"]
    assert not injected["wrapped"]


@pytest.mark.slow
def test_internal_error_inside_a_trace_window_frees_the_profiler_and_says_so_on_disk(injected):
    with open(os.path.join(injected["log_dir"], REPORT_FILE)) as f:
        saved = json.load(f)
    assert injected["profiler_free"]
    assert any("disabled itself" in n for n in saved["notes"])


# ----------------------------------------------------------- 5. a busy profiler


@pytest.mark.slow
@pytest.mark.timed  # compiles found from step times: nothing beside it (conftest)
def test_someone_elses_profiler_session_stays_theirs(tmp_path, caplog):
    theirs = tmp_path / "theirs"
    log_dir = str(tmp_path / "logs")
    tf.profiler.experimental.start(str(theirs))
    try:
        model = _model()
        x, y = _xy(20 * BATCH)
        monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", verbose=0)  # profile="auto"
        with caplog.at_level(logging.INFO, logger="xla_keras"):
            history = model.fit(x, y, batch_size=BATCH, epochs=2, callbacks=[monitor], verbose=0)
            # A second fit, stopped mid-epoch by a data error: the error path must not stop their session.
            with pytest.raises(tf.errors.InvalidArgumentError, match="bad data"):
                model.fit(_dataset(5, _raiser(ValueError("bad data"))), epochs=1, callbacks=[monitor], verbose=0)
    finally:
        tf.profiler.experimental.stop()  # raises if anyone stopped (or replaced) their session
    assert len(history.history["loss"]) == 2
    report = monitor.report
    # Said once each, at INFO: they change nothing the user asked for (the report keeps them).
    logged = [" ".join(r.getMessage().split()) for r in caplog.records if r.levelno == logging.INFO]
    assert sum("profiler was busy" in m for m in logged) == 1
    assert sum("skipped a profiler trace" in m for m in logged) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("profiler was busy" in n for n in report.notes)
    assert report.probe == "timing" and report.traces == []
    assert report.compilation_count["train"] >= 1  # XLA still counted, from step times
    assert {c.source for c in report.compilations} == {"timing"}
    assert not os.path.exists(os.path.join(log_dir, "train", "plugins"))
    assert any(f.endswith(".xplane.pb") for _, _, files in os.walk(theirs) for f in files)  # their trace
    assert _profiler_is_free(tmp_path)


# ------------------------- 6. errors no step wrapper sees, and an unfinished first step


class _RaiseIn(keras.callbacks.Callback):
    def __init__(self, hook):
        super().__init__()
        setattr(self, hook, self._boom)

    @staticmethod
    def _boom(*args, **kwargs):
        raise RuntimeError("boom in another callback")


def _run_and_forget_the_traceback(call, error):
    """Like a script's try/except: once the except block ends, the failed
    call's frames (and its CallbackList) are gone."""
    try:
        call()
    except error:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize(
    "hook, order, call",
    [
        ("on_train_begin", "monitor_first", "fit"),  # a hook of the monitor's own kind, after it ran
        ("on_train_end", "monitor_last", "fit"),  # the monitor's on_train_end never runs
        ("on_predict_batch_end", "monitor_last", "predict"),
        ("on_predict_end", "monitor_last", "predict"),
        ("on_test_batch_end", "monitor_last", "evaluate"),
    ],
)
def test_an_error_in_any_callback_hook_gives_everything_back(hook, order, call, tmp_path):
    log_dir = str(tmp_path / "logs")
    model = _model()
    before = tf.config.optimizer.get_jit()
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="autoclustering", verbose=0)
    other = _RaiseIn(hook)
    callbacks = [monitor, other] if order == "monitor_first" else [other, monitor]
    x, y = _xy()
    run = {
        "fit": lambda: model.fit(x, y, batch_size=BATCH, epochs=1, callbacks=callbacks, verbose=0),
        "predict": lambda: model.predict(x, batch_size=BATCH, callbacks=callbacks, verbose=0),
        "evaluate": lambda: model.evaluate(x, y, batch_size=BATCH, callbacks=callbacks, verbose=0),
    }[call]
    assert _run_and_forget_the_traceback(run, RuntimeError)
    assert tf.config.optimizer.get_jit() == before
    for attr in ("train_function", "test_function", "predict_function"):
        assert not hasattr(getattr(model, attr), "_xla_keras_original"), attr
    assert not monitor.in_call
    with open(os.path.join(log_dir, REPORT_FILE)) as f:
        assert json.load(f)["steps"] == monitor.report.steps


@pytest.mark.slow
def test_ctrl_c_in_keras_own_loop_code_is_cleaned_up_once_the_fit_is_gone(tmp_path, monkeypatch):
    """Ctrl-C while Keras creates the validation iterator: no hook and no step sees it."""
    from tensorflow.python.data.ops import dataset_ops

    real_iter, armed = dataset_ops.DatasetV2.__iter__, [False]

    def iterate(self):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt
        return real_iter(self)

    monkeypatch.setattr(dataset_ops.DatasetV2, "__iter__", iterate)

    class Arm(keras.callbacks.Callback):
        def on_test_begin(self, logs=None):
            armed[0] = True

    log_dir = str(tmp_path / "logs")
    model = _model()
    before = tf.config.optimizer.get_jit()
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="autoclustering", verbose=0)
    x, y = _xy()
    assert _run_and_forget_the_traceback(
        lambda: model.fit(
            x, y, batch_size=BATCH, epochs=2, validation_split=0.25, callbacks=[monitor, Arm()], verbose=0
        ),
        KeyboardInterrupt,
    )
    assert tf.config.optimizer.get_jit() == before  # a plain fit next would not auto-cluster
    assert not hasattr(model.train_function, "_xla_keras_original")
    with open(os.path.join(log_dir, REPORT_FILE)) as f:
        assert json.load(f)["steps"]["train"] == 6  # every train step of epoch 1 ran


@pytest.mark.slow
def test_an_error_in_another_callbacks_batch_begin_hook_is_seen_at_once(tmp_path):
    """A callback that reads a weight at batch begin gets the device's error (a dead peer, say): the
    files say "interrupted" while the user still holds the traceback (no garbage collection needed)."""

    class FailsAtBatchBegin(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) + 1 == K:
                raise RuntimeError("the device failed")

    log_dir = str(tmp_path / "logs")
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", verbose=0)
    x, y = _xy()
    with pytest.raises(RuntimeError, match="the device failed") as held:
        _model().fit(x, y, batch_size=BATCH, epochs=2, callbacks=[monitor, FailsAtBatchBegin()], verbose=0)
    with open(os.path.join(log_dir, REPORT_FILE)) as f:
        on_disk = json.load(f)
    assert held.value.__traceback__ is not None  # the fit's frames are still alive
    assert on_disk["run_state"] == "interrupted" and on_disk["steps"]["train"] == K - 1
    assert not monitor.in_call


_EXIT_DURING_A_FIT = """
import os, sys
import numpy as np, keras
import xla_keras
from tensorflow.python.data.ops import dataset_ops


real_iter = dataset_ops.DatasetV2.__iter__

class Arm(keras.callbacks.Callback):
    def on_test_begin(self, logs=None):  # Keras's own loop code then fails creating the validation iterator
        def iterate(self):
            raise RuntimeError("failed in Keras's own loop code")
        dataset_ops.DatasetV2.__iter__ = iterate

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")
monitor = xla_keras.XlaMonitor(log_dir=sys.argv[1], verbose=0)
model.fit(x, y, batch_size=8, epochs=2, validation_split=0.25, callbacks=[monitor, Arm()], verbose=0)
"""


@pytest.mark.slow
def test_a_fit_still_running_at_interpreter_exit_is_written_interrupted(tmp_path):
    """An uncaught exception from Keras's own loop code: Python keeps its traceback (and the fit's frames)
    to the end, so no hook and no garbage collection tells the monitor; its exit handler does."""
    import subprocess
    import sys

    log_dir = tmp_path / "logs"
    script = tmp_path / "exits.py"
    script.write_text(_EXIT_DURING_A_FIT)
    done = subprocess.run([sys.executable, str(script), str(log_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "failed in Keras's own loop code" in done.stderr, done.stderr[-2000:]
    with open(log_dir / REPORT_FILE) as f:
        on_disk = json.load(f)
    assert on_disk["run_state"] == "interrupted", on_disk["run_state"]
    assert on_disk["steps"]["train"] == 6  # every train step of epoch 1 ran


@pytest.mark.slow
def test_an_unfinished_first_step_still_counts_its_compile_when_it_runs_again():
    class CtrlCWhileTracing(keras.layers.Layer):
        armed = False

        def call(self, x):
            if CtrlCWhileTracing.armed:  # Python runs while TensorFlow traces the first step
                CtrlCWhileTracing.armed = False
                raise KeyboardInterrupt
            return x

    model = keras.Sequential([keras.Input((4,)), CtrlCWhileTracing(), keras.layers.Dense(1)])
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    x, _ = _xy()
    CtrlCWhileTracing.armed = True
    assert _run_and_forget_the_traceback(
        lambda: model.predict(x, batch_size=BATCH, callbacks=[monitor], verbose=0), KeyboardInterrupt
    )
    model.predict(x, batch_size=BATCH, callbacks=[monitor], verbose=0)
    report = monitor.report
    # XLA compiled once, in the second predict (a control without the interrupt compiles once too).
    assert report.compilation_count["predict"] == 1
    assert [c.source for c in report.compilations] == ["profiler"]


@pytest.mark.slow
def test_an_internal_error_after_a_storm_fallback_lets_the_fit_finish(monkeypatch, caplog):
    """The fallback rebuilt the step functions without XLA; disabling must not leave them None
    (Keras reads train_function at every step), and the model's own jit comes back afterwards."""
    sizes = [4 + i % 10 for i in range(30)]
    data = tf.data.Dataset.from_generator(
        lambda: ((np.ones((n, 4), np.float32), np.ones((n, 1), np.float32)) for n in sizes),
        output_signature=(tf.TensorSpec((None, 4), tf.float32), tf.TensorSpec((None, 1), tf.float32)),
    )
    model = _model()
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", on_storm="fallback", storm_threshold=3, verbose=0)

    def boom(self, phase):
        raise RuntimeError("injected internal error")

    from xla_keras.session.session import Session

    monkeypatch.setattr(Session, "end_of_run", boom)  # at the first epoch end, after the fallback
    with caplog.at_level(logging.ERROR, logger="xla_keras"):
        history = _run_fit(model, data, monitor)
    assert len(history.history["loss"]) == 2  # both epochs ran
    assert monitor.report.fallback is not None and "disabled itself" in monitor.error
    assert len([r for r in caplog.records if r.name == "xla_keras"]) == 1
    assert model.jit_compile is True  # the user's setting (jit="on") is back once the fit is over
    model.fit(data, epochs=1, verbose=0)  # and the next fit runs


def _run_fit(model, data, monitor):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the storm warning
        return model.fit(data, epochs=2, verbose=0, callbacks=[monitor])


def test_paths_tilde_and_numpy_integers_are_taken_like_keras_takes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monitor = xla_keras.XlaMonitor(
        log_dir=tmp_path / "logs",
        storm_threshold=np.int64(4),
        storm_window=np.int32(50),
        profile=(np.int64(3), np.int64(6)),
        update_freq=np.int64(2),
        verbose=np.int64(0),
        max_records=np.int64(10),
    )
    assert monitor.log_dir == str(tmp_path / "logs")
    assert (
        monitor.storm_threshold,
        monitor.storm_window,
        monitor.profile,
        monitor.update_freq,
        monitor.verbose,
        monitor.max_records,
    ) == (4, 50, (3, 6), 2, 0, 10)
    assert all(type(v) is int for v in (monitor.storm_threshold, monitor.update_freq, *monitor.profile))
    assert xla_keras.XlaMonitor(log_dir="~/xla", verbose=0).log_dir == str(tmp_path / "xla")


def _varying_batches(sizes):
    return tf.data.Dataset.from_generator(
        lambda: ((np.ones((n, 4), np.float32), np.ones((n, 1), np.float32)) for n in sizes),
        output_signature=(tf.TensorSpec((None, 4), tf.float32), tf.TensorSpec((None, 1), tf.float32)),
    )


@pytest.mark.slow
def test_an_internal_error_after_a_fallback_in_a_standalone_evaluate_lets_it_finish(monkeypatch):
    model = _model()
    model.fit(*_xy(), batch_size=BATCH, epochs=1, verbose=0)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", on_storm="fallback", storm_threshold=3, verbose=0)
    from xla_keras.session.session import Session

    real_call_ended = Session.call_ended

    def call_ended(self, phase, *args, **kwargs):
        if self.fallback is not None:
            raise RuntimeError("injected internal error after the fallback")
        return real_call_ended(self, phase, *args, **kwargs)

    monkeypatch.setattr(Session, "call_ended", call_ended)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the storm warning
        model.evaluate(_varying_batches([4 + i % 8 for i in range(16)]), callbacks=[monitor], verbose=0)
    assert "disabled itself" in monitor.error
    model.evaluate(*_xy(), batch_size=BATCH, verbose=0)  # the model's functions still work


@pytest.mark.slow
def test_a_stop_iteration_from_a_batch_hook_ends_the_epoch_not_the_monitor():
    """Keras's catch_stop_iteration turns it into the end of the epoch and the fit goes on."""

    class Exhausted(keras.callbacks.Callback):
        done = False

        def on_train_batch_end(self, batch, logs=None):
            if batch == 1 and not self.done:
                self.done = True
                next(iter([]))

    model = _model()
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.fit(*_xy(), batch_size=BATCH, epochs=3, verbose=0, callbacks=[monitor, Exhausted()])
    assert monitor.report.steps["train"] == int(model.optimizer.iterations.numpy())
    assert not monitor.in_call and monitor.error is None


@pytest.mark.slow
@pytest.mark.timed  # compiles found from step times: nothing beside it (conftest)
def test_a_failed_pull_does_not_forget_the_previous_steps_compile(tmp_path):
    def data(fail):
        def gen():
            yield np.ones((4, 4), np.float32), np.ones((4, 1), np.float32)
            if fail:
                raise ValueError("bad data")

        return tf.data.Dataset.from_generator(
            gen, output_signature=(tf.TensorSpec((None, 4), tf.float32), tf.TensorSpec((None, 1), tf.float32))
        )

    tf.profiler.experimental.start(str(tmp_path / "busy"))  # compile counts from step times
    try:
        model = _model()
        monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
        with pytest.raises(Exception, match="bad data"):
            model.fit(data(True), epochs=1, verbose=0, callbacks=[monitor])
        model.fit(data(False), epochs=1, verbose=0, callbacks=[monitor])
    finally:
        tf.profiler.experimental.stop()
    # One shape, compiled once at step 1 (the failed pull at step 2 compiled nothing).
    assert [c.step for c in monitor.report.compilations] == [1]
