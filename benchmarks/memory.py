"""The monitor's memory over a long fit with many distinct signatures.

A tiny model (jit off: 1000 real compiles would take too long, and the
monitor's bookkeeping is the same) fits N steps whose batch sizes cycle
through S distinct values, so S distinct input signatures. tracemalloc counts
the bytes allocated by xla_keras's own code at checkpoints; the per-step time
of each block shows whether the step path stays flat over time.

    python benchmarks/memory.py [--quick] [--steps 20000] [--signatures 1000]
"""

import argparse
import time
import tracemalloc


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--signatures", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.signatures = 1200, 100

    import keras
    import tensorflow as tf

    import xla_keras

    distinct = args.signatures
    data = tf.data.Dataset.range(args.steps).map(
        lambda i: (tf.ones((i % distinct + 1, 4)), tf.ones((i % distinct + 1, 1)))
    )
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=False)
    block = max(args.steps // 10, 1)
    rows = []

    class Checkpoints(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            step = batch + 1
            if step % block == 0:
                now = time.perf_counter()
                snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*xla_keras*")])
                used = sum(stat.size for stat in snapshot.statistics("filename"))
                rows.append((step, used, (now - self.start) / block))
                self.start = time.perf_counter()

    monitor = xla_keras.XlaMonitor(log_dir=None, jit="off", verbose=0)
    tracemalloc.start(1)
    model.fit(data, epochs=1, callbacks=[monitor, Checkpoints()], verbose=0)
    tracemalloc.stop()
    report = monitor.report
    print(f"{args.steps} steps, {distinct} distinct signatures (reported: {report.distinct_signatures['train']})")
    print(f"{'step':>7s} {'xla_keras bytes':>16s} {'ms/step in block':>17s}")
    for step, used, per_step in rows:
        print(f"{step:7d} {used:16,d} {per_step * 1e3:17.3f}")
    after_all = [used for step, used, _ in rows if step >= distinct]
    if after_all:
        print(
            f"bound: {max(after_all):,d} bytes once all signatures are seen; growth from then to the end: "
            f"{after_all[-1] - after_all[0]:+,d} bytes"
        )
    return rows, report


if __name__ == "__main__":
    main()
