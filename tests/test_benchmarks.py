"""The benchmarks' --quick modes, so the scripts cannot rot. Figures are not
asserted here (noisy machines): they live in docs/benchmarks.md, measured side by side.
Each script runs once per session (tests/runs.py). Those that fit under TensorFlow in their own process
run as children of one fork server (tests/forked.py): TensorFlow and Keras imported once for all of
them; the rest (Keras's JAX backend, the import and cold-start timers, the scripts that start their own
processes) run as fresh interpreters."""

import os
import subprocess
import sys

import forked
import pytest
from runs import Runs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("test_benchmarks"),
]  # every test here fits (in process or in a subprocess)

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
    "accuracy.py": ["timing fallback (profiler busy)", "dumped"],
    "import_time.py": ["import xla_keras", "loads TensorFlow/Keras: no"],
    "memory.py": ["100 distinct signatures (reported: 100)", "bound:"],
    "cold_start.py": ["storm       yes", "loaded"],
    "strategy_overhead.py": ["Mirrored (2 logical CPUs)", "MultiWorker (2 workers)", "eager pull", "vs bare"],
    "step_path.py": ["XlaMonitor(update_freq='epoch')", "XlaMonitor(update_freq='batch')", "us per step"],
    "tab_backend.py": ["the ledger has 100 rows", "opening the tab", "ms of backend time"],
    "fastest.py": ["backend=tensorflow", "fastest / better", "mlp", "cnn", "storm", "rounds: off"],
    # Keras's JAX backend: the overhead beside a bare JAX fit, and the accelerator check run on CPU.
    "overhead.py --backend jax --model tiny": ["backend=jax", "XlaMonitor()", "no-op callback", "paired"],
    "step_path.py --backend jax": ["backend=jax", "XlaMonitor(update_freq='epoch')", "us per step"],
    "precompile.py --backend jax": ["backend=jax", "precompile:1", "compiles in the loop 0", "vs none"],
    "gpu_check.py": [
        "devices: 1 x cpu",
        "train: monitor 8, dump 8  ok",
        "test : monitor 2, dump 2  ok",
        "x vs bare",
        "precompile of 8 batch sizes before step 1",
        "1 thread(s): 8 shapes in",
        "0 compiles in the loop",
        "RESULT ok",
    ],
}


# The scripts that fit under TensorFlow in their own process, and start no other (forked.run).
FITS_UNDER_TENSORFLOW = {"memory.py", "overhead.py", "step_path.py", "storm_payoff.py", "tab_backend.py"}


def _quick_jobs(root):
    def run(script):
        name, *args = script.split()
        argv = [sys.executable, os.path.join(ROOT, "benchmarks", name), "--quick", *args]
        if name not in FITS_UNDER_TENSORFLOW or "jax" in args:
            env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
            return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
        return forked.run(argv, env=forked.script_env("tensorflow"), timeout=600)

    # The slowest first, so that the lanes finish together.
    order = [
        "cold_start.py",
        "fastest.py",
        "precompile.py --backend jax",
        "storm_payoff.py",
        "strategy_overhead.py",
        "accuracy.py",
        "overhead.py",
        "import_time.py",
        "memory.py",
        "gpu_check.py",
        "overhead.py --backend jax --model tiny",
        "step_path.py",
        "step_path.py --backend jax",
        "tab_backend.py",
    ]
    return {script: (lambda script=script: run(script)) for script in order}


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    return Runs(_quick_jobs, tmp_path_factory, "test_benchmarks::quick_runs")


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
