"""Session fixtures: the ground-truth scenarios, run once in subprocesses."""

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
from scenario import run_scenario  # tests/ is on sys.path under pytest

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
    "partial_batch-off-env-auto-jit": (
        "partial_batch",
        "off",
        {"env_flags": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"},
    ),
    "partial_batch-keep-env-auto-jit": (
        "partial_batch",
        "keep",
        {"env_flags": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"},
    ),
    "mirrored-auto-env": ("mirrored", "autoclustering", {"env_flags": "--tf_xla_cpu_global_jit"}),
    "mirrored-fastest": ("mirrored", "fastest", {}),
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
        return run_scenario(str(tmp), scenario, jit, env_flags=kwargs.get("env_flags", ""), extra_args=extra)

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


def pytest_configure(config):
    # A shell without job control starts background commands with SIGINT ignored, and then Python
    # never installs its Ctrl-C handler: `_thread.interrupt_main()` (the real Ctrl-C of the fault
    # tests) would do nothing. Give the tests the handler an interactive Python has.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
