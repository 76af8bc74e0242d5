"""Per-step cost of XlaMonitor under tf.distribute, side by side.

MirroredStrategy over 2 logical CPUs (this process) and
MultiWorkerMirroredStrategy with 2 local worker processes on loopback (the
patch for keras-team/keras#20585 applied, as `xla-keras doctor` prints it).
Configurations are interleaved over several rounds on the same warm model, in
reverse order every other round: bare fit, XlaMonitor(), XlaMonitor()
pulling batches with an eager ``next()`` instead of its graph pull (what the
pull choice is worth), and XlaMonitor(on_storm="raise"), whose workers agree on
storms every 50 batches and at each epoch's end. Each configuration keeps one monitor across its rounds,
as a training run does (its one-time trace window falls in the warm-up fit).
Reported: median seconds per step over the rounds, the ratio to bare, and the
median of the rounds' paired ratios. Target: Mirrored at most 1.05x.

    python benchmarks/strategy_overhead.py [--quick] [--rounds 9] [--steps 200] [--strategy mirrored|multiworker|both]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

# "on_storm='raise'": under MultiWorkerMirroredStrategy the workers agree on storms every 50 batches
# and at each epoch's end: what that agreement costs beside XlaMonitor().
CONFIGS = ("bare", "XlaMonitor()", "XlaMonitor() eager pull", "XlaMonitor(on_storm='raise')")


def _eager_pull():
    """Swap the monitor's graph pull for an eager next() (benchmark only)."""
    from xla_keras.backends.tensorflow import steps

    graph_next = steps.graph_next
    steps.graph_next = lambda: next
    return lambda: setattr(steps, "graph_next", graph_next)


def measure(strategy, rounds, steps, batch=64):
    import keras
    import numpy as np
    import tensorflow as tf

    import xla_keras

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((32,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile("adam", "mse")
    rng = np.random.default_rng(0)
    x = rng.random((batch * steps, 32), dtype=np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(batch)
    tmp = tempfile.mkdtemp(prefix="xla_keras_strategy_")

    monitors = {
        config: xla_keras.XlaMonitor(
            log_dir=f"{tmp}/{i}", verbose=0, on_storm="raise" if "on_storm='raise'" in config else "warn"
        )
        for i, config in enumerate(CONFIGS)
    }

    def fit(config):
        callbacks = [] if config == "bare" else [monitors[config]]
        undo = _eager_pull() if config.endswith("eager pull") else None
        try:
            start = time.perf_counter()
            model.fit(data, epochs=1, verbose=0, callbacks=callbacks)
            return (time.perf_counter() - start) / steps
        finally:
            if undo:
                undo()

    for config in CONFIGS:  # warm every call path: no configuration pays a trace inside the measurement
        fit(config)
    per_step = {config: [] for config in CONFIGS}
    for round_ in range(rounds):
        for config in CONFIGS if round_ % 2 == 0 else CONFIGS[::-1]:
            per_step[config].append(fit(config))
    return {
        config: (statistics.median(values), statistics.median(a / b for a, b in zip(values, per_step["bare"])))
        for config, values in per_step.items()
    }


def _print(name, results):
    bare = results["bare"][0]
    for config, (seconds, paired) in results.items():
        print(f"{name:26s} {config:26s} {seconds * 1e3:9.3f} {seconds / bare:7.3f}x {paired:7.3f}x")


def worker(spec):
    import tensorflow as tf

    from xla_keras.backends.tensorflow.multiworker import WORKAROUND

    exec(WORKAROUND, {})
    results = measure(tf.distribute.MultiWorkerMirroredStrategy(), spec["rounds"], spec["steps"])
    print(
        "XLA_KERAS_MW "
        + json.dumps({"task": json.loads(os.environ["TF_CONFIG"])["task"]["index"], "results": results}),
        flush=True,
    )


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny run that only proves the script works")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--strategy", default="both", choices=["mirrored", "multiworker", "both"])
    parser.add_argument("--spec", help=argparse.SUPPRESS)  # a multi-worker worker (run by this script)
    args = parser.parse_args(argv)
    if args.spec:
        return worker(json.loads(args.spec))
    if args.quick:
        args.rounds, args.steps = 1, 10
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    print(f"{args.steps} steps x {args.rounds} rounds, interleaved; median per step (MLP, global batch 64)")
    print(f"{'strategy':26s} {'configuration':26s} {'ms/step':>9s} {'vs bare':>8s} {'paired':>8s}")
    mirrored = None
    if args.strategy != "multiworker":
        mirrored = measure(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), args.rounds, args.steps)
        _print("Mirrored (2 logical CPUs)", mirrored)
    if args.strategy == "mirrored":
        return {"mirrored": mirrored}

    from multiworker import run_workers

    runs = run_workers(
        tempfile.mkdtemp(prefix="xla_keras_mw_bench_"),
        {"rounds": args.rounds, "steps": args.steps},
        script=os.path.abspath(__file__),
        timeout=1800,
    )
    for run in runs:
        if run.result is None:
            raise SystemExit(f"worker {run.index} failed:\n{run.stderr[-3000:]}")
    chief = next(run for run in runs if run.result["task"] == 0)
    _print("MultiWorker (2 workers)", chief.result["results"])
    return {"mirrored": mirrored, "multi_worker": chief.result["results"]}


if __name__ == "__main__":
    main()
