"""xla_keras quick start: one callback, a truthful XLA report.

Trains a small model on synthetic data with XlaMonitor, prints the report and
writes a TensorBoard log dir. Run:

    python examples/quickstart.py [--log-dir logs/quickstart] [--jit on|off|keep|autoclustering]
    tensorboard --logdir logs/quickstart
"""

import argparse

import numpy as np

import xla_keras


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-dir", default="logs/quickstart")
    parser.add_argument("--jit", default="on", choices=["keep", "on", "off", "autoclustering"])
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    if args.jit == "autoclustering":
        xla_keras.configure(cpu_autoclustering=True)  # before any model is built

    import keras

    rng = np.random.default_rng(0)
    # 2,100 rows, 20% held out: 1,680 train rows at batch 64 are 26 full
    # batches and a partial one of 16, so the train function compiles twice
    # (validation too: 6 x 64 + 36). The report shows each compile, the shape
    # that caused it and what it cost.
    x = rng.normal(size=(2100, 20)).astype("float32")
    y = (x[:, :5].sum(axis=1, keepdims=True) > 0).astype("float32")

    model = keras.Sequential(
        [
            keras.Input((20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])

    monitor = xla_keras.XlaMonitor(log_dir=args.log_dir, jit=args.jit)
    model.fit(x, y, batch_size=64, epochs=args.epochs, validation_split=0.2, callbacks=[monitor], verbose=2)

    report = monitor.report
    print()
    print(f"jit requested: {report.jit_mode}; XLA active: {report.jit_active}")
    print(f"compiles: {report.compilation_count}; compile seconds: {report.compile_seconds:.3f}")
    steady = report.steady_step_seconds
    print(f"steady train step: {steady * 1e3:.2f} ms" if steady else "steady train step: n/a")
    print(f"TensorBoard: tensorboard --logdir {args.log_dir}")


if __name__ == "__main__":
    main()
