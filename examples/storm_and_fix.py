"""A recompilation storm, the advice XlaMonitor computes, and the advice applied.

A small text model on synthetic variable-length token sequences:
1. `padded_batch(32)`: every batch is padded to its own longest sequence, so
   almost every batch has a new shape and XLA compiles again (a storm);
2. the same data with the fix applied by `xla_keras.data.apply_fix(ds, storm.fix)`:
   every batch padded up to a few computed lengths;
3. the alternative the advice measured on the real lengths:
   `xla_keras.data.bucket_by_length(examples, storm.fix)`, the examples grouped
   by real length (less padding, a few more compiles).
Prints the reports and the per-epoch wall times.

    python examples/storm_and_fix.py [--sequences 2000] [--epochs 2]
"""

import argparse
import time

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    import xla_keras

    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 257, size=args.sequences)

    def examples():
        def gen():
            for n in lengths:
                yield rng.integers(1, 5000, size=n).astype(np.int32), np.float32(n > 128)

        return tf.data.Dataset.from_generator(
            gen, output_signature=(tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32))
        )

    def model():
        m = keras.Sequential(
            [
                keras.Input((None,), dtype="int32"),
                keras.layers.Embedding(5000, 32),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(1),
            ]
        )
        m.compile("adam", "binary_crossentropy")
        return m

    class EpochTimes(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self.start)

    def run(ds, title):
        timer = EpochTimes()
        timer.times = []
        monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
        model().fit(ds, epochs=args.epochs, callbacks=[monitor, timer], verbose=0)
        print(f"\n=== {title}")
        print(monitor.report)
        print("epoch times: " + ", ".join(f"{t:.2f} s" for t in timer.times))
        return monitor.report, timer.times

    storm_report, storm_times = run(examples().padded_batch(args.batch_size), "padded_batch: the storm")
    if not storm_report.storms:
        print("no storm this time: nothing to fix")
        return
    storm = storm_report.storms[0]
    print("\nThe advice:\n" + storm.advice)
    fixed_report, fixed_times = run(
        xla_keras.data.apply_fix(examples().padded_batch(args.batch_size), storm.fix),
        "xla_keras.data.apply_fix(ds, storm.fix)",
    )
    summary = [("apply_fix", fixed_report, fixed_times)]
    if "bucket_by_length" in storm.fix:
        bucket_report, bucket_times = run(
            xla_keras.data.bucket_by_length(examples(), storm.fix),
            "xla_keras.data.bucket_by_length(examples, storm.fix)",
        )
        summary.append(("bucket_by_length", bucket_report, bucket_times))
    for name, report, times in summary:
        print(
            f"\n{name}: epoch 1 {storm_times[0]:.2f} s with the storm, {times[0]:.2f} s with the fix "
            f"({storm_times[0] / times[0]:.1f}x); compiles {storm_report.total_compilations} -> "
            f"{report.total_compilations}"
        )


if __name__ == "__main__":
    main()
