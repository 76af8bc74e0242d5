"""jit='fastest' in real fits, with XLA's own dump as ground truth. Run by tests/test_fastest_fits.py
in a subprocess per Keras backend (XLA_FLAGS must be set before the backend is imported):

    KERAS_BACKEND=tensorflow|jax python tests/fastest_scenarios.py OUT.json DUMP_DIR

Step times are the machine's, so the decision itself is not what these scenarios check (the
pure tests do that, on simulated fits whose truth is known): where a scenario needs switches,
it fixes the trial's rules so that it runs exactly three rounds and then keeps the default
("forced"), or decides XLA on after its first round. What is checked is what XLA and Keras did:
the modules XLA dumped during each fit (``dump``: JAX's step modules by name), the per-batch
losses against a fit that never switched, and the model's state on each side of every switch.
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from jax_scenarios import Batches  # noqa: E402 - tests/ is on the path now

BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
STEPS, BATCH = 150, 32


def _modules(dump_dir):
    if not os.path.isdir(dump_dir):
        return set()
    return {f for f in os.listdir(dump_dir) if f.endswith(".before_optimizations.txt")}


class Dumped:
    """The modules XLA dumped while a block of code ran."""

    def __init__(self, dump_dir):
        self.dump_dir = dump_dir

    def __enter__(self):
        self.before = _modules(self.dump_dir)
        return self

    def __exit__(self, *exc):
        new = sorted(_modules(self.dump_dir) - self.before)
        # JAX: count the step programs (jit_train_step, jit_test_step), not op-by-op primitives or helpers
        self.names = [f.split(".")[1] for f in new] if BACKEND == "jax" else ["module"] * len(new)
        return False

    def count(self, name="module"):
        return sum(1 for n in self.names if n == name)


def mlp(seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    return model


def data(steps=STEPS, seed=1):
    rng = np.random.default_rng(seed)
    return rng.random((steps * BATCH, 16), dtype=np.float32), rng.random((steps * BATCH, 1), dtype=np.float32)


def state_of(model):
    """Weights, optimizer variables (iterations included), as exact numpy copies."""
    return [np.array(v) for v in model.weights] + [np.array(v) for v in model.optimizer.variables]


def forced_rules():
    """Exactly three rounds, then the default is kept (a tie): six switches on a fit of any length."""
    from xla_keras.jit import trial

    trial.MIN_STEPS_LEFT, trial.TRIAL_BUDGET = 0, math.inf
    trial.EARLY_RATIO = trial.FAR_APART = math.inf
    trial.MIN_GAIN = math.inf
    trial.MIN_ROUNDS = trial.MAX_ROUNDS = 3


_DEFAULTS: dict = {}


def default_rules():
    from xla_keras.jit import trial

    names = ("MIN_STEPS_LEFT", "TRIAL_BUDGET", "EARLY_RATIO", "FAR_APART", "MIN_GAIN", "MIN_ROUNDS", "MAX_ROUNDS")
    saved = _DEFAULTS
    if not saved:
        saved.update({n: getattr(trial, n) for n in names})
    for n in names:
        setattr(trial, n, saved[n])
    trial.Trial._after_block = saved.setdefault("after_block", trial.Trial._after_block)


def decide_on_after_one_round():
    from xla_keras.jit import trial

    forced_rules()
    trial.Trial._after_block = lambda self, step, outlook: self._decide(
        True, step, outlook, "measured", "forced by the scenario after one round"
    )


def monitored(jit="fastest"):
    import xla_keras

    return xla_keras.XlaMonitor(log_dir=None, jit=jit, verbose=0)


def losses_of(model, x, y, callbacks, **kwargs):
    import keras

    losses = []

    class Losses(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))

    model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=callbacks + [Losses()], **kwargs)
    return losses


def forced(dump_dir):
    """Six switches in one epoch; both functions kept; state and losses continuous."""
    import keras

    import xla_keras

    default_rules()
    forced_rules()
    x, y = data()
    reference = mlp()
    reference.compile(keras.optimizers.Adam(1e-3), "mse", jit_compile=BACKEND == "jax")  # the default mode only
    reference_losses = losses_of(reference, x, y, [])

    model = mlp()
    ends, begins = {}, {}

    class Before(keras.callbacks.Callback):  # before the monitor: the state as the step left it
        def on_train_batch_end(self, batch, logs=None):
            ends[batch + 1] = state_of(self.model)

    class After(keras.callbacks.Callback):  # after it: the state the next step starts from
        def on_train_batch_begin(self, batch, logs=None):
            begins[batch] = state_of(self.model)

    monitor = monitored()
    with Dumped(dump_dir) as dumped:
        losses = losses_of(model, x, y, [Before(), monitor, After()])
    report = monitor.report.to_dict()
    switches = report["jit_decision"]["switch_steps"]
    continuity = [
        {"step": s, "equal": all(np.array_equal(a, b) for a, b in zip(ends[s], begins[s]))}
        for s in switches
        if s in ends and s in begins
    ]
    return {
        "report": report,
        "dump": dumped.names,
        "losses": losses,
        "reference_losses": reference_losses,
        "continuity": continuity,
        "iterations": int(np.array(model.optimizer.iterations)),
        "decision_kept": xla_keras.jit_decision(model),
        "model": model,
    }


def reuse(dump_dir, model):
    """A later jit='fastest' fit reuses the model's decision (no trial); jit='on' overrides it."""
    x, y = data(60)
    monitor = monitored()
    with Dumped(dump_dir) as again:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[monitor])
    override = monitored("on")
    with Dumped(dump_dir) as forced_on:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[override])
    return {
        "report": monitor.report.to_dict(),
        "dump": again.names,
        "on_report": override.report.to_dict(),
        "on_dump": forced_on.names,
    }


def short(dump_dir):
    """Default rules: 40 steps are too short to decide; the default runs, nothing else compiles."""
    default_rules()
    x, y = data(40)
    model, monitor = mlp(), monitored()
    with Dumped(dump_dir) as dumped:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[monitor])
    return {"report": monitor.report.to_dict(), "dump": dumped.names}


def validation_after_decision(dump_dir):
    """Decided XLA on after the first round: validation runs XLA too, its compile counted."""
    decide_on_after_one_round()
    x, y = data(125)  # 100 train + 25 validation batches, no partial batch
    model, monitor = mlp(), monitored()
    with Dumped(dump_dir) as dumped:
        model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, validation_split=0.2, shuffle=False, callbacks=[monitor])
    default_rules()
    import xla_keras

    after = monitored()  # a later evaluate under jit='fastest' runs the kept decision, no trial
    with Dumped(dump_dir) as evaluated:
        model.evaluate(x[-25 * BATCH :], y[-25 * BATCH :], batch_size=BATCH, verbose=0, callbacks=[after])
    kept = xla_keras.jit_decision(model)
    forgot = xla_keras.forget_jit_decision(model)
    return {
        "report": monitor.report.to_dict(),
        "dump": dumped.names,
        "evaluate_report": after.report.to_dict(),
        "evaluate_dump": evaluated.names,
        "kept": kept,
        "forgot": forgot,
        "after_forget": xla_keras.jit_decision(model),
    }


def validation_during_trial(dump_dir):
    """Epochs of 30 steps with validation while the forced trial runs: validation runs the default."""
    default_rules()
    forced_rules()
    x, y = data(40)  # 30 train + 10 validation batches
    model, monitor = mlp(), monitored()
    with Dumped(dump_dir) as dumped:
        model.fit(
            x, y, batch_size=BATCH, epochs=6, verbose=0, validation_split=0.25, shuffle=False, callbacks=[monitor]
        )
    return {"report": monitor.report.to_dict(), "dump": dumped.names}


def unknown_length(dump_dir):
    """Data without a length: the trial starts once the first epoch has shown how many steps it has."""
    default_rules()
    forced_rules()
    x, y = data(60)

    import tensorflow as tf  # a generator's dataset: unknown cardinality, re-iterated every epoch

    def batches():
        for i in range(60):
            yield x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]

    unsized = tf.data.Dataset.from_generator(
        batches, output_signature=(tf.TensorSpec((BATCH, 16), tf.float32), tf.TensorSpec((BATCH, 1), tf.float32))
    )

    model, monitor = mlp(), monitored()
    model.fit(unsized, epochs=4, verbose=0, callbacks=[monitor])
    return {"report": monitor.report.to_dict(), "epoch_steps": 60}


def storm(dump_dir):
    """Batches of 16 lengths: XLA would compile each, so it is not even tried (a fit long enough)."""
    import keras

    from xla_keras.jit import trial

    default_rules()
    trial.MIN_STEPS_LEFT, trial.TRIAL_BUDGET = 0, math.inf
    rng = np.random.default_rng(3)
    batches = []
    for _ in range(200):
        length = 4 + 4 * int(rng.integers(0, 16))
        batches.append(
            (rng.integers(1, 50, size=(BATCH, length)).astype(np.int32), rng.random((BATCH, 1), dtype=np.float32))
        )

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(50, 8),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    monitor = monitored()
    with Dumped(dump_dir) as dumped:
        model.fit(Batches(batches), epochs=3, verbose=0, callbacks=[monitor])
    return {"report": monitor.report.to_dict(), "dump": dumped.names}


def drift(dump_dir):
    """XLA kept on over the default off (forced after one round, watched as a measured decision would
    be), then every batch a new length: the watch returns to XLA off after two unpriced compiles."""
    import keras

    from xla_keras.jit import trial

    default_rules()
    forced_rules()

    def decide_on_and_watch(self, step, outlook):
        verdict = self._decide(True, step, outlook, "measured", "forced by the scenario after one round")
        self.watch = trial.Watch(step, gain_per_step=1e-9, priced=0.0, each=1e-6, window=200)
        return verdict

    trial.Trial._after_block = decide_on_and_watch
    rng = np.random.default_rng(4)
    lengths = [8] * 100 + [9 + i for i in range(30)]
    batches = [
        (rng.integers(1, 50, size=(BATCH, n)).astype(np.int32), rng.random((BATCH, 1), dtype=np.float32))
        for n in lengths
    ]
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(50, 8),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    import tensorflow as tf  # a PyDataset would fix the length axis from its first batches

    varying = tf.data.Dataset.from_generator(
        lambda: iter(batches),
        output_signature=(tf.TensorSpec((BATCH, None), tf.int32), tf.TensorSpec((BATCH, 1), tf.float32)),
    ).apply(tf.data.experimental.assert_cardinality(len(batches)))
    monitor = monitored()
    with Dumped(dump_dir) as dumped:
        model.fit(varying, epochs=1, verbose=0, callbacks=[monitor])
    default_rules()
    return {
        "report": monitor.report.to_dict(),
        "dump": dumped.names,
        "batches": len(batches),
        "iterations": int(np.array(model.optimizer.iterations)),
        "kept": model.jit_compile,
    }


def fallback_steps(dump_dir):
    """A storm fallback mid-fit: every step's update lands (on JAX, a state sync inside the step used to
    make the next step restart one step behind: 11 optimizer steps for 12 batches)."""
    import warnings

    import keras

    import xla_keras

    rng = np.random.default_rng(0)
    batches = [(rng.random((8, 4 + i), dtype=np.float32), rng.random((8, 1), dtype=np.float32)) for i in range(12)]

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None,)),
            keras.layers.Lambda(lambda t: keras.ops.mean(t, axis=1, keepdims=True)),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=True)
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", on_storm="fallback", storm_threshold=3, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(Batches(batches), epochs=1, verbose=0, callbacks=[monitor])
    return {
        "fallback": monitor.report.fallback is not None,
        "iterations": int(np.array(model.optimizer.iterations)),
        "batches": len(batches),
    }


def main():
    out, dump_dir = sys.argv[1], sys.argv[2]
    results = {"backend": BACKEND}
    results["forced"] = forced(dump_dir)
    model = results["forced"].pop("model")
    results["reuse"] = reuse(dump_dir, model)
    results["short"] = short(dump_dir)
    results["validation_after_decision"] = validation_after_decision(dump_dir)
    results["validation_during_trial"] = validation_during_trial(dump_dir)
    results["unknown_length"] = unknown_length(dump_dir)
    results["storm"] = storm(dump_dir)
    if BACKEND == "tensorflow":  # the watch guards XLA kept on over a default off (JAX's default is on)
        results["drift"] = drift(dump_dir)
    results["fallback_steps"] = fallback_steps(dump_dir)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
