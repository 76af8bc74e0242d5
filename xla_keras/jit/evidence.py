"""The trial's evidence: blocks of steady steps per mode, paired into rounds. Pure.

Blocks alternate (an interleaved design: drift and machine noise hit both
modes alike). A round is an XLA block beside a non-XLA block; its log ratio of
medians is one sample, so the rounds' spread is the noise between blocks
(steps inside a block are correlated: pooling them would overstate the
confidence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Deque, Dict, List, Optional, Sequence

from xla_keras.jit.statistics import spread


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


def summary(
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
