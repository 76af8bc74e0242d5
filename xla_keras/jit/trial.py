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
   other mode is XLA and shapes vary, XLA is not tried when the shapes seen
   so far predict a recompilation storm under the monitor's own rule
   (``storm_threshold`` compiles in ``storm_window`` steps), or when the
   compiles it would need for the rest of the fit (estimated from the
   signatures seen, ``expected_new``) would eat ``SHAPES_SHARE`` of that time.
   The second test runs again right after XLA's first call, priced by what
   that call really cost. Otherwise the default is kept, and the decision
   says why.
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
6. XLA kept on over a default off is watched for the rest of the fit (the
   shapes seen are a sample, and a long tail keeps showing new ones): once
   the compiles that really came cost more than the decision priced, and
   more per step over the last storm window than XLA saves per step, XLA off
   (its function kept) runs for the rest of the fit.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from xla_keras.jit.outlook import Outlook, StormRule
from xla_keras.jit.statistics import Ratio, Spread, separated, spread

WARMUP_STEPS = 5  # after the first call: allocator and cache warm-up make the next steps slower
SETTLE_STEPS = 2  # after a switch: JAX's queue still holds the previous mode's steps; caches change
BLOCK_STEPS = 8  # steady steps measured per block, at least (block 0 and short fits)
BLOCK_SECONDS = 0.25  # ... or as many as take this long at the default's step: the median of 8 ~1 ms steps
# wobbles by ~8% (measured), which hid a 7% difference in 12 rounds
TRIAL_STEP_SHARE = 0.1  # ... but all the blocks of MAX_ROUNDS rounds within this share of the steps left
PEEK_STEPS = 3  # ... or this many, when the block is already FAR_APART from the other mode
FAR_APART = 2.0
MAX_BLOCK_STEPS = 60  # a block that cannot measure (its steps compile, or a trace window) ends after this
# many steps beyond its size
MIN_ROUNDS = 3  # rounds (an on block beside an off block) before the rounds' interval may decide
MAX_ROUNDS = 12  # rounds after which the two are within noise (cheap: they differ little by then)
EARLY_RATIO = 1.25  # a difference this large with separated notches decides after one round
MIN_GAIN = 0.03  # a separated difference below this share is not worth a mode of its own
TRIAL_BUDGET = 0.03  # the trial's one-time cost, at most this share of the fit's time left
SHAPES_SHARE = 0.5  # XLA's expected compiles, at most this share of the time left (it would have to halve
# every step just to repay them)
MIN_STEPS_LEFT = 1000  # train steps left after block 0: the trial (~100 steps) must be a small part of the fit
MAX_SAMPLES = 2048  # per mode: bounded memory on the step path
NEVER = math.inf  # next_check once decided: the per-step test stays one compare

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


@dataclass
class Block:
    on: bool
    start: int  # its first train step
    skip: int  # steps not measured after the switch
    values: List[float] = field(default_factory=list)
    complete: bool = False

    def wants(self, step: int) -> bool:
        return step >= self.start + self.skip


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
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
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


def _ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.2f} s"


class Trial:
    """One fit's trial. The monitor feeds it steady train steps (``add``), each call's time
    (``called``) and XLA compiles (``compiled``), asks ``check`` whenever the train step reaches
    ``next_check`` (one integer compare per step), and switches to the mode ``check`` returns."""

    def __init__(
        self,
        default_on: bool,
        start_step: int,
        one_time_factor: float,
        known_first_call: Optional[float] = None,
        storm: Optional[StormRule] = None,
    ):
        self.default_on = default_on
        # A fresh function's first call measured by an earlier fit of the model: this fit's may not trace.
        self.known_first_call = known_first_call
        self.on = default_on
        self.start_step = start_step  # the train step before the fit's first
        self.one_time_factor = one_time_factor  # the other mode's first call / this fit's first call (backend's)
        self.storm = storm or StormRule()
        self.watch: Optional[Watch] = None  # after XLA on was kept over a default off
        self._screened = False  # the shapes screen ran again after XLA's first call, priced by it
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

    def new_shape_step(self, step: int, seconds: float, compiles: int) -> None:
        """A train call ending at ``step`` compiled ``compiles`` modules under XLA in ``seconds``: beyond a steady
        step, what a new shape really costs the fit (XLA's compile, and the trace, probe and bookkeeping
        around it: measured 2-2.5x the compile alone on a storm), for pricing the compiles ahead."""
        if not compiles or not (self.running or self.watch is not None):
            return
        steady = spread(self.samples[True])
        excess = max(0.0, seconds - (steady.median if steady else 0.0))
        if self.watch is not None:
            self.watch.add(step, excess, compiles)
            if self.watch.lost(step):
                self.next_check = step  # checked before the next step: XLA off returns
            return
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
        self._step = step
        if not self.running:
            return self._revise(step, outlook) if self.watch is not None else None
        block = self.blocks[-1]
        if not self._screened and block.on and not self.default_on and self.first_call[True] is not None:
            self._screened = True  # XLA's first call just ended: price the shapes ahead by what it cost
            words = self._shapes_vary(outlook, self._compile_each(), measured=True)
            if words is not None:
                return self._decide(False, step, outlook, "shapes_vary", words)
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
            return self._keep_default(
                step,
                "length_unknown",
                outlook,
                (
                    "the fit's length is unknown (data without a length, one epoch): a trial could cost more than it "
                    "saves"
                ),
            )
        if steps_left < MIN_STEPS_LEFT:
            return self._keep_default(
                step,
                "too_short",
                outlook,
                (
                    f"the fit is too short to decide: {steps_left} train steps left after warm-up, and a decision "
                    f"needs at least {MIN_STEPS_LEFT}"
                ),
            )
        first = max(
            (t for t in (self.first_call[self.default_on], self.known_first_call) if t is not None), default=None
        )
        time_left = self._time_left(outlook)
        one_time = self.one_time_factor * first if first is not None else None
        words = self._shapes_vary(outlook, one_time, measured=False)
        if words is not None:
            return self._keep_default(step, "shapes_vary", outlook, words)
        if time_left is not None and one_time is not None and one_time > TRIAL_BUDGET * time_left:
            return self._keep_default(
                step,
                "too_short",
                outlook,
                (
                    f"the fit is too short to decide: trying XLA {mode_word(not self.default_on)} would cost ~"
                    f"{_ms(one_time)} once (its first call: trace{', compile' if not self.default_on else ''}), more "
                    f"than {TRIAL_BUDGET:.0%} of the ~{_ms(time_left)} left; a decision needs a fit of at least "
                    f"~{_ms(one_time / TRIAL_BUDGET)} at this step time"
                ),
            )
        if default is not None:
            fits = TRIAL_STEP_SHARE * steps_left / (2 * MAX_ROUNDS) - SETTLE_STEPS
            self.block_steps = max(BLOCK_STEPS, min(math.ceil(BLOCK_SECONDS / default.median), int(fits)))
        return self._start(not self.default_on, step)

    def _time_left(self, outlook: Outlook) -> Optional[float]:
        """The fit's time left: its wall time per step (callbacks and Keras's loop around it included)."""
        default = spread(self.samples[self.default_on])
        step_seconds = max(
            (t for t in (default.median if default else None, outlook.wall_step_seconds) if t is not None), default=None
        )
        if outlook.steps_left is None or step_seconds is None:
            return None
        return outlook.steps_left * step_seconds

    def _storm_ahead(self, outlook: Outlook) -> Optional[str]:
        """The shapes seen predict a recompilation storm under XLA by the monitor's own rule: in words."""
        soon, rule = outlook.xla_compiles_soon, self.storm
        if soon < rule.threshold:
            return None
        window = min(rule.window, outlook.steps_left) if outlook.steps_left is not None else rule.window
        return (
            f"input shapes vary: with XLA on, ~{soon:.0f} input shapes would compile in the next {window} "
            f"steps (estimated from the input signatures seen so far), a recompilation storm by this "
            f"monitor's rule (storm_threshold={rule.threshold} in storm_window={rule.window}); fixed shapes "
            "(xla_keras.data: padding or bucketing) would let XLA compete"
        )

    def _shapes_vary(self, outlook: Outlook, price: Optional[float], measured: bool) -> Optional[str]:
        """Why XLA cannot win with the shapes ahead (None: it may), when the default is off: a storm by
        the monitor's own rule, or compiles costing ``SHAPES_SHARE`` of the time left at ``price`` each."""
        if self.default_on:
            return None
        verdict = "XLA was stopped after its first call" if measured else "XLA was not tried"
        storm = self._storm_ahead(outlook)
        if storm is not None:
            return f"{storm}: {verdict}"
        time_left = self._time_left(outlook)
        # Beyond the train shape the trial compiles anyway (its one-time cost), what XLA would still compile;
        # each new shape priced like XLA's first call (measured on a storm: a compiling step cost 2-2.5x
        # XLA's compile alone, about what the first call costs).
        extra = outlook.xla_compiles_ahead - (0 if measured else 1)
        if time_left is None or price is None or extra < 2 or extra * price <= SHAPES_SHARE * time_left:
            return None
        return (
            f"input shapes vary: XLA would compile ~{extra:.0f} more shapes in this fit (estimated from the "
            f"input signatures seen so far and the steps left), ~{_ms(extra * price)} at ~{_ms(price)} each"
            f"{' (its first call)' if measured else ''}, more than {SHAPES_SHARE:.0%} of the ~{_ms(time_left)} "
            f"left: XLA cannot win here; {verdict}"
        )

    def _after_block(self, step: int, outlook: Outlook) -> Optional[bool]:
        if not self.blocks[-1].values:  # a whole block without one steady step
            if self.blocks[-1].on:
                return self._decide(
                    False,
                    step,
                    outlook,
                    "compiles",
                    (
                        f"no steady step with XLA on in {self.block_steps + MAX_BLOCK_STEPS} steps: each compiled a new "
                        "shape (or ran in a "
                        "profiler window); XLA off is kept"
                    ),
                )
            return self._keep_default(
                step,
                "unfinished",
                outlook,
                (
                    f"no steady step with XLA off in {self.block_steps + MAX_BLOCK_STEPS} steps (each was traced or "
                    "profiled)"
                ),
            )
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
                return self._within_noise(
                    step,
                    outlook,
                    ratio,
                    (
                        f"XLA on and off are within noise: on/off = {ratio.words()} over {ratio.n} rounds, inside "
                        f"+-{MIN_GAIN:.0%}"
                    ),
                )
        if ratio.n >= MAX_ROUNDS:
            why = "the interval still holds 1" if not ratio.excludes_one else f"the difference is below {MIN_GAIN:.0%}"
            return self._within_noise(
                step,
                outlook,
                ratio,
                (f"XLA on and off are within noise after {ratio.n} rounds: on/off = {ratio.words()} ({why})"),
            )
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
        # No step compiled a new shape yet: XLA's first call (a compile, and the trace, probe and
        # bookkeeping around it) is the nearest measure; the compile alone was 2-2.5x below a storm's.
        measured = [
            t
            for t in (self.first_call[True], median(self.compile_seconds) if self.compile_seconds else None)
            if t is not None
        ]
        return max(measured) if measured else None

    def _faster(
        self, on_faster: bool, step: int, outlook: Outlook, on: Spread, off: Spread, ratio: "Ratio"
    ) -> Optional[bool]:
        steps_left = outlook.steps_left
        gain = abs(on.median - off.median) * steps_left if steps_left is not None else None
        each = self._compile_each()
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        cost = ahead * each if each is not None else 0.0
        fast, slow = (on, off) if on_faster else (off, on)
        faster = (
            f"XLA {mode_word(on_faster)} steps are {slow.median / fast.median:.2f}x faster ({_ms(fast.median)} "
            f"vs {_ms(slow.median)}, medians of {fast.n} and {slow.n} steps; on/off {ratio.words()} over "
            f"{ratio.n} round{'s' if ratio.n > 1 else ''})"
        )
        self._ratio = ratio
        if on_faster:
            storm = self._storm_ahead(outlook)
            if storm is not None:
                return self._decide(False, step, outlook, "compiles", f"{faster}, but {storm}: XLA off is kept")
            if gain is not None and gain - cost <= 0:
                return self._decide(
                    False,
                    step,
                    outlook,
                    "compiles",
                    (
                        f"{faster}, but the ~{ahead:.0f} XLA compiles still expected (~{_ms(cost)}) cost more than "
                        f"the ~{_ms(gain)} they would save over the {steps_left} steps left: XLA off is kept"
                    ),
                    saving=None if gain is None else cost - gain,
                )
            verdict = self._decide(
                True,
                step,
                outlook,
                "measured",
                f"{faster}: XLA on is kept"
                + (
                    f", ~{_ms(gain - cost)} saved over the {steps_left} steps left"
                    + (f" after ~{ahead:.0f} more compiles" if ahead >= 0.5 else "")
                    if gain is not None
                    else ""
                ),
                saving=None if gain is None else gain - cost,
            )
            if not self.default_on and each is not None:
                self.watch = Watch(step, off.median - on.median, cost, each, self.storm.window)
            return verdict
        return self._decide(
            False,
            step,
            outlook,
            "measured",
            f"{faster}: XLA off is kept"
            + (f", ~{_ms(gain + cost)} saved over the {steps_left} steps left" if gain is not None else ""),
            saving=None if gain is None else gain + cost,
        )

    def _within_noise(self, step: int, outlook: Outlook, ratio: "Ratio", words: str) -> Optional[bool]:
        self._ratio = ratio
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        if self.default_on and ahead >= 1:
            return self._decide(
                False,
                step,
                outlook,
                "compiles",
                (f"{words}, and XLA would still compile ~{ahead:.0f} more shapes: XLA off is kept"),
            )
        return self._keep_default(step, "within_noise", outlook, words)

    def _keep_default(self, step: int, basis: str, outlook: Outlook, words: str) -> Optional[bool]:
        return self._decide(
            self.default_on,
            step,
            outlook,
            basis,
            f"{words}; XLA {mode_word(self.default_on)} (Keras's own choice here) is kept",
        )

    def _decide(
        self, on: bool, step: int, outlook: Outlook, basis: str, why: str, saving: Optional[float] = None
    ) -> Optional[bool]:
        on_spread, off_spread = spread(self.samples[True]), spread(self.samples[False])
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        tried = self._tried_other()
        switches = self.switches + (on != self.on)
        self.decision = Decision(
            mode=mode_word(on),
            basis=basis,
            why=f"jit='fastest': {why}",
            default=mode_word(self.default_on),
            medians={"on": on_spread.median if on_spread else None, "off": off_spread.median if off_spread else None},
            spreads={"on": on_spread.iqr if on_spread else None, "off": off_spread.iqr if off_spread else None},
            steps_measured={"on": len(self.samples[True]), "off": len(self.samples[False])},
            blocks={"on": self._blocks(True), "off": self._blocks(False)},
            # With XLA on by default its compiles are the default's own: the trial paid the off mode's first call.
            trial_compile_seconds=0.0 if self.default_on or not tried else sum(self.compile_seconds),
            first_call_seconds={"on": self.first_call[True], "off": self.first_call[False]},
            predicted_saving_seconds=saving,
            expected_compiles=ahead,
            decided_at_step=step,
            steps_left=outlook.steps_left,
            switches=switches,
            trial_steps=step - self.start_step,
            ratio=self._ratio.to_dict() if self._ratio is not None else None,
            switch_steps=tuple(self.switch_steps) + ((step,) if on != self.on else ()),
        )
        self.next_check = NEVER
        return self._switch(on) if on != self.on else None

    def _revise(self, step: int, outlook: Outlook) -> Optional[bool]:
        """XLA was kept on: off returns when the compiles since cost more than priced, at a losing rate."""
        watch = self.watch
        self.next_check = NEVER
        if watch is None or not watch.lost(step):
            return None
        self.watch = None
        decision = self.decision
        why = (
            f"{decision.why}. Then {watch.compiles} new shapes compiled in the {step - watch.since} steps after "
            f"the decision (~{_ms(watch.spent)}, against ~{_ms(watch.priced)} priced), more per step than XLA "
            f"saves ({_ms(watch.gain_per_step)}): XLA off is kept from step {step} on"
        )
        self.decision = replace(
            decision,
            mode="off",
            basis="compiles",
            why=why,
            predicted_saving_seconds=None,
            expected_compiles=outlook.xla_compiles_ahead + outlook.validation_compiles_ahead,
            switches=decision.switches + 1,
            switch_steps=decision.switch_steps + (step,),
            revised_at_step=step,
        )
        return self._switch(False)

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
        if on and not self._screened and not self.default_on:
            self.next_check = step + 1  # right after XLA's first call: the shapes screen, priced by it
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
        measuring = (
            "waiting for the first epoch's length"
            if not self._tried_other() and len(self.blocks[-1].values) >= self.block_steps
            else f"block {len(self.blocks)}"
        )
        return (
            f"jit='fastest': measuring steady train steps with XLA on and off ({measuring}, now XLA "
            f"{mode_word(self.on).upper()}); the faster mode is kept for the rest of the fit"
        )

    def view(self) -> dict:
        """The decision, or the trial so far (``mode`` null while measuring)."""
        if self.decision is not None:
            return self.decision.to_dict()
        on, off = spread(self.samples[True]), spread(self.samples[False])
        return {
            "mode": None,
            "basis": "measuring",
            "why": f"jit='fastest': measuring steady steps with XLA on and off (now {mode_word(self.on)})",
            "default": mode_word(self.default_on),
            "medians": {"on": on.median if on else None, "off": off.median if off else None},
            "spreads": {"on": on.iqr if on else None, "off": off.iqr if off else None},
            "steps_measured": {"on": len(self.samples[True]), "off": len(self.samples[False])},
            "blocks": {"on": self._blocks(True), "off": self._blocks(False)},
            "trial_compile_seconds": sum(self.compile_seconds),
            "first_call_seconds": {"on": self.first_call[True], "off": self.first_call[False]},
            "predicted_saving_seconds": None,
            "expected_compiles": None,
            "decided_at_step": None,
            "steps_left": None,
            "switches": self.switches,
            "trial_steps": None,
            "ratio": Ratio.of(self.rounds()).to_dict() if self.rounds() else None,
            "switch_steps": list(self.switch_steps),
        }
