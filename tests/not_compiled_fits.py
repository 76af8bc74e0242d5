"""Fits for tests/test_not_compiled.py, in a fresh process (XLA_FLAGS=--xla_dump_to must be set before
TensorFlow starts): a model with a StringLookup (Keras refuses jit_compile=True for it) under jit="on";
then the move the report hands out, applied as the user would (its code run as written), and the refit.

    python tests/not_compiled_fits.py DUMP_DIR MODEL_KIND

MODEL_KIND: "dict" (named inputs, a StringLookup on one of them, as keras-io's structured-data examples)
or "single" (one string input). The last line printed is ``XLA_KERAS_FITS <json>``.
"""

import json
import os
import sys
import warnings


def dumped(dump):
    return sorted(f for f in os.listdir(dump) if f.endswith("before_optimizations.txt")) if os.path.isdir(dump) else []


def data(kind):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    colors = np.array([["red"], ["green"], ["blue"]])[rng.integers(0, 3, 64)]
    numbers = rng.normal(size=(64, 3)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    x = {"color": colors, "num": numbers} if kind == "dict" else colors
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


def model_of(kind):
    import keras

    color = keras.Input(shape=(1,), dtype="string", name="color")
    lookup = keras.layers.StringLookup(vocabulary=["red", "green", "blue"], output_mode="one_hot", name="color_lookup")
    if kind == "dict":
        num = keras.Input(shape=(3,), name="num")
        hidden = keras.layers.Concatenate()([lookup(color), num])
        inputs = {"color": color, "num": num}
    else:
        hidden, inputs = lookup(color), color
    output = keras.layers.Dense(1)(keras.layers.Dense(8, activation="relu")(hidden))
    return keras.Model(inputs, output)


def main(dump, kind):
    import keras

    import xla_keras

    dataset = data(kind)
    model = model_of(kind)
    model.compile("adam", "mse")
    monitor = xla_keras.XlaMonitor(jit="on", verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(dataset, epochs=2, callbacks=[monitor], verbose=0)
    said = [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)]
    first = monitor.report.to_dict()
    after_first = dumped(dump)
    printed = str(monitor.report)
    # The user's move: the report's code run as written, `model` and `dataset` being theirs.
    scope = {"keras": keras, "model": model, "dataset": dataset}
    exec(first["jit_fix"].replace("model.compile(...)", "model.compile('adam', 'mse')"), scope)
    refit_monitor = xla_keras.XlaMonitor(jit="on", verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scope["model"].fit(scope["dataset"], epochs=2, callbacks=[refit_monitor], verbose=0)
    refit_said = [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)]
    out = {
        "first": first,
        "printed": printed,
        "warnings": said,
        "dumped_after_first": after_first,
        "refit": refit_monitor.report.to_dict(),
        "refit_warnings": refit_said,
        "dumped_after_refit": dumped(dump),
        "iterations": int(scope["model"].optimizer.iterations.numpy()),
    }
    print("XLA_KERAS_FITS " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
