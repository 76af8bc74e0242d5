"""The monitor's own per-step bookkeeping, in microseconds, without TensorFlow running a step.

What a steady step costs the monitor in Python: reading the batch's input signature, the ledger,
the shape history, the steady-time buffer and, with ``update_freq="batch"``, one scalar event. It
drives the public step-path seam the backend's wrapper uses (``call_began``) and Keras's batch-end
hook, on real numpy batches, best of 5 repeats. Machine noise moves a whole-fit benchmark
(overhead.py) by more than this: here the figure is stable to ~1 us.

    python benchmarks/step_path.py [--quick]
"""

import argparse
import tempfile
import time
import timeit

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    import keras

    import xla_keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    batches = [(np.zeros((8, 4), np.float32), np.zeros((8, 1), np.float32))]
    n = 2000 if args.quick else 20000
    print(f"per-step bookkeeping, best of 5 x {n} steps")
    for update_freq in ("epoch", "batch"):
        with tempfile.TemporaryDirectory() as log_dir:
            monitor = xla_keras.XlaMonitor(log_dir=log_dir, profile=None, verbose=0, update_freq=update_freq)
            monitor.set_model(model)

            def step(monitor=monitor):
                monitor.call_began("train", batches, time.perf_counter())
                monitor.on_train_batch_end(0)

            for _ in range(300):  # past the steady buffer's exact-median phase
                step()
            best = min(timeit.repeat(step, number=n, repeat=5)) / n
            monitor.sink.close()
        print(f"XlaMonitor(update_freq={update_freq!r}): {best * 1e6:6.1f} us per step")


if __name__ == "__main__":
    main()
