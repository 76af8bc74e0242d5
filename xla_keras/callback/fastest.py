"""Driving jit='fastest' from the callback: start the fit's trial (or reuse the model's kept decision),
switch at its checks, keep the faster mode when the fit ends. The running fit's trial and the decisions
kept on models are callback/fastest_run.py; the trial itself is ``jit/trial.py``, its rules
``jit/decision.py``."""

from __future__ import annotations

from typing import Any, Callable, Optional

from xla_keras.callback.agreement import agreed_check
from xla_keras.callback.fastest_run import FastestRun, keep, remembered_first_call
from xla_keras.callback.state import CallState
from xla_keras.callback.step_functions import StepFunctions
from xla_keras.jit.decision import Decision


class FastestDriver:
    def __init__(self, state: CallState, functions: StepFunctions):
        self.state = state
        self.functions = functions

    def begin(self, model: Any, step: int, reused: Optional[Decision]) -> None:
        """After the train function is installed: a trial, or the model's kept decision (no trial)."""
        state = self.state
        session, backend = state.session, state.backend
        state.fastest = None
        refusal = backend.jit_refusal
        if refusal:
            session.jit_decision = None
            session.notes.add_once("fastest-keep", refusal)
            return
        if reused is not None:
            session.jit_decision = reused.reused(step)
        else:
            on = backend.auto_jit(model)
            known = remembered_first_call(model)
            fresh = bool(backend.function_fresh(model, "train"))
            if not fresh and known is None:
                # Built before this fit (no trace ahead) and never measured: rebuilt, so that its first
                # call measures what the trial's other mode will cost once.
                self.functions.install("train", rebuild=True)
                fresh = True
            state.fastest = FastestRun(
                session,
                on,
                step,
                state.observer.params,
                backend.trial_first_call[not on],
                backend.fit_validates(model),
                fresh,
                known,
            )
            state.fastest.installed("train", session.ledger.function("train"), bool(state.current.jit_state.active))
            if state.dist.processes > 1:  # every process's trial starts at the same step: its first check agrees
                state.fastest.agree_at = state.fastest.trial.next_check
        self.functions.read_back("train")

    def due(self, now: Optional[float] = None, drain: Optional[Callable[[], None]] = None) -> None:
        """The train step reached the trial's next check: switch, or keep the decision. ``drain`` (JAX):
        waits for the device, closing the block's last interval in the mode that ran it."""
        state = self.state
        run, step = state.fastest, state.session.phases["train"].step
        if run is None or not run.due(step):
            return
        if state.ends_in_wrapper:  # JAX: the repeats so far end now, in the mode that ran them
            scalars = state.session.drain("train", end=now)
            if scalars:
                state.sink.scalars(scalars)
            if drain is not None and run.trial.running:
                drain()
        deciding, chief = run.trial.running, state.dist.process == 0
        switch = run.check(step) if run.agree_at is None else agreed_check(run, step, chief, state.backend.gather)
        if not run.trial.running and (deciding or switch is not None):
            state.session.trial_ended(run.trial, revised=not deciding and switch is not None)
        if switch is not None:
            self.functions.install("train")
        self.functions.read_back("train")
        if not run.trial.running:
            state.flush()

    def end(self) -> None:
        """The fit ended (wrappers off): the kept mode's functions stay on the model, the decision too."""
        state = self.state
        run, state.fastest = state.fastest, None
        if run is None:
            return
        model = state.model
        decision = run.finish(state.session.phases["train"].step)
        state.backend.settle_kept(model, run.final_on())
        state.session.ledger.drop_parked()
        keep(model, run, decision)
        kept = run.trial.decision
        assert kept is not None  # finish() decided
        state.current.jit_state = state.backend.read_back(model, "train")
        state.current.jit_state.reason = kept.why
