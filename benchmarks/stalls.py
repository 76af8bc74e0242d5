"""The same storm fit, monitored and bare, run several times in fresh processes, interleaved: whether the
steady step, the storm's payback and each epoch's time hold against the clock whatever stalls the machine
or TensorFlow's input pipeline add.

The fit (``jit_compile=True``): a text model of two Conv1D(256, 5) on ``padded_batch(32)`` of 512 sequences of
lognormal lengths (14 input shapes: a recompilation storm), 16 steps an epoch, 5 epochs, the same data in
each run. A callback of the script's, last in the list, times each epoch (its begin to the next one's: the
monitor's epoch-end work inside; the last one to its end) and each step's period (one batch begin to the
next, in the epochs after the first). The monitored fit has ``XlaMonitor(log_dir=...)``'s defaults (a
profiler trace window included).

Reported per run and as medians: the report's steady step against the median step period (TensorFlow, each
step synchronized) or the bare fits' epochs' wall time per step after the first (JAX: Keras drains at an
epoch's end),
the payback the storm's advice gives for bucketing (the runs within 25% of each other), each epoch's time
monitored against bare (within 5% or 0.2 s), and what the report says the monitor's own work cost.

``--repeat-data`` (TensorFlow) repeats the dataset with ``steps_per_epoch=16``: Keras then keeps one
iterator for the whole fit instead of starting one per epoch, whose start took 0.3-0.4 s in about 15 of 36
epochs, bare and monitored alike (the monitor's ``waits`` name it), and swung single epochs by that much
either way.

    python benchmarks/stalls.py [--runs 3] [--backend tensorflow|jax] [--epochs 5] [--repeat-data]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PAYBACK = re.compile(r"repaid after ~([0-9.]+) epochs")


def child(mode: str, log_dir: str, epochs: int) -> None:
    import keras
    import numpy as np

    backend = keras.backend.backend()
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(3.0, 0.6, 16 * 32).astype(int), 3, 120)
    tokens = [rng.integers(1, 1000, n) for n in lengths]
    labels = rng.integers(0, 2, len(tokens)).astype("float32")
    if backend == "tensorflow":
        import tensorflow as tf

        data = tf.data.Dataset.from_generator(
            lambda: zip(tokens, labels),
            output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32)),
        )
        data = data.padded_batch(32)
        fit_args = {}
        if os.environ.get("XLA_KERAS_STALLS_REPEAT"):  # one iterator for the whole fit
            data, fit_args = data.repeat(), {"steps_per_epoch": 16}
        data = data.prefetch(2)
    else:

        def batches():
            for _ in range(epochs):
                for i in range(0, len(tokens), 32):
                    rows = tokens[i : i + 32]
                    width = max(len(r) for r in rows)
                    x = np.zeros((len(rows), width), "int32")
                    for j, r in enumerate(rows):
                        x[j, : len(r)] = r
                    yield x, labels[i : i + 32]

        data, fit_args = batches(), {"steps_per_epoch": 16}
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(1000, 64)(inputs)
    h = keras.layers.Conv1D(256, 5, padding="same", activation="relu")(h)
    h = keras.layers.Conv1D(256, 5, padding="same", activation="relu")(h)
    h = keras.layers.GlobalMaxPooling1D()(h)
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(h))
    model.compile("adam", "binary_crossentropy", jit_compile=True)
    epoch_begins, epoch_ends, periods = [], [], []

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.last = None

        def on_epoch_begin(self, epoch, logs=None):
            epoch_begins.append(time.perf_counter())
            self.last = None

        def on_train_batch_begin(self, batch, logs=None):
            now = time.perf_counter()
            if self.last is not None and len(epoch_begins) > 1:
                periods.append(now - self.last)
            self.last = now

        def on_epoch_end(self, epoch, logs=None):
            epoch_ends.append(time.perf_counter())

    callbacks = [Clock()]
    monitor = None
    if mode == "monitored":
        import xla_keras

        profile = None if os.environ.get("XLA_KERAS_STALLS_PROFILE") == "none" else "auto"
        monitor = xla_keras.XlaMonitor(log_dir=log_dir, verbose=0, profile=profile)
        callbacks = [monitor, *callbacks]
    began = time.perf_counter()
    model.fit(data, epochs=epochs, verbose=0, callbacks=callbacks, **fit_args)
    ended = time.perf_counter()
    epoch_seconds = [b - a for a, b in zip(epoch_begins, epoch_begins[1:])] + [epoch_ends[-1] - epoch_begins[-1]]
    out = {
        "mode": mode,
        "fit_seconds": ended - began,
        "epochs": epoch_seconds,
        "after_last_epoch": ended - epoch_ends[-1],
        "median_period": statistics.median(periods),
    }
    if monitor is not None:
        report = monitor.report
        out["steady"] = report.steady_step_seconds
        paybacks = [float(m) for s in report.storms for m in PAYBACK.findall(s.advice)]
        out["payback_epochs"] = paybacks[0] if paybacks else None
        out["own_seconds"] = report.own_seconds
        out["waits"] = report.waits.get("train")
    print("XLA_KERAS_STALLS " + json.dumps(out), flush=True)


def run(mode: str, backend: str, epochs: int) -> dict:
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as log_dir:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", mode, log_dir, str(epochs)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_STALLS ")][-1]
    return json.loads(line.split(" ", 1)[1])


def measure(backend: str, runs: int, epochs: int = 5) -> dict:
    results = {"bare": [], "monitored": []}
    for _ in range(runs):
        for mode in ("bare", "monitored"):
            results[mode].append(run(mode, backend, epochs))
    monitored = results["monitored"]
    if backend == "jax":  # dispatch is asynchronous: the bare fits' epochs' wall time (drained at their ends)
        wall = statistics.median(sum(r["epochs"][1:]) / (16 * (epochs - 1)) for r in results["bare"])
        truth = [wall] * len(monitored)
    else:  # each step is synchronized: the median step period a callback measures in the same fit
        truth = [r["median_period"] for r in monitored]
    steady_vs_period = [r["steady"] / t for r, t in zip(monitored, truth) if r.get("steady")]
    paybacks = [r["payback_epochs"] for r in monitored if r.get("payback_epochs")]
    epochs_bare = [statistics.median(r["epochs"][i] for r in results["bare"]) for i in range(epochs)]
    epochs_monitored = [statistics.median(r["epochs"][i] for r in monitored) for i in range(epochs)]
    return {
        "backend": backend,
        "runs": runs,
        "steady_over_period": steady_vs_period,
        "paybacks": paybacks,
        "payback_spread": (max(paybacks) / min(paybacks) - 1) if len(paybacks) > 1 else None,
        "epochs_bare": epochs_bare,
        "epochs_monitored": epochs_monitored,
        "own_seconds": [r["own_seconds"]["total"] for r in monitored],
        "results": results,
    }


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeat-data", action="store_true", help="TensorFlow: one iterator for the fit (see above)")
    args = parser.parse_args(argv)
    if args.repeat_data:
        os.environ["XLA_KERAS_STALLS_REPEAT"] = "1"
    result = measure(args.backend, args.runs, args.epochs)
    truth = "the bare fits' epochs' wall time per step" if args.backend == "jax" else "the median step period"
    print(f"steady / {truth}, per run: {', '.join(f'{x:.2f}' for x in result['steady_over_period'])}")
    spread = result["payback_spread"]
    print(
        f"payback of bucketing (epochs), per run: {result['paybacks']}"
        + (f" (spread {spread:.0%})" if spread is not None else "")
    )
    for i, (bare, monitored) in enumerate(zip(result["epochs_bare"], result["epochs_monitored"]), 1):
        print(f"epoch {i}: bare {bare:.2f} s, monitored {monitored:.2f} s ({monitored - bare:+.2f} s, medians)")
    print(f"the monitor's own work, per run: {', '.join(f'{x:.2f} s' for x in result['own_seconds'])}")
    print("XLA_KERAS_BENCH " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
