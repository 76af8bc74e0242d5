"""Fits for tests/test_unsupported_ops.py, in a fresh process (XLA_FLAGS=--xla_dump_to must be set before the
framework starts): a layer with an op XLA cannot compile, under the monitor and without it.

    python tests/unsupported_fits.py DUMP_DIR LOG_DIR BACKEND

BACKEND "tensorflow": a custom layer calls ``tf.strings.as_string`` (AsString: no XLA kernel) between two
Dense layers. Unmonitored: with ``jit_compile=True`` (TensorFlow's own error) and with False (the reference
run). Monitored with ``jit="on"`` (fallback), then evaluate and predict under ``jit="keep"`` with the model's
own ``jit_compile=True``, then ``on_unsupported="raise"``, then under MirroredStrategy; and a string-input
layer (``StringToHashBucketFast``) whose fix is its move into ``dataset.map``, applied as written and refit.

BACKEND "jax": a layer whose output shape depends on the data while training (``jnp.nonzero`` without
``size``), unmonitored (``jit_compile=False``) and monitored (``jit="on"``, fallback); then one that pulls a
traced value into numpy (``np.asarray``), under ``on_unsupported="raise"``. Then, per kind of trace error
(``KINDS``: numpy on a tracer, a shape that follows the data, a Python ``if`` / ``int()`` / list index on a
tensor, a boolean index), the layer unmonitored with ``jit_compile=True`` (the error JAX itself raises: the
classes of the chain Keras raised, and JAX's words), monitored with ``jit="on"`` (fallback), and the same
layer written as the fix's words say, monitored with ``jit="on"``.

Every run starts from the same weights, on the same batches, in order, with ``steps_per_execution=2``. The
last line printed is ``XLA_KERAS_FITS <json>``.
"""

import ast
import json
import os
import sys
import warnings

EPOCHS = 2
SPE = 2
SCALES = [1.0, 2.0, 3.0, 4.0]


def dumped(dump):
    return sorted(f for f in os.listdir(dump) if f.endswith("before_optimizations.txt")) if os.path.isdir(dump) else []


def ours(caught, xla_keras):
    return [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)]


def monitored(model, fit, xla_keras, **kwargs):
    """``fit(callbacks)`` under a fresh monitor: (the monitor, our warnings, the error raised or None)."""
    monitor = xla_keras.XlaMonitor(verbose=0, **kwargs)
    error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fit([monitor])
        except Exception as raised:  # noqa: BLE001 - the raise mode's error is what is checked
            error = raised
    return monitor, ours(caught, xla_keras), error


def error_facts(error):
    if error is None:
        return None
    return {
        "type": type(error).__name__,
        "message": str(error),
        "framework_error": type(getattr(error, "framework_error", None)).__name__,
        "framework_text": str(getattr(error, "framework_error", "")),
    }


def tensorflow_main(dump, log_dir):
    import keras
    import numpy as np
    import tensorflow as tf

    import xla_keras

    class Stringify(keras.layers.Layer):
        """A layer whose op (AsString) has no XLA kernel: its output is its input."""

        def call(self, x):
            return x + tf.cast(tf.strings.length(tf.strings.as_string(x)), x.dtype) * 0.0

    class HashWords(keras.layers.Layer):
        """A preprocessing layer of the model's string input (StringToHashBucketFast: no XLA kernel)."""

        def call(self, words):
            return tf.one_hot(tf.strings.to_hash_bucket_fast(words[:, 0], 8), 8)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    def model_of():
        keras.utils.set_random_seed(1)
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
        outputs = keras.layers.Dense(1, name="head")(Stringify(name="stringify")(hidden))
        model = keras.Model(inputs, outputs)
        model.compile("sgd", "mse", steps_per_execution=SPE)
        return model

    out = {}
    # TensorFlow's own error, unmonitored.
    model = model_of()
    model.jit_compile = True
    try:
        model.fit(dataset, epochs=1, verbose=0)
    except tf.errors.InvalidArgumentError as error:
        out["tf_error"] = str(error)
    out["tf_error_iterations"] = int(model.optimizer.iterations.numpy())
    # The reference: no XLA, unmonitored.
    model = model_of()
    model.jit_compile = False
    model.fit(dataset, epochs=EPOCHS, validation_data=dataset, verbose=0)
    out["reference"] = {
        "iterations": int(model.optimizer.iterations.numpy()),
        "weights": [w.tolist() for w in model.get_weights()],
    }
    before = dumped(dump)

    # jit="on", fallback (the default).
    model = model_of()
    monitor, said, error = monitored(
        model,
        lambda callbacks: model.fit(dataset, epochs=EPOCHS, validation_data=dataset, verbose=0, callbacks=callbacks),
        xla_keras,
        jit="on",
        log_dir=os.path.join(log_dir, "on"),
    )
    out["on"] = {
        "report": monitor.report.to_dict(),
        "printed": str(monitor.report),
        "summary": monitor.report.summary(),
        "warnings": said,
        "error": error_facts(error),
        "iterations": int(model.optimizer.iterations.numpy()),
        "weights": [w.tolist() for w in model.get_weights()],
        "model_jit_after": model.jit_compile,
        "dumped": sorted(set(dumped(dump)) - set(before)),
    }
    # evaluate and predict, with the model's own jit_compile=True (jit="keep").
    model.jit_compile = True
    before = dumped(dump)
    runs = {}
    for name, call in (
        ("evaluate", lambda callbacks: model.evaluate(dataset, verbose=0, callbacks=callbacks)),
        ("predict", lambda callbacks: model.predict(dataset, verbose=0, callbacks=callbacks)),
    ):
        monitor, said, error = monitored(model, call, xla_keras, jit="keep", log_dir=None)
        runs[name] = {"report": monitor.report.to_dict(), "warnings": said, "error": error_facts(error)}
    out["keep"] = {**runs, "model_jit_after": model.jit_compile, "dumped": sorted(set(dumped(dump)) - set(before))}
    # on_unsupported="raise".
    model = model_of()
    monitor, said, error = monitored(
        model,
        lambda callbacks: model.fit(dataset, epochs=EPOCHS, verbose=0, callbacks=callbacks),
        xla_keras,
        jit="on",
        on_unsupported="raise",
        log_dir=os.path.join(log_dir, "raise"),
    )
    with open(os.path.join(monitor.log_dir, "xla_report.json")) as f:
        written = json.load(f)
    out["raise"] = {
        "error": error_facts(error),
        "warnings": said,
        "iterations": int(model.optimizer.iterations.numpy()),
        "written": written,
    }

    # Under MirroredStrategy (one replica: with two, Keras's jit_compile=True fails on another replica's
    # variables before any op is compiled), with the model's own jit_compile=True: the distributed pull.
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        model = model_of()
        model.compile("sgd", "mse", steps_per_execution=SPE, jit_compile=True)
    monitor, said, error = monitored(
        model,
        lambda callbacks: model.fit(dataset, epochs=EPOCHS, verbose=0, callbacks=callbacks),
        xla_keras,
        jit="keep",
        log_dir=None,
    )
    out["mirrored"] = {
        "report": monitor.report.to_dict(),
        "warnings": said,
        "error": error_facts(error),
        "iterations": int(model.optimizer.iterations.numpy()),
    }

    # A preprocessing layer of the model's string input: its move into dataset.map, applied as written.
    words = np.array([["red"], ["green"], ["blue"], ["red"]] * 16)
    text_data = tf.data.Dataset.from_tensor_slices((words, y)).batch(16)
    keras.utils.set_random_seed(1)
    text = keras.Input((1,), dtype="string")
    model = keras.Model(text, keras.layers.Dense(1)(HashWords(name="hash_words")(text)))
    model.compile("sgd", "mse")
    monitor, said, error = monitored(
        model, lambda callbacks: model.fit(text_data, epochs=1, verbose=0, callbacks=callbacks), xla_keras, jit="on"
    )
    first = monitor.report.to_dict()
    # The move's statements as written, up to the compile the user fills in; then its fit's own data.
    code = first["jit_fix"].replace("model.compile(...)", "model.compile('sgd', 'mse')")
    scope = {"keras": keras, "model": model}
    for statement in ast.parse(code).body:
        exec(compile(ast.Module([statement], []), "<jit_fix>", "exec"), scope)
        if ast.get_source_segment(code, statement).startswith("model.compile("):
            break
    mapped = text_data.map(scope["preprocess_batch"])  # as the code's fit line has it
    before = dumped(dump)
    refit, refit_said, refit_error = monitored(
        scope["model"],
        lambda callbacks: scope["model"].fit(mapped, epochs=1, verbose=0, callbacks=callbacks),
        xla_keras,
        jit="on",
    )
    out["move"] = {
        "first": first,
        "warnings": said,
        "refit": refit.report.to_dict(),
        "refit_warnings": refit_said,
        "refit_error": error_facts(refit_error),
        "dumped_by_refit": sorted(set(dumped(dump)) - set(before)),
    }
    return out


def jax_main(dump, log_dir):
    import jax.numpy as jnp
    import keras
    import numpy as np

    import xla_keras

    class NonZero(keras.layers.Layer):
        """While training, counts its rows whose first feature is positive with ``jnp.nonzero`` (no
        ``size``: the output's shape depends on the data). Its output is its input."""

        def compute_output_shape(self, shape):
            return shape

        def call(self, x, training=False):
            if not training:
                return x
            return x + 0.0 * jnp.nonzero(x[:, 0] > 0)[0].shape[0]

    class ToNumpy(keras.layers.Layer):
        """While training, reads its input's sum in numpy (a traced value under jax.jit)."""

        def compute_output_shape(self, shape):
            return shape

        def call(self, x, training=False):
            if not training:
                return x
            return x + float(np.asarray(x).sum()) * 0.0

    kinds = _jax_kinds(NonZero, ToNumpy)

    kinds = _jax_kinds(NonZero, ToNumpy)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")

    def model_of(layer):
        # On the model's input: outside jax.jit its values are concrete (the gradient does not trace it).
        keras.utils.set_random_seed(1)
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(8, activation="relu", name="hidden")(layer(name="odd")(inputs))
        model = keras.Model(inputs, keras.layers.Dense(1, name="head")(hidden))
        model.compile("sgd", "mse", steps_per_execution=SPE)
        return model

    def fit(model, callbacks=()):
        model.fit(x, y, batch_size=16, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=list(callbacks))

    out = {}
    model = model_of(NonZero)
    model.jit_compile = False
    fit(model)
    out["reference"] = {
        "iterations": int(model.optimizer.iterations.numpy()),
        "weights": [w.tolist() for w in model.get_weights()],
    }
    before = dumped(dump)
    model = model_of(NonZero)
    monitor, said, error = monitored(model, lambda callbacks: fit(model, callbacks), xla_keras, jit="on", log_dir=None)
    out["on"] = {
        "report": monitor.report.to_dict(),
        "printed": str(monitor.report),
        "warnings": said,
        "error": error_facts(error),
        "iterations": int(model.optimizer.iterations.numpy()),
        "weights": [w.tolist() for w in model.get_weights()],
        "dumped": sorted(set(dumped(dump)) - set(before)),
    }
    model = model_of(ToNumpy)
    monitor, said, error = monitored(
        model, lambda callbacks: fit(model, callbacks), xla_keras, jit="on", on_unsupported="raise", log_dir=None
    )
    out["raise"] = {"report": monitor.report.to_dict(), "warnings": said, "error": error_facts(error)}
    out["kinds"] = {}
    for name, (broken, fixed) in kinds.items():
        model = model_of(broken)
        model.jit_compile = True  # unmonitored: the error JAX itself raises
        # Keras's traceback filtering re-creates an error with its call arguments in the message; with
        # Keras 3.12 and JAX 0.4.36 that fails on JAX's tracer errors (their constructor takes a tracer, not
        # a string) and leaves an AttributeError in their place. Off, the error that reaches here is JAX's.
        keras.config.disable_traceback_filtering()
        try:
            fit(model)
            raised = None
        except Exception as caught:  # noqa: BLE001 - the error is the ground truth
            raised = caught
        finally:
            keras.config.enable_traceback_filtering()
        chain = []
        while raised is not None and raised not in chain:
            chain.append(raised)
            raised = raised.__cause__ or raised.__context__
        kind = {"jax_errors": [type(e).__name__ for e in chain], "jax_words": [str(e) for e in chain]}
        for label, layer in (("monitored", broken), ("fixed", fixed)):
            model = model_of(layer)
            monitor, said, error = monitored(
                model, lambda callbacks, model=model: fit(model, callbacks), xla_keras, jit="on", log_dir=None
            )
            kind[label] = {
                "report": monitor.report.to_dict(),
                "warnings": said,
                "error": error_facts(error),
                "iterations": int(model.optimizer.iterations.numpy()),
            }
        out["kinds"][name] = kind
    return out


def _jax_kinds(non_zero, to_numpy):
    """Per kind of trace error: (a layer that raises it while training, the same layer written as the fix's
    words say). Each layer's output is its input (scaled)."""
    import jax.numpy as jnp
    import keras

    def layer(body):
        class Odd(keras.layers.Layer):
            def compute_output_shape(self, shape):
                return shape

            def call(self, x, training=False):
                return body(x) if training else x

        return Odd

    def python_if(x):
        if keras.ops.sum(x) > 0:  # a Python if on a tensor
            return x * 2.0
        return x

    def scale_of(x):
        return SCALES[keras.ops.argmax(x[0])]  # a list indexed by a tensor

    positive = lambda x: x[:, 0] > 0  # noqa: E731
    return {
        "TracerArrayConversionError": (to_numpy, layer(lambda x: x + keras.ops.sum(x) * 0.0)),
        "ConcretizationTypeError": (
            non_zero,
            layer(lambda x: x + 0.0 * jnp.sum(jnp.nonzero(positive(x), size=x.shape[0], fill_value=-1)[0] >= 0)),
        ),
        "TracerBoolConversionError": (
            layer(python_if),
            layer(lambda x: keras.ops.where(keras.ops.sum(x) > 0, x * 2.0, x)),
        ),
        "ConcretizationTypeError-int": (
            layer(lambda x: x + 0.0 * int(keras.ops.sum(keras.ops.cast(positive(x), "int32")))),
            layer(lambda x: x + 0.0 * keras.ops.cast(keras.ops.sum(keras.ops.cast(positive(x), "int32")), x.dtype)),
        ),
        "NonConcreteBooleanIndexError": (
            layer(lambda x: x + 0.0 * keras.ops.sum(x[positive(x)])),
            layer(lambda x: x + 0.0 * keras.ops.sum(keras.ops.where(positive(x)[:, None], x, 0.0))),
        ),
        "TracerIntegerConversionError": (
            layer(lambda x: x * scale_of(x)),
            layer(
                lambda x: x * keras.ops.take(keras.ops.convert_to_tensor([1.0, 2.0, 3.0, 4.0]), keras.ops.argmax(x[0]))
            ),
        ),
    }


if __name__ == "__main__":
    dump_dir, logs, backend = sys.argv[1:4]
    run = tensorflow_main if backend == "tensorflow" else jax_main
    print("XLA_KERAS_FITS " + json.dumps(run(dump_dir, logs)))
