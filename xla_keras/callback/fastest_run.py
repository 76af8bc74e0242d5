"""jit='fastest': the running fit's trial (``FastestRun``: when it may start, the compiles XLA would still
need, the agreed steps across processes) and the decisions kept on models (``jit_decision``), which a later
fit of the same model reuses. The callback drives it (callback/fastest.py); the trial itself is
``jit/trial.py``, its rules ``jit/decision.py``."""

from __future__ import annotations

import weakref
from typing import Any, Optional

from xla_keras.jit.decision import Decision, Outlook, expected_compiles
from xla_keras.jit.trial import Trial

# Decisions the trial measured (both modes ran): what a later fit of the model reuses. A default kept
# for want of a trial (too short, shapes that vary, unknown length) is not one: a later fit tries again.
REUSABLE = ("measured", "compiles", "within_noise")

_decisions: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# Each model's first call when its step function was fresh (a trace, and under XLA a compile): what a
# trial's other mode will cost once, known even in a later fit whose function was built already.
_first_calls: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def jit_decision(model: Any) -> Optional[dict]:
    """The decision ``XlaMonitor(jit="fastest")`` measured for ``model`` and keeps for its later fits.

    Only a decision the trial measured (both modes ran) is kept; a fit too short to decide keeps
    Keras's own choice for that fit and nothing for later ones (its report says why).

    Args:
        model: a Keras model.

    Returns:
        The decision as a dict (``mode``: "on" or "off", ``why``, ``medians``, ... as in
            ``report.jit_decision``), or None when there is none.

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data; 2 steps are far too few to
        measure (the trial needs 1,000 train steps left after warm-up).

        ```pycon
        >>> monitor = xla_keras.XlaMonitor(log_dir=None, jit="fastest", verbose=0)
        >>> history = model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[monitor])
        >>> monitor.report.jit_decision["why"]
        "jit='fastest': the fit ended before the trial could decide"
        >>> print(xla_keras.jit_decision(model))
        None

        ```
    """
    decision = _decisions.get(model)
    return decision.to_dict() if decision is not None else None


def forget_jit_decision(model: Any) -> bool:
    """Drop ``model``'s kept decision: its next ``jit="fastest"`` fit measures again.

    For a change the decision did not see, e.g. of batch size or data.

    Args:
        model: a Keras model.

    Returns:
        True when there was a decision to drop.

    Example:
        `model`: any Keras model.

        ```pycon
        >>> xla_keras.forget_jit_decision(model)  # nothing measured for it yet
        False

        ```
    """
    return _decisions.pop(model, None) is not None


def kept_decision(model: Any) -> Optional[Decision]:
    return _decisions.get(model)


def remembered_first_call(model: Any) -> Optional[float]:
    return _first_calls.get(model)


class FastestRun:
    """One fit under ``jit="fastest"`` with a trial to run."""

    def __init__(
        self,
        session: Any,
        default_on: bool,
        start_step: int,
        params: Optional[dict],
        one_time_factor: float,
        validates: bool,
        fresh: bool = True,
        known_first_call: Optional[float] = None,
    ):
        params = params or {}
        self.session = session
        self.epochs = params.get("epochs")
        self.steps_per_epoch = params.get("steps")  # None: unknown until the first epoch ends
        self.first_epoch: Optional[int] = None
        self.first_epoch_ended = False
        self.validates = validates
        self.start_step = start_step
        self.fresh = fresh  # the fit's first call traces (and compiles): it measures the one-time cost
        config = session.config
        self.storm = config.storm_rule
        self.trial = Trial(default_on, start_step, one_time_factor, known_first_call, self.storm)
        self.xla_tokens: dict = {}  # phase -> the XLA step function's token (its compiled signatures)
        self._mark: Optional[tuple] = None  # (step, monitored wall seconds) when block 0 starts measuring
        # Several processes (callback/agreement.py): the next step at which all agree; None in one process.
        self.agree_at: Optional[float] = None
        session.trial_began(self.trial)

    @property
    def on(self) -> bool:
        return self.trial.on

    def due(self, step: int) -> bool:
        if self._mark is None and step >= self.start_step + self.trial.blocks[0].skip:
            self._mark = (step, self.session.wall.seconds())  # after warm-up: the fit's wall time per step from here
        if self.agree_at is not None:  # several processes: all check at the same agreed steps
            return step >= self.agree_at
        return step >= self.trial.next_check  # never once decided, unless XLA kept on compiles a lot

    # ------------------------------------------------------------ what Keras tells

    def epoch_began(self, epoch: int) -> None:
        if self.first_epoch is None:
            self.first_epoch = epoch

    def epoch_ended(self, step: int) -> None:
        if not self.first_epoch_ended:
            self.first_epoch_ended = True
            if self.steps_per_epoch is None:
                self.steps_per_epoch = step - self.start_step  # the first epoch's, for the rest

    def installed(self, phase: str, token: Any, xla_now: bool) -> None:
        if xla_now:
            self.xla_tokens[phase] = token

    # ------------------------------------------------------------ the outlook at a check

    def epochs_left(self) -> Optional[int]:
        if not isinstance(self.epochs, int):
            return None
        return self.epochs - (self.first_epoch or 0)

    def steps_left(self, step: int) -> Optional[int]:
        epochs = self.epochs_left()
        if epochs is None or not isinstance(self.steps_per_epoch, int):
            return None
        return max(0, epochs * self.steps_per_epoch - (step - self.start_step))

    def outlook(self, step: int) -> Outlook:
        left = self.steps_left(step)
        ledger = self.session.ledger
        counts = self.session.phases["train"].history.batches
        xla_known = ledger.known("train", self.xla_tokens.get("train"))
        ahead = expected_compiles(counts, xla_known, left) if left else 0.0
        window = min(self.storm.window, left) if left is not None else self.storm.window
        soon = expected_compiles(counts, xla_known, window)
        validation = 0.0
        if self.validates and (self.epochs_left() or 0) > 0:
            seen = self.session.phases["test"].history.batches
            known = ledger.known("test", self.xla_tokens.get("test"))
            validation = float(sum(1 for fp in seen if fp not in known)) if seen else 1.0  # one shape at least
        later = self.steps_per_epoch is None and not self.first_epoch_ended and (self.epochs_left() or 0) >= 2
        wall = None
        if self._mark is not None and step - self._mark[0] >= 4:
            wall = (self.session.wall.seconds() - self._mark[1]) / (step - self._mark[0])
        return Outlook(left, ahead, validation, later, wall, soon)

    def check(self, step: int) -> Optional[bool]:
        """The mode to switch to now, or None."""
        return self.trial.check(step, self.outlook(step))

    def stop(self, step: int, reason: str, basis: str = "storm") -> None:
        """A fallback switched XLA off for the rest of the fit (``basis``: after a storm, or an op XLA cannot
        compile, "unsupported"): the trial ends there."""
        said = f"{reason}: the trial stopped, XLA is off for the rest of the fit"
        self.trial.stop(step, basis, said, False, self.outlook(step))
        self.session.trial_ended(self.trial)

    def final_on(self) -> bool:
        """The mode the model keeps after the fit: the decision's (a storm fallback's lasts for its fit)."""
        decision = self.trial.decision
        if decision is None or decision.basis in ("storm", "unsupported"):  # a fallback lasts for its fit
            return self.trial.default_on
        return decision.mode == "on"

    def finish(self, step: int) -> Optional[Decision]:
        """The fit ended: a trial still running keeps the default. Returns the decision to keep on the model."""
        trial = self.trial
        if trial.running:
            trial.stop(
                step, "unfinished", "the fit ended before the trial could decide", trial.default_on, self.outlook(step)
            )
        self.session.trial_ended(trial)
        decision = trial.decision
        return decision if decision is not None and decision.basis in REUSABLE else None


def keep(model: Any, run: FastestRun, decision: Optional[Decision]) -> None:
    """The fit ended: the model keeps its decision, and what a fresh step function's first call cost."""
    if decision is not None:
        _decisions[model] = decision
    first = run.trial.first_call[run.trial.default_on]
    if run.fresh and first is not None:
        _first_calls[model] = max(first, _first_calls.get(model, 0.0))
