"""jit='fastest' in several processes, without starting any: two trials fed different
step times, each in its own session, agree through ``callback/agreement.py`` with a gather that hands every
process the chief's row, as the collective does. Pure. The real processes are
tests/test_jax_multiprocess.py's."""

import pytest

from xla_keras.callback.agreement import ChiefRow, agreed_check, chief_row
from xla_keras.callback.fastest_run import FastestRun
from xla_keras.config import MonitorConfig
from xla_keras.jit.trial import NEVER
from xla_keras.session.session import Session

STEPS = 20000  # the fit's length: long enough for the trial to try both modes


def _run():
    return FastestRun(Session(MonitorConfig()), True, 0, {"epochs": 1, "steps": STEPS}, 10.0, False)


def _feed(run, step, times):
    """One train step of ``run``'s current mode, at ``times[mode]`` seconds (its first call: 10 ms)."""
    trial = run.trial
    fresh = trial.first_call[trial.on] is None
    seconds = 0.01 if fresh else times[trial.on]
    trial.called(seconds)
    if not fresh:
        trial.add(step, seconds)


# The chief measures XLA on faster; the other process, alone, would measure it slower.
CHIEF = {True: 1.0e-3, False: 3.0e-3}
OTHER = {True: 3.0e-3, False: 1.0e-3}


def _gather(rows, row, index):
    """What the collective hands each process: every row, the chief's first (read after its check)."""
    rows[index] = row
    return [rows[0], row] if index else [row, row]


def _lockstep(steps=3000):
    """Two processes' trials, step by step; returns each one's mode at every step and the gathers."""
    runs = [_run(), _run()]
    for run in runs:
        run.agree_at = run.trial.next_check  # as FastestDriver.begin does in several processes
    modes, gathered = [[], []], []
    for step in range(1, steps + 1):
        assert runs[0].agree_at == runs[1].agree_at  # every process gathers at the same steps
        if runs[0].due(step):
            rows: dict = {}
            for index, run in enumerate(runs):  # the chief's check runs before the others read its row
                assert run.due(step)
                agreed_check(run, step, index == 0, lambda row, i=index, rows=rows: _gather(rows, row, i))
            gathered.append(step)
        for run, times, seen in zip(runs, (CHIEF, OTHER), modes):
            _feed(run, step, times)
            seen.append(run.trial.on)
    return runs, modes, gathered


def test_every_process_runs_the_chief_mode_at_every_step_and_keeps_its_decision():
    runs, modes, gathered = _lockstep()
    assert modes[0] == modes[1]
    assert False in modes[0]  # the trial did try XLA off
    chief, other = (run.trial.decision for run in runs)
    assert chief is not None and chief.mode == "on" and chief.basis == "measured"
    assert other is not None and (other.mode, other.basis) == ("on", "measured")
    assert "process 0 measured and decided (measured)" in other.why
    assert chief.decided_at_step == other.decided_at_step
    assert list(chief.switch_steps) == list(other.switch_steps)
    assert runs[0].agree_at == runs[1].agree_at == NEVER  # decided, no watch: no more gathers
    assert len(gathered) < 60  # the trial's checks only: nothing per step


def test_the_other_process_alone_would_have_decided_otherwise():
    """The control: without the agreement, that process's own times keep XLA off."""
    run = _run()
    for step in range(1, 3001):
        if run.due(step):
            run.check(step)
        _feed(run, step, OTHER)
    assert run.trial.decision is not None and run.trial.decision.mode == "off"


@pytest.mark.parametrize(
    "row, verdict",
    [
        ([-1, 0, 0, -1, 40], (None, False, False, None, 40)),
        ([0, 0, 0, -1, 57], (False, False, False, None, 57)),
        ([1, 1, 1, 0, -1], (True, True, True, "measured", NEVER)),
        ([-1, 1, 0, 7, 260], (None, True, False, "storm", 260)),
    ],
)
def test_a_row_reads_back_as_the_chief_check(row, verdict):
    read = ChiefRow.of([float(v) for v in row])
    assert (read.switch, read.decided, read.on, read.basis, read.next_at) == verdict


def test_the_chief_row_names_the_next_agreed_step_after_this_one():
    run = _run()
    trial = run.trial
    assert ChiefRow.of(chief_row(trial, None, 3)).next_at == trial.next_check
    trial.next_check = 2  # a check wanted at once (a watch lost): the next agreed step is still ahead
    assert ChiefRow.of(chief_row(trial, None, 5)).next_at == 6
