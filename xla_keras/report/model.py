"""XlaReport and its pieces: plain dataclasses and their JSON round-trip. Pure: no TensorFlow.

``to_dict()`` keys are a contract: add keys, never rename or remove them, and bump ``SCHEMA_VERSION`` when
adding (readers go through ``schema.parse_report``). The words are ``render.py``'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from xla_keras.core.signatures import InputSignature, from_jsonable, to_jsonable
from xla_keras.core.timing import excess_over_steady
from xla_keras.core.types import PHASES
from xla_keras.report.render import (
    render,
    render_markdown,
)
from xla_keras.storms.budget import PhaseAdvice
from xla_keras.storms.detection import Storm

SCHEMA_VERSION = 6  # see schema.py for what each version added


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

    def details(self) -> str:
        """The summary with every storm's and advice's full text and every note whole (``str(report)``
        trims them to their headline and fix), in 100 columns.

        Returns:
            The text ``xla-keras report --full LOGDIR`` prints.

        Example:
            >>> XlaReport(notes=["a note " * 40]).details().count("note:")
            1
        """
        return render(self, full=True)

    def to_markdown(self) -> str:
        return render_markdown(self)


def _finite_or_none(x: Optional[float]) -> Optional[float]:
    return None if x is None or math.isinf(x) or math.isnan(x) else x
