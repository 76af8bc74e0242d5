"""XlaReport and its pieces: plain dataclasses, rendering, JSON round-trip.

Pure: no TensorFlow. ``to_dict()`` keys are a contract: add keys, never rename
or remove them, and bump ``metadata.SCHEMA_VERSION`` when adding (readers go
through ``metadata.parse_report``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from xla_keras.core.signatures import InputSignature, describe, from_jsonable, to_jsonable
from xla_keras.core.timing import excess_over_steady
from xla_keras.report.schema import SCHEMA_VERSION
from xla_keras.storms.advice import PhaseAdvice
from xla_keras.storms.detection import Storm

PHASES = ("train", "test", "predict")
# How a compile's seconds were measured: from XLA's compiler events in a profiler
# probe; from the span of the op that triggered the compile, when the compiler
# emits no events (TensorFlow 2.16/2.17 on CPU); or step time minus the steady
# median (no probe could run).
SOURCES = ("profiler", "op_span", "jax", "timing")
MEASURED = ("profiler", "op_span", "jax")  # seconds observed in a probe, not estimated from step time


@dataclass
class Compilation:
    """One compiled XLA module.

    Attributes:
        phase: "train", "test" or "predict".
        step: 1-based global step of the phase at which it compiled.
        signature: the input signature that made it compile.
        seconds: compile time; from the XLA compiler's events when
            ``source == "profiler"``, from the span of the op that triggered
            the compile when ``"op_span"`` (TensorFlow 2.16/2.17 on CPU, whose
            compiler emits no events), from JAX's own compile events when
            ``"jax"`` (tracing + lowering + XLA compile of the step), else
            (``"timing"``) step time minus the steady median.
        source: "profiler", "op_span", "jax" or "timing".
        cached: served from the persistent compilation cache (None: unknown,
            when a probe that cannot see the compiler saw a mix of loads and
            compiles).
        step_seconds: wall time of the whole step that compiled.
        traced: the step also traced the tf.function (first step of a function),
            so a timing estimate includes tracing.
        last_batch: the step was the last of its epoch (train) or of its
            evaluate / predict run: a partial last batch compiles there.
    """

    phase: str
    step: int
    signature: InputSignature
    seconds: float
    source: str
    cached: Optional[bool] = False
    step_seconds: Optional[float] = None
    traced: bool = False
    call_batches: int = 1
    call_compiles: int = 1
    last_batch: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {
            "phase": self.phase,
            "step": self.step,
            "signature": to_jsonable(self.signature),
            "seconds": self.seconds,
            "source": self.source,
            "cached": self.cached,
            "step_seconds": self.step_seconds,
            "traced": self.traced,
            "call_batches": self.call_batches,
            "call_compiles": self.call_compiles,
            "last_batch": self.last_batch,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Compilation":
        """By key, never by position: unknown keys are ignored, optional ones take their defaults."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["signature"] = from_jsonable(d["signature"])
        return cls(**known)

    def estimate_from(self, steady_seconds: Optional[float]) -> float:
        """The timing-fallback estimate: this compile's share of the time its
        call (``call_batches`` batches, ``call_compiles`` new signatures) ran
        above the steady median."""
        if self.step_seconds is None:
            return self.seconds
        steady_call = None if steady_seconds is None else self.call_batches * steady_seconds
        return excess_over_steady(self.step_seconds, steady_call) / max(1, self.call_compiles)


@dataclass
class SlowStep:
    """A step whose signature was already compiled but that ran far above the
    steady median: something cost time that the ledger cannot name."""

    phase: str
    step: int
    seconds: float
    steady_seconds: float
    signature: InputSignature

    def to_dict(self) -> Dict[str, Any]:
        return {
            "phase": self.phase,
            "step": self.step,
            "seconds": self.seconds,
            "steady_seconds": self.steady_seconds,
            "signature": to_jsonable(self.signature),
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SlowStep":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["signature"] = from_jsonable(d["signature"])
        return cls(**known)


@dataclass
class XlaReport:
    """What XLA did in the monitored calls and what it cost.

    ``str(report)`` is the human summary; ``to_dict()`` is JSON-able.
    """

    jit_mode: str = "keep"
    jit_active: Optional[bool] = None
    jit_reason: str = ""
    compilations: List[Compilation] = field(default_factory=list)
    compilation_count: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    compilations_dropped: int = 0
    distinct_signatures: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    storms: List[Storm] = field(default_factory=list)
    # Phases whose recompiles cost more than the compile budget, below the storm threshold.
    advice: List[PhaseAdvice] = field(default_factory=list)
    fallback: Optional[Dict[str, Any]] = None
    # jit="fastest": the mode kept and the evidence (fastest.Decision.to_dict()); "mode" is null while the
    # trial measures. None for the other jit modes.
    jit_decision: Optional[Dict[str, Any]] = None
    steps: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    steady_step_seconds: Optional[float] = None
    steady_step_seconds_by_phase: Dict[str, Optional[float]] = field(default_factory=lambda: dict.fromkeys(PHASES))
    compile_seconds: float = 0.0
    wall_seconds: float = 0.0
    compile_share: Optional[float] = None
    slow_steps: List[SlowStep] = field(default_factory=list)
    slow_step_count: int = 0
    break_even_steps: Optional[float] = None
    cache_saved_seconds: Optional[float] = None
    probe: str = "profiler"
    traces: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    log_dir: Optional[str] = None
    versions: Dict[str, str] = field(default_factory=dict)
    # "running": a fit / evaluate / predict was in progress when this report was built (a file read
    # later is what had been logged by then); "interrupted": the last call ended by an exception,
    # Ctrl-C or on_storm="raise"; "finished"; None: nothing ran yet, or written before schema 3.
    run_state: Optional[str] = None
    # The Keras backend that ran ("tensorflow", "jax"), and compiles kept out of the step ledger (JAX):
    # {"in_steps": {"count", "seconds"}} op-level / helper executables compiled inside step calls,
    # {"outside_steps": {...}} those compiled outside them (initialisation, metrics), while monitored.
    backend: str = "tensorflow"
    other_compilations: Dict[str, Dict[str, float]] = field(default_factory=dict)

    @property
    def total_compilations(self) -> int:
        return sum(self.compilation_count.values())

    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "jit_mode": self.jit_mode,
            "jit_active": self.jit_active,
            "jit_reason": self.jit_reason,
            "compilations": [c.to_dict() for c in self.compilations],
            "compilation_count": dict(self.compilation_count),
            "compilations_dropped": self.compilations_dropped,
            "distinct_signatures": dict(self.distinct_signatures),
            "storms": [s.to_dict() for s in self.storms],
            "advice": [a.to_dict() for a in self.advice],
            "fallback": self.fallback,
            "jit_decision": self.jit_decision,
            "steps": dict(self.steps),
            "steady_step_seconds": self.steady_step_seconds,
            "steady_step_seconds_by_phase": dict(self.steady_step_seconds_by_phase),
            "compile_seconds": self.compile_seconds,
            "wall_seconds": self.wall_seconds,
            "compile_share": self.compile_share,
            "slow_steps": [s.to_dict() for s in self.slow_steps],
            "slow_step_count": self.slow_step_count,
            "break_even_steps": _finite_or_none(self.break_even_steps),
            "cache_saved_seconds": self.cache_saved_seconds,
            "probe": self.probe,
            "traces": list(self.traces),
            "notes": list(self.notes),
            "log_dir": self.log_dir,
            "versions": dict(self.versions),
            "run_state": self.run_state,
            "backend": self.backend,
            "other_compilations": {k: dict(v) for k, v in self.other_compilations.items()},
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "XlaReport":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["compilations"] = [Compilation.from_dict(c) for c in d.get("compilations", [])]
        known["slow_steps"] = [SlowStep.from_dict(s) for s in d.get("slow_steps", [])]
        known["storms"] = [Storm.from_dict(s) for s in d.get("storms", [])]
        known["advice"] = [PhaseAdvice.from_dict(a) for a in d.get("advice", [])]
        return cls(**known)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "XlaReport":
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        return render(self)

    def to_markdown(self) -> str:
        return render_markdown(self)


def _finite_or_none(x: Optional[float]) -> Optional[float]:
    return None if x is None or math.isinf(x) or math.isnan(x) else x


def _ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.2f} s"


def _active_word(active: Optional[bool]) -> str:
    return {True: "yes", False: "NO", None: "unknown"}[active]


def render(report: XlaReport) -> str:
    """The short human summary printed at the end of a fit."""
    phases = [p for p in PHASES if report.steps.get(p)]
    by_phase: Dict[str, float] = {}
    sources = set()
    for c in report.compilations:
        by_phase[c.phase] = by_phase.get(c.phase, 0.0) + c.seconds
        sources.add(c.source)
    lines = ["XLA report (xla_keras)"]
    lines.append(f"  jit requested   : {report.jit_mode}    XLA active: {_active_word(report.jit_active)}")
    if report.jit_reason:
        lines.append(f"  why             : {report.jit_reason}")
    compiles = (
        ", ".join(
            f"{p} {report.compilation_count.get(p, 0)}" + (f" ({_ms(by_phase[p])})" if p in by_phase else "")
            for p in phases
        )
        or "none"
    )
    how = f"  [measured by {'/'.join(sorted(sources))}]" if sources else ""
    lines.append(f"  compiles        : {compiles}{how}")
    lines.append(
        "  signatures      : " + (", ".join(f"{p} {report.distinct_signatures.get(p, 0)}" for p in phases) or "none")
    )
    lines.append(
        f"  compile time    : {_ms(report.compile_seconds)}"
        + (
            f" = {report.compile_share:.0%} of {_ms(report.wall_seconds)} monitored"
            if report.compile_share is not None
            else ""
        )
    )
    lines.append(
        "  steady step     : "
        + (", ".join(f"{p} {_ms(report.steady_step_seconds_by_phase.get(p))}" for p in phases) or "n/a")
    )
    cached = sum(1 for c in report.compilations if c.cached)
    if cached:
        lines.append(
            f"  persistent cache: {cached} of the compiles were loads from the cache"
            + (f", {_ms(report.cache_saved_seconds)} saved" if report.cache_saved_seconds is not None else "")
        )
    for line in _other_compile_lines(report):
        lines.append(f"  other compiles  : {line}")
    if report.break_even_steps is not None:
        lines.append(f"  break-even      : {report.break_even_steps:.0f} steps")
    elif _measured_both(report):
        lines.append(f"  break-even      : {_no_break_even(report)}")
    if report.slow_step_count:
        worst = max(report.slow_steps, key=lambda s: s.seconds, default=None)
        lines.append(
            f"  slow steps      : {report.slow_step_count} known-signature steps far above the "
            f"steady median" + (f" (worst: {worst.phase} step {worst.step}, {_ms(worst.seconds)})" if worst else "")
        )
    for storm in report.storms:
        lines.append(f"  STORM ({storm.phase}, step {storm.step}, {storm.action}): {storm.advice}")
    for item in report.advice:
        lines.append(f"  ADVICE ({item.phase}): {item.advice}")
    for line in decision_lines(report.jit_decision):
        lines.append(f"  fastest         : {line}")
    if report.fallback:
        lines.append(f"  fallback        : {report.fallback['reason']}")
        cost = fallback_cost(report.fallback)
        if cost:
            lines.append(f"  without XLA     : {cost}")
    if report.compilations:
        lines.append("  compiled for    :")
        shown = report.compilations[:8]
        for c in shown:
            lines.append(
                f"    {c.phase} step {c.step}: {describe(c.signature)}  {_ms(c.seconds)}"
                + (" (estimated from step time)" if c.source == "timing" else "")
                + (" (loaded from the persistent cache)" if c.cached else "")
            )
        rest = report.total_compilations - len(shown)
        if rest > 0:
            lines.append(f"    ... {rest} more")
    if report.traces:
        lines.append(
            f"  profiler traces : {len(report.traces)} for the Profile tab "
            f"({', '.join(t.split(':')[0] for t in report.traces)})"
        )
    for note in report.notes:
        lines.append(f"  note: {note}")
    if report.log_dir:
        lines.append(f"  logs            : tensorboard --logdir {report.log_dir}")
    return "\n".join(lines)


def fallback_cost(fallback: Dict[str, Any]) -> Optional[str]:
    """What running without XLA cost after a storm fallback, measured: the phase's steady step
    after the switch against its steady XLA step before it."""
    before = fallback.get("xla_steady_step_seconds") or {}
    after = fallback.get("steady_step_seconds_after") or {}
    parts = []
    for phase in PHASES:
        new, old = after.get(phase), before.get(phase)
        if new is None:
            continue
        if old:
            parts.append(f"{phase} steady step {_ms(new)} vs {_ms(old)} with XLA before the switch ({new / old:.1f}x)")
        else:
            parts.append(
                f"{phase} steady step {_ms(new)} (no steady XLA step was measured before the switch: "
                "every XLA step had compiled)"
            )
    return "; ".join(parts) or None


def _measured_both(report: XlaReport) -> bool:
    medians = (report.jit_decision or {}).get("medians") or {}
    return medians.get("on") is not None and medians.get("off") is not None


def _no_break_even(report: XlaReport) -> str:
    if _measured_both(report):
        return "never: XLA's steady steps were not faster than without it (jit='fastest' measured both)"
    return "unknown (no non-XLA baseline measured)"


def decision_lines(decision: Optional[Dict[str, Any]]) -> List[str]:
    """jit='fastest' in a few lines: the mode kept and why, then the evidence."""
    if not decision:
        return []
    medians, spreads = decision.get("medians") or {}, decision.get("spreads") or {}
    steps = decision.get("steps_measured") or {}
    kept = decision.get("mode")
    lines = [f"XLA {kept.upper()} kept ({decision.get('basis')})" if kept else "measuring (no decision yet)"]
    measured = [
        f"XLA {m}: median {_ms(medians.get(m))} (IQR {_ms(spreads.get(m))}) over {steps.get(m, 0)} steps"
        for m in ("on", "off")
        if medians.get(m) is not None
    ]
    if measured:
        lines.append("; ".join(measured))
    cost = [f"trial compiles {_ms(decision.get('trial_compile_seconds') or 0.0)}"]
    saving = decision.get("predicted_saving_seconds")
    if saving is not None:
        cost.append(f"predicted saving {_ms(saving)} over the {decision.get('steps_left')} steps left")
    if decision.get("switches"):
        cost.append(f"{decision['switches']} switches")
    if decision.get("revised_at_step") is not None:
        cost.append(f"XLA off again from train step {decision['revised_at_step']} (compiles beyond the price)")
    lines.append(", ".join(cost))
    return lines


_OTHER_WORDS = {
    "in_steps": "inside the step calls, not the step's own program (op by op: one per primitive and shape; "
    "or a helper such as predict's concatenate)",
    "outside_steps": "outside the step calls (initialisation, metrics, optimizer set-up)",
}


def _other_compile_lines(report: XlaReport) -> List[str]:
    """Compiles kept out of the step ledger, one line per kind (JAX)."""
    return [
        f"{int(v.get('count', 0))} executable(s), {_ms(v.get('seconds', 0.0))}, {_OTHER_WORDS.get(k, k)}"
        for k, v in sorted(report.other_compilations.items())
        if v.get("count")
    ]


def render_markdown(report: XlaReport) -> str:
    """The report as markdown, for TensorBoard's Text tab (``xla/report``)."""
    phases = [p for p in PHASES if report.steps.get(p)] or ["train"]
    by_phase: Dict[str, float] = {}
    for c in report.compilations:
        by_phase[c.phase] = by_phase.get(c.phase, 0.0) + c.seconds
    out = [
        "## XLA report",
        "",
        f"**jit requested:** `{report.jit_mode}` &nbsp; **XLA active:** {_active_word(report.jit_active)}",
        "",
        f"{report.jit_reason}",
        "",
        "| phase | steps | compiles | compile time | distinct signatures | steady step |",
        "|---|---|---|---|---|---|",
    ]
    for p in phases:
        out.append(
            f"| {p} | {report.steps.get(p, 0)} | {report.compilation_count.get(p, 0)} | "
            f"{_ms(by_phase.get(p)) if p in by_phase else '0'} | {report.distinct_signatures.get(p, 0)} | "
            f"{_ms(report.steady_step_seconds_by_phase.get(p))} |"
        )
    out += [
        "",
        f"**compile time:** {_ms(report.compile_seconds)}"
        + (
            f" ({report.compile_share:.0%} of {_ms(report.wall_seconds)} monitored)"
            if report.compile_share is not None
            else ""
        ),
    ]
    out.append("")
    out.append(
        "**break-even:** "
        + (f"{report.break_even_steps:.0f} steps" if report.break_even_steps is not None else _no_break_even(report))
    )
    for line in _other_compile_lines(report):
        out += ["", f"**other compiles:** {line}"]
    if report.slow_step_count:
        out += ["", f"**slow steps:** {report.slow_step_count} known-signature steps far above the steady median"]
    if report.storms:
        out += ["", "### Recompilation storms"]
        for storm in report.storms:
            out.append(
                f"- **{storm.phase}, step {storm.step}** ({storm.count} new shapes, action "
                f"`{storm.action}`): {storm.advice}"
            )
    if report.advice:
        out += ["", "### Compile budget"]
        out += [f"- **{item.phase}**: {item.advice}" for item in report.advice]
    if report.jit_decision:
        out += ["", "### jit='fastest'"] + [f"- {line}" for line in decision_lines(report.jit_decision)]
    if report.fallback:
        out += ["", f"**fallback:** {report.fallback['reason']}"]
        cost = fallback_cost(report.fallback)
        if cost:
            out += ["", f"**without XLA:** {cost}"]
    if report.traces:
        out += ["", "### Profiler traces (Profile tab)"] + [f"- `{t}`" for t in report.traces]
    if report.notes:
        out += ["", "### Notes"] + [f"- {n}" for n in report.notes]
    return "\n".join(out)
