"""Per-step cost of XlaMonitor vs a bare fit, side by side in one process.

For each reference model, every configuration fits the same warm model for one epoch;
configurations are interleaved over several rounds (in reverse order every other round) so machine
noise hits them alike. Reported: median seconds per step over the rounds, the ratio to bare, and
the median of the rounds' paired ratios (each configuration against the bare fit of its round).

Models: ``mlp`` (32-64-64-1, batch 64: ~1 ms steps on TensorFlow, ~0.3 ms jitted on JAX), ``cnn``
(a small convnet), ``tiny`` (32-32-1, batch 32: a jitted JAX step of ~0.25 ms) and ``medium``
(512-512-1, batch 256: 3 ms and more). "bare" is the same fit with no callbacks. Where the monitor
makes Keras take another path than a bare fit (TensorFlow: its per-batch branch, for any callback
with batch hooks), "no-op callback" is a callback that does nothing in the same hooks: the cost of
that path alone, which is Keras's.

Targets (issue #31): under JAX at most 1.03x on a ~0.25 ms jitted step and 1.01x on steps of 3 ms
and more; TensorFlow at most 1.0x on its MLP and CNN; never more costly than
keras.callbacks.TensorBoard(update_freq="batch"). Under JAX, Keras's asynchronous dispatch is kept
(the monitor is async-safe: its per-step work is in the step wrapper). A fit's time includes its
last steps finishing (Keras waits for them at the epoch end).

    python benchmarks/overhead.py [--quick] [--rounds 9] [--steps 400] [--jit on|off]
                                  [--model mlp|cnn|tiny|medium|both|all] [--backend tensorflow|jax]
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

MODELS = {  # kind: (input shape, hidden widths (dense), batch size); "cnn" is built apart
    "mlp": ((32,), (64, 64), 64),
    "tiny": ((32,), (32,), 32),
    "medium": ((512,), (512,), 256),
    "cnn": ((16, 16, 3), (), 64),
}


def build(kind):
    import keras

    shape, widths, _ = MODELS[kind]
    if kind != "cnn":
        layers = [keras.layers.Dense(width, activation="relu") for width in widths]
        return keras.Sequential([keras.Input(shape), *layers, keras.layers.Dense(1)]), shape
    model = keras.Sequential(
        [
            keras.Input(shape),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(1),
        ]
    )
    return model, shape


def _noop_callback():
    import keras

    class NoOp(keras.callbacks.Callback):
        """Batch hooks that do nothing: Keras's per-batch path, without the monitor."""

        async_safe = True  # as the monitor under JAX: Keras keeps its asynchronous dispatch

        def on_train_batch_begin(self, batch, logs=None):
            pass

        def on_train_batch_end(self, batch, logs=None):
            pass

    return NoOp()


def measure(kind, args):
    import keras

    import xla_keras

    rng = np.random.default_rng(0)
    model, shape = build(kind)
    batch = MODELS[kind][2]
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
        "no-op callback (batch hooks)": [_noop_callback()],
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
    for round_ in range(args.rounds):
        order = list(configs.items())
        if round_ % 2:
            order.reverse()  # neither end of a round is always the same configuration's
        for name, callbacks in order:
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)
            per_step[name].append((time.perf_counter() - start) / args.steps)
    medians = {name: statistics.median(values) for name, values in per_step.items()}
    paired = {
        name: statistics.median(a / b for a, b in zip(values, per_step["bare"])) for name, values in per_step.items()
    }
    one_time = {name: first[name] - medians[name] * args.steps for name in configs}
    return medians, paired, one_time


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny run that only proves the script works")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--jit", default="on", choices=["on", "off"])
    parser.add_argument("--model", default="both", choices=[*MODELS, "both", "all"])
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
    kinds = {"both": ["mlp", "cnn"], "all": list(MODELS)}.get(args.model, [args.model])
    results = {}
    print(
        f"backend={args.backend}, jit={args.jit}, {args.steps} steps x {args.rounds} rounds, interleaved; "
        "median per step"
    )
    print(f"{'model':6s} {'configuration':40s} {'ms/step':>9s} {'vs bare':>8s} {'paired':>8s} {'us/step':>8s}")
    for kind in kinds:
        results[kind], paired, one_time = measure(kind, args)
        bare = results[kind]["bare"]
        for name, med in results[kind].items():
            added = (med - bare) * 1e6
            print(f"{kind:6s} {name:40s} {med * 1e3:9.3f} {med / bare:7.3f}x {paired[name]:7.3f}x {added:+8.1f}")
        extra = {name: one_time[name] - one_time["bare"] for name in one_time if name != "bare"}
        print(
            f"{kind:6s} first fit's extra time vs bare's first fit (one-time: the monitor's trace window "
            "after warm-up, first writes): "
            + ", ".join(f"{name} {seconds * 1e3:.0f} ms" for name, seconds in extra.items())
        )
    return results


if __name__ == "__main__":
    main()
