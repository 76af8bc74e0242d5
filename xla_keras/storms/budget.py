"""The compile budget: a phase below the storm threshold whose recompiles still cost too much of its time. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from xla_keras.core.plain_data import known_fields, record_dict
from xla_keras.storms.fixes import Fix, PadToLengths, UnknownFix, fix_from_dict


@dataclass
class PhaseAdvice:
    """Advice for a phase whose recompiles cost more than the compile budget, below the storm threshold.

    The budget is a share of the phase's time (``XlaMonitor(compile_budget=...)``); the report lists
    such phases in ``report.advice``. Advice only: it never stops or switches anything.

    Args:
        phase: "train", "test" or "predict".
        compiles: the phase's compiles.
        compile_seconds: their time.
        recompile_seconds: the time of the compiles beyond one (what stable shapes would save).
        wall_seconds: compile seconds plus steps at the steady step time.
        share: recompile_seconds / wall_seconds.
        budget: the share allowed.
        varying: the input axes whose sizes varied, as in a ``Storm``.
        advice: the human text, as in a ``Storm``.
        fix: the machine-readable fix, as in a ``Storm`` (``xla_keras.data.apply_fix`` applies it).
        run: the call it judges: "fit", "evaluate" or "predict" (each call is judged alone).
        run_index: which of the monitor's calls of that kind, from 1 (``"fit 2"``: the second fit).
        recompiles: the compiles past the call's first signature (auto-clustering compiles one XLA module
            per cluster: every module of the first signature is the first compile); None when not known
            (the call's records were capped, or a report older than this field).

    ``compiles`` and the seconds count the step's own modules: a one-off program's (TensorFlow's variable
    initialiser, ``Compilation.outside_step``) is left out.

    Example:
        Two compiles of a phase whose last batch was short (``report.advice[0]`` after such a fit):

        ```pycon
        >>> advice = xla_keras.PhaseAdvice(phase="train", compiles=2, compile_seconds=0.34,
        ...     recompile_seconds=0.14, wall_seconds=0.36, share=0.39, budget=0.1,
        ...     fix={"kind": "drop_remainder", "batch_size": 48, "remainder": "drop"})
        >>> advice.share > advice.budget
        True
        >>> batches = [(np.ones((48, 4)), np.ones((48, 1))), (np.ones((16, 4)), np.ones((16, 1)))]
        >>> [batch[0].shape for batch in xla_keras.data.apply_fix(batches, advice.fix)]
        [(48, 4)]

        ```
    """

    phase: str
    compiles: int
    compile_seconds: float
    recompile_seconds: float
    wall_seconds: float
    share: float
    budget: float
    varying: List[Dict[str, Any]] = field(default_factory=list)
    advice: str = ""
    fix: Fix = field(default_factory=UnknownFix)
    run: str = "fit"
    run_index: int = 1
    recompiles: Optional[int] = None

    @property
    def call(self) -> str:
        """The call it judges, e.g. ``"fit 2"``."""
        return f"{self.run} {self.run_index}"

    def __post_init__(self) -> None:
        self.fix = fix_from_dict(self.fix)  # a fix passed as a dict (its JSON form) is read as its kind's record

    def to_dict(self) -> Dict[str, Any]:
        """This advice as the report's JSON holds it.

        Returns:
            A dict of the fields.
        """
        return record_dict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "PhaseAdvice":
        """Advice read back from ``to_dict()``'s form (unknown keys are ignored).

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            A ``PhaseAdvice``.
        """
        return cls(**known_fields(cls, d))  # the fix: read by __post_init__


def over_budget(
    compiles: int,
    compile_seconds: float,
    steps: int,
    steady_seconds: Optional[float],
    budget: Optional[float],
    first_compile_seconds: Optional[float] = None,
    floor: float = 0.0,
    recompiles: Optional[int] = None,
) -> Optional[Tuple[float, float, float]]:
    """(recompile seconds, wall seconds, share) when a phase's compiles beyond its first cost more
    than ``budget`` of its time and at least ``floor`` seconds, else None (``first_compile_seconds``:
    measured, when recorded; ``recompiles``: how many compiles are past the first, when known: several
    modules may make the first compile under auto-clustering).
    The first compile is the price of XLA itself; the others are what stable shapes would save.
    Wall time = compiles + steps at the steady step time
    (the same on both backends, where a JAX step's own end is not observable)."""
    past = compiles - 1 if recompiles is None else recompiles
    if budget is None or compiles < 2 or past < 1 or compile_seconds <= 0:
        return None
    recompile = (
        compile_seconds - first_compile_seconds
        if first_compile_seconds is not None
        else compile_seconds * past / compiles
    )  # the mean per compile, when the first is not recorded
    wall = compile_seconds + steps * (steady_seconds or 0.0)
    share = recompile / wall
    return (recompile, wall, share) if share > budget and recompile >= floor else None


def budget_text(phase: str, item: PhaseAdvice) -> str:
    """The advice's text: what the call's compiles cost against the budget, then the fix. Padding is
    weighed against compiles only for a padding fix (compiles are paid once, padding at every batch)."""
    subject = {"train": "training", "test": "validation"}.get(phase, phase) if item.run == "fit" else item.run
    weighed = ""
    if isinstance(item.fix, PadToLengths):
        weighed = "; compiles are paid once, padding at every " + ("epoch" if item.run == "fit" else item.run)
    past = item.recompiles
    if past is not None and past != item.compiles - 1:  # several modules for the first signature
        compiled = (
            f"{subject} compiled {item.compiles} XLA modules ({item.compiles - past} for its first signature), "
            f"{item.recompile_seconds:.2f} s for the {past} past it"
        )
    else:
        compiled = f"{subject} compiled {item.compiles} times, {item.recompile_seconds:.2f} s beyond the first compile"
    return (
        f"Compile budget ({phase}, {item.call}): {compiled} = {item.share:.0%} of its "
        f"{item.wall_seconds:.2f} s (budget {item.budget:.0%}; below the storm threshold, so no storm; judged "
        f"on {item.call}'s time alone{weighed}). {item.advice}"
    )
