"""Real fits that make the monitor speak, one kind of message each, for tests/test_messages.py.

    python tests/message_fits.py KIND LOG_DIR     (KIND: one of KINDS, or "all")

Each fit runs with ``verbose=1`` (the default) and Keras's ``verbose=2`` (a line per epoch: the
monitor speaks only when the fit's verbose allows it too); Python's warnings other than ours are
ignored and TensorFlow's log lines are off, so stdout and stderr hold Keras's epoch lines and the
monitor's own words: printed decisions and summaries (stdout), warnings and logged notes (stderr).
A line ``=== KIND`` on both streams starts each kind.
"""

import logging
import os
import sys
import warnings

import numpy as np

KINDS = ("storm", "fallback", "budget", "fastest", "refusal", "missing_plugin")


def _sequences(storm):
    """Padded batches of varying length (a storm), or one length with a partial last batch."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 80, size=64) if storm else np.full(100, 12)

    def gen():
        for n in lengths:
            yield np.arange(n, dtype=np.int32) % 97 + 1, np.float32(n % 2)

    spec = (tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32))
    return tf.data.Dataset.from_generator(gen, output_signature=spec).padded_batch(8 if storm else 32)


def _model():
    import keras

    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(100, 8),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    return model


def fit(kind, log_dir):
    import xla_keras

    monitor_kwargs = {"log_dir": os.path.join(log_dir, kind), "jit": "on", "profile": None}
    data, fit_kwargs = _sequences(storm=kind in ("storm", "fallback")), {"epochs": 1}
    if kind == "storm":
        monitor_kwargs.update(storm_threshold=4)
    elif kind == "fallback":
        monitor_kwargs.update(storm_threshold=4, on_storm="fallback")
    elif kind == "budget":  # a partial last batch; no floor, so its share alone decides
        monitor_kwargs.update(compile_budget_floor=0)
        fit_kwargs["epochs"] = 3
    elif kind == "fastest":
        monitor_kwargs["jit"] = "fastest"
    elif kind == "missing_plugin":
        # As on a machine without the Profile tab's plugin: the monitor's own check says so.
        from xla_keras.core import versions

        versions.profile_tab_installed = lambda: False
        monitor_kwargs["profile"] = (2, 3)
    model = _model()
    if kind == "refusal":
        model.compile("adam", "mse", run_eagerly=True)
    monitor = xla_keras.XlaMonitor(**monitor_kwargs)
    model.fit(data, verbose=2, callbacks=[monitor], **fit_kwargs)


def main(kinds, log_dir):
    warnings.simplefilter("ignore")
    from xla_keras.errors import XlaKerasWarning

    warnings.simplefilter("default", XlaKerasWarning)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for name in ("tensorflow", "absl", "keras"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for kind in kinds:
        print(f"=== {kind}", flush=True)
        print(f"=== {kind}", file=sys.stderr, flush=True)
        fit(kind, log_dir)
        sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    which = sys.argv[1]
    main(KINDS if which == "all" else (which,), sys.argv[2])
