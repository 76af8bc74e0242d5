"""Fits for tests/test_not_compiled.py, in a fresh process (XLA_FLAGS=--xla_dump_to must be set before
TensorFlow starts): a model Keras refuses jit_compile=True for (a layer with supports_jit=False) under
jit="on", fit with validation_data, then evaluated and predicted on: the original, without XLA. Then the
same model from the same weights under jit="keep". Then the move the report hands out, followed as the user
would: its code run as written, statement by statement, on a model built again from the same weights (only
the placeholders ``model.compile(...)`` and "your other fit arguments" filled in), which fits with its
validation_data, evaluates and predicts.

    python tests/not_compiled_fits.py DUMP_DIR LOG_DIR MODEL_KIND

MODEL_KIND: "dict" (named inputs, a StringLookup on one of them, as keras-io's structured-data examples),
"single" (one string input) or "text" (keras-io's text classification: a TextVectorization, which builds
its own StringLookup, then Embedding, pooling and Dense). The last line printed is ``XLA_KERAS_FITS <json>``.
"""

import ast
import json
import os
import sys
import warnings

EPOCHS = 2
VOCABULARY = ["good", "bad", "movie", "great", "awful", "plot", "actor", "fine", "boring", "fun"]


def dumped(dump):
    return sorted(f for f in os.listdir(dump) if f.endswith("before_optimizations.txt")) if os.path.isdir(dump) else []


def data(kind):
    """(fit's data, validation data, evaluate's data, predict's inputs), each 64 examples in batches of 16."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)

    def part():
        if kind == "text":
            x = np.array([[" ".join(rng.choice(VOCABULARY + ["unseen"], rng.integers(2, 12)))] for _ in range(64)])
        else:
            colors = np.array([["red"], ["green"], ["blue"]])[rng.integers(0, 3, 64)]
            x = {"color": colors, "num": rng.normal(size=(64, 3)).astype("float32")} if kind == "dict" else colors
        return x, rng.normal(size=(64, 1)).astype("float32")

    train, validation, test, (x_predict, _) = part(), part(), part(), part()
    batched = [tf.data.Dataset.from_tensor_slices(pair).batch(16) for pair in (train, validation, test)]
    return (*batched, tf.nest.map_structure(tf.constant, x_predict))  # Keras's predict takes no numpy strings


def model_of(kind, again=False):
    """The model; ``again``: built once more in the process, its TextVectorization named as the first's (Keras
    names the first one so, and numbers the next)."""
    import keras

    if kind == "text":
        text = keras.Input(shape=(1,), dtype="string")
        name = "text_vectorization" if again else None
        vectorize = keras.layers.TextVectorization(vocabulary=VOCABULARY, output_sequence_length=12, name=name)
        hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(len(VOCABULARY) + 2, 8)(vectorize(text)))
        return keras.Model(text, keras.layers.Dense(1)(hidden))
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


class PhaseDump:
    """XLA's dump, read at Keras's hooks: the modules that appeared while a validation run was going on
    (its test step's), and the others (the train step's)."""

    def __init__(self, keras, dump):
        self.dump, self.train, self.test = dump, [], []
        self.seen = set(dumped(dump))
        outer = self

        class Hooks(keras.callbacks.Callback):
            def on_test_begin(self, logs=None):
                outer.train += outer.new()

            def on_test_end(self, logs=None):
                outer.test += outer.new()

            def on_train_end(self, logs=None):
                outer.train += outer.new()

        self.callback = Hooks()

    def new(self):
        now = dumped(self.dump)
        fresh = [f for f in now if f not in self.seen]
        self.seen.update(fresh)
        return fresh


def caught_run(xla_keras, run):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run()
    return result, [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)]


def main(dump, log_dir, kind):
    import keras
    import numpy as np

    import xla_keras

    dataset, validation_data, test_data, x = data(kind)
    keras.utils.set_random_seed(0)
    model = model_of(kind)
    model.compile("adam", "mse")
    weights = model.get_weights()
    monitor = xla_keras.XlaMonitor(jit="on", verbose=0, log_dir=os.path.join(log_dir, "first"))
    history, said = caught_run(
        xla_keras,
        lambda: model.fit(dataset, validation_data=validation_data, epochs=EPOCHS, callbacks=[monitor], verbose=0),
    )
    first = monitor.report.to_dict()
    after_first = dumped(dump)
    original = {
        "val_loss": history.history["val_loss"],
        "loss": model.evaluate(test_data, verbose=0),
        "predictions": model.predict(x, verbose=0).tolist(),
    }
    printed, details = str(monitor.report), monitor.report.details()

    # Keras's own refusal, without the monitor: compile(jit_compile=True) leaves the flag False.
    refused = model_of(kind, again=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refused.compile("adam", "mse", jit_compile=True)

    # jit="keep" on the same model, from the same weights.
    kept = model_of(kind, again=True)
    kept.compile("adam", "mse")
    kept.set_weights(weights)
    keep_monitor = xla_keras.XlaMonitor(jit="keep", verbose=0, log_dir=None)
    _, keep_said = caught_run(xla_keras, lambda: kept.fit(dataset, epochs=1, callbacks=[keep_monitor], verbose=0))

    # The move, followed as written on the same model from the same weights.
    moved = model_of(kind, again=True)
    moved.compile("adam", "mse")
    moved.set_weights(weights)
    refit_monitor = xla_keras.XlaMonitor(jit="on", verbose=0, log_dir=None)
    phases = PhaseDump(keras, dump)
    code = first["jit_fix"].replace("model.compile(...)", "model.compile('adam', 'mse')")
    filled = code.replace(
        "# your other fit arguments (epochs, callbacks, ...)", f"epochs={EPOCHS}, verbose=0, callbacks=callbacks,"
    )
    assert filled != code, "the fit's placeholder moved: this script fills it in"
    scope = {"keras": keras, "model": moved, "dataset": dataset, "validation_data": validation_data}
    scope.update(test_data=test_data, x=x, callbacks=[refit_monitor, phases.callback])
    by_statement = []  # (the statement's first line, XLA modules dumped while it ran)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for statement in ast.parse(filled).body:
            exec(compile(ast.Module([statement], []), "<jit_fix>", "exec"), scope)
            by_statement.append((ast.get_source_segment(filled, statement).splitlines()[0], phases.new()))
    refit_said = [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)]
    followed = {
        "val_loss": scope["history"].history["val_loss"],
        "loss": scope["loss"],
        "predictions": np.asarray(scope["predictions"]).tolist(),
    }
    out = {
        "first": first,
        "printed": printed,
        "details": details,
        "log_dir": monitor.log_dir,
        "warnings": said,
        "dumped_after_first": after_first,
        "keras_jit_after_compile_true": bool(refused.jit_compile),
        "keep": keep_monitor.report.to_dict(),
        "keep_warnings": keep_said,
        "original": original,
        "followed": followed,
        "refit": refit_monitor.report.to_dict(),
        "refit_warnings": refit_said,
        "dumped_by_train": phases.train,
        "dumped_by_validation": phases.test,
        "dumped_by_statement": by_statement,
        "iterations": int(scope["model"].optimizer.iterations.numpy()),
    }
    print("XLA_KERAS_FITS " + json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
