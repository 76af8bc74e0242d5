"""``xla_keras.testing.expect_compiles`` and the ``xla_compiles`` pytest fixture: real fits
under TensorFlow in this process, and under JAX in a pytest of its own that finds the fixture through
the ``pytest11`` entry point."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from xla_keras.testing import expect_compiles

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def _data(rows):
    rng = np.random.default_rng(0)
    return rng.random((rows, 4), dtype=np.float32), rng.random((rows, 1), dtype=np.float32)


@pytest.mark.slow
def test_a_model_that_compiles_once_passes_and_a_ragged_last_batch_fails_naming_the_batch_axis():
    model = _model()
    with expect_compiles(train=1, test=1) as expected:  # fit's validation: Keras passes its callback list on
        model.fit(*_data(64), batch_size=32, epochs=2, validation_data=_data(32), verbose=0)
    assert [c.phase for c in expected.compilations] == ["train", "test"]
    assert expected.counts == {"train": 1, "test": 1, "predict": 0}
    with pytest.raises(AssertionError) as failed:
        with expect_compiles(train=1):
            _model().fit(*_data(72), batch_size=32, epochs=1, verbose=0)  # 32, 32, then 8 rows
    message = str(failed.value)
    assert message.startswith("expected 1 train compile(s), saw 2:")
    assert "train step 3: x:float32[8,4] y:float32[8,1] (batch 32 → 8 (last batch))" in message


@pytest.mark.slow
def test_as_a_decorator_each_phase_is_held_to_its_own_count():
    model = _model()

    @expect_compiles(train=1, test=1, predict=1)
    def train_and_use():
        model.fit(*_data(64), batch_size=32, epochs=1, verbose=0)
        model.evaluate(*_data(64), batch_size=32, verbose=0)
        model.predict(_data(64)[0], batch_size=32, verbose=0)

    train_and_use()
    with pytest.raises(AssertionError, match=r"expected 0 test compile\(s\), saw 1"):
        with expect_compiles(train=None, test=0):
            _model().evaluate(*_data(64), batch_size=32, verbose=0)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"train": -1}, "train must be a count >= 0 or None (not checked); got -1"),
        ({"test": 1.5}, "test must be a count >= 0 or None (not checked); got 1.5"),
        ({"predict": True}, "predict must be a count >= 0 or None (not checked); got True"),
        ({"max_compile_seconds": 0}, "max_compile_seconds must be > 0 or None; got 0"),
        ({"max_compile_seconds": "1s"}, "max_compile_seconds must be > 0 or None; got '1s'"),
    ],
)
def test_bad_bounds_name_what_is_accepted(kwargs, words):
    with pytest.raises(ValueError) as error:
        expect_compiles(**kwargs)
    assert words in str(error.value)


def test_the_plugin_imports_no_framework_at_load():
    probe = "import sys, xla_keras.pytest_plugin; print(sorted({'keras', 'tensorflow', 'jax'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr


JAX_TESTS = """
import numpy as np
import keras


def _fit(rows):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(np.ones((rows, 4), "float32"), np.ones((rows, 1), "float32"), batch_size=32, verbose=0)


def test_once(xla_compiles):
    with xla_compiles(train=1):
        _fit(64)


def test_ragged(xla_compiles):
    with xla_compiles(train=1):
        _fit(72)
"""


@pytest.mark.slow
def test_the_fixture_under_jax_found_through_the_entry_point(tmp_path):
    (tmp_path / "test_user.py").write_text(textwrap.dedent(JAX_TESTS))
    env = dict(os.environ, KERAS_BACKEND="jax", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert "1 failed, 1 passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    assert "expected 1 train compile(s), saw 2:" in result.stdout
    assert "(batch 32 → 8 (last batch))" in result.stdout
