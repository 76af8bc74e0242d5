"""What the session asks about storms and the compile budget: each phase's cause, advice and fix. Pure."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Dict, List, Tuple

from xla_keras.core.types import MEASURED
from xla_keras.storms.advice import analyse
from xla_keras.storms.budget import PhaseAdvice, budget_text, over_budget
from xla_keras.storms.detection import Storm, batch_rows
from xla_keras.storms.real_length_advice import Costs

if TYPE_CHECKING:
    from xla_keras.config import MonitorConfig
    from xla_keras.core.phases import PhaseStats


class StormAnalysis:
    """A phase's varying inputs, advice and fix (``advice.analyse``), cached per phase until the phase
    sees a new signature, a new run or a new sample view: reports are built at every flush."""

    def __init__(self, config: MonitorConfig):
        self.config = config
        self._cache: Dict[str, tuple] = {}  # phase -> (key, analysis)

    def analyse(self, phase: str, stats: PhaseStats, data_kind: str) -> tuple:
        """(varying, advice, fix) from every shape the phase has seen so far."""
        history, view = stats.history, stats.view
        key = (len(history.signatures), history.runs, data_kind, view.version if view else None)
        cached = self._cache.get(phase)
        if cached is None or cached[0] != key:  # analyse reads only these (and the costs of that moment)
            cached = self._cache[phase] = (
                key,
                analyse(phase, history, self.config.storm_threshold, data_kind, view, phase_costs(stats)),
            )
        return cached[1]

    def storm(
        self, phase: str, stats: PhaseStats, data_kind: str, step: int, count: int, window_start: int, action: str
    ) -> Storm:
        """A storm that opens now, with its cause and fix as far as the shapes tell yet."""
        varying, advice, fix = self.analyse(phase, stats, data_kind)
        return Storm(
            phase,
            step,
            count,
            varying,
            advice,
            fix,
            compiles=stats.compile_count,
            compile_seconds=stats.compile_seconds(),
            steady_step_seconds=stats.timing.median_seconds,
            window_start=window_start,
            action=action,
        )

    def refreshed(self, storm: Storm, stats: PhaseStats, data_kind: str) -> Storm:
        """The storm with its cause and fix recomputed from every shape the phase has seen so far
        (more data than at the moment it opened)."""
        varying, advice, fix = self.analyse(storm.phase, stats, data_kind)
        return dataclasses.replace(storm, varying=varying, advice=advice, fix=fix)

    def budget_advice(
        self, phases: Dict[str, PhaseStats], storm_phases: set, data_kind: str
    ) -> Tuple[PhaseAdvice, ...]:
        """Phases below the storm threshold whose recompiles cost more than the compile budget."""
        out: List[PhaseAdvice] = []
        budget = self.config.compile_budget
        if budget is None:  # no budget: no such advice
            return ()
        for phase, stats in phases.items():
            if phase in storm_phases:
                continue
            first = stats.records[0].seconds if stats.records and stats.records[0].source in MEASURED else None
            over = over_budget(
                stats.compile_count,
                stats.compile_seconds(),
                stats.steps_run,
                stats.timing.median_seconds,
                budget,
                first,
                self.config.compile_budget_floor,
            )
            if over is None:
                continue
            varying, advice, fix = self.analyse(phase, stats, data_kind)
            if fix.get("kind") == "unknown":
                continue  # nothing in the shapes explains the compiles: no fix to offer
            item = PhaseAdvice(
                phase,
                stats.compile_count,
                stats.compile_seconds(),
                *over,
                budget,
                varying,
                advice,
                fix,
            )
            item.advice = budget_text(phase, item)
            out.append(item)
        return tuple(out)


def phase_costs(stats: PhaseStats) -> Costs:
    """What the advice weighs a fix against: rows per run, the mean compile, the steady step."""
    rows = sum(
        (batch_rows(sig) or 0) * stats.history.batches.get(fp, 0) for fp, sig in stats.history.signatures.items()
    )
    per_run = rows // stats.history.runs if stats.history.runs else rows  # so far, in the first run
    mean = stats.compile_seconds() / stats.compile_count if stats.compile_count else None
    return Costs(per_run or None, mean, stats.timing.median_seconds, bool(stats.history.runs))
