"""One fit, bare or monitored, for tests/test_quiet.py: its stderr is what a user sees.

    python tests/quiet_fit.py bare|monitored|default|fastest LOG_DIR

A storm workload (padded batches of varying length, jit_compile=True), with validation, so the
monitor probes many steps and opens a profiler trace window: every source of profiler lines.
"""

import sys

import numpy as np
from models import text_model


def fastest_fit(mode, log_dir):
    """Keras's default (no XLA on a CPU), bare or under jit='fastest' with a trial that tries XLA
    (its rules set for a short fit: three rounds, then a tie)."""
    import math

    import keras

    rng = np.random.default_rng(0)
    x, y = rng.random((32 * 120, 16), dtype=np.float32), rng.random((32 * 120, 1), dtype=np.float32)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    callbacks = []
    if mode == "fastest":
        import xla_keras
        from xla_keras.jit import trial as jit_trial

        jit_trial.MIN_STEPS_LEFT, jit_trial.TRIAL_BUDGET = 0, math.inf
        jit_trial.EARLY_RATIO = jit_trial.FAR_APART = jit_trial.MIN_GAIN = math.inf
        jit_trial.MIN_ROUNDS = jit_trial.MAX_ROUNDS = 3
        callbacks = [xla_keras.XlaMonitor(log_dir=log_dir, jit="fastest", verbose=0)]
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=callbacks)
    if callbacks:
        assert callbacks[0].report.jit_decision["switches"] == 6, callbacks[0].report.jit_decision
    print("FIT_DONE", file=sys.stderr)


def main(mode, log_dir):
    if mode in ("default", "fastest"):
        return fastest_fit(mode, log_dir)
    import tensorflow as tf

    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 80, size=96)

    def gen():
        for n in lengths:
            yield np.arange(n, dtype=np.int32) % 97 + 1, np.float32(n % 2)

    data = tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32))
    ).padded_batch(8)
    model = text_model(jit_compile=True)
    callbacks = []
    if mode == "monitored":
        import xla_keras

        callbacks = [xla_keras.XlaMonitor(log_dir=log_dir, storm_threshold=4, verbose=0)]
    model.fit(data, epochs=3, validation_data=data.take(4), verbose=0, callbacks=callbacks)
    print("FIT_DONE", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
