"""Per-step cost of XlaMonitor vs a bare fit, side by side in one process.

Each configuration fits the same warm model (compiled once beforehand) for one
epoch; configurations are interleaved over several rounds so machine noise
hits them alike. Reported: median seconds per step over the rounds and the
ratio to bare.

    python benchmarks/overhead.py [--quick] [--rounds 5] [--steps 400] [--jit on|off]
"""

import argparse
import statistics
import tempfile
import time

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny run that only proves the script works")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--jit", default="on", choices=["on", "off"])
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 2, 20

    import keras

    import xla_keras

    rng = np.random.default_rng(0)
    batch = 64
    x = rng.random((batch * args.steps, 32), dtype=np.float32)
    y = rng.random((batch * args.steps, 1), dtype=np.float32)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=args.jit == "on")
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # warm: compile before measuring

    tmp = tempfile.mkdtemp(prefix="xla_keras_overhead_")
    configs = {
        "bare": lambda: [],
        "XlaMonitor()": lambda: [xla_keras.XlaMonitor(log_dir=f"{tmp}/m", verbose=0)],
        "XlaMonitor(update_freq='batch')": lambda: [
            xla_keras.XlaMonitor(log_dir=f"{tmp}/mb", update_freq="batch", verbose=0)],
        "keras TensorBoard(update_freq='batch')": lambda: [
            keras.callbacks.TensorBoard(log_dir=f"{tmp}/tb", update_freq="batch")],
    }
    per_step = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, make in configs.items():
            callbacks = make()
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)
            per_step[name].append((time.perf_counter() - start) / args.steps)
    bare = statistics.median(per_step["bare"])
    print(f"jit={args.jit}, {args.steps} steps x {args.rounds} rounds, interleaved; median per step")
    print(f"{'configuration':42s} {'ms/step':>9s} {'vs bare':>8s}")
    for name, values in per_step.items():
        med = statistics.median(values)
        print(f"{name:42s} {med * 1e3:9.3f} {med / bare:7.3f}x")
    return per_step


if __name__ == "__main__":
    main()
