"""What XLA did not compile, and the move that lifts it: a layer Keras refuses to compile
(``supports_jit=False``), named as the user put it in the model (a TextVectorization, not the StringLookup it
builds), with its move into the input pipeline as code, printed whole in 100 columns; the move followed as
written (fit with validation_data, evaluate, predict): XLA's own dump shows the refit compiles (the first fit
compiled nothing), and its val_loss, evaluate loss and predictions are the original model's. ``jit="keep"``
on such a model points at the move, not at ``jit="on"`` (which Keras refuses).

Ground truth: XLA's dump (``--xla_dump_to``, read at Keras's hooks to tell the train step's modules from the
validation step's), in a fresh process per model (tests/not_compiled_fits.py); the optimizer's iterations
for the steps run; the same model from the same weights without XLA and without the move for the losses and
predictions; Keras's own ``compile(jit_compile=True)`` for its refusal; the CLI run as a user runs it.
"""

import ast
import json
import os
import subprocess
import sys
import textwrap

import forked
import numpy as np
import pytest

from xla_keras.backends.keras.pipeline_move import CODE_WIDTH, pipeline_move

pytestmark = pytest.mark.xdist_group("test_not_compiled")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = 2 * 4  # two epochs of 64 examples in batches of 16
LAYER = {"dict": "color_lookup", "single": "color_lookup", "text": "text_vectorization"}


@pytest.fixture(scope="module", params=["dict", "single", "text"])
def fits(request, tmp_path_factory):
    pytest.importorskip("tensorflow")
    dump = str(tmp_path_factory.mktemp(f"dump_{request.param}"))
    logs = str(tmp_path_factory.mktemp(f"logs_{request.param}"))
    env = forked.script_env("tensorflow", dump=dump)
    proc = forked.run(
        [sys.executable, os.path.join(HERE, "not_compiled_fits.py"), dump, logs, request.param],
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_FITS ")][-1]
    return {"kind": request.param, **json.loads(line[len("XLA_KERAS_FITS ") :])}


def _printed_code(text):
    """The code under "fix (code)" in a printed report, as the user copies it (its indent taken off)."""
    lines = text.splitlines()
    start = lines.index("  fix (code)      :") + 1
    end = next(i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith("    "))
    return textwrap.dedent("\n".join(lines[start:end]))


@pytest.mark.slow
def test_the_refusal_names_the_layer_and_its_move_and_nothing_compiled(fits):
    first, layer = fits["first"], LAYER[fits["kind"]]
    assert fits["dumped_after_first"] == []  # XLA compiled nothing: Keras refused jit_compile=True
    assert first["jit_active"] is False and first["compilation_count"]["train"] == 0
    assert f"Keras refused jit_compile=True (layers with supports_jit=False: {layer})" in first["jit_reason"]
    assert f"Apply {layer} in the input pipeline (dataset.map)" in first["jit_reason"]
    assert "string_lookup" not in first["jit_reason"]  # a TextVectorization's own StringLookup: not the user's
    (warning,) = fits["warnings"]  # once, in our shape (tests/conftest.py checks the shape in process)
    lines = warning.splitlines()
    assert len(lines) <= 4 and max(map(len, lines)) <= 100 and layer in warning
    assert "monitor.report.jit_fix" in warning
    code = first["jit_fix"]
    assert f'model.get_layer("{layer}")' in code and "dataset.map(" in code
    assert "  fix (code)      :" in fits["printed"] and all(len(ln) <= 100 for ln in fits["printed"].splitlines())


@pytest.mark.slow
def test_the_fix_is_printed_whole_in_100_columns_in_the_report_its_details_and_the_cli(fits):
    code = fits["first"]["jit_fix"]
    assert max(map(len, code.splitlines())) <= CODE_WIDTH  # laid out so by its generator
    full = subprocess.run(
        [sys.executable, "-m", "xla_keras", "report", "--full", fits["log_dir"]],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")),
    )
    assert full.returncode == 0, full.stderr
    for text in (fits["printed"], fits["details"], full.stdout):
        assert max(map(len, text.splitlines())) <= 100 and "too long" not in text
        assert _printed_code(text) == code  # whole, as the report holds it
    assert "monitor.report" not in full.stdout  # a saved log dir's reader has no monitor


@pytest.mark.slow
def test_the_move_applied_as_written_compiles_the_rest_as_xlas_dump_shows(fits):
    refit = fits["refit"]
    steps = [f for f in fits["dumped_by_train"] if "one_step_on_data" in f]
    assert steps  # XLA compiled the train step, where it compiled nothing before
    assert refit["jit_active"] is True and refit["jit_fix"] is None and fits["refit_warnings"] == []
    assert refit["compilation_count"]["train"] == len(steps)
    assert fits["iterations"] == STEPS == refit["steps"]["train"]  # the refit's own optimizer
    validation = [f for f in fits["dumped_by_validation"] if "one_step_on_data" in f]
    assert validation and refit["compilation_count"]["test"] == len(validation)  # validation_data, mapped


@pytest.mark.slow
def test_the_move_covers_validation_evaluate_and_predict_with_the_original_models_results(fits):
    original, followed = fits["original"], fits["followed"]
    assert len(original["val_loss"]) == len(followed["val_loss"]) == 2
    # The same model from the same weights on the same batches: XLA's arithmetic differs in the last bits.
    np.testing.assert_allclose(followed["val_loss"], original["val_loss"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(followed["loss"], original["loss"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(followed["predictions"], original["predictions"], rtol=1e-5, atol=1e-6)
    ran = {line.split("(")[0].strip(): files for line, files in fits["dumped_by_statement"]}
    assert [f for f in ran["predictions = model.predict"] if "one_step_on_data" in f]  # XLA compiled predict


@pytest.mark.slow
def test_keep_on_a_model_keras_refuses_points_at_the_move_not_at_jit_on(fits):
    keep, layer = fits["keep"], LAYER[fits["kind"]]
    assert fits["keras_jit_after_compile_true"] is False  # Keras's own refusal: jit="on" cannot help
    assert keep["jit_active"] is False and keep["compilation_count"]["train"] == 0
    assert "Pass jit='on'" not in keep["jit_reason"]
    assert (
        f"Keras refuses jit_compile=True for this model (layers with supports_jit=False: {layer})"
        in (keep["jit_reason"])
    )
    assert f"Apply {layer} in the input pipeline (dataset.map)" in keep["jit_reason"]
    assert keep["jit_fix"] == fits["first"]["jit_fix"] and fits["keep_warnings"] == []  # keep stays quiet


def _models():
    import keras

    color = keras.Input(shape=(1,), dtype="string", name="color")
    num = keras.Input(shape=(3,), name="num")

    def lookup(name):
        return keras.layers.StringLookup(vocabulary=["red", "blue"], output_mode="one_hot", name=name)

    on_input = lookup("color_lookup")
    head = keras.layers.Dense(1)
    as_list = keras.Model([num, color], head(keras.layers.Concatenate()([num, on_input(color)])))
    sequential = keras.Sequential([keras.Input((1,), dtype="string"), lookup("seq_lookup"), keras.layers.Dense(1)])
    twice = lookup("twice")  # called on two inputs: no one input of the model stands for its output
    other = keras.Input(shape=(1,), dtype="string", name="other")
    shared = keras.Model([color, other], keras.layers.Concatenate()([twice(color), twice(other)]))
    return as_list, sequential, shared


def test_the_move_is_written_for_list_and_sequential_models_and_withheld_where_it_would_change_the_model():
    pytest.importorskip("tensorflow")
    as_list, sequential, shared = _models()
    code = pipeline_move(as_list, ["color_lookup"]).code
    assert "inputs[1] = color_lookup.output" in code
    assert "    return (x[0], color_lookup(x[1]))" in code and "dataset.map(preprocess_batch)" in code
    assert "keras.Model(seq_lookup.output, model.outputs[0])" in pipeline_move(sequential, ["seq_lookup"]).code
    assert pipeline_move(shared, ["twice"]) is None
    import keras

    numbers = keras.Input((3,))
    trains = keras.Model(numbers, keras.layers.Dense(1, name="trains")(numbers))
    assert pipeline_move(trains, ["trains"]) is None  # out of the model, its weights would train no more
    assert pipeline_move(as_list, []) is None
    for move in (pipeline_move(as_list, ["color_lookup"]), pipeline_move(sequential, ["seq_lookup"])):
        compile(move.code, "<move>", "exec")
        assert max(map(len, move.code.splitlines())) <= 100


def _moved(code, model):
    """The move's statements run as written, up to the compile the user fills in: (the model after the
    moved layers, ``preprocess``)."""
    import keras

    scope = {"keras": keras, "model": model}
    for statement in ast.parse(code).body:
        if ast.get_source_segment(code, statement).startswith("model.compile("):
            return scope["model"], scope["preprocess"]
        exec(compile(ast.Module([statement], []), "<jit_fix>", "exec"), scope)
    raise AssertionError("the move's code has no model.compile(...)")


@pytest.mark.slow  # it predicts
@pytest.mark.filterwarnings("ignore:When providing `inputs` as a dict")  # Keras's, on the moved input's name
def test_preprocess_then_the_model_after_the_move_computes_what_the_whole_model_did():
    pytest.importorskip("tensorflow")
    import keras

    as_list, sequential, _ = _models()
    long_layer, long_key = "a_lookup_layer_with_a_name_" + "x" * 100, "an_input_named_at_length_" + "k" * 50
    text = keras.Input(shape=(1,), dtype="string", name=long_key)
    num = keras.Input(shape=(3,), name="num")
    lookup = keras.layers.StringLookup(vocabulary=["red", "blue"], output_mode="one_hot", name=long_layer)
    head = keras.layers.Dense(1)(keras.layers.Concatenate()([num, lookup(text)]))
    as_dict = keras.Model({long_key: text, "num": num}, head)
    import tensorflow as tf

    colors = tf.constant([["red"], ["blue"], ["green"], ["red"]])  # Keras's predict takes no numpy strings
    numbers = np.arange(12, dtype="float32").reshape(4, 3)
    cases = [
        (as_list, "color_lookup", [numbers, colors]),
        (sequential, "seq_lookup", colors),
        (as_dict, long_layer, {long_key: colors, "num": numbers}),
    ]
    for model, layer, x in cases:
        code = pipeline_move(model, [layer]).code
        assert max(map(len, code.splitlines())) <= CODE_WIDTH, code  # laid out by its generator, long names too
        after, preprocess = _moved(code, model)
        assert after is not model and {w.name for w in after.weights} <= {w.name for w in model.weights}
        # As the code's own predict line has it: model.predict(preprocess(x)).
        np.testing.assert_allclose(after.predict(preprocess(x), verbose=0), model.predict(x, verbose=0), rtol=1e-6)
