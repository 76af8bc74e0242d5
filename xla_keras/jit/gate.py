"""The trial's gate: whether trying the other mode is worth it at all, and what XLA's compiles ahead cost. Pure.

At the end of block 0 a trial is worth running only when the fit has at least
``MIN_STEPS_LEFT`` train steps left and its one-time cost (the other mode's
first call: a trace, an XLA compile; estimated from this fit's first call by
the backend's measured factor) is at most ``TRIAL_BUDGET`` of the time left at
the default's steady step. When the other mode is XLA and shapes vary, XLA is
not tried when the shapes seen so far predict a recompilation storm under the
monitor's own rule, or when the compiles it would need for the rest of the fit
would eat ``SHAPES_SHARE`` of that time. The second test runs again right
after XLA's first call, priced by what that call really cost. (The two
thresholds are the trial's rules: ``xla_keras.jit.trial`` passes them in.)
"""

from __future__ import annotations

from typing import Optional, Tuple

from xla_keras.jit.decision import mode_word
from xla_keras.jit.outlook import Outlook, StormRule
from xla_keras.jit.statistics import Spread
from xla_keras.report.units import ms_text

SHAPES_SHARE = 0.5  # XLA's expected compiles, at most this share of the time left (it would have to halve
# every step just to repay them)


def time_left(default: Optional[Spread], outlook: Outlook) -> Optional[float]:
    """The fit's time left: its wall time per step (callbacks and Keras's loop around it included)."""
    step_seconds = max(
        (t for t in (default.median if default else None, outlook.wall_step_seconds) if t is not None), default=None
    )
    if outlook.steps_left is None or step_seconds is None:
        return None
    return outlook.steps_left * step_seconds


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


def keep_default_reason(
    outlook: Outlook,
    rule: StormRule,
    default_on: bool,
    one_time: Optional[float],
    left: Optional[float],
    min_steps_left: int,
    budget: float,
) -> Optional[Tuple[str, str]]:
    """Why the trial keeps the default without trying the other mode, as (basis, words); None: try it.
    ``one_time`` is the other mode's estimated first call, ``left`` the fit's time left."""
    steps_left = outlook.steps_left
    if steps_left is None:
        return (
            "length_unknown",
            "the fit's length is unknown (data without a length, one epoch): a trial could cost more than it saves",
        )
    if steps_left < min_steps_left:
        return (
            "too_short",
            (
                f"the fit is too short to decide: {steps_left} train steps left after warm-up, and a decision "
                f"needs at least {min_steps_left}"
            ),
        )
    words = None if default_on else shapes_vary(outlook, rule, left, one_time, measured=False)
    if words is not None:
        return "shapes_vary", words
    if left is not None and one_time is not None and one_time > budget * left:
        return (
            "too_short",
            (
                f"the fit is too short to decide: trying XLA {mode_word(not default_on)} would cost ~"
                f"{ms_text(one_time)} once (its first call: trace{', compile' if not default_on else ''}), more "
                f"than {budget:.0%} of the ~{ms_text(left)} left; a decision needs a fit of at least "
                f"~{ms_text(one_time / budget)} at this step time"
            ),
        )
    return None
