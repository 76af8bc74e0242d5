"""Storms in real fits: raise stops cleanly, and the advice we print works."""

import json
import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import xla_keras  # noqa: E402
from xla_keras import _internals  # noqa: E402


def _sequences(n=96, low=4, high=80, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high, size=n)

    def gen():
        for length in lengths:
            yield np.arange(length, dtype=np.int32) % 97 + 1, np.float32(length % 2)

    return tf.data.Dataset.from_generator(gen, output_signature=(
        tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32)))


def _text_model():
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(100, 8),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model


def test_raise_stops_the_fit_at_the_storm_with_files_flushed(tmp_path):
    log_dir = str(tmp_path / "logs")
    _internals.set_autoclustering(False)
    model = _text_model()
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", on_storm="raise", storm_threshold=3, verbose=0)
    with pytest.raises(xla_keras.RecompilationStormError) as info:
        model.fit(_sequences().padded_batch(8), epochs=2, callbacks=[monitor], verbose=0)
    message = str(info.value)
    assert message.startswith("Recompilation storm (train): 3 new input shapes")
    assert "Input 'x' axis 1 varies" in message
    report = monitor.report
    assert report.steps["train"] == report.storms[0].step == report.compilations[2].step
    with open(os.path.join(log_dir, "xla_report.json")) as f:
        saved = json.load(f)
    assert saved["storms"][0]["step"] == report.storms[0].step
    assert saved["storms"][0]["action"] == "raise"
    assert not hasattr(model.train_function, "_xla_keras_original")
    assert _internals.autoclustering_enabled() is False


def test_following_the_printed_advice_removes_the_storm():
    storming = xla_keras.XlaMonitor(log_dir=None, jit="on", storm_threshold=4, verbose=0)
    with pytest.warns(xla_keras.XlaKerasWarning, match="Recompilation storm"):
        _text_model().fit(_sequences().padded_batch(8), epochs=1, callbacks=[storming], verbose=0)
    fix = storming.report.storms[0].fix
    assert fix["kind"] == "pad_to_lengths"

    # Apply the code we printed, as a user would paste it, to the same raw data.
    scope = {"tf": tf, "ds": _sequences()}
    exec(fix["code"], scope)  # noqa: S102 - the advice is code, run it as given
    fixed = xla_keras.XlaMonitor(log_dir=None, jit="on", storm_threshold=4, verbose=0)
    _text_model().fit(scope["ds"], epochs=2, callbacks=[fixed], verbose=0)
    report = fixed.report
    assert report.storms == []
    assert report.total_compilations == report.distinct_signatures["train"] <= fix["compiles"]
    padded = {c.signature[0].shape[1] for c in report.compilations}
    assert padded <= set(fix["lengths"])
