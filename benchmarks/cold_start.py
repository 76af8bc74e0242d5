"""Cold start: compile time of a fresh process, with and without TensorFlow's
persistent XLA compilation cache, side by side.

Two workloads (the quick-start model and the storm workload of
storm_payoff.py), each run as two fresh processes without the cache and two
sharing a new cache directory (`xla_keras.configure(cache_dir=...)`). Each
process reports what XlaMonitor measured: compile seconds, compiles loaded from
the cache and the seconds the cache saved. Target (issue #7): the second
process's compile seconds at most 40% of the first's.

    python benchmarks/cold_start.py [--quick]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(workload, cache_dir, quick):
    import numpy as np

    import xla_keras

    if cache_dir:
        xla_keras.configure(cache_dir=cache_dir)  # right after import, before any model
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(0)
    if workload == "quickstart":
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
        model.compile("adam", "binary_crossentropy")
        args, kwargs = (x, y), {"batch_size": 64, "validation_split": 0.2, "epochs": 1 if quick else 3}
    else:
        lengths = rng.integers(8, 257, size=480 if quick else 4000)
        tokens = [rng.integers(1, 5000, size=n).astype(np.int32) for n in lengths]
        labels = (lengths > 132).astype(np.float32)
        data = tf.data.Dataset.from_generator(
            lambda: zip(tokens, labels),
            output_signature=(tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32)),
        ).padded_batch(32)
        model = keras.Sequential(
            [
                keras.Input((None,), dtype="int32"),
                keras.layers.Embedding(5000, 32),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(1),
            ]
        )
        model.compile("adam", "binary_crossentropy")
        args, kwargs = (data,), {"epochs": 1}
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0, profile=None, storm_threshold=10_000)
    model.fit(*args, callbacks=[monitor], verbose=0, **kwargs)
    report = monitor.report
    print(
        "XLA_KERAS_COLD "
        + json.dumps(
            {
                "compile_seconds": report.compile_seconds,
                "compiles": report.total_compilations,
                "cached": sum(c.cached for c in report.compilations),
                "saved": report.cache_saved_seconds,
            }
        )
    )


def run(workload, cache_dir, quick):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_XLA_FLAGS", None)
    cmd = (
        [sys.executable, os.path.abspath(__file__), "--child", workload]
        + (["--cache-dir", cache_dir] if cache_dir else [])
        + (["--quick"] if quick else [])
    )
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.split("XLA_KERAS_COLD ")[-1])


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", choices=["quickstart", "storm"])
    parser.add_argument("--cache-dir")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.cache_dir, args.quick)
    # --quick (the test suite's check that this script still runs): the storm workload's cached row
    # only (the quickstart workload, numpy data and validation_split, runs in the full run alone; its
    # cache path is the same). The full run keeps every row sequential: its times are the figures.
    workloads = ("storm",) if args.quick else ("quickstart", "storm")
    plan = [(w, c) for w in workloads for c in ((True,) if args.quick else (False, True))]

    def pair(item):
        workload, with_cache = item
        cache = tempfile.mkdtemp(prefix="xla_keras_cache_") if with_cache else None
        first, second = run(workload, cache, args.quick), run(workload, cache, args.quick)
        return workload, with_cache, first, second

    rows = [pair(item) for item in plan]
    print(
        f"{'workload':11s} {'cache':6s} {'compiles':>8s} {'process 1 s':>12s} {'process 2 s':>12s} "
        f"{'2 / 1':>7s} {'loaded':>7s} {'saved s':>8s}"
    )
    for workload, with_cache, first, second in rows:
        ratio = second["compile_seconds"] / first["compile_seconds"] if first["compile_seconds"] else float("nan")
        saved = f"{second['saved']:.2f}" if second["saved"] is not None else "-"
        print(
            f"{workload:11s} {'yes' if with_cache else 'no':6s} {first['compiles']:8d} "
            f"{first['compile_seconds']:12.2f} {second['compile_seconds']:12.2f} {ratio:6.0%} "
            f"{second['cached']:7d} {saved:>8s}"
        )
    return rows


if __name__ == "__main__":
    main()
