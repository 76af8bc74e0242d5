"""tests/forked.py's children behave as the fresh processes they stand in for: each reads its own XLA and
TensorFlow flags (XLA's dump, TensorFlow's flag parser), exits, prints and times out as ``subprocess.run``
does for the same command, and a script that sets an import-time variable itself fails loudly."""

import os
import subprocess
import sys

import forked
import pytest

pytestmark = [
    pytest.mark.slow,  # each server imports a framework
    pytest.mark.skipif(not forked._FORKS, reason="TensorFlow before 2.18: every script runs as a plain subprocess"),
]

FIT = (
    "import keras, numpy as np\n"
    "m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])\n"
    "m.compile('sgd', 'mse', jit_compile=True)\n"
    "m.fit(np.ones((8, 3)), np.ones((8, 1)), verbose=0)\n"
    "print('backend', keras.backend.backend())\n"
)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "XLA_FLAGS")}
    return dict(env, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", **extra)


def _modules(dump):
    return [f for f in os.listdir(dump) if f.endswith(".before_optimizations.txt")] if os.path.isdir(dump) else []


def test_each_child_dumps_to_its_own_xla_flags(tmp_path):
    backend = "tensorflow"
    pytest.importorskip(backend)
    dumps = [tmp_path / "first", tmp_path / "second"]
    for dump in dumps:
        env = _env(KERAS_BACKEND=backend, XLA_FLAGS=f"--xla_dump_to={dump}")
        run = forked.run([sys.executable, "-c", FIT], env=env, timeout=300)
        assert run.returncode == 0 and f"backend {backend}" in run.stdout, run.stderr[-3000:]
    # The same fit in each child: the same modules, each in the directory its own XLA_FLAGS named.
    first, second = (sorted(_modules(d)) for d in dumps)
    assert first and len(first) == len(second)


def test_each_child_parses_its_own_tf_xla_flags():
    pytest.importorskip("tensorflow")
    code = "import tensorflow as tf\nprint((tf.constant(1.0) + 1.0).numpy())\n"
    env = _env(KERAS_BACKEND="tensorflow")
    bad = forked.run([sys.executable, "-c", code], env=dict(env, TF_XLA_FLAGS="--no_such_flag"), timeout=300)
    fresh = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env, TF_XLA_FLAGS="--no_such_flag"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == fresh.returncode != 0
    assert "Unknown flag in TF_XLA_FLAGS: --no_such_flag" in bad.stderr
    good = forked.run([sys.executable, "-c", code], env=env, timeout=300)
    assert good.returncode == 0 and good.stdout.strip() == "2.0"


@pytest.mark.parametrize(
    "code",
    [
        "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n",
        "import sys\nprint('partial', end='')\nsys.exit('a message')\n",
        "raise ValueError('from the script')\n",
        "import atexit\natexit.register(lambda: print('at exit'))\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
    ],
)
def test_exit_codes_and_output_are_a_fresh_processs(code):
    pytest.importorskip("tensorflow")
    env = _env(KERAS_BACKEND="tensorflow")
    child = forked.run([sys.executable, "-c", code], env=env, timeout=300)
    fresh = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert (child.returncode, child.stdout) == (fresh.returncode, fresh.stdout)
    assert child.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]


def test_a_child_past_its_timeout_is_killed_with_what_it_printed():
    pytest.importorskip("tensorflow")
    code = "import time\nprint('started', flush=True)\ntime.sleep(120)\n"
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        forked.run([sys.executable, "-c", code], env=_env(KERAS_BACKEND="tensorflow"), timeout=3)
    assert stopped.value.output == "started\n"


def test_a_script_that_sets_the_backend_itself_fails_loudly():
    pytest.importorskip("tensorflow")
    code = "import os\nos.environ['KERAS_BACKEND'] = 'jax'\n"
    run = forked.run([sys.executable, "-c", code], env=_env(KERAS_BACKEND="tensorflow"), timeout=300)
    assert run.returncode == 70 and "KERAS_BACKEND" in run.stderr and "give it in the run's environment" in run.stderr


def test_a_server_forks_with_one_thread():
    """A fork copies the calling thread only: a thread the framework's import started (and any lock it
    held) would be missing in every child. OpenBLAS (numpy's) stops its workers before a fork."""
    pytest.importorskip("tensorflow")
    env = _env(KERAS_BACKEND="tensorflow")
    forked.run([sys.executable, "-c", "pass"], env=env, timeout=300)  # the server is up and has forked
    assert os.listdir(f"/proc/{forked._server(env)._proc.pid}/task") != []
    assert len(os.listdir(f"/proc/{forked._server(env)._proc.pid}/task")) == 1


def test_a_jax_run_is_a_plain_subprocess():
    child = forked.start([sys.executable, "-c", "import os; print(os.getppid())"], env=_env(KERAS_BACKEND="jax"))
    out, _ = child.communicate(timeout=300)
    assert isinstance(child, subprocess.Popen) and int(out) == os.getpid()
