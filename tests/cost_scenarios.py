"""Real fits whose cost card is checked against analytic FLOP counts and XLA's own buffer assignment.

Run in a fresh subprocess by tests/test_cost_ground_truth.py (KERAS_BACKEND, and XLA_FLAGS with
``--xla_dump_to``, are set before Keras is imported):

    KERAS_BACKEND=jax XLA_FLAGS=--xla_dump_to=DIR python tests/cost_scenarios.py OUT.json
    KERAS_BACKEND=jax python tests/cost_scenarios.py OUT.json mixed

Per model (``dense``, ``conv``): the monitor's report of a fit with the default card, the analytic
FLOPs of its train and test steps (computed here from the layer sizes, not from anything the monitor
or XLA says), and the dump files that appeared during the fit (XLA's buffer assignment of each step
module); then an evaluate with ``cost="off"`` of a new batch size (it compiles its test step), and a
fit with ``cost="full"`` of new train and validation batch sizes, with the files dumped during it.

``mixed`` (JAX): a fit whose batches come in two sizes (``MIXED_SIZES``, the small one the most frequent),
and the test's own ground truth for its achieved rate: XLA's cost analysis of Keras's train step compiled
here for each size (``jax.jit(model.train_step).lower(state, batch).compile().cost_analysis()``), the batches
of each size the data fed (counted in the dataset's ``__getitem__``), and each epoch's wall time, the device
drained at its end (a callback that blocks on a weight).
"""

import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH = 64
STEPS = 24


def _dense_layers(keras):
    sizes = (96, 192, 160, 1)
    layers = [keras.layers.Dense(n, activation="relu") for n in sizes[1:-1]] + [keras.layers.Dense(1)]
    macs = [a * b for a, b in zip(sizes, sizes[1:])]  # per row, per layer (a matmul)
    return (sizes[0],), layers, macs


def _conv_layers(keras):
    # 20x20x3 -> conv 3x3 (10) -> 18x18x10 -> conv 3x3 (12) -> 16x16x12 -> pool -> dense 1
    layers = [
        keras.layers.Conv2D(10, 3, activation="relu"),
        keras.layers.Conv2D(12, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(1),
    ]
    macs = [18 * 18 * 9 * 3 * 10, 16 * 16 * 9 * 10 * 12, 12]
    return (20, 20, 3), layers, macs


def analytic(macs):
    """Forward: 2 FLOPs per multiply-add of each layer's product; the backward's two per layer (the
    weights' gradient and the input's), less the first layer's input gradient (the data has none)."""
    forward = sum(2 * BATCH * m for m in macs)
    return {"train": 3 * forward - 2 * BATCH * macs[0], "test": forward}


def _dumped(dump):
    """A function returning the names of the files XLA dumped since its last call (or since this one)."""

    def listing():
        return set(os.listdir(dump)) if dump and os.path.isdir(dump) else set()

    seen = [listing()]

    def since():
        now = listing()
        new, seen[0] = sorted(now - seen[0]), now
        return new

    return since


def main(out):
    import keras

    import xla_keras
    from xla_keras.callback import cost_card

    # These fits hold what an analysis says to the truth, not when the card may run one: its time budget
    # (5% of the monitored time, which a 2-epoch fit on TensorFlow does not reach) is lifted here;
    # tests/test_cost.py holds the budget.
    cost_card.COST_SHARE = 1.0

    dump = os.environ.get("XLA_FLAGS", "").partition("--xla_dump_to=")[2].split(" ")[0] or None
    results = {}
    rng = np.random.default_rng(0)
    for name, make in (("dense", _dense_layers), ("conv", _conv_layers)):
        shape, layers, macs = make(keras)
        model = keras.Sequential([keras.Input(shape), *layers])
        model.compile("adam", "mse", jit_compile=True)
        x = rng.random((BATCH * STEPS, *shape), dtype=np.float32)
        y = rng.random((BATCH * STEPS, 1), dtype=np.float32)
        dumped_since = _dumped(dump)
        monitor = xla_keras.XlaMonitor(log_dir=None, verbose=0)
        model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[monitor], validation_data=(x[:256], y[:256]))
        results[name] = {
            "report": monitor.report.to_dict(),
            "analytic": analytic(macs),
            "dump_dir": dump,
            "dump_files": dumped_since(),
        }
        off = xla_keras.XlaMonitor(log_dir=None, verbose=0, cost="off")
        model.evaluate(x[:128], y[:128], batch_size=32, verbose=0, callbacks=[off])  # a new shape: compiles
        results[name]["off"] = off.report.to_dict()
        dumped_since()  # the off evaluate's files: not the full fit's
        full = xla_keras.XlaMonitor(log_dir=None, verbose=0, cost="full")
        fit = {"batch_size": 48, "validation_batch_size": 16, "validation_data": (x[:128], y[:128])}
        model.fit(x[:480], y[:480], epochs=1, verbose=0, callbacks=[full], **fit)  # new shapes: both compile
        results[name]["full"] = {"report": full.report.to_dict(), "dump_files": dumped_since()}
    with open(out, "w") as f:
        json.dump(results, f)


# (rows, batches an epoch): the small batch is the most frequent, the large one holds most of the FLOPs.
MIXED_SIZES = ((512, 6), (64, 24))
MIXED_WIDTH = 256
MIXED_EPOCHS = 5


def _xla_flops(analysis):
    """XLA's FLOPs from ``cost_analysis()`` (a dict, or a list of one per device on older JAX)."""
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0]
    return float(analysis["flops"])


def mixed(out):
    import jax
    import keras

    import xla_keras

    rng = np.random.default_rng(1)
    pattern = [rows for rows, n in MIXED_SIZES for _ in range(n)]
    rng.shuffle(pattern)  # the sizes interleaved, the same order every epoch
    fed = {}  # rows -> batches the data gave

    class Mixed(keras.utils.PyDataset):
        def __len__(self):
            return len(pattern)

        def __getitem__(self, i):
            rows = pattern[i]
            fed[rows] = fed.get(rows, 0) + 1
            x = rng.random((rows, MIXED_WIDTH), dtype=np.float32)
            return x, x[:, :1].copy()

    epochs = []

    class Wall(keras.callbacks.Callback):
        """Each epoch's wall time, the device drained at its end (a weight read blocks on it); the batches
        fed during it."""

        def on_epoch_begin(self, epoch, logs=None):
            epochs.append({"begin": time.perf_counter(), "fed_before": dict(fed)})

        def on_epoch_end(self, epoch, logs=None):
            keras.ops.convert_to_numpy(self.model.trainable_variables[0])
            epochs[-1]["end"] = time.perf_counter()
            epochs[-1]["fed"] = {r: fed.get(r, 0) - epochs[-1]["fed_before"].get(r, 0) for r in fed}

    model = keras.Sequential(
        [
            keras.Input((MIXED_WIDTH,)),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=True)
    monitor = xla_keras.XlaMonitor(log_dir=None, verbose=0)
    model.fit(Mixed(), epochs=MIXED_EPOCHS, verbose=0, shuffle=False, callbacks=[monitor, Wall()])
    report = monitor.report.to_dict()
    # XLA's own cost analysis of Keras's train step for each size, compiled here apart from the monitor.
    state = tuple(
        [v.value for v in variables]
        for variables in (
            model.trainable_variables,
            model.non_trainable_variables,
            model.optimizer.variables,
            model.metrics_variables,
        )
    )
    step = jax.jit(model.train_step, donate_argnums=0)
    flops = {}
    for rows, _ in MIXED_SIZES:
        batch = (
            jax.ShapeDtypeStruct((rows, MIXED_WIDTH), np.float32),
            jax.ShapeDtypeStruct((rows, 1), np.float32),
        )
        flops[rows] = _xla_flops(step.lower(state, batch).compile().cost_analysis())
    with open(out, "w") as f:
        json.dump(
            {
                "report": report,
                "xla_flops": {str(k): v for k, v in flops.items()},
                "epochs": [{**e, "fed": {str(k): v for k, v in e["fed"].items()}, "fed_before": None} for e in epochs],
                "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
            },
            f,
        )


if __name__ == "__main__":
    if sys.argv[2:] == ["mixed"]:
        mixed(sys.argv[1])
    else:
        main(sys.argv[1])
