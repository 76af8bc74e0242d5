"""Small TensorFlow programs whose stderr the explain tests read (real lines, not hand-written).

python tests/log_sources.py retrace|refused|autojit
"""

import sys

import keras
import numpy as np
import tensorflow as tf


class NoJit(keras.layers.Layer):
    """A layer Keras refuses to jit-compile (supports_jit=False)."""

    def __init__(self, name=None):
        super().__init__(name=name)
        self.supports_jit = False

    def call(self, x):
        return x


def main(kind):
    if kind == "retrace":  # a new shape per call, without reduce_retracing
        f = tf.function(lambda x: x * 2.0)
        for n in range(8):
            f(tf.ones((n + 1,)))
    elif kind == "refused":  # Keras's "Model doesn't support jit_compile=True" warning
        model = keras.Sequential([keras.Input((4,)), NoJit(), keras.layers.Dense(1)])
        model.compile("sgd", "mse", jit_compile=True)
    elif kind == "autojit":
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(np.ones((64, 4), "float32"), np.ones((64, 1), "float32"), batch_size=32, epochs=1, verbose=0)
    else:
        raise SystemExit(f"kind must be one of retrace, refused, autojit; got {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1])
