"""Real fits that make the monitor speak, one kind of message each, for tests/test_messages.py.

    python tests/message_fits.py KIND LOG_DIR     (KIND: one of KINDS, or "all")
    python tests/message_fits.py keras_hub OUT.json

``keras_hub``: a KerasHub task model (``BertTextClassifier`` on a one-layer ``BertBackbone`` of random
weights, ``preprocessor=None``) fit on token ids of two lengths, a storm by ``storm_threshold=2``; its
XlaKerasWarnings as Python located them (file, line), and this file's line that called ``fit``.

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
from models import text_model

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
    model = text_model()
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


def keras_hub_fit(out):
    import json

    import keras
    import keras_hub
    import tensorflow as tf

    import xla_keras

    rows, lengths = 4, (5, 9)

    def data():
        rng = np.random.default_rng(0)
        for n in lengths:
            ids = rng.integers(1, 100, size=(rows, n)).astype("int32")
            features = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids, bool)}
            yield features, rng.integers(0, 2, size=(rows,))

    ids = tf.TensorSpec((rows, None), tf.int32)
    spec = ({"token_ids": ids, "segment_ids": ids, "padding_mask": tf.TensorSpec((rows, None), tf.bool)},)
    dataset = tf.data.Dataset.from_generator(data, output_signature=spec + (tf.TensorSpec((rows,), tf.int64),))
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=100, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=16
    )
    model = keras_hub.models.BertTextClassifier(backbone=backbone, num_classes=2, preprocessor=None)
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", storm_threshold=2, verbose=0, profile=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_line = sys._getframe().f_lineno + 1
        model.fit(dataset, epochs=1, verbose=0, callbacks=[monitor])
    said = [
        {"file": w.filename, "line": w.lineno, "text": str(w.message)}
        for w in caught
        if issubclass(w.category, xla_keras.XlaKerasWarning)
    ]
    with open(out, "w") as f:
        fit = {"file": __file__, "line": fit_line}
        json.dump({"warnings": said, "fit": fit, "storms": len(monitor.report.storms)}, f)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    which = sys.argv[1]
    if which == "keras_hub":
        keras_hub_fit(sys.argv[2])
    else:
        main(KINDS if which == "all" else (which,), sys.argv[2])
