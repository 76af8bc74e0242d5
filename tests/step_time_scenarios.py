"""Fits whose step times are checked against the wall clock, on either Keras backend.

Run in a fresh subprocess by tests/test_step_times.py, one process per backend and group of fits
(KERAS_BACKEND, and on TensorFlow TF_CPP_VMODULE=device_compiler=1, are set before the import):

    KERAS_BACKEND=jax|tensorflow python tests/step_time_scenarios.py OUT.json SPECS_JSON

Each spec is one fit of a fresh model (``model``: "mlp" or "conv"; ``steps`` per epoch, ``epochs``,
``verbose``, ``steps_per_execution``, ``delay_every`` / ``delay_seconds``: the data source sleeps
before every N-th batch of an epoch; ``validation``, ``evaluate`` / ``predict`` runs after the fit;
``jit``: the monitor's; ``trial``: jit='fastest' rules to set, e.g. its gate lowered for a short fit;
TensorFlow: ``mirrored`` (MirroredStrategy over 2 logical CPUs), ``asynchronous`` (eager ops run
asynchronously)).
The ground truth is the test's own:

* the wall clock: a callback, last in the list, that blocks on one weight (``keras.ops.convert_to_numpy``)
  at each run's end and times each run: a train epoch from its begin hook to its end (to validation's
  begin when it validates), a validation / evaluate run from its begin to its end, a predict run from its
  begin to its end, blocking on the last batch's outputs;
* the compile seconds inside each run, from the framework's own words: JAX's ``jax_log_compiles``
  lines (tracing, lowering, XLA compilation), TensorFlow's ``Compilation of XLA executable time`` lines
  (device_compiler, on stderr, each stamped with the wall clock's seconds), read by the test.

Per spec the output holds the monitor's ``report`` (``to_dict()``), ``runs`` (per phase, each run's
``begin`` and ``end`` on ``time.time()`` and, JAX, the compile seconds logged inside it), ``begins``
(each train batch's begin hook on ``time.time()``) and, with a delay, the global steps whose batch was
delayed. A run's ``steps`` are the spec's.
"""

import gc
import json
import logging
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
BATCH = 32
_JAX_LINE = re.compile(
    r"Finished (?:tracing (?:\+ transforming )?\S+ for p?jit|jaxpr to MLIR module conversion \S+"
    r"|XLA compilation of \S+) in ([0-9.eE+-]+) sec"
)


class JaxCompileLines(logging.Handler):
    """JAX's own compile-time lines (``jax_log_compiles``), each with the wall clock it was logged at."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []  # (time.time(), seconds)

    def emit(self, record):
        match = _JAX_LINE.search(record.getMessage())
        if match:
            self.lines.append((record.created, float(match.group(1))))


# "sparse": an MLP on each token that is not padding (10% of 128), written for both modes: where the mask's
# values are known (Keras's JAX steps op by op) it computes the real tokens only; a compiled step cannot know
# which those are, so it computes every token and masks. A model where XLA off is faster (measured: 50 vs
# 94 ms a step on 2 CPU cores), for jit='fastest'.
SPARSE_SHAPE, SPARSE_HIDDEN, SPARSE_REAL = (128, 256), 1024, 0.1


def _real_tokens_mlp():
    import jax
    import jax.numpy as jnp
    import keras

    length, width = SPARSE_SHAPE

    class RealTokensMLP(keras.layers.Layer):
        def build(self, shapes):
            self.w1 = self.add_weight(shape=(width, SPARSE_HIDDEN), initializer="glorot_uniform")
            self.w2 = self.add_weight(shape=(SPARSE_HIDDEN, width), initializer="glorot_uniform")

        def call(self, x, mask):
            if isinstance(mask, jax.core.Tracer):  # compiled: every token, masked
                h = keras.ops.matmul(keras.ops.relu(keras.ops.matmul(x, self.w1)), self.w2)
                return x + h * keras.ops.expand_dims(keras.ops.cast(mask, x.dtype), -1)
            flat = jnp.reshape(x, (-1, width))
            idx = jnp.nonzero(jnp.reshape(mask, (-1,)))[0]
            h = jnp.matmul(jax.nn.relu(jnp.matmul(flat[idx], self.w1.value)), self.w2.value)
            return jnp.reshape(flat.at[idx].add(h), x.shape)

    return RealTokensMLP()


def model_for(kind, seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    if kind == "sparse":
        tokens, mask = keras.Input(SPARSE_SHAPE), keras.Input(SPARSE_SHAPE[:1], dtype="bool")
        h = _real_tokens_mlp()(keras.layers.Dense(SPARSE_SHAPE[1])(tokens), mask)
        return keras.Model([tokens, mask], keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(h)))
    if kind == "conv":
        layers = [
            keras.Input((16, 16, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    elif kind == "conv32":  # the step-time conv net: ~36 ms a step on 2 CPU cores
        layers = [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    elif kind == "wide":  # a bigger MLP: ~3 GFLOP a step
        layers = [keras.Input((512,)), keras.layers.Dense(2048, activation="relu"), keras.layers.Dense(10)]
    else:
        layers = [
            keras.Input((64,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ]
    return keras.Sequential(layers)


def data_for(kind, rows, seed=1):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, (rows,))
    if kind == "sparse":
        mask = np.zeros((rows, SPARSE_SHAPE[0]), bool)
        mask[:, : int(SPARSE_SHAPE[0] * SPARSE_REAL)] = True
        return [rng.random((rows, *SPARSE_SHAPE), dtype=np.float32), mask], labels
    shape = {"conv": (16, 16, 3), "conv32": (32, 32, 3), "wide": (512,)}.get(kind, (64,))
    return rng.random((rows, *shape), dtype=np.float32), labels


def dataset_for(spec, delayed):
    """The spec's training data: arrays, or a PyDataset that sleeps before every ``delay_every``-th batch of
    an epoch (recording the global step it delays: ``delayed``)."""
    import keras

    x, y = data_for(spec["model"], spec["steps"] * BATCH)
    every = spec.get("delay_every")
    if not every:
        return x, y
    steps, pause = spec["steps"], spec.get("delay_seconds", 0.2)

    class Delayed(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.epoch = 0

        def __len__(self):
            return steps

        def __getitem__(self, i):
            if (i + 1) % every == 0:
                delayed.append(self.epoch * steps + i + 1)
                time.sleep(pause)
            if i == steps - 1:
                self.epoch += 1
            return x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]

    return Delayed(), None


def wall_clock(runs, begins, periods):
    """The ground truth's callback: each run's wall time, the device drained at its end; every train
    batch's begin on the wall clock (``begins``); and per phase each call's batch begin with its run
    (``periods``: TensorFlow's step period, one batch begin to the next)."""
    import keras

    class Wall(keras.callbacks.Callback):
        async_safe = True  # its predict batch-end hook only keeps a reference: Keras stays asynchronous

        def __init__(self):
            super().__init__()
            self.last = None

        def on_train_batch_begin(self, batch, logs=None):
            # Keras calls batch begins on its loop's thread, at every call: the gaps between them are the
            # loop's own time on each step, the test's own view of a stall (one float a step).
            begins.append(time.time())
            periods["train"].append((len(runs["train"]), begins[-1]))

        def on_test_batch_begin(self, batch, logs=None):
            periods["test"].append((len(runs["test"]), time.time()))

        def on_predict_batch_begin(self, batch, logs=None):
            periods["predict"].append((len(runs["predict"]), time.time()))

        def _begin(self, phase):
            runs[phase].append({"begin": time.time()})

        def _end(self, phase, outputs=None):
            run = runs[phase][-1]
            if "end" not in run:
                keras.ops.convert_to_numpy(outputs if outputs is not None else self.model.trainable_variables[0])
                run["end"] = time.time()

        def on_epoch_begin(self, epoch, logs=None):
            self._begin("train")

        def on_test_begin(self, logs=None):
            if runs["train"] and "end" not in runs["train"][-1]:
                self._end("train")  # validation begins: the epoch's training part ends here
            self._begin("test")

        def on_test_end(self, logs=None):
            self._end("test")

        def on_epoch_end(self, epoch, logs=None):
            self._end("train")

        def on_predict_begin(self, logs=None):
            self._begin("predict")

        def on_predict_batch_end(self, batch, logs=None):
            self.last = (logs or {}).get("outputs")

        def on_predict_end(self, logs=None):
            self._end("predict", self.last)

    return Wall()


def strategy_scope(spec):
    """TensorFlow: ``mirrored`` builds and fits under MirroredStrategy over the process's 2 logical CPUs."""
    import contextlib

    if not spec.get("mirrored"):
        return contextlib.nullcontext()
    import tensorflow as tf

    return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")]).scope()


def run(spec, jax_lines):
    import keras

    import xla_keras

    with strategy_scope(spec):
        model = model_for(spec["model"])
        model.compile(
            "adam",
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=spec.get("steps_per_execution", 1),
        )
    runs = {"train": [], "test": [], "predict": []}
    delayed, begins = [], []
    periods = {"train": [], "test": [], "predict": []}
    monitor = xla_keras.XlaMonitor(log_dir=None, jit=spec.get("jit", "on"), verbose=0)
    callbacks = [monitor, wall_clock(runs, begins, periods)]
    x, y = dataset_for(spec, delayed)
    validation = data_for(spec["model"], spec.get("validation", 0) * BATCH, seed=2) if spec.get("validation") else None
    fit_args = dict(epochs=spec.get("epochs", 4), verbose=spec.get("verbose", 0), callbacks=callbacks)
    if y is None:
        model.fit(x, shuffle=False, validation_data=validation, **fit_args)
    else:
        model.fit(x, y, batch_size=BATCH, shuffle=False, validation_data=validation, **fit_args)
    for r in runs["train"]:
        r["steps"] = spec["steps"]
    for r in runs["test"]:
        r["steps"] = spec.get("validation", 0)
    held_out = data_for(spec["model"], spec.get("evaluate_steps", 0) * BATCH, seed=3)
    for _ in range(spec.get("evaluate", 0)):
        model.evaluate(*held_out, batch_size=BATCH, verbose=0, callbacks=callbacks)
        runs["test"][-1]["steps"] = spec["evaluate_steps"]
    for _ in range(spec.get("predict", 0)):
        model.predict(held_out[0], batch_size=BATCH, verbose=0, callbacks=callbacks)
        runs["predict"][-1]["steps"] = spec["evaluate_steps"]
    if jax_lines is not None:  # the compile seconds JAX logged inside each run
        for phase_runs in runs.values():
            for r in phase_runs:
                r["compile_seconds"] = sum(s for t, s in jax_lines.lines if r["begin"] <= t <= r["end"])
    return {
        "spec": spec,
        "report": monitor.report.to_dict(),
        "runs": runs,
        "delayed": delayed,
        "begins": begins,
        "periods": periods,
    }


def main(out_path, specs):
    jax_lines = None
    if BACKEND == "tensorflow":
        import tensorflow as tf

        if any(spec.get("mirrored") for spec in specs):  # before TensorFlow makes its devices
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        if any(spec.get("asynchronous") for spec in specs):
            # TensorFlow's eager ops return before they ran: Keras still turns each step's logs into floats.
            tf.config.experimental.set_synchronous_execution(False)
    if BACKEND == "jax":
        import jax

        jax.config.update("jax_log_compiles", True)
        jax_lines = JaxCompileLines()
        logging.getLogger("jax").addHandler(jax_lines)
        logging.getLogger("jax").setLevel(logging.DEBUG)
        logging.getLogger("jax").propagate = False  # the lines go to the handler, not to stderr
    from xla_keras.jit import trial
    from xla_keras.session import session

    results = []
    for spec in specs:
        # jit='fastest': the trial's gate lowered so that a short fit may try both modes; JAX's sparse syncs
        # more often than once a second, so that short runs hold several: for this fit only
        lowered = [(trial, name, value) for name, value in spec.get("trial", {}).items()]
        if "sync_seconds" in spec:
            lowered.append((session, "SYNC_SECONDS", spec["sync_seconds"]))
        shipped = [(module, name, getattr(module, name)) for module, name, _ in lowered]
        for module, name, value in lowered:
            setattr(module, name, value)
        gc.collect()  # what the fits before left, collected before this one's clock starts
        try:
            results.append(run(spec, jax_lines))
        finally:
            for module, name, value in shipped:
                setattr(module, name, value)
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
