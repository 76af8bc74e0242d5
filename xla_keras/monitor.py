"""XlaMonitor: the Keras callback. It keeps Keras's hooks and wires the parts in ``callback/``.

* ``config.MonitorConfig``: the arguments, validated once;
* ``callback.state.CallState``: what the parts share (the backend, the per-model reports, the call);
* ``callback.lifecycle``: a call from its begin hook to its end; ``callback.step_path``: the step path;
  ``callback.storm_action``, ``callback.fastest``: storms and jit='fastest'; ``callback.guards`` and
  ``callback.containment``: the guards, error containment and cleanup backstops; ``callback.agreement``:
  several processes agree;
* ``backends.<name>``: what depends on the framework under Keras (step wrappers, the compile probe,
  JIT modes, distribution facts).

A report is about one model: a monitor handed another model starts a new one.
"""

from __future__ import annotations

import atexit
import weakref
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

try:
    import keras
except ModuleNotFoundError as _missing:  # Keras without its backend (TensorFlow is an extra of ours)
    raise ModuleNotFoundError(
        f"{_missing}: XlaMonitor needs Keras 3 and its backend. Install TensorFlow with "
        '`pip install "xla_keras[tensorflow]"` (or the TensorFlow your project pins), then '
        "run again"
    ) from _missing

from xla_keras.backends import backend_for
from xla_keras.backends.base import Backend
from xla_keras.callback.agreement import gather_processes
from xla_keras.callback.containment import Containment
from xla_keras.callback.fastest import FastestDriver
from xla_keras.callback.guards import flush_at_exit, guarded
from xla_keras.callback.lifecycle import Lifecycle, warn_keras_multi_worker_fault
from xla_keras.callback.precompile import Precompiler
from xla_keras.callback.reports import ModelReport, ReportBook
from xla_keras.callback.state import CallState
from xla_keras.callback.step_functions import StepFunctions
from xla_keras.callback.step_path import StepPath
from xla_keras.callback.storm_action import StormAction, StormAgreement
from xla_keras.callback.unsupported_action import UnsupportedAction
from xla_keras.config import MonitorConfig
from xla_keras.core.types import PrecompileRunner
from xla_keras.errors import CompileAfterPrecompileError, LogDirError, RecompilationStormError, UnsupportedOpError
from xla_keras.session.repeats import SteadyLane

if TYPE_CHECKING:
    from xla_keras.backends.base import CompileProbe
    from xla_keras.callback.traces import TraceWindows
    from xla_keras.report.model import Compilation, XlaReport
    from xla_keras.session.session import Session
    from xla_keras.tensorboard.sink import OutputSink

__all__ = ["XlaMonitor", "LogDirError"]

# Only these stop a call, by design: a storm under on_storm="raise", an op XLA cannot compile under
# on_unsupported="raise", an unwritable log_dir.
_hook = guarded(RecompilationStormError, UnsupportedOpError, LogDirError, CompileAfterPrecompileError)


def _watched(method):
    """A hook that does nothing during a call whose model the monitor cannot observe."""

    def run(self, *args, **kwargs):
        if self._state.skipping:
            return None
        return method(self, *args, **kwargs)

    run.__name__, run.__doc__ = method.__name__, method.__doc__
    return run


BATCH_END_HOOKS = ("on_train_batch_end", "on_test_batch_end", "on_predict_batch_end")


def _no_batch_end(batch: int, logs: Optional[dict] = None) -> None:
    """A batch-end hook with nothing to do (JAX: see XlaMonitor.__init__)."""


class XlaMonitor(keras.callbacks.Callback):
    """Tells whether XLA really ran in `fit`, what compiled and what it cost.

    Add it to ``model.fit(callbacks=[...])`` (or ``evaluate`` / ``predict``), under Keras's
    TensorFlow or JAX backend: every batch's input shapes are read (no device sync), a shape new to
    the step function is an XLA compile, timed by a profiler probe (TensorFlow) or JAX's compile
    events. ``monitor.report`` says what happened; with a ``log_dir``, TensorBoard shows it.

    Args:
        log_dir: where the TensorBoard runs (``train``, ``validation``) and ``xla_report.json`` go; ``None``
            writes no files and keeps the report in memory. A ``pathlib.Path`` or ``~`` is fine. Under
            ``tf.distribute`` only the chief writes.
        jit: ``"keep"`` (leave the model's jit_compile alone and report the truth), ``"on"``
            (``jit_compile=True``), ``"off"``, or ``"autoclustering"`` (TensorFlow only: TensorFlow picks
            clusters; on CPU it needs the early opt-in ``xla_keras.configure(cpu_autoclustering=True)``;
            refused under Keras's JAX backend, where a jitted step is one XLA program), or ``"fastest"``:
            measure steady train steps with XLA on and off inside the fit (interleaved blocks after warm-up)
            and keep the faster for the rest of the fit, pricing the compiles XLA would still need; within
            noise, or in a fit too short to decide (fewer than 1,000 train steps left after warm-up, or a
            trial costing more than 3% of the time left), Keras's own choice is kept and the report says why.
            The decision stays with the model for its later ``"fastest"`` fits
            (``xla_keras.jit_decision(model)``); ``"on"`` / ``"off"`` override it. Applied to the model like
            ``compile(jit_compile=...)`` and kept there; global switches are restored when the fit ends.
        storm_threshold: new input signatures (the first one included) within ``storm_window`` steps of one
            phase that make a recompilation storm (an int >= 2).
        storm_window: the window, in steps of that phase (an int >= 1).
        on_storm: ``"warn"`` (one warning per storm), ``"raise"`` (``RecompilationStormError``: the fit stops,
            files are flushed) or ``"fallback"`` (switch this fit to non-XLA at once and go on; under JAX
            each operation then compiles per new shape, which usually costs more: docs/jax.md).
        profile: profiler traces for TensorBoard's Profile tab: ``"auto"`` (5 steady train steps after
            warm-up, and the next recompiling train step after a storm opens), ``(start, stop)`` (those train
            steps, 1-based, counted like ``optimizer.iterations``) or None.
        update_freq: ``"epoch"``, ``"batch"`` or an int N: how often the ``xla/step_time_ms`` scalar is
            written (compile events are written at the step they happened, whatever this says).
        verbose: 0 silent (warnings only); 1 prints the XLA status at the start (once while it stays the same)
            and the summary (``report.summary()``, at most 12 lines) at the end of each fit, evaluate or predict,
            when the call's own ``verbose`` is not 0;
            2 the same (Keras's levels are accepted; the monitor says nothing per batch).
        max_records: cap on detailed compile and slow-step records kept per phase; counts and totals stay
            exact beyond it.
        compile_budget: a phase whose compiles beyond its first take more than this share of its time
            (compiles + steps at the steady step time) gets the storm's advice and fix in ``report.advice``
            even below ``storm_threshold``, when they also cost ``compile_budget_floor`` seconds (a float in
            (0, 1); None: no such advice). Advice only: it never
            raises or falls back. 0.1 by default: XLA's steady-step gains are commonly 10-30%, so recompiles
            above 10% of a phase's time can cancel what XLA brings, while one extra compile in a fit of normal
            length stays under it.
        compile_budget_floor: seconds: a phase's compiles beyond its first must also cost at least this
            much to get that advice (a number >= 0; 0: the share alone decides). 1.0 by default: in a short
            demo a partial last batch's extra compile (~0.1-0.5 s on a CPU) can be about half of the phase
            and still not be worth a finding. A storm is not subject to it: it always speaks.
        cost: the cost card: what each compiled program costs (``report.compilations[i].cost``: FLOPs,
            bytes, memory) and each phase's achieved FLOP/s and MFU (``report.costs``, the ``xla/flops_per_second``
            and ``xla/mfu`` scalars). Analysed once per distinct signature, at an epoch's or a call's end, never on
            the step path. ``"auto"`` (the default) uses only sources that compile nothing again (JAX 0.10 and
            later: the executable that ran; older JAX: the lowered step, no memory; TensorFlow: the step's HLO,
            FLOPs only); ``"full"`` also pays a second compile where memory needs one (TensorFlow, JAX before
            0.10); ``"off"``: no analysis.
        peak_flops: one device's peak FLOP/s for the MFU; None (the default): a table of common GPUs and
            TPUs by device and compute dtype (``core.program_cost.PEAK_FLOPS``), and no MFU on other devices (CPUs).
        on_unsupported: what happens when XLA cannot compile an op of the step, wherever XLA compiles the whole
            step (``jit="on"``, or ``"keep"`` with the model's own ``jit_compile=True``): TensorFlow's op with no
            XLA kernel (``tf.strings``, ``tf.print``, ...), or a JAX layer whose shapes depend on the data.
            ``"fallback"`` (the default): the step is rebuilt without XLA and runs the same batches again (no
            step lost), the report names the ops, their layers and the fix (``report.unsupported_ops``,
            ``report.jit_fix``); ``"raise"``: ``UnsupportedOpError`` (files flushed), from the framework's error.
        precompile: compile a shape set before each phase's first step, so that the loop compiles nothing
            (docs/precompile.md): None (the default): no; ``"auto"``: the shapes of a dataset made by
            ``xla_keras.data.apply_fix`` (its lengths), else those the last report in ``log_dir`` compiled
            (a script run again); a path to an ``xla_report.json`` or a log dir: its compiled shapes; a list
            of batch specs in the batch's structure (``tf.TensorSpec``, ``keras.InputSpec``,
            ``jax.ShapeDtypeStruct``: one per shape). JAX lowers and compiles the step (nothing runs);
            TensorFlow runs it once on a zero batch per shape and restores every variable it wrote.
            ``report.precompile`` and each record's ``precompiled`` say what it did.
        precompile_threads: JAX's precompile compiles side by side on this many threads (None: the cores);
            TensorFlow's runs one shape after another (its compiles of one function do not overlap).
        on_new_signature: a compile of the step after a precompile (a shape the set missed): ``"warn"``
            (the default: once, and ``report.precompile[phase]["missed"]``) or ``"raise"``
            (``CompileAfterPrecompileError``, files flushed: no compile in the loop, checked in production).

    Raises:
        ValueError: at construction, for an argument outside its choices (the message names them).
        TypeError: at construction, for a ``log_dir`` that is neither a path (str, ``os.PathLike``) nor None.
        RuntimeError: at construction, under a Keras backend the monitor does not support (neither TensorFlow
            nor JAX).
        LogDirError: at the start of a fit whose ``log_dir`` cannot be written (an ``OSError``; before any
            step runs).
        RecompilationStormError: with ``on_storm="raise"``, when a storm opens.
        UnsupportedOpError: with ``on_unsupported="raise"``, when XLA cannot compile an op of the step.
        CompileAfterPrecompileError: with ``on_new_signature="raise"``, when the step compiles after a precompile.

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data (here 64 rows: 2 batches of 32).

        ```pycon
        >>> monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
        >>> history = model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[monitor])
        >>> monitor.report.jit_active  # XLA really ran
        True
        >>> monitor.report.to_dict()["compilation_count"]  # JSON-able; one input shape, one compile
        {'train': 1, 'test': 0, 'predict': 0}
        >>> print(monitor.report)  # doctest: +ELLIPSIS
        XLA report (xla_keras)
          jit requested   : on    XLA active: yes
        ...

        ```

        With a ``log_dir`` (``"logs/xla"`` by default) the report is also ``LOG_DIR/xla_report.json``
        and TensorBoard's XLA tab; ``verbose=1`` (the default) prints its summary when the fit ends.
    """

    _xla_keras_monitor = True  # how guards.py recognises a monitor in a CallbackList

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
        compile_budget_floor: float = 1.0,
        cost: str = "auto",
        peak_flops: Optional[float] = None,
        on_unsupported: str = "fallback",
        precompile: Any = None,
        precompile_threads: Optional[int] = None,
        on_new_signature: str = "warn",
    ):
        backend = backend_for(keras.backend.backend())  # a class; raises, naming the backend that runs
        super().__init__()
        self.config = MonitorConfig(
            log_dir=log_dir,
            jit=jit,  # type: ignore[arg-type]  # validated there
            storm_threshold=storm_threshold,
            storm_window=storm_window,
            on_storm=on_storm,
            profile=profile,
            update_freq=update_freq,
            verbose=verbose,
            max_records=max_records,
            compile_budget=compile_budget,
            compile_budget_floor=compile_budget_floor,
            cost=cost,
            peak_flops=peak_flops,
            on_unsupported=on_unsupported,
            precompile=precompile,
            precompile_threads=precompile_threads,
            on_new_signature=on_new_signature,  # type: ignore[arg-type]  # validated there
        )
        self.backend: Backend = backend(self.config.jit)
        self.call_token: Optional[object] = None  # the fit / evaluate / predict being watched (guards.py)
        self.quiet_phase: Optional[str] = None  # the step wrapper runs that phase's next call quietly
        book = ReportBook(
            lambda log_dir: ModelReport(self.config, log_dir, self.backend, _missing_profile_tab), self.config.log_dir
        )
        # The parts, wired bottom-up; each gets the shared state, none reads another's internals.
        state = self._state = CallState(self.config, self.backend, book, self)
        functions = StepFunctions(state)
        self._fastest = FastestDriver(state, functions)
        self._steps = StepPath(state, self._fastest, self)  # its storms and compiles come back here (below)
        self._lifecycle = Lifecycle(state, functions, self._fastest, self._steps)
        self._storm_action = storm_action = StormAction(state, functions, self._lifecycle)
        self._precompiler = Precompiler(state, storm_action.stop)
        self._unsupported = UnsupportedAction(state, functions, self._lifecycle, self._steps)
        self._agreement = StormAgreement(state, storm_action)  # TensorFlow's workers: storms acted on together
        self._containment = Containment(state, functions, self._steps, self._lifecycle)
        self.backend.prepare(self)
        if state.ends_in_wrapper:
            # JAX: calls end in the step wrapper, so the batch-end hooks have nothing to do, and Keras runs
            # them on its executor thread at every step beside the next one: even a guarded hook that
            # returns at once added ~13 us to a 0.3 ms step (benchmarks/overhead.py). Keras's own no-op runs.
            for name in BATCH_END_HOOKS:
                setattr(self, name, _no_batch_end)
        warn_keras_multi_worker_fault(self.backend)
        atexit.register(flush_at_exit, weakref.ref(self))
        unsupported = self.backend.unsupported()
        if unsupported:
            self._lifecycle.refuse(unsupported)

    # ------------------------------------------------------------------ what it shows (read-only)

    @property
    def async_safe(self) -> bool:
        """Keras may run the batch-end hooks on its executor thread (JAX): calls end in the step wrapper."""
        return self._state.ends_in_wrapper

    @property
    def model(self) -> Any:
        """The model of the watched call.

        Unlike ``keras.callbacks.Callback.model`` it never syncs Keras's JAX training state into the
        model's variables (the monitor reads it inside steps).

        Returns:
            The Keras model of the current (or last) fit / evaluate / predict, or None before any.
        """
        return self.backend.callback_model(self)

    # The arguments, as given (normalised): read-only.
    jit = property(lambda self: self.config.jit)
    storm_threshold = property(lambda self: self.config.storm_threshold)
    storm_window = property(lambda self: self.config.storm_window)
    on_storm = property(lambda self: self.config.on_storm)
    on_unsupported = property(lambda self: self.config.on_unsupported)
    precompile = property(lambda self: self.config.precompile)
    precompile_threads = property(lambda self: self.config.precompile_threads)
    on_new_signature = property(lambda self: self.config.on_new_signature)
    profile = property(lambda self: self.config.profile)
    update_freq = property(lambda self: self.config.update_freq)
    verbose = property(lambda self: self.config.verbose)
    compile_budget = property(lambda self: self.config.compile_budget)
    compile_budget_floor = property(lambda self: self.config.compile_budget_floor)
    max_records = property(lambda self: self.config.max_records)

    @property
    def log_dir(self) -> Optional[str]:
        """Where this report's files go (``LOG_DIR/model_N`` for the N-th model), or None.

        Returns:
            The current model's directory (``~`` expanded), or None with ``log_dir=None``.
        """
        return self.sink.log_dir

    @property
    def error(self) -> Optional[str]:
        """Why the monitor disabled itself (an internal error), or None.

        Returns:
            The error's text (training went on unmonitored), or None while the monitor works.
        """
        return self._state.current.error

    @property
    def in_call(self) -> bool:
        """A fit (or a standalone evaluate / predict) is being watched and has not ended."""
        return self._state.in_call

    def step_wrapper(self, phase: str) -> Any:
        """The wrapper this monitor installed on ``phase``'s step function, if any."""
        return self.backend.wrapper(phase)

    # The current model's report, and its parts (book.ModelReport).
    @property
    def session(self) -> Session:
        return self._state.session

    @property
    def sink(self) -> OutputSink:
        return self._state.sink

    @property
    def traces(self) -> TraceWindows:
        return self._state.current.traces

    @property
    def probe(self) -> Optional[CompileProbe]:
        """The compile probe of the report being written (made at its model's first call), or None."""
        return self._state.probe

    @property
    def report(self) -> XlaReport:
        """The report so far (complete after the fit / evaluate / predict) of the model watched last.

        Returns:
            An ``XlaReport``, built anew at each read (a snapshot: later steps do not change it).

        Example:
            `monitor`: the monitor of XlaMonitor's example, after its fit of 2 batches.

            ```pycon
            >>> monitor.report.steps
            {'train': 2, 'test': 0, 'predict': 0}

            ```
        """
        return self._state.report()

    @property
    def reports(self) -> List[XlaReport]:
        """One report per model this monitor watched, in the order it first saw them.

        The model watched last is ``report``. A re-compiled model is the same model.

        Returns:
            A list of ``XlaReport``, one per model.

        Example:
            `monitor`: the monitor of XlaMonitor's example, which watched one model.

            ```pycon
            >>> [report.steps["train"] for report in monitor.reports]
            [2]

            ```
        """
        return self._state.reports()

    # ------------------------------------------------------------------ hooks

    @_hook
    def on_train_begin(self, logs=None):
        self._lifecycle.begin_fit()
        self._agreement.fit_began()

    @_hook
    @_watched
    def on_train_batch_end(self, batch, logs=None):
        if not self._state.ends_in_wrapper:
            self._steps.end_call("train")
            if self._state.fastest is not None:
                self._fastest.due()
            if self._agreement.on:
                self._agreement.batch_ended()

    @_hook
    @_watched
    def on_epoch_begin(self, epoch, logs=None):
        self._lifecycle.run_began("train")
        if self._state.fastest is not None:
            self._state.fastest.epoch_began(epoch)

    @_hook
    @_watched
    def on_epoch_end(self, epoch, logs=None):
        self._agreement.agree()  # validation's storms too: every worker ends the epoch here
        self._lifecycle.epoch_ended(epoch)

    @_hook
    @_watched
    def on_train_end(self, logs=None):
        self._lifecycle.end_fit(finished=True)
        gather_processes(self._state)  # every process ends the fit here: not after a failure (abort_fit)
        self._state.current.ended()
        self._lifecycle.finish()

    @_hook
    def on_test_begin(self, logs=None):
        self._lifecycle.begin_phase("test")

    @_hook
    @_watched
    def on_test_batch_end(self, batch, logs=None):
        if not self._state.ends_in_wrapper:
            self._steps.end_call("test")

    @_hook
    @_watched
    def on_test_end(self, logs=None):
        self._lifecycle.end_phase("test")

    @_hook
    def on_predict_begin(self, logs=None):
        self._lifecycle.begin_phase("predict")

    @_hook
    @_watched
    def on_predict_batch_end(self, batch, logs=None):
        if not self._state.ends_in_wrapper:
            self._steps.end_call("predict")

    @_hook
    @_watched
    def on_predict_end(self, logs=None):
        self._lifecycle.end_phase("predict")

    # ------------------------------------------------------------- the step path (the backend's wrapper calls these)

    def active(self) -> bool:
        return self._state.enabled

    # tf_keras (TF_USE_LEGACY_KERAS=1) asks every callback these before any hook and fails on a
    # Keras 3 callback without them: answering lets its fit reach on_train_begin, where the
    # monitor says why it cannot watch that model and steps aside.
    _implements_train_batch_hooks = _implements_test_batch_hooks = _implements_predict_batch_hooks = active

    @_hook
    def call_unobserved(self, phase: str) -> None:
        self._steps.unobserved(phase)

    def steady_lane(self, phase: str) -> SteadyLane:
        """The lane the JAX step wrapper asks first (session/repeats.py)."""
        return self._steps.lanes[phase]

    @_hook
    def call_began(self, phase: str, batches: list, start: float, pulled: Optional[float] = None) -> Optional[Any]:
        return self._steps.began(phase, batches, start, pulled)

    def precompile_pending(self, phase: str) -> bool:
        """The phase's first call of a watched call: a shape set to compile first (``precompile``)."""
        return phase in self._state.precompile_due

    @_hook
    def precompile_phase(self, phase: str, batch: Any, runner: PrecompileRunner) -> float:
        """Before the phase's first step: compile its shape set on the template ``batch`` (seconds it took)."""
        return self._precompiler.run(phase, batch, runner)

    @_hook
    def call_ran(self, phase: str, handle: Optional[Any]) -> bool:
        return self._steps.ran(phase, handle)

    @_hook
    def call_drained(self, phase: str, at: Optional[float]) -> None:
        self._steps.drained(phase, at)

    def call_failed(self, phase: str, handle: Optional[Any], began: bool = True) -> None:
        """The model or the data raised (or Ctrl-C): clean up, never masking the user's exception."""
        self._lifecycle.call_failed(phase, handle, began)

    @_hook
    def call_unsupported(self, phase: str, handle: Optional[Any], error: BaseException) -> Optional[Any]:
        """XLA could not compile an op of the call's step: the function that runs it again without XLA."""
        return self._unsupported.met(phase, handle, error)

    # ------------------------------------------------------------ what the step path hands up (CallEvents)

    def storm_opened(self, phase: str, step: int, count: int, window_start: int) -> None:
        """A storm opened: the storm action warns, stops the call or falls back (``on_storm``)."""
        self._storm_action.opened(phase, step, count, window_start)

    def compiles_seen(self, phase: str, records: Sequence[Compilation]) -> None:
        """Compiles of a precompiled phase: counted as in the loop, said once, or the call stops."""
        self._precompiler.compiled(phase, records)

    # ------------------------------------------------------------ error containment (guards.py calls these)

    def disable_after_error(self, error: BaseException) -> None:
        """An internal error: log it once, stop observing, give back everything changed."""
        self._containment.disable(error)

    def callback_failed(self) -> None:
        """A callback of the watched call raised, or the call is gone without its end hook: clean up."""
        self._containment.callback_failed()

    @_hook
    def call_ended_everywhere(self) -> None:
        """Every callback's end hook of the watched call ran: say what is due (the summary)."""
        self._lifecycle.say_summary()

    def release_at_exit(self) -> None:
        """At interpreter exit: free the profiler, restore the flags, flush what is held."""
        self._containment.release_at_exit()


def _missing_profile_tab() -> Optional[str]:
    from xla_keras.core.versions import profile_tab_install, profile_tab_installed

    return None if profile_tab_installed() else profile_tab_install()
