"""jit='fastest' in real fits, TensorFlow and JAX side by side (tests/fastest_scenarios.py): the switches
keep both step functions (XLA's dump: one compile however often XLA comes back), leave the model's state
bitwise unchanged and the loss curve on the single-mode one, validation follows the decision, short
fits and varying shapes never try XLA, and a later fit reuses the decision."""

import os
import sys

import numpy as np
import pytest

pytest.importorskip("keras")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from backend_runs import BACKENDS, backend_jobs  # noqa: E402 - tests/ is on the path now
from runs import Runs  # noqa: E402

STEPS = 150

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_fastest_fits")]


def _backend_jobs(root):
    return backend_jobs("fastest_scenarios.py", root, "fastest scenarios")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(_backend_jobs, tmp_path_factory, "test_fastest_fits::runs")


def step_modules(run, backend, step="jit_train_step"):
    """Modules of one step program XLA dumped during the fit (JAX names them; TensorFlow dumps only the
    step functions' modules, train and test alike: there, every module counts)."""
    return run["dump"].count(step) if backend == "jax" else len(run["dump"])


def all_step_modules(run, backend):
    return step_modules(run, backend) + (step_modules(run, backend, "jit_test_step") if backend == "jax" else 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_switching_back_to_xla_reuses_its_compiled_function(runs, backend):
    run = runs[backend]["forced"]
    decision = run["report"]["jit_decision"]
    default, other = decision["default"], "off" if decision["default"] == "on" else "on"
    # block 0 and three rounds: six switches, three blocks of the trial's other mode
    assert decision["switches"] == 6 and decision["blocks"] == {default: 4, other: 3}
    # Three or four XLA blocks, one compile: the XLA function was kept and swapped back, never rebuilt.
    assert step_modules(run, backend) == 1 == run["report"]["compilation_count"]["train"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_is_bitwise_continuous_and_the_loss_curve_matches_a_single_mode_fit(runs, backend):
    run = runs[backend]["forced"]
    switches = run["report"]["jit_decision"]["switch_steps"]
    assert [c["step"] for c in run["continuity"]] == switches and all(c["equal"] for c in run["continuity"])
    assert run["iterations"] == STEPS  # no step lost or repeated at a switch
    np.testing.assert_allclose(run["losses"], run["reference_losses"], rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_report_holds_the_evidence(runs, backend):
    report = runs[backend]["forced"]["report"]
    decision = report["jit_decision"]
    assert decision["mode"] == decision["default"] == ("on" if backend == "jax" else "off")
    assert decision["basis"] == "within_noise" and decision["why"] in report["jit_reason"]
    assert all(decision["medians"][m] > 0 and decision["spreads"][m] >= 0 for m in ("on", "off"))
    assert decision["steps_measured"]["on"] >= 3 * 3 and decision["steps_measured"]["off"] >= 3 * 3
    assert decision["ratio"]["rounds"] == 3 and decision["first_call_seconds"]["on"] > 0
    if backend == "tensorflow":  # XLA was the trial's mode: its compile is the trial's cost
        assert decision["trial_compile_seconds"] == pytest.approx(report["compile_seconds"])
    assert report["jit_active"] == (decision["mode"] == "on")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_later_fit_reuses_the_decision_and_jit_on_overrides_it(runs, backend):
    run = runs[backend]["reuse"]
    decision = run["report"]["jit_decision"]
    assert decision["basis"] == "reused" and decision["switches"] == 0 and "earlier fit" in decision["why"]
    assert step_modules(run, backend) == 0  # the kept mode's function ran on: nothing compiled
    assert run["on_report"]["jit_active"] is True and run["on_report"]["jit_decision"] is None
    # TensorFlow kept XLA off: the XLA function was released at the end of the trial's fit
    assert len(run["on_dump"]) == (1 if backend == "tensorflow" else 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_short_fit_keeps_the_default_and_says_so(runs, backend):
    run = runs[backend]["short"]
    decision = run["report"]["jit_decision"]
    assert (decision["basis"], decision["switches"], decision["mode"]) == (
        "too_short",
        0,
        "on" if backend == "jax" else "off",
    )
    assert "too short" in run["report"]["jit_reason"] and "1000" in run["report"]["jit_reason"]
    assert step_modules(run, backend) == (1 if backend == "jax" else 0)  # XLA off on TensorFlow: never compiled


@pytest.mark.parametrize("backend", BACKENDS)
def test_validation_follows_the_decision_and_its_compile_counts(runs, backend):
    run = runs[backend]["validation_after_decision"]
    report, decision = run["report"], run["report"]["jit_decision"]
    assert decision["mode"] == "on" and report["jit_active"] is True
    assert decision["expected_compiles"] >= 1  # validation's compile was priced in
    assert all_step_modules(run, backend) == 2  # train and validation, each once
    assert report["compilation_count"]["train"] == 1 and report["compilation_count"]["test"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_later_evaluate_runs_the_kept_decision_and_the_decision_can_be_forgotten(runs, backend):
    run = runs[backend]["validation_after_decision"]
    assert run["kept"]["mode"] == "on" and run["kept"]["basis"] == "measured"
    assert run["evaluate_report"]["jit_active"] is True
    assert all_step_modules({"dump": run["evaluate_dump"]}, backend) == 0
    assert run["evaluate_report"]["compilation_count"]["test"] == 0  # the fit's XLA test function was kept
    assert run["forgot"] is True and run["after_forget"] is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_validation_during_the_trial_runs_the_default(runs, backend):
    run = runs[backend]["validation_during_trial"]
    report = run["report"]
    assert report["jit_decision"]["switches"] == 6
    expected_test = 1 if backend == "jax" else 0  # JAX's default is XLA on; TensorFlow's on a CPU, off
    assert report["compilation_count"]["test"] == expected_test
    assert all_step_modules(run, backend) == 1 + expected_test


@pytest.mark.parametrize("backend", BACKENDS)
def test_unknown_length_uses_the_first_epochs_steps(runs, backend):
    run = runs[backend]["unknown_length"]
    decision = run["report"]["jit_decision"]
    assert decision["switch_steps"][0] >= run["epoch_steps"]  # no switch before the first epoch ended
    assert decision["steps_left"] == 4 * run["epoch_steps"] - decision["decided_at_step"]


def test_varying_shapes_never_try_xla(runs):
    run = runs["tensorflow"]["storm"]
    decision = run["report"]["jit_decision"]
    assert (decision["basis"], decision["switches"], decision["mode"]) == ("shapes_vary", 0, "off")
    assert step_modules(run, "tensorflow") == 0 and "shapes vary" in run["report"]["jit_reason"]


def test_shapes_varying_after_an_on_decision_turn_xla_off_again(runs):
    """The watch: 100 batches of one length (XLA kept on), then a new length per batch. XLA's dump holds
    the compiles before the revision only; every step's update landed; the model keeps XLA off."""
    run = runs["tensorflow"]["drift"]
    report, decision = run["report"], run["report"]["jit_decision"]
    assert (decision["mode"], decision["basis"]) == ("off", "compiles"), decision["why"]
    assert decision["revised_at_step"] == decision["switch_steps"][-1]
    # revised two unpriced compiles after the lengths began to vary (batch 101), at the next step boundary
    assert 101 <= decision["revised_at_step"] <= 103
    modules = step_modules(run, "tensorflow")
    assert modules == report["compilation_count"]["train"] == 1 + 2  # the first shape, then two new ones
    assert run["iterations"] == run["batches"] and run["kept"] is False
    assert "new shapes compiled" in decision["why"]


def test_jax_storm_compiles_are_counted_as_xla_dumped_them(runs):
    run = runs["jax"]["storm"]
    assert run["report"]["compilation_count"]["train"] == step_modules(run, "jax")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_storm_fallback_mid_fit_keeps_every_steps_update(runs, backend):
    run = runs[backend]["fallback_steps"]
    assert run["fallback"] and run["iterations"] == run["batches"]
