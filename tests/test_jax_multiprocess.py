"""Keras's JAX backend over several processes: two CPU processes on loopback under
``jax.distributed.initialize`` and ``keras.distribution.DataParallel``, each feeding its own data of
the same shapes; and one process over two host devices.

Each run is tests/jax_multiprocess.py, once per process, each with its own XLA dump directory. What
is checked against what each process really did: the ``jit_train_step`` / ``jit_test_step`` modules
its XLA dumped, the error its fit raised and the step it stopped at, the files on disk and the pid in
their names; and that no run hangs (a process acting alone would leave the other in a collective).
"""

import glob
import json
import os
import re

import numpy as np
import pytest
from multiworker import run_workers
from runs import Runs

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_jax_multiprocess")]

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_multiprocess.py")
LENGTHS = [4, 6, 8, 10, 12, 14, 4, 6]  # 6 new shapes in 8 steps: a storm at the 3rd (threshold 3)
STORM = {"storm_threshold": 3}

# The same fit without and with precompile (its four shapes given as specs of the global batch).
PRECOMPILED = [4, 6, 8, 10, 4, 6]
PRECOMPILE_FITS = [
    {"monitor": {"log_dir": None}, "lengths": PRECOMPILED, "weights": True},
    {"monitor": {"log_dir": None}, "lengths": PRECOMPILED, "precompile_lengths": [4, 6, 8, 10], "weights": True},
]

TWO_PROCESSES = {
    "fits": [
        {  # warn: two epochs with validation, one log dir for both processes (the chief writes)
            "monitor": {"log_dir": "{root}/logs", "on_storm": "warn", **STORM},
            "lengths": LENGTHS,
            "epochs": 2,
            "validation": [5, 7],
        },
        {"monitor": {"log_dir": None, "on_storm": "fallback", **STORM}, "lengths": LENGTHS},
        {"monitor": {"log_dir": None, "on_storm": "raise", **STORM}, "lengths": LENGTHS},
        {  # jit='fastest': the trial's gate lowered so that a short fit tries XLA off (op by op)
            "monitor": {"log_dir": None, "jit": "fastest"},
            "lengths": [6] * 150,
            "epochs": 2,
            "validation": [6, 6],
            "trial": {"TRIAL_BUDGET": 1000.0, "MIN_STEPS_LEFT": 50},
        },
        *PRECOMPILE_FITS,
        {  # the processes are given different sets: one agreement, so none precompiles
            "monitor": {"log_dir": None},
            "lengths": PRECOMPILED,
            "weights": True,
            "precompile_lengths_by_process": {"0": [4, 6, 8, 10], "1": [4, 6, 8]},
        },
    ]
}
# Process 1 dies (os._exit, as an OOM kill would) before train step 10, in the 3rd epoch of 4 steps.
A_PROCESS_DIES = {
    "exit_when_done": True,
    "fits": [
        {
            "monitor": {"log_dir": "{root}/logs"},
            "lengths": [4, 6, 4, 6],
            "epochs": 4,
            "exit_process": 1,
            "exit_at_step": 10,
        }
    ],
}
ONE_PROCESS_TWO_DEVICES = {
    "fits": [
        {"monitor": {"log_dir": None, "on_storm": "raise", **STORM}, "lengths": LENGTHS},
        {"monitor": {"log_dir": None, "jit": "fastest"}, "lengths": [6] * 100, "epochs": 2},
        *PRECOMPILE_FITS,
    ]
}


def _runs(root):
    """Each run's processes take one lane: they spend much of a step waiting on each other."""

    def run(name, spec, processes, flags=""):
        where = root / name
        where.mkdir()
        spec = json.loads(json.dumps(spec).replace("{root}", str(where)))
        extra = {"KERAS_BACKEND": "jax"}
        if flags:
            extra["XLA_FLAGS"] = f"--xla_dump_to={where / 'dump0'} {flags}"
        return run_workers(str(where), spec, workers=processes, timeout=240, script=SCRIPT, env_extra=extra), where

    return {
        "two processes": lambda: run("two", TWO_PROCESSES, 2),
        "a process dies": lambda: run("dies", A_PROCESS_DIES, 2),
        "one process, two devices": lambda: run(
            "one", ONE_PROCESS_TWO_DEVICES, 1, "--xla_force_host_platform_device_count=2"
        ),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(_runs, tmp_path_factory, "test_jax_multiprocess::runs")


def _fits(runs, name):
    processes, where = runs[name]
    for p in processes:
        assert p.result is not None, f"process {p.index} printed no result (exit {p.returncode}):\n{p.stderr[-3000:]}"
    return [p.result["fits"] for p in processes], where


def test_every_process_counts_what_its_own_xla_compiled(runs):
    fits, _ = _fits(runs, "two processes")
    for index, process in enumerate(fits):
        for number, fit in enumerate(process):
            counts = fit["report"]["compilation_count"]
            dump = {p: fit["dump"][p] for p in ("train", "test")}
            assert {p: counts[p] for p in ("train", "test")} == dump, (index, number)
    assert fits[0][0]["dump"]["train"] == 6 and fits[0][0]["dump"]["test"] == 2  # 6 lengths; 2 in validation


def test_each_process_reads_its_own_data_and_they_see_the_same_signatures(runs):
    processes, _ = runs["two processes"]
    assert processes[0].result["data"] != processes[1].result["data"]  # different values...
    first = [p.result["fits"][0]["report"]["compilations"] for p in processes]
    assert [(c["step"], c["signature"]) for c in first[0]] == [(c["step"], c["signature"]) for c in first[1]]


def test_a_storm_warns_at_the_same_step_in_every_process(runs):
    fits, _ = _fits(runs, "two processes")
    storms = [[(s["phase"], s["step"], s["action"]) for s in process[0]["report"]["storms"]] for process in fits]
    assert storms[0] == storms[1] == [("train", 3, "warn")]
    assert all(process[0]["error"] is None for process in fits)


def test_fallback_switches_xla_off_at_the_same_step_in_every_process_and_training_goes_on(runs):
    fits, _ = _fits(runs, "two processes")
    for process in fits:
        fit = process[1]
        assert fit["error"] is None and fit["stopped_at"] == len(LENGTHS)
        assert fit["report"]["fallback"]["step"] == 3
        assert [s["action"] for s in fit["report"]["storms"]] == ["fallback"]
        assert fit["dump"]["train"] == 3  # XLA compiled the first three shapes only
    assert not any("acts as 'warn'" in n for process in fits for n in process[1]["report"]["notes"])


def test_raise_stops_every_process_at_the_same_step_with_the_same_error(runs):
    fits, _ = _fits(runs, "two processes")
    errors = [process[2]["error"] for process in fits]
    assert all(e.startswith("RecompilationStormError: Recompilation storm (train): 3 new input shapes") for e in errors)
    assert [process[2]["stopped_at"] for process in fits] == [3, 3]
    for process in fits:
        rows = process[2]["report"]["processes"]
        assert [r["steps"]["train"] for r in rows] == [3, 3]  # gathered at the storm: every process there


def test_fastest_switches_every_process_at_the_same_steps_and_keeps_one_decision(runs):
    fits, _ = _fits(runs, "two processes")
    chief, other = (process[3] for process in fits)
    # Read by Keras's own batch-begin hook: the same switches, at the same steps, and XLA off did run.
    assert chief["modes"] == other["modes"] and [on for _, on in chief["modes"]][:3] == [True, False, True]
    # XLA's dump in each process: op-by-op programs (the off mode) compiled in both, alike.
    assert chief["dump"]["other"] == other["dump"]["other"] > 0
    decisions = [fit["report"]["jit_decision"] for fit in (chief, other)]
    assert decisions[0]["basis"] == "measured" and decisions[0]["mode"] == decisions[1]["mode"]
    assert decisions[0]["switch_steps"] == decisions[1]["switch_steps"]
    assert decisions[0]["decided_at_step"] == decisions[1]["decided_at_step"]
    assert "process 0 measured and decided (measured)" in decisions[1]["why"]
    assert all(fit["error"] is None and fit["stopped_at"] == 300 for fit in (chief, other))
    for fit in (chief, other):  # each process times its steps between its own drains: a local wait, no collective
        timing = fit["report"]["step_timing"]["train"]
        assert timing["basis"] == "between_drains" and timing["intervals"] >= 1 and timing["withheld"] is None


def test_the_chief_report_holds_every_process_counts_and_only_the_chief_writes(runs):
    processes, where = runs["two processes"]
    fits = [p.result["fits"] for p in processes]
    for process in fits:
        rows = process[0]["report"]["processes"]
        assert [r["process"] for r in rows] == [0, 1]
        for row, own in zip(rows, fits):
            assert row["compilation_count"] == own[0]["report"]["compilation_count"]
            assert row["steps"] == own[0]["report"]["steps"]
            assert row["compile_seconds"]["train"] == pytest.approx(
                sum(c["seconds"] for c in own[0]["report"]["compilations"] if c["phase"] == "train"), rel=1e-4
            )
    chief_pid = processes[0].result["pid"]
    events = glob.glob(str(where / "logs" / "*" / "events.out.tfevents.*"))
    assert events and all(f".{chief_pid}." in os.path.basename(f) for f in events), events
    with open(where / "logs" / "xla_report.json") as f:
        on_disk = json.load(f)
    assert len(on_disk["processes"]) == 2 and on_disk["processes"] == fits[0][0]["report"]["processes"]


def test_a_process_that_dies_leaves_the_chief_files_flushed(runs):
    processes, where = runs["a process dies"]
    chief, dead = processes
    assert dead.returncode == 3 and dead.result is None
    assert chief.result is not None, chief.stderr[-3000:]
    fit = chief.result["fits"][0]
    # Gloo saw the peer go: in the step's all-reduce, or in the epoch end's gather (the chief runs ahead).
    assert fit["error"] and re.search(r"Gloo [\w-]+ failed.*(closed|reset) by peer", fit["error"]), fit["error"]
    # Written when the error surfaced (in a callback's batch-begin hook, a guarded hook or a step), not left
    # to the collection of the fit's frames or to the exit: a slower machine once found it still "running".
    assert fit["run_state_at_the_error"] == "interrupted"
    with open(where / "logs" / "xla_report.json") as f:
        on_disk = json.load(f)
    assert on_disk["run_state"] == "interrupted"
    assert on_disk["steps"]["train"] >= 9  # every step the chief began (JAX dispatches ahead)
    # The last agreement: the end of epoch 2 (step 8), with both processes.
    assert [r["steps"]["train"] for r in on_disk["processes"]] == [8, 8]
    events = glob.glob(str(where / "logs" / "train" / "events.out.tfevents.*"))
    assert events and all(f".{chief.result['pid']}." in os.path.basename(f) for f in events)


def test_one_process_over_two_devices_raises_on_a_storm_and_runs_the_fastest_trial(runs):
    fits, _ = _fits(runs, "one process, two devices")
    storm, fastest = fits[0][:2]
    assert storm["error"].startswith("RecompilationStormError") and storm["stopped_at"] == 3
    assert storm["dump"]["train"] == storm["report"]["compilation_count"]["train"] == 3
    assert storm["report"]["processes"] == []  # one process: nothing to gather
    decision = fastest["report"]["jit_decision"]
    assert decision is not None and decision["mode"] in ("on", "off")  # the trial ran and decided
    assert not any("acts as 'keep'" in n for n in fastest["report"]["notes"])
    assert any("under DataParallel over 2 devices" in n for n in fastest["report"]["notes"])


@pytest.mark.parametrize("name, first", [("two processes", 4), ("one process, two devices", 2)])
def test_every_process_precompiles_the_set_and_compiles_nothing_in_the_loop(runs, name, first):
    """Ground truth: each process's own XLA dump (train-step modules written after step 1 ended), its
    optimizer's iterations and its weights against the same fit without precompile."""
    fits, _ = _fits(runs, name)
    for index, process in enumerate(fits):
        without, with_ = process[first], process[first + 1]
        assert without["train_modules_after_step_one"] == 3, index  # 6, 8, 10 compile in the loop without it
        assert with_["train_modules_after_step_one"] == 0, index
        assert with_["dump"]["train"] == 4 == with_["report"]["compilation_count"]["train"]  # the 4 shapes, no more
        facts = with_["report"]["precompile"]["train"]
        assert facts["withheld"] is None and facts["signatures"] == 4 and facts["in_loop"] == 0, facts
        assert with_["error"] is None and with_["iterations"] == without["iterations"] == len(PRECOMPILED)
        assert np.allclose(with_["weights"], without["weights"], rtol=0, atol=1e-5)
    if len(fits) > 1:  # every process trained the same replicated weights
        assert np.allclose(fits[0][first + 1]["weights"], fits[1][first + 1]["weights"], rtol=0, atol=1e-6)


def test_processes_given_different_sets_agree_to_precompile_none(runs):
    fits, _ = _fits(runs, "two processes")
    for process in fits:
        fit = process[6]
        facts = fit["report"]["precompile"]["train"]
        assert "differ" in facts["withheld"] and facts["signatures"] == 0, facts
        assert fit["error"] is None and fit["stopped_at"] == len(PRECOMPILED)
        assert fit["train_modules_after_step_one"] == 3  # compiled in the loop, as without precompile
