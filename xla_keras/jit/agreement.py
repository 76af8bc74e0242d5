"""``jit="fastest"`` in several processes: one trial decides, every process switches at the same steps.
Pure.

Each process times its own steps, so trials run apart would decide apart, at different steps, and a
process running the other mode's program than the rest would leave them waiting in the step's
collective. So only process 0's trial checks. At each *agreed step* every process gathers a row
(``Backend.gather``: a collective, so every process calls it there, whether or not it has anything
pending) and reads the chief's: whether its check switched the mode, whether it decided (the mode and
the basis), and the next agreed step. The other processes do the same thing at the same step
(``Trial.follow``, ``Trial.adopt``). The first agreed step is the trial's first check, the same in every
process (the fit's start step and the trial's constants).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from xla_keras.jit.decision import BASES
from xla_keras.jit.run import FastestRun
from xla_keras.jit.trial import NEVER, Trial

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
class Verdict:
    """The chief's row, read."""

    switch: Optional[bool]  # the mode its check switched to at this step, or None
    decided: bool
    on: bool  # the decided mode
    basis: Optional[str]
    next_at: float  # the next agreed step; NEVER: no more

    @classmethod
    def of(cls, row: Sequence[float]) -> "Verdict":
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
    lead = Verdict.of(rows[0] if rows else row)
    run.agree_at = lead.next_at
    if chief:
        return switch
    if lead.decided and lead.basis is not None and (trial.running or trial.on != lead.on):
        return trial.adopt(step, lead.on, lead.basis, run.outlook(step))
    return trial.follow(step, lead.switch) if lead.switch is not None else None
