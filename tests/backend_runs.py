"""One scenario script per Keras backend, each in its own subprocess with XLA's dump, side by side.

Used by test_fix_ground_truth.py and test_fastest_fits.py: XLA_FLAGS must be set before the backend
is imported, so each backend's scenarios run in a process of their own (forked from a server that imported
TensorFlow, or a fresh one under JAX: tests/forked.py) that writes its results as JSON; the two
processes are two jobs, each run once per session (tests/runs.py).
"""

import json
import os
import sys

import forked
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("tensorflow", "jax")


def backend_jobs(script, root, what, timeout=900):
    """{backend: a job running ``script`` in a fresh process under that Keras backend and returning
    the JSON it wrote}: for tests/runs.py. The JAX job skips when JAX is absent."""

    def run(backend):
        if backend == "jax":
            pytest.importorskip("jax")
        out, dump = root / f"{backend}.json", root / f"dump-{backend}"
        proc = forked.run(
            [sys.executable, os.path.join(HERE, script), str(out), str(dump)],
            env=forked.script_env(backend, dump=str(dump)),
            timeout=timeout,
        )
        assert proc.returncode == 0, f"{backend} {what} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}"
        with open(out) as f:
            return json.load(f)

    return {backend: (lambda backend=backend: run(backend)) for backend in BACKENDS}
