"""Fits for tests/test_coverage.py, in a fresh process whose environment asks TensorFlow for its own
clustering summary (TF_CPP_VMODULE=mark_for_compilation_pass=3, TF_CPP_MIN_LOG_LEVEL=0: the ground truth,
on stderr; the monitor never sets these flags itself).

    python tests/coverage_fits.py LOG_DIR [--once]

A model as keras-io's structured-data examples build it (named inputs, a StringLookup inside the model,
two Dense layers), under jit="autoclustering" with the early CPU opt-in: fit "as_built"; then the advice
the report gives, applied, and the same model fit again ("advised"). Between the two fits a marker line
goes to stderr (fd 2, as TensorFlow's log does). ``--once``: the first fit only (tests/test_tab_browser.py's
run). The last line printed is ``XLA_KERAS_FITS <json>``.
"""

import json
import os
import sys

import xla_keras

xla_keras.configure(cpu_autoclustering=True)

MARKER = b"XLA_KERAS_COVERAGE_MARKER\n"


def fit(log_dir):
    import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    colors = np.array([["red"], ["green"], ["blue"]])[rng.integers(0, 3, 64)]
    numbers = rng.normal(size=(64, 3)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices(({"color": colors, "num": numbers}, y)).batch(16)
    color = keras.Input((1,), dtype="string", name="color")
    num = keras.Input((3,), name="num")
    lookup = keras.layers.StringLookup(vocabulary=["red", "green", "blue"], output_mode="one_hot", name="color_lookup")
    hidden = keras.layers.Dense(8, activation="relu", name="hidden")(keras.layers.Concatenate()([lookup(color), num]))
    model = keras.Model({"color": color, "num": num}, keras.layers.Dense(1, name="head")(hidden))
    model.compile("adam", "mse")
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="autoclustering", verbose=0)
    model.fit(dataset, epochs=6, verbose=0, callbacks=[monitor])  # 24 steps: the steady window at 10-14
    return {"report": monitor.report.to_dict(), "printed": str(monitor.report), "summary": monitor.report.summary()}


def main(log_dir, once=False):
    import tensorflow as tf

    out = {"as_built": fit(os.path.join(log_dir, "as_built"))}
    if once:
        print("XLA_KERAS_FITS " + json.dumps(out))
        return
    os.write(2, MARKER)
    code = out["as_built"]["report"]["coverage"]["advice"]["code"]  # the advice's code, as the user runs it
    exec(code, {"tf": tf})
    out["advice_code"] = code
    out["advised"] = fit(os.path.join(log_dir, "advised"))
    print("XLA_KERAS_FITS " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], "--once" in sys.argv[2:])
