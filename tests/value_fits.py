"""Fits for tests/test_value_compiles.py, in a fresh process (XLA_FLAGS and TensorFlow's log flags must be set
before the framework starts): compiles that a value causes, not a shape, and XLA's compile-time refusals.

    python tests/value_fits.py DUMP_DIR SCENARIO

SCENARIO "topk" (TensorFlow, run with TF_CPP_VMODULE=device_compiler=1): a custom layer takes top_k's ``k``
from the data (``k`` = the count of positive units of the first row, + 1), under ``jit="on"``, 20 steps of one
input shape. TensorFlow keys XLA's cache on the values ``k`` is computed from: it compiles at every step.

SCENARIO "refusals" (TensorFlow, its default log level): the same layer with ``tf.range(k)`` (XLA refuses it:
"must be a compile-time constant"), monitored (fallback) and unmonitored without XLA from the same weights;
then top_k on the layer's input without ``stop_gradient`` (XLA's own check fails while compiling: a
RET_CHECK), monitored.

SCENARIO "jax" (Keras's JAX backend): compiles at an input signature the step had compiled: JAX's config
changed at an epoch's start (``jax_default_matmul_precision``), and batches placed differently (numpy arrays,
then arrays committed to the device with ``jax.device_put``). JAX's own compile events, read by a listener
of this script's, say at which step each of the step's compiles happened.

Markers ``XLA_KERAS_MARK <name> begin|end`` on stderr bracket each fit's log lines. The last line on stdout
is ``XLA_KERAS_VALUES <json>``.
"""

import json
import os
import sys
import warnings

STEPS = 20
BATCH = 8


def mark(name, where):
    sys.stderr.flush()
    print(f"XLA_KERAS_MARK {name} {where}", file=sys.stderr, flush=True)


def dumped(dump):
    if not os.path.isdir(dump):
        return []
    return sorted(f for f in os.listdir(dump) if f.endswith("before_optimizations.txt") and "one_step_on_data" in f)


def ours(caught, xla_keras):
    return [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)]


def tensorflow_model(variant):
    import keras
    import tensorflow as tf

    class PickK(keras.layers.Layer):
        """top_k / range with a length the step computes from the data."""

        def call(self, h):
            n = tf.reduce_sum(tf.cast(h[0] > 0, tf.int32)) + 1
            if variant == "range":
                r = tf.range(n)  # XLA refuses a computed length here
                return h + 0.001 * tf.cast(tf.size(r), h.dtype)
            source = h if variant == "grad" else tf.stop_gradient(h)
            values, _ = tf.math.top_k(tf.reshape(source, [-1]), k=n)  # XLA keys its cache on k's value
            return h + tf.reduce_mean(values)

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16,))
    h = keras.layers.Dense(32, activation="relu")(inputs)
    h = PickK(name="pick_k")(h)
    model = keras.Model(inputs, keras.layers.Dense(1)(h))
    return model


def data():
    import numpy as np

    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((STEPS * BATCH, 16)).astype("float32"),
        rng.standard_normal((STEPS * BATCH, 1)).astype("float32"),
    )


def fit(model, callbacks, xla_keras):
    x, y = data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
    return ours(caught, xla_keras)


def monitored(name, variant, dump, xla_keras):
    import keras

    model = tensorflow_model(variant)
    model.compile(keras.optimizers.SGD(0.01), "mse")
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    before = len(dumped(dump))
    mark(name, "begin")
    warned = fit(model, [monitor], xla_keras)
    mark(name, "end")
    return {
        "report": monitor.report.to_dict(),
        "summary": monitor.report.summary(),
        "printed": str(monitor.report),
        "warnings": warned,
        "iterations": int(model.optimizer.iterations.numpy()),
        "dumped": len(dumped(dump)) - before,
        "weights": [w.tolist() for w in model.get_weights()],
    }


def reference(variant, xla_keras):
    """The same model, unmonitored and without XLA, from the same weights on the same batches."""
    import keras

    model = tensorflow_model(variant)
    model.compile(keras.optimizers.SGD(0.01), "mse", jit_compile=False)
    fit(model, [], xla_keras)
    return {"iterations": int(model.optimizer.iterations.numpy()), "weights": [w.tolist() for w in model.get_weights()]}


def jax_main():
    import jax
    import keras
    import numpy as np
    from jax import monitoring

    import xla_keras

    steps = []  # the train step running (1-based), as a callback of this script's counts them
    compiles = []  # the step at which JAX compiled the train step, from JAX's own events

    def on_event(event, seconds, **kwargs):
        if event.endswith("backend_compile_duration") and "train_step" in str(kwargs.get("fun_name", "")):
            compiles.append(len(steps))

    monitoring.register_event_duration_secs_listener(on_event)

    class Count(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            steps.append(batch)

    class Precision(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch:  # each epoch after the first with another matmul precision
                jax.config.update("jax_default_matmul_precision", "highest" if epoch % 2 else "default")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((10 * BATCH, 20)).astype("float32")
    y = rng.standard_normal((10 * BATCH, 1)).astype("float32")
    out = {}
    for name in ("context", "placement"):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
        model.compile("adam", "mse")
        steps.clear()
        compiles.clear()
        monitor = xla_keras.XlaMonitor(log_dir=None, verbose=0)
        if name == "context":
            callbacks = [Count(), Precision(), monitor]
            model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0, shuffle=False, callbacks=callbacks)
            jax.config.update("jax_default_matmul_precision", None)
        else:

            def batches():
                for _ in range(3):
                    for i in range(10):
                        xb = x[i * BATCH : (i + 1) * BATCH]
                        yield (jax.device_put(xb, jax.devices()[0]) if i % 2 else xb), y[i * BATCH : (i + 1) * BATCH]

            model.fit(batches(), steps_per_epoch=10, epochs=3, verbose=0, callbacks=[Count(), monitor])
        out[name] = {"report": monitor.report.to_dict(), "jax_compiles_at": list(compiles), "steps": len(steps)}
    return out


def main():
    dump, scenario = sys.argv[1], sys.argv[2]
    if scenario == "jax":
        out = jax_main()
    else:
        import xla_keras

        if scenario == "topk":
            out = {"topk": monitored("topk", "topk", dump, xla_keras)}
        else:
            out = {
                "range": monitored("range", "range", dump, xla_keras),
                "range_reference": reference("range", xla_keras),
                "grad": monitored("grad", "grad", dump, xla_keras),
            }
    print("XLA_KERAS_VALUES " + json.dumps(out))


if __name__ == "__main__":
    main()
