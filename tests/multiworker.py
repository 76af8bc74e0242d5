"""Two local MultiWorkerMirroredStrategy workers on loopback, each a fresh
process with TF_CONFIG, running one fit program under XlaMonitor.

    python tests/multiworker.py --spec JSON       (run by run_workers, once per worker)

Each worker prints ``XLA_KERAS_MW <json>``: the reports of its fits, its task
index and pid, whether fit failed and with what. ``run_workers`` starts the
workers, gives each its own XLA dump dir (independent ground truth), and fails
on a hang (a collective mismatch leaves workers waiting forever).
"""

import json
import os
import socket
import sys
import threading
import time

import forked

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.abspath(__file__)


class WorkerRun:
    def __init__(self, index, returncode, stdout, stderr, dump_dir):
        self.index, self.returncode, self.stdout, self.stderr = index, returncode, stdout, stderr
        lines = [ln for ln in stdout.splitlines() if ln.startswith("XLA_KERAS_MW ")]
        self.result = json.loads(lines[-1][len("XLA_KERAS_MW ") :]) if lines else None
        self.dump_modules = (
            sum(1 for f in os.listdir(dump_dir) if f.endswith("before_optimizations.txt"))
            if os.path.isdir(dump_dir)
            else 0
        )


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(tmp_root, spec, workers=2, timeout=300, env_extra=None, script=SCRIPT):
    """Run ``script --spec JSON`` (this file's worker by default) on ``workers``
    local processes; a list of WorkerRun."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(workers)]}
    procs = []
    for index in range(workers):
        env = dict(os.environ)
        env.pop("TF_XLA_FLAGS", None)
        env.update(
            {
                "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                "XLA_FLAGS": f"--xla_dump_to={os.path.join(tmp_root, f'dump{index}')}",
                "CUDA_VISIBLE_DEVICES": "",
                "TF_CPP_MIN_LOG_LEVEL": "1",
                "PYTHONPATH": ROOT + os.pathsep + env.get("PYTHONPATH", ""),
                **(env_extra or {}),
            }
        )
        procs.append(forked.start([sys.executable, script, "--spec", json.dumps(spec)], env=env))
    # Every process's pipes are read at once: a process whose output fills its pipe while no one reads it
    # would block, and its peers with it (in a collective, or JAX's shutdown barrier at exit).
    outputs: list = [None] * len(procs)

    def read(index):
        outputs[index] = procs[index].communicate()

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(procs))]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    if any(reader.is_alive() for reader in readers):
        for p in procs:
            p.kill()
        for reader in readers:
            reader.join(30)
        tails = "\n".join(f"--- worker {i}:\n{(out or ('', ''))[1][-3000:]}" for i, out in enumerate(outputs))
        raise AssertionError(f"multi-worker run hung for {timeout} s (a collective mismatch?)\n{tails}")
    return [
        WorkerRun(index, proc.returncode, *outputs[index], os.path.join(tmp_root, f"dump{index}"))
        for index, proc in enumerate(procs)
    ]


def comparable(report):
    """The parts of a report every worker must agree on (not timings, not where files went)."""
    return {
        "jit_active": report["jit_active"],
        "jit_reason": report["jit_reason"],
        "compilation_count": report["compilation_count"],
        "distinct_signatures": report["distinct_signatures"],
        "steps": report["steps"],
        "compiled_signatures": sorted(
            (c["phase"], c["step"], json.dumps(c["signature"])) for c in report["compilations"]
        ),
    }


# ----------------------------------------------------------------- the worker


def _data(spec, task):
    """Fixed shapes, or (``lengths``) sequences whose padded length varies on
    worker 1 only: each worker reads its own data (no auto-sharding)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(task)
    steps = spec.get("steps", 12)
    if spec.get("data") == "lengths":
        lengths = ([10] * steps) if task == 0 else [4 + 3 * (i % 6) for i in range(steps)]

        def gen():
            for length in lengths:
                yield (rng.integers(1, 50, size=(16, length)).astype("int32"), rng.random((16, 1), dtype=np.float32))

        ds = tf.data.Dataset.from_generator(
            gen, output_signature=(tf.TensorSpec((16, None), tf.int32), tf.TensorSpec((16, 1), tf.float32))
        )
    else:
        x = rng.random((steps * 16, 8), dtype=np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(16)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)


def _model(spec):
    import keras

    if spec.get("data") == "lengths":
        layers = [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(50, 8),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    else:
        layers = [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    model = keras.Sequential(layers)
    model.compile("sgd", "mse")
    return model


def _inject_internal_error(at_call):
    """The monitor's own code fails on this worker only, at its at_call-th batch."""
    from xla_keras.backends.tensorflow import TensorFlowBackend

    real, calls = TensorFlowBackend.signature, []

    def failing(self, batch):
        calls.append(1)
        if len(calls) == at_call:
            raise RuntimeError("injected internal error")
        return real(self, batch)

    TensorFlowBackend.signature = failing


def worker(spec):
    import xla_keras

    if spec.get("configure"):
        xla_keras.configure(cpu_autoclustering=True)
    import tensorflow as tf

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    if spec.get("workaround"):
        from xla_keras.backends.tensorflow.multiworker import WORKAROUND

        exec(WORKAROUND, {})  # the patch `xla-keras doctor` prints, verbatim
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = _model(spec)
    result = {"task": task, "pid": os.getpid(), "fits": [], "failed": None}
    try:
        for number, kwargs in enumerate(spec["fits"], start=1):
            kwargs = dict(kwargs)
            if spec.get("fail_monitor_on_task") == task and spec.get("fail_in_fit") == number:
                _inject_internal_error(spec.get("fail_at_call", 3))
            monitor = xla_keras.XlaMonitor(verbose=0, **kwargs.pop("monitor", {}))
            validation = _data(spec, task) if kwargs.pop("validation", False) else None
            catch, error, loss = kwargs.pop("catch", False), None, None
            try:
                history = model.fit(
                    _data(spec, task), validation_data=validation, verbose=0, callbacks=[monitor], **kwargs
                )
                loss = history.history["loss"]
            except xla_keras.RecompilationStormError as caught:  # on_storm="raise": this fit only
                if not catch:
                    raise
                error = f"{type(caught).__name__}: {caught}"
            iterations = int(model.optimizer.iterations.numpy())  # Keras's own count of train steps
            result["fits"].append(
                {"report": monitor.report.to_dict(), "loss": loss, "error": error, "iterations": iterations}
            )
    except Exception as error:  # noqa: BLE001 - reported to the test
        result["failed"] = f"{type(error).__name__}: {error}"[:2000]
    print("XLA_KERAS_MW " + json.dumps(result), flush=True)


if __name__ == "__main__":
    assert sys.argv[1] == "--spec"
    worker(json.loads(sys.argv[2]))
