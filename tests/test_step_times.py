"""Step times against the wall clock, on both Keras backends: the steady step, the cost card's
rates, slow steps and jit='fastest' on JAX.

Ground truth, the test's own (tests/step_time_scenarios.py): a callback that blocks on a weight at each
run's end and times the runs after the first; a true step is (the runs' wall time - the compile seconds
the framework itself logged inside them) / their steps. JAX's compile seconds come from its
``jax_log_compiles`` lines, TensorFlow's from its ``Compilation of XLA executable time`` lines
(device_compiler), each stamped with the wall clock.

The steady step is checked within 15% on both backends, on an MLP and a conv net, at 24, 100 and 400
steps an epoch, with ``verbose`` 0, 1 and 2: each pair of values at least once (9 fits, not the whole
cross product), then under ``steps_per_execution=4`` with validation, evaluate and predict, under
MirroredStrategy and with TensorFlow's eager ops asynchronous. Each group of fits runs in one fresh
process, alone (``timed``: nothing beside it reads the clock).
"""

import json
import os
import re
import statistics
import sys

import forked
import pytest
from scenario import failed

pytestmark = [pytest.mark.slow, pytest.mark.timed, pytest.mark.xdist_group("test_step_times")]

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_time_scenarios.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEADY_WITHIN = 0.15
# The latest steps timed on their own that a TensorFlow phase's figure rests on (core/timing.py PhaseTiming).
WINDOW = 1024
RATE_WITHIN = 0.20

# (backend, model, steps per epoch, verbose): every pair of values of the four factors appears at least once.
PAIRWISE = [
    ("jax", "mlp", 24, 0),
    ("tensorflow", "conv", 24, 1),
    ("tensorflow", "mlp", 24, 2),
    ("tensorflow", "conv", 100, 0),
    ("jax", "mlp", 100, 1),
    ("jax", "conv", 100, 2),
    ("tensorflow", "mlp", 400, 0),
    ("jax", "conv", 400, 1),
    ("tensorflow", "conv", 400, 2),
]
# Runs measured: the epochs after the first. TensorFlow now and then spends 0.1-0.6 s making an epoch's data
# iterator (measured in fits without the monitor too): a median over 5 runs stands one or two of those.
EPOCHS = 6
# Every phase, several steps a call: validation inside the fit, then evaluate and predict runs.
# Runs of the conv net (~0.6 ms a test step): runs of an MLP's 0.1 ms steps, 20 ms each, varied by +-30% run
# to run on 2 CPU cores (measured), the truth's own figure included.
EVERY_PHASE = {
    "model": "conv",
    "steps": 100,
    "steps_per_execution": 4,
    "validation": 100,
    "evaluate": 4,
    "evaluate_steps": 100,
    "predict": 5,
}
# JAX: the issue's conv net (two Conv2D(32, 3) on 32x32x3, ~36 ms a step on the device). Python queues its
# 50 steps in ~12 ms (measured), far less than the shipped 1 s between sparse syncs: the syncs, due when an
# interval has been open 4 ms here, cut each ~1.8 s run into intervals (the mechanism as shipped).
LONG_EPOCHS = {"model": "conv32", "steps": 50, "epochs": 4, "sync_seconds": 0.004}
DELAYED = {"model": "mlp", "steps": 100, "delay_every": 50, "delay_seconds": 0.2}


def _pairwise(backend):
    return [
        {"name": f"{model}-{steps}-v{verbose}", "model": model, "steps": steps, "epochs": EPOCHS, "verbose": verbose}
        for b, model, steps, verbose in PAIRWISE
        if b == backend
    ]


GROUPS = {
    "tensorflow": _pairwise("tensorflow")
    + [
        {"name": "every-phase", "epochs": EPOCHS, **EVERY_PHASE},
        {"name": "mirrored", "model": "conv", "steps": 100, "epochs": EPOCHS, "mirrored": True, "jit": "keep"},
        {"name": "asynchronous", "model": "mlp", "steps": 100, "epochs": EPOCHS, "asynchronous": True},
        {"name": "delayed", "epochs": EPOCHS, **DELAYED},
    ],
    "jax": _pairwise("jax")
    + [
        {"name": "every-phase", "epochs": EPOCHS, **EVERY_PHASE},
        {"name": "delayed", "epochs": EPOCHS, **DELAYED},
        {"name": "long-epochs", **LONG_EPOCHS},
    ]
    # jit='fastest' on JAX: the trial's gate lowered so that a short fit tries both modes (its measuring and
    # its rules of decision are as shipped); each model also runs with XLA on and off alone, by the wall clock.
    + [
        {"name": f"{model}-{jit}", "model": model, "steps": steps, "epochs": 3, "jit": jit, **extra}
        for model, steps, trial in (
            ("sparse", 40, {"MIN_STEPS_LEFT": 30, "TRIAL_BUDGET": 1.0}),
            ("wide", 400, {"MIN_STEPS_LEFT": 200, "TRIAL_BUDGET": 5.0}),
        )
        for jit, extra in (("fastest", {"trial": trial}), ("on", {"steps": 12}), ("off", {"steps": 12}))
    ],
}

_TF_LINE = re.compile(
    r"^\S+ \S+ (\d+\.\d+)\s.*Compilation of XLA executable time: ([0-9.]+) (h|min|s|ms|us)\b(?: \((\d+) us\))?",
    re.M,
)
_UNIT_SECONDS = {"h": 3600.0, "min": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}


def _tf_compiles(stderr):
    """(wall clock, seconds) of every compile TensorFlow's device_compiler logged."""
    return [
        (float(at), int(us) / 1e6 if us else float(value) * _UNIT_SECONDS[unit])
        for at, value, unit, us in _TF_LINE.findall(stderr)
    ]


def _run_group(name, tmp_path_factory):
    backend = name
    out = tmp_path_factory.mktemp(f"step-times-{name}") / "out.json"
    env = dict(os.environ)
    env.update(
        {
            "KERAS_BACKEND": backend,
            "TF_CPP_MIN_LOG_LEVEL": "0",
            "TF_CPP_VMODULE": "device_compiler=1",
            "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    done = forked.run(
        [sys.executable, SCRIPT, str(out), json.dumps(GROUPS[name])],
        env=env,
        timeout=900,
    )
    if done.returncode != 0:
        raise failed(f"step-time scenarios {name}", done.stdout, done.stderr)
    with open(out) as f:
        results = json.load(f)
    compiles = _tf_compiles(done.stderr) if backend == "tensorflow" else None
    return {r["spec"]["name"]: Fit(r, compiles) for r in results}


class Fit:
    """One fit's report and its ground truth."""

    def __init__(self, result, tf_compiles):
        self.spec, self.report, self.runs, self.delayed = (
            result["spec"],
            result["report"],
            result["runs"],
            result["delayed"],
        )
        self.begins = result["begins"]  # each train call's batch-begin hook (steps_per_execution 1: each step's)
        self.periods = result["periods"]  # per phase: (run, batch-begin time) of each call
        self.tf_compiles = tf_compiles
        self.backend = "tensorflow" if tf_compiles is not None else "jax"

    def stalls(self):
        """The train steps whose own time on the test's clock (from its batch begin to the next one's, none
        across a run's end) is far above the typical step on that clock as the monitor's rule reads it (5x,
        and 20 ms above): the steps a slow-step report may name. The fit's first step (its compile) is left
        out: the monitor names it as a compile."""
        per_run = self.spec["steps"]
        gaps = {
            i + 1: after - begin
            for i, (begin, after) in enumerate(zip(self.begins, self.begins[1:]))
            if (i + 1) % per_run and i
        }
        typical = statistics.median(gaps.values())
        floor = max(5 * typical, typical + 0.02) * 0.8  # a margin for the microseconds between the two clocks
        return {step for step, gap in gaps.items() if gap > floor}

    def true_step(self, phase):
        """The phase's runs after the first: their (wall time - compile seconds) over their steps."""
        seconds = steps = 0
        for run in self.runs[phase][1:]:
            compiled = run.get("compile_seconds")
            if compiled is None:  # TensorFlow: its own lines inside the run
                compiled = sum(s for at, s in self.tf_compiles if run["begin"] <= at <= run["end"])
            seconds += run["end"] - run["begin"] - compiled
            steps += run["steps"]
        assert len(self.runs[phase]) >= 3, (phase, self.runs[phase])
        return seconds / steps

    def median_period(self, phase, latest=None):
        """TensorFlow's truth: the median of the phase's step periods on the test's clock (one call's batch
        begin to the next call's in the same run, over the calls' steps), the runs after the first; ``latest``:
        only the last that many (the steps a long fit's figure rests on)."""
        spe = self.spec.get("steps_per_execution", 1)
        begins = self.periods[phase]
        gaps = [(b - a) / spe for (run_a, a), (run_b, b) in zip(begins, begins[1:]) if run_a == run_b and run_a > 0]
        assert len(gaps) >= 8, (phase, len(gaps))
        return statistics.median(gaps[-max(1, latest // spe) :] if latest else gaps)  # a gap is one call's

    def truth(self, phase):
        """What the steady step must equal: on TensorFlow (each step timed on its own) the median step period
        a callback measures over the latest steps the figure rests on (a long fit's latest 1024: the machine's
        pace can drift over thousands of steps), a stall being one slow step; on JAX (asynchronous) the runs'
        wall time with the device drained, less compiles, over their steps."""
        if self.backend == "jax":
            return self.true_step(phase)
        steps = self.report["step_timing"][phase]["steps"]
        return self.median_period(phase, WINDOW if steps >= WINDOW else None)

    def steady(self, phase):
        return self.report["steady_step_seconds_by_phase"][phase]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    cache = {}

    def group(name):
        if name not in cache:
            cache[name] = _run_group(name, tmp_path_factory)
        return cache[name]

    return group


def _slow_steps_seen_stall(fit, name=None):
    """The train steps the report names slow, each a stall on the test's own clock, all of them counted."""
    slow = {s["step"] for s in fit.report["slow_steps"]}
    assert slow <= fit.stalls() and fit.report["slow_step_count"] == len(slow), (name, slow, fit.stalls())
    return slow


def _within(got, true, within):
    assert got is not None and abs(got / true - 1) <= within, f"{got * 1e3:.3f} ms vs {true * 1e3:.3f} ms true"


@pytest.mark.parametrize("backend, model, steps, verbose", PAIRWISE)
def test_the_steady_step_is_the_clocks(groups, backend, model, steps, verbose):
    fit = groups(backend)[f"{model}-{steps}-v{verbose}"]
    _within(fit.steady("train"), fit.truth("train"), STEADY_WITHIN)
    timing = fit.report["step_timing"]["train"]
    assert timing["basis"] == ("between_drains" if backend == "jax" else "per_step") and timing["withheld"] is None
    # It rests on every steady step: the runs after the first whole, the first after its compile. On JAX the
    # first run of a process compiles Keras's metrics at its end, outside the step, for a time no interval
    # can tell apart: that run's interval gives no sample (a later fit in the process compiles none).
    every = EPOCHS * steps - 1
    if backend == "jax":
        assert timing["steps"] in (every, (EPOCHS - 1) * steps) and timing["intervals"] >= EPOCHS - 1
    else:  # the median of the steps timed on their own, a stall left out: the latest 1024 of a long fit
        slow = _slow_steps_seen_stall(fit)
        assert timing["steps"] == min(every - len(slow), WINDOW) and timing["intervals"] == 0
    assert fit.report["steady_step_counts"]["train"] == timing["steps"]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_every_phase_with_several_steps_a_call(groups, backend):
    fit = groups(backend)["every-phase"]
    for phase in ("train", "test", "predict"):
        _within(fit.steady(phase), fit.truth(phase), STEADY_WITHIN)


def test_jax_intervals_are_cut_by_sparse_syncs_and_a_synced_step_is_never_slow(groups):
    fit = groups("jax")["long-epochs"]
    _within(fit.steady("train"), fit.true_step("train"), STEADY_WITHIN)
    timing = fit.report["step_timing"]["train"]
    # Two intervals or more in each run after the first, every steady step in one (the first run's last
    # interval may end with Keras's metrics compiled: no sample).
    runs = LONG_EPOCHS["epochs"]
    assert timing["intervals"] >= 2 * (runs - 1) and (runs - 1) * 50 <= timing["steps"] <= runs * 50 - 1
    assert fit.report["slow_step_count"] == 0  # the wait for the queue after a sync is no step's own time


@pytest.mark.parametrize("name", ["mirrored", "asynchronous"])
def test_tensorflow_syncs_every_step_under_a_strategy_and_with_asynchronous_ops(groups, name):
    fit = groups("tensorflow")[name]
    _within(fit.steady("train"), fit.truth("train"), STEADY_WITHIN)
    assert fit.report["step_timing"]["train"]["basis"] == "per_step"


@pytest.mark.parametrize("backend, model, steps, verbose", [p for p in PAIRWISE if p[2] in (100, 400)])
def test_the_cost_cards_rate_is_its_flops_over_the_true_step(groups, backend, model, steps, verbose):
    fit = groups(backend)[f"{model}-{steps}-v{verbose}"]
    rates = fit.report["costs"]["train"]
    assert rates["rates_withheld"] is None and rates["flops_per_second"] is not None  # given, not withheld
    _within(rates["flops_per_second"], rates["flops_per_step"] / fit.truth("train"), RATE_WITHIN)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_uniform_steps_are_never_slow(groups, backend):
    """Steps of one shape doing the same work: none is slow, unless the test's own clock saw the machine stall
    the loop on it (on a quiet machine: none; beside a busy process a preempted step is slow for real)."""
    checked = []
    for name, fit in groups(backend).items():
        if name == "delayed" or fit.spec.get("steps_per_execution", 1) != 1 or fit.spec.get("jit") == "fastest":
            continue  # (jit='fastest' switches the step function: its steps are not one program's)
        _slow_steps_seen_stall(fit, name)
        checked.append(name)
    assert checked, "no fit of one shape and one step per call to check"


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_each_delayed_batch_is_a_slow_step_at_its_step(groups, backend):
    """The data source sleeps 200 ms before every 50th batch: each of those steps is slow (a run's last step
    included, and the first run's, before the steady step was known), and no step the test's own clock
    did not see stall."""
    fit = groups(backend)["delayed"]
    assert len(fit.delayed) == EPOCHS * DELAYED["steps"] // DELAYED["delay_every"]
    slow = {s["step"]: s for s in fit.report["slow_steps"]}
    assert set(fit.delayed) <= set(slow) <= set(fit.delayed) | fit.stalls(), (sorted(slow), fit.delayed)
    assert fit.report["slow_step_count"] == len(slow)
    # (TensorFlow's data pipeline fetches a batch ahead: a step's compute hides a little of the sleep.)
    assert all(slow[step]["seconds"] >= 0.9 * DELAYED["delay_seconds"] for step in fit.delayed)
    assert {s["basis"] for s in slow.values()} == {"host" if backend == "jax" else "step"}
    if backend == "tensorflow":  # the wrapper pulls each batch itself: the sleep is the input pipeline's wait
        assert {slow[step]["where"] for step in fit.delayed} == {"input"}
        waits = fit.report["waits"]["train"]
        assert waits["input_seconds"] >= 0.9 * DELAYED["delay_seconds"] * len(fit.delayed)


@pytest.mark.parametrize("model, faster", [("sparse", "off"), ("wide", "on")])
def test_jit_fastest_on_jax_keeps_the_mode_the_wall_clock_finds_faster(groups, model, faster):
    fits = groups("jax")
    on, off = fits[f"{model}-on"].true_step("train"), fits[f"{model}-off"].true_step("train")
    assert (on < off) == (faster == "on") and max(on, off) / min(on, off) >= 1.5, (on, off)
    decision = fits[f"{model}-fastest"].report["jit_decision"]
    assert decision["mode"] == faster and decision["basis"] == "measured", decision["why"]
    measured = decision["medians"]
    # The trial's medians are steps' times too (intervals between drains), never a dispatch time (which was
    # 10-100x below): loosely, since the trial measures a few steps of each mode, mid-fit, after switches.
    for mode, true in (("on", on), ("off", off)):
        assert true / 2.5 < measured[mode] < true * 2.5, (mode, measured[mode], true)
