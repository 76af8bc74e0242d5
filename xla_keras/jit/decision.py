"""What ``jit="fastest"`` decided, and the watch over XLA kept on. Pure.

XLA kept on over a default off is watched for the rest of the fit (the shapes
seen are a sample, and a long tail keeps showing new ones): once the compiles
that really came cost more than the decision priced, and more per step over
the last storm window than XLA saves per step, XLA off (its function kept)
runs for the rest of the fit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Deque, Dict, Optional, Sequence, Tuple

from xla_keras.core.arguments import known_fields
from xla_keras.report.units import ms_text

MAX_SAMPLES = 2048  # per mode: bounded memory on the step path

BASES = (
    "measured",
    "within_noise",
    "too_short",
    "length_unknown",
    "shapes_vary",
    "compiles",
    "unfinished",
    "storm",
    "reused",
)


def mode_word(on: bool) -> str:
    return "on" if on else "off"


@dataclass
class Watch:
    """XLA kept on over a default off, priced with the compiles the shapes seen predicted: the
    compiles that come after the decision are counted against that price."""

    since: int  # the decision's train step
    gain_per_step: float  # off median - on median
    priced: float  # seconds of XLA compiles the decision expected for the rest of the fit
    each: float  # what one compile was priced at
    window: int  # the storm window: compiles' recent rate is measured over this many steps
    spent: float = 0.0  # compiling steps' excess over a steady step since the decision
    compiles: int = 0
    recent: Deque[Tuple[int, float]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))

    def add(self, step: int, seconds: float, compiles: int) -> None:
        self.spent += seconds
        self.compiles += compiles
        self.recent.append((step, seconds))

    def lost(self, step: int) -> bool:
        """More spent than priced (and a compile's worth of slack), and compiling at a recent rate (over
        the storm window) above XLA's gain per step: the shapes seen were no guide, and from here XLA
        loses more than it saves."""
        while self.recent and self.recent[0][0] <= step - self.window:
            self.recent.popleft()
        rate = sum(seconds for _, seconds in self.recent) / self.window
        return self.compiles >= 2 and self.spent > self.priced + self.each and rate > self.gain_per_step


@dataclass(frozen=True)
class Decision:
    """What ``jit="fastest"`` kept for the rest of the fit, and the evidence."""

    mode: str  # "on" or "off": what runs from decided_at_step on
    basis: str  # one of BASES
    why: str  # in words
    default: str  # Keras's own choice here ("on" / "off")
    medians: Dict[str, Optional[float]]  # steady train step seconds per mode
    spreads: Dict[str, Optional[float]]  # their interquartile ranges
    steps_measured: Dict[str, int]
    blocks: Dict[str, int]
    trial_compile_seconds: float  # XLA compiles of the train function during the trial
    first_call_seconds: Dict[str, Optional[float]]  # each mode's first call in this fit (trace, compile)
    predicted_saving_seconds: Optional[float]  # the kept mode against the other over the rest of the fit
    expected_compiles: Optional[float]  # XLA compiles still expected (train + validation)
    decided_at_step: Optional[int]
    steps_left: Optional[int]
    switches: int
    trial_steps: int
    ratio: Optional[dict] = None  # on/off over the rounds (Ratio.to_dict)
    switch_steps: Tuple[int, ...] = ()  # train steps after which the mode changed (at most ~2 MAX_ROUNDS)
    revised_at_step: Optional[int] = None  # XLA on was kept, then its compiles turned it off here

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "basis": self.basis,
            "why": self.why,
            "default": self.default,
            "medians": dict(self.medians),
            "spreads": dict(self.spreads),
            "steps_measured": dict(self.steps_measured),
            "blocks": dict(self.blocks),
            "trial_compile_seconds": self.trial_compile_seconds,
            "first_call_seconds": dict(self.first_call_seconds),
            "predicted_saving_seconds": self.predicted_saving_seconds,
            "expected_compiles": self.expected_compiles,
            "decided_at_step": self.decided_at_step,
            "steps_left": self.steps_left,
            "switches": self.switches,
            "trial_steps": self.trial_steps,
            "ratio": self.ratio,
            "switch_steps": list(self.switch_steps),
            "revised_at_step": self.revised_at_step,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Decision":
        known = known_fields(cls, d)
        known["switch_steps"] = tuple(known.get("switch_steps") or ())
        return cls(**known)

    def reused(self, step: int) -> "Decision":
        """This decision, applied again by a later fit of the same model."""
        return Decision(
            **{
                **self.__dict__,
                "basis": "reused",
                "switches": 0,
                "trial_steps": 0,
                "trial_compile_seconds": 0.0,
                "switch_steps": (),
                "revised_at_step": None,
                "why": f"reused the decision of an earlier fit of this model (no trial): {self.why}",
                "decided_at_step": step,
            }
        )

    def revised(self, step: int, watch: Watch, expected_compiles: float) -> "Decision":
        """XLA kept on, turned off at ``step``: the compiles since the decision cost more than priced."""
        why = (
            f"{self.why}. Then {watch.compiles} new shapes compiled in the {step - watch.since} steps after "
            f"the decision (~{ms_text(watch.spent)}, against ~{ms_text(watch.priced)} priced), more per step than XLA "
            f"saves ({ms_text(watch.gain_per_step)}): XLA off is kept from step {step} on"
        )
        return replace(
            self,
            mode="off",
            basis="compiles",
            why=why,
            predicted_saving_seconds=None,
            expected_compiles=expected_compiles,
            switches=self.switches + 1,
            switch_steps=self.switch_steps + (step,),
            revised_at_step=step,
        )


def measuring_view(
    facts: dict,
    now_on: bool,
    default_on: bool,
    trial_compile_seconds: float,
    switches: int,
    ratio: Optional[dict],
    switch_steps: Sequence[int],
) -> dict:
    """A decision's dict while the trial still measures (``mode`` null); ``facts``: ``evidence.summary``."""
    return {
        "mode": None,
        "basis": "measuring",
        "why": f"jit='fastest': measuring steady steps with XLA on and off (now {mode_word(now_on)})",
        "default": mode_word(default_on),
        "medians": facts["medians"],
        "spreads": facts["spreads"],
        "steps_measured": facts["steps_measured"],
        "blocks": facts["blocks"],
        "trial_compile_seconds": trial_compile_seconds,
        "first_call_seconds": facts["first_call_seconds"],
        "predicted_saving_seconds": None,
        "expected_compiles": None,
        "decided_at_step": None,
        "steps_left": None,
        "switches": switches,
        "trial_steps": None,
        "ratio": ratio,
        "switch_steps": list(switch_steps),
    }
