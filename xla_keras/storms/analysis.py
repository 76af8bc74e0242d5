"""What the session asks about storms and the compile budget: each phase's cause, advice and fix. Pure."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

from xla_keras.core.phases import CallBase
from xla_keras.core.types import MEASURED
from xla_keras.storms.advice import analyse
from xla_keras.storms.budget import PhaseAdvice, budget_text, over_budget
from xla_keras.storms.detection import Storm, batch_rows
from xla_keras.storms.fixes import fix_value, recomputed_words
from xla_keras.storms.real_length_advice import Costs

if TYPE_CHECKING:
    from xla_keras.config import MonitorConfig
    from xla_keras.core.phases import PhaseStats

MAX_PAST_ADVICE = 16  # budget advice kept from earlier calls (one per phase, kind of call and fix)
NO_CALL_BASE = CallBase(0, 0.0, 0, 0, 0, 0, ({}, {}, 0))  # no call began: judged from the start


class StormAnalysis:
    """A phase's varying inputs, advice and fix (``advice.analyse``), cached per phase until the phase
    sees a new signature, a new run or a new sample view: reports are built at every flush."""

    def __init__(self, config: MonitorConfig):
        self.config = config
        self._cache: Dict[str, tuple] = {}  # phase -> (key, analysis)
        self.past_advice: List[PhaseAdvice] = []  # the compile budget's advice on the calls before (bounded)

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
        (more data than at the moment it opened); when its fix changed, ``fix_at_storm`` keeps the
        one the warning was computed with and the advice says what changed."""
        varying, advice, fix = self.analyse(storm.phase, stats, data_kind)
        if (fix.get("kind"), fix_value(fix)) == (storm.fix.get("kind"), fix_value(storm.fix)):
            return dataclasses.replace(storm, varying=varying, advice=advice, fix=fix)
        advice = f"{advice} {recomputed_words(storm.fix, fix)}"
        return dataclasses.replace(storm, varying=varying, advice=advice, fix=fix, fix_at_storm=storm.fix)

    def call_ended(
        self, phases: Dict[str, PhaseStats], storms: Sequence[Storm], data_kind: str, run: str, run_index: int
    ) -> None:
        """The running call is over (the next begins): its budget advice is kept as it stands; the
        same advice for the same kind of call (an evaluate in a loop) once, the latest."""
        for item in self.budget_advice(phases, storms, data_kind, run, run_index):
            same = (item.phase, item.run, item.fix)
            kept = [a for a in self.past_advice if (a.phase, a.run, a.fix) != same]
            self.past_advice = (kept + [item])[-MAX_PAST_ADVICE:]

    def advice(
        self, phases: Dict[str, PhaseStats], storms: Sequence[Storm], data_kind: str, run: str, run_index: int
    ) -> Tuple[PhaseAdvice, ...]:
        """The compile budget's advice: on the calls before, then on the running (or last) call."""
        return tuple(self.past_advice) + self.budget_advice(phases, storms, data_kind, run, run_index)

    def budget_advice(
        self, phases: Dict[str, PhaseStats], storms: Sequence[Storm], data_kind: str, run: str, run_index: int = 1
    ) -> Tuple[PhaseAdvice, ...]:
        """Phases of the running call (``run``: "fit", "evaluate" or "predict") whose recompiles in
        that call cost more than the compile budget, below the storm threshold: judged on the call
        alone, so two fits that batch differently on purpose are never merged."""
        out: List[PhaseAdvice] = []
        budget = self.config.compile_budget
        if budget is None:  # no budget: no such advice
            return ()
        for phase, stats in phases.items():
            base = stats.call_base or NO_CALL_BASE
            if any(s.phase == phase and s.step > base.step for s in storms):
                continue  # a storm of this call says it all
            compiles = stats.compile_count - base.compiles
            seconds = stats.compile_seconds() - base.compile_seconds
            first = None
            if stats.records_dropped == base.records_dropped and len(stats.records) > base.records:
                record = stats.records[base.records]  # the call's first compile, when kept
                first = record.seconds if record.source in MEASURED else None
            over = over_budget(
                compiles,
                seconds,
                stats.steps_run - base.steps_run,
                stats.timing.median_seconds,
                budget,
                first,
                self.config.compile_budget_floor,
            )
            if over is None:
                continue
            history = stats.history.since(base.history)
            varying, advice, fix = analyse(
                phase, history, self.config.storm_threshold, data_kind, stats.view, phase_costs(stats)
            )
            if fix.get("kind") == "unknown":
                continue  # nothing in the shapes explains the compiles: no fix to offer
            item = PhaseAdvice(phase, compiles, seconds, *over, budget, varying, advice, fix, run, run_index)
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
