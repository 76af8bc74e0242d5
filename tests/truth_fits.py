"""Real fits whose printed sentences tests/test_truth.py holds to what was measured.

    python tests/truth_fits.py OUT_JSON DUMP_DIR

Each kind writes, under its name in OUT_JSON: the report (``to_dict()``), what the monitor warned
(``warnings``) and printed (``stdout``), the XLA modules dumped during it (``dumped``, from
``XLA_FLAGS=--xla_dump_to``, set by the test), and the kind's own independent timings:

* ``fallback_early``: a storm whose fallback has one steady XLA step before the switch; the most
  frequent batch size changes after the storm (the fix is recomputed).
* ``fallback_late``: a fallback after 29 steady XLA steps (3 new shapes); ``separate``: the same model and batch
  size fitted apart with XLA on and off, each step timed by a callback (no figure of the monitor's).
* ``trace_window``: new shapes inside a profiler trace window (their compile times estimated).
* ``two_fits``: one monitor, a fit at batch size 32 then one at 64 (a deliberate change);
  ``advice_of_fit_1``: the same, the first fit ending with a partial batch (advice on fit 1).
* ``evaluate_budget``: a standalone evaluate whose partial last batch compiles again, at verbose=1.
* ``predict_status``: a standalone predict at verbose=1 (the jit status line, as fit prints it).
"""

import contextlib
import io
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np

FEATURES = 20


def _model(jit_compile="auto", fused=False):
    """A small MLP; ``fused``: a chain of elementwise layers 4,096 wide, which XLA fuses into one pass
    over the activations on a CPU where TensorFlow runs each op as its own pass, so XLA's steps are
    about half as long (docs/benchmarks.md): a direction no machine's noise turns round."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(4096 if fused else 64, activation=None if fused else "relu")(inputs)
    for _ in range(10 if fused else 0):
        gate = keras.layers.Multiply()(
            [keras.layers.Activation("sigmoid")(hidden), keras.layers.Activation("tanh")(hidden)]
        )
        hidden = keras.layers.Add()([hidden, gate])
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile("adam", "mse", jit_compile=jit_compile)
    return model


def _batches(sizes, seed=0):
    """A keras.utils.PyDataset of one batch per size, in this order."""
    import keras

    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n, FEATURES)).astype("float32") for n in sizes]
    ys = [rng.normal(size=(n, 1)).astype("float32") for n in sizes]

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return len(sizes)

        def __getitem__(self, i):
            return xs[i], ys[i]

    return Batches()


class StepClock:
    """Independent step times: from one batch's start to the next one's (a Keras callback)."""

    def __init__(self):
        import keras

        clock = self

        class Callback(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                clock.starts.append(time.perf_counter())

        self.starts = []
        self.callback = Callback()

    def median_ms(self, skip):
        times = [b - a for a, b in zip(self.starts, self.starts[1:])][skip:]
        return 1e3 * statistics.median(times)


def _monitor(**kwargs):
    import xla_keras

    kwargs.setdefault("log_dir", None)
    kwargs.setdefault("jit", "on")
    kwargs.setdefault("profile", None)
    return xla_keras.XlaMonitor(**kwargs)


def kinds(tmp):
    """{kind: function() -> (monitor, extra)}; each runs its fits."""

    def fallback_early():
        # Step 3 repeats step 1's shape: the only steady XLA step before the storm (step 9, the 8th new
        # shape); then mostly 25 rows, so the most frequent size moves from 16 to 25 after the storm.
        sizes = [16, 17, 16, 18, 19, 20, 21, 22, 23] + [25] * 30 + [16] * 5
        monitor = _monitor(on_storm="fallback")
        _model().fit(_batches(sizes), epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
        return monitor, {}

    def fallback_late():
        sizes = [64] * 30 + [17, 18, 19] + [64] * 40
        monitor = _monitor(on_storm="fallback", storm_threshold=3)
        _model(fused=True).fit(_batches(sizes), epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
        return monitor, {}

    def separate():
        """The same model and batch size as fallback_late's steady steps, fitted apart with XLA on
        and off (twice each, interleaved), each step timed by a callback: the comparison to check."""
        times = {"on": [], "off": []}
        for jit in (True, False, True, False):  # interleaved: the machine's pace moves both alike
            clock = StepClock()
            model = _model(jit_compile=jit, fused=True)
            model.fit(_batches([64] * 25), epochs=1, shuffle=False, verbose=0, callbacks=[clock.callback])
            times["on" if jit else "off"].append(clock.median_ms(skip=5))
        return None, {"separate_ms": {mode: statistics.median(t) for mode, t in times.items()}}

    def trace_window():
        sizes = [8, 16, 24, 32, 32, 32, 40] + [32] * 10
        monitor = _monitor(log_dir=os.path.join(tmp, "trace_window"), profile=(1, 3))
        _model().fit(_batches(sizes), epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
        return monitor, {}

    def two_fits():
        rng = np.random.default_rng(1)
        x, y = rng.normal(size=(640, FEATURES)).astype("float32"), rng.normal(size=(640, 1)).astype("float32")
        monitor, model = _monitor(compile_budget_floor=0.0), _model()
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[monitor])
        model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[monitor])
        return monitor, {}

    def advice_of_fit_1():
        rng = np.random.default_rng(4)
        x, y = rng.normal(size=(200, FEATURES)).astype("float32"), rng.normal(size=(200, 1)).astype("float32")
        monitor, model = _monitor(compile_budget_floor=0.0), _model()
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[monitor])  # 6 x 32 and 8 rows
        model.fit(x[:192], y[:192], batch_size=64, epochs=1, verbose=0, callbacks=[monitor])  # 3 x 64
        return monitor, {}

    def evaluate_budget():
        rng = np.random.default_rng(2)
        x, y = rng.normal(size=(100, FEATURES)).astype("float32"), rng.normal(size=(100, 1)).astype("float32")
        monitor = _monitor(compile_budget_floor=0.0)
        _model().evaluate(x, y, batch_size=32, verbose=1, callbacks=[monitor])
        return monitor, {}

    def predict_status():
        x = np.random.default_rng(3).normal(size=(64, FEATURES)).astype("float32")
        monitor = _monitor()
        _model().predict(x, batch_size=32, verbose=1, callbacks=[monitor])
        return monitor, {}

    return {
        f.__name__: f
        for f in (
            fallback_early,
            fallback_late,
            separate,
            trace_window,
            two_fits,
            advice_of_fit_1,
            evaluate_budget,
            predict_status,
        )
    }


def _dumped(dump_dir):
    return set(os.listdir(dump_dir)) if os.path.isdir(dump_dir) else set()


def main(out_path, dump_dir, only=()):
    import logging

    from xla_keras.errors import XlaKerasWarning

    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    results = {}
    for name, run in kinds(os.path.dirname(out_path)).items():
        if only and name not in only:
            continue
        before = _dumped(dump_dir)
        stdout = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(stdout):
            warnings.simplefilter("always", XlaKerasWarning)
            monitor, extra = run()
        modules = [f for f in _dumped(dump_dir) - before if f.endswith("before_optimizations.txt")]
        results[name] = {
            "warnings": [str(w.message) for w in caught if issubclass(w.category, XlaKerasWarning)],
            "stdout": stdout.getvalue(),
            "dumped": len(modules),
            **extra,
        }
        if monitor is not None:
            report = monitor.report
            results[name].update(report=report.to_dict(), summary=report.summary(), text=str(report))
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main(sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ())
