"""An XlaReport from a frozen session snapshot and the monitor's and the backend's facts. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from xla_keras.core.timing import break_even_steps, comparable, share
from xla_keras.core.types import MEASURED, PHASES
from xla_keras.jit.modes import JitState, ProbeFacts, verdict
from xla_keras.report.model import ESTIMATED_BECAUSE, Compilation, XlaReport
from xla_keras.session.phases import SessionSnapshot
from xla_keras.storms.detection import partial_batch_note, train_vs_validation_note


@dataclass(frozen=True)
class ReportContext:
    """What the report needs beyond the session: the monitor's and the backend's facts."""

    jit_mode: str
    jit_state: JitState
    probe: ProbeFacts
    traces: Tuple[str, ...] = ()
    cache_saved_seconds: Optional[float] = None
    extra_notes: Tuple[str, ...] = ()  # the backend's and the monitor's notes (cache, errors)
    refused: Optional[str] = None  # the monitor stepped aside: the reason replaces the verdict
    log_dir: Optional[str] = None
    versions: Dict[str, str] = field(default_factory=dict)
    run_state: Optional[str] = None
    backend: str = "tensorflow"
    other_compilations: Dict[str, dict] = field(default_factory=dict)
    processes: Tuple[Dict[str, Any], ...] = ()  # several processes: each one's counts, gathered
    costs: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # per phase: achieved rates (callback/cost_card.py)
    coverage: Optional[Dict[str, Any]] = None  # auto-clustering: the trace window's coverage (jit/coverage.py)


def build_report(snapshot: SessionSnapshot, context: ReportContext) -> XlaReport:
    """An XlaReport from a frozen snapshot: nothing live is read or changed."""
    report = XlaReport(jit_mode=context.jit_mode)
    records: List[Compilation] = []
    for name, phase in snapshot.phases.items():
        records.extend(phase.records)
        report.compilation_count[name] = phase.compile_count
        report.steps[name] = phase.steps
        report.steady_step_seconds_by_phase[name] = phase.steady_seconds
        report.steady_step_counts[name] = phase.steady_count
        report.step_timing[name] = {
            "basis": phase.steady_basis,
            "steps": phase.steady_count,
            "intervals": phase.steady_intervals,
            "withheld": phase.steady_withheld,
        }
        report.slow_steps.extend(phase.slow)
        report.slow_step_count += phase.slow_count
        report.compilations_dropped += phase.records_dropped
        if phase.outside_compiles:
            report.outside_step_compilations[name] = {"count": phase.outside_compiles, "seconds": phase.outside_seconds}
    report.compilations = sorted(records, key=lambda c: (PHASES.index(c.phase), c.step))
    report.distinct_signatures = dict(snapshot.distinct_signatures)
    report.steady_step_seconds = report.steady_step_seconds_by_phase["train"]
    report.compile_seconds = sum(p.compile_seconds for p in snapshot.phases.values())
    report.wall_seconds = snapshot.wall_seconds
    report.compile_share = share(report.compile_seconds, report.wall_seconds)
    measured = sum(1 for c in report.compilations if c.source in MEASURED)
    report.jit_active, report.jit_reason = verdict(
        context.jit_state,
        context.probe,
        measured=measured,
        compiled=report.total_compilations,
        steps=sum(report.steps.values()),
        fell_back=snapshot.fallback is not None or bool(snapshot.jit_decision and snapshot.jit_decision["switches"]),
    )
    keyed = [(name, p.value_keys[0]) for name, p in snapshot.phases.items() if p.value_compiles and p.value_keys]
    if keyed and report.jit_active:
        name, key = keyed[0]
        report.jit_reason += (
            f"; and ({name}) once per new value of {key.what()}, which the step computes from its data and XLA "
            "takes as a compile-time constant"
        )
    report.jit_fix = context.jit_state.fix
    report.unsupported_ops = context.jit_state.unsupported
    report.coverage = context.coverage
    if context.refused:
        report.jit_active, report.jit_reason, report.jit_fix = None, context.refused, None
    report.storms = list(snapshot.storms)
    report.advice = list(snapshot.advice)
    report.fallback = snapshot.fallback
    report.jit_decision = snapshot.jit_decision
    if snapshot.jit_decision:
        report.break_even_steps = _trial_break_even(snapshot.jit_decision, report)
    report.traces = list(context.traces)
    report.cache_saved_seconds = context.cache_saved_seconds
    report.probe = context.probe.label
    report.notes = (
        list(snapshot.notes)
        + _phase_notes(snapshot)
        + estimate_notes(report.compilations, report.compilations_dropped)
        + list(context.extra_notes)
    )
    report.log_dir = context.log_dir
    report.versions = dict(context.versions)
    report.run_state = context.run_state
    report.backend = context.backend
    report.other_compilations = {k: dict(v) for k, v in context.other_compilations.items()}
    report.processes = [dict(p) for p in context.processes]
    report.costs = {phase: dict(rates) for phase, rates in context.costs.items()}
    for name, phase in snapshot.phases.items():
        if phase.steps and phase.waits is not None:
            waits = phase.waits.to_dict()
            waits["input_share"] = share(waits["input_seconds"], report.wall_seconds) or 0.0
            report.waits[name] = waits
    report.own_seconds = dict(snapshot.own_seconds or {})
    report.precompile = dict(snapshot.precompile or {})
    return report


def _phase_notes(snapshot: SessionSnapshot) -> List[str]:
    notes = []
    for name, phase in snapshot.phases.items():
        if phase.rebuilds:
            notes.append(
                f"{name}: the step function was rebuilt {phase.rebuilds} time(s) outside the monitor (e.g. "
                "model.compile(...)): a rebuilt function starts with an empty XLA compile cache, so shapes "
                "compiled before compile again"
            )
    for name, phase in snapshot.phases.items():
        if phase.value_compiles and not phase.value_keys:  # value keys have their own note (session.value_keyed)
            notes.append(
                f"{name}: XLA compiled {phase.value_compiles} module(s) for ragged batches of shapes it had "
                "compiled already: the model needs the row splits as compile-time constants (e.g. "
                "tf.reduce_mean over the ragged axis), so XLA compiles per distinct row lengths, not per "
                "shape. Fix: pad to dense batches (padded_batch, RaggedTensor.to_tensor) or compute from the "
                "row splits with gathers"
            )
    storm_phases = {s.phase for s in snapshot.storms} | {a.phase for a in snapshot.advice}  # advice says it all
    for name, phase in snapshot.phases.items():
        note = partial_batch_note(name, phase.history) if name not in storm_phases else None
        if note and phase.compile_count:
            notes.append(note)
    note = train_vs_validation_note(snapshot.phases["train"].history, snapshot.phases["test"].history)
    if note and snapshot.phases["test"].compile_count:
        notes.append(note)
    return notes


def estimate_notes(records: List[Compilation], dropped: int = 0) -> List[str]:
    """One note per reason some compiles' seconds are estimated from step time, naming those
    records (phase and step); nothing when every record was measured."""
    by_reason: Dict[str, List[Compilation]] = {}
    for record in records:
        if record.source == "timing":
            by_reason.setdefault(record.estimated_because or "unprobed", []).append(record)
    notes = []
    for because, estimated in by_reason.items():
        steps = [f"{c.phase} step {c.step}" for c in estimated]
        named = ", ".join(steps[:6]) + (f" and {len(steps) - 6} more" if len(steps) > 6 else "")
        more = f" (of the {len(records)} records kept; {dropped} more were not kept)" if dropped else ""
        notes.append(
            f"{len(estimated)} compile time(s) estimated from step time (the step minus the steady median; "
            f"source='timing'): {named}{more}: {ESTIMATED_BECAUSE.get(because, because)}"
        )
    return notes


def _trial_break_even(decision: dict, report: XlaReport) -> Optional[float]:
    """jit='fastest' measured both modes' steady steps in this fit: the steps after which the train
    phase's XLA compiles are repaid (inf: XLA's steps were not faster); None below MIN_COMPARE_STEPS
    steady steps a side."""
    medians, steps = decision.get("medians") or {}, decision.get("steps_measured") or {}
    if not comparable(steps.get("on"), steps.get("off")):
        return None
    return break_even_steps(
        sum(c.seconds for c in report.compilations if c.phase == "train"), medians.get("on"), medians.get("off")
    )
