"""Error containment: what the guards (callback/guards.py) call when something fails. An internal error
disables the monitor once, logged, and training goes on; a failed callback or an interrupted call gets its
step counted, the profiler and the flags given back, the wrappers removed and the files flushed."""

from __future__ import annotations

import functools
import logging
import traceback

from xla_keras.callback.lifecycle import Lifecycle
from xla_keras.callback.state import CallState
from xla_keras.callback.step_functions import StepFunctions
from xla_keras.callback.step_path import StepPath

logger = logging.getLogger("xla_keras")


class Containment:
    def __init__(self, state: CallState, functions: StepFunctions, steps: StepPath, lifecycle: Lifecycle):
        self.state = state
        self.functions = functions
        self.steps = steps
        self.lifecycle = lifecycle

    def callback_failed(self) -> None:
        """A callback of this fit / evaluate / predict raised (or a Ctrl-C landed in one), or the call
        is gone without its end hook: count the step that ran, give the profiler and the flags
        back, remove the wrappers and flush, never masking the error."""
        state = self.state
        if not state.enabled or not state.in_call:
            return
        try:
            self.steps.disarm()  # count the calls the steady lane took
            backend = state.backend
            for phase in backend.wrapped_phases():
                if state.session.call_pending(phase):  # our batch end was not reached (JAX: its end is unknown)
                    state.cleaning(functools.partial(self.steps.end_call, phase, timed=not state.ends_in_wrapper))
            if state.in_fit:
                self.lifecycle.abort_fit()
                return
            phases = backend.wrapped_phases()
            state.current.ended(state.stopped_early(phases[0] if phases else "test", False))
            state.current.traces.stop()
            state.current.traces.save_pending()
            backend.remove_all(state.model)
            self.functions.restore_model()
            state.session.wall.end(at=state.session.wall.last_activity)
            state.flush(text=True)
        except Exception as error:  # noqa: BLE001 - never mask the user's error
            logger.error("xla_keras: cleanup after a failed callback failed too: %r", error)

    def disable(self, error: BaseException) -> None:
        """Log once, stop observing, give back everything we changed. Under multi-worker training
        only observing stops: the hooks' structural part (jit switches, rebuilds, wrappers that pull
        batches) must stay the same on every worker, or the collectives hang."""
        state = self.state
        current = state.current
        if current.error is not None:
            return  # already disabled: logged once
        current.error = f"the monitor disabled itself after an internal error: {error!r}"
        if state.dist.multi_worker:
            state.observing = False
        else:
            state.enabled = False
        logger.error(
            "xla_keras: %s; training goes on unmonitored.\n%s",
            current.error,
            "".join(traceback.format_exception(type(error), error, error.__traceback__)),
        )
        self.steps.disarm()  # the wrappers stop asking the lane; the calls it took are counted
        self.steps.abandon_probe(self.steps.active_probe)
        current.traces.stop_quietly()  # a window left open would hold the profiler for the whole process
        if state.fastest is not None and not state.dist.multi_worker:
            run, state.fastest = state.fastest, None
            try:  # the mode running now stays; the other function is released
                state.backend.settle_kept(state.model, run.on)
            except Exception:  # noqa: BLE001 - already failing; never raise from here
                pass
        try:
            state.sink.write_report(state.report())  # it says it disabled itself
        except Exception:  # noqa: BLE001 - already failing; never raise from here
            pass
        try:
            if not state.dist.multi_worker:
                state.backend.remove_all(state.model)
                self.functions.restore_model()
            state.sink.flush_events()
        except Exception:  # noqa: BLE001 - already failing; never raise from here
            pass

    def release_at_exit(self) -> None:
        """At interpreter exit: free the profiler, restore the flags, flush what we hold. A call still
        running here never reached its end hook and never will (an exception Keras's own loop code let
        through, whose traceback keeps the call's frames alive to the end): it was interrupted."""
        state = self.state
        if state.enabled and state.in_call:
            self.callback_failed()
        self.steps.disarm()
        self.steps.abandon_probe(self.steps.active_probe)
        state.current.traces.stop()
        state.current.traces.save_pending()
        if state.in_fit:
            state.backend.restore_jit()
        state.sink.flush_events()
        if state.session.wall.running:
            state.sink.write_report(state.report())
