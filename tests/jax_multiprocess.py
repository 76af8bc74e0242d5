"""Keras's JAX backend in several processes on loopback: ``jax.distributed.initialize`` (CPU
collectives over gloo), ``keras.distribution.DataParallel`` over every process's devices, each process
feeding its own data of the same shapes. With one process, DataParallel over its host devices.

    python tests/jax_multiprocess.py --spec JSON    (run by multiworker.run_workers, once per process)

The process index and the coordinator's address come from the TF_CONFIG run_workers sets (worker 0's
port is the coordinator's); XLA_FLAGS holds this process's own dump directory. Each process prints
``XLA_KERAS_MW <json>``: per fit, the monitor's report, the ``jit_train_step`` / ``jit_test_step``
modules XLA dumped in this process during the fit (independent ground truth), the error the fit
raised and the train step it stopped at.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def batches(index, lengths, epochs, rows=8):
    """Each process's own values; the lengths, hence the shapes, are the same in every process."""
    import numpy as np

    rng = np.random.default_rng(100 + index)
    for _ in range(epochs):
        for length in lengths:
            yield rng.random((rows, length, 4), dtype=np.float32), rng.random((rows, 1), dtype=np.float32)


def model():
    import keras

    keras.utils.set_random_seed(0)  # every process builds the same weights (JAX checks it)
    net = keras.Sequential(
        [
            keras.Input((None, 4)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    net.compile("sgd", "mse", jit_compile=True)
    return net


class Exit:
    """Kill this process (no cleanup, as a crash or an OOM kill would) before a given train step."""

    def __new__(cls, step):
        import keras

        class _Exit(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) + 1 == step:
                    os._exit(3)

        return _Exit()


class Modes:
    """The model's jit_compile at each train step, where it changes (jit='fastest' switches it with the
    function that runs): read by Keras's own batch-begin hook, apart from the monitor's report."""

    def __new__(cls, seen):
        import keras

        class _Modes(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                step, on = int(self.model.optimizer.iterations.numpy()) + 1, bool(self.model.jit_compile)
                if not seen or seen[-1][1] != on:
                    seen.append([step, on])

        return _Modes()


class StepOne:
    """When the fit's first train step ended, by the wall clock (the dump files' times are read against it)."""

    def __new__(cls, seen):
        import time

        import keras

        class _StepOne(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                seen.setdefault("step_one", time.time())

        return _StepOne()


def precompile_specs(fit, index):
    """``fit``'s precompile set, as specs of the global batch (every process's rows); a process may be
    given its own lengths (``precompile_lengths_by_process``)."""
    import jax

    lengths = fit.get("precompile_lengths_by_process", {}).get(str(index), fit.get("precompile_lengths"))
    if lengths is None:
        return None
    rows = 8 * jax.process_count()
    return [
        (jax.ShapeDtypeStruct((rows, n, 4), "float32"), jax.ShapeDtypeStruct((rows, 1), "float32")) for n in lengths
    ]


def train_modules_after(dump_dir, before, when):
    """The train-step modules XLA dumped in this process after ``when`` (the fit's first step's end)."""
    from jax_scenarios import dumped, module_name

    new = sorted(dumped(dump_dir) - before)
    return sum(
        1 for f in new if module_name(f) == "jit_train_step" and os.path.getmtime(os.path.join(dump_dir, f)) > when
    )


def step_modules(dump_dir, before):
    from jax_scenarios import dumped, module_name

    names = [module_name(f) for f in sorted(dumped(dump_dir) - before)]
    steps = {"train": names.count("jit_train_step"), "test": names.count("jit_test_step")}
    return {**steps, "other": len(names) - sum(steps.values())}  # other: op by op, helpers, gathers


def process(spec):
    os.environ["KERAS_BACKEND"] = "jax"
    import jax

    config = json.loads(os.environ["TF_CONFIG"])
    index, cluster = config["task"]["index"], config["cluster"]["worker"]
    if len(cluster) > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(cluster[0], num_processes=len(cluster), process_id=index)
    import keras
    from jax_scenarios import dumped

    import xla_keras
    from xla_keras.jit import trial

    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=jax.devices(), auto_shard_dataset=False)
    )
    dump_dir = os.environ["XLA_FLAGS"].split("--xla_dump_to=")[1].split()[0]
    first_x, _ = next(batches(index, [4], 1))
    result = {"process": index, "pid": os.getpid(), "devices": len(jax.devices()), "fits": []}
    result["data"] = round(float(first_x.sum()), 4)  # each process's own values
    for fit in spec["fits"]:
        net = model()
        specs = precompile_specs(fit, index)
        monitor = xla_keras.XlaMonitor(verbose=0, **fit["monitor"], **({"precompile": specs} if specs else {}))
        modes, clock = [], {}
        # A batch-end hook makes Keras wait for each step: only the fits that compare with a precompile time it.
        callbacks = [monitor, Modes(modes)] + ([StepOne(clock)] if fit.get("weights") else [])
        callbacks += [Exit(fit["exit_at_step"])] if fit.get("exit_process") == index else []
        for name, value in fit.get("trial", {}).items():  # a short fit may run a whole trial (see the test)
            setattr(trial, name, value)
        lengths, epochs = fit["lengths"], fit.get("epochs", 1)
        validation = batches(index, fit["validation"], epochs) if fit.get("validation") else None
        before, error = dumped(dump_dir), None
        try:
            net.fit(
                batches(index, lengths, epochs),
                steps_per_epoch=len(lengths),
                epochs=epochs,
                validation_data=validation,
                validation_steps=len(fit["validation"]) if validation is not None else None,
                verbose=0,
                callbacks=callbacks,
            )
        except Exception as caught:  # noqa: BLE001 - reported to the test
            error = f"{type(caught).__name__}: {caught}"[:1500]
            # What the files say while the fit's frames are still alive (no collection, no exit yet).
            on_disk = os.path.join(fit["monitor"]["log_dir"] or "", "xla_report.json")
            if fit["monitor"]["log_dir"] and os.path.exists(on_disk):
                with open(on_disk) as f:
                    fit["run_state_at_the_error"] = json.load(f)["run_state"]
        result["fits"].append(
            {
                "report": monitor.report.to_dict(),
                "dump": step_modules(dump_dir, before),
                "error": error,
                "stopped_at": monitor.report.steps["train"],
                "modes": modes,
                "run_state_at_the_error": fit.get("run_state_at_the_error"),
                "train_modules_after_step_one": (
                    train_modules_after(dump_dir, before, clock["step_one"]) if "step_one" in clock else None
                ),
                # Read only where every process is alive to read them (a global array's values).
                "iterations": int(keras.ops.convert_to_numpy(net.optimizer.iterations)) if fit.get("weights") else None,
                "weights": [float(v) for w in net.get_weights() for v in w.ravel()] if fit.get("weights") else None,
            }
        )
    print("XLA_KERAS_MW " + json.dumps(result), flush=True)
    if spec.get("exit_when_done"):
        # After a peer died, JAX's shutdown at exit waits for it (the launcher's kill, in real life), so
        # this process leaves without its exit handlers. Before that, what a real exit gives the monitor:
        # the fit's frames freed (its callback list's backstop cleans up a fit no hook saw end), and its
        # at-exit flush. A fit whose error surfaced in Keras's own loop code needs them.
        import gc

        gc.collect()
        os._exit(0)


if __name__ == "__main__":
    assert sys.argv[1] == "--spec"
    process(json.loads(sys.argv[2]))
