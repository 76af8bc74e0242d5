"""``jit="fastest"``: measure steady train steps with XLA on and off inside the fit, keep the faster. Pure.

The trial, step by step (every number is a constant below, with its reason):

1. Block 0 runs the *default* mode, Keras's own ``jit_compile="auto"`` (off on
   a CPU under TensorFlow; on under JAX, or with a GPU and no strategy), from
   the fit's first step. Its first call (trace, compile) is never a steady
   step, and the next ``WARMUP_STEPS`` are not measured either.
2. The gate, at the end of block 0: a trial is worth running only when the fit
   has at least ``MIN_STEPS_LEFT`` train steps left and its one-time cost (the
   other mode's first call: a trace, an XLA compile; estimated from this
   fit's first call by the backend's measured factor) is at most
   ``TRIAL_BUDGET`` of the time left at the default's steady step. When the
   other mode is XLA and shapes vary, the compiles it would need for the rest
   of the fit (estimated from the signatures seen, ``expected_new``) must not
   eat ``SHAPES_SHARE`` of that time either. Otherwise the default is kept,
   and the decision says why.
3. Blocks alternate (an interleaved design: drift and machine noise hit both
   modes alike): each skips ``SETTLE_STEPS`` after its switch (a mode's first
   block: its first call and ``WARMUP_STEPS``) and measures as many steady
   steps as take ``BLOCK_SECONDS`` at the default's step (at least
   ``BLOCK_STEPS``; all the blocks of ``MAX_ROUNDS`` rounds within
   ``TRIAL_STEP_SHARE`` of the steps left), or ends after ``PEEK_STEPS`` when
   it is already ``FAR_APART``
   from the other mode (JAX's op-by-op steps can be 80x slower: no need to pay
   many of them). A block that cannot measure (every step compiles) ends
   ``MAX_BLOCK_STEPS`` beyond its size.
4. A round is an XLA block beside a non-XLA block; its log ratio of medians is
   one sample, so the rounds' spread is the noise between blocks (steps inside
   a block are correlated: pooling them would overstate the confidence). A 2x
   difference whose notches separate (median +- 1.58 IQR / sqrt(n), McGill,
   Tukey and Larsen 1978) decides after one round, a difference of
   ``EARLY_RATIO`` after two consistent rounds. Otherwise, from ``MIN_ROUNDS``
   on, the 95% interval of the mean log ratio (Student's t) decides: outside
   1 by at least ``MIN_GAIN``, the faster mode; inside +-``MIN_GAIN``, a tie;
   after ``MAX_ROUNDS``, a tie. A tie keeps the default.
5. The faster mode is then priced over the rest of the fit: XLA's gain
   (median difference x steps left) against the compiles it will still need
   (``expected_compiles`` x the median compile measured in this fit, plus
   validation's compile when the fit validates). XLA is kept only when the
   saving stays positive.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Deque, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

WARMUP_STEPS = 5      # after the first call: allocator and cache warm-up make the next steps slower
SETTLE_STEPS = 2      # after a switch: JAX's queue still holds the previous mode's steps; caches change
BLOCK_STEPS = 8       # steady steps measured per block, at least (block 0 and short fits)
BLOCK_SECONDS = 0.25  # ... or as many as take this long at the default's step: the median of 8 ~1 ms steps
                      # wobbles by ~8% (measured), which hid a 7% difference in 12 rounds
TRIAL_STEP_SHARE = 0.1  # ... but all the blocks of MAX_ROUNDS rounds within this share of the steps left
PEEK_STEPS = 3        # ... or this many, when the block is already FAR_APART from the other mode
FAR_APART = 2.0
MAX_BLOCK_STEPS = 60  # a block that cannot measure (its steps compile, or a trace window) ends after this
                      # many steps beyond its size
MIN_ROUNDS = 3        # rounds (an on block beside an off block) before the rounds' interval may decide
MAX_ROUNDS = 12       # rounds after which the two are within noise (cheap: they differ little by then)
EARLY_RATIO = 1.25    # a difference this large with separated notches decides after one round
MIN_GAIN = 0.03       # a separated difference below this share is not worth a mode of its own
NOTCH = 1.58          # median +- NOTCH * IQR / sqrt(n): the notch of a box plot
TRIAL_BUDGET = 0.03   # the trial's one-time cost, at most this share of the fit's time left
SHAPES_SHARE = 0.5    # XLA's expected compiles, at most this share of the time left (it would have to halve
                      # every step just to repay them)
MIN_STEPS_LEFT = 1000  # train steps left after block 0: the trial (~100 steps) must be a small part of the fit
MAX_SAMPLES = 2048    # per mode: bounded memory on the step path

BASES = ("measured", "within_noise", "too_short", "length_unknown", "shapes_vary", "compiles", "unfinished",
         "storm", "reused")


def mode_word(on: bool) -> str:
    return "on" if on else "off"


class Spread(NamedTuple):
    """A mode's steady steps: median, interquartile range, count and the notch's half width."""

    median: float
    iqr: float
    n: int

    @property
    def half_notch(self) -> float:
        return NOTCH * self.iqr / math.sqrt(self.n)


def spread(values: Sequence[float]) -> Optional[Spread]:
    if not values:
        return None
    ordered = sorted(values)
    return Spread(median(ordered), _quantile(ordered, 0.75) - _quantile(ordered, 0.25), len(ordered))


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def separated(a: Spread, b: Spread) -> bool:
    """The two medians' notches do not overlap: different at roughly 95% confidence."""
    return abs(a.median - b.median) > a.half_notch + b.half_notch


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
        return {"on_over_off": self.value, "low": self.low if self.n >= 2 else None,
                "high": self.high if self.n >= 2 else None, "rounds": self.n}


@dataclass(frozen=True)
class Outlook:
    """What the fit still holds, at a check: steps left (None: unknown until the first epoch
    ends), XLA compiles expected for the train steps left and for validation."""

    steps_left: Optional[int]
    xla_compiles_ahead: float = 0.0
    validation_compiles_ahead: float = 0.0
    length_known_later: bool = False  # the steps per epoch will be known when the first epoch ends
    wall_step_seconds: Optional[float] = None  # the fit's wall time per step so far (Keras's loop included)


@dataclass
class Block:
    on: bool
    start: int          # its first train step
    skip: int           # steps not measured after the switch
    values: List[float] = field(default_factory=list)
    complete: bool = False

    def wants(self, step: int) -> bool:
        return step >= self.start + self.skip


@dataclass(frozen=True)
class Decision:
    """What ``jit="fastest"`` kept for the rest of the fit, and the evidence."""

    mode: str                                   # "on" or "off": what runs from decided_at_step on
    basis: str                                  # one of BASES
    why: str                                    # in words
    default: str                                # Keras's own choice here ("on" / "off")
    medians: Dict[str, Optional[float]]         # steady train step seconds per mode
    spreads: Dict[str, Optional[float]]         # their interquartile ranges
    steps_measured: Dict[str, int]
    blocks: Dict[str, int]
    trial_compile_seconds: float                # XLA compiles of the train function during the trial
    first_call_seconds: Dict[str, Optional[float]]  # each mode's first call in this fit (trace, compile)
    predicted_saving_seconds: Optional[float]   # the kept mode against the other over the rest of the fit
    expected_compiles: Optional[float]          # XLA compiles still expected (train + validation)
    decided_at_step: Optional[int]
    steps_left: Optional[int]
    switches: int
    trial_steps: int
    ratio: Optional[dict] = None                # on/off over the rounds (Ratio.to_dict)
    switch_steps: Tuple[int, ...] = ()          # train steps after which the mode changed (at most ~2 MAX_ROUNDS)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "basis": self.basis, "why": self.why, "default": self.default,
                "medians": dict(self.medians), "spreads": dict(self.spreads),
                "steps_measured": dict(self.steps_measured), "blocks": dict(self.blocks),
                "trial_compile_seconds": self.trial_compile_seconds,
                "first_call_seconds": dict(self.first_call_seconds),
                "predicted_saving_seconds": self.predicted_saving_seconds,
                "expected_compiles": self.expected_compiles, "decided_at_step": self.decided_at_step,
                "steps_left": self.steps_left, "switches": self.switches, "trial_steps": self.trial_steps,
                "ratio": self.ratio, "switch_steps": list(self.switch_steps)}

    @classmethod
    def from_dict(cls, d: dict) -> "Decision":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["switch_steps"] = tuple(known.get("switch_steps") or ())
        return cls(**known)

    def reused(self, step: int) -> "Decision":
        """This decision, applied again by a later fit of the same model."""
        return Decision(**{**self.__dict__, "basis": "reused", "switches": 0, "trial_steps": 0,
                           "trial_compile_seconds": 0.0, "switch_steps": (),
                           "why": f"reused the decision of an earlier fit of this model (no trial): {self.why}",
                           "decided_at_step": step})


def _ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.2f} s"


class Trial:
    """One fit's trial. The monitor feeds it steady train steps (``add``), each call's time
    (``called``) and XLA compiles (``compiled``), asks ``check`` whenever the train step reaches
    ``next_check`` (one integer compare per step), and switches to the mode ``check`` returns."""

    def __init__(self, default_on: bool, start_step: int, one_time_factor: float,
                 known_first_call: Optional[float] = None):
        self.default_on = default_on
        # A fresh function's first call measured by an earlier fit of the model: this fit's may not trace.
        self.known_first_call = known_first_call
        self.on = default_on
        self.start_step = start_step  # the train step before the fit's first
        self.one_time_factor = one_time_factor  # the other mode's first call / this fit's first call (backend's)
        self.blocks: List[Block] = [Block(default_on, start_step + 1, 1 + WARMUP_STEPS)]
        self.samples: Dict[bool, Deque[float]] = {True: deque(maxlen=MAX_SAMPLES), False: deque(maxlen=MAX_SAMPLES)}
        self.first_call: Dict[bool, Optional[float]] = {True: None, False: None}
        self.compile_seconds: List[float] = []
        self.shape_costs: Deque[float] = deque(maxlen=MAX_SAMPLES)  # per compile, from compiling steps' time
        self.block_steps = BLOCK_STEPS
        self.next_check = start_step + 1 + WARMUP_STEPS + BLOCK_STEPS
        self.decision: Optional[Decision] = None
        self.switches = 0
        self.paused = False
        self._fresh = True  # the next call is the first of the current mode's function in this fit
        self._ratio: Optional[Ratio] = None
        self.switch_steps: List[int] = []
        self._step = start_step  # the step of the last check (a switch happens after it)

    # ------------------------------------------------------------ fed by the monitor

    @property
    def running(self) -> bool:
        return self.decision is None

    def add(self, step: int, seconds: float) -> None:
        """A steady train step (no compile, no probe) ended at ``step``."""
        block = self.blocks[-1]
        if self.paused or not block.wants(step) or block.complete:
            return
        block.values.append(seconds)
        self.samples[block.on].append(seconds)

    def called(self, seconds: float) -> None:
        """A train call ended: the first one of a mode's function is its one-time cost."""
        if self._fresh:
            self._fresh = False
            if self.first_call[self.on] is None:
                self.first_call[self.on] = seconds

    def compiled(self, seconds: Sequence[float]) -> None:
        """XLA compiles of the train function recorded during the trial."""
        if self.running:
            self.compile_seconds.extend(seconds)

    def new_shape_step(self, seconds: float, compiles: int) -> None:
        """A train call that compiled ``compiles`` modules under XLA took ``seconds``: beyond a steady
        step, what a new shape really costs the fit (XLA's compile, and the trace, probe and bookkeeping
        around it: measured 2-2.5x the compile alone on a storm), for pricing the compiles ahead."""
        if self.running and compiles:
            steady = spread(self.samples[True])
            excess = seconds - (steady.median if steady else 0.0)
            if excess > 0:
                self.shape_costs.append(excess / compiles)

    def pause(self, step: int) -> Optional[bool]:
        """Validation begins: the block stops measuring and validation runs the default mode.
        Returns the mode to switch to (None: already there)."""
        if not self.running:
            return None
        self.paused = True
        self._step = step
        self.next_check = step + 1
        return self._switch(self.default_on) if self.on != self.default_on else None

    # ------------------------------------------------------------ the decisions

    def check(self, step: int, outlook: Outlook) -> Optional[bool]:
        """The train step reached ``next_check``: None to go on, or the mode (True: XLA on) to
        switch to now. Sets ``decision`` once decided."""
        if not self.running:
            return None
        self._step = step
        block = self.blocks[-1]
        if self.paused:  # the first train step after validation: measure the paused mode again
            self.paused = False
            return self._start(block.on, step)
        other = self.samples[not block.on]
        n = len(block.values)
        done = n >= self.block_steps or step - block.start + 1 >= self.block_steps + MAX_BLOCK_STEPS
        if not done and other and n >= PEEK_STEPS:
            ratio = median(block.values) / median(other)
            done = ratio >= FAR_APART or ratio <= 1 / FAR_APART
        if not done:
            wanted = PEEK_STEPS if other and n < PEEK_STEPS else self.block_steps
            self.next_check = step + max(1, wanted - n)
            return None
        block.complete = True
        if not self._tried_other():
            return self._gate(step, outlook)
        return self._after_block(step, outlook)

    def _tried_other(self) -> bool:
        return any(b.on != self.default_on for b in self.blocks)

    def _gate(self, step: int, outlook: Outlook) -> Optional[bool]:
        default = spread(self.samples[self.default_on])
        steps_left = outlook.steps_left
        if steps_left is None:
            if outlook.length_known_later:  # keep measuring the default until the first epoch ends
                self.blocks[-1].complete = False
                self.next_check = step + self.block_steps
                return None
            return self._keep_default(step, "length_unknown", outlook, (
                "the fit's length is unknown (data without a length, one epoch): a trial could cost more than it "
                "saves"))
        if steps_left < MIN_STEPS_LEFT:
            return self._keep_default(step, "too_short", outlook, (
                f"the fit is too short to decide: {steps_left} train steps left after warm-up, and a decision "
                f"needs at least {MIN_STEPS_LEFT}"))
        first = max((t for t in (self.first_call[self.default_on], self.known_first_call) if t is not None),
                    default=None)
        # The fit's time left: its wall time per step (callbacks and Keras's loop around the step included).
        step_seconds = max((t for t in (default.median if default else None, outlook.wall_step_seconds)
                            if t is not None), default=None)
        time_left = steps_left * step_seconds if step_seconds is not None else None
        one_time = self.one_time_factor * first if first is not None else None
        # Beyond the train shape the trial compiles anyway (its one-time cost), what XLA would still compile;
        # each new shape priced like XLA's first call (measured on a storm: a compiling step cost 2-2.5x
        # XLA's compile alone, about what the first call costs).
        extra = outlook.xla_compiles_ahead - 1
        if not self.default_on and time_left is not None and one_time is not None and extra >= 2 \
                and extra * one_time > SHAPES_SHARE * time_left:
            return self._keep_default(step, "shapes_vary", outlook, (
                f"input shapes vary: XLA would compile ~{extra:.0f} more shapes in this fit (estimated from the "
                f"input signatures seen so far and the steps left), ~{_ms(extra * one_time)}, more than "
                f"{SHAPES_SHARE:.0%} of the ~{_ms(time_left)} left: XLA cannot win here, so it was not tried"))
        if time_left is not None and one_time is not None and one_time > TRIAL_BUDGET * time_left:
            return self._keep_default(step, "too_short", outlook, (
                f"the fit is too short to decide: trying XLA {mode_word(not self.default_on)} would cost ~"
                f"{_ms(one_time)} once (its first call: trace{', compile' if not self.default_on else ''}), more "
                f"than {TRIAL_BUDGET:.0%} of the ~{_ms(time_left)} left; a decision needs a fit of at least "
                f"~{_ms(one_time / TRIAL_BUDGET)} at this step time"))
        if default is not None:
            fits = TRIAL_STEP_SHARE * steps_left / (2 * MAX_ROUNDS) - SETTLE_STEPS
            self.block_steps = max(BLOCK_STEPS, min(math.ceil(BLOCK_SECONDS / default.median), int(fits)))
        return self._start(not self.default_on, step)

    def _after_block(self, step: int, outlook: Outlook) -> Optional[bool]:
        if not self.blocks[-1].values:  # a whole block without one steady step
            if self.blocks[-1].on:
                return self._decide(False, step, outlook, "compiles", (
                    f"no steady step with XLA on in {self.block_steps + MAX_BLOCK_STEPS} steps: each compiled a new "
                    "shape (or ran in a "
                    "profiler window); XLA off is kept"))
            return self._keep_default(step, "unfinished", outlook, (
                f"no steady step with XLA off in {self.block_steps + MAX_BLOCK_STEPS} steps (each was traced or "
                "profiled)"))
        on, off = spread(self.samples[True]), spread(self.samples[False])
        rounds = self.rounds()
        if on is None or off is None or not rounds:
            return self._start(not self.blocks[-1].on, step)
        ratio = Ratio.of(rounds)
        pooled = max(on.median, off.median) / min(on.median, off.median)
        consistent = all(abs(r) >= math.log(EARLY_RATIO) and (r > 0) == (rounds[0] > 0) for r in rounds)
        if separated(on, off) and (pooled >= FAR_APART or pooled >= EARLY_RATIO and ratio.n >= 2 and consistent):
            return self._faster(on.median < off.median, step, outlook, on, off, ratio)
        if ratio.n >= MIN_ROUNDS:
            if ratio.excludes_one and ratio.gain >= MIN_GAIN:
                return self._faster(ratio.value < 1, step, outlook, on, off, ratio)
            if ratio.within(MIN_GAIN):
                return self._within_noise(step, outlook, ratio, (
                    f"XLA on and off are within noise: on/off = {ratio.words()} over {ratio.n} rounds, inside "
                    f"+-{MIN_GAIN:.0%}"))
        if ratio.n >= MAX_ROUNDS:
            why = ("the interval still holds 1" if not ratio.excludes_one else
                   f"the difference is below {MIN_GAIN:.0%}")
            return self._within_noise(step, outlook, ratio, (
                f"XLA on and off are within noise after {ratio.n} rounds: on/off = {ratio.words()} ({why})"))
        return self._start(not self.blocks[-1].on, step)

    def rounds(self) -> List[float]:
        """log(median on / median off) of each pair of adjacent blocks (a round): pairing neighbours
        cancels the machine's slow drift (on a 2-core CPU, block medians of a 1.4 ms step wandered
        by +-20% over a minute), and the rounds' spread is the noise between blocks."""
        out, pending = [], None
        for block in self.blocks[1:]:  # block 0 (the fit's first steps, before the gate) is measured apart
            if not block.complete or not block.values:
                continue
            if pending is not None and pending.on != block.on:
                on, off = (block, pending) if block.on else (pending, block)
                out.append(math.log(median(on.values) / median(off.values)))
                pending = None
            else:
                pending = block
        return out

    def _blocks(self, on: bool) -> int:
        return sum(1 for b in self.blocks if b.on == on and b.complete and b.values)

    def _compile_each(self) -> Optional[float]:
        """What one more XLA compile costs the fit: measured on this fit's compiling steps."""
        if self.shape_costs:
            return median(self.shape_costs)
        if self.compile_seconds:
            return median(self.compile_seconds)
        return self.first_call[True]

    def _faster(self, on_faster: bool, step: int, outlook: Outlook, on: Spread, off: Spread,
                ratio: "Ratio") -> Optional[bool]:
        steps_left = outlook.steps_left
        gain = abs(on.median - off.median) * steps_left if steps_left is not None else None
        each = self._compile_each()
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        cost = ahead * each if each is not None else 0.0
        fast, slow = (on, off) if on_faster else (off, on)
        faster = (f"XLA {mode_word(on_faster)} steps are {slow.median / fast.median:.2f}x faster ({_ms(fast.median)} "
                  f"vs {_ms(slow.median)}, medians of {fast.n} and {slow.n} steps; on/off {ratio.words()} over "
                  f"{ratio.n} round{'s' if ratio.n > 1 else ''})")
        self._ratio = ratio
        if on_faster:
            if gain is not None and gain - cost <= 0:
                return self._decide(False, step, outlook, "compiles", (
                    f"{faster}, but the ~{ahead:.0f} XLA compiles still expected (~{_ms(cost)}) cost more than "
                    f"the ~{_ms(gain)} they would save over the {steps_left} steps left: XLA off is kept"),
                    saving=None if gain is None else cost - gain)
            return self._decide(True, step, outlook, "measured", f"{faster}: XLA on is kept"
                                + (f", ~{_ms(gain - cost)} saved over the {steps_left} steps left"
                                   + (f" after ~{ahead:.0f} more compiles" if ahead >= 0.5 else "")
                                   if gain is not None else ""),
                                saving=None if gain is None else gain - cost)
        return self._decide(False, step, outlook, "measured", f"{faster}: XLA off is kept"
                            + (f", ~{_ms(gain + cost)} saved over the {steps_left} steps left"
                               if gain is not None else ""),
                            saving=None if gain is None else gain + cost)

    def _within_noise(self, step: int, outlook: Outlook, ratio: "Ratio", words: str) -> Optional[bool]:
        self._ratio = ratio
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        if self.default_on and ahead >= 1:
            return self._decide(False, step, outlook, "compiles", (
                f"{words}, and XLA would still compile ~{ahead:.0f} more shapes: XLA off is kept"))
        return self._keep_default(step, "within_noise", outlook, words)

    def _keep_default(self, step: int, basis: str, outlook: Outlook, words: str) -> Optional[bool]:
        return self._decide(self.default_on, step, outlook, basis,
                            f"{words}; XLA {mode_word(self.default_on)} (Keras's own choice here) is kept")

    def _decide(self, on: bool, step: int, outlook: Outlook, basis: str, why: str,
                saving: Optional[float] = None) -> Optional[bool]:
        on_spread, off_spread = spread(self.samples[True]), spread(self.samples[False])
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        tried = self._tried_other()
        switches = self.switches + (on != self.on)
        self.decision = Decision(
            mode=mode_word(on), basis=basis, why=f"jit='fastest': {why}", default=mode_word(self.default_on),
            medians={"on": on_spread.median if on_spread else None, "off": off_spread.median if off_spread else None},
            spreads={"on": on_spread.iqr if on_spread else None, "off": off_spread.iqr if off_spread else None},
            steps_measured={"on": len(self.samples[True]), "off": len(self.samples[False])},
            blocks={"on": self._blocks(True), "off": self._blocks(False)},
            # With XLA on by default its compiles are the default's own: the trial paid the off mode's first call.
            trial_compile_seconds=0.0 if self.default_on or not tried else sum(self.compile_seconds),
            first_call_seconds={"on": self.first_call[True], "off": self.first_call[False]},
            predicted_saving_seconds=saving, expected_compiles=ahead,
            decided_at_step=step, steps_left=outlook.steps_left, switches=switches,
            trial_steps=step - self.start_step, ratio=self._ratio.to_dict() if self._ratio is not None else None,
            switch_steps=tuple(self.switch_steps) + ((step,) if on != self.on else ()))
        return self._switch(on) if on != self.on else None

    def stop(self, step: int, basis: str, why: str, on: bool, outlook: Outlook) -> None:
        """The trial ends without a measured decision (the fit ended, a storm fallback): ``on`` runs."""
        if self.running:
            self._decide(on, step, outlook, basis, why)

    # ------------------------------------------------------------ switching

    def _start(self, on: bool, step: int) -> Optional[bool]:
        # A mode's first block starts with its function's first call (trace, compile) and warm-up.
        skip = SETTLE_STEPS if any(b.on == on for b in self.blocks) else 1 + WARMUP_STEPS
        self.blocks.append(Block(on, step + 1, skip))
        self.next_check = step + skip + (PEEK_STEPS if self.samples[not on] else self.block_steps)
        return self._switch(on) if on != self.on else None

    def _switch(self, on: bool) -> bool:
        self.on = on
        self.switches += 1
        if self.decision is None:
            self.switch_steps.append(self._step)
        if self.first_call[on] is None:
            self._fresh = True
        return on

    # ------------------------------------------------------------ what the report shows while it runs

    def words(self) -> str:
        """The JIT line's reason: the decision, or what the trial is doing."""
        if self.decision is not None:
            return self.decision.why
        measuring = "waiting for the first epoch's length" if not self._tried_other() and len(self.blocks[-1].values) \
            >= self.block_steps else f"block {len(self.blocks)}"
        return (f"jit='fastest': measuring steady train steps with XLA on and off ({measuring}, now XLA "
                f"{mode_word(self.on).upper()}); the faster mode is kept for the rest of the fit")

    def view(self) -> dict:
        """The decision, or the trial so far (``mode`` null while measuring)."""
        if self.decision is not None:
            return self.decision.to_dict()
        on, off = spread(self.samples[True]), spread(self.samples[False])
        return {"mode": None, "basis": "measuring", "why": "jit='fastest': measuring steady steps with XLA on and off "
                f"(now {mode_word(self.on)})", "default": mode_word(self.default_on),
                "medians": {"on": on.median if on else None, "off": off.median if off else None},
                "spreads": {"on": on.iqr if on else None, "off": off.iqr if off else None},
                "steps_measured": {"on": len(self.samples[True]), "off": len(self.samples[False])},
                "blocks": {"on": self._blocks(True), "off": self._blocks(False)},
                "trial_compile_seconds": sum(self.compile_seconds),
                "first_call_seconds": {"on": self.first_call[True], "off": self.first_call[False]},
                "predicted_saving_seconds": None, "expected_compiles": None, "decided_at_step": None,
                "steps_left": None, "switches": self.switches, "trial_steps": None,
                "ratio": Ratio.of(self.rounds()).to_dict() if self.rounds() else None,
                "switch_steps": list(self.switch_steps)}
