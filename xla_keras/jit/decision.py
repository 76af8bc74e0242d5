"""What ``jit="fastest"`` decided and the rules it decides by: the statistics that compare two modes'
step times, the outlook (the steps a fit still holds and the compiles its shapes predict), the gate
(whether trying the other mode is worth it) and the price of the faster mode over the rest of the fit;
and the watch over XLA kept on. Pure.

XLA kept on over a default off is watched for the rest of the fit (the shapes
seen are a sample, and a long tail keeps showing new ones): once the compiles
that really came cost more than the decision priced, and more per step over
the last storm window than XLA saves per step, XLA off (its function kept)
runs for the rest of the fit.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Deque, Dict, Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple

from xla_keras.core.plain_data import known_fields
from xla_keras.core.timing import ms_text
from xla_keras.storms.detection import StormRule

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
    "unsupported",
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


# Comparing two modes' step times robustly.


NOTCH = 1.58  # median +- NOTCH * IQR / sqrt(n): the notch of a box plot


class Spread(NamedTuple):
    """A mode's steady steps: median, interquartile range, count and the notch's half width. ``n`` counts
    the samples (the notch's); ``steps`` the steps they measured (a sample is one step, or under JAX one
    interval between drains)."""

    median: float
    iqr: float
    n: int
    steps: int = 0

    @property
    def half_notch(self) -> float:
        return NOTCH * self.iqr / math.sqrt(self.n)


def spread(values: Sequence[float], steps: Optional[int] = None) -> Optional[Spread]:
    """The samples' spread; ``steps``: the steps they measured (their count when each is one step)."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    return Spread(
        median(ordered), _quantile(ordered, 0.75) - _quantile(ordered, 0.25), n, n if steps is None else steps
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def separated(a: Spread, b: Spread) -> bool:
    """The two medians' notches do not overlap: different at roughly 95% confidence."""
    return abs(a.median - b.median) > a.half_notch + b.half_notch


# Student's t, two-sided 95%, by degrees of freedom (1..12); beyond: 2.18.
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18)


class Ratio(NamedTuple):
    """on/off step-time ratio over the rounds: geometric mean and its 95% interval (t on the logs)."""

    value: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, logs: Sequence[float]) -> "Ratio":
        n = len(logs)
        mean = sum(logs) / n
        if n < 2:
            return cls(math.exp(mean), 0.0, math.inf, n)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = _T95[min(n - 1, len(_T95)) - 1] * sd / math.sqrt(n)
        return cls(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)

    @property
    def excludes_one(self) -> bool:
        return self.high < 1 or self.low > 1

    @property
    def gain(self) -> float:
        """How much faster the faster mode is (0.05: 5%)."""
        return max(self.value, 1 / self.value) - 1

    def within(self, share: float) -> bool:
        """The whole interval lies within +-share of equal."""
        return self.n >= 2 and self.low >= 1 / (1 + share) and self.high <= 1 + share

    def words(self) -> str:
        if self.n < 2:
            return f"{self.value:.3f}"
        return f"{self.value:.3f} (95% interval {self.low:.3f}-{self.high:.3f})"

    def to_dict(self) -> dict:
        return {
            "on_over_off": self.value,
            "low": self.low if self.n >= 2 else None,
            "high": self.high if self.n >= 2 else None,
            "rounds": self.n,
        }


# What a fit still holds, for ``jit="fastest"``: its steps left and the XLA compiles its shapes predict.


def expected_new(counts: Sequence[int], steps: int) -> float:
    """Distinct signatures never seen so far that ``steps`` more batches are expected to show.

    Chao1's estimate of the unseen (f1^2 / 2 f2, or f1 (f1 - 1) / 2 with no
    doubletons) extrapolated to ``steps`` more draws (Chao et al. 2014,
    Ecological Monographs 84: 45-67, eq. 9): the signatures seen once carry the
    evidence that more exist. Zero when every signature was seen at least twice."""
    n = sum(counts)
    f1 = sum(1 for c in counts if c == 1)
    f2 = sum(1 for c in counts if c == 2)
    if n == 0 or f1 == 0 or steps <= 0:
        return 0.0
    unseen = f1 * f1 / (2 * f2) if f2 else f1 * (f1 - 1) / 2
    if unseen <= 0:
        return 0.0
    return unseen * (1 - (1 - f1 / (n * unseen + f1)) ** steps)


def expected_compiles(counts: Mapping[int, int], compiled: Iterable[int], steps: int) -> float:
    """XLA compiles the next ``steps`` batches are expected to cost a function that compiled
    ``compiled`` (fingerprints): each signature seen but not compiled compiles when it comes back
    (probability 1 - (1 - p)^steps at its observed frequency p), and the unseen ones (``expected_new``)."""
    n = sum(counts.values())
    if n == 0 or steps <= 0:
        return 0.0
    done = set(compiled)
    seen = sum(1 - (1 - c / n) ** steps for fp, c in counts.items() if fp not in done)
    return seen + expected_new(list(counts.values()), steps)


@dataclass(frozen=True)
class Outlook:
    """What the fit still holds, at a check: steps left (None: unknown until the first epoch
    ends), XLA compiles expected for the train steps left and for validation."""

    steps_left: Optional[int]
    xla_compiles_ahead: float = 0.0
    validation_compiles_ahead: float = 0.0
    length_known_later: bool = False  # the steps per epoch will be known when the first epoch ends
    wall_step_seconds: Optional[float] = None  # the fit's wall time per step so far (Keras's loop included)
    xla_compiles_soon: float = 0.0  # XLA train compiles expected over the next storm window (or the steps left)


# The trial's gate: whether trying the other mode is worth it at all, and what XLA's compiles ahead cost.


SHAPES_SHARE = 0.5  # XLA's expected compiles, at most this share of the time left (it would have to halve
# every step just to repay them)


def step_seconds(default: Optional[Spread], outlook: Outlook) -> Optional[float]:
    """The fit's wall time per step: its default mode's median or its wall clock's, the larger (callbacks
    and Keras's loop around the step included), or None while neither is known."""
    return max(
        (t for t in (default.median if default else None, outlook.wall_step_seconds) if t is not None), default=None
    )


def time_left(default: Optional[Spread], outlook: Outlook) -> Optional[float]:
    """The fit's time left: its steps left at its wall time per step (``step_seconds``)."""
    step = step_seconds(default, outlook)
    if outlook.steps_left is None or step is None:
        return None
    return outlook.steps_left * step


def storm_ahead(outlook: Outlook, rule: StormRule) -> Optional[str]:
    """The shapes seen predict a recompilation storm under XLA by the monitor's own rule: in words."""
    soon = outlook.xla_compiles_soon
    if soon < rule.threshold:
        return None
    window = min(rule.window, outlook.steps_left) if outlook.steps_left is not None else rule.window
    return (
        f"input shapes vary: with XLA on, ~{soon:.0f} input shapes would compile in the next {window} "
        f"steps (estimated from the input signatures seen so far), a recompilation storm by this "
        f"monitor's rule (storm_threshold={rule.threshold} in storm_window={rule.window}); fixed shapes "
        "(xla_keras.data: padding or bucketing) would let XLA compete"
    )


def shapes_vary(
    outlook: Outlook, rule: StormRule, left: Optional[float], price: Optional[float], measured: bool
) -> Optional[str]:
    """Why XLA (the other mode: the default is off) cannot win with the shapes ahead (None: it may): a storm
    by the monitor's own rule, or compiles costing ``SHAPES_SHARE`` of the time ``left`` at ``price`` each."""
    verdict = "XLA was stopped after its first call" if measured else "XLA was not tried"
    storm = storm_ahead(outlook, rule)
    if storm is not None:
        return f"{storm}: {verdict}"
    # Beyond the train shape the trial compiles anyway (its one-time cost), what XLA would still compile;
    # each new shape priced like XLA's first call (measured on a storm: a compiling step cost 2-2.5x
    # XLA's compile alone, about what the first call costs).
    extra = outlook.xla_compiles_ahead - (0 if measured else 1)
    if left is None or price is None or extra < 2 or extra * price <= SHAPES_SHARE * left:
        return None
    return (
        f"input shapes vary: XLA would compile ~{extra:.0f} more shapes in this fit (estimated from the "
        f"input signatures seen so far and the steps left), ~{ms_text(extra * price)} at ~{ms_text(price)} each"
        f"{' (its first call)' if measured else ''}, more than {SHAPES_SHARE:.0%} of the ~{ms_text(left)} "
        f"left: XLA cannot win here; {verdict}"
    )


def trial_fits(steps_left: int, budget: float, one_time: Optional[float], step: Optional[float]) -> bool:
    """The other mode's one-time cost (``one_time`` seconds) is at most ``budget`` of the time ``steps_left``
    steps of ``step`` seconds take (True where either is unknown: nothing to hold against)."""
    if one_time is None or step is None or math.isinf(budget):
        return True
    return one_time <= budget * (steps_left * step)


def steps_needed(min_steps_left: int, budget: float, one_time: Optional[float], step: Optional[float]) -> int:
    """The fewest train steps left after warm-up that let the trial run: at least ``min_steps_left``, and
    ``trial_fits`` (the one-time cost within ``budget`` of their time at ``step`` seconds each)."""
    if trial_fits(min_steps_left, budget, one_time, step):
        return min_steps_left
    assert one_time is not None and step is not None  # trial_fits holds where either is unknown
    if budget <= 0 or step <= 0:
        return sys.maxsize  # no fit is long enough
    needed = max(min_steps_left, math.ceil(one_time / (budget * step)))
    while not trial_fits(needed, budget, one_time, step):  # the float division's last bit: the figure holds
        needed += 1
    while needed > min_steps_left and trial_fits(needed - 1, budget, one_time, step):
        needed -= 1
    return needed


def too_short_words(
    steps_left: int,
    steps_done: int,
    needed: int,
    min_steps_left: int,
    budget: float,
    one_time: Optional[float],
    step: Optional[float],
    default_on: bool,
) -> str:
    """Why a fit is too short to decide, with the figure that holds: the steps left a decision needs (the
    steps and the trial's share of the time left both), this fit's, and the fit length that is enough."""
    if one_time is not None and step is not None:
        rule = (
            f"{min_steps_left} or more, and enough that trying XLA {mode_word(not default_on)}, ~{ms_text(one_time)} "
            f"once for its first call ({'trace, compile' if not default_on else 'trace'}), is at most {budget:.0%} "
            f"of the time left at ~{ms_text(step)} a step"
        )
    else:
        rule = f"{min_steps_left} or more"
    return (
        f"the fit is too short to decide: {steps_left} train steps left after its first {steps_done}, and a "
        f"decision needs at least {needed} ({rule}): a fit of {steps_done + needed} train steps or more"
    )


def keep_default_reason(
    outlook: Outlook,
    rule: StormRule,
    default_on: bool,
    one_time: Optional[float],
    step: Optional[float],
    min_steps_left: int,
    budget: float,
    steps_done: int = 0,
) -> Optional[Tuple[str, str]]:
    """Why the trial keeps the default without trying the other mode, as (basis, words); None: try it.
    ``one_time`` is the other mode's estimated first call, ``step`` the fit's wall time per step
    (``step_seconds``), ``steps_done`` the train steps this fit ran before the gate. Too short: fewer
    steps left than ``steps_needed`` (at least ``min_steps_left``, and a one-time cost within ``budget``
    of the time left)."""
    steps_left = outlook.steps_left
    if steps_left is None:
        return (
            "length_unknown",
            "the fit's length is unknown (data without a length, one epoch): a trial could cost more than it saves",
        )
    needed = steps_needed(min_steps_left, budget, one_time, step)
    words = too_short_words(steps_left, steps_done, needed, min_steps_left, budget, one_time, step, default_on)
    if steps_left < min_steps_left:
        return "too_short", words
    left = steps_left * step if step is not None else None
    vary = None if default_on else shapes_vary(outlook, rule, left, one_time, measured=False)
    if vary is not None:
        return "shapes_vary", vary
    if not trial_fits(steps_left, budget, one_time, step):  # fewer steps left than ``needed``
        return "too_short", words
    return None


# The faster mode, priced over the rest of the fit.


class Verdict(NamedTuple):
    """The mode kept (True: XLA on), the decision's basis and words, and what pricing found."""

    on: bool
    basis: str
    why: str
    saving: Optional[float]  # seconds, the kept mode against the other over the steps left
    cost: float  # seconds of XLA compiles still expected


def price_faster(
    on_faster: bool,
    on: Spread,
    off: Spread,
    ratio: Ratio,
    outlook: Outlook,
    each: Optional[float],
    rule: StormRule,
) -> Verdict:
    """The mode measured faster (``on_faster``), kept or not once XLA's compiles ahead (``each``
    seconds apiece) are priced against its gain."""
    steps_left = outlook.steps_left
    gain = abs(on.median - off.median) * steps_left if steps_left is not None else None
    ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
    cost = ahead * each if each is not None else 0.0
    fast, slow = (on, off) if on_faster else (off, on)
    faster = (
        f"XLA {mode_word(on_faster)} steps are {slow.median / fast.median:.2f}x faster ({ms_text(fast.median)} "
        f"vs {ms_text(slow.median)}, {_over(fast)} and {_over(slow)}; on/off {ratio.words()} over "
        f"{ratio.n} round{'s' if ratio.n > 1 else ''})"
    )
    if not on_faster:
        words = f"{faster}: XLA off is kept" + (
            f", ~{ms_text(gain + cost)} saved over the {steps_left} steps left" if gain is not None else ""
        )
        return Verdict(False, "measured", words, None if gain is None else gain + cost, cost)
    storm = storm_ahead(outlook, rule)
    if storm is not None:
        return Verdict(False, "compiles", f"{faster}, but {storm}: XLA off is kept", None, cost)
    if gain is not None and gain - cost <= 0:
        words = (
            f"{faster}, but the ~{ahead:.0f} XLA compiles still expected (~{ms_text(cost)}) cost more than "
            f"the ~{ms_text(gain)} they would save over the {steps_left} steps left: XLA off is kept"
        )
        return Verdict(False, "compiles", words, cost - gain, cost)
    words = f"{faster}: XLA on is kept" + (
        f", ~{ms_text(gain - cost)} saved over the {steps_left} steps left"
        + (f" after ~{ahead:.0f} more compiles" if ahead >= 0.5 else "")
        if gain is not None
        else ""
    )
    return Verdict(True, "measured", words, None if gain is None else gain - cost, cost)


def _over(side: Spread) -> str:
    """What a median rests on: ``median of 40 steps``, or under JAX ``median of 6 intervals (40 steps)``."""
    if side.steps == side.n:
        return f"median of {side.n} steps"
    return f"median of {side.n} intervals ({side.steps} steps)"
