"""An op XLA cannot compile, under jit="on" and under the model's own jit_compile=True: named with its layer,
the device type and the user's line; the fit goes on without XLA and loses no step (or stops with a short
error of ours); the fix is code (the layer moved into the input pipeline, applied and refit here, or
auto-clustering).

Ground truth, in a fresh process per backend (tests/unsupported_fits.py): TensorFlow's own
``InvalidArgumentError`` from the same model unmonitored (the ops, their node names, the device type); the
optimizer's iterations and the final weights of the same model trained without XLA and unmonitored, on the
same batches from the same weights (no step lost, no batch skipped or run twice); XLA's dump
(``--xla_dump_to``: nothing compiled after a fallback; the refit after the move compiles its step).
"""

import json
import os
import re
import sys
import sysconfig

import forked
import numpy as np
import pytest

from xla_keras.config import MonitorConfig
from xla_keras.jit.unsupported import (
    Unsupported,
    UnsupportedOp,
    autoclustering_fix,
    layer_named,
    quoted_root,
    user_line,
)
from xla_keras.report.model import XlaReport
from xla_keras.report.schema import parse_report

pytestmark = pytest.mark.xdist_group("test_unsupported_ops")

HERE = os.path.dirname(os.path.abspath(__file__))
FITS = os.path.join(HERE, "unsupported_fits.py")
STEPS = 2 * 4  # two epochs of 64 examples in batches of 16 (steps_per_execution=2: 2 calls of 2 per epoch)

# TensorFlow's words, parsed here on their own (not with the package's reader).
TF_OPS = re.compile(r"(\w+) \(No registered '\w+' OpKernel for (\w+) devices compatible with node \{\{node ([^}]+)\}\}")


def _run(backend, tmp_path_factory):
    dump = str(tmp_path_factory.mktemp(f"dump_{backend}"))
    logs = str(tmp_path_factory.mktemp(f"logs_{backend}"))
    env = forked.script_env(backend, dump=dump)
    proc = forked.run([sys.executable, FITS, dump, logs, backend], env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_FITS ")][-1]
    return json.loads(line[len("XLA_KERAS_FITS ") :])


@pytest.fixture(scope="module")
def tf_fits(tmp_path_factory):
    pytest.importorskip("tensorflow")
    return _run("tensorflow", tmp_path_factory)


@pytest.fixture(scope="module")
def jax_fits(tmp_path_factory):
    pytest.importorskip("jax")
    return _run("jax", tmp_path_factory)


def _line_of(text):
    """The line number of ``text`` in tests/unsupported_fits.py."""
    with open(FITS) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


def _shaped(message):
    lines = message.splitlines()
    return len(lines) <= 4 and max(map(len, lines)) <= 100


def _same_weights(a, b):
    return len(a) == len(b) and all(np.array_equal(np.array(x), np.array(y)) for x, y in zip(a, b))


# ------------------------------------------------------------------ TensorFlow


@pytest.mark.slow
def test_the_op_is_named_as_tensorflows_own_error_names_it(tf_fits):
    theirs = TF_OPS.findall(tf_fits["tf_error"])
    assert theirs and tf_fits["tf_error_iterations"] == 0  # the unmonitored fit died at its first step
    found = tf_fits["on"]["report"]["unsupported_ops"]
    assert [op["op"] for op in found["ops"]] == [op for op, _, _ in theirs] == ["AsString"]
    assert found["device"] == theirs[0][1] == "XLA_CPU_JIT"
    # The layer, from the node's name scopes (each model instance numbers its own scope).
    assert [node.split("/")[-2] for _, _, node in theirs] == [op["node"].split("/")[-2] for op in found["ops"]]
    assert found["layers"] == ["stringify"] and found["ops"][0]["layer"] == "stringify"
    assert found["line"] == f"{FITS}:{_line_of('tf.strings.as_string(x)')} in call"  # the user's line


@pytest.mark.slow
def test_the_fallback_runs_every_batch_once_and_compiles_nothing(tf_fits):
    on, reference = tf_fits["on"], tf_fits["reference"]
    assert on["error"] is None
    assert on["iterations"] == reference["iterations"] == STEPS
    assert _same_weights(on["weights"], reference["weights"])  # the same batches, in order, each once
    assert on["dumped"] == []  # XLA compiled nothing in the monitored fit
    report = on["report"]
    assert report["jit_active"] is False and sum(report["compilation_count"].values()) == 0
    assert report["steps"] == {"train": STEPS, "test": STEPS, "predict": 0}
    assert report["unsupported_ops"]["action"] == "fallback" and report["unsupported_ops"]["step"] == 1
    assert report["jit_reason"].startswith("XLA cannot compile AsString in layer 'stringify' on XLA_CPU_JIT")
    assert "no step is lost" in report["jit_reason"]
    assert on["model_jit_after"] is True  # jit="on" stays with the model: the fallback was for the fit


@pytest.mark.slow
def test_the_warning_comes_once_and_the_summary_has_one_finding_line(tf_fits):
    on = tf_fits["on"]
    (warning,) = on["warnings"]
    assert _shaped(warning) and "stringify" in warning and "monitor.report.jit_fix" in warning
    summary = on["summary"].splitlines()
    assert [line for line in summary if "NOT COMPILED" in line] == [
        "  NOT COMPILED : AsString in layer 'stringify' (train step 1): XLA off; fix: monitor.report.jit_fix"
    ]
    assert summary[0].startswith("xla_keras: XLA did not run: an op it cannot compile")
    assert max(map(len, summary + on["printed"].splitlines())) <= 100


@pytest.mark.slow
def test_the_fix_without_a_layer_to_move_is_autoclustering_as_code(tf_fits):
    code = tf_fits["on"]["report"]["jit_fix"]
    assert 'XlaMonitor(jit="autoclustering")' in code and "configure(cpu_autoclustering=True)" in code
    compile(code.replace("...", "x"), "<fix>", "exec")
    assert max(map(len, code.splitlines())) <= 100


@pytest.mark.slow
def test_evaluate_and_predict_fall_back_under_the_models_own_jit_compile(tf_fits):
    keep = tf_fits["keep"]
    for name, phase in (("evaluate", "test"), ("predict", "predict")):
        run = keep[name]
        assert run["error"] is None and len(run["warnings"]) == 1 and _shaped(run["warnings"][0])
        assert run["report"]["unsupported_ops"]["phase"] == phase
        assert run["report"]["steps"][phase] == 4 and run["report"]["jit_active"] is False
    assert keep["dumped"] == [] and keep["model_jit_after"] is True  # the user's own setting, kept


@pytest.mark.slow
def test_raise_stops_with_a_short_error_of_ours_and_the_report_is_written(tf_fits):
    stopped = tf_fits["raise"]
    error = stopped["error"]
    assert error["type"] == "UnsupportedOpError" and error["framework_error"] == "InvalidArgumentError"
    assert _shaped(error["message"]) and "on_unsupported='raise'" in error["message"]
    assert TF_OPS.findall(error["framework_text"])  # TensorFlow's own error, kept whole
    assert stopped["iterations"] == 0 and stopped["warnings"] == []
    written = stopped["written"]
    assert written["unsupported_ops"]["action"] == "raise" and written["jit_active"] is False


@pytest.mark.slow
def test_under_mirrored_strategy_the_distributed_batches_run_again_without_xla(tf_fits):
    mirrored = tf_fits["mirrored"]
    assert mirrored["error"] is None and len(mirrored["warnings"]) == 1
    assert mirrored["iterations"] == STEPS == mirrored["report"]["steps"]["train"]
    assert mirrored["report"]["unsupported_ops"]["layers"] == ["stringify"]
    assert mirrored["report"]["jit_active"] is False


@pytest.mark.slow
def test_a_string_input_layer_moves_into_the_pipeline_and_the_refit_compiles_as_xlas_dump_shows(tf_fits):
    move = tf_fits["move"]
    first = move["first"]
    assert first["unsupported_ops"]["input_dtype"] == "string"
    assert first["unsupported_ops"]["layers"] == ["hash_words"]
    assert 'model.get_layer("hash_words")' in first["jit_fix"] and "dataset.map(" in first["jit_fix"]
    assert "apply hash_words in the input pipeline" in move["warnings"][0]
    steps = [f for f in move["dumped_by_refit"] if "one_step_on_data" in f]
    assert steps  # XLA compiled the refit's train step
    refit = move["refit"]
    assert move["refit_error"] is None and move["refit_warnings"] == []
    assert refit["jit_active"] is True and refit["unsupported_ops"] is None
    assert refit["compilation_count"]["train"] == len(steps)


# ------------------------------------------------------------------ JAX


@pytest.mark.slow
def test_jax_a_layer_whose_shape_follows_the_data_falls_back_and_loses_no_step(jax_fits):
    on, reference = jax_fits["on"], jax_fits["reference"]
    assert on["error"] is None and on["iterations"] == reference["iterations"] == STEPS
    assert _same_weights(on["weights"], reference["weights"])
    assert not [f for f in on["dumped"] if "step" in f]  # no step program compiled
    report = on["report"]
    found = report["unsupported_ops"]
    assert found["layers"] == ["odd"] and found["ops"][0]["op"] == "ConcretizationTypeError"
    assert found["line"] == f"{FITS}:{_line_of('jnp.nonzero(x[:, 0] > 0)')} in call"
    assert found["error"].startswith("ConcretizationTypeError: Abstract tracer value")
    assert report["jit_active"] is False and report["compilation_count"]["train"] == 0
    (warning,) = on["warnings"]
    assert _shaped(warning) and "layer 'odd'" in warning


@pytest.mark.slow
def test_jax_raise_names_the_layer_and_keeps_jaxs_own_error(jax_fits):
    error = jax_fits["raise"]["error"]
    assert error["type"] == "UnsupportedOpError" and error["framework_error"] == "TracerArrayConversionError"
    assert _shaped(error["message"]) and "layer 'odd'" in error["message"]
    assert jax_fits["raise"]["report"]["unsupported_ops"]["action"] == "raise"


# Each trace error's own fix, as JAX's page of errors (docs.jax.dev/en/latest/errors.html) gives it: words the
# fix must hold, and words of another error's fix it must not. A ConcretizationTypeError JAX raised at int()
# ("The problem arose with the `int` function") is a value to keep a tensor, not a shape.
JAX_FIXES = {
    "TracerArrayConversionError": (("keras.ops", "jax.numpy", "instead of numpy"), ("static shapes",)),
    "ConcretizationTypeError": (("static shapes", "size="), ("instead of numpy",)),
    "conversion": (("keras.ops.cast", "instead of int()"), ("static shapes",)),
    "TracerBoolConversionError": (("keras.ops.where", "jax.lax.cond", "Python if"), ("static shapes",)),
    "NonConcreteBooleanIndexError": (("keras.ops.where", "boolean"), ("instead of numpy",)),
    "TracerIntegerConversionError": (("keras.ops.take", "jax.lax.dynamic_slice"), ("static shapes",)),
}


def _jax_error(kind):
    """The error JAX itself raised in the unmonitored fit (the innermost of jax.errors' classes in the chain
    Keras raised), and which fix it calls for."""
    import jax

    chain = [
        (name, words)
        for name, words in zip(kind["jax_errors"], kind["jax_words"])
        if hasattr(jax.errors, name) and name != "SimplifiedTraceback"  # JAX's note of frames it left out
    ]
    assert chain, kind["jax_errors"]
    name, words = chain[-1]
    return name, "conversion" if "The problem arose with the `int` function" in words else name


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind",
    [
        "TracerArrayConversionError",
        "ConcretizationTypeError",
        "ConcretizationTypeError-int",
        "TracerBoolConversionError",
        "NonConcreteBooleanIndexError",
        "TracerIntegerConversionError",
    ],
)
def test_jax_each_trace_error_gets_its_own_fix_and_the_fix_compiles(jax_fits, kind):
    run = jax_fits["kinds"][kind]
    name, fix = _jax_error(run)
    assert name == kind.split("-")[0]  # the layer raises what it is meant to, by JAX's own error
    monitored = run["monitored"]
    found = monitored["report"]["unsupported_ops"]
    assert found["ops"][0]["op"] == name and found["layers"] == ["odd"] and found["action"] == "fallback"
    assert monitored["iterations"] == STEPS and monitored["report"]["jit_active"] is False
    (warning,) = monitored["warnings"]
    assert _shaped(warning)
    (line,) = [ln for ln in warning.splitlines() if ln.startswith("Fix: ")]
    words = line[len("Fix: ") :]
    must, must_not = JAX_FIXES[fix]
    assert all(w in words for w in must) and not any(w in words for w in must_not), (name, words)
    assert f"Fix: {words}" in monitored["report"]["jit_reason"]
    # The same layer written as the words say: one XLA program, every step under it, nothing said.
    fixed = run["fixed"]
    assert fixed["error"] is None and fixed["warnings"] == [] and fixed["iterations"] == STEPS
    report = fixed["report"]
    assert report["jit_active"] is True and report["unsupported_ops"] is None
    assert report["compilation_count"]["train"] == 1


# ------------------------------------------------------------------ no fit


def test_jax_trace_errors_raised_in_process_get_their_own_fix():
    """jax.jit's own errors, raised here without Keras, read into their fix."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from xla_keras.backends.jax.jit import unsupported_op

    def raised(function, *args):
        try:
            jax.jit(function)(*args)
        except Exception as error:  # noqa: BLE001 - the error is what is read
            return error
        raise AssertionError("no error")

    x = jnp.arange(4.0)
    cases = {
        "TracerArrayConversionError": raised(lambda v: np.asarray(v).sum(), x),
        "ConcretizationTypeError": raised(lambda v: jnp.nonzero(v > 1)[0], x),
        "conversion": raised(lambda v: v * int(v.sum()), x),
        "TracerBoolConversionError": raised(lambda v: v * 2 if v.sum() > 0 else v, x),
        "NonConcreteBooleanIndexError": raised(lambda v: v[v > 1], x),
        "TracerIntegerConversionError": raised(lambda v: [1.0, 2.0, 3.0, 4.0][jnp.argmax(v)] * v, x),
    }
    for fix, error in cases.items():
        found = unsupported_op(error, None)
        assert found is not None and found.ops[0].op == (type(error).__name__), (fix, error)
        must, must_not = JAX_FIXES[fix]
        assert all(w in found.fix_words for w in must) and not any(w in found.fix_words for w in must_not), fix
        assert len("Fix: " + found.fix_words) <= 100  # the warning's line, whole


def test_on_unsupported_takes_fallback_or_raise():
    assert MonitorConfig().on_unsupported == "fallback"
    with pytest.raises(ValueError, match="on_unsupported must be one of 'fallback', 'raise'; got 'skip'"):
        MonitorConfig(on_unsupported="skip")


@pytest.mark.parametrize(
    ("components", "layer"),
    [
        (["functional_1", "dedup_1"], "dedup"),  # TensorFlow's uniquified scope
        (["functional_1", "dense_1"], "dense"),  # Keras's default names, measured: dense runs in dense_1,
        (["functional_1", "dense_1_2"], "dense_1"),  # dense_1 in dense_1_2,
        (["functional_1", "dense_2_1"], "dense_2"),  # dense_2 in dense_2_1
        (["functional_1", "block_1", "inner_3"], "inner"),  # the innermost wins
        (["functional_1", "unknown"], "functional"),  # an op of the model's own call
        (["outer", "unknown"], None),
    ],
)
def test_a_nodes_name_scopes_name_its_layer(components, layer):
    names = ["functional", "dedup", "dense", "dense_1", "dense_2", "block", "inner"]
    assert layer_named(components, names) == layer


def test_a_quoted_stack_gets_back_the_prefix_tensorflow_cut_from_its_paths(tmp_path):
    # TensorFlow quotes a stack's paths without their common directory (measured: "/" on 2.21 here,
    # "/tmp/" on 2.16 and 2.18 when the script and the venv both live under /tmp).
    library = sysconfig.get_paths()["purelib"]
    installed = os.path.join(library, "pytest", "__init__.py")
    user = tmp_path / "train.py"
    user.write_text("x = 1\n")
    common = os.path.commonpath([library, str(tmp_path)]).rstrip(os.sep) + os.sep
    quoted = [(installed[len(common) :], 10, "fit"), (str(user)[len(common) :], 1, "call")]
    root = quoted_root(path for path, _, _ in quoted)
    assert root == common and user_line(quoted, root) == f"{user}:1 in call"
    assert user_line(quoted[:1], root) is None  # an installed package's line is never the user's


def test_the_tensorflow_reader_takes_only_xlas_unsupported_op_error():
    tf = pytest.importorskip("tensorflow")
    from xla_keras.backends.tensorflow.jit import unsupported_op

    other = tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [2,3] vs. [2,4]")
    assert unsupported_op(other, None) is None and unsupported_op(ValueError("x"), None) is None


def test_a_report_of_schema_11_reads_with_no_unsupported_ops_and_the_field_round_trips():
    old = XlaReport(jit_mode="on").to_dict()
    old["schema_version"] = 11
    del old["unsupported_ops"]
    assert parse_report(old).report.unsupported_ops is None
    found = Unsupported((UnsupportedOp("AsString", "dedup", "m/dedup_1/AsString"),), "XLA_CPU_JIT", None, "e", "why")
    report = XlaReport(jit_mode="on", unsupported_ops=found.record("train", 1, "fallback", autoclustering_fix(found)))
    assert XlaReport.from_dict(json.loads(report.to_json())) == report


def test_an_op_in_a_layer_held_by_another_moves_the_layer_the_user_put_in_the_model():
    """TensorFlow names the innermost layer's scope; the move takes the layer of the user's model that
    holds it (the one ``model.get_layer`` knows), with everything in it."""
    tf = pytest.importorskip("tensorflow")
    import keras

    from xla_keras.backends.tensorflow import TensorFlowBackend

    class Stringify(keras.layers.Layer):
        def call(self, x):
            return x + tf.cast(tf.strings.length(tf.strings.as_string(x)), x.dtype) * 0.0

    class Cleaning(keras.layers.Layer):
        """A preprocessing layer of the user's, made of a layer it builds."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.stringify = Stringify(name="stringify")

        def call(self, x):
            return self.stringify(x)

    numbers = keras.Input((3,))
    model = keras.Model(numbers, keras.layers.Dense(1)(Cleaning(name="cleaning")(numbers)))
    node = "functional_1/cleaning_1/stringify_1/AsString"
    found = Unsupported((UnsupportedOp("AsString", "stringify", node),), "XLA_CPU_JIT", None, "e", "why")
    code, words = TensorFlowBackend("on").unsupported_fix(model, found)
    assert 'model.get_layer("cleaning")' in code and 'get_layer("stringify")' not in code
    assert words == "apply cleaning in the input pipeline (dataset.map)"
