"""Several processes in one run (multi-process JAX, MultiWorkerMirroredStrategy's workers): the
chief's report holds every process's counts.

Each process counts its own compiles (its own XLA compiles its own copy of each program). At points
every process reaches together, the end of each epoch and of the fit, each gives its compile counts,
compile seconds and steps per phase, and each receives every process's (``Backend.gather``, a
collective). Never at a wall-clock flush: those fall at different steps in each process. Never after
a failure either (the fit ended by an exception on one process may still run on the others: a
collective there would wait forever).
"""

from __future__ import annotations

from typing import Any, Dict, List

from xla_keras.callback.state import CallState
from xla_keras.core.types import PHASES

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
