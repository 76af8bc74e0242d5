"""Per-step cost of XlaMonitor vs a bare fit, side by side in one process.

For each reference model (an MLP with ~1 ms steps and a small CNN), every
configuration fits the same warm model for one epoch; configurations are
interleaved over several rounds so machine noise hits them alike. Reported:
median seconds per step over the rounds and the ratio to bare.

Targets (issue #5): XlaMonitor() at most 1.02x bare, and no more costly than
keras.callbacks.TensorBoard(update_freq="batch"). Under Keras's JAX backend
(``--backend jax``, issue #15) the same, with Keras's asynchronous dispatch
kept: the monitor is async-safe and does its per-step work in the step wrapper,
so Keras still runs batch-end callbacks on its executor thread. A fit's time
includes its last steps finishing (Keras waits for them at the epoch end).

    python benchmarks/overhead.py [--quick] [--rounds 7] [--steps 400] [--jit on|off] [--model mlp|cnn|both]
                                  [--backend tensorflow|jax]
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def build(kind):
    import keras

    if kind == "mlp":
        model = keras.Sequential(
            [
                keras.Input((32,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        shape = (32,)
    else:
        model = keras.Sequential(
            [
                keras.Input((16, 16, 3)),
                keras.layers.Conv2D(8, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(1),
            ]
        )
        shape = (16, 16, 3)
    return model, shape


def measure(kind, args, batch=64):
    import keras

    import xla_keras

    rng = np.random.default_rng(0)
    model, shape = build(kind)
    x = rng.random((batch * args.steps, *shape), dtype=np.float32)
    y = rng.random((batch * args.steps, 1), dtype=np.float32)
    model.compile("adam", "mse", jit_compile=args.jit == "on")

    tmp = tempfile.mkdtemp(prefix="xla_keras_overhead_")
    # One callback object per configuration for every round, as in a training run: the monitor's
    # one-time costs (its automatic profiler trace window after warm-up, first file writes) fall in
    # the warm-up fit below, which also warms both call paths (no configuration compiles inside the
    # measurement). The first fit's extra time is printed apart.
    configs = {
        "bare": [],
        "XlaMonitor()": [xla_keras.XlaMonitor(log_dir=f"{tmp}/m", verbose=0)],
        "XlaMonitor(update_freq='batch')": [xla_keras.XlaMonitor(log_dir=f"{tmp}/mb", update_freq="batch", verbose=0)],
        "keras TensorBoard(update_freq='batch')": [
            keras.callbacks.TensorBoard(log_dir=f"{tmp}/tb", update_freq="batch")
        ],
    }
    if keras.backend.backend() == "jax":
        # Keras's TensorBoard callback writes with tf.summary: only where TensorFlow is installed.
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            del configs["keras TensorBoard(update_freq='batch')"]
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # the model's own compile: in no configuration's time
    first = {}
    for name, callbacks in configs.items():
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)
        first[name] = time.perf_counter() - start
    per_step = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, callbacks in configs.items():
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)
            per_step[name].append((time.perf_counter() - start) / args.steps)
    medians = {name: statistics.median(values) for name, values in per_step.items()}
    one_time = {name: first[name] - medians[name] * args.steps for name in configs}
    return medians, one_time


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny run that only proves the script works")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--jit", default="on", choices=["on", "off"])
    parser.add_argument("--model", default="both", choices=["mlp", "cnn", "both"])
    parser.add_argument(
        "--backend",
        default=os.environ.get("KERAS_BACKEND", "tensorflow"),
        choices=["tensorflow", "jax"],
        help="Keras's backend (set before keras is imported)",
    )
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = args.backend
    if args.quick:
        args.rounds, args.steps = 2, 20
    kinds = ["mlp", "cnn"] if args.model == "both" else [args.model]
    results = {}
    print(
        f"backend={args.backend}, jit={args.jit}, {args.steps} steps x {args.rounds} rounds, interleaved; "
        "median per step"
    )
    print(f"{'model':5s} {'configuration':40s} {'ms/step':>9s} {'vs bare':>8s}")
    for kind in kinds:
        results[kind], one_time = measure(kind, args)
        bare = results[kind]["bare"]
        for name, med in results[kind].items():
            print(f"{kind:5s} {name:40s} {med * 1e3:9.3f} {med / bare:7.3f}x")
        extra = {name: one_time[name] - one_time["bare"] for name in one_time if name != "bare"}
        print(
            f"{kind:5s} first fit's extra time vs bare's first fit (one-time: the monitor's trace window "
            "after warm-up, first writes): "
            + ", ".join(f"{name} {seconds * 1e3:.0f} ms" for name, seconds in extra.items())
        )
    return results


if __name__ == "__main__":
    main()
