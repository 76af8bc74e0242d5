"""The benchmarks' --quick modes, so the scripts cannot rot. Figures are not
asserted here (noisy machines): they live in the README, measured side by side."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("script, expect", [
    ("overhead.py", ["XlaMonitor()", "keras TensorBoard(update_freq='batch')", "vs bare"]),
    ("storm_payoff.py", ["storm", "fallback", "jit off", "vs storm"]),
    ("accuracy.py", ["batch sizes 16..23, jit on", "timing fallback (profiler busy)", "dumped"]),
    ("import_time.py", ["import xla_keras", "loads TensorFlow/Keras: no"]),
    ("memory.py", ["100 distinct signatures (reported: 100)", "bound:"]),
    ("cold_start.py", ["quickstart  yes", "storm       yes", "loaded"]),
    ("strategy_overhead.py", ["Mirrored (2 logical CPUs)", "MultiWorker (2 workers)", "eager pull", "vs bare"]),
])
def test_benchmark_quick_mode_runs(script, expect):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), "--quick"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    for word in expect:
        assert word in result.stdout
    assert "COUNT MISMATCH" not in result.stdout  # accuracy.py: counts must equal XLA's dump
