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

FIGURES = ("compilation_count", "compile_seconds", "steps")  # per phase, in PHASES order


def values_of(state: CallState) -> List[float]:
    """This process's figures, flat: for each of ``FIGURES``, one value per phase."""
    phases = state.session.phases
    return (
        [float(phases[p].compile_count) for p in PHASES]
        + [float(phases[p].compile_seconds()) for p in PHASES]
        + [float(phases[p].steps_run) for p in PHASES]
    )


def records_of(rows: List[List[float]]) -> List[Dict[str, Any]]:
    """``values_of``'s rows, one per process, as the report's ``processes`` entries."""
    n = len(PHASES)
    records = []
    for index, row in enumerate(rows):
        counts, seconds, steps = row[:n], row[n : 2 * n], row[2 * n : 3 * n]
        records.append(
            {
                "process": index,
                "compilation_count": {p: int(round(v)) for p, v in zip(PHASES, counts)},
                "compile_seconds": {p: v for p, v in zip(PHASES, seconds)},
                "steps": {p: int(round(v)) for p, v in zip(PHASES, steps)},
            }
        )
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
