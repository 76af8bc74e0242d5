"""Keras's JAX backend: the monitor's counts against XLA's dump, its seconds against JAX's own log lines.

Each scenario is a real fit in a subprocess with ``KERAS_BACKEND=jax`` and
``XLA_FLAGS=--xla_dump_to`` (tests/jax_scenarios.py). Ground truth:

* counts: XLA dumps one ``module_N.jit_<phase>_step.*`` set per step executable
  it compiles; every other module name is a non-step module (initialisation,
  metrics, op-level executables, predict's ``concatenate``), kept apart by name;
* seconds: JAX's ``jax_log_compiles`` lines (tracing, lowering, XLA compilation
  of ``jit(<phase>_step)``) and, independently of JAX's timer, the wall time
  between Keras's hooks around the step.
"""

import collections
import importlib.util
import json
import os
import re
import sys

import forked
import pytest
from note_checks import problems
from runs import Runs
from scenario import failed

from xla_keras.core.timing import ms_text

pytest.importorskip("jax")

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_jax_ground_truth")]

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "jax_scenarios.py")
ROOT = os.path.dirname(HERE)
# tf.data input needs TensorFlow: the compatibility tier's JAX venv has none.
HAS_TF = importlib.util.find_spec("tensorflow") is not None
MAIN = (
    "batch_sizes",
    "partial_batch",
    "padded",
    "nested",
    "steps_per_execution",
    "jit_off",
    "storm_fallback",
    "storm_raise",
) + (("tf_data",) if HAS_TF else ())
SPE1 = ("batch_sizes", "partial_batch", "padded", "nested", "jit_off") + (("tf_data",) if HAS_TF else ())
PHASES = ("train", "test", "predict")


def _start(tmp, tag, names, flags="", env_extra=None):
    dump = os.path.join(tmp, f"dump_{tag}")
    out = os.path.join(tmp, f"{tag}.json")
    env = dict(os.environ)
    env.update(
        {
            "KERAS_BACKEND": "jax",
            "XLA_FLAGS": f"--xla_dump_to={dump} {flags}".strip(),
            "PYTHONPATH": ROOT + os.pathsep + env.get("PYTHONPATH", ""),
            "CUDA_VISIBLE_DEVICES": "",
            "JAX_PLATFORMS": "cpu",
        }
    )
    env.update(env_extra or {})
    proc = forked.start([sys.executable, SCRIPT, out, *names], env=env)
    return proc, out


def _finish(started):
    proc, out = started
    stdout, stderr = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise failed("jax scenarios", stdout, stderr)
    with open(out) as f:
        return json.load(f)


def _jax_jobs(root):
    tmp = str(root)
    cache = os.path.join(tmp, "cache")
    two_devices = "--xla_force_host_platform_device_count=2"

    def cache_chain():
        first = _finish(_start(tmp, "cache_first", ["cache"], env_extra={"XLA_KERAS_TEST_CACHE": cache}))["cache"]
        again = _finish(_start(tmp, "cache_again", ["cache"], env_extra={"XLA_KERAS_TEST_CACHE": cache}))["cache"]
        return first, again

    canary = {"XLA_KERAS_TEST_TIMED": "1", "XLA_KERAS_TEST_CANARY": "1"}
    return {
        "main": lambda: _finish(_start(tmp, "main", MAIN)),
        "parallel": lambda: _finish(_start(tmp, "parallel", ["data_parallel"], two_devices)),
        "cache": cache_chain,
        "canary": lambda: _finish(_start(tmp, "canary", ["slow_device"], env_extra=canary))["slow_device"],
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _ByName(Runs(_jax_jobs, tmp_path_factory, "test_jax_ground_truth::runs"))


class _ByName:
    """A scenario's result by its name, from the process that ran it (read at the first test that needs it)."""

    def __init__(self, runs):
        self._runs = runs

    def __getitem__(self, name):
        if name in ("cache_first", "cache_again"):
            return self._runs["cache"][name == "cache_again"]
        if name == "canary":
            return self._runs["canary"]
        return self._runs["main" if name in MAIN else "parallel"][name]


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    """The slow-device fit times the loop against the device: alone on the machine (``timed``: the
    session's second pytest invocation)."""
    tmp = str(tmp_path_factory.mktemp("jax_timed"))
    return _finish(_start(tmp, "timed", ["slow_device"], env_extra={"XLA_KERAS_TEST_TIMED": "1"}))["slow_device"]


def _step_modules(run):
    return collections.Counter(name for name in run["dump"] if name.endswith("_step"))


def _non_step(names):
    return [name for name in names if not name.endswith("_step")]


@pytest.mark.parametrize("name", MAIN + ("data_parallel", "cache_first"))
def test_step_compiles_equal_the_dumped_step_modules(runs, name):
    run = runs[name]
    assert run["raised"] is None or name == "storm_raise"
    modules = _step_modules(run)
    report = run["report"]
    for phase in PHASES:
        assert report["compilation_count"][phase] == modules.get(f"jit_{phase}_step", 0), (phase, modules)
    assert report["backend"] == "jax"


@pytest.mark.parametrize(
    "name", [n for n in MAIN if n not in ("steps_per_execution", "storm_raise")] + ["data_parallel"]
)
def test_non_step_modules_are_the_totals_kept_out_of_the_ledger(runs, name):
    """Modules XLA dumped during the fit that are not step modules = op-level / helper compiles inside
    the step calls + compiles outside them, as the report's totals say."""
    run = runs[name]
    other = run["report"]["other_compilations"]
    counted = sum(int(v["count"]) for v in other.values())
    assert counted == len(_non_step(run["fit_window"])), (other, run["fit_window"])


def _log_modules(lines):
    """Per jitted name, in order: tracing + lowering + XLA compilation seconds, from JAX's log lines."""
    pending = collections.defaultdict(float)
    done = collections.defaultdict(list)
    for kind, name, seconds in lines:
        key = name if name.startswith("jit(") else f"jit({name})"
        if kind == "compile":
            done[key].append(pending.pop(key, 0.0) + seconds)
        else:
            pending[key] += seconds
    return done


@pytest.mark.parametrize("name", MAIN + ("data_parallel",))
def test_compile_seconds_equal_jax_log_lines(runs, name):
    run = runs[name]
    logged = _log_modules(run["log"])
    # Not 0 == 0: JAX logged compiles in every run (op by op with jit off), and the step's where it jits.
    assert logged, "JAX logged no compile: nothing to hold the ledger to"
    assert run["report"]["compilations"] or name == "jit_off"
    for phase in PHASES:
        ours = [c["seconds"] for c in run["report"]["compilations"] if c["phase"] == phase]
        theirs = logged.get(f"jit({phase}_step)", [])
        assert len(ours) == len(theirs), (phase, ours, theirs)
        for a, b in zip(ours, theirs):
            assert a == pytest.approx(b, rel=0.01, abs=2e-3), (phase, ours, theirs)
        assert all(c["source"] == "jax" for c in run["report"]["compilations"])


@pytest.mark.parametrize("name", SPE1)
def test_each_compile_fits_in_the_wall_time_of_its_step(runs, name):
    """Independent of JAX's timer: the step's interval between Keras's hooks (its batch begin, and
    the next hook Keras called) bounds its compile."""
    run = runs[name]
    hooks = run["hooks"]
    begins = {p: [i for i, (hook, phase, _) in enumerate(hooks) if hook == "batch" and phase == p] for p in PHASES}
    checked = 0
    for record in run["report"]["compilations"]:
        index = begins[record["phase"]][record["step"] - 1]  # one batch per call here
        wall = hooks[index + 1][2] - hooks[index][2]
        assert record["seconds"] <= wall, (record, wall)
        assert record["step_seconds"] is not None and record["seconds"] <= record["step_seconds"]
        checked += 1
    assert checked == sum(run["report"]["compilation_count"].values())


def test_batch_sizes_each_compile_once_at_their_first_step(runs):
    report = runs["batch_sizes"]["report"]
    assert [c["step"] for c in report["compilations"]] == list(range(1, 9))
    assert report["storms"] and report["storms"][0]["step"] == 8
    # Generators are not tf.data: the fix needs no TensorFlow.
    code = report["storms"][0]["fix"]["code"]
    assert "tf." not in code and "{'kind': 'fixed_batch_size'" in code
    # one line, or laid out over lines of 100 columns (the comment after the open parenthesis)
    assert re.search(r"batches = xla_keras\.data\.apply_fix\((  #[^\n]*\n\s*)?batches,", code), code


def test_partial_last_batch_plus_validation(runs):
    report = runs["partial_batch"]["report"]
    assert report["compilation_count"] == {"train": 2, "test": 2, "predict": 0}
    train = [c for c in report["compilations"] if c["phase"] == "train"]
    assert [c["step"] for c in train] == [1, 16] and train[1]["last_batch"]


def test_padded_sequences_compile_once_per_padded_length_and_the_fix_is_numpy(runs, tmp_path):
    run = runs["padded"]
    report = run["report"]
    assert (
        report["compilation_count"]["train"]
        == report["distinct_signatures"]["train"]
        == _step_modules(run)["jit_train_step"]
    )


def test_steps_per_execution_numbers_steps_per_batch(runs):
    report = runs["steps_per_execution"]["report"]
    # 800 rows at 64: 13 batches (the last of 32) in calls of 4; validation 200 rows: 4 batches (last 8);
    # predict 300 rows: 5 batches (last 44), its outputs joined by a jitted concatenate (not a step module).
    steps = {p: [c["step"] for c in report["compilations"] if c["phase"] == p] for p in PHASES}
    assert steps == {"train": [1, 13], "test": [1, 4], "predict": [1, 5]}
    assert report["steps"]["train"] == 26
    assert report["other_compilations"]["in_steps"]["count"] == runs["steps_per_execution"]["dump"].count(
        "jit_concatenate"
    )


def test_dict_inputs_name_every_leaf(runs):
    report = runs["nested"]["report"]
    paths = {leaf["path"] for c in report["compilations"] for leaf in c["signature"]}
    assert {"x/a", "x/b", "y", "sample_weight"} <= paths


def test_jit_off_reports_no_step_program_and_counts_op_level_compiles(runs):
    run = runs["jit_off"]
    report = run["report"]
    assert report["jit_active"] is False and "op by op" in report["jit_reason"]
    assert sum(report["compilation_count"].values()) == 0 and not _step_modules(run)
    assert report["other_compilations"]["in_steps"]["count"] > 10  # one per primitive and shape


def test_storm_fallback_runs_op_by_op_and_states_the_measured_cost(runs):
    run = runs["storm_fallback"]
    report = run["report"]
    storm = report["storms"][0]
    assert storm["action"] == "fallback" and storm["step"] == 4
    # XLA compiled the step 4 times, then never again: the dump has exactly those 4 step modules.
    assert _step_modules(run)["jit_train_step"] == 4 == report["compilation_count"]["train"]
    assert report["jit_active"] is False and "op by op" in report["jit_reason"]
    fallback = report["fallback"]
    # The steps since the switch, by the optimizer's own count: every step but the 4 XLA ran.
    assert fallback["steps_after"]["train"] == run["iterations"] - 4 == 36
    after = fallback["steady_step_seconds_after"]["train"]
    assert after is not None and after > 0 and fallback["steady_steps_after"]["train"] > 0
    assert report["other_compilations"]["in_steps"]["count"] > 0
    assert run["jit_compile_after"] is True  # the model's own setting is back after the fit


def test_after_a_fallback_the_headline_counts_the_op_by_op_compiles_and_the_warning_says_so(runs):
    """XLA off on JAX compiles each operation per shape; the compile-time headline holds
    those seconds too (their count: the non-step modules XLA dumped in the fit, checked above)."""
    run = runs["storm_fallback"]
    report, text = run["report"], run["text"]
    other = report["other_compilations"]
    total = report["compile_seconds"] + sum(float(v["seconds"]) for v in other.values())
    headline = text[text.index("  compile time") :].split("\n  steady step")[0]
    assert headline.startswith(f"  compile time    : {ms_text(total)} = ")
    assert f"{int(other['in_steps']['count'])} executables" in headline and "op by op" in headline
    assert "op by op        : after the switch JAX ran the steps op by op" in text
    (warning,) = run["warnings"]
    # The last line weighs XLA's compile per shape at the storm (the first line's figures) against
    # JAX's op-by-op cost per shape (1 s): a slower machine compiles slower and reads the other way.
    storm = report["storms"][0]
    likely_slower = storm["compile_seconds"] / storm["compiles"] < 1.0
    expected = "ops compile per shape: likely slower" if likely_slower else "each op now compiles per shape"
    assert f"XLA off (on_storm='fallback'); {expected}. " in warning
    assert all("batch_size=" not in storm["advice"] for storm in report["storms"])  # its data is a PyDataset


@pytest.mark.parametrize("name", MAIN + ("data_parallel",))
def test_every_note_is_borne_out_by_its_records(runs, name):
    assert problems(runs[name]["report"]) == []


def test_storm_raise_stops_the_fit_with_the_storm_error_before_another_compile(runs):
    run = runs["storm_raise"]
    assert run["raised"].startswith("RecompilationStormError")
    report = run["report"]
    assert report["storms"][0]["step"] == 4 and report["run_state"] == "interrupted"
    # The storm's step compiled (the 4th new shape); the fit stopped before the next call ran.
    assert _step_modules(run)["jit_train_step"] == 4 == report["compilation_count"]["train"]
    assert report["steps"]["train"] == 4


@pytest.mark.skipif(not HAS_TF, reason="tf.data needs TensorFlow")
def test_tf_data_input_is_counted_like_arrays(runs):
    assert runs["tf_data"]["report"]["compilation_count"]["train"] == 2


def test_data_parallel_reports_per_device_shapes(runs):
    run = runs["data_parallel"]
    report = run["report"]
    assert run["raised"] is None and not any("disabled itself" in n for n in report["notes"])
    assert run["async_train"] is True  # Keras kept dispatching batch-end callbacks asynchronously
    note = next(n for n in report["notes"] if n.startswith("train: under DataParallel over 2 devices"))
    assert "x:[32, 8] of [64, 8]" in note


def _median_ms(run, name):
    import statistics

    return 1e3 * statistics.median(s for n, s in run["observer_seconds"] if n == name)


def _median_gap(run):
    import statistics

    times = [t for hook, phase, t in run["hooks"] if hook == "batch" and phase == "train"]
    return statistics.median(b - a for a, b in zip(times[1:], times[2:]))  # after the compiling step


def _skip_unless_asynchronous(timed, canary):
    """The canary waits for the device at every step, so its loop runs at the device's pace; the
    unwaited loop must run far ahead of it. Measured: JAX 0.10 dispatches CPU steps asynchronously
    (asserted), JAX 0.4.36 (the compatibility tier's floor) ran them synchronously: nothing is in
    flight for a sync to wait for there, and these tests cannot tell anything."""
    ran_ahead = _median_gap(timed) < 0.25 * _median_gap(canary)
    if jax_version() >= (0, 6):
        assert ran_ahead, "JAX dispatched the steps synchronously: the no-sync tests would prove nothing"
    elif not ran_ahead:
        pytest.skip(f"JAX {jax_version()} ran these steps synchronously: no step was in flight to wait for")


def jax_version():
    import re
    from importlib.metadata import version

    return tuple(int(p) for p in re.findall(r"\d+", version("jax"))[:2])


@pytest.mark.timed
def test_the_step_path_never_waits_for_the_device(runs, timed):
    """Each step keeps the device busy ~tens of ms, and JAX returns before it is done: the monitor's
    per-step work (ending the last call, reading signatures, compile accounting) takes well under
    a millisecond per call, so it never waited for the device. Keras kept its async dispatch."""
    run = timed
    assert run["raised"] is None and run["async_train"] is True
    _skip_unless_asynchronous(timed, runs["canary"])
    for name in ("call_began", "call_ran"):  # call_ran: the calls the steady lane did not take
        assert _median_ms(run, name) < 2.0, (name, _median_ms(run, name))


def test_the_no_sync_test_catches_a_sync(runs, timed):
    """The canary waits for the device in call_began: the same measure then shows the device's time."""
    _skip_unless_asynchronous(timed, runs["canary"])
    assert _median_ms(runs["canary"], "call_began") > 5.0


def test_persistent_cache_loads_are_told_from_compiles(runs):
    first, again = runs["cache_first"]["report"], runs["cache_again"]["report"]
    assert [c["cached"] for c in first["compilations"]] == [False]
    assert [c["cached"] for c in again["compilations"]] == [True]
    # A load compiles nothing: XLA dumped no step module in the second process.
    assert not _step_modules(runs["cache_again"])
    assert "persistent cache" in json.dumps(again).lower() or again["cache_saved_seconds"] is not None
