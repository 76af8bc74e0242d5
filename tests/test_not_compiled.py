"""What XLA did not compile, and the move that lifts it: a layer Keras refuses to compile
(``supports_jit=False``) named with its move into the input pipeline, as code; the move applied as
written, and XLA's own dump shows the refit compiles (the first fit compiled nothing).

Ground truth: XLA's dump (``--xla_dump_to``), in a fresh process per model (tests/not_compiled_fits.py);
the optimizer's iterations for the steps run.
"""

import json
import os
import subprocess
import sys

import pytest

from xla_keras.jit.pipeline_move import pipeline_move

pytestmark = pytest.mark.xdist_group("test_not_compiled")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = 2 * 4  # two epochs of 64 examples in batches of 16


@pytest.fixture(scope="module", params=["dict", "single"])
def fits(request, tmp_path_factory):
    pytest.importorskip("tensorflow")
    dump = str(tmp_path_factory.mktemp(f"dump_{request.param}"))
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_dump_to={dump}",
        KERAS_BACKEND="tensorflow",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "not_compiled_fits.py"), dump, request.param],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_FITS ")][-1]
    return json.loads(line[len("XLA_KERAS_FITS ") :])


@pytest.mark.slow
def test_the_refusal_names_the_layer_and_its_move_and_nothing_compiled(fits):
    first = fits["first"]
    assert fits["dumped_after_first"] == []  # XLA compiled nothing: Keras refused jit_compile=True
    assert first["jit_active"] is False and first["compilation_count"]["train"] == 0
    assert "Keras refused jit_compile=True (layers with supports_jit=False: color_lookup)" in first["jit_reason"]
    assert "Apply color_lookup in the input pipeline (dataset.map)" in first["jit_reason"]
    (warning,) = fits["warnings"]  # once, in our shape (tests/conftest.py checks the shape in process)
    lines = warning.splitlines()
    assert len(lines) <= 4 and max(map(len, lines)) <= 100 and "color_lookup" in warning
    assert "monitor.report.jit_fix" in warning
    code = first["jit_fix"]
    assert 'model.get_layer("color_lookup")' in code and "dataset.map(" in code
    assert "  fix (code)      :" in fits["printed"] and all(len(ln) <= 100 for ln in fits["printed"].splitlines())


@pytest.mark.slow
def test_the_move_applied_as_written_compiles_the_rest_as_xlas_dump_shows(fits):
    refit = fits["refit"]
    steps = [f for f in fits["dumped_after_refit"] if "one_step_on_data" in f]
    assert steps, fits["dumped_after_refit"]  # XLA compiled the train step, where it compiled nothing before
    assert refit["jit_active"] is True and refit["jit_fix"] is None and fits["refit_warnings"] == []
    assert refit["compilation_count"]["train"] == len(steps)
    assert fits["iterations"] == STEPS == refit["steps"]["train"]  # the refit's own optimizer


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
    assert "dataset.map(lambda x, y: ((x[0], color_lookup(x[1])), y))" in code
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
