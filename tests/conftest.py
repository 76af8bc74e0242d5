"""The session: the ground-truth scenarios (run once, in subprocesses), the quick tier's marks, and
the order the tests run in (the families' runs on shared lanes beside the quick tests, then their
tests, then the in-process fits alone: tests/side_by_side.py)."""

import gc
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import List

import pytest
import second_process  # tests/ is on sys.path under pytest
from scenario import run_scenario
from side_by_side import FAMILIES, LANES, TIMES, drain, family, start

from xla_keras.errors import XlaKerasWarning

# Every subprocess fit the ground-truth tests need, run once per session on the shared lanes.
RUNS = {
    "batch_sizes-on": ("batch_sizes", "on", {}),
    "partial_batch-on": ("partial_batch", "on", {}),
    "padded-on": ("padded", "on", {}),
    "steps_per_execution-on": ("steps_per_execution", "on", {}),
    "nested-on": ("nested", "on", {}),
    "partial_batch-off": ("partial_batch", "off", {}),
    "partial_batch-keep": ("partial_batch", "keep", {}),
    "partial_batch-auto-env": ("partial_batch", "autoclustering", {"env_flags": "--tf_xla_cpu_global_jit"}),
    # With a log_dir: the automatic trace window falls on probed auto-clustering calls (issue 30's notes).
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


@family("scenario_runs", seconds=55)
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
    """All the scenarios on the shared lanes; ``scenario_runs(key)`` waits for one and reads it."""
    return start("scenario_runs", tmp_path_factory)


_CONFIG: list = []  # the session's config, for the second process's report writer


def pytest_configure(config):
    _CONFIG[:] = [config]
    # A shell without job control starts background commands with SIGINT ignored, and then Python
    # never installs its Ctrl-C handler: `_thread.interrupt_main()` (the real Ctrl-C of the fault
    # tests) would do nothing. Give the tests the handler an interactive Python has.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# ------------------------------------------------------------------ the quick tier
# `bash scripts/test.sh --quick` runs `pytest -m "not slow"`: the tests that start no fit. A test is
# slow when it uses a fixture that runs fits, lives in a module whose tests all fit, is listed below
# on its own, or carries @pytest.mark.slow (or @pytest.mark.scenario: a fit in a subprocess).

# Fixtures that run real fits (in this process or in subprocesses): "name" for conftest's,
# "test_module::name" for a module's own. A family's fixture (tests/side_by_side.py) is slow by itself.
FIT_FIXTURES = {
    "test_faults::injected",
    "test_faults::interrupted_tensorboard",
    "test_inputs_lifecycle::dump_run",
    "test_tensorboard::storm_logdir",
    "test_tensorboard::steady_logdir",
    "test_tensorboard::tensorboard_server",
}

# Modules whose tests (all, or all but a trivial few) fit models, in process or in subprocesses.
SLOW_MODULES = {
    "test_benchmarks",  # each benchmark script's --quick run
    "test_cache",  # two processes, the second loading the first's compiles
    "test_compare",  # compare() fits every mode
    "test_compat",  # fits under older Keras / tf_keras, in subprocesses
    "test_fastest_fits",
    "test_fix_ground_truth",
    "test_ground_truth",
    "test_jax_ground_truth",
    "test_jax_monitor",
    "test_monitor",  # in-process fits (all but the constructor's argument checks)
    "test_storm_fits",
    "test_tab_browser",  # fits, a live TensorBoard and headless Chromium
}

# Tests that fit (or start a TensorFlow subprocess) inside modules that are otherwise quick.
# They could carry @pytest.mark.slow in their own files instead; until then they are named here.
SLOW_TESTS = {
    "test_data::test_numpy_path_needs_no_tensorflow",
    "test_doctor_explain::test_explain_cli_reads_stdin_and_files",
    "test_faults::test_unwritable_log_dir_fails_at_set_up_naming_the_path",
    "test_faults::test_fault_mid_epoch_leaves_everything_usable",
    "test_faults::test_ctrl_c_landing_inside_the_profiler_frees_it",
    "test_faults::test_someone_elses_profiler_session_stays_theirs",
    "test_faults::test_an_error_in_any_callback_hook_gives_everything_back",
    "test_faults::test_ctrl_c_in_keras_own_loop_code_is_cleaned_up_once_the_fit_is_gone",
    "test_faults::test_an_unfinished_first_step_still_counts_its_compile_when_it_runs_again",
    "test_faults::test_an_internal_error_after_a_storm_fallback_lets_the_fit_finish",
    "test_faults::test_an_internal_error_after_a_fallback_in_a_standalone_evaluate_lets_it_finish",
    "test_faults::test_a_stop_iteration_from_a_batch_hook_ends_the_epoch_not_the_monitor",
    "test_faults::test_a_failed_pull_does_not_forget_the_previous_steps_compile",
    "test_inputs_lifecycle::test_input_kind_counts_steps_and_signatures_like_the_data",
    "test_inputs_lifecycle::test_signature_names_every_leaf_keras_feeds",
    "test_inputs_lifecycle::test_strings_with_jit_on_report_the_refusing_layer",
    "test_inputs_lifecycle::test_sparse_with_jit_on_fails_in_xla_and_the_monitor_steps_aside",
    "test_inputs_lifecycle::test_ragged_row_splits_as_constants_count_every_xla_compile",
    "test_inputs_lifecycle::test_lifecycle_accumulates_steps_and_compiles_only_what_is_new",
    "test_inputs_lifecycle::test_recompile_says_a_rebuilt_function_started_a_new_compile_cache",
    "test_inputs_lifecycle::test_recompile_is_no_recompilation_storm",
    "test_inputs_lifecycle::test_backends_without_xla_are_refused_naming_them_and_jax_is_accepted",
    "test_inputs_lifecycle::test_run_eagerly_evaluate_and_predict_report_xla_not_applicable",
    "test_internals::test_running_fit_and_the_callback_list_of_the_running_call_are_found_from_a_callback",
    "test_internals::test_keras_profile_windows_reads_keras_tensorboard_in_the_running_fit",
    "test_internals::test_fit_validates_reads_the_running_fits_validation_data",
    "test_jax_parts::test_the_private_apis_the_jax_backend_uses_are_where_it_expects",
    "test_load::test_the_report_caps_details_and_counts_the_overflow",
    "test_tensorboard::test_profile_range_and_none",
    "test_tensorboard::test_busy_profiler_skips_the_trace_and_stops_only_ours",
    "test_tensorboard::test_side_by_side_with_keras_tensorboard_on_one_log_dir",
    "test_tensorboard::test_profile_range_with_steps_per_execution",
    "test_tensorboard::test_auto_traces_leave_the_profiler_to_keras_tensorboard",
    "test_tensorboard::test_an_error_inside_a_trace_window_frees_the_profiler",
    "test_tensorboard::test_a_failed_trace_start_does_not_leave_the_profiler_busy",
    "test_tensorboard::test_a_profile_range_resumes_after_validation_and_one_behind_the_fit_is_noted",
}


def _uses_fit_fixture(module, fixtures, names=FIT_FIXTURES):
    for name in names:
        owner, _, fixture = name.rpartition("::")
        if fixture in fixtures and owner in ("", module):
            return True
    return False


def _module_of(item):
    return item.module.__name__.rpartition(".")[2] if item.module else ""


def _families_of(item):
    used = set(item.fixturenames)
    return [f for f in FAMILIES.values() if _uses_fit_fixture(_module_of(item), used, [f.key])]


_NEEDED = pytest.StashKey()  # the families the selected tests read, longest first


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    _mark_slow(items)  # before every other implementation: pytest's -m deselection reads the marks
    result = yield
    _order(config, items)  # after it: on the selected tests only
    return result


def _order(config, items):
    """The session's order: the quick tests (while the families run on the shared lanes), then the
    families' tests, longest family first, then the tests that fit in process: half here, half in a
    second pytest process beside them (tests/second_process.py), then the ``timed`` ones alone.
    XLA_KERAS_TEST_LANES=off starts each family at its first test instead (scripts/compat.py)."""
    quick, families, alone, timed, needed = [], {}, [], [], set()
    for item in items:
        used = _families_of(item)
        needed.update(f.key for f in used)
        if used:
            families.setdefault(max(used, key=lambda f: f.seconds).key, []).append(item)
        elif item.get_closest_marker("slow") is None:
            quick.append(item)
        elif item.get_closest_marker("timed") is not None:
            timed.append(item)
        else:
            alone.append(item)
    longest_first = sorted(families, key=lambda key: -FAMILIES[key].seconds)
    needed = sorted(needed, key=lambda key: -FAMILIES[key].seconds)
    config.stash[_NEEDED] = needed if os.environ.get("XLA_KERAS_TEST_LANES", "on") != "off" else []
    here, there = second_process.split(alone, _module_of)
    if there:
        root = Path(tempfile.mkdtemp(prefix="xla_keras_second_process_"))
        config.stash[_CHILD] = second_process.Child(config, [item.nodeid for item in there], root)
    items[:] = quick + [item for key in longest_first for item in families[key]] + here + there + timed


_CHILD = pytest.StashKey["second_process.Child"]()


def _child(config) -> "second_process.Child | None":
    return config.stash.get(_CHILD, None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test the second process ran: its reports, replayed here in the session's order."""
    child = _child(item.config)
    if child is None or item.nodeid not in child.nodeids:
        return None
    _fits_begin(item.config)
    PHASES.setdefault("waiting for the second process", time.monotonic())
    child.replay(item)
    return True


def _fits_begin(config):
    """The part that fits in process begins: nothing on the lanes, then the second process starts."""
    PHASES.setdefault("drain", time.monotonic())
    drain()
    PHASES.setdefault("fits alone", time.monotonic())
    child = _child(config)
    if child is not None:
        child.start()


@pytest.fixture(scope="session", autouse=True)
def _families_start(request, tmp_path_factory):
    """Every family the selected tests read, queued on the shared lanes before the first test."""
    for key in request.config.stash.get(_NEEDED, []):
        start(key, tmp_path_factory)


# When each part of the session's order began (time.monotonic()), for the summary's phase line.
PHASES = {}


def pytest_sessionstart(session):
    PHASES["session"] = time.monotonic()


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures: a module fixture's fit waits too
def pytest_runtest_setup(item):
    """A test that fits in this process waits until no family run is in flight (measured: a
    generator-fed fit took 0.7 s alone and 46.6 s beside the lanes' runs)."""
    if _families_of(item):
        PHASES.setdefault("family tests", time.monotonic())
    elif item.get_closest_marker("timed") is not None:
        _fits_begin(item.config)
        child = _child(item.config)
        if child is not None:
            child.wait()  # nothing beside a test that reads step times
        PHASES.setdefault("timed fits", time.monotonic())
    elif item.get_closest_marker("slow") is not None:
        _fits_begin(item.config)
    else:
        PHASES.setdefault("quick tests", time.monotonic())


# Every XlaKerasWarning any test provokes (outside pytest.warns, which checks its own): at most 4
# lines of at most 100 characters, located at the caller's code, never at xla_keras's or a
# framework's own files. A breach fails the session (pytest_sessionfinish), listed in the summary.
BAD_MESSAGES: List[str] = []
_NOT_USER_FILES = ("/xla_keras/", "/keras/", "/tensorflow/", "/jax/", "/tf_keras/")


def pytest_warning_recorded(warning_message, when, nodeid, location):
    if not issubclass(warning_message.category, XlaKerasWarning):
        return
    lines = str(warning_message.message).splitlines()
    where = warning_message.filename.replace(os.sep, "/")
    if len(lines) > 4 or max(map(len, lines), default=0) > 100 or any(p in where for p in _NOT_USER_FILES):
        BAD_MESSAGES.append(f"{nodeid}: {where}:{warning_message.lineno}: {lines}")


def pytest_runtest_logreport(report):
    if second_process.in_child():
        second_process.write_report(_CONFIG[0], report)


def pytest_sessionfinish(session, exitstatus):
    child = _child(session.config)
    if child is not None:
        child.stop()  # an interrupted session leaves no child behind
        BAD_MESSAGES.extend(child.bad_messages)
    if second_process.in_child():
        second_process.write_bad_messages(BAD_MESSAGES)
    if BAD_MESSAGES and exitstatus == 0:
        session.exitstatus = 1


def _mark_slow(items):
    for item in items:
        module = _module_of(item)
        slow = (
            module in SLOW_MODULES
            or f"{module}::{item.originalname}" in SLOW_TESTS
            or _uses_fit_fixture(module, set(item.fixturenames))
            or bool(_families_of(item))  # a family's runs are fits or TensorFlow processes
            or item.get_closest_marker("scenario") is not None
            or item.get_closest_marker("timed") is not None
        )
        if slow and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter):
    """The runs on the lanes, longest first: a family's tests mostly wait, their durations say little."""
    if BAD_MESSAGES:
        terminalreporter.write_sep("=", f"{len(BAD_MESSAGES)} XlaKerasWarning(s) too long or located in our code")
        for line in BAD_MESSAGES[:20]:
            terminalreporter.write_line(line[:400])
    if TIMES:
        shown = len(TIMES) if os.environ.get("XLA_KERAS_TEST_RUNS") == "all" else min(10, len(TIMES))
        terminalreporter.write_sep("=", f"slowest {shown} of {len(TIMES)} runs on the lanes")
        for seconds, label in sorted(TIMES, reverse=True)[:shown]:
            terminalreporter.write_line(f"{seconds:7.2f}s {label}")
    child = _child(terminalreporter.config)
    if child is not None and child.seconds is not None:
        terminalreporter.write_line(
            f"second process: {len(child.nodeids)} tests in {child.seconds:.0f} s beside this one; "
            f"its output: {child.log}"
        )
    if TIMES or "fits alone" in PHASES:
        # Where the wall time went: a phase with a core idle is where the suite can still gain.
        marks = sorted((at, name) for name, at in PHASES.items() if name != "session")
        ends = [at for at, _ in marks[1:]] + [time.monotonic()]
        parts = [f"{name} {end - at:.0f} s" for (at, name), end in zip(marks, ends)]
        busy = sum(seconds for seconds, _ in TIMES)
        collected = f"; {len(COLLECTIONS)} collections after in-process fits {sum(COLLECTIONS):.0f} s"
        terminalreporter.write_line(
            f"phases: {', '.join(parts)}; lanes busy {busy:.0f} s of {LANES} x "
            f"{time.monotonic() - PHASES['session']:.0f} s" + (collected if COLLECTIONS else "")
        )


# A finished fit's tf.data iterator that waits in a reference cycle (an exception's traceback, a
# test's ExceptionInfo) is freed by whichever later garbage collection finds it, and its destructor
# waits, holding the GIL, for its autotuning thread's next wake-up, whose period doubles with the
# iterator's age up to 60 s (seen with py-spy: ~IteratorResource -> WaitForNotification). Measured:
# stalls of 17-55 s inside unrelated in-process tests. So after each test that fits in process, a
# collection frees its cycles while they are young; gc.freeze() after the first keeps each to what
# the tests made since (92 collections: 6.8 s in all, against a 17.7 s stall in the same tests).
COLLECTIONS: List[float] = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if _families_of(item) or item.get_closest_marker("slow") is None:
        return
    began = time.monotonic()
    gc.collect()
    if not COLLECTIONS:
        gc.freeze()  # after this first test's cycles are gone: what is older is never scanned again
    COLLECTIONS.append(time.monotonic() - began)
