"""What users of other stacks get: an older Keras, tf_keras models, `python -m xla_keras`.

Real packages, in fresh processes: Keras 3.6 (the list-of-batches branch the monitor needs came
in 3.7) and tf_keras (TF_USE_LEGACY_KERAS=1) are installed into isolated target directories from
the package registry and put first on PYTHONPATH, next to the TensorFlow under test.
"""

import os
import subprocess
import sys

import pytest

# Imported, not skipped: in the compatibility tier a TensorFlow that stopped importing is the bug.
import tensorflow as tf
from runs import Runs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_compat")]  # every test here fits (in a subprocess)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIT = """
import os, warnings
import numpy as np

{imports}
model = {model}
model.compile("sgd", "mse")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on")
    history = model.fit(np.ones((64, 4), "float32"), np.ones((64, 1), "float32"), batch_size=16, epochs=2,
                        verbose=0, callbacks=[monitor])
ours = [str(w.message) for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning)]
print("EPOCHS", len(history.history["loss"]))
print("WARNINGS", len(ours))
print("WARNING", " ".join(ours[0].split()) if ours else "")  # the console form wraps at 100 columns
print("ACTIVE", monitor.report.jit_active)
"""


def _target(root, requirement):
    """``requirement`` alone (no dependencies) in a directory of its own."""
    target = root / requirement.split("=")[0]
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), requirement],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PIP_ROOT_USER_ACTION="ignore", PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    assert proc.returncode == 0, f"could not install {requirement} from the registry:\n{proc.stderr[-2000:]}"
    return str(target)


def _run(code, first_on_path, **env):
    path = os.pathsep.join([first_on_path, ROOT, os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=path, CUDA_VISIBLE_DEVICES="", **env),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def _fits_on_other_stacks(root):
    major, minor = tf.__version__.split(".")[:2]
    return {
        "keras 3.6": lambda: _run(
            FIT.format(
                imports="import keras, xla_keras\nassert keras.__version__ == '3.6.0'",
                model="keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])",
            ),
            _target(root, "keras==3.6.0"),
        ),
        "tf_keras": lambda: _run(
            FIT.format(
                imports="import tensorflow as tf, xla_keras",
                model="tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])",
            ),
            _target(root, f"tf_keras=={major}.{minor}.*"),
            TF_USE_LEGACY_KERAS="1",
        ),
    }


@pytest.fixture(scope="module")
def other_stacks(tmp_path_factory):
    return Runs(_fits_on_other_stacks, tmp_path_factory, "test_compat::other_stacks")


def test_keras_older_than_3_7_steps_aside_with_one_warning_and_the_fit_goes_on(other_stacks):
    out = other_stacks["keras 3.6"]
    assert out["EPOCHS"] == "2"  # the user's fit ran to the end
    assert out["WARNINGS"] == "1"
    for words in ("Keras 3.6.0", "one_step_on_iterator", 'pip install "keras>=3.7"', "TensorFlow 2.16"):
        assert words in out["WARNING"]
    assert out["ACTIVE"] == "None"  # no claim about XLA from a monitor that did not watch


def test_a_tf_keras_model_is_refused_naming_the_cause_and_its_fit_goes_on(other_stacks):
    out = other_stacks["tf_keras"]
    assert out["EPOCHS"] == "2"
    assert out["WARNINGS"] == "1"
    assert "tf_keras" in out["WARNING"] and "TF_USE_LEGACY_KERAS" in out["WARNING"]
    assert out["ACTIVE"] == "None"


def test_python_dash_m_xla_keras_is_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "xla_keras", "--version"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.startswith("xla-keras ")
    proc = subprocess.run(
        [sys.executable, "-m", "xla_keras", "nonsense"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 2 and "report, diff, doctor, explain" in proc.stderr
