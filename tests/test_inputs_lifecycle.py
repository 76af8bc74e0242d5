"""XlaMonitor across input kinds and call lifecycles, against counts it did not make.

Ground truth comes from outside the monitor: batches from a plain callback,
distinct shapes from the data we feed (computed here from that data), and, in
one subprocess, XLA's own dump (one ``*before_optimizations.txt`` per compiled
module), counted before and after every fit / evaluate / predict.

    python tests/test_inputs_lifecycle.py dump OUT_JSON   # the subprocess side (the test sets XLA_FLAGS)
"""

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Callable, List, NamedTuple

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import xla_keras

pytestmark = pytest.mark.xdist_group("test_inputs_lifecycle")  # its module fixtures' runs happen once, on one worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIS = os.path.abspath(__file__)
PHASES = ("train", "test", "predict")


class BatchCounter(keras.callbacks.Callback):
    """Counts the batches Keras ran, per phase, without asking the monitor."""

    def __init__(self):
        super().__init__()
        self.batches = dict.fromkeys(PHASES, 0)

    def on_train_batch_end(self, batch, logs=None):
        self.batches["train"] += 1

    def on_test_batch_end(self, batch, logs=None):
        self.batches["test"] += 1

    def on_predict_batch_end(self, batch, logs=None):
        self.batches["predict"] += 1


def _monitor(jit, **kwargs):
    return xla_keras.XlaMonitor(log_dir=None, jit=jit, verbose=0, **kwargs)


def _rows(n, batch_size):
    """Batch sizes Keras cuts n rows into (the last one partial)."""
    return [min(batch_size, n - start) for start in range(0, n, batch_size)]


def _floats(rng, *shape):
    return rng.random(shape, dtype=np.float32)


def _mlp(features=4):
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=False)
    return model


def _disabled_notes(report):
    return [note for note in report.notes if "disabled itself" in note]


# --------------------------------------------------------------------------
# Input kinds. Each builder returns the model, the fit arguments and one
# shape key per batch of an epoch, computed from the data itself: two batches
# with the same key are one XLA compile, two different keys are two.


class Fed(NamedTuple):
    model: Any
    args: tuple
    kwargs: dict
    keys: List[Any]  # one per batch of one epoch
    epochs: int = 1


def fed_numpy(rng):
    x, y = _floats(rng, 50, 4), _floats(rng, 50, 1)
    return Fed(_mlp(), (x, y), {"batch_size": 16}, _rows(50, 16), epochs=2)


def fed_sample_weight_numpy(rng):
    x, y, w = _floats(rng, 50, 4), _floats(rng, 50, 1), _floats(rng, 50)
    return Fed(_mlp(), (x, y), {"batch_size": 16, "sample_weight": w}, _rows(50, 16))


def fed_sample_weight_dataset(rng):
    x, y, w = _floats(rng, 40, 4), _floats(rng, 40, 1), _floats(rng, 40)
    data = tf.data.Dataset.from_tensor_slices((x, y, w)).batch(16)
    return Fed(_mlp(), (data,), {}, _rows(40, 16))


def fed_tf_data(rng):
    x, y = _floats(rng, 40, 4), _floats(rng, 40, 1)
    return Fed(_mlp(), (tf.data.Dataset.from_tensor_slices((x, y)).batch(12),), {}, _rows(40, 12))


def fed_dict(rng):
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    model = keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    model.compile("sgd", "mse", jit_compile=False)
    x = {"a": _floats(rng, 40, 3), "b": _floats(rng, 40, 2)}
    return Fed(model, (x, _floats(rng, 40, 1)), {"batch_size": 16}, _rows(40, 16))


def fed_nested_tuples(rng):
    a, b, c = keras.Input((3,)), keras.Input((2,)), keras.Input((1,))
    model = keras.Model(((a, b), c), keras.layers.Dense(1)(keras.layers.Concatenate()([a, b, c])))
    model.compile("sgd", "mse", jit_compile=False)
    x = ((_floats(rng, 40, 3), _floats(rng, 40, 2)), _floats(rng, 40, 1))
    data = tf.data.Dataset.from_tensor_slices((x, _floats(rng, 40, 1))).batch(16)
    return Fed(model, (data,), {}, _rows(40, 16))


class RaggedMean(keras.layers.Layer):
    """Mean of each ragged row, from gathers at the row splits: XLA needs
    nothing of the splits but their shape, so it compiles once per shape."""

    def call(self, x):
        totals = tf.concat([[0.0], tf.cumsum(tf.cast(x.flat_values, "float32"))], axis=0)
        splits = x.row_splits
        sums = tf.gather(totals, splits[1:]) - tf.gather(totals, splits[:-1])
        return tf.reshape(sums / tf.maximum(tf.cast(splits[1:] - splits[:-1], "float32"), 1.0), (-1, 1))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1)


class RaggedReduceMean(RaggedMean):
    """The obvious tf.reduce_mean(axis=1): its segment ops need the row splits
    as compile-time constants, so XLA compiles once per distinct split VALUES."""

    def call(self, x):
        return tf.reshape(tf.reduce_mean(tf.cast(x, "float32"), axis=1), (-1, 1))


# Row lengths, 8 rows a batch and a partial last batch. XLA sees a ragged
# batch as flat values plus row splits, so it compiles once per (values, rows):
# batches 1 and 3 both hold 20 values in 8 rows and share one compile.
RAGGED_LENGTHS = [[1, 2, 3, 4, 1, 2, 3, 4], [3] * 8, [4, 3, 2, 1, 4, 3, 2, 1], [1] * 8, [2] * 5]


def _ragged(rng, layer):
    inputs = keras.Input(shape=(None,), ragged=True, dtype="int32")
    model = keras.Model(inputs, keras.layers.Dense(1)(layer()(inputs)))
    model.compile("sgd", "mse", jit_compile=False)
    rows = [np.arange(1, n + 1, dtype=np.int32) for batch in RAGGED_LENGTHS for n in batch]
    x = tf.ragged.constant(rows, dtype=tf.int32)
    data = tf.data.Dataset.from_tensor_slices((x, _floats(rng, len(rows), 1))).batch(8)
    return Fed(model, (data,), {}, [(sum(batch), len(batch)) for batch in RAGGED_LENGTHS])


def fed_ragged(rng):
    return _ragged(rng, RaggedMean)


def fed_ragged_reduce_mean(rng):
    return _ragged(rng, RaggedReduceMean)


# What XLA keys a RaggedReduceMean compile on: the row lengths themselves (5 distinct, 4 shapes).
RAGGED_SPLIT_VALUES = len({tuple(batch) for batch in RAGGED_LENGTHS})


# Batch sizes a generator / PyDataset yields: 3 distinct in 6 batches.
YIELDED_SIZES = [8, 8, 5, 8, 3, 5]


def fed_generator(rng):
    def batches():
        for n in YIELDED_SIZES:
            yield _floats(rng, n, 4), _floats(rng, n, 1)

    return Fed(_mlp(), (batches(),), {}, list(YIELDED_SIZES))  # a generator lasts one epoch


class SizedBatches(keras.utils.PyDataset):
    def __init__(self, rng):
        super().__init__()
        self.rng = rng

    def __len__(self):
        return len(YIELDED_SIZES)

    def __getitem__(self, index):
        n = YIELDED_SIZES[index]
        return _floats(self.rng, n, 4), _floats(self.rng, n, 1)


def fed_py_dataset(rng):
    return Fed(_mlp(), (SizedBatches(rng),), {}, list(YIELDED_SIZES), epochs=2)


def _sparse_rows(n, features):
    """Row i has i % 3 + 1 non-zeros: batches of 8 hold 15, 16 or 17 of them."""
    dense = np.zeros((n, features), np.float32)
    for i in range(n):
        dense[i, : i % 3 + 1] = 1.0 + i
    return dense


def fed_sparse(rng):
    inputs = keras.Input(shape=(6,), sparse=True)
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile("sgd", "mse")
    dense = _sparse_rows(40, 6)
    data = tf.data.Dataset.from_tensor_slices((tf.sparse.from_dense(dense), _floats(rng, 40, 1))).batch(8)
    # A SparseTensor is indices, values and dense_shape: its key is the non-zero count.
    return Fed(model, (data,), {}, [int((dense[i : i + 8] != 0).sum()) for i in range(0, 40, 8)])


VOCABULARY = ["a", "b", "c"]


def _strings(rng, n):
    return tf.constant([[" ".join(rng.choice(VOCABULARY, size=rng.integers(1, 4)))] for _ in range(n)])


def fed_string_lookup(rng):
    inputs = keras.Input(shape=(1,), dtype="string")
    hot = keras.layers.StringLookup(vocabulary=VOCABULARY, output_mode="one_hot")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(hot)))
    model.compile("sgd", "mse")
    x = tf.constant([[v] for v in rng.choice(VOCABULARY, size=40)])
    data = tf.data.Dataset.from_tensor_slices((x, _floats(rng, 40, 1))).batch(16)
    return Fed(model, (data,), {}, _rows(40, 16))


def fed_text_vectorization(rng):
    inputs = keras.Input(shape=(1,), dtype="string")
    tokens = keras.layers.TextVectorization(vocabulary=VOCABULARY, output_sequence_length=4)(inputs)
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(8, 2)(tokens))
    model = keras.Model(inputs, keras.layers.Dense(1)(pooled))
    model.compile("sgd", "mse")
    # Keras's numpy adapter rejects numpy str arrays ("Invalid dtype: str..."): tf.string via tf.data.
    data = tf.data.Dataset.from_tensor_slices((_strings(rng, 40), _floats(rng, 40, 1))).batch(16)
    return Fed(model, (data,), {}, _rows(40, 16))


# (id, builder, jit, XLA expected). jit="on" wherever XLA can run the model.
INPUT_KINDS = [
    ("numpy", fed_numpy, "on", True),
    ("sample_weight-numpy", fed_sample_weight_numpy, "on", True),
    ("sample_weight-tf.data", fed_sample_weight_dataset, "on", True),
    ("tf.data", fed_tf_data, "on", True),
    ("dict", fed_dict, "on", True),
    ("nested-tuples", fed_nested_tuples, "on", True),
    ("ragged", fed_ragged, "on", True),
    ("generator", fed_generator, "on", True),
    ("PyDataset", fed_py_dataset, "on", True),
    # XLA has no kernel for SparseFillEmptyRows (jit="on" fails in XLA itself, see below);
    # "off", not "keep": Keras's "auto" would try XLA on a GPU.
    ("sparse", fed_sparse, "off", False),
    # Preprocessing layers declare supports_jit=False: jit="on" is refused, and said so.
    ("strings-StringLookup", fed_string_lookup, "on", False),
    ("strings-TextVectorization", fed_text_vectorization, "keep", False),
]
XLA_KINDS = [(name, build) for name, build, _, xla in INPUT_KINDS if xla]


def _fit(fed, monitor, counter):
    fed.model.fit(*fed.args, epochs=fed.epochs, callbacks=[monitor, counter], verbose=0, **fed.kwargs)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Your input ran out of data")
@pytest.mark.parametrize("build, jit, xla", [pytest.param(b, j, x, id=n) for n, b, j, x in INPUT_KINDS])
def test_input_kind_counts_steps_and_signatures_like_the_data(build, jit, xla):
    fed = build(np.random.default_rng(0))
    monitor, counter = _monitor(jit), BatchCounter()
    _fit(fed, monitor, counter)
    report = monitor.report
    assert counter.batches["train"] == len(fed.keys) * fed.epochs  # Keras ran what we fed
    assert report.steps["train"] == counter.batches["train"]
    assert report.distinct_signatures["train"] == len(set(fed.keys))
    assert not _disabled_notes(report)
    assert report.jit_active is xla
    # One compile per distinct shape with XLA; none claimed without it.
    assert report.compilation_count["train"] == (len(set(fed.keys)) if xla else 0)
    assert report.compilation_count["test"] == report.compilation_count["predict"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "build, leaves",
    [
        (fed_dict, ["x/a", "x/b", "y"]),
        (fed_nested_tuples, ["x/0/0", "x/0/1", "x/1", "y"]),
        (fed_sample_weight_dataset, ["x", "y", "sample_weight"]),
        (fed_ragged, ["x/flat_values", "x/row_splits_0", "y"]),
    ],
    ids=["dict", "nested-tuples", "sample_weight", "ragged"],
)
def test_signature_names_every_leaf_keras_feeds(build, leaves):
    fed = build(np.random.default_rng(0))
    monitor = _monitor("on")
    _fit(fed, monitor, BatchCounter())
    first = monitor.report.compilations[0].signature
    assert [leaf.path for leaf in first] == leaves


@pytest.mark.slow
def test_strings_with_jit_on_report_the_refusing_layer():
    fed = fed_string_lookup(np.random.default_rng(0))
    monitor = _monitor("on")
    _fit(fed, monitor, BatchCounter())
    assert "Keras refused jit_compile=True" in monitor.report.jit_reason
    assert "string_lookup" in monitor.report.jit_reason
    assert monitor.report.total_compilations == 0
    # Without XLA there is no compile record: the shape history shows the string leaf was read.
    signatures = monitor.session.phases["train"].history.signatures.values()
    assert {sig[0].dtype for sig in signatures} == {"string"}


@pytest.mark.slow
def test_sparse_with_jit_on_falls_back_and_every_batch_runs_once():
    # XLA cannot compile the sparse matmul: the fit goes on without XLA (on_unsupported="fallback"),
    # every batch once, nothing claimed compiled; the monitor leaves nothing behind.
    fed = fed_sparse(np.random.default_rng(0))
    monitor, counter = _monitor("on"), BatchCounter()
    with pytest.warns(xla_keras.XlaKerasWarning, match="XLA cannot compile Sparse"):
        _fit(fed, monitor, counter)
    report = monitor.report
    assert report.steps["train"] == counter.batches["train"] == int(fed.model.optimizer.iterations.numpy())
    assert report.compilation_count["train"] == 0 and report.jit_active is False
    assert all(op["op"].startswith("Sparse") for op in report.unsupported_ops["ops"])
    # The Dense layer trains: moved out of the model it would train no more, so the fix is auto-clustering.
    assert 'XlaMonitor(jit="autoclustering")' in report.jit_fix
    assert not _disabled_notes(report)
    assert not monitor.in_call
    assert not hasattr(fed.model.train_function, "_xla_keras_original")


@pytest.mark.slow
def test_sparse_with_jit_on_and_on_unsupported_raise_stops_with_tensorflows_error_inside_ours():
    fed = fed_sparse(np.random.default_rng(0))
    monitor = _monitor("on", on_unsupported="raise")
    with pytest.raises(xla_keras.UnsupportedOpError, match="XLA cannot compile Sparse") as raised:
        _fit(fed, monitor, BatchCounter())
    assert isinstance(raised.value.framework_error, tf.errors.InvalidArgumentError)
    report = monitor.report
    assert report.compilation_count["train"] == 0 and report.steps["train"] == 0
    assert not monitor.in_call
    assert not hasattr(fed.model.train_function, "_xla_keras_original")


@pytest.mark.slow
def test_ragged_row_splits_as_constants_count_every_xla_compile():
    fed = fed_ragged_reduce_mean(np.random.default_rng(0))
    monitor, counter = _monitor("on"), BatchCounter()
    _fit(fed, monitor, counter)
    report = monitor.report
    assert report.steps["train"] == counter.batches["train"] == len(RAGGED_LENGTHS)
    assert report.distinct_signatures["train"] == len(set(fed.keys)) == 4  # shapes: right
    assert report.compilation_count["train"] == RAGGED_SPLIT_VALUES  # XLA's compiles: 5


# --------------------------------------------------------------------------
# Lifecycle: one monitor across fit, evaluate, predict, fit again, a new batch
# size and model.compile(...) (which makes Keras build new step functions,
# each with an empty XLA cache). Each stage: what it does and the compiles it
# must add per phase, known from the data: 50 train rows, 40 validation rows.


def _lifecycle_data():
    rng = np.random.default_rng(1)
    return (_floats(rng, 50, 4), _floats(rng, 50, 1)), (_floats(rng, 40, 4), _floats(rng, 40, 1))


def _recompile(model):
    model.compile("sgd", "mse")  # a new optimizer too: Keras drops every step function


LIFECYCLE = [
    # (stage, run(model, train, val, callbacks), new compiles {train, test, predict})
    (
        "fit+validation",
        lambda m, t, v, cb: m.fit(*t, batch_size=16, validation_data=v, callbacks=cb, verbose=0),
        (2, 2, 0),
    ),  # train 16 and 2 rows, validation 16 and 8
    (
        "evaluate",
        lambda m, t, v, cb: m.evaluate(*v, batch_size=16, callbacks=cb, verbose=0),
        (0, 0, 0),
    ),  # the validation's test function, shapes known
    ("predict", lambda m, t, v, cb: m.predict(v[0], batch_size=16, callbacks=cb, verbose=0), (0, 0, 2)),
    ("fit-again", lambda m, t, v, cb: m.fit(*t, batch_size=16, callbacks=cb, verbose=0), (0, 0, 0)),
    (
        "fit-batch-10",
        lambda m, t, v, cb: m.fit(*t, batch_size=10, callbacks=cb, verbose=0),
        (1, 0, 0),
    ),  # 5 batches of 10: one new shape
    (
        "recompile-fit",
        lambda m, t, v, cb: (_recompile(m), m.fit(*t, batch_size=16, callbacks=cb, verbose=0)),
        (2, 0, 0),
    ),  # known shapes, new function: compiled again
    ("evaluate-after-recompile", lambda m, t, v, cb: m.evaluate(*v, batch_size=16, callbacks=cb, verbose=0), (0, 2, 0)),
    ("predict-after-recompile", lambda m, t, v, cb: m.predict(v[0], batch_size=16, callbacks=cb, verbose=0), (0, 0, 2)),
]


def run_lifecycle(on_stage: Callable[[str, dict], None]):
    """Run every stage with one monitor; on_stage(stage, facts) after each."""
    train, val = _lifecycle_data()
    model = _mlp()
    monitor, counter = _monitor("on"), BatchCounter()
    for stage, run, _ in LIFECYCLE:
        run(model, train, val, [monitor, counter])
        report = monitor.report
        on_stage(
            stage,
            {
                "compilation_count": dict(report.compilation_count),
                "steps": dict(report.steps),
                "distinct_signatures": dict(report.distinct_signatures),
                "batches": dict(counter.batches),
                "notes": list(report.notes),
                "jit_active": report.jit_active,
            },
        )
    return monitor


@pytest.mark.slow
def test_lifecycle_accumulates_steps_and_compiles_only_what_is_new():
    seen = []
    run_lifecycle(lambda stage, facts: seen.append((stage, facts)))
    expected = dict.fromkeys(PHASES, 0)
    for (stage, facts), (_, _, new) in zip(seen, LIFECYCLE):
        for phase, n in zip(PHASES, new):
            expected[phase] += n
        assert facts["compilation_count"] == expected, stage
        assert facts["steps"] == facts["batches"], stage  # every batch Keras ran, per phase
        assert facts["jit_active"] is True, stage
        assert not [n for n in facts["notes"] if "disabled itself" in n], stage
    # Over the monitor's life: train saw 16, 2 and 10 rows; test and predict 16 and 8.
    assert seen[-1][1]["distinct_signatures"] == {"train": 3, "test": 2, "predict": 2}
    # 4 fits of 4, 4, 5 and 4 batches; 1 validation + 2 evaluates of 3; 2 predicts of 3.
    assert seen[-1][1]["batches"] == {"train": 17, "test": 9, "predict": 6}


@pytest.mark.slow
def test_recompile_says_a_rebuilt_function_started_a_new_compile_cache():
    (x, y), _ = _lifecycle_data()
    model = _mlp()
    monitor = _monitor("on")
    model.fit(x, y, batch_size=16, callbacks=[monitor], verbose=0)
    _recompile(model)
    model.fit(x, y, batch_size=16, callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.compilation_count["train"] == 4 and report.distinct_signatures["train"] == 2
    assert any("rebuilt" in note and "train" in note for note in report.notes), report.notes


def _three_lengths(rng):
    """One batch of 8 sequences at each of the lengths 5, 6 and 7."""

    def batches():
        for length in (5, 6, 7):
            yield rng.integers(1, 20, (8, length)).astype("int32"), _floats(rng, 8, 1)

    return tf.data.Dataset.from_generator(
        batches, output_signature=(tf.TensorSpec((8, None), tf.int32), tf.TensorSpec((8, 1), tf.float32))
    )


@pytest.mark.slow
def test_recompile_is_no_recompilation_storm():
    rng = np.random.default_rng(0)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(20, 4),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("sgd", "mse")
    monitor = _monitor("on", storm_threshold=4, on_storm="raise")
    model.fit(_three_lengths(rng), callbacks=[monitor], verbose=0)
    _recompile(model)
    model.fit(_three_lengths(rng), callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.compilation_count["train"] == 6  # the rebuild really compiles the 3 shapes again
    assert report.distinct_signatures["train"] == 3 and report.storms == []


# --------------------------------------------------------------------------
# Other Keras backends: the monitor needs the TensorFlow one.

_BACKEND_PROBE = textwrap.dedent("""
    try:
        import keras
    except Exception as error:  # the backend's own package is missing
        print("XLA_KERAS_UNAVAILABLE", repr(error))
        raise SystemExit(0)
    import xla_keras
    try:
        xla_keras.XlaMonitor(log_dir=None, verbose=0)
    except Exception as error:
        print("XLA_KERAS_RAISED", type(error).__name__, error)
    else:
        print("XLA_KERAS_CONSTRUCTED", keras.backend.backend())
""")


def _backend_message(error_text, backend):
    lowered = error_text.lower()
    return backend in lowered and "tensorflow" in lowered and "backend" in lowered


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_backends_without_xla_are_refused_naming_them_and_jax_is_accepted(backend):
    env = dict(
        os.environ,
        KERAS_BACKEND=backend,
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run([sys.executable, "-c", _BACKEND_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if "XLA_KERAS_UNAVAILABLE" in proc.stdout:
        pytest.skip(f"keras cannot import with KERAS_BACKEND={backend} here: {proc.stdout.strip()[-200:]}")
    if backend == "jax":
        assert "XLA_KERAS_CONSTRUCTED jax" in proc.stdout, proc.stdout
        return
    assert "XLA_KERAS_RAISED" in proc.stdout, proc.stdout
    assert _backend_message(proc.stdout, backend), proc.stdout


def test_non_xla_backend_is_refused_simulated(monkeypatch):
    # Runs everywhere: torch is often not installed, and numpy's Keras
    # backend imports jax. Keras answers the backend through these two calls.
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    monkeypatch.setattr(keras.config, "backend", lambda: "torch")
    with pytest.raises(Exception) as info:  # noqa: B017 - the type is the patch's choice; the words matter
        _monitor("keep")
    assert _backend_message(str(info.value), "torch")


# --------------------------------------------------------------------------
# run_eagerly: test_monitor.py covers fit; evaluate and predict take another
# path (_begin_phase, outside a fit).


@pytest.mark.slow
@pytest.mark.parametrize("jit", ["on", "keep"])
def test_run_eagerly_evaluate_and_predict_report_xla_not_applicable(jit):
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", run_eagerly=True)
    monitor, counter = _monitor(jit), BatchCounter()
    x, y = _floats(rng, 40, 4), _floats(rng, 40, 1)
    model.evaluate(x, y, batch_size=16, callbacks=[monitor, counter], verbose=0)
    model.predict(x, batch_size=16, callbacks=[monitor, counter], verbose=0)
    report = monitor.report
    assert report.jit_active is False
    assert "run_eagerly=True" in report.jit_reason and "nothing is compiled" in report.jit_reason
    assert report.total_compilations == 0
    assert report.steps == {"train": 0, **{p: counter.batches[p] for p in ("test", "predict")}}
    assert report.distinct_signatures == {"train": 0, "test": 2, "predict": 2}  # 16 and 8 rows
    assert not _disabled_notes(report)


# --------------------------------------------------------------------------
# XLA's own count, in a fresh process (XLA_FLAGS must be set before TF starts).


def _dumped(dump_dir):
    if not os.path.isdir(dump_dir):
        return 0
    return sum(1 for f in os.listdir(dump_dir) if f.endswith("before_optimizations.txt"))


def _dumped_fit(dump_dir, build):
    fed = build(np.random.default_rng(0))
    monitor = _monitor("on")
    before = _dumped(dump_dir)
    _fit(fed, monitor, BatchCounter())
    return {
        "dumped": _dumped(dump_dir) - before,
        "compiles": monitor.report.compilation_count["train"],
        "distinct_keys": len(set(fed.keys)),
    }


def dump_main(out_path):
    """Subprocess side: per input kind and per lifecycle stage, the modules XLA
    dumped (counted before and after) against what the monitor counted."""
    dump_dir = os.environ["XLA_KERAS_DUMP_DIR"]
    result = {
        "kinds": {name: _dumped_fit(dump_dir, build) for name, build in XLA_KINDS},
        "ragged_reduce_mean": _dumped_fit(dump_dir, fed_ragged_reduce_mean),
        "lifecycle": [],
    }
    last = {"count": _dumped(dump_dir), "compiles": 0}

    def on_stage(stage, facts):
        now, compiles = _dumped(dump_dir), sum(facts["compilation_count"].values())
        result["lifecycle"].append(
            {"stage": stage, "dumped": now - last["count"], "compiles": compiles - last["compiles"]}
        )
        last.update(count=now, compiles=compiles)

    run_lifecycle(on_stage)
    with open(out_path, "w") as f:
        json.dump(result, f)


@pytest.fixture(scope="module", autouse=True)
def _dump_process(request, tmp_path_factory):
    """Start the dump subprocess with the module's first test, so it runs beside
    the in-process tests (two cores); only when a selected test needs it."""
    if not any("dump_run" in item.fixturenames for item in request.session.items):
        yield None
        return
    tmp = tmp_path_factory.mktemp("xla_dump")
    dump, out, log = str(tmp / "dump"), str(tmp / "result.json"), str(tmp / "log.txt")
    env = dict(os.environ)
    env.update(
        {
            "XLA_FLAGS": f"--xla_dump_to={dump}",
            "XLA_KERAS_DUMP_DIR": dump,
            "PYTHONPATH": os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]),
            "CUDA_VISIBLE_DEVICES": "",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
    )
    env.pop("TF_XLA_FLAGS", None)
    with open(log, "w") as sink:  # a file, not a pipe nobody reads while it runs
        proc = subprocess.Popen([sys.executable, THIS, "dump", out], env=env, stdout=sink, stderr=subprocess.STDOUT)
    yield {"proc": proc, "out": out, "log": log}
    if proc.poll() is None:  # the run was cut short: stop our own child
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def dump_run(_dump_process):
    proc = _dump_process["proc"]
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with open(_dump_process["log"]) as f:
        assert proc.returncode == 0, f.read()[-4000:]
    with open(_dump_process["out"]) as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [name for name, _ in XLA_KINDS])
def test_xla_dump_agrees_per_input_kind(dump_run, kind):
    facts = dump_run["kinds"][kind]
    assert facts["dumped"] == facts["compiles"] == facts["distinct_keys"]


@pytest.mark.slow
def test_xla_dump_ragged_reduce_mean_compiles_per_row_split_values(dump_run):
    # XLA's side of test_ragged_row_splits_as_constants_count_every_xla_compile:
    # one module per distinct row lengths, more than the distinct shapes.
    facts = dump_run["ragged_reduce_mean"]
    assert facts["dumped"] == RAGGED_SPLIT_VALUES > facts["distinct_keys"]


@pytest.mark.slow
def test_xla_dump_agrees_per_lifecycle_stage(dump_run):
    stages = [(s["stage"], s["dumped"]) for s in dump_run["lifecycle"]]
    assert stages == [(s["stage"], s["compiles"]) for s in dump_run["lifecycle"]]
    assert stages == [(stage, sum(new)) for stage, _, new in LIFECYCLE]


if __name__ == "__main__":
    if sys.argv[1:2] != ["dump"]:
        raise SystemExit("usage: python tests/test_inputs_lifecycle.py dump OUT_JSON")
    dump_main(sys.argv[2])
