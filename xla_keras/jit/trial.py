"""``jit="fastest"``: measure steady train steps with XLA on and off inside the fit, keep the faster. Pure.

The trial, step by step (every number is a constant below, with its reason):

1. Block 0 runs the *default* mode, Keras's own ``jit_compile="auto"`` (off on
   a CPU under TensorFlow; on under JAX, or with a GPU and no strategy), from
   the fit's first step. Its first call (trace, compile) is never a steady
   step, and the next ``WARMUP_STEPS`` are not measured either.
2. The gate, at the end of block 0 (``xla_keras.jit.decision``), may keep the
   default without a trial, and says why.
   Under JAX's asynchronous dispatch a step's own time is not observable: while the trial runs, the
   monitor waits for the device about every ``TRIAL_SAMPLE_SECONDS`` (and after each settling step),
   and a sample is one such interval's mean step (weighing its steps), never a dispatch time.
3. Blocks alternate (``xla_keras.jit.evidence``): each skips ``SETTLE_STEPS``
   after its switch (a mode's first block: its first call and
   ``WARMUP_STEPS``) and measures as many steady steps as take
   ``BLOCK_SECONDS`` at the default's step (at least ``BLOCK_STEPS``; all the
   blocks of ``MAX_ROUNDS`` rounds within ``TRIAL_STEP_SHARE`` of the steps
   left), or ends after ``PEEK_STEPS`` when it is already ``FAR_APART`` from
   the other mode (JAX's op-by-op steps can be 80x slower: no need to pay many
   of them). A block that cannot measure (every step compiles) ends
   ``MAX_BLOCK_STEPS`` beyond its size.
4. A round's log ratio of medians is one sample. A 2x difference whose notches
   separate (median +- 1.58 IQR / sqrt(n), McGill, Tukey and Larsen 1978)
   decides after one round, a difference of ``EARLY_RATIO`` after two
   consistent rounds. Otherwise, from ``MIN_ROUNDS`` on, the 95% interval of
   the mean log ratio (Student's t) decides: outside 1 by at least
   ``MIN_GAIN``, the faster mode; inside +-``MIN_GAIN``, a tie; after
   ``MAX_ROUNDS``, a tie. A tie keeps the default.
5. The faster mode is then priced over the rest of the fit
   (``xla_keras.jit.decision``), and XLA kept on over a default off is watched
   (``xla_keras.jit.decision.Watch``).

The rules are read from this module when used: scenarios and tests tune them here.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any, Deque, Dict, List, Optional, Sequence

from xla_keras.jit.decision import (
    MAX_SAMPLES,
    Decision,
    Outlook,
    Ratio,
    Spread,
    Watch,
    keep_default_reason,
    measuring_view,
    mode_word,
    price_faster,
    separated,
    shapes_vary,
    spread,
    step_seconds,
    time_left,
)
from xla_keras.storms.detection import StormRule

# The trial's evidence: blocks of steady steps per mode, paired into rounds.


@dataclass
class Block:
    on: bool
    start: int  # its first train step
    skip: int  # steps not measured after the switch
    values: List[float] = field(default_factory=list)  # its samples: one step each, or one interval's mean (JAX)
    complete: bool = False
    steps: int = 0  # the steps its samples measured

    def wants(self, step: int) -> bool:
        return step >= self.start + self.skip


def rounds(blocks: Sequence[Block]) -> List[float]:
    """log(median on / median off) of each pair of adjacent blocks (a round): pairing neighbours
    cancels the machine's slow drift (on a 2-core CPU, block medians of a 1.4 ms step wandered
    by +-20% over a minute), and the rounds' spread is the noise between blocks."""
    out, pending = [], None
    for block in blocks[1:]:  # block 0 (the fit's first steps, before the gate) is measured apart
        if not block.complete or not block.values:
            continue
        if pending is not None and pending.on != block.on:
            on, off = (block, pending) if block.on else (pending, block)
            out.append(math.log(median(on.values) / median(off.values)))
            pending = None
        else:
            pending = block
    return out


def measured_blocks(blocks: Sequence[Block], on: bool) -> int:
    return sum(1 for b in blocks if b.on == on and b.complete and b.values)


def compile_each(
    shape_costs: Sequence[float], first_call_on: Optional[float], compile_seconds: Sequence[float]
) -> Optional[float]:
    """What one more XLA compile costs the fit: measured on this fit's compiling steps."""
    if shape_costs:
        return median(shape_costs)
    # No step compiled a new shape yet: XLA's first call (a compile, and the trace, probe and
    # bookkeeping around it) is the nearest measure; the compile alone was 2-2.5x below a storm's.
    measured = [t for t in (first_call_on, median(compile_seconds) if compile_seconds else None) if t is not None]
    return max(measured) if measured else None


def trial_facts(
    samples: Dict[bool, Deque[float]],
    blocks: Sequence[Block],
    first_call: Dict[bool, Optional[float]],
    steps: Dict[bool, int],
) -> dict:
    """The evidence's fields of a decision (and of the trial's view while it runs), per mode (``steps``:
    the steady steps each mode's samples measured)."""
    on, off = spread(samples[True]), spread(samples[False])
    return {
        "medians": {"on": on.median if on else None, "off": off.median if off else None},
        "spreads": {"on": on.iqr if on else None, "off": off.iqr if off else None},
        "steps_measured": {"on": steps[True], "off": steps[False]},
        "blocks": {"on": measured_blocks(blocks, True), "off": measured_blocks(blocks, False)},
        "first_call_seconds": {"on": first_call[True], "off": first_call[False]},
    }


WARMUP_STEPS = 5  # after the first call: allocator and cache warm-up make the next steps slower
SETTLE_STEPS = 2  # after a switch: JAX's queue still holds the previous mode's steps; caches change
BLOCK_STEPS = 8  # steady steps measured per block, at least (block 0 and short fits)
BLOCK_SECONDS = 0.25  # ... or as many as take this long at the default's step: the median of 8 ~1 ms steps
# wobbles by ~8% (measured), which hid a 7% difference in 12 rounds
TRIAL_STEP_SHARE = 0.1  # ... but all the blocks of MAX_ROUNDS rounds within this share of the steps left
PEEK_STEPS = 3  # ... or this many, when the block is already FAR_APART from the other mode
FAR_APART = 2.0
# JAX: while the trial runs, a sample is an interval between drains of about this long (on 2 CPU cores a
# drain costs ~0.2 ms; one every 20 ms costs ~1% of the trial's steps, and the trial is a few % of the fit).
TRIAL_SAMPLE_SECONDS = 0.02
MAX_BLOCK_STEPS = 60  # a block that cannot measure (its steps compile, or a trace window) ends after this
# many steps beyond its size
MIN_ROUNDS = 3  # rounds (an on block beside an off block) before the rounds' interval may decide
MAX_ROUNDS = 12  # rounds after which the two are within noise (cheap: they differ little by then)
EARLY_RATIO = 1.25  # a difference this large with separated notches decides after one round
MIN_GAIN = 0.03  # a separated difference below this share is not worth a mode of its own
TRIAL_BUDGET = 0.03  # the trial's one-time cost, at most this share of the fit's time left
MIN_STEPS_LEFT = 1000  # train steps left after block 0: the trial (~100 steps) must be a small part of the fit
NEVER = math.inf  # next_check once decided: the per-step test stays one compare


def faster_mode(on: Spread, off: Spread, rounds: Sequence[float], ratio: Ratio) -> Optional[bool]:
    """The mode measured faster (True: XLA on), or None while the rounds cannot tell."""
    pooled = max(on.median, off.median) / min(on.median, off.median)
    consistent = all(abs(r) >= math.log(EARLY_RATIO) and (r > 0) == (rounds[0] > 0) for r in rounds)
    if separated(on, off) and (pooled >= FAR_APART or pooled >= EARLY_RATIO and ratio.n >= 2 and consistent):
        return on.median < off.median
    if ratio.n >= MIN_ROUNDS and ratio.excludes_one and ratio.gain >= MIN_GAIN:
        return ratio.value < 1
    return None


def tie_words(ratio: Ratio) -> Optional[str]:
    """Why the two modes are within noise, or None while more rounds may still tell them apart."""
    if ratio.n >= MIN_ROUNDS and ratio.within(MIN_GAIN):
        return (
            f"XLA on and off are within noise: on/off = {ratio.words()} over {ratio.n} rounds, inside +-{MIN_GAIN:.0%}"
        )
    if ratio.n >= MAX_ROUNDS:
        why = "the interval still holds 1" if not ratio.excludes_one else f"the difference is below {MIN_GAIN:.0%}"
        return f"XLA on and off are within noise after {ratio.n} rounds: on/off = {ratio.words()} ({why})"
    return None


def no_steady_step_words(on: bool, steps: int) -> str:
    """A block of ``steps`` steps measured none: XLA on compiled at every step, or XLA off was traced or profiled."""
    if on:
        return (
            f"no steady step with XLA on in {steps} steps: each compiled a new shape (or ran in a "
            "profiler window); XLA off is kept"
        )
    return f"no steady step with XLA off in {steps} steps (each was traced or profiled)"


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
        # The steps each sample measured (1 per step; an interval's steps under JAX), beside ``samples``.
        self.sample_steps: Dict[bool, Deque[int]] = {True: deque(maxlen=MAX_SAMPLES), False: deque(maxlen=MAX_SAMPLES)}
        self.steps_measured: Dict[bool, int] = {True: 0, False: 0}
        self.first_call: Dict[bool, Optional[float]] = {True: None, False: None}
        self.compile_seconds: List[float] = []
        self.shape_costs: Deque[float] = deque(maxlen=MAX_SAMPLES)  # per compile, from compiling steps' time
        self.block_steps = BLOCK_STEPS
        self.next_check: float = start_step + 1 + WARMUP_STEPS + BLOCK_STEPS  # NEVER once decided
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
        self.add_interval(step, seconds, 1)

    def add_interval(self, step: int, seconds_per_step: float, steps: int) -> None:
        """``steps`` steady train steps ending at ``step`` took ``seconds_per_step`` each: one step timed on
        its own, or (JAX) a clean interval between drains. One sample of the running block when it lies
        wholly past the block's settling steps."""
        block = self.blocks[-1]
        if self.paused or not block.wants(step - steps + 1) or block.complete:
            return
        block.values.append(seconds_per_step)
        block.steps += steps
        self.samples[block.on].append(seconds_per_step)
        self.sample_steps[block.on].append(steps)
        self.steps_measured[block.on] += steps

    def sample_due(self, stats: Any, now: float) -> bool:
        """JAX: whether the train call beginning at ``now`` should end with a drain (``stats``: the train
        phase's, before the call): during the block's settling steps (the measured part starts clean), and
        once the open interval has lasted ``TRIAL_SAMPLE_SECONDS``."""
        if self.paused:
            return False
        block = self.blocks[-1]
        if stats.step + 1 < block.start + block.skip:
            return True
        start = stats.interval.start
        return start is not None and now - start >= TRIAL_SAMPLE_SECONDS

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
            words = shapes_vary(outlook, self.storm, self._time_left(outlook), self._compile_each(), True)
            if words is not None:
                return self._decide(False, step, outlook, "shapes_vary", words)
        if self.paused:  # the first train step after validation: measure the paused mode again
            self.paused = False
            return self._start(block.on, step)
        other = self.samples[not block.on]
        n = block.steps
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
        if outlook.steps_left is None and outlook.length_known_later:  # measure the default until epoch 1 ends
            self.blocks[-1].complete = False
            self.next_check = step + self.block_steps
            return None
        first = max(
            (t for t in (self.first_call[self.default_on], self.known_first_call) if t is not None), default=None
        )
        one_time = self.one_time_factor * first if first is not None else None
        step_time = step_seconds(spread(self.samples[self.default_on]), outlook)
        done = step - self.start_step
        reason = keep_default_reason(
            outlook, self.storm, self.default_on, one_time, step_time, MIN_STEPS_LEFT, TRIAL_BUDGET, done
        )
        if reason is not None:
            return self._keep_default(step, reason[0], outlook, reason[1])
        default = spread(self.samples[self.default_on])
        if default is not None and outlook.steps_left is not None:
            fits = TRIAL_STEP_SHARE * outlook.steps_left / (2 * MAX_ROUNDS) - SETTLE_STEPS
            self.block_steps = max(BLOCK_STEPS, min(math.ceil(BLOCK_SECONDS / default.median), int(fits)))
        return self._start(not self.default_on, step)

    def _time_left(self, outlook: Outlook) -> Optional[float]:
        return time_left(spread(self.samples[self.default_on]), outlook)

    def _after_block(self, step: int, outlook: Outlook) -> Optional[bool]:
        if not self.blocks[-1].values:  # a whole block without one steady step
            why = no_steady_step_words(self.blocks[-1].on, self.block_steps + MAX_BLOCK_STEPS)
            if self.blocks[-1].on:
                return self._decide(False, step, outlook, "compiles", why)
            return self._keep_default(step, "unfinished", outlook, why)
        on = spread(self.samples[True], self.steps_measured[True])
        off = spread(self.samples[False], self.steps_measured[False])
        rounds = self.rounds()
        if on is None or off is None or not rounds:
            return self._start(not self.blocks[-1].on, step)
        ratio = Ratio.of(rounds)
        faster = faster_mode(on, off, rounds, ratio)
        if faster is not None:
            return self._faster(faster, step, outlook, on, off, ratio)
        words = tie_words(ratio)
        if words is not None:
            return self._within_noise(step, outlook, ratio, words)
        return self._start(not self.blocks[-1].on, step)

    def rounds(self) -> List[float]:
        """log(median on / median off) of each round (see ``rounds``)."""
        return rounds(self.blocks)

    def _compile_each(self) -> Optional[float]:
        return compile_each(self.shape_costs, self.first_call[True], self.compile_seconds)

    def _faster(
        self, on_faster: bool, step: int, outlook: Outlook, on: Spread, off: Spread, ratio: Ratio
    ) -> Optional[bool]:
        each = self._compile_each()
        self._ratio = ratio
        verdict = price_faster(on_faster, on, off, ratio, outlook, each, self.storm)
        switch = self._decide(verdict.on, step, outlook, verdict.basis, verdict.why, saving=verdict.saving)
        if verdict.on and not self.default_on and each is not None:
            self.watch = Watch(step, off.median - on.median, verdict.cost, each, self.storm.window)
        return switch

    def _within_noise(self, step: int, outlook: Outlook, ratio: Ratio, words: str) -> Optional[bool]:
        self._ratio = ratio
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        if self.default_on and ahead >= 1:
            why = f"{words}, and XLA would still compile ~{ahead:.0f} more shapes: XLA off is kept"
            return self._decide(False, step, outlook, "compiles", why)
        return self._keep_default(step, "within_noise", outlook, words)

    def _keep_default(self, step: int, basis: str, outlook: Outlook, words: str) -> Optional[bool]:
        why = f"{words}; XLA {mode_word(self.default_on)} (Keras's own choice here) is kept"
        return self._decide(self.default_on, step, outlook, basis, why)

    def _decide(
        self, on: bool, step: int, outlook: Outlook, basis: str, why: str, saving: Optional[float] = None
    ) -> Optional[bool]:
        facts = trial_facts(self.samples, self.blocks, self.first_call, self.steps_measured)
        self.decision = Decision(
            mode=mode_word(on),
            basis=basis,
            why=f"jit='fastest': {why}",
            default=mode_word(self.default_on),
            medians=facts["medians"],
            spreads=facts["spreads"],
            steps_measured=facts["steps_measured"],
            blocks=facts["blocks"],
            # With XLA on by default its compiles are the default's own: the trial paid the off mode's first call.
            trial_compile_seconds=0.0 if self.default_on or not self._tried_other() else sum(self.compile_seconds),
            first_call_seconds=facts["first_call_seconds"],
            predicted_saving_seconds=saving,
            expected_compiles=outlook.xla_compiles_ahead + outlook.validation_compiles_ahead,
            decided_at_step=step,
            steps_left=outlook.steps_left,
            switches=self.switches + (on != self.on),
            trial_steps=step - self.start_step,
            ratio=self._ratio.to_dict() if self._ratio is not None else None,
            switch_steps=tuple(self.switch_steps) + ((step,) if on != self.on else ()),
        )
        self.next_check = NEVER
        return self._switch(on) if on != self.on else None

    def _revise(self, step: int, outlook: Outlook) -> Optional[bool]:
        """XLA was kept on: off returns when the compiles since cost more than priced, at a losing rate."""
        watch, decision = self.watch, self.decision
        self.next_check = NEVER
        if watch is None or decision is None or not watch.lost(step):
            return None
        self.watch = None
        ahead = outlook.xla_compiles_ahead + outlook.validation_compiles_ahead
        self.decision = decision.revised(step, watch, ahead)
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

    # ------------------------------------------------------------ several processes (callback/agreement.py)

    def follow(self, step: int, on: bool) -> Optional[bool]:
        """Several processes: the chief's trial switched at this agreed step; this one does the same."""
        self._step = step
        return self._switch(on) if on != self.on else None

    def adopt(self, step: int, on: bool, basis: str, outlook: Outlook) -> Optional[bool]:
        """Several processes: the chief decided (or revised its decision) at this agreed step."""
        self._step = step
        why = f"process 0 measured and decided ({basis}) for every process: XLA {mode_word(on)}"
        if self.running:
            return self._decide(on, step, outlook, basis, why)
        assert self.decision is not None
        self.decision = replace(self.decision, mode=mode_word(on), why=f"jit='fastest': {why}", revised_at_step=step)
        return self._switch(on) if on != self.on else None


# ------------------------------------------------------------ what the report shows while it runs


def trial_words(trial: Trial) -> str:
    """The JIT line's reason: the decision, or what the trial is doing."""
    if trial.decision is not None:
        return trial.decision.why
    measuring = (
        "waiting for the first epoch's length"
        if not trial._tried_other() and trial.blocks[-1].steps >= trial.block_steps
        else f"block {len(trial.blocks)}"
    )
    return (
        f"jit='fastest': measuring steady train steps with XLA on and off ({measuring}, now XLA "
        f"{mode_word(trial.on).upper()}); the faster mode is kept for the rest of the fit"
    )


def trial_view(trial: Trial) -> dict:
    """The decision, or the trial so far (``mode`` null while measuring)."""
    if trial.decision is not None:
        return trial.decision.to_dict()
    rounds = trial.rounds()
    return measuring_view(
        trial_facts(trial.samples, trial.blocks, trial.first_call, trial.steps_measured),
        now_on=trial.on,
        default_on=trial.default_on,
        trial_compile_seconds=sum(trial.compile_seconds),
        switches=trial.switches,
        ratio=Ratio.of(rounds).to_dict() if rounds else None,
        switch_steps=trial.switch_steps,
    )
