"""Fits for tests/test_precompile.py, in a fresh process (XLA_FLAGS must be set before the framework starts):
a bucketed ``tf.data`` pipeline (``bucket_by_sequence_length``, padded to each boundary, remainder dropped)
fitted with and without ``XlaMonitor(precompile=...)``.

    python tests/precompile_fits.py DUMP_DIR WORK_DIR SCENARIO

Scenarios: ``ways`` (one process: a fit without precompile, then fresh models of the same seed with the
set given as specs, taken from the first fit's log dir by ``"auto"``, and taken from an ``apply_fix``
bucketed dataset by ``"auto"`` beside a fit of that dataset without precompile); ``cache`` (one fit with
the specs and the persistent cache in WORK_DIR/cache: run it twice, in two processes).

Per fit it prints ``XLA_KERAS_PRECOMPILE <json>``: the report, the step-program module files XLA's dump got
during the fit with their times against the end of step 1 (a callback's wall clock), the distinct shapes
the pipeline feeds (iterated here), the final weights' digest and values, ``optimizer.iterations``, the
wall time of the fit and of its start to the end of step 1, and JAX's own backend compile events before
step 1 (a listener of this script's).
"""

import json
import os
import sys
import time

import numpy as np

DUMP, WORK, SCENARIO = sys.argv[1], sys.argv[2], sys.argv[3]
BACKEND = os.environ["KERAS_BACKEND"]
BOUNDARIES = [16, 32, 48, 64, 80, 96, 112, 128]
BATCH = 16

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402 - the pipeline is tf.data on both backends

import xla_keras  # noqa: E402

if SCENARIO == "cache":
    xla_keras.configure(cache_dir=os.path.join(WORK, "cache"))

COMPILE_EVENTS = []  # (wall time, seconds) of JAX's backend compiles (loads from the cache included)
if BACKEND == "jax":
    import jax

    def _on_duration(event, seconds, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            COMPILE_EVENTS.append((time.time(), seconds))

    jax.monitoring.register_event_duration_secs_listener(_on_duration)


def examples(n=384, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, BOUNDARIES[-1], size=n)  # every bucket gets full batches
    tokens = [rng.integers(1, 64, size=length).astype(np.int32) for length in lengths]
    labels = rng.integers(0, 2, size=n).astype(np.float32)
    return tokens, labels


def source():
    tokens, labels = examples()
    return tf.data.Dataset.from_generator(
        lambda: zip(tokens, labels),
        output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32)),
    )


def bucketed():
    """The user's own bucketing: one batch shape per boundary."""
    return source().bucket_by_sequence_length(
        lambda x, y: tf.shape(x)[0],
        bucket_boundaries=BOUNDARIES,  # lengths stay under the last: its bucket beyond is empty
        bucket_batch_sizes=[BATCH] * (len(BOUNDARIES) + 1),
        pad_to_bucket_boundary=True,
        drop_remainder=True,
    )


def specs():
    """The set, as the user who wrote ``bucketed`` knows it: each bucket's padded length."""
    shapes = [b - 1 for b in BOUNDARIES]
    return [
        (keras.InputSpec(shape=(BATCH, length), dtype="int32"), keras.InputSpec(shape=(BATCH,), dtype="float32"))
        for length in shapes
    ]


def fixed():
    """A storm fix's bucketed dataset: ``xla_keras.data.bucket_by_length`` on single examples, as the storm
    advice's ``fix["bucket_by_length"]`` gives it (its lengths, batch size and remainder)."""
    fix = {
        "kind": "bucket_by_length",
        "length_of": {"path": "x", "axis": 1},
        "lengths": [32, 64, 96, 128],
        "targets": [{"path": "x", "axis": 1}],
        "batch_size": BATCH,
        "remainder": "drop",
    }
    return xla_keras.data.bucket_by_length(source(), fix)


def model():
    keras.utils.set_random_seed(7)
    built = keras.Sequential(
        [
            keras.layers.Embedding(64, 16),
            keras.layers.Conv1D(32, 5, padding="same", activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.GlobalMaxPooling1D(),
            keras.layers.Dense(1),
        ]
    )
    built.compile(optimizer="adam", loss="mse", jit_compile=True)
    return built


def step_files():
    name = "one_step_on_data" if BACKEND == "tensorflow" else "jit_train_step"
    return {
        f: os.path.getmtime(os.path.join(DUMP, f))
        for f in os.listdir(DUMP)
        if f.endswith("before_optimizations.txt") and name in f
    }


class StepOne(keras.callbacks.Callback):
    """When fit began and when its first train step ended, by the wall clock."""

    def on_train_begin(self, logs=None):
        self.began = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0 and not hasattr(self, "step_one"):
            self.step_one = time.time()


def fit(name, data, precompile, log_dir, epochs=2):
    keras_model = model()
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", precompile=precompile, verbose=0)
    clock = StepOne()
    before = step_files()
    events = len(COMPILE_EVENTS)
    began = time.perf_counter()
    keras_model.fit(data, epochs=epochs, callbacks=[monitor, clock], verbose=0)
    wall = time.perf_counter() - began
    files = {f: t for f, t in step_files().items() if f not in before}
    shapes = sorted({(tuple(x.shape), tuple(y.shape)) for x, y in data.as_numpy_iterator()})
    weights = np.concatenate([np.ravel(w) for w in keras_model.get_weights()]).astype(np.float64)
    out = {
        "name": name,
        "report": monitor.report.to_dict(),
        "files": len(files),
        "after_step_one": sum(1 for t in files.values() if t > clock.step_one),
        "shapes": len(shapes),
        "weights": weights.tolist(),
        "iterations": int(keras.ops.convert_to_numpy(keras_model.optimizer.iterations)),
        "wall": wall,
        "to_step_one": clock.step_one - clock.began,
        "compile_events_before_step_one": sum(s for t, s in COMPILE_EVENTS[events:] if t <= clock.step_one),
        "printed": str(monitor.report),
    }
    print("XLA_KERAS_PRECOMPILE " + json.dumps(out), flush=True)


if SCENARIO == "ways":
    first = os.path.join(WORK, "logs_first")
    fit("none", bucketed(), None, first)
    fit("specs", bucketed(), specs(), os.path.join(WORK, "logs_specs"))
    fit("log_dir", bucketed(), "auto", first)  # the script run again on the same log dir
    fit("fixed_none", fixed(), None, None)
    fit("fixed_auto", fixed(), "auto", os.path.join(WORK, "logs_fixed"))
elif SCENARIO == "cache":
    fit("cache", bucketed(), specs(), None)
else:
    sys.exit(f"unknown scenario {SCENARIO!r}")
