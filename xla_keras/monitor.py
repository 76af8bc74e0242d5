"""XlaMonitor: the Keras callback. It keeps the hooks, the phase lifecycle and the storm action, and wires the parts.

* ``config.MonitorConfig``: the arguments, validated once;
* ``session.Session``: per-phase statistics, fed call by call (backend-neutral);
* ``sink.OutputSink``: TensorBoard event files and ``xla_report.json``;
* ``traces.TraceWindows``: profiler traces for the Profile tab;
* ``guards``: error containment and cleanup backstops;
* ``backends.<name>``: what depends on the framework under Keras (step
  wrappers, the compile probe, JIT modes, distribution facts).

A report is about one model: a monitor handed another model starts a new one.
"""

from __future__ import annotations

import atexit
import logging
import traceback
import warnings
import weakref
from typing import Any, List, Optional

try:
    import keras
except ModuleNotFoundError as _missing:  # Keras without its backend (TensorFlow is an extra of ours)
    raise ModuleNotFoundError(
        f"{_missing}: XlaMonitor needs Keras 3 and its backend. Install TensorFlow with "
        '`pip install "xla_keras[tensorflow]"` (or the TensorFlow your project pins), then '
        "run again"
    ) from _missing

from xla_keras.backends import backend_for
from xla_keras.backends.base import Distribution
from xla_keras.backends.tensorflow.multiworker import cluster_from_env
from xla_keras.callback.book import ModelReport, ReportBook
from xla_keras.callback.guards import flush_at_exit, guard_callback_list, guarded
from xla_keras.config import MonitorConfig
from xla_keras.core.cache import CompileTimes, model_key
from xla_keras.core.session import CallPlan
from xla_keras.core.signatures import describe
from xla_keras.errors import LogDirError, XlaKerasWarning
from xla_keras.jit.run import FastestRun, keep, kept_decision, remembered_first_call
from xla_keras.jit.trial import Decision, Trial
from xla_keras.report.model import PHASES, XlaReport
from xla_keras.storms.detection import RecompilationStormError, storm_text

logger = logging.getLogger("xla_keras")

__all__ = ["XlaMonitor", "LogDirError"]

_RUN_WORD = {"train": "fit", "test": "evaluation", "predict": "prediction"}
# Only these stop a call, by design: a storm under on_storm="raise", an unwritable log_dir.
_hook = guarded(RecompilationStormError, LogDirError)


def _watched(method):
    """A hook that does nothing during a call whose model the monitor cannot observe."""

    def run(self, *args, **kwargs):
        if self._skipping:
            return None
        return method(self, *args, **kwargs)

    run.__name__, run.__doc__ = method.__name__, method.__doc__
    return run


class XlaMonitor(keras.callbacks.Callback):
    """Tells whether XLA really ran in `fit`, what compiled and what it cost.

    Add it to ``model.fit(callbacks=[...])`` (or ``evaluate`` / ``predict``),
    under Keras's TensorFlow or JAX backend. At the start of each call it
    applies ``jit`` and reads back the JIT flag of the step function that
    really runs; every batch's input shapes are read (attribute reads, no
    device sync); a shape new to that function is an XLA compile, timed by a
    profiler probe of exactly that step (TensorFlow) or by JAX's own compile
    events (JAX). ``monitor.report``
    says what happened; with a ``log_dir``, TensorBoard shows it.

    Args:
        log_dir: where the TensorBoard runs (``train``, ``validation``) and
            ``xla_report.json`` go; ``None`` writes no files and keeps the
            report in memory. A ``pathlib.Path`` or ``~`` is fine. Under
            ``tf.distribute`` only the chief writes.
        jit: ``"keep"`` (leave the model's jit_compile alone and report the
            truth), ``"on"`` (``jit_compile=True``), ``"off"``, or
            ``"autoclustering"`` (TensorFlow only: TensorFlow picks clusters;
            on CPU it needs the early opt-in
            ``xla_keras.configure(cpu_autoclustering=True)``; refused under
            Keras's JAX backend, where a jitted step is one XLA program), or
            ``"fastest"``: measure steady train steps with XLA on and off
            inside the fit (interleaved blocks after warm-up) and keep the
            faster for the rest of the fit, pricing the compiles XLA would
            still need; within noise, or in a fit too short to decide (fewer
            than 1,000 train steps left after warm-up, or a trial costing more
            than 3% of the time left), Keras's own choice is kept and the report
            says why. The decision stays with the model for its later
            ``"fastest"`` fits (``xla_keras.jit_decision(model)``); ``"on"`` /
            ``"off"`` override it. Applied to the model like
            ``compile(jit_compile=...)`` and kept there; global switches are
            restored when the fit ends.
        storm_threshold: new input signatures (the first one included) within
            ``storm_window`` steps of one phase that make a recompilation storm
            (an int >= 2).
        storm_window: the window, in steps of that phase (an int >= 1).
        on_storm: ``"warn"`` (one warning per storm), ``"raise"``
            (``RecompilationStormError``: the fit stops, files are flushed) or
            ``"fallback"`` (switch this fit to non-XLA at once and go on).
        profile: profiler traces for TensorBoard's Profile tab: ``"auto"``
            (5 steady train steps after warm-up, and the next recompiling
            train step after a storm opens), ``(start, stop)`` (those train
            steps, 1-based, counted like ``optimizer.iterations``) or None.
        update_freq: ``"epoch"``, ``"batch"`` or an int N: how often the
            ``xla/step_time_ms`` scalar is written (compile events are written
            at the step they happened, whatever this says).
        verbose: 0 silent (warnings only); 1 prints the XLA status at the
            start and the report at the end of each fit; 2 the same (Keras's
            levels are accepted; the monitor says nothing per batch).
        max_records: cap on detailed compile and slow-step records kept per
            phase; counts and totals stay exact beyond it.
        compile_budget: a phase whose compiles beyond its first take more
            than this share of its time (compiles + steps at the steady step
            time) gets the storm's advice and fix in ``report.advice`` even
            below ``storm_threshold`` (a float in (0, 1); None: no such
            advice). Advice only: it never raises or falls back. 0.1 by
            default: XLA's steady-step gains are commonly 10-30%, so
            recompiles above 10% of a phase's time can cancel what XLA brings,
            while one extra compile in a fit of normal length stays under it.

    Raises:
        ValueError / TypeError: at construction, for an argument outside its
            choices (the message names them).
        RuntimeError: at construction, under a Keras backend the monitor
            does not support (neither TensorFlow nor JAX).
        LogDirError: at the start of a fit whose ``log_dir`` cannot be
            written (an ``OSError``; before any step runs).
        RecompilationStormError: with ``on_storm="raise"``, when a storm opens.

    Examples:

    ```python
    monitor = xla_keras.XlaMonitor(log_dir="logs/xla", jit="on")
    model.fit(x, y, epochs=3, validation_split=0.2, callbacks=[monitor])
    print(monitor.report)                      # human summary
    monitor.report.to_dict()                   # JSON-able; also LOG_DIR/xla_report.json
    ```

    Storms: stop early, or switch XLA off and go on:

    ```python
    monitor = xla_keras.XlaMonitor(storm_threshold=8, on_storm="fallback")
    model.fit(padded_ds, epochs=5, callbacks=[monitor])
    storm = monitor.report.storms[0]
    print(storm.advice)                        # which input and axis vary, and the fix
    padded_ds = xla_keras.data.apply_fix(padded_ds, storm.fix)  # the fix, applied to the data as batched
    ```

    Let the fit measure whether XLA pays off, and keep the faster mode:

    ```python
    monitor = xla_keras.XlaMonitor(jit="fastest")
    model.fit(ds, epochs=20, callbacks=[monitor])
    print(monitor.report.jit_decision["why"])  # both medians, their spread, the saving
    ```

    Profiler traces and step-time scalars every 10 steps:

    ```python
    monitor = xla_keras.XlaMonitor(log_dir="logs/xla", profile=(20, 25), update_freq=10)
    # tensorboard --logdir logs/xla: the Profile tab opens train steps 20-25
    ```

    One monitor across several calls and models:

    ```python
    monitor = xla_keras.XlaMonitor(log_dir=None, verbose=0)
    model.fit(ds, callbacks=[monitor]); model.evaluate(val, callbacks=[monitor])
    other.fit(ds, callbacks=[monitor])         # a new report (files in LOG_DIR/model_2)
    first, second = monitor.reports
    ```
    """

    _xla_keras_monitor = True  # how guards.py recognises a monitor in a CallbackList

    @property
    def async_safe(self) -> bool:
        """Keras may run this callback's batch-end hooks on its executor thread (JAX): they
        do nothing there, since each call ends in the step wrapper (backends/jax/steps.py).
        Keras then keeps its asynchronous dispatch, as in a fit without the monitor."""
        return self._ends_in_wrapper

    def __init__(
        self,
        log_dir: Optional[str] = "logs/xla",
        jit: str = "keep",
        storm_threshold: int = 8,
        storm_window: int = 200,
        on_storm: str = "warn",
        profile: Any = "auto",
        update_freq: Any = "epoch",
        verbose: int = 1,
        max_records: int = 1000,
        compile_budget: Optional[float] = 0.10,
    ):
        backend = backend_for(keras.backend.backend())  # a class; raises, naming the backend that runs
        super().__init__()
        self.config = MonitorConfig(
            log_dir,
            jit,
            storm_threshold,
            storm_window,
            on_storm,
            profile,
            update_freq,
            verbose,
            max_records,
            compile_budget,
        )
        self.backend = backend(self.config.jit)
        self._ends_in_wrapper = bool(getattr(self.backend, "ends_calls_in_wrapper", False))
        self._in_cleanup = False
        self._enabled = True
        self._observing = True  # False after an internal error under multi-worker (see _disable)
        self._refused: Optional[str] = None  # why this monitor cannot observe here (Keras version, model kind)
        self._in_fit = False
        self._call_token: Optional[object] = None  # the fit / evaluate / predict being watched (guards.py)
        self._active_probe: Optional[Any] = None
        self._plans: dict = {}
        # The plan of a repeat call (session.call_repeats): one per phase, made once.
        self._repeat_plans = {p: CallPlan(p, 0, 1, (), False) for p in PHASES}
        self._dist = Distribution()
        self._book = ReportBook(
            lambda log_dir: ModelReport(self.config, log_dir, self.backend, _missing_profile_tab, self.backend.name),
            self.config.log_dir,
        )
        self._foreign: "weakref.WeakSet" = weakref.WeakSet()  # models refused (warned once each)
        self._skipping = False  # this call's model is refused: its hooks do nothing
        self._fastest: Optional[FastestRun] = None  # jit='fastest': the running fit's trial
        self.quiet_phase: Optional[str] = None  # the step wrapper runs that phase's next call quietly
        self.backend.prepare(self)
        _warn_keras_multi_worker_fault(self.backend)
        atexit.register(flush_at_exit, weakref.ref(self))
        unsupported = self.backend.unsupported()
        if unsupported:
            self._refuse(unsupported)

    @property
    def model(self) -> Any:
        """The model of the watched call. Unlike ``keras.callbacks.Callback.model`` it never syncs
        Keras's JAX training state into the model's variables: the monitor reads the model inside
        steps (a jit switch, a storm fallback), where such a sync makes the next step restart from
        the variables one step behind."""
        return self.backend.callback_model(self)

    # The arguments, as given (normalised): read-only.
    jit = property(lambda self: self.config.jit)
    storm_threshold = property(lambda self: self.config.storm_threshold)
    storm_window = property(lambda self: self.config.storm_window)
    on_storm = property(lambda self: self.config.on_storm)
    profile = property(lambda self: self.config.profile)
    update_freq = property(lambda self: self.config.update_freq)
    verbose = property(lambda self: self.config.verbose)
    compile_budget = property(lambda self: self.config.compile_budget)
    max_records = property(lambda self: self.config.max_records)

    @property
    def log_dir(self) -> Optional[str]:
        """Where this report's files go (``LOG_DIR/model_N`` for the N-th model), or None."""
        return self.sink.log_dir

    @property
    def error(self) -> Optional[str]:
        """Why the monitor disabled itself (an internal error), or None."""
        return self._current.error

    @property
    def in_call(self) -> bool:
        """A fit (or a standalone evaluate / predict) is being watched and has not ended."""
        return self._in_fit or bool(self.backend.wrapped_phases())

    def step_wrapper(self, phase: str) -> Any:
        """The wrapper this monitor installed on ``phase``'s step function, if any."""
        return self.backend.wrapper(phase)

    # ------------------------------------------------------------ one report per model

    # The current model's report, and its parts (reports.ModelReport).
    _current = property(lambda self: self._book.current)
    session = property(lambda self: self._current.session)
    sink = property(lambda self: self._current.sink)
    traces = property(lambda self: self._current.traces)

    def _watch(self, model: Any) -> bool:
        """At the start of each fit / evaluate / predict: False (this call goes unobserved) for a
        model the monitor cannot observe; each model has its own report, kept while the monitor
        watches others (a re-compiled model is the same model)."""
        foreign = self.backend.foreign_model(model)
        self._skipping = bool(foreign)
        if foreign:
            if model not in self._foreign:
                self._foreign.add(model)
                warnings.warn(f"xla_keras: {foreign}", XlaKerasWarning, stacklevel=4)
            return False
        if self._book.watch(model) and self.config.verbose:
            where = f"; its files go to {self.sink.log_dir}" if self.sink.log_dir else ""
            name = getattr(model, "name", type(model).__name__)
            print(
                f"xla_keras: this monitor now watches another model ({name!r}): it gets a report of its own "
                f"(monitor.reports){where}"
            )
        return True

    def _refuse(self, reason: str) -> None:
        """Step aside for good, with one warning: training goes on unmonitored."""
        self._refused = reason
        self._enabled = False
        warnings.warn(f"xla_keras: {reason}", XlaKerasWarning, stacklevel=3)

    @property
    def reports(self) -> List[XlaReport]:
        """One report per model this monitor watched, in the order it first saw them (the model
        watched last is ``report``). A re-compiled model is the same model."""
        return [
            r.build(
                self.config.jit, self._refused, self.backend.versions(), running=r is self._current and self.in_call
            )
            for r in self._book.all()
        ]

    # tf_keras (TF_USE_LEGACY_KERAS=1) asks every callback these before any hook and fails on a
    # Keras 3 callback without them: answering lets its fit reach on_train_begin, where the
    # monitor says why it cannot watch that model and steps aside.
    def _implements_train_batch_hooks(self) -> bool:
        return self._enabled

    def _implements_test_batch_hooks(self) -> bool:
        return self._enabled

    def _implements_predict_batch_hooks(self) -> bool:
        return self._enabled

    # ------------------------------------------------------------------ hooks

    @_hook
    def on_train_begin(self, logs=None):
        if self._in_fit:
            self._abort_fit()  # the previous fit was interrupted
        model = self.model
        if not self._watch(model):
            return
        self._set_up_call()
        self._in_fit = True
        self.traces.stop()  # a window an exception left open
        self.session.fallback = None
        for stats in self.session.phases.values():
            stats.after_switch = None
        reused = kept_decision(model) if self.config.jit == "fastest" else None
        self.backend.jit.start_on = None if reused is None else reused.mode == "on"
        if self.backend.apply_jit(model):
            # The auto-clustering switch changed: every function must be rebuilt.
            self.backend.drop_function(model, "test")
            self.backend.drop_function(model, "predict")
            self.backend.rebuild_functions(model, ["train"])
            self.session.functions_forced(PHASES)
        self._install("train")
        self._read_back("train")
        self._set_up_cache()
        step = self.backend.train_step(model)  # one device read per fit, not per step
        self.session.set_step("train", step)
        if self.config.jit == "fastest":
            self._begin_fastest(model, step, reused)
        self.traces.begin_fit(
            step + 1, keras_profiles=bool(self.config.profile == "auto" and self.backend.keras_profile_windows(model))
        )
        self._say_status()

    @_hook
    @_watched
    def on_train_batch_end(self, batch, logs=None):
        if not self._ends_in_wrapper:
            self._end_call("train")
            if self._fastest is not None:
                self._fastest_due()

    @_hook
    @_watched
    def on_epoch_begin(self, epoch, logs=None):
        if self._fastest is not None:
            self._fastest.epoch_began(epoch)

    @_hook
    @_watched
    def on_epoch_end(self, epoch, logs=None):
        if self._fastest is not None:
            self._fastest.epoch_ended(self.session.phases["train"].step)
        self._settle(("train",))
        self.sink.scalars(self.session.end_of_run("train"))
        self._flush(text=True)

    @_hook
    @_watched
    def on_train_end(self, logs=None):
        self._end_fit()
        self._current.ended()
        self._finish()

    @_hook
    def on_test_begin(self, logs=None):
        self._begin_phase("test")

    @_hook
    @_watched
    def on_test_batch_end(self, batch, logs=None):
        if not self._ends_in_wrapper:
            self._end_call("test")

    @_hook
    @_watched
    def on_test_end(self, logs=None):
        self._end_phase("test")

    @_hook
    def on_predict_begin(self, logs=None):
        self._begin_phase("predict")

    @_hook
    @_watched
    def on_predict_batch_end(self, batch, logs=None):
        if not self._ends_in_wrapper:
            self._end_call("predict")

    @_hook
    @_watched
    def on_predict_end(self, logs=None):
        self._end_phase("predict")

    # ---------------------------------------------------------------- report

    @property
    def report(self) -> XlaReport:
        """The report so far (complete after the fit / evaluate / predict) of the model watched last."""
        return self._current.build(self.config.jit, self._refused, self.backend.versions(), running=self.in_call)

    def _stopped_early(self, phase: str, in_fit: bool, why: str = "an exception or Ctrl-C") -> str:
        return (
            f"the last {'fit' if in_fit else _RUN_WORD.get(phase, phase)} stopped early ({why}) after {phase} "
            f"step {self.session.phases[phase].step}: the report holds what ran before"
        )

    # ------------------------------------------------------------- the phases

    def _set_up_call(self) -> None:
        """What every watched call starts with: distribution facts, a writable log_dir, the guard on
        Keras's callback list, the wall clock."""
        self._dist = self.backend.distribution(self.model)
        self.sink.chief = self._dist.chief
        self.session.data_kind = self.backend.data_kind(self.model)
        if self._dist.multi_worker:
            if self.backend.multi_worker_note:
                self.session.notes.add_once("multi-worker-probe", self.backend.multi_worker_note)
            if self.config.on_storm != "warn":
                self.session.notes.add_once(
                    "multi-worker-storm",
                    (
                        f"on_storm={self.config.on_storm!r} acts as 'warn' under {self._dist.name}: each worker sees its "
                        "own shard of the data, so a storm can open on one worker only, and stopping or switching XLA "
                        "off there alone would leave the other workers waiting in a collective (a hang)"
                    ),
                    warn=True,
                )
        self._check_log_dir()
        guard_callback_list(self, self.backend.running_callback_list(self.model), self.backend.end_of_data())
        self.session.wall.begin()

    def _check_log_dir(self) -> None:
        """A log_dir that cannot be written fails the fit here, before the first step, naming the
        path. Under MultiWorkerMirroredStrategy failing the chief alone would leave the other
        workers in a collective: there the chief warns and writes nothing instead."""
        error = self.sink.unwritable()
        if error is None:
            return
        text = f"XlaMonitor cannot write to log_dir={self.sink.log_dir!r}: {error.strerror or error}"
        if self._dist.multi_worker:
            self.session.notes.add_once(
                "log-dir",
                f"{text}; under {self._dist.name} the fit goes on on every worker "
                "and the monitor writes no files (its report stays in memory)",
            )
            warnings.warn(text + ": no files are written", XlaKerasWarning, stacklevel=3)
            self.sink.log_dir = None
            return
        raise LogDirError(
            error.errno, f"{text}. Pass a writable directory, or log_dir=None to keep the report in memory only"
        ) from error

    def _begin_phase(self, phase: str) -> None:
        model = self.model
        self._settle(PHASES)  # validation begins: the last train call of the epoch ended
        if self._in_fit and self.backend.running_fit(model) is None:
            self._abort_fit()  # an exception ended the last fit before on_train_end
        if self._in_fit:
            self.traces.validation_begins(self.session.phases["train"].step)
            if self._fastest is not None and self._fastest.trial.pause(self.session.phases["train"].step) is not None:
                self._install("train")  # validation runs the default mode while the trial measures
        else:
            if not self._watch(model):
                return
            self._set_up_call()
            if self.config.jit == "fastest":  # no trial outside fit: the model's kept decision, else as it is
                kept = kept_decision(model)
                self.backend.jit.start_on = kept.mode == "on" if kept is not None else bool(model.jit_compile)
            if self.backend.apply_jit(model):
                self.backend.drop_function(model, phase)
                self.session.functions_forced([phase])
        self._install(phase)
        if not self._in_fit:
            self._read_back(phase)
            self._set_up_cache()

    def _end_phase(self, phase: str, interrupted: Optional[str] = None) -> None:
        self._settle((phase,))
        self.sink.scalars(self.session.end_of_run(phase))
        self.backend.remove(self.model, phase)
        if not self._in_fit:
            self.session.take_views((phase,))
            self._restore_model()
            self.session.wall.end()
            self._current.ended(interrupted)
            self._finish()

    def _end_fit(self, at: Optional[float] = None) -> None:
        self._cleaning(lambda: self._settle(PHASES))  # repeats not yet timed, a call still pending (JAX)
        self.traces.stop()
        self.backend.remove_all(self.model)
        self._restore_model()
        if self._fastest is not None:
            self._end_fastest()
        self._in_fit = False
        self.session.take_views()  # real lengths for the advice: measured at fit end, not at every flush
        self.session.wall.end(at)

    def _abort_fit(self) -> None:
        """Clean up after a fit that ended by an exception: on_train_end never ran."""
        self._end_fit(at=self.session.wall.last_activity)
        self._current.ended(self._stopped_early("train", True))
        self._flush(text=True)

    def _finish(self) -> None:
        self._flush(text=True)
        self.sink.close()
        if self.config.verbose:
            print(self.report)

    def _install(self, phase: str, rebuild: bool = False) -> None:
        run = self._fastest
        if run is None or rebuild:
            installed = self.backend.install(self.model, phase, self, rebuild=rebuild)
        else:  # the function of the trial's mode: kept from an earlier switch, or built now
            installed = self.backend.switch_jit(self.model, phase, run.on, self)
            self.session.functions_forced([phase])
            if installed.rebuilt and installed.xla_now and run.trial.running and not run.trial.default_on:
                self.quiet_phase = phase  # the trial's first XLA step: a bare fit would not start XLA
            run.installed(phase, installed.token, installed.xla_now)
        self.session.function_installed(
            phase,
            installed.before,
            installed.token,
            id(self.model),
            rebuild,
            installed.xla_now,
            keep_previous=run is not None,
        )

    def _read_back(self, phase: str) -> None:
        state = self.backend.read_back(self.model, phase)
        decision = self.session.jit_decision if self.config.jit == "fastest" else None
        if decision is not None and not self.backend.jit_refusal:
            state.reason = decision.words() if isinstance(decision, Trial) else decision.why
        self._current.jit_state = state

    # ------------------------------------------------------------- jit='fastest'

    def _begin_fastest(self, model: Any, step: int, reused: Optional[Decision]) -> None:
        """After the train function is installed: a trial, or the model's kept decision (no trial)."""
        self._fastest = None
        refusal = self.backend.jit_refusal
        if refusal:
            self.session.jit_decision = None
            self.session.notes.add_once("fastest-keep", refusal)
            return
        if reused is not None:
            self.session.jit_decision = reused.reused(step)
        else:
            on = self.backend.auto_jit(model)
            known = remembered_first_call(model)
            fresh = bool(self.backend.function_fresh(model, "train"))
            if not fresh and known is None:
                # Built before this fit (no trace ahead) and never measured: rebuilt, so that its first
                # call measures what the trial's other mode will cost once.
                self._install("train", rebuild=True)
                fresh = True
            self._fastest = FastestRun(
                self.session,
                on,
                step,
                self.params,
                self.backend.trial_first_call[not on],
                self.backend.fit_validates(model),
                fresh,
                known,
            )
            self._fastest.installed("train", self.session.ledger.function("train"), self._current.jit_state.active)
        self._read_back("train")

    def _fastest_due(self, now: Optional[float] = None) -> None:
        """The train step reached the trial's next check: switch, or keep the decision."""
        run, step = self._fastest, self.session.phases["train"].step
        if run is None or not run.due(step):
            return
        if self._ends_in_wrapper:  # JAX: the repeats so far end now, in the mode that ran them
            scalars = self.session.drain("train", end=now)
            if scalars:
                self.sink.scalars(scalars)
        deciding = run.trial.running
        switch = run.check(step)
        if not run.trial.running:
            self.session.trial_ended(run.trial, revised=not deciding and switch is not None)
        if switch is not None:
            self._install("train")
        self._read_back("train")
        if not run.trial.running:
            self._flush()

    def _end_fastest(self) -> None:
        """The fit ended (wrappers off): the kept mode's functions stay on the model, the decision too."""
        run, self._fastest = self._fastest, None
        decision = run.finish(self.session.phases["train"].step)
        self.backend.settle_kept(self.model, run.final_on())
        self.session.ledger.drop_parked()
        keep(self.model, run, decision)
        self._current.jit_state = self.backend.read_back(self.model, "train")
        self._current.jit_state.reason = run.trial.decision.why

    def _restore_model(self) -> None:
        if self.backend.restore_jit(self.model):
            # A storm fallback switched the model off for that fit only: its step functions must be
            # rebuilt with the user's own setting. In place, never None: this can run while a call is
            # still using them, and Keras looks its function up at every step. Tracing is lazy.
            self.backend.rebuild_functions(self.model, PHASES)
            self.session.functions_forced(PHASES)

    def _set_up_cache(self) -> None:
        """The persistent compilation cache, and this report's probe (it knows the cache)."""
        current = self._current
        current.cache = self.backend.cache()
        effective = current.cache if current.cache and current.cache["effective"] else None
        current.cache_account.times = CompileTimes(effective["dir"]) if effective else None
        current.cache_account.model = model_key(self.model, serialize=self.backend.name != "jax") if effective else ""
        if current.probe is None:
            current.probe = self.backend.probe(current.session.notes, self.model, self._dist.multi_worker)
        current.probe.configure(current.cache, multi_worker=self._dist.multi_worker)

    def _say_status(self) -> None:
        if self.config.verbose:
            state = self._current.jit_state
            print(f"xla_keras: jit={self.config.jit!r} -> XLA {state.words()}: {state.reason}")
        elif self.backend.jit_refusal and self.config.jit == "on":  # silent mode still hears its request refused
            warnings.warn(f"xla_keras: {self.backend.jit_refusal}", XlaKerasWarning, stacklevel=3)

    # ------------------------------------------------------------- the step path (backend's wrapper calls these)

    def active(self) -> bool:
        return self._enabled

    @_hook
    def call_due(self, phase: str, now: float) -> None:
        """The next call of ``phase`` begins at ``now``: the previous one ends there (start to start)."""
        if self.session.call_pending(phase):
            self._end_call(phase, now)
        if self._fastest is not None and phase == "train":
            self._fastest_due(now)

    def _settle(self, phases) -> None:
        """End calls still pending at a phase boundary, untimed (their end is not observable without
        a device sync: the wait includes what the device still had queued)."""
        if not self._ends_in_wrapper:
            return
        now = self.session.clock()
        for phase in phases:
            scalars = self.session.drain(phase, end=now, timed=False)
            if scalars:
                self.sink.scalars(scalars)
            if self.session.call_pending(phase):
                self._end_call(phase, now, timed=False)

    def call_unobserved(self, phase: str) -> None:
        self.session.call_skipped(phase)  # e.g. train_on_batch's generator: nothing of ours to count

    @_hook
    def call_began(self, phase: str, batches: list, start: float) -> Optional[Any]:
        if not self._observing:
            self.session.calls[phase].repeating = False
            return None
        current = self._current
        jit, session, sink = current.jit_state, current.session, current.sink
        signature = self.backend.signature
        signatures = [signature(b) for b in batches]
        session.sample_batches(phase, batches)  # a compare per batch; the values are read only for advice
        if self._ends_in_wrapper:  # JAX: the steady case first (a call ends when the next one begins)
            stats = session.phases[phase]
            if (
                len(signatures) == 1
                and current.probe is not None
                and current.traces.quiet(
                    phase,
                    stats.step,
                    stats.last_new_step,
                    sink.log_dir if sink.writes else None,
                    self._dist.multi_worker,
                )
            ):
                scalars = session.call_repeats(phase, signatures[0], jit, start)
                if scalars is not None:
                    if scalars:
                        sink.scalars(scalars)
                    if sink.due():
                        self._flush()
                    self._plans[phase] = self._repeat_plans[phase]
                    self._active_probe = current.probe.start(self._plans[phase], jit)  # a compile there is seen
                    return self._active_probe
            scalars = session.drain(phase, end=start)  # the repeats before this call end where it starts
            if scalars:
                sink.scalars(scalars)
        plan = session.call_began(phase, signatures, jit, start)
        self._plans[phase] = plan
        stats = session.phases[phase]
        free_probe = getattr(current.probe, "always", False)  # JAX: its events cost nothing, every call is seen
        if plan.new and not self._dist.default:
            self._note_per_device(phase, batches[plan.new[0][0]], plan.new[0][2])
        if current.traces.maybe_start(
            phase,
            stats.step,
            plan.batches,
            bool(plan.new),
            stats.last_new_step,
            sink.log_dir if sink.writes else None,
            self._dist.multi_worker,
        ):
            session.call_in_trace_window(phase, plan, jit, probed=free_probe)
            if not free_probe:
                return None
        if not (plan.probe or free_probe) or current.probe is None:
            return None
        self._active_probe = current.probe.start(plan, jit)
        return self._active_probe

    def _note_per_device(self, phase: str, batch: Any, signature: Any) -> None:
        per_device = getattr(self.backend, "per_device", None)
        words = per_device(batch, signature) if per_device is not None else None
        if words:
            self.session.notes.add_once(
                f"per-device-{phase}",
                (
                    f"{phase}: under {self._dist.name} over {self._dist.replicas} devices each device gets "
                    f"{words} (the first new signature; XLA compiles the step once for all devices)"
                ),
            )

    @_hook
    def call_ran(self, phase: str, handle: Optional[Any]) -> None:
        if handle is None:
            return
        try:
            observation = self._current.probe.stop(handle, self._plans[phase], self._current.jit_state)
        finally:
            self._active_probe = None
        if self._plans[phase] is self._repeat_plans[phase]:
            if observation is not None:  # a repeat compiled after all: record it now
                self._apply(phase, self.session.repeat_observed(phase, observation))
            return
        self.session.call_observed(phase, observation)

    def call_failed(self, phase: str, handle: Optional[Any], began: bool = True) -> None:
        """The model or the data raised (or Ctrl-C): the fit or evaluate is over. Give the profiler back,
        put the flags back and flush, without ever replacing the user's exception with one of ours.
        ``began``: the call's batches were pulled (a failed pull leaves the previous call's facts)."""
        try:
            self._abandon_probe(handle)
            if began:
                self.session.call_failed(phase)
            self.traces.stop()
            text = self._in_fit
            self._current.ended(self._stopped_early(phase, self._in_fit))
            if self._in_fit:
                self._end_fit()
            elif phase != "train":
                self.backend.remove(self.model, phase)
                self._restore_model()
                self.session.wall.end()
            self._flush(text=text)
        except Exception as error:  # noqa: BLE001 - never mask the step's own error
            logger.error("xla_keras: cleanup after a failed step failed too: %r", error)

    def _abandon_probe(self, handle: Optional[Any]) -> None:
        if handle is not None and self._current.probe is not None:
            self._current.probe.abandon(handle)
        if handle is self._active_probe:
            self._active_probe = None

    def _end_call(self, phase: str, now: Optional[float] = None, timed: bool = True) -> None:
        outcome = self._current.session.call_ended(phase, self._current.jit_state, now, timed=timed)
        if outcome is not None:
            if self._fastest is not None and phase == "train":
                self._fastest.trial.called(outcome.seconds)
                if outcome.compiles and self._current.jit_state.active:
                    self._fastest.trial.new_shape_step(
                        self.session.phases["train"].step, outcome.seconds, len(outcome.compiles)
                    )
            self._apply(phase, outcome)

    def _apply(self, phase: str, outcome: Any) -> None:
        """What a call added: scalars, the trace window's end, compiles, a storm, a periodic flush."""
        current = self._current
        sink = current.sink
        if outcome.scalars:
            sink.scalars(outcome.scalars)
        if current.traces.open is not None:
            current.traces.after_step(phase, current.session.phases[phase].step)
        if outcome.compiles:  # events at once; the report file at most once a second (storms compile a lot)
            for i, record in enumerate(outcome.compiles):
                current.cache_account.record(phase, describe(record.signature), i, record.seconds, record.cached)
            self._flush(report=sink.report_due())
        if outcome.storm is not None:
            self._storm(phase, *outcome.storm)
        if sink.due():
            self._flush()

    # ---------------------------------------------------------------- storms

    def _storm_action(self) -> str:
        # Each worker reads its own shard: a one-worker stop or switch would hang the others. A storm
        # found while cleaning up after an ended or failed call is reported, never acted on (it would
        # raise into the next fit, or switch XLA off for it).
        return "warn" if self._dist.multi_worker or self._in_cleanup else self.config.on_storm

    def _cleaning(self, work) -> None:
        self._in_cleanup = True
        try:
            work()
        finally:
            self._in_cleanup = False

    def _storm(self, phase: str, step: int, count: int, window_start: int) -> None:
        storm = self.session.open_storm(phase, step, count, window_start, self._storm_action())
        self.sink.scalars([self.session.storm_scalar(storm)])
        self.traces.storm_opened()
        text = storm_text(storm, self.config.storm_window)
        if storm.action == "raise":
            stopped = self._stopped_early(phase, self._in_fit, "on_storm='raise' after a recompilation storm")
            if self._in_fit:
                self._end_fit()
                self._current.ended(stopped)
                self._finish()  # flushes and closes every file before the fit stops
            else:
                self._end_phase(phase, stopped)
            raise RecompilationStormError(text)
        if storm.action == "fallback":
            self._fall_back(phase, step)
            text += (
                " on_storm='fallback': XLA is now off for the rest of this "
                f"{'fit' if self._in_fit else _RUN_WORD[phase]}."
            )
        warnings.warn(text, XlaKerasWarning, stacklevel=2)  # once: the warning is the message
        self._flush()

    def _fall_back(self, phase: str, step: int) -> None:
        reason = f"switched XLA off at {phase} step {step} after a recompilation storm (on_storm='fallback')"
        run = self._fastest
        if run is not None:  # the trial ends: XLA off for the rest of the fit (its kept function, if any)
            run.stop(self.session.phases["train"].step, reason)
        self.backend.fall_back(self.model, reason)
        self.session.fell_back(phase, step, reason)
        wrapped = self.backend.wrapped_phases()
        for name in PHASES:
            if name in wrapped:
                self._install(name, rebuild=run is None)  # the non-XLA function, wrapped again
            else:
                self.backend.drop_function(self.model, name)  # rebuilt lazily, non-XLA
                self.session.functions_forced([name])
        self._read_back(phase)

    # ---------------------------------------------------------------- output

    def _flush(self, report: bool = True, text: bool = False) -> None:
        self.sink.flush(
            report=(lambda: self.report) if report else None, text=text, step=self.session.phases["train"].step
        )

    # ------------------------------------------------------------ errors (guards.py)

    def _on_callback_error(self) -> None:
        """A callback of this fit / evaluate / predict raised (or a Ctrl-C landed in one), or the call
        is gone without its end hook: count the step that ran, give the profiler and the flags
        back, remove the wrappers and flush, never masking the error."""
        if not self._enabled or not self.in_call:
            return
        try:
            for phase in self.backend.wrapped_phases():
                if self.session.call_pending(phase):  # our batch end was not reached (JAX: its end is unknown)
                    self._cleaning(lambda phase=phase: self._end_call(phase, timed=not self._ends_in_wrapper))
            if self._in_fit:
                self._abort_fit()
                return
            phases = self.backend.wrapped_phases()
            self._current.ended(self._stopped_early(phases[0] if phases else "test", False))
            self.traces.stop()
            self.backend.remove_all(self.model)
            self._restore_model()
            self.session.wall.end(at=self.session.wall.last_activity)
            self._flush(text=True)
        except Exception as error:  # noqa: BLE001 - never mask the user's error
            logger.error("xla_keras: cleanup after a failed callback failed too: %r", error)

    def _disable(self, error: BaseException) -> None:
        """Log once, stop observing, give back everything we changed.

        Under MultiWorkerMirroredStrategy the hooks keep running their structural part (jit
        switches, function rebuilds, wrappers that pull batches): a worker that went back to
        Keras's own pull alone, or rebuilt its functions differently, would issue other collectives
        than the others and hang them. Only observing stops there."""
        if self._current.error is not None:
            return  # already disabled: logged once
        self._current.error = f"the monitor disabled itself after an internal error: {error!r}"
        if self._dist.multi_worker:
            self._observing = False
        else:
            self._enabled = False
        logger.error(
            "xla_keras: %s; training goes on unmonitored.\n%s",
            self._current.error,
            "".join(traceback.format_exception(type(error), error, error.__traceback__)),
        )
        self._abandon_probe(self._active_probe)
        self.traces.stop_quietly()  # a window left open would hold the profiler for the whole process
        if self._fastest is not None and not self._dist.multi_worker:
            run, self._fastest = self._fastest, None
            try:  # the mode running now stays; the other function is released
                self.backend.settle_kept(self.model, run.on)
            except Exception:  # noqa: BLE001 - already failing; never raise from here
                pass
        try:
            self.sink.write_report(self.report)  # it says it disabled itself
        except Exception:  # noqa: BLE001 - already failing; never raise from here
            pass
        try:
            if not self._dist.multi_worker:
                self.backend.remove_all(self.model)
                self._restore_model()
            self.sink.flush_events()
        except Exception:  # noqa: BLE001 - already failing; never raise from here
            pass

    def _release(self, at_exit: bool = False) -> None:
        """At interpreter exit: free the profiler, restore the flags, flush what we hold."""
        self._abandon_probe(self._active_probe)
        self.traces.stop()
        if self._in_fit:
            self.backend.restore_jit()
        self.sink.flush_events()
        if self.session.wall.running:
            self.sink.write_report(self.report)


def _missing_profile_tab() -> Optional[str]:
    from xla_keras.tools.doctor import profile_tab_install, profile_tab_installed

    return None if profile_tab_installed() else profile_tab_install()


def _warn_keras_multi_worker_fault(backend: Any) -> None:
    """Keras's own fit fails under MultiWorkerMirroredStrategy before any callback runs
    (keras-team/keras#20585): say why now, at construction, while the monitor can still speak."""
    cluster = cluster_from_env()
    if not cluster or cluster.get("tasks", 0) < 2:
        return
    try:
        problem = backend.multi_worker_fit_problem()
    except Exception:  # noqa: BLE001 - a hint, never a reason to fail
        return
    if problem:
        warnings.warn(
            f"{problem}. `xla-keras doctor` prints the smallest patch that makes fit train.",
            XlaKerasWarning,
            stacklevel=3,
        )
