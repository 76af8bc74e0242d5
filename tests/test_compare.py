"""xla_keras.compare on real fits: same weights and batches, honest table, flags restored."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import xla_keras
from xla_keras.backends.tensorflow import (
    _internals,
    flags,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("test_compare"),
]  # every test here fits (in process or in a subprocess)


def _build():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def _data(n=64 * 24):
    rng = np.random.default_rng(0)
    return rng.random((n, 8), dtype=np.float32), rng.random((n, 1), dtype=np.float32)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    log_dir = str(tmp_path_factory.mktemp("compare"))
    flags.set_autoclustering(False)
    return xla_keras.compare(_build, _data(), steps=24, batch_size=64, log_dir=log_dir), log_dir


def test_every_mode_has_a_row_and_off_is_the_baseline(table):
    t, _ = table
    assert [r.mode for r in t.results] == ["off", "autoclustering", "on"]
    off, auto, on = t.results
    assert off.xla_ran is False and off.compiles == 0 and off.speedup_vs_off == pytest.approx(1.0)
    assert on.xla_ran is True and on.compiles == 1 and on.compile_seconds > 0.05
    assert on.first_step_seconds > on.compile_seconds  # the first step holds the compile
    # In this process TensorFlow created its devices long ago: auto-clustering cannot compile on CPU,
    # and the table says so instead of claiming XLA ran.
    assert auto.xla_ran is False and auto.compiles == 0 and "configure(cpu_autoclustering=True)" in auto.reason
    assert "auto-clustering: XLA did not run" not in str(t)  # mode names are printed as given
    assert "autoclustering: XLA did not run" in str(t)


def test_table_numbers_are_consistent(table):
    t, _ = table
    off = t.results[0]
    for r in t.results:
        assert r.steady_step_ms and r.steady_step_ms > 0 and r.steady_spread_ms is not None
        assert r.speedup_vs_off == pytest.approx(off.steady_step_ms / r.steady_step_ms)
    on = t.results[2]
    if on.speedup_vs_off > 1:
        saved = off.steady_step_ms / 1e3 - on.steady_step_ms / 1e3
        assert on.break_even_step == pytest.approx(on.compile_seconds / saved)
    else:
        assert on.break_even_step is None and "never" in str(t)
    d = t.to_dict()
    assert d["steps"] == 24 and {r["mode"] for r in d["results"]} == {"off", "autoclustering", "on"}


def test_each_mode_is_a_tensorboard_run_and_global_flags_are_restored(table):
    import os

    _, log_dir = table
    assert sorted(os.listdir(log_dir)) == ["autoclustering", "off", "on"]
    assert os.path.exists(os.path.join(log_dir, "on", "xla_report.json"))
    assert _internals.autoclustering_enabled() is False


def test_copies_start_from_the_same_weights():
    model = _build()
    first_losses = []

    class FirstLoss(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                first_losses.append(logs["loss"])

    original_fit = keras.Model.fit

    def fit_with_spy(self, *args, **kwargs):
        kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [FirstLoss()]
        return original_fit(self, *args, **kwargs)

    keras.Model.fit = fit_with_spy
    try:
        xla_keras.compare(model, _data(), steps=4, modes=("off", "on"), batch_size=64)
    finally:
        keras.Model.fit = original_fit
    # warm-up copy, off, on: same weights and batches, so the same first loss (XLA's rounding aside)
    assert len(first_losses) == 3
    assert first_losses[1] == pytest.approx(first_losses[2], rel=1e-4)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"modes": ("fast",)}, ValueError, ["'off'", "'autoclustering'", "'on'"]),
        ({"modes": ("keep",)}, ValueError, ["'off'"]),
        ({"modes": "on"}, ValueError, ["sequence of modes", "('on',)", "the string 'on'"]),
        ({"steps": 1}, ValueError, ["steps must be an int >= 3"]),
        ({"data": "x.npy"}, TypeError, ["tf.data.Dataset"]),
    ],
)
def test_bad_input_names_the_choices(kwargs, error, words):
    args = {"model_or_builder": _build, "data": _data(), **kwargs}
    with pytest.raises(error) as info:
        xla_keras.compare(**args)
    for word in words:
        assert word in str(info.value)


def test_unbuilt_models_and_short_data():
    def unbuilt():  # no Input: weights exist only once the model has seen a batch
        model = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        return model

    x, y = _data(64 * 2)  # 2 batches, cycled to 6 steps
    table = xla_keras.compare(unbuilt, (x, y), steps=6, modes=("off", "on"), batch_size=64)
    assert table.steps == 6 and [r.compiles for r in table.results] == [0, 1]
    # 6 steps leave at most 5 steady ones a mode: no ratio and no break-even from so few, and the table says so.
    assert all(0 < r.steady_samples <= 5 for r in table.results)
    assert [(r.speedup_vs_off, r.break_even_step) for r in table.results] == [(None, None)] * 2
    assert "withheld where a side has fewer than 20 steady steps" in str(table)
    table = xla_keras.compare(unbuilt(), (x, y), steps=6, modes=("on",), batch_size=64)
    assert [r.mode for r in table.results] == ["off", "on"]
