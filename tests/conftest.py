import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(ROOT, "tests", "scenario.py")
_TF_COMPILE_LINE = re.compile(r"Compilation of XLA executable time: ([0-9.]+) (ms|us|s)\b")
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class ScenarioRun:
    """One subprocess fit: the monitor's report and XLA's own ground truth."""

    def __init__(self, report, dump_modules, tf_compile_seconds, stderr):
        self.report = report
        self.dump_modules = dump_modules          # *before_optimizations.txt files
        self.tf_compile_seconds = tf_compile_seconds  # TF's own device_compiler lines
        self.stderr = stderr


def run_scenario(tmp_root, scenario, jit, *, env_flags="", extra_args=()):
    dump = os.path.join(tmp_root, "dump")
    env = dict(os.environ)
    env.update({
        "XLA_FLAGS": f"--xla_dump_to={dump}",
        "TF_CPP_MIN_LOG_LEVEL": "0",
        "TF_CPP_VMODULE": "device_compiler=1",
        "PYTHONPATH": ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        "CUDA_VISIBLE_DEVICES": "",
    })
    env.pop("TF_XLA_FLAGS", None)
    if env_flags:
        env["TF_XLA_FLAGS"] = env_flags
    proc = subprocess.run([sys.executable, SCENARIO, scenario, jit, *extra_args], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(
            f"scenario {scenario}/{jit} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_REPORT ")][-1]
    report = json.loads(line[len("XLA_KERAS_REPORT "):])
    modules = 0
    if os.path.isdir(dump):
        modules = sum(1 for f in os.listdir(dump) if f.endswith("before_optimizations.txt"))
    seconds = [float(v) * _UNIT[u] for v, u in _TF_COMPILE_LINE.findall(proc.stderr)]
    return ScenarioRun(report, modules, seconds, proc.stderr)


# Every subprocess fit the ground-truth tests need, run once per session, two at a time.
RUNS = {
    "batch_sizes-on": ("batch_sizes", "on", {}),
    "partial_batch-on": ("partial_batch", "on", {}),
    "padded-on": ("padded", "on", {}),
    "steps_per_execution-on": ("steps_per_execution", "on", {}),
    "nested-on": ("nested", "on", {}),
    "partial_batch-off": ("partial_batch", "off", {}),
    "partial_batch-keep": ("partial_batch", "keep", {}),
    "partial_batch-auto-env": ("partial_batch", "autoclustering", {"env_flags": "--tf_xla_cpu_global_jit"}),
    "partial_batch-auto-configure": ("partial_batch", "autoclustering", {"extra_args": ("--configure",)}),
    "partial_batch-auto-late": ("partial_batch", "autoclustering", {}),
    "batch_sizes-on-busy": ("batch_sizes", "on", {"extra_args": ("--profiler-busy",)}),
    "mirrored-on": ("mirrored", "on", {}),
    "storm-fallback": ("storm", "on", {"extra_args": ("--on-storm", "fallback", "--threshold", "4")}),
    "storm-warn": ("storm", "on", {"extra_args": ("--threshold", "4")}),
    "partial_batch-off-env-auto-jit": ("partial_batch", "off",
                                       {"env_flags": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"}),
    "partial_batch-keep-env-auto-jit": ("partial_batch", "keep",
                                        {"env_flags": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"}),
    "mirrored-auto-env": ("mirrored", "autoclustering", {"env_flags": "--tf_xla_cpu_global_jit"}),
}


@pytest.fixture(scope="session")
def scenario_runs(tmp_path_factory):
    """Lazily run the scenarios a test asks for; all of them on first use."""
    root = tmp_path_factory.mktemp("scenarios")
    results = {}

    def launch(key):
        scenario, jit, kwargs = RUNS[key]
        tmp = root / key
        tmp.mkdir()
        extra = tuple(kwargs.get("extra_args", ()))
        if "--profiler-busy" in extra:
            extra += ("--log-dir", str(tmp / "logs"))
        return run_scenario(str(tmp), scenario, jit, env_flags=kwargs.get("env_flags", ""),
                            extra_args=extra)

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(launch, key) for key in RUNS}
        errors = {}
        for key, future in futures.items():
            try:
                results[key] = future.result()
            except Exception as e:  # noqa: BLE001 - reported per test below
                errors[key] = e

    def get(key):
        if key in errors:
            raise errors[key]
        return results[key]

    return get
