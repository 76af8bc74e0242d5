"""The monitor's own per-step bookkeeping, in microseconds, without a step running.

What a steady step costs the monitor in Python, best of 5 repeats:

* TensorFlow: reading the batch's input signature, the ledger, the shape history, the steady-time
  buffer and, with ``update_freq="batch"``, one scalar event, through the public step-path seam the
  backend's wrapper uses (``call_began``) and Keras's batch-end hook;
* JAX: the step wrapper itself (the steady lane, the compile-event bracket, the repeats' timing in
  bulk), called inside a real fit with Keras's step function replaced by one that only takes the
  batch, so that the figure is the wrapper's and the monitor's alone.

Machine noise moves a whole-fit benchmark (overhead.py) by more than this: here the figure is stable
to ~0.2 us. Inside a fit the same code costs several times more (other threads, cold caches): the
documentation's benchmarks page has both.

    python benchmarks/step_path.py [--quick] [--backend tensorflow|jax]
"""

import argparse
import os
import tempfile
import time
import timeit

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--backend", default=os.environ.get("KERAS_BACKEND", "tensorflow"), choices=["tensorflow", "jax"]
    )
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = args.backend
    import keras

    import xla_keras

    n = 2000 if args.quick else 20000
    print(f"backend={args.backend}: per-step bookkeeping, best of 5 x {n} steps")
    for update_freq in ("epoch", "batch"):
        with tempfile.TemporaryDirectory() as log_dir:
            monitor = xla_keras.XlaMonitor(log_dir=log_dir, profile=None, verbose=0, update_freq=update_freq)
            best = (_jax if args.backend == "jax" else _tensorflow)(keras, monitor, n)
        print(f"XlaMonitor(update_freq={update_freq!r}): {best * 1e6:6.2f} us per step")


def _tensorflow(keras, monitor, n):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    batches = [(np.zeros((8, 4), np.float32), np.zeros((8, 1), np.float32))]
    monitor.set_model(model)

    def step(monitor=monitor):
        monitor.call_began("train", batches, time.perf_counter())
        monitor.on_train_batch_end(0)

    for _ in range(300):  # past the steady buffer's exact-median phase
        step()
    best = min(timeit.repeat(step, number=n, repeat=5)) / n
    monitor.sink.close()
    return best


def _jax(keras, monitor, n):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=True)
    x, y = np.zeros((8 * 40, 4), np.float32), np.zeros((8 * 40, 1), np.float32)
    batch = (x[:8], y[:8])
    result = []

    class Batches:
        def __next__(self):
            return batch

    class Measure(keras.callbacks.Callback):
        def on_train_batch_begin(self, index, logs=None):
            if index != 30:  # past the length sample's first look (it gives up on float batches)
                return
            wrapped = model.train_function  # the monitor's wrapper around Keras's step function
            real = wrapped._xla_keras_original
            wrapped._xla_keras_original = lambda state, iterator: (next(iterator), state)
            try:
                batches = Batches()
                for _ in range(300):
                    wrapped(None, batches)
                result.append(min(timeit.repeat(lambda: wrapped(None, batches), number=n, repeat=5)) / n)
            finally:
                wrapped._xla_keras_original = real

    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[monitor, Measure()])
    return result[0]


if __name__ == "__main__":
    main()
