"""One fit, bare or monitored, for tests/test_quiet.py: its stderr is what a user sees.

    python tests/quiet_fit.py bare|monitored LOG_DIR

A storm workload (padded batches of varying length, jit_compile=True), with validation, so the
monitor probes many steps and opens a profiler trace window: every source of profiler lines.
"""

import sys

import numpy as np


def main(mode, log_dir):
    import keras
    import tensorflow as tf
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 80, size=96)

    def gen():
        for n in lengths:
            yield np.arange(n, dtype=np.int32) % 97 + 1, np.float32(n % 2)

    data = tf.data.Dataset.from_generator(gen, output_signature=(
        tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32))).padded_batch(8)
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(100, 8),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    callbacks = []
    if mode == "monitored":
        import xla_keras
        callbacks = [xla_keras.XlaMonitor(log_dir=log_dir, storm_threshold=4, verbose=0)]
    model.fit(data, epochs=3, validation_data=data.take(4), verbose=0, callbacks=callbacks)
    print("FIT_DONE", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
