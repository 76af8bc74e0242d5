"""A fit under auto-clustering on CPU whose compiles tests/test_cluster_fits.py holds to XLA's and
TensorFlow's own account, step by step.

    python tests/cluster_fits.py OUT_JSON DUMP_DIR

The test sets ``XLA_FLAGS=--xla_dump_to=DUMP_DIR``, ``TF_CPP_MIN_LOG_LEVEL=0`` and
``TF_CPP_VMODULE=device_compiler=1`` before TensorFlow starts. The model (Dense, BatchNormalization,
Dropout, Dense, with Adam) builds Adam's slots inside the step's first trace, so TensorFlow runs its one-off
variable initialiser at the first step, and auto-clustering compiles a cluster of it. 100 rows in batches
of 32: three full batches and a partial one of 4 rows per epoch, two epochs.

OUT_JSON holds the report (``to_dict()``) and, per train step, the XLA modules dumped during it
(``dumped``: {step: [file names]}). On stderr, each train step is framed by ``XLA_KERAS_STEP begin N``
and ``XLA_KERAS_STEP end N`` lines, written unbuffered between TensorFlow's own log lines, so that each
"Compilation of XLA executable time" line can be read against the step it happened in.
"""

import json
import os
import sys
import warnings

import xla_keras

xla_keras.configure(cpu_autoclustering=True)  # before any model: TensorFlow reads it when it makes its devices

import keras  # noqa: E402
import numpy as np  # noqa: E402

ROWS, BATCH, FEATURES = 100, 32, 10


def _before_optimizations(dump_dir):
    if not os.path.isdir(dump_dir):
        return set()
    return {f for f in os.listdir(dump_dir) if f.endswith("before_optimizations.txt")}


class StepFrames(keras.callbacks.Callback):
    """Marks each train step's begin and end on stderr, and lists the modules XLA dumped during it."""

    def __init__(self, dump_dir):
        super().__init__()
        self.dump_dir = dump_dir
        self.seen = set()
        self.dumped = {}
        self.step = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.step += 1
        self.seen = _before_optimizations(self.dump_dir)
        os.write(2, f"XLA_KERAS_STEP begin {self.step}\n".encode())

    def on_train_batch_end(self, batch, logs=None):
        os.write(2, f"XLA_KERAS_STEP end {self.step}\n".encode())
        new = sorted(_before_optimizations(self.dump_dir) - self.seen)
        if new:
            self.dumped[self.step] = new


def main(out_path, dump_dir):
    warnings.simplefilter("ignore")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(32, activation="relu")(inputs)
    hidden = keras.layers.Dropout(0.2)(keras.layers.BatchNormalization()(hidden))
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(keras.optimizers.Adam(), "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    y = rng.normal(size=(ROWS, 1)).astype("float32")
    frames = StepFrames(dump_dir)
    monitor = xla_keras.XlaMonitor(
        log_dir=None, jit="autoclustering", profile=None, verbose=0, compile_budget=0.01, compile_budget_floor=0.0
    )
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[frames, monitor])
    report = monitor.report
    with open(out_path, "w") as f:
        json.dump(
            {
                "report": report.to_dict(),
                "text": str(report),
                "dumped": frames.dumped,
                "iterations": int(model.optimizer.iterations.numpy()),
            },
            f,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
