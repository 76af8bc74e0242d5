"""A watched call from its begin hook to its end: which model's report, the distribution facts, the
log_dir check, the JIT mode applied and the wrappers installed (``callback/step_functions.py``), then the
phases' ends, the fit's end or abort, and the final report."""

from __future__ import annotations

import logging
import weakref
from typing import Any, Optional, Tuple

from xla_keras.backends.base import Backend
from xla_keras.callback.agreement import gather_processes
from xla_keras.callback.fastest import FastestDriver
from xla_keras.callback.fastest_run import kept_decision
from xla_keras.callback.guards import guard_callback_list
from xla_keras.callback.state import CallState
from xla_keras.callback.step_functions import StepFunctions
from xla_keras.callback.step_path import StepPath
from xla_keras.core.messages import say, warn
from xla_keras.core.precompile import previous_signatures
from xla_keras.core.types import PHASES
from xla_keras.errors import LogDirError
from xla_keras.storms.applied import applied as applied_fixes

CALL_NAME = {"test": "evaluate", "predict": "predict"}  # a phase run outside a fit
# The share of an epoch (or a validation run) the monitor's own work may take by its end: the cost card
# analyses there with what the run's probes, writes and traces left of it; what is left waits for the fit's end.
EPOCH_END_SHARE = 0.02

logger = logging.getLogger("xla_keras")


class Lifecycle:
    def __init__(self, state: CallState, functions: StepFunctions, fastest: FastestDriver, steps: StepPath):
        self.state = state
        self.functions = functions
        self.fastest = fastest
        self.steps = steps
        self._foreign: "weakref.WeakSet" = weakref.WeakSet()  # models refused (warned once each)
        self._said_status: Optional[str] = None  # the jit line printed last
        self._list_guarded = False  # the running call's CallbackList is guarded (guards.guard_callback_list)
        self._summary_due: Optional[str] = None  # said once the call's whole end hook ran (after Keras's bar)

    # ------------------------------------------------------------ set-up

    def refuse(self, reason: str) -> None:
        """Step aside for good, with one warning (at the monitor's construction): training goes on unmonitored."""
        self.state.refused = reason
        self.state.enabled = False
        warn(f"xla_keras: {reason}")

    def watch(self, model: Any) -> bool:
        """At the start of each fit / evaluate / predict: False (this call goes unobserved) for a
        model the monitor cannot observe; each model has its own report, kept while the monitor
        watches others (a re-compiled model is the same model)."""
        state = self.state
        foreign = state.backend.foreign_model(model)
        state.skipping = bool(foreign)
        if foreign:
            if model not in self._foreign:
                self._foreign.add(model)
                warn(f"xla_keras: {foreign}")
            return False
        if state.book.watch(model) and state.speaks():
            where = f"; its files go to {state.sink.log_dir}" if state.sink.log_dir else ""
            name = getattr(model, "name", type(model).__name__)
            say(
                f"xla_keras: this monitor now watches another model ({name!r}): it gets a report of its own "
                f"(monitor.reports){where}"
            )
        return True

    def set_up_call(self, run: str) -> None:
        """What every watched call (``run``: "fit", "evaluate" or "predict") starts with: the compile
        budget's new call, distribution facts, a writable log_dir, the guard on Keras's callback list,
        the wall clock."""
        state = self.state
        backend, session = state.backend, state.session
        self.steps.disarm()  # a lane armed in an earlier call (maybe another model's) counts nothing here
        session.call_segment_began(run)
        state.current.costs.call_began()
        state.dist = backend.distribution(state.model)
        state.sink.chief = state.dist.chief
        session.data_kind = backend.data_kind(state.model)
        session.model_layers = backend.layer_kinds(state.model)
        session.applied_fixes = applied_fixes()
        if state.dist.multi_worker:
            if backend.multi_worker_note:
                session.notes.add_once("multi-worker-probe", backend.multi_worker_note)
            agreed = run == "fit" and state.dist.processes > 1  # the workers agree (callback/agreement.py)
            if state.config.on_storm != "warn" and not state.dist.signatures_agree and not agreed:
                session.notes.add_once(
                    "multi-worker-storm",
                    (
                        f"on_storm={state.config.on_storm!r} acts as 'warn' in this {run} under {state.dist.name}: "
                        "each worker sees its own shard of the data, so a storm can open on one worker only, and "
                        "stopping or switching XLA off there alone would leave the other workers waiting in a "
                        "collective (a hang); in a fit, the workers agree at fixed steps"
                    ),
                    warn=True,
                )
        self._check_log_dir()
        precompile = state.config.precompile
        state.precompile_due = set(PHASES) if precompile is not None else set()
        # Read before this call writes its own report there: the shapes a script run again compiles first.
        state.precompile_previous = previous_signatures(state.sink.log_dir) if precompile == "auto" else None
        callback_list = backend.running_callback_list(state.model)
        self._list_guarded, self._summary_due = callback_list is not None, None
        begin_hooks = backend.batch_begin_hooks_in_use(callback_list) if callback_list is not None else ()
        guard_callback_list(state.observer, callback_list, backend.end_of_data(), begin_hooks)
        session.wall.begin()

    def _check_log_dir(self) -> None:
        """A log_dir that cannot be written fails the fit here, before the first step, naming the
        path. Under MultiWorkerMirroredStrategy failing the chief alone would leave the other
        workers in a collective: there the chief warns and writes nothing instead."""
        state = self.state
        sink = state.sink
        error = sink.unwritable()
        if error is None:
            return
        text = f"XlaMonitor cannot write to log_dir={sink.log_dir!r}: {error.strerror or error}"
        if state.dist.multi_worker:
            state.session.notes.add_once(
                "log-dir",
                f"{text}; under {state.dist.name} the fit goes on on every worker "
                "and the monitor writes no files (its report stays in memory)",
            )
            warn(text + ": no files are written")
            sink.log_dir = None
            return
        raise LogDirError(
            error.errno, f"{text}. Pass a writable directory, or log_dir=None to keep the report in memory only"
        ) from error

    # ------------------------------------------------------------ begins

    def begin_fit(self) -> None:
        state = self.state
        if state.in_fit:
            self.abort_fit()  # the previous fit was interrupted
        model = state.model
        if not self.watch(model):
            return
        self.set_up_call("fit")
        state.in_fit = True
        backend, session, traces = state.backend, state.session, state.current.traces
        traces.stop()  # a window an exception left open
        traces.save_pending()
        session.fallback = None
        for stats in session.phases.values():
            stats.after_switch = None
        reused = kept_decision(model) if state.config.jit == "fastest" else None
        backend.set_fastest_start(None if reused is None else reused.mode == "on")
        if backend.apply_jit(model):
            # The auto-clustering switch changed: every function must be rebuilt.
            backend.drop_function(model, "test")
            backend.drop_function(model, "predict")
            backend.rebuild_functions(model, ["train"])
            session.functions_forced(PHASES)
        self.functions.install("train")
        self.functions.read_back("train")
        self.functions.set_up_cache()
        step = backend.train_step(model)  # one device read per fit, not per step
        session.set_step("train", step)
        if state.config.jit == "fastest":
            self.fastest.begin(model, step, reused)
        keras_profiles = bool(state.config.profile == "auto" and backend.keras_profile_windows(model))
        params = state.observer.params or {}
        steps, epochs = params.get("steps"), params.get("epochs")
        planned = steps * epochs if isinstance(steps, int) and isinstance(epochs, int) else None
        traces.begin_fit(step + 1, keras_profiles=keras_profiles, planned_steps=planned)
        self._say_status()

    def begin_phase(self, phase: str) -> None:
        state = self.state
        model = state.model
        self.steps.settle(PHASES)  # validation begins: the last train call of the epoch ended
        if state.in_fit and state.backend.running_fit(model) is None:
            self.abort_fit()  # an exception ended the last fit before on_train_end
        if state.in_fit:
            train_step = state.session.phases["train"].step
            state.current.traces.validation_begins(train_step)
            run = state.fastest
            if run is not None and run.trial.pause(train_step) is not None:
                self.functions.install("train")  # validation runs the default mode while the trial measures
            if run is not None and run.agree_at is not None and run.trial.running:
                run.agree_at = min(run.agree_at, train_step + 1)  # the chief resumes measuring there
        else:
            if not self.watch(model):
                return
            self.set_up_call(CALL_NAME[phase])
            if state.config.jit == "fastest":  # no trial outside fit: the model's kept decision, else as it is
                kept = kept_decision(model)
                state.backend.set_fastest_start(kept.mode == "on" if kept is not None else bool(model.jit_compile))
            if state.backend.apply_jit(model):
                state.backend.drop_function(model, phase)
                state.session.functions_forced([phase])
        self.functions.install(phase)
        if not state.in_fit:
            self.functions.read_back(phase)
            self.functions.set_up_cache()
            self._say_status()  # as a fit says it: the same line for evaluate and predict
        self.run_began(phase)

    def run_began(self, phase: str) -> None:
        """An epoch, or a validation / evaluate / predict run, begins now (its time from here is its steps')."""
        session = self.state.session
        session.run_began(phase, session.clock())

    def _say_status(self) -> None:
        """The jit line, at the start of a fit, an evaluate or a predict; once while it stays the same
        (an evaluate in a loop says it once)."""
        state = self.state
        if state.speaks():
            jit_state = state.current.jit_state
            line = f"xla_keras: jit={state.config.jit!r} -> XLA {jit_state.words()}: {jit_state.reason}"
            if line != self._said_status:
                self._said_status = line
                say(line)
        elif state.backend.jit_refusal and state.config.jit == "on":  # silent mode still hears its request refused
            warn(f"xla_keras: {state.backend.jit_refusal}")

    # ------------------------------------------------------------ ends

    def epoch_ended(self, epoch: int) -> None:
        state = self.state
        if state.fastest is not None:
            state.fastest.epoch_ended(state.session.phases["train"].step)
        self.steps.settle(("train",))
        state.sink.scalars(state.session.end_of_run("train"))
        self.cost_card(("train",), budget=self._run_end_budget("train"))
        if epoch + 1 < (state.observer.params or {}).get("epochs", epoch + 2):
            gather_processes(state)  # every process ends the epoch at the same step
            state.flush(text=True)
        # The fit's last epoch: its end hook gathers and writes the same files next (a failure between
        # the two: abort_fit writes), so they are written once (1.0 ms of a 1-epoch fit's 2.9 ms, measured).

    def _run_end_budget(self, phase: str) -> float:
        """The seconds a run's end may spend on the cost card: ``EPOCH_END_SHARE`` of the run, less the
        monitor's own work in it (a storm's probes and writes may leave nothing: the fit's end analyses)."""
        session = self.state.session
        return max(0.0, EPOCH_END_SHARE * session.phases[phase].last_run_seconds - session.own_in_run(phase))

    def cost_card(self, phases: Tuple[str, ...], budget: Optional[float] = None) -> None:
        """Off the step path: analyse the programs compiled since the last time (callback/cost_card.py),
        and write the phases' achieved FLOP/s and MFU. ``budget``: the seconds it may take (an epoch end)."""
        state = self.state
        costs, session = state.current.costs, state.session
        began = session.clock()
        try:
            costs.analyse(state.model, session.phases, budget, session.wall.seconds())
            for phase in phases:
                state.sink.scalars(costs.scalars(phase, session.phases[phase]))
        except Exception as error:  # noqa: BLE001 - the cost card is a detail: the rest of the monitor goes on
            session.notes.add_once("cost-card-failed", f"the cost card stopped: {type(error).__name__}: {error}"[:200])
            costs.mode = "off"
        finally:
            session.own_work("cost", session.clock() - began)

    def end_phase(self, phase: str, interrupted: Optional[str] = None) -> None:
        state = self.state
        self.steps.settle((phase,))
        state.sink.scalars(state.session.end_of_run(phase))
        # Validation inside a fit pays a small share of its run (the rest waits for the fit's end).
        budget = self._run_end_budget(phase) if state.in_fit else None
        self.cost_card((phase,), budget)
        state.backend.remove(state.model, phase)
        if not state.in_fit:
            state.session.take_views((phase,))
            self.functions.restore_model()
            state.session.wall.end()
            state.current.ended(interrupted)
            self.finish()

    def end_fit(self, at: Optional[float] = None, finished: bool = False) -> None:
        """The fit is over (``finished``: by its end hook, not an exception or a raise)."""
        state = self.state
        state.cleaning(lambda: self.steps.settle(PHASES))  # repeats not yet timed, a call still pending (JAX)
        state.current.traces.stop()
        state.current.traces.save_pending()
        if finished:
            self.cost_card(PHASES)  # the programs the epoch ends left
        state.backend.remove_all(state.model)
        self.functions.restore_model()
        if state.fastest is not None:
            self.fastest.end()
        state.in_fit = False
        state.session.take_views()  # real lengths for the advice: measured at fit end, not at every flush
        state.session.wall.end(at)

    def abort_fit(self) -> None:
        """Clean up after a fit that ended by an exception: on_train_end never ran."""
        state = self.state
        self.end_fit(at=state.session.wall.last_activity)
        state.current.ended(state.stopped_early("train", True))
        state.flush(text=True)

    def finish(self) -> None:
        state = self.state
        state.flush(text=True)
        state.sink.close()
        if state.speaks():  # 12 lines at most; print(monitor.report) says more
            summary = state.report().summary()
            if self._list_guarded:  # said after every callback's end hook: after Keras's progress bar
                self._summary_due = summary
            else:
                print(summary)

    def say_summary(self) -> None:
        """The running call's whole end hook ran (every callback's): the summary, if one is due."""
        summary, self._summary_due = self._summary_due, None
        if summary:
            print(summary)

    def call_failed(
        self, phase: str, handle: Optional[Any], began: bool = True, why: str = "an exception or Ctrl-C"
    ) -> None:
        """The model or the data raised (or Ctrl-C): the fit or evaluate is over. Give the profiler back,
        put the flags back and flush, without ever replacing the user's exception with one of ours.
        ``began``: the call's batches were pulled (a failed pull leaves the previous call's facts).
        ``why``: what stopped it, for the report's note."""
        state = self.state
        try:
            self.steps.disarm()  # the calls the lane took are counted before the failed one is uncounted
            self.steps.abandon_probe(handle)
            if began:
                state.session.call_failed(phase)
            state.current.traces.stop()
            state.current.traces.save_pending()
            text = state.in_fit
            state.current.ended(state.stopped_early(phase, state.in_fit, why))
            if state.in_fit:
                self.end_fit()
            elif phase != "train":
                state.backend.remove(state.model, phase)
                self.functions.restore_model()
                state.session.wall.end()
            state.flush(text=text)
        except Exception as error:  # noqa: BLE001 - never mask the step's own error
            logger.error("xla_keras: cleanup after a failed step failed too: %r", error)


def warn_keras_multi_worker_fault(backend: Backend) -> None:
    """Keras's own fit fails under MultiWorkerMirroredStrategy before any callback runs
    (keras-team/keras#20585): say why now, at construction, while the monitor can still speak."""
    try:
        problem = backend.multi_worker_fit_problem()
    except Exception:  # noqa: BLE001 - a hint, never a reason to fail
        return
    if problem:
        warn(
            f"{problem}. `xla-keras doctor` prints the smallest patch that makes fit train.",
        )
