"""Checks of the public API under Keras's JAX backend, run in a subprocess by tests/test_jax_monitor.py.

    KERAS_BACKEND=jax python tests/jax_checks.py OUT.json LOG_DIR
    KERAS_BACKEND=jax python tests/jax_checks.py --quiet bare|monitored LOG_DIR

Prints nothing of its own on the first form; writes a JSON dict of results. The
second form is one fit whose stderr the test compares with a bare fit's.
"""

import json
import os
import sys

import numpy as np
from models import text_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def mlp(jit="auto", run_eagerly=False):
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=jit, run_eagerly=run_eagerly)
    return model


def data(rows=320):
    rng = np.random.default_rng(0)
    return rng.random((rows, 8), dtype=np.float32), rng.random((rows, 1), dtype=np.float32)


def error_text(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the words are the result
        return f"{type(error).__name__}: {error}"
    return None


def check_modes():
    import xla_keras

    x, y = data()
    out = {}
    for jit in ("keep", "on", "off"):
        model = mlp()
        monitor = xla_keras.XlaMonitor(log_dir=None, jit=jit, verbose=0)
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[monitor])
        report = monitor.report
        out[jit] = {
            "jit_active": report.jit_active,
            "reason": report.jit_reason,
            "compiles": report.total_compilations,
            "model_jit_after": bool(model.jit_compile),
        }
    model = mlp(run_eagerly=True)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[monitor])
    out["run_eagerly"] = {
        "jit_active": monitor.report.jit_active,
        "reason": monitor.report.jit_reason,
        "compiles": monitor.report.total_compilations,
    }
    out["autoclustering"] = error_text(lambda: xla_keras.XlaMonitor(jit="autoclustering"))
    out["configure_autoclustering"] = error_text(lambda: xla_keras.configure(cpu_autoclustering=True))
    return out


def check_tensorboard(log_dir):
    import xla_keras

    x, y = data(640)
    model = mlp()
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, profile=(3, 6), update_freq="batch", verbose=0)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, validation_split=0.25, callbacks=[monitor])
    return {"traces": monitor.report.traces, "log_dir": monitor.log_dir, "steps": monitor.report.steps}


def check_compare(log_dir):
    import xla_keras

    x, y = data(256)
    table = xla_keras.compare(lambda: mlp(), (x, y), steps=8, log_dir=log_dir)
    return {
        "table": table.to_dict(),
        "text": str(table),
        "bad_mode": error_text(lambda: xla_keras.compare(lambda: mlp(), (x, y), steps=8, modes=("autoclustering",))),
    }


def quiet_fit(mode, log_dir):
    """A storm workload with validation and a trace window: every source of lines."""
    import keras

    rng = np.random.default_rng(0)
    batches = []
    for _ in range(12):
        n = int(rng.integers(4, 80))
        batches.append((np.ones((8, n), np.int32), np.zeros((8,), np.float32)))

    class Data(keras.utils.PyDataset):
        def __len__(self):
            return len(batches)

        def __getitem__(self, i):
            return batches[i]

    model = text_model()
    callbacks = []
    if mode == "monitored":
        import xla_keras

        callbacks = [xla_keras.XlaMonitor(log_dir=log_dir, storm_threshold=4, verbose=0, profile=(2, 4))]
    model.fit(Data(), epochs=2, validation_data=Data(), verbose=0, callbacks=callbacks)
    print("FIT_DONE", file=sys.stderr)


def main():
    if sys.argv[1] == "--quiet":
        quiet_fit(sys.argv[2], sys.argv[3])
        return
    out, log_dir = sys.argv[1], sys.argv[2]
    results = {
        "modes": check_modes(),
        "tensorboard": check_tensorboard(os.path.join(log_dir, "fit")),
        "compare": check_compare(os.path.join(log_dir, "compare")),
    }
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
