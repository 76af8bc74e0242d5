"""The benchmarks' --quick modes, so the scripts cannot rot. Figures are not
asserted here (noisy machines): they live in the README, measured side by side.
The scripts run two at a time (each is mostly one busy core), once per session."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPECT = {
    "overhead.py": ["XlaMonitor()", "keras TensorBoard(update_freq='batch')", "vs bare"],
    "storm_payoff.py": [
        "storm",
        "fallback",
        "jit off",
        "vs storm",
        "bucket ",
        "tokens/epoch",
        "stated padding vs real",
    ],
    "accuracy.py": ["batch sizes 16..23, jit on", "timing fallback (profiler busy)", "dumped"],
    "import_time.py": ["import xla_keras", "loads TensorFlow/Keras: no"],
    "memory.py": ["100 distinct signatures (reported: 100)", "bound:"],
    "cold_start.py": ["quickstart  yes", "storm       yes", "loaded"],
    "strategy_overhead.py": ["Mirrored (2 logical CPUs)", "MultiWorker (2 workers)", "eager pull", "vs bare"],
    "step_path.py": ["XlaMonitor(update_freq='epoch')", "XlaMonitor(update_freq='batch')", "us per step"],
    "tab_backend.py": ["the ledger has 100 rows", "opening the tab", "ms of backend time"],
    "fastest.py": ["backend=tensorflow", "fastest / better", "mlp", "cnn", "storm", "rounds: off"],
    # Keras's JAX backend: the overhead beside a bare JAX fit, and the accelerator check run on CPU.
    "overhead.py --backend jax --model mlp": ["backend=jax", "XlaMonitor()", "vs bare"],
    "gpu_check.py": [
        "devices: 1 x cpu",
        "train: monitor 8, dump 8  ok",
        "test : monitor 2, dump 2  ok",
        "x vs bare",
        "RESULT ok",
    ],
}


@pytest.fixture(scope="module")
def quick_runs():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(script):
        name, *args = script.split()
        return subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", name), "--quick", *args],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )

    # The slowest first, so that the pairs finish together.
    order = [
        "cold_start.py",
        "strategy_overhead.py",
        "storm_payoff.py",
        "fastest.py",
        "accuracy.py",
        "overhead.py",
        "gpu_check.py",
        "overhead.py --backend jax --model mlp",
        "import_time.py",
        "memory.py",
        "step_path.py",
        "tab_backend.py",
    ]
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(order, pool.map(run, order)))


@pytest.mark.parametrize("script", sorted(EXPECT))
def test_benchmark_quick_mode_runs(quick_runs, script):
    result = quick_runs[script]
    assert result.returncode == 0, result.stderr[-4000:]
    for word in EXPECT[script]:
        assert word in result.stdout
    assert "COUNT MISMATCH" not in result.stdout  # accuracy.py: counts must equal XLA's dump


@pytest.mark.parametrize(
    "args, words",
    [
        (["--workload", "mlp,rnn"], ["unknown ['rnn']", "mlp, cnn, wide, storm"]),
        (["--steps", "0"], ["--steps", "a positive number of train steps, not 0"]),
    ],
)
def test_fastest_names_the_valid_choices(args, words):
    """Bad arguments stop the benchmark before any fit, saying what is accepted."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "fastest.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    for word in words:
        assert word in result.stderr
