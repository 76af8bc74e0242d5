"""One scenario script per Keras backend, each in its own subprocess with XLA's dump, side by side.

Used by test_fix_ground_truth.py and test_fastest_fits.py: XLA_FLAGS must be set before the backend
is imported, so each backend's scenarios run in a fresh process that writes its results as JSON.
"""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BACKENDS = ("tensorflow", "jax")


def run_per_backend(script, root, what, timeout=900):
    """{backend: the JSON ``script`` wrote}, both backends run at once (JAX skipped when absent)."""
    procs = {}
    for backend in BACKENDS:
        if backend == "jax":
            pytest.importorskip("jax")
        out, dump = root / f"{backend}.json", root / f"dump-{backend}"
        env = dict(
            os.environ,
            KERAS_BACKEND=backend,
            XLA_FLAGS=f"--xla_dump_to={dump}",
            CUDA_VISIBLE_DEVICES="",
            PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        env.pop("TF_XLA_FLAGS", None)
        procs[backend] = (
            subprocess.Popen(
                [sys.executable, os.path.join(HERE, script), str(out), str(dump)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
            out,
        )
    results = {}
    for backend, (proc, out) in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{backend} {what} failed:\n{stdout[-2000:]}\n{stderr[-6000:]}"
        with open(out) as f:
            results[backend] = json.load(f)
    return results
