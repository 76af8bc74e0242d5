"""The faster mode, priced over the rest of the fit. Pure.

XLA's gain (median difference x steps left) is set against the compiles it
will still need (``expected_compiles`` x the median compile measured in this
fit, plus validation's compile when the fit validates). XLA is kept only when
the saving stays positive, and never when the shapes seen predict a storm.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from xla_keras.jit.decision import mode_word
from xla_keras.jit.gate import storm_ahead
from xla_keras.jit.outlook import Outlook, StormRule
from xla_keras.jit.statistics import Ratio, Spread
from xla_keras.report.units import ms_text


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
