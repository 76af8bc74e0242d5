"""Fits for tests/test_coverage.py, in a fresh process whose environment asks TensorFlow for its own
clustering summary (TF_CPP_VMODULE=mark_for_compilation_pass=3, TF_CPP_MIN_LOG_LEVEL=0: on stderr) and for
its graph as auto-clustering marked it (TF_XLA_FLAGS=--tf_xla_clustering_debug: ``mark_for_compilation*.pbtxt``
under TF_DUMP_GRAPH_PREFIX, set here per fit). That is the ground truth; the monitor never sets these flags.

    python tests/coverage_fits.py LOG_DIR [--once]

"as_built": a model as keras-io's structured-data examples build it (named inputs, a StringLookup inside the
model, two Dense layers), under jit="autoclustering" with the early CPU opt-in; "advised": the advice the
report gives, applied, and the same model fit again; "text": a text model as keras-io's text classification
from scratch builds it (TextVectorization with its own standardization inside the model), with an
IntegerLookup and a Hashing layer on a user id and a Python scoring function (tf.py_function). Before each
fit a marker line ``XLA_KERAS_COVERAGE_MARKER <name>`` goes to stderr (fd 2, as TensorFlow's log does); each
fit's graphs are dumped under LOG_DIR/<name>/graphs. ``--once``: the first fit only (tests/test_tab_browser.py's
run). The last line printed is ``XLA_KERAS_FITS <json>``.
"""

import json
import os
import re
import string
import sys

import xla_keras

xla_keras.configure(cpu_autoclustering=True)

MARKER = "XLA_KERAS_COVERAGE_MARKER"


def _fit(model, dataset, log_dir, epochs=6):
    os.write(2, f"{MARKER} {os.path.basename(log_dir)}\n".encode())
    os.environ["TF_DUMP_GRAPH_PREFIX"] = os.path.join(log_dir, "graphs")  # TensorFlow reads it at each dump
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="autoclustering", verbose=0)
    model.fit(dataset, epochs=epochs, verbose=0, callbacks=[monitor])  # 24 steps: the steady window at 10-14
    return {
        "report": monitor.report.to_dict(),
        "printed": str(monitor.report),
        "summary": monitor.report.summary(),
        "layers": [model.name] + [layer.name for layer in model.layers],  # the model's own ops are in its scope
    }


def structured(log_dir):
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
    return _fit(model, dataset, log_dir)


def text(log_dir):
    """Reviews and a user id: TextVectorization with keras-io's custom standardization (lower case, <br />
    and punctuation stripped), an IntegerLookup and a Hashing layer on the id, a Python scoring function."""
    import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    words = ["good", "bad", "film", "movie", "plot", "<br />", "great!", "awful,", "Acting", "story."]
    reviews = np.array([[" ".join(rng.choice(words, 6))] for _ in range(64)])
    users = rng.integers(0, 5, (64, 1)).astype("int64")
    y = rng.integers(0, 2, (64, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices(({"review": reviews, "user": users}, y)).batch(16)

    def custom_standardization(data):
        lowercase = tf.strings.lower(data)
        stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
        return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")

    vectorize = keras.layers.TextVectorization(
        max_tokens=40, output_sequence_length=8, standardize=custom_standardization, name="vectorize"
    )
    vectorize.adapt(reviews)

    class PyScale(keras.layers.Layer):
        """A scoring function in Python, run by tf.py_function."""

        def call(self, x):
            out = tf.py_function(lambda t: t * 0.5, [x], tf.float32)
            out.set_shape(x.shape)
            return out

    review = keras.Input((1,), dtype="string", name="review")
    user = keras.Input((1,), dtype="int64", name="user")
    tokens = keras.layers.Embedding(40, 8, name="embedding")(vectorize(review))
    pooled = keras.layers.GlobalMaxPooling1D(name="pool")(tokens)
    known = keras.ops.cast(keras.layers.IntegerLookup(vocabulary=[0, 1, 2, 3], name="user_lookup")(user), "float32")
    bucket = keras.ops.cast(keras.layers.Hashing(num_bins=8, name="user_hash")(user), "float32")
    side = PyScale(name="py_scale")(keras.layers.Concatenate(name="side")([known, bucket]))
    hidden = keras.layers.Dense(8, activation="relu", name="hidden")(keras.layers.Concatenate()([pooled, side]))
    model = keras.Model(
        {"review": review, "user": user}, keras.layers.Dense(1, activation="sigmoid", name="head")(hidden)
    )
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    return _fit(model, dataset, log_dir)


def main(log_dir, once=False):
    import tensorflow as tf

    out = {"as_built": structured(os.path.join(log_dir, "as_built"))}
    if not once:
        code = out["as_built"]["report"]["coverage"]["advice"]["code"]  # the advice's code, as the user runs it
        exec(code, {"tf": tf})
        out["advice_code"] = code
        out["advised"] = structured(os.path.join(log_dir, "advised"))
        tf.config.optimizer.set_experimental_options({"remapping": True})  # as built again
        out["text"] = text(os.path.join(log_dir, "text"))
    print("XLA_KERAS_FITS " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], "--once" in sys.argv[2:])
