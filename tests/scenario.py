"""Run one real fit under XlaMonitor and print its report as JSON.

Used by tests/test_ground_truth.py in a fresh subprocess, because XLA_FLAGS,
TF_XLA_FLAGS and TF_CPP_* must be set before TensorFlow is imported.

    python tests/scenario.py SCENARIO JIT [--configure] [--profiler-busy] [--log-dir DIR]

The last line printed is ``XLA_KERAS_REPORT <json>``.
"""

import argparse
import datetime
import json
import os
import re
import sys

import forked
import numpy as np
from models import text_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.abspath(__file__)
# TensorFlow 2.20+ prints a rounded value and the exact microseconds ("351 ms (351325 us)", "1.36 s
# (1362609 us)"); 2.16-2.19 print the rounded value only ("24.4 ms (cumulative: ...)").
_TF_COMPILE_LINE = re.compile(r"Compilation of XLA executable time: ([0-9.]+) (h|min|s|ms|us)\b(?: \((\d+) us\))?")
_UNIT_SECONDS = {"h": 3600.0, "min": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}


def tf_compile_seconds(stderr):
    """Every compile TensorFlow's device_compiler logged, in seconds (exact when it prints microseconds)."""
    return [
        int(us) / 1e6 if us else float(value) * _UNIT_SECONDS[unit]
        for value, unit, us in _TF_COMPILE_LINE.findall(stderr)
    ]


# TensorFlow's own log of each XLA launch op (``TF_CPP_VMODULE=xla_ops=1``), timestamped to the microsecond:
# "2026-12-07 19:59:16.586497: I tensorflow/compiler/jit/kernels/xla_ops.cc:489] XlaLocalLaunchOpBase::Compute
# ..." when the op starts, "... xla_ops.cc:646] Done" when it ends.
_TF_LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+): \w (?:\S*xla_ops\.cc:\d+\] (XlaLocalLaunchOpBase::Compute|Done)\b"
    r"|\S*device_compiler\.h:\d+\] (Compilation of XLA executable))",
    re.MULTILINE,
)


def tf_compiling_op_spans(stderr):
    """The wall seconds of each XLA launch op that compiled, from TensorFlow's own timestamped lines: its
    start to its end, for the ops whose span holds a "Compilation of XLA executable" line (the ground
    truth for a probe that times compiles by the op's span: TensorFlow before 2.18)."""
    spans, start, compiled = [], None, False
    for stamp, op_line, compile_line in _TF_LOG_LINE.findall(stderr):
        seconds = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()
        if op_line == "XlaLocalLaunchOpBase::Compute":
            start, compiled = seconds, False
        elif compile_line:
            compiled = start is not None
        elif start is not None:
            if compiled:
                spans.append(seconds - start)
            start = None
    return spans


class ScenarioRun:
    """One subprocess fit: the monitor's report and XLA's own ground truth."""

    def __init__(self, report, dump_modules, tf_compile_seconds, stderr):
        self.report = report
        self.dump_modules = dump_modules  # *before_optimizations.txt files
        self.tf_compile_seconds = tf_compile_seconds  # TF's own device_compiler lines
        self.stderr = stderr


def failed(what, stdout, stderr):
    """The error for a scenario subprocess that failed: the tails of what it printed."""
    return AssertionError(f"{what} failed:\n{stdout[-3000:]}\n{stderr[-6000:]}")


# Where the monitor times a compile by its op's span (TensorFlow before 2.18), TensorFlow's own lines for
# each XLA launch op are that span's ground truth; elsewhere they would only lengthen the log.
_TF_VMODULE = (
    "device_compiler=1" if forked.tensorflow_times_compiles_from_profiler_events() else "device_compiler=1,xla_ops=1"
)


def run_scenario(tmp_root, scenario, jit, *, env_flags="", extra_args=()):
    dump = os.path.join(tmp_root, "dump")
    env = dict(os.environ)
    env.update(
        {
            "XLA_FLAGS": f"--xla_dump_to={dump}",
            "TF_CPP_MIN_LOG_LEVEL": "0",
            "TF_CPP_VMODULE": _TF_VMODULE,
            "PYTHONPATH": ROOT + os.pathsep + env.get("PYTHONPATH", ""),
            "CUDA_VISIBLE_DEVICES": "",
            "KERAS_BACKEND": "tensorflow",  # as the step-time and cluster scripts say it: one fork server
        }
    )
    env.pop("TF_XLA_FLAGS", None)
    if env_flags:
        env["TF_XLA_FLAGS"] = env_flags
    proc = forked.run([sys.executable, SCENARIO, scenario, jit, *extra_args], env=env, timeout=600)
    if proc.returncode != 0:
        raise failed(f"scenario {scenario}/{jit}", proc.stdout, proc.stderr)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_REPORT ")][-1]
    report = json.loads(line[len("XLA_KERAS_REPORT ") :])
    modules = 0
    if os.path.isdir(dump):
        modules = sum(1 for f in os.listdir(dump) if f.endswith("before_optimizations.txt"))
    return ScenarioRun(report, modules, tf_compile_seconds(proc.stderr), proc.stderr)


SCENARIOS = ("batch_sizes", "partial_batch", "padded", "steps_per_execution", "nested", "mirrored", "storm")


def mlp(inputs=8):
    import keras

    model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model


def padded_sequences(rng):
    """96 sequences of 4..79 tokens in batches of 8, each padded to its longest."""
    import tensorflow as tf

    lengths = rng.integers(4, 80, size=96)

    def gen():
        for n in lengths:
            yield np.arange(n, dtype=np.int32) % 97 + 1, np.float32(n % 2)

    return tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32))
    ).padded_batch(8)


class FlagSpy:
    """Records, at every epoch end, the jit flag of the step function that runs."""

    def __new__(cls):
        import keras

        from xla_keras.backends.tensorflow import _internals

        class Spy(keras.callbacks.Callback):
            flags = []

            def on_epoch_end(self, epoch, logs=None):
                fn = _internals.unwrap(self.model.train_function)
                self.flags.append(_internals.function_jit_flag(_internals.find_step_function(fn)))

        return Spy()


def run(name, jit, log_dir, profiler_busy, on_storm="warn", threshold=8, extra=None):
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(0)
    fit_kwargs = {"epochs": 2, "verbose": 0}
    if name == "batch_sizes":
        # One batch of each size 16..23 per epoch: 8 signatures.
        def gen():
            for size in range(16, 24):
                yield rng.random((size, 8), dtype=np.float32), rng.random((size, 1), dtype=np.float32)

        data = tf.data.Dataset.from_generator(
            gen, output_signature=(tf.TensorSpec((None, 8), tf.float32), tf.TensorSpec((None, 1), tf.float32))
        )
        model, args = mlp(), (data,)
    elif name == "partial_batch":
        # 1000 rows at batch 64: 15 full batches and one of 40; validation 300 rows: 64 and 44.
        x, y = rng.random((1000, 8), dtype=np.float32), rng.random((1000, 1), dtype=np.float32)
        vx, vy = rng.random((300, 8), dtype=np.float32), rng.random((300, 1), dtype=np.float32)
        model, args = mlp(), (x, y)
        fit_kwargs.update(batch_size=64, validation_data=(vx, vy))
    elif name == "padded":
        # Batches of 8 sequences of 4..79 tokens: each batch is padded to its own
        # longest sequence, so the padded length varies from batch to batch.
        model, args = text_model(), (padded_sequences(rng),)
    elif name == "steps_per_execution":
        x, y = rng.random((1000, 8), dtype=np.float32), rng.random((1000, 1), dtype=np.float32)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
        model.compile("adam", "mse", steps_per_execution=4)
        args = (x, y)
        fit_kwargs.update(batch_size=64)
    elif name == "nested":
        a = keras.Input((4,), name="a")
        b = keras.Input((6,), name="b")
        out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))
        model = keras.Model({"a": a, "b": b}, out)
        model.compile("adam", "mse")
        n = 230
        args = (
            {"a": rng.random((n, 4), dtype=np.float32), "b": rng.random((n, 6), dtype=np.float32)},
            rng.random((n, 1), dtype=np.float32),
        )
        fit_kwargs.update(batch_size=50, sample_weight=rng.random((n,), dtype=np.float32))
    elif name == "storm":
        # 3 epochs of 12 batches of 8 sequences of 4..79 tokens, padded per batch.
        model, args = text_model(), (padded_sequences(rng),)
        fit_kwargs["epochs"] = 3
    elif name == "mirrored":
        # Two logical CPUs, set before TensorFlow creates its devices.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = mlp()
        x, y = rng.random((1000, 8), dtype=np.float32), rng.random((1000, 1), dtype=np.float32)
        args = (x, y)
        fit_kwargs.update(batch_size=64)
    else:
        raise SystemExit(f"scenario must be one of {SCENARIOS}; got {name!r}")
    if profiler_busy:
        tf.profiler.experimental.start(log_dir or "/tmp/xla_keras_busy_profiler")
    import xla_keras

    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit=jit, verbose=0, on_storm=on_storm, storm_threshold=threshold)
    spy = FlagSpy()
    try:
        model.fit(*args, callbacks=[monitor, spy], **fit_kwargs)
    except xla_keras.RecompilationStormError as e:
        extra["raised"] = str(e)
    if profiler_busy:
        tf.profiler.experimental.stop()
    extra["jit_flags_at_epoch_end"] = spy.flags
    return monitor.report


def main():
    import xla_keras

    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("jit")
    parser.add_argument(
        "--configure", action="store_true", help="call xla_keras.configure(cpu_autoclustering=True) before any model"
    )
    parser.add_argument("--profiler-busy", action="store_true")
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--cache-dir", default=None, help="xla_keras.configure(cache_dir=...) before any model")
    parser.add_argument("--cache-dir-late", default=None, help="the same, but after a model was built")
    parser.add_argument("--on-storm", default="warn")
    parser.add_argument("--threshold", type=int, default=8)
    args = parser.parse_args()
    if args.configure:
        xla_keras.configure(cpu_autoclustering=True)
    if args.cache_dir:
        import keras  # noqa: F401 - like a user script: configure right after the imports

        xla_keras.configure(cache_dir=args.cache_dir)
    if args.cache_dir_late:
        mlp()  # TensorFlow creates its devices here
        xla_keras.configure(cache_dir=args.cache_dir_late)
    extra = {}
    report = run(args.scenario, args.jit, args.log_dir, args.profiler_busy, args.on_storm, args.threshold, extra)
    sys.stdout.write("XLA_KERAS_REPORT " + json.dumps({**report.to_dict(), "_scenario": extra}) + "\n")


if __name__ == "__main__":
    main()
