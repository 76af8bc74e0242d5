"""The cost card against ground truth: FLOPs against the analytic count of each model's products,
memory against XLA's own buffer assignment, and no second compile (XLA's dump holds one step module
per compile the ledger counts).

Each backend's fits run in a subprocess (tests/cost_scenarios.py), JAX's with ``--xla_dump_to``. The
models' sizes are those of the scenario script, not of any other test or benchmark.
"""

import collections
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from side_by_side import family, start

pytestmark = pytest.mark.scenario

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "cost_scenarios.py")
ROOT = os.path.dirname(HERE)
MODELS = ("dense", "conv")
PHASES = ("train", "test")
BACKENDS = [b for b in ("jax", "tensorflow") if importlib.util.find_spec(b) is not None]


def _run(tmp, backend):
    out = os.path.join(tmp, f"cost_{backend}.json")
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if backend == "jax":
        env["XLA_FLAGS"] = f"--xla_dump_to={os.path.join(tmp, 'dump_jax')}"
    proc = subprocess.run([sys.executable, SCRIPT, out], env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"cost scenarios ({backend}) failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    with open(out) as f:
        return json.load(f)


@family("test_cost_ground_truth::runs", seconds=20)
def _cost_jobs(root):
    return {backend: (lambda backend=backend: _run(str(root), backend)) for backend in BACKENDS}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return start("test_cost_ground_truth::runs", tmp_path_factory)


def _first(report, phase):
    return next(c for c in report["compilations"] if c["phase"] == phase)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("phase", PHASES)
def test_flops_are_within_10_percent_of_the_analytic_count(runs, backend, model, phase):
    run = runs[backend][model]
    cost = _first(run["report"], phase)["cost"]
    ratio = cost["flops"] / run["analytic"][phase]
    assert 1.0 <= ratio <= 1.10, (backend, model, phase, cost["flops"], run["analytic"][phase])
    assert run["report"]["costs"]["train"]["flops_per_step"] == _first(run["report"], "train")["cost"]["flops"]


def _dump_files(run, phase):
    """XLA's files of the phase's step modules dumped during the fit, by module."""
    by_module = collections.defaultdict(list)
    for name in run["dump_files"]:
        match = re.match(rf"(module_\d+)\.jit_{phase}_step\.(.+)$", name)
        if match:
            by_module[match[1]].append(os.path.join(run["dump_dir"], name))
    return by_module


def _buffer_assignment(files):
    """(argument bytes, temp bytes) from XLA's buffer assignment, total bytes from its memory report."""
    (assignment,) = [f for f in files if f.endswith("cpu_after_optimizations-buffer-assignment.txt")]
    (usage,) = [f for f in files if f.endswith("cpu_after_optimizations-memory-usage-report.txt")]
    arguments = temp = 0
    with open(assignment) as f:
        for line in f:
            match = re.match(r"allocation \d+: size (\d+), (.*)$", line)
            if match and match[2].startswith("parameter "):
                arguments += int(match[1])
            elif match and "preallocated-temp" in match[2]:
                temp += int(match[1])
    with open(usage) as f:
        total = int(re.search(r"Total bytes: (\d+)", f.read())[1])
    return arguments, temp, total


@pytest.mark.skipif("jax" not in BACKENDS, reason="JAX is not installed")
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("phase", PHASES)
def test_jax_memory_is_within_10_percent_of_xla_buffer_assignment(runs, model, phase):
    from xla_keras.backends.jax.cost import COMPILE_SERVED_FROM
    from xla_keras.core.versions import installed_version, release

    run = runs["jax"][model]
    modules = _dump_files(run, phase)
    # No second compile for the analysis: one dumped step module per compile the ledger counts.
    assert len(modules) == run["report"]["compilation_count"][phase] == 1, sorted(modules)
    cost = _first(run["report"], phase)["cost"]
    if release(installed_version("jax")) < COMPILE_SERVED_FROM:
        # This JAX compiles again for memory: by default the card reads the lowered step (FLOPs, bytes).
        assert cost["peak_bytes"] is None and not cost["exact"] and "cost='full'" in cost["unavailable"]
        return
    arguments, temp, total = _buffer_assignment(next(iter(modules.values())))
    assert cost["exact"] and cost["unavailable"] is None
    assert 0.9 <= cost["peak_bytes"] / total <= 1.1, (cost, total)
    assert 0.9 <= cost["argument_bytes"] / arguments <= 1.1, (cost, arguments)
    assert cost["temp_bytes"] == temp


@pytest.mark.skipif("tensorflow" not in BACKENDS, reason="TensorFlow is not installed")
def test_tensorflow_names_the_figures_it_cannot_give(runs):
    cost = _first(runs["tensorflow"]["dense"]["report"], "train")["cost"]
    assert cost["bytes_accessed"] is None and cost["peak_bytes"] is None and not cost["exact"]
    assert "bytes accessed and memory" in cost["unavailable"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cost_off_analyses_nothing(runs, backend):
    for model in MODELS:
        report = runs[backend][model]["off"]
        assert report["compilation_count"]["test"] == 1  # the evaluate compiled its new shape...
        assert [c["cost"] for c in report["compilations"]] == [None]  # ...and nothing analysed it
        assert report["costs"] == {}
