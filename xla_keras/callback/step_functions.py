"""The model's step functions as the monitor sees them: its wrapper installed on each phase's function (under a
jit='fastest' trial, the function of the trial's mode), what really runs read back, XLA switched off for the
rest of a call (a storm fallback, an op XLA cannot compile), the user's own setting restored, and the
persistent cache with the report's probe."""

from __future__ import annotations

from typing import Optional, Tuple

from xla_keras.callback.state import CallState
from xla_keras.core.cache import CompileTimes, model_key
from xla_keras.core.types import PHASES
from xla_keras.jit.trial import Trial, trial_words


class StepFunctions:
    def __init__(self, state: CallState):
        self.state = state

    def install(self, phase: str, rebuild: bool = False) -> None:
        """Wrap ``phase``'s function: under a jit='fastest' trial, the function of the trial's mode."""
        state = self.state
        model, run, session = state.model, state.fastest, state.session
        if run is None or rebuild:
            installed = state.backend.install(model, phase, state.observer, rebuild=rebuild)
        else:  # the function of the trial's mode: kept from an earlier switch, or built now
            installed = state.backend.switch_jit(model, phase, run.on, state.observer)
            session.functions_forced([phase])
            if installed.rebuilt and installed.xla_now and run.trial.running and not run.trial.default_on:
                state.observer.quiet_phase = phase  # the trial's first XLA step: a bare fit would not start XLA
            run.installed(phase, installed.token, installed.xla_now)
        session.function_installed(
            phase,
            installed.before,
            installed.token,
            id(model),
            rebuild,
            installed.xla_now,
            keep_previous=run is not None,
        )

    def read_back(self, phase: str) -> None:
        """What really runs for ``phase`` now, with the reason in words (jit='fastest': the decision's)."""
        state = self.state
        jit_state = state.backend.read_back(state.model, phase)
        if jit_state.autoclustering and not state.current.layer_names:  # the coverage names the layers
            state.current.layer_names = state.backend.layer_names(state.model)
        decision = state.session.jit_decision if state.config.jit == "fastest" else None
        if decision is not None and not state.backend.jit_refusal:
            jit_state.reason = trial_words(decision) if isinstance(decision, Trial) else decision.why
        state.current.jit_state = jit_state

    def switch_off(
        self, phase: str, step: int, reason: str, unsupported: Optional[Tuple[Optional[str], dict]] = None
    ) -> None:
        """XLA off for the rest of this call, from ``phase`` step ``step``: a storm fallback, or an op XLA
        cannot compile (``unsupported``: the fix's code and the report's record). A jit='fastest' trial ends
        there; every wrapped phase's function is rebuilt without XLA and wrapped again, the others are dropped
        (Keras rebuilds them lazily, without XLA)."""
        state = self.state
        backend, session, model = state.backend, state.session, state.model
        run = state.fastest
        if run is not None:  # the trial ends: XLA off for the rest of the fit (its kept function, if any)
            run.stop(session.phases["train"].step, reason, "unsupported" if unsupported else "storm")
        backend.fall_back(model, reason, unsupported)
        session.fell_back(phase, step, reason, "unsupported" if unsupported else "storm")
        wrapped = backend.wrapped_phases()
        for name in PHASES:
            if name in wrapped:
                self.install(name, rebuild=run is None)  # the non-XLA function, wrapped again
            else:
                backend.drop_function(model, name)  # rebuilt lazily, non-XLA
                session.functions_forced([name])
        self.read_back(phase)

    def restore_model(self) -> None:
        state = self.state
        if state.backend.restore_jit(state.model):
            # A storm fallback switched the model off for that fit only: its step functions must be
            # rebuilt with the user's own setting. In place, never None: this can run while a call is
            # still using them, and Keras looks its function up at every step. Tracing is lazy.
            state.backend.rebuild_functions(state.model, PHASES)
            state.session.functions_forced(PHASES)

    def set_up_cache(self) -> None:
        """The persistent compilation cache, and this report's probe (it knows the cache)."""
        state = self.state
        current, model = state.current, state.model
        current.cache = state.backend.cache()
        effective = current.cache if current.cache and current.cache["effective"] else None
        current.cache_account.times = CompileTimes(effective["dir"]) if effective else None
        current.cache_account.model = model_key(model, serialize=state.backend.name != "jax") if effective else ""
        # A new shape loaded from the persistent cache is no compile, and only a probe tells the two apart:
        # with the cache every new signature is probed (the probes' budget holds without it).
        current.session.probe_budget = not state.backend.probes_every_call and effective is None
        if current.probe is None:
            current.probe = state.backend.probe(current.session.notes, model, state.dist.multi_worker)
        current.probe.configure(current.cache, multi_worker=state.dist.multi_worker)
