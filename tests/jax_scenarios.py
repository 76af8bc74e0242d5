"""Real fits under Keras's JAX backend, each against XLA's and JAX's own records.

Run in a fresh subprocess by tests/test_jax_ground_truth.py (KERAS_BACKEND and
XLA_FLAGS must be set before JAX and Keras are imported):

    KERAS_BACKEND=jax XLA_FLAGS=--xla_dump_to=DIR python tests/jax_scenarios.py OUT.json NAME [NAME ...]

Several scenarios share one process and one dump directory: XLA writes each
module's files when it compiles it, so the files that appeared during a
scenario are that scenario's modules. Per scenario the output holds:

* ``report``: the monitor's report (``to_dict()``);
* ``dump``: the modules XLA dumped during the fit, by module name. Step modules
  are ``jit_train_step`` / ``jit_test_step`` / ``jit_predict_step`` (Keras's JAX
  trainer jits its ``train_step`` / ``test_step`` / ``predict_step``); every
  other name (``jit_convert_element_type``, ``jit_concatenate``, op-level
  ``jit_dot_general`` ...) is a non-step module;
* ``log``: JAX's own ``jax_log_compiles`` lines, per module name, in order
  (tracing, lowering, XLA compilation seconds);
* ``hooks``: an independent clock: ``(hook, phase, perf_counter)`` for every
  batch-begin and run-boundary hook Keras called (batch begins are called
  synchronously by Keras's loop on JAX), for wall-time bounds of each step;
* ``fit_window``: the modules dumped between the fit's on_train_begin and
  on_train_end (what the monitor watched: step modules, op-level compiles
  inside steps, compiles outside them).
"""

import json
import logging
import os
import re
import sys
import time
import warnings

import numpy as np
from models import text_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_LINES = {
    "trace": re.compile(r"Finished tracing (?:\+ transforming )?(\S+) for (?:p?jit) in ([0-9.eE+-]+) sec"),
    "lower": re.compile(r"Finished jaxpr to MLIR module conversion (\S+) in ([0-9.eE+-]+) sec"),
    "compile": re.compile(r"Finished XLA compilation of (\S+) in ([0-9.eE+-]+) sec"),
}


class LogLines(logging.Handler):
    """JAX's compile-time log lines (jax_log_compiles=True logs them at WARNING)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        message = record.getMessage()
        for kind, pattern in _LINES.items():
            match = pattern.search(message)
            if match:
                self.lines.append((kind, match.group(1), float(match.group(2))))


def dumped(dump_dir):
    if not os.path.isdir(dump_dir):
        return set()
    return {f for f in os.listdir(dump_dir) if f.endswith(".before_optimizations.txt")}


def module_name(filename):
    # module_0018.jit_train_step.before_optimizations.txt -> jit_train_step
    return filename.split(".")[1]


def make_hooks(dump_dir):
    import keras

    class Hooks(keras.callbacks.Callback):
        """Timestamps only; overrides no batch-end hook (Keras keeps its async dispatch)."""

        def __init__(self, dump_dir):
            super().__init__()
            self.events = []
            self.dump_dir = dump_dir
            self.window = None  # non-step modules XLA dumped between on_train_begin and on_train_end
            self.async_train = None  # Keras still dispatches batch-end callbacks asynchronously

        def on_train_begin(self, logs=None):
            self._dumped_at_begin = dumped(self.dump_dir)
            from xla_keras.backends.jax import _internals

            callbacks = _internals.running_callback_list(self.model)
            self.async_train = bool(getattr(callbacks, "_async_train", False))

        def on_train_end(self, logs=None):
            self._at("end", "fit")
            new = dumped(self.dump_dir) - self._dumped_at_begin
            self.window = sorted(module_name(f) for f in new)

        def _at(self, hook, phase):
            self.events.append((hook, phase, time.perf_counter()))

        def on_train_batch_begin(self, batch, logs=None):
            self._at("batch", "train")

        def on_test_batch_begin(self, batch, logs=None):
            self._at("batch", "test")

        def on_predict_batch_begin(self, batch, logs=None):
            self._at("batch", "predict")

        def on_epoch_end(self, epoch, logs=None):
            self._at("end", "train")

        def on_test_begin(self, logs=None):
            self._at("begin", "test")

        def on_test_end(self, logs=None):
            self._at("end", "test")

        def on_predict_end(self, logs=None):
            self._at("end", "predict")

    return Hooks(dump_dir)


def mlp(inputs=8, spe=1):
    import keras

    model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse", steps_per_execution=spe)
    return model


N_SLOW = int(os.environ.get("XLA_KERAS_TEST_SLOW_ROWS", "640"))


def SlowLayer():
    """Keeps the device busy for tens of ms per step (20 chained 1024x1024 matmuls). JAX returns
    from the step as soon as it is dispatched (a host callback would make CPU execution synchronous)."""
    import jax.numpy as jnp
    import keras

    class Slow(keras.layers.Layer):
        def call(self, x):
            w = jnp.ones((1024, 1024), x.dtype) / 1024
            h = jnp.tile(x, (1, 128))
            for _ in range(20):
                h = jnp.tanh(h @ w)
            return h[:, :8]

    return Slow()


def padded_batches(rng, batches=12, size=8, low=4, high=80):
    """Batches of ``size`` sequences of ``low``..``high`` tokens, each padded (0) to its longest."""
    out = []
    for _ in range(batches):
        lengths = rng.integers(low, high, size=size)
        x = np.zeros((size, lengths.max()), np.int32)
        for i, n in enumerate(lengths):
            x[i, :n] = np.arange(n) % 97 + 1
        out.append((x, (lengths % 2).astype(np.float32)))
    return out


class Batches:
    """A keras.utils.PyDataset over fixed batches (made lazily: keras is imported per scenario)."""

    def __new__(cls, batches):
        import keras

        class Data(keras.utils.PyDataset):
            def __init__(self):
                super().__init__()
                self.batches = batches

            def __len__(self):
                return len(self.batches)

            def __getitem__(self, i):
                return self.batches[i]

        return Data()


def scenario(name, rng, log_dir):
    """(model, fit args, fit kwargs, monitor kwargs, then: a callable run after the fit or None)."""
    import keras

    fit = {"epochs": 2, "verbose": 0, "shuffle": False}  # Keras shuffles a PyDataset's batches otherwise
    monitor = {"verbose": 0, "log_dir": log_dir}
    after = None
    if name == "batch_sizes":

        def gen():
            while True:
                for size in range(16, 24):
                    yield rng.random((size, 8), dtype=np.float32), rng.random((size, 1), dtype=np.float32)

        model, args = mlp(), (gen(),)
        fit.update(steps_per_epoch=8)
    elif name == "partial_batch":
        x, y = rng.random((1000, 8), dtype=np.float32), rng.random((1000, 1), dtype=np.float32)
        vx, vy = rng.random((300, 8), dtype=np.float32), rng.random((300, 1), dtype=np.float32)
        model, args = mlp(), (x, y)
        fit.update(batch_size=64, validation_data=(vx, vy))
    elif name == "padded":
        model, args = text_model(), (Batches(padded_batches(rng)),)
        monitor.update(storm_threshold=100)
    elif name == "nested":
        a = keras.Input((4,), name="a")
        b = keras.Input((6,), name="b")
        out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))
        model = keras.Model({"a": a, "b": b}, out)
        model.compile("adam", "mse")
        n = 230
        args = (
            {"a": rng.random((n, 4), dtype=np.float32), "b": rng.random((n, 6), dtype=np.float32)},
            rng.random((n, 1), dtype=np.float32),
        )
        fit.update(batch_size=50, sample_weight=rng.random((n,), dtype=np.float32))
    elif name == "steps_per_execution":
        x, y = rng.random((1000, 8), dtype=np.float32), rng.random((1000, 1), dtype=np.float32)
        model, args = mlp(spe=4), (x, y)
        fit.update(batch_size=64, validation_split=0.2)

        def after(model, callbacks):
            model.predict(x[:300], batch_size=64, verbose=0, callbacks=callbacks)
    elif name == "jit_off":
        x, y = rng.random((200, 8), dtype=np.float32), rng.random((200, 1), dtype=np.float32)
        model, args = mlp(), (x, y)
        fit.update(batch_size=64)
        monitor.update(jit="off")
    elif name == "storm_fallback":
        model, args = text_model(), (Batches(padded_batches(rng, batches=10)),)
        # Epochs 2-4 repeat epoch 1's shapes: op by op, they compile nothing new, and each is an interval
        # that can be a steady sample (a stall under a loaded machine spoils one, seldom all three).
        fit.update(epochs=4)
        monitor.update(storm_threshold=4, on_storm="fallback")
    elif name == "storm_raise":
        model, args = text_model(), (Batches(padded_batches(rng, batches=10)),)
        monitor.update(storm_threshold=4, on_storm="raise")
    elif name == "tf_data":
        import tensorflow as tf

        x, y = rng.random((300, 8), dtype=np.float32), rng.random((300, 1), dtype=np.float32)
        model, args = mlp(), (tf.data.Dataset.from_tensor_slices((x, y)).batch(64),)
    elif name == "data_parallel":
        import jax

        devices = jax.devices()
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
        x, y = rng.random((512, 8), dtype=np.float32), rng.random((512, 1), dtype=np.float32)
        model, args = mlp(), (x, y)
        fit.update(batch_size=64, validation_split=0.25)
    elif name == "slow_device":
        # Each step keeps the device busy: JAX returns from it long before the device is done.
        x, y = rng.random((N_SLOW, 8), dtype=np.float32), rng.random((N_SLOW, 1), dtype=np.float32)
        model = keras.Sequential([keras.Input((8,)), SlowLayer(), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        args = (x, y)
        fit.update(batch_size=32, epochs=1)
    elif name == "cache":
        x, y = rng.random((256, 8), dtype=np.float32), rng.random((256, 1), dtype=np.float32)
        model, args = mlp(), (x, y)
        fit.update(batch_size=64, epochs=1)
    else:
        raise SystemExit(f"unknown scenario {name!r}")
    return model, args, fit, monitor, after


def run(name, dump_dir, log_lines, log_dir=None):
    import xla_keras

    rng = np.random.default_rng(0)
    model, args, fit, monitor_kwargs, after = scenario(name, rng, log_dir)
    monitor = xla_keras.XlaMonitor(**monitor_kwargs)
    hooks = make_hooks(dump_dir)
    before, lines_before = dumped(dump_dir), len(log_lines.lines)
    del OBSERVER_SECONDS[:]
    raised = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", xla_keras.XlaKerasWarning)
        try:
            model.fit(*args, callbacks=[monitor, hooks], **fit)
            if after is not None:
                after(model, [monitor, hooks])
        except Exception as error:  # noqa: BLE001 - reported to the test
            raised = repr(error)
    new = sorted(dumped(dump_dir) - before)
    return {
        "report": monitor.report.to_dict(),
        "dump": [module_name(f) for f in new],
        "log": log_lines.lines[lines_before:],
        "hooks": hooks.events,
        "fit_window": hooks.window,
        "async_train": hooks.async_train,
        "raised": raised,
        "warnings": [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)],
        "text": str(monitor.report),
        "jit_compile_after": bool(model.jit_compile),
        "iterations": int(model.optimizer.iterations.numpy()) if model.optimizer is not None else None,
        "observer_seconds": list(OBSERVER_SECONDS),
    }


OBSERVER_SECONDS = []  # seconds spent in the monitor's per-step work, call by call


def time_step_path(canary=False):
    """Time the monitor's whole per-step work: the observer calls the step wrapper makes (ending
    the previous call, reading the batches' signatures or the steady lane, the compile accounting). With a step
    that keeps the device busy (scenario "slow_device"), a sync anywhere in there waits for the
    device and shows. (jax.transfer_guard cannot show it on CPU: a CPU array's host view is no
    transfer.) ``canary``: add a sync (wait for every live array), to prove the test can fail."""
    import jax

    from xla_keras.monitor import XlaMonitor

    def timed(method):
        def run(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                if canary and method.__name__ == "call_began":
                    for array in jax.live_arrays():
                        array.block_until_ready()
                return method(self, *args, **kwargs)
            finally:
                OBSERVER_SECONDS.append((method.__name__, time.perf_counter() - start))

        return run

    for name in ("call_began", "call_ran"):
        setattr(XlaMonitor, name, timed(getattr(XlaMonitor, name)))


def main():
    out, names = sys.argv[1], sys.argv[2:]
    import jax

    jax.config.update("jax_log_compiles", True)
    log_lines = LogLines()
    logging.getLogger("jax").addHandler(log_lines)
    logging.getLogger("jax").propagate = False  # the lines are read here, not printed
    if os.environ.get("XLA_KERAS_TEST_TIMED"):
        time_step_path(canary=bool(os.environ.get("XLA_KERAS_TEST_CANARY")))
    cache_dir = os.environ.get("XLA_KERAS_TEST_CACHE")
    if cache_dir:
        import xla_keras

        xla_keras.configure(cache_dir=cache_dir)
    dump_dir = re.search(r"--xla_dump_to=(\S+)", os.environ.get("XLA_FLAGS", "")).group(1)
    results = {name: run(name, dump_dir, log_lines, os.environ.get("XLA_KERAS_TEST_LOG_DIR")) for name in names}
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
