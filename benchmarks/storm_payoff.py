"""What a recompilation storm costs, and what the monitor's remedies save.

Fixed workload (issue #3): 4,000 synthetic token sequences with lengths uniform
in 8..256, vocabulary 5,000, `padded_batch(32)`, Embedding(5000, 32) ->
GlobalAveragePooling1D -> Dense(1), jit on, 3 epochs (`--model conv` adds two
Conv1D(128, 5) layers, so compute grows with the padded tokens). Side by side in one run:

  storm     jit="on", padded_batch(32): a new padded length almost every batch
  fix       jit="on", `xla_keras.data.apply_fix(padded_batch(32), storm.fix)`:
            every batch padded to the advised lengths, the partial last batch dropped
  bucket    jit="on", `xla_keras.data.bucket_by_length(examples, storm.fix)`: the
            examples grouped by real length (the alternative the advice computes)
  fallback  jit="on", on_storm="fallback": XLA switched off at the storm
  jit off   jit="off", padded_batch(32)

Reported: epoch-1 wall time (and ratio to the storm), compiles, the median
step time and the median epoch time over epochs 2-3 (after the fallback every
step of the fallback run is non-XLA; ratio to jit off), and the compute per
epoch in padded tokens (counted by reading each pipeline once; ratio to the real
tokens). The storm's stated real padding is printed next to the exact count.

    python benchmarks/storm_payoff.py [--quick]
"""

import argparse
import statistics
import time
import warnings

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small run that only proves the script works")
    parser.add_argument("--sequences", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--model",
        choices=("pool", "conv"),
        default="pool",
        help="pool: Embedding -> pooling -> Dense (the issue #3 workload: input-bound, compute "
        "per token tiny); conv: two Conv1D(128, 5) layers first (compute grows with tokens)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.sequences, args.epochs = 320, 2

    import keras
    import tensorflow as tf

    import xla_keras

    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 257, size=args.sequences)
    tokens = [rng.integers(1, 5000, size=n).astype(np.int32) for n in lengths]
    labels = (lengths > 132).astype(np.float32)

    def examples():
        return tf.data.Dataset.from_generator(
            lambda: zip(tokens, labels),
            output_signature=(tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32)),
        )

    def model():
        convs = (
            [
                keras.layers.Conv1D(128, 5, padding="same", activation="relu"),
                keras.layers.Conv1D(128, 5, padding="same", activation="relu"),
            ]
            if args.model == "conv"
            else []
        )
        m = keras.Sequential(
            [
                keras.Input((None,), dtype="int32"),
                keras.layers.Embedding(5000, 32),
                *convs,
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(1),
            ]
        )
        m.compile("adam", "binary_crossentropy")
        return m

    class Times(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epochs, self.steps, self.epoch = [], [], 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch, self.start = epoch, time.perf_counter()

        def on_train_batch_begin(self, batch, logs=None):
            self.step_start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch >= 1:
                self.steps.append(time.perf_counter() - self.step_start)

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append(time.perf_counter() - self.start)

    def run(ds, **monitor_kwargs):
        times = Times()
        monitor = xla_keras.XlaMonitor(log_dir=None, verbose=0, **monitor_kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model().fit(ds, epochs=args.epochs, callbacks=[times, monitor], verbose=0)
        return times, monitor.report

    def tokens_per_epoch(ds):
        return sum(int(np.prod(x.shape)) for x, _ in ds.as_numpy_iterator())

    real_tokens = int(lengths.sum())
    results, padded_tokens = {}, {}
    results["storm"] = run(examples().padded_batch(32), jit="on")
    padded_tokens["storm"] = tokens_per_epoch(examples().padded_batch(32))
    storm_report = results["storm"][1]
    fix = storm_report.storms[0].fix if storm_report.storms else None
    if fix is not None:
        fixed = xla_keras.data.apply_fix(examples().padded_batch(32), fix)
        results["fix"] = run(fixed, jit="on")
        padded_tokens["fix"] = tokens_per_epoch(fixed)
        if "bucket_by_length" in fix:
            bucketed = xla_keras.data.bucket_by_length(examples(), fix)
            results["bucket"] = run(bucketed, jit="on")
            padded_tokens["bucket"] = tokens_per_epoch(bucketed)
    results["fallback"] = run(examples().padded_batch(32), jit="on", on_storm="fallback")
    results["jit off"] = run(examples().padded_batch(32), jit="off")
    padded_tokens["fallback"] = padded_tokens["jit off"] = padded_tokens["storm"]

    storm_epoch1 = results["storm"][0].epochs[0]
    off_step = statistics.median(results["jit off"][0].steps)
    off_epoch = statistics.median(results["jit off"][0].epochs[1:])
    print(
        f"model {args.model}, {args.sequences} sequences, lengths 8..256, padded_batch(32), {args.epochs} "
        f"epochs, {real_tokens} real tokens per epoch"
    )
    if fix is not None:
        print(
            f"advised fix: pad to {fix['lengths']} ({fix['compiles']} compile(s), "
            f"{fix['padding_overhead']:.0%} more padding than the batches seen)"
        )
        if fix.get("real_lengths", {}).get("measured"):
            exact = padded_tokens["storm"] / real_tokens - 1
            print(
                f"stated padding vs real tokens: batches as fed {fix['batches_real_padding_overhead']:.1%} "
                f"(exact {exact:.1%}, from {fix['real_lengths']['sampled_batches']} of "
                f"{fix['real_lengths']['batches_seen']} batches), padded to the advised lengths "
                f"{fix['real_padding_overhead']:.1%}, "
                f"bucketed {fix['bucket_by_length']['real_padding_overhead']:.1%} "
                f"(better: {fix['better_fix']})"
            )
    print(
        f"{'configuration':10s} {'epoch 1 s':>10s} {'vs storm':>9s} {'compiles':>9s} "
        f"{'step ms (ep 2+)':>16s} {'vs jit off':>11s} {'epoch s (ep 2+)':>16s} {'vs jit off':>11s} "
        f"{'tokens/epoch':>13s} {'vs real':>8s}"
    )
    for name, (times, report) in results.items():
        step = statistics.median(times.steps) if times.steps else float("nan")
        epoch = statistics.median(times.epochs[1:]) if len(times.epochs) > 1 else float("nan")
        print(
            f"{name:10s} {times.epochs[0]:10.2f} {storm_epoch1 / times.epochs[0]:8.1f}x "
            f"{report.total_compilations:9d} {step * 1e3:16.2f} {step / off_step:10.2f}x "
            f"{epoch:16.2f} {epoch / off_epoch:10.2f}x {padded_tokens[name]:13d} "
            f"{padded_tokens[name] / real_tokens:7.2f}x"
        )
    return results


if __name__ == "__main__":
    main()
