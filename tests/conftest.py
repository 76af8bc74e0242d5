"""The session's shared parts: the ground-truth scenarios (each run once in a subprocess, read by
tests/test_ground_truth.py, test_truth.py and test_doctor_explain.py: one ``xdist_group``), a per-test
check of every XlaKerasWarning's shape, a collection after each test that fits in process, and the
order that starts the long groups first.

pytest-xdist runs the main suite on both cores (``-n 2 --dist loadgroup``, scripts/test.sh); the tests
marked ``timed`` run after it, alone, in a second invocation (``-m timed``). A test is ``slow`` (the
quick tier skips it) by its own mark or its module's ``pytestmark``; ``scenario`` and ``timed`` mean
slow too. A test with none of those marks that starts a fit fails (``_no_fit_in_the_quick_tier``): it
would slow the quick tier.

Hypothesis draws a quarter of its examples in the quick tier (``XLA_KERAS_TEST_TIER=quick``, set by
``scripts/test.sh --quick``: the inner loop), and all of them everywhere else (the main suite, CI).
"""

import functools
import gc
import os
import signal
import sys
import sysconfig
import warnings
from typing import List

import pytest
from runs import Runs
from scenario import run_scenario

from xla_keras.errors import XlaKerasWarning

try:  # the compatibility tier's TensorFlow venvs run no property test: no hypothesis there
    from hypothesis import settings
except ImportError:
    pass
else:
    settings.register_profile("quick", max_examples=25)  # hypothesis's default, 100, a quarter
    if os.environ.get("XLA_KERAS_TEST_TIER") == "quick":
        settings.load_profile("quick")

# Every subprocess fit the ground-truth tests need, each run once per session, at its first reader.
RUNS = {
    "batch_sizes-on": ("batch_sizes", "on", {}),
    "partial_batch-on": ("partial_batch", "on", {}),
    "padded-on": ("padded", "on", {}),
    "steps_per_execution-on": ("steps_per_execution", "on", {}),
    "nested-on": ("nested", "on", {}),
    "partial_batch-off": ("partial_batch", "off", {}),
    "partial_batch-keep": ("partial_batch", "keep", {}),
    "partial_batch-auto-env": ("partial_batch", "autoclustering", {"env_flags": "--tf_xla_cpu_global_jit"}),
    # With a log_dir: the automatic trace window falls on probed auto-clustering calls (the notes' checks).
    "partial_batch-auto-configure": ("partial_batch", "autoclustering", {"extra_args": ("--configure",), "logs": True}),
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


def _scenario_jobs(root):
    def launch(key):
        scenario, jit, kwargs = RUNS[key]
        tmp = root / key
        tmp.mkdir()
        extra = tuple(kwargs.get("extra_args", ()))
        if "--profiler-busy" in extra or kwargs.get("logs"):
            extra += ("--log-dir", str(tmp / "logs"))
        return run_scenario(str(tmp), scenario, jit, env_flags=kwargs.get("env_flags", ""), extra_args=extra)

    return {key: (lambda key=key: launch(key)) for key in RUNS}


@pytest.fixture(scope="session")
def scenario_runs(tmp_path_factory):
    """``scenario_runs(key)``: the scenario's run (started at its first reader), read."""
    return Runs(_scenario_jobs, tmp_path_factory, "scenario_runs")


def pytest_configure(config):
    # A shell without job control starts background commands with SIGINT ignored, and then Python
    # never installs its Ctrl-C handler: `_thread.interrupt_main()` (the real Ctrl-C of the fault
    # tests) would do nothing. Give the tests the handler an interactive Python has.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """``scenario`` and ``timed`` tests are slow (before -m deselects); then the order xdist hands out
    work in: the grouped tests first (a group's runs are the longest units: started first, they do not
    end the session alone), then the other slow tests, then the quick ones, which fill the gaps."""
    for item in items:
        if item.get_closest_marker("slow") is None and (
            item.get_closest_marker("scenario") is not None or item.get_closest_marker("timed") is not None
        ):
            item.add_marker(pytest.mark.slow)

    def rank(item):
        return 0 if item.get_closest_marker("xdist_group") is not None else 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)  # stable: each module's tests keep their order


# Every XlaKerasWarning a test provokes (outside pytest.warns, which checks its own): at most 4 lines of
# at most 100 characters, located at the caller's code, never at xla_keras's, a framework's or any installed
# package's own files (site-packages, dist-packages, the standard library).
_NOT_USER_FILES = (
    "/xla_keras/",
    "/keras/",
    "/keras_hub/",
    "/tensorflow/",
    "/jax/",
    "/tf_keras/",
    "/site-packages/",
    "/dist-packages/",
)
_STDLIB = tuple(
    os.path.realpath(sysconfig.get_paths()[key]).replace(os.sep, "/") + "/" for key in ("stdlib", "platstdlib")
)


def _bad_shape(caught: warnings.WarningMessage) -> bool:
    lines = str(caught.message).splitlines()
    where = caught.filename.replace(os.sep, "/")
    library = any(p in where for p in _NOT_USER_FILES) or caught.filename.startswith("<frozen ")
    library = library or os.path.realpath(caught.filename).replace(os.sep, "/").startswith(_STDLIB)
    return len(lines) > 4 or max(map(len, lines), default=0) > 100 or library


@pytest.fixture(autouse=True)
def _no_fix_applied_before():
    """Each test starts with no fix recorded as applied (``xla_keras.data.applied``): the advice of a
    test's fit recognises only the fixes that test applied."""
    from xla_keras.data import applied

    applied.forget()
    yield


@pytest.fixture(autouse=True)
def _warnings_have_our_shape():
    """Records the test's warnings, hands each on to pytest's own record, and fails the test when one of
    ours is too long or located in a library's code."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    bad: List[str] = []
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        if issubclass(w.category, XlaKerasWarning) and _bad_shape(w):
            bad.append(f"{w.filename}:{w.lineno}: {str(w.message).splitlines()}")
    if bad:
        pytest.fail("XlaKerasWarning too long or located in our code:\n" + "\n".join(bad), pytrace=False)


# A finished fit's tf.data iterator that waits in a reference cycle (an exception's traceback, a
# test's ExceptionInfo) is freed by whichever later garbage collection finds it, and its destructor
# waits, holding the GIL, for its autotuning thread's next wake-up, whose period doubles with the
# iterator's age up to 60 s (seen with py-spy: ~IteratorResource -> WaitForNotification). Measured:
# stalls of 17-55 s inside unrelated in-process tests. So after each slow test that is no ``scenario``
# (those read subprocess runs), a collection frees its cycles while they are young; gc.freeze() after
# the first keeps each to what the tests made since (92 collections: 6.8 s in all, against a 17.7 s
# stall in the same tests).
_COLLECTED: List[bool] = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if item.get_closest_marker("slow") is None or item.get_closest_marker("scenario") is not None:
        return
    gc.collect()
    if not _COLLECTED:
        gc.freeze()  # after this first test's cycles are gone: what is older is never scanned again
        _COLLECTED.append(True)


# A test that starts a fit is slow, and says so (its mark, or its module's): one without the mark would slow
# the quick tier. While such a test runs, Keras's fit / evaluate / predict fail, naming the mark (patched
# for that test only: a slow test's fits keep their own frames, which the warnings' locations are read on).
_MARKS = ("slow", "scenario", "timed")


def _refusing(test_id, name, original):
    @functools.wraps(original)
    def refused(self, *args, **kwargs):
        pytest.fail(
            f"{test_id} starts a {name} but is not marked slow (or scenario, timed): the quick tier runs the "
            "tests that start no fit",
            pytrace=False,
        )

    return refused


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    keras = sys.modules.get("keras")
    quick = not any(item.get_closest_marker(mark) for mark in _MARKS)
    saved = {}
    if quick and keras is not None and hasattr(keras, "Model"):
        for name in ("fit", "evaluate", "predict"):
            saved[name] = keras.Model.__dict__.get(name)
            setattr(keras.Model, name, _refusing(item.nodeid, name, getattr(keras.Model, name)))
    try:
        yield
    finally:
        for name, original in saved.items():
            if original is None:
                delattr(keras.Model, name)  # inherited: the trainer's own again
            else:
                setattr(keras.Model, name, original)
