"""Several processes in one run (multi-process JAX, MultiWorkerMirroredStrategy's workers) agree:

* the chief's report holds every process's counts (``gather_processes``);
* TensorFlow's workers act on a storm at the same step (``StormAgreement``, callback/storm_action.py);
* jit='fastest' switches and keeps the chief's mode at the same step in every process (``agreed_check``).

Each process counts its own compiles (its own XLA compiles its own copy of each program). At points
every process reaches together, the end of each epoch and of the fit, each gives its compile counts,
compile seconds and steps per phase, and each receives every process's (``Backend.gather``, a
collective). Never at a wall-clock flush: those fall at different steps in each process. Never after
a failure either (the fit ended by an exception on one process may still run on the others: a
collective there would wait forever).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from xla_keras.callback.fastest_run import FastestRun
from xla_keras.callback.state import CallState
from xla_keras.core.types import PHASES
from xla_keras.jit.decision import BASES
from xla_keras.jit.trial import NEVER, Trial

# What each process gives, per phase, in PHASES order: a report key and how a phase's stats read it.
FIGURES = {
    "compilation_count": lambda stats: stats.compile_count,
    "compile_seconds": lambda stats: stats.compile_seconds(),
    "steps": lambda stats: stats.steps_run,
}
COUNTS = ("compilation_count", "steps")  # whole numbers (gathered as float32, exact below 2**24)


def values_of(state: CallState) -> List[float]:
    """This process's figures, flat: for each of ``FIGURES``, one value per phase."""
    phases = state.session.phases
    return [float(read(phases[p])) for read in FIGURES.values() for p in PHASES]


def records_of(rows: List[List[float]]) -> List[Dict[str, Any]]:
    """``values_of``'s rows, one per process, as the report's ``processes`` entries."""
    n = len(PHASES)
    records = []
    for index, row in enumerate(rows):
        record: Dict[str, Any] = {"process": index}
        for k, name in enumerate(FIGURES):
            values = row[k * n : (k + 1) * n]
            record[name] = {p: int(round(v)) if name in COUNTS else v for p, v in zip(PHASES, values)}
        records.append(record)
    return records


def gather_processes(state: CallState) -> None:
    """At a point every process of the distribution reaches: every process's figures, into the report."""
    if state.dist.processes < 2:
        return
    try:
        rows = state.backend.gather(values_of(state))
    except Exception as error:  # noqa: BLE001 - a peer gone (killed, crashed) fails the fit's next step anyway
        step = state.session.phases["train"].step
        state.session.notes.add_once(
            "processes-gather",
            f"the processes' counts could not be gathered at train step {step} ({error!r:.200}): "
            "`processes` holds the last gathering",
        )
        return
    if rows is not None:
        state.current.processes = records_of(rows)


# jit='fastest' across processes: every process switches and keeps the chief's mode at the same step.


Gather = Callable[[List[float]], Optional[List[List[float]]]]

NO_SWITCH = -1.0
# After XLA was kept on over a default off, the chief's watch may still turn it off (Trial._revise):
# the processes agree this often until the fit ends.
WATCH_AGREE_STEPS = 200


def chief_row(trial: Trial, switch: Optional[bool], step: int) -> List[float]:
    """What a process gives at an agreed step (only process 0's is read): its check's switch, its
    decision, and the next agreed step (-1: none, the trial is over)."""
    decision = trial.decision
    if decision is None:
        next_at = trial.next_check
    elif trial.watch is not None:
        next_at = min(trial.next_check, step + WATCH_AGREE_STEPS)
    else:
        next_at = NEVER
    return [
        NO_SWITCH if switch is None else float(switch),
        float(decision is not None),
        float(decision is not None and decision.mode == "on"),
        float(BASES.index(decision.basis)) if decision is not None else -1.0,
        -1.0 if next_at == NEVER else float(max(next_at, step + 1)),
    ]


@dataclass(frozen=True)
class ChiefRow:
    """The chief's row, read."""

    switch: Optional[bool]  # the mode its check switched to at this step, or None
    decided: bool
    on: bool  # the decided mode
    basis: Optional[str]
    next_at: float  # the next agreed step; NEVER: no more

    @classmethod
    def of(cls, row: Sequence[float]) -> "ChiefRow":
        switch, decided, on, basis, next_at = row[:5]
        return cls(
            switch=None if switch < 0 else bool(switch),
            decided=bool(decided),
            on=bool(on),
            basis=BASES[int(basis)] if basis >= 0 else None,
            next_at=NEVER if next_at < 0 else next_at,
        )


def agreed_check(run: FastestRun, step: int, chief: bool, gather: Gather) -> Optional[bool]:
    """At an agreed step, in every process: the chief's trial checks; each process gathers, reads the
    chief's row and does what it did. Returns the mode to switch to now, or None."""
    trial = run.trial
    switch = run.check(step) if chief and step >= trial.next_check else None
    row = chief_row(trial, switch, step)
    rows = gather(row)
    lead = ChiefRow.of(rows[0] if rows else row)
    run.agree_at = lead.next_at
    if chief:
        return switch
    if lead.decided and lead.basis is not None and (trial.running or trial.on != lead.on):
        return trial.adopt(step, lead.on, lead.basis, run.outlook(step))
    return trial.follow(step, lead.switch) if lead.switch is not None else None
