"""XlaMonitor: the Keras hooks. Wires the parts together, holds no analysis.

How it observes (DESIGN §1): in ``on_train_begin`` (``on_test_begin``,
``on_predict_begin``) it replaces ``model.train_function`` with a wrapper that
pulls the step's batches from the tf.data iterator itself, reads their shapes
(Python attribute reads, no device sync) and hands Keras the batches as a
list, which Keras runs through the same jitted ``one_step_on_data``. A batch
whose signature is new to that function is a compile step: the wrapper runs
it under an in-memory profiler probe and takes the compile time from the XLA
compiler's events. Everything else is appends and counters.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import tempfile
import time
import traceback
import warnings
import weakref
from typing import Any, Dict, List, Optional

import keras

from . import _internals
from .arguments import directory, integer
from .cache import CompileTimes, cache_entries, model_key
from .compiles import (
    CompileLedger,
    cache_loads_from_trace,
    compile_seconds_from_trace,
    has_compiler_events,
    step_kernel_seconds,
    xla_compile_op_seconds,
)
from .jit import JitController, JitState, XlaKerasWarning, persistent_cache
from .multiworker import cluster_from_env, keras_fit_problem
from .report import MEASURED, PHASES, Compilation, SlowStep, XlaReport
from .signatures import describe, is_ragged, signature_of
from .storms import (
    ON_STORM,
    RecompilationStormError,
    ShapeHistory,
    Storm,
    StormDetector,
    analyse,
    batch_rows,
    partial_batch_note,
    storm_text,
    train_vs_validation_note,
)
from .tensorboard import (
    TAG_COMPILATIONS,
    TAG_COMPILE_TIME,
    TAG_DISTINCT_SIGNATURES,
    TAG_REPORT,
    TAG_STEADY_STEP_TIME,
    TAG_STEP_TIME,
    TAG_STORM,
    SummaryWriters,
    write_report_json,
)
from .timing import PhaseTiming, share

logger = logging.getLogger("xla_keras")

UPDATE_FREQS = ("epoch", "batch")
_FLUSH_EVERY_SECONDS = 5.0
# Auto-clustering compiles a new signature of an already-run cluster only on
# its second request (lazy compilation): probe the first few occurrences.
_AUTOCLUSTER_PROBES = 3
# XLA also keys its cache on the values of compile-time constant arguments: a
# model that needs ragged row splits as constants compiles per split values.
# Known ragged batches are probed until this many in a row compiled nothing.
_RAGGED_PROBE_MISSES = 8
# Measured on TF 2.21 with two local workers: stopping a profiler session in
# a MultiWorkerMirroredStrategy worker aborts the process ("double free or
# corruption", in ProfilerSession.stop) in about 1 run in 4; never seen without
# a strategy or under MirroredStrategy.
_MULTI_WORKER_PROFILER = (
    "under MultiWorkerMirroredStrategy the monitor does not start the profiler (TensorFlow 2.21 aborted the "
    "worker process when a profiling session stopped, about 1 run in 4 in our tests): new input signatures are "
    "counted as compiles and their seconds estimated from step time; auto-clustering's modules are not counted "
    "one by one, and automatic traces are off (profile=(start, stop) still traces, at that risk)")


def _blind_note(how: str) -> str:
    return (f"TensorFlow {_internals.versions()['tensorflow']}'s XLA compiler emits no profiler events here ({how}): "
            "compile seconds are the profiler's span of the op that triggered each compile (the step function's "
            "kernel under jit_compile=True, each cluster's _XlaCompile op under auto-clustering; "
            "source='op_span', within a few % of TensorFlow's own compile-time lines), counts come from new input "
            "signatures (jit on) or compiling _XlaCompile ops (auto-clustering)")


_FUNCTION_ATTR = {"train": "train_function", "test": "test_function", "predict": "predict_function"}
_MAKE_FUNCTION = {"train": "make_train_function", "test": "make_test_function",
                  "predict": "make_predict_function"}


class LogDirError(OSError):
    """The log_dir cannot be written: the user's error, raised before the first step."""


def _guarded(method):
    """The monitor never kills training by accident: an error of its own is
    logged once, the monitor disables itself and training goes on. Only a
    storm with on_storm="raise" stops a fit, by design."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if not self._enabled:
            return None
        try:
            return method(self, *args, **kwargs)
        except (RecompilationStormError, LogDirError):
            raise
        except Exception as error:  # noqa: BLE001 - by design, see docstring
            self._disable(error)
            return None

    return run


class _PhaseState:
    """Per-phase bookkeeping for the step path: counters and bounded buffers."""

    def __init__(self, max_records: int):
        self.timing = PhaseTiming()
        self.history = ShapeHistory()
        self.step = 0                 # global 1-based step of the last batch run
        self.steps_run = 0            # batches run under the monitor
        self.call_start = 0.0
        self.call_batches = 0
        self.call_new: List[tuple] = []      # (step, signature) new to the function
        self.call_modules: Optional[List[float]] = None  # probe result, None = not probed
        self.call_loads: List[float] = []  # persistent-cache loads seen by the probe
        self.call_source = "profiler"  # how the probe measured call_modules: "profiler" or "op_span"
        self.call_cached: Optional[bool] = False  # whether call_modules were cache loads (None: unknown)
        self.cache_entries_before: Optional[int] = None  # persistent-cache entries when the probe started
        self.call_probe_sig: Optional[tuple] = None
        self.call_traced = False
        self.tracing_before: Optional[int] = None
        self.call_signature: Optional[tuple] = None
        self.call_profiled = False
        self.last_new_step = 0
        self.pending_storm: Optional[tuple] = None  # (step, count, window_start)
        self.deferred_new: Optional[int] = None  # step of a smaller new batch, maybe the last
        self.usual_rows: Optional[int] = None
        self.compile_count = 0
        self.ragged_probe = False     # this call probes a known ragged signature
        self.ragged_misses = 0        # such probes in a row that saw no compile
        self.ragged_fps: set = set()  # fingerprints of ragged signatures
        self.value_compiles = 0       # compiles of known ragged shapes (new split values)
        self.profiler_seconds = 0.0
        self.timing_step_share = 0.0  # sum of step_seconds / call_compiles
        self.timing_batch_share = 0.0  # sum of call_batches / call_compiles
        self.records: List[Compilation] = []
        self.records_dropped = 0
        self.max_records = max_records
        self.slow: List[SlowStep] = []
        self.slow_count = 0
        self.epoch_steady_sum = 0.0
        self.epoch_steady_n = 0

    def add_record(self, record: Compilation) -> None:
        self.compile_count += 1
        if record.source in MEASURED:
            self.profiler_seconds += record.seconds
        else:
            self.timing_step_share += (record.step_seconds or 0.0) / record.call_compiles
            self.timing_batch_share += record.call_batches / record.call_compiles
        if len(self.records) < self.max_records:
            self.records.append(record)
        else:
            self.records_dropped += 1

    def compile_seconds(self) -> float:
        """Exact total; timing estimates use the final steady median."""
        median = self.timing.median_seconds or 0.0
        return self.profiler_seconds + max(0.0, self.timing_step_share - median * self.timing_batch_share)


class XlaMonitor(keras.callbacks.Callback):
    """Tells whether XLA really ran in `fit`, what compiled and what it cost.

    Args:
        log_dir: where TensorBoard runs (``train``, ``validation``) and
            ``xla_report.json`` go; ``None`` writes no files and keeps the
            report in memory only.
        jit: ``"keep"`` (leave the model's jit_compile alone and report the
            truth), ``"on"`` (``jit_compile=True``), ``"off"``, or
            ``"autoclustering"`` (TensorFlow picks clusters; on CPU it needs
            the early opt-in ``xla_keras.configure(cpu_autoclustering=True)``).
            The choice is applied to the model like ``compile(jit_compile=...)``
            and stays with it; global flags are restored when the fit ends.
        storm_threshold: new input signatures (the first one included) within
            ``storm_window`` steps of one phase that make a recompilation storm.
        storm_window: the window, in steps of that phase.
        on_storm: ``"warn"`` (one warning per storm), ``"raise"``
            (``RecompilationStormError``: the fit stops, files are flushed) or
            ``"fallback"`` (switch this fit to non-XLA at once and go on).
        update_freq: ``"epoch"``, ``"batch"`` or an int N: how often the
            ``xla/step_time_ms`` scalar is written (compile events are written
            at the step they happened, whatever this says).
        verbose: 0 silent, 1 prints the XLA status at the start and the
            report at the end of each fit.
        max_records: cap on detailed compile and slow-step records kept per
            phase; counts and totals stay exact beyond it.

    Example:

    ```python
    monitor = xla_keras.XlaMonitor(log_dir="logs/xla", jit="on")
    model.fit(x, y, epochs=3, validation_split=0.2, callbacks=[monitor])
    print(monitor.report)                  # human summary
    monitor.report.to_dict()               # JSON-able
    ```
    """

    def __init__(self, log_dir: Optional[str] = "logs/xla", jit: str = "keep",
                 storm_threshold: int = 8, storm_window: int = 200, on_storm: str = "warn",
                 profile: Any = "auto", update_freq: Any = "epoch", verbose: int = 1, max_records: int = 1000):
        backend = keras.backend.backend()
        if backend != "tensorflow":
            raise RuntimeError(
                f"xla_keras.XlaMonitor needs Keras's TensorFlow backend, but Keras runs the {backend!r} backend "
                f"here (KERAS_BACKEND={os.environ.get('KERAS_BACKEND', '(unset)')}): XLA under jit_compile, the "
                "tf.function step and the TensorFlow profiler it reads are TensorFlow's. Set "
                "KERAS_BACKEND=tensorflow before keras is first imported.")
        super().__init__()
        log_dir = directory(log_dir, "log_dir")
        if integer(update_freq) is not None:
            update_freq = integer(update_freq)
        if not (isinstance(update_freq, str) and update_freq in UPDATE_FREQS
                or isinstance(update_freq, int) and not isinstance(update_freq, bool) and update_freq >= 1):
            raise ValueError(f"update_freq must be one of {', '.join(map(repr, UPDATE_FREQS))} "
                             f"or an int >= 1; got {update_freq!r}")
        if on_storm not in ON_STORM:
            raise ValueError(f"on_storm must be one of {', '.join(map(repr, ON_STORM))}; got {on_storm!r}")
        steps = (tuple(map(integer, profile)) if isinstance(profile, (tuple, list)) and len(profile) == 2
                 else (None, None))
        if not (isinstance(profile, str) and profile == "auto" or profile is None
                or (None not in steps and 1 <= steps[0] <= steps[1])):
            raise ValueError(f"profile must be 'auto', None or (start, stop) train steps with 1 <= start <= stop; "
                             f"got {profile!r}")
        if None not in steps:
            profile = steps
        if integer(verbose) not in (0, 1, 2):
            raise ValueError(f"verbose must be 0, 1 or 2; got {verbose!r}")
        if integer(max_records) is None or max_records < 1:
            raise ValueError(f"max_records must be an int >= 1; got {max_records!r}")
        verbose, max_records = integer(verbose), integer(max_records)
        self._detector = StormDetector(storm_threshold, storm_window)  # validates both
        self.log_dir = log_dir
        self.jit = jit
        self._jit = JitController(jit)  # validates jit, naming the choices
        self.storm_threshold = self._detector.threshold
        self.storm_window = self._detector.window
        self.on_storm = on_storm
        self.profile = profile
        self.update_freq = 1 if update_freq == "batch" else update_freq
        self.verbose = verbose
        self.max_records = max_records

        self._enabled = True
        self._refused: Optional[str] = None  # why this monitor cannot observe here (Keras version, model kind)
        self._active_probe = None
        self._writers: Optional[SummaryWriters] = None
        self._chief = True
        self._multi_worker = False
        self._call_token: Optional[object] = None  # the fit / evaluate / predict being watched
        self._observing = True  # False after an internal error under multi-worker (see _disable)
        self._in_fit = False
        self._last_activity = 0.0
        self._last_flush = 0.0
        self._wrapped: Dict[str, Any] = {}
        self._cache: Optional[dict] = None       # the persistent compilation cache, if any
        self._cache_times: Optional[CompileTimes] = None
        self._model_key = ""
        self._trace: Optional[dict] = None       # the trace window we opened, if any
        self._trace_plan: Dict[str, bool] = {}   # per fit: which windows are done / pending
        self._fit_first_step = 1
        # One report per model: a monitor handed a different model starts a new one
        # (its files in LOG_DIR/model_N) and keeps the earlier ones in `reports`.
        self._base_log_dir = log_dir
        self._model_ref: Optional[Any] = None
        self._earlier: List[XlaReport] = []
        self._new_report_state()
        self._jit.prepare_early()
        _warn_keras_multi_worker_fault()
        atexit.register(_flush_at_exit, weakref.ref(self))
        unsupported = _internals.keras_unsupported()
        if unsupported:
            self._refuse(unsupported)

    def _new_report_state(self) -> None:
        """Everything a report is made of, empty: at construction and when the
        monitor is handed a different model."""
        self._error: Optional[str] = None
        self._detector = StormDetector(self.storm_threshold, self.storm_window)
        self._phases: Dict[str, _PhaseState] = {p: _PhaseState(self.max_records) for p in PHASES}
        self._ledger = CompileLedger(probes_per_signature=_AUTOCLUSTER_PROBES)
        self._state = JitState(self.jit)
        self._storms: List[Storm] = []
        self._analysis_cache: Dict[str, tuple] = {}  # phase -> (key, analysis)
        self._fallback: Optional[dict] = None
        self._notes: List[str] = []
        self._noted = set()
        self._probe_busy = False
        self._probe_used = False
        # XLA's compiler emits no trace events here (TF 2.16/2.17 on CPU, or found
        # out at a compile the probe could not see): read the ops' spans instead.
        self._blind = False
        self._xla_ops_seen = False  # an _XlaCompile op ran in a probe: something was clustered
        self._segment_start: Optional[float] = None
        self._wall = 0.0
        self._rebuilds: Dict[str, int] = dict.fromkeys(PHASES, 0)  # step functions the user rebuilt
        self._forced: set = set()  # phases whose function the monitor itself dropped or rebuilt
        self._function_models: Dict[str, int] = {}  # id of the model each phase's function belongs to
        self._saved = 0.0
        self._saved_known = 0
        self._loads_unknown = 0
        self._traces: List[str] = []
        self._probe_knowledge = False  # _learn_probe ran for this report

    def _refuse(self, reason: str) -> None:
        """Step aside for good, with one warning: training goes on unmonitored."""
        self._refused = reason
        self._enabled = False
        warnings.warn(f"xla_keras: {reason}", XlaKerasWarning, stacklevel=3)

    def _watch(self, model: Any) -> bool:
        """At the start of each fit / evaluate / predict: False (and the
        monitor steps aside) for a model it cannot observe; a model other than
        the one the report is about starts a new report."""
        if not _internals.is_keras3_model(model):
            kind = f"{type(model).__module__}.{type(model).__qualname__}"
            self._refuse(
                f"XlaMonitor observes Keras 3 models, and this is a {kind} (tf_keras / TF_USE_LEGACY_KERAS=1, or "
                "Keras 2): its fit builds its step functions differently, so the monitor steps aside and the fit "
                "goes on unmonitored. Fix: build the model with Keras 3 (`import keras`, without "
                "TF_USE_LEGACY_KERAS=1)")
            return False
        known = self._model_ref() if self._model_ref is not None else None
        if self._model_ref is not None and known is not model:
            self._earlier.append(self.report)
            if self._writers is not None:
                self._writers.close()
                self._writers = None
            n = len(self._earlier) + 1
            self.log_dir = None if self._base_log_dir is None else os.path.join(self._base_log_dir, f"model_{n}")
            self._new_report_state()
            where = f"; its files go to {self.log_dir}" if self.log_dir else ""
            text = (f"this monitor now watches another model ({getattr(model, 'name', type(model).__name__)!r}): "
                    f"a new report starts (monitor.reports[{n - 1}]){where}; the earlier model's report is kept in "
                    f"monitor.reports[{n - 2}]")
            self._notes.append(text)
            if self.verbose:
                print(f"xla_keras: {text}")
        self._model_ref = weakref.ref(model)
        return True

    # tf_keras (TF_USE_LEGACY_KERAS=1) asks every callback these before any hook and fails on a
    # Keras 3 callback without them: answering lets its fit reach on_train_begin, where the
    # monitor says why it cannot watch that model and steps aside.
    def _implements_train_batch_hooks(self) -> bool:
        return self._enabled

    def _implements_test_batch_hooks(self) -> bool:
        return self._enabled

    def _implements_predict_batch_hooks(self) -> bool:
        return self._enabled

    @property
    def reports(self) -> List[XlaReport]:
        """One report per model this monitor watched, in order; the last one is
        ``report``. A re-compiled model is the same model."""
        return self._earlier + [self.report]

    # ------------------------------------------------------------------ hooks

    @_guarded
    def on_train_begin(self, logs=None):
        if self._in_fit:
            self._abort_fit()  # the previous fit was interrupted
        if not self._watch(self.model):
            return
        self._learn_probe()
        self._check_log_dir()  # before anything changes: raises LogDirError
        self._in_fit = True
        _guard_call_callbacks(self)
        self._begin_segment()
        self._stop_trace()  # a window an exception left open
        self._trace_plan = {"steady": False, "storm": False, "range": False, "storm_pending": False,
                            "keras_profiles": False}
        if self.profile == "auto" and _internals.keras_profile_windows(self.model):
            self._trace_plan["keras_profiles"] = True
            self._note_once("keras-profiles", "keras.callbacks.TensorBoard(profile_batch=...) profiles this fit: "
                            "the monitor's automatic traces stay out of its way")
        model = self.model
        self._distribution()
        self._fallback = None
        if self._jit.apply(model):
            # The auto-clustering switch changed: every function must be rebuilt.
            model.test_function = None
            model.predict_function = None
            model.make_train_function(force=True)
            self._forced.update(PHASES)
        self._install("train")
        self._read_back("train")
        self._setup_cache()
        optimizer = getattr(model, "optimizer", None)
        # One read per fit (not per step): the train step equals
        # optimizer.iterations after that step.
        self._phases["train"].step = int(optimizer.iterations.numpy()) if optimizer is not None else 0
        self._fit_first_step = self._phases["train"].step + 1
        self._phases["train"].last_new_step = self._phases["train"].step
        if isinstance(self.profile, tuple) and self.profile[1] < self._fit_first_step:
            self._note_once("range-behind", f"profile={self.profile} names train steps before this fit's first "
                            f"step ({self._fit_first_step}; steps count from optimizer.iterations, across fits): "
                            "nothing is traced", warn=True)
        if self.verbose:
            print(f"xla_keras: jit={self.jit!r} -> XLA {self._active_words()}: {self._state.reason}")
        elif self._jit.refusal and self.jit == "on":  # silent mode still hears that its request was refused
            warnings.warn(f"xla_keras: {self._jit.refusal}", XlaKerasWarning, stacklevel=2)

    @_guarded
    def on_train_batch_end(self, batch, logs=None):
        self._end_step("train")

    @_guarded
    def on_epoch_end(self, epoch, logs=None):
        phase = self._phases["train"]
        phase.history.end_of_run()
        phase.deferred_new = None  # it was the partial last batch of the epoch
        self._epoch_scalars("train")
        self._flush(text=True)

    @_guarded
    def on_train_end(self, logs=None):
        self._end_fit()
        self._finish()

    @_guarded
    def on_test_begin(self, logs=None):
        self._begin_phase("test")

    @_guarded
    def on_test_batch_end(self, batch, logs=None):
        self._end_step("test")

    @_guarded
    def on_test_end(self, logs=None):
        self._end_phase("test")

    @_guarded
    def on_predict_begin(self, logs=None):
        self._begin_phase("predict")

    @_guarded
    def on_predict_batch_end(self, batch, logs=None):
        self._end_step("predict")

    @_guarded
    def on_predict_end(self, logs=None):
        self._end_phase("predict")

    # ---------------------------------------------------------------- report

    @property
    def report(self) -> XlaReport:
        """The report so far (complete after the fit / evaluate / predict)."""
        report = XlaReport(jit_mode=self.jit)
        records: List[Compilation] = []
        total_compile = 0.0
        for name, phase in self._phases.items():
            median = phase.timing.median_seconds
            for record in phase.records:
                if record.source == "timing":
                    record.seconds = record.estimate_from(median)
            records.extend(phase.records)
            report.compilation_count[name] = phase.compile_count
            report.steps[name] = phase.steps_run
            report.steady_step_seconds_by_phase[name] = median
            total_compile += phase.compile_seconds()
            report.slow_steps.extend(phase.slow)
            report.slow_step_count += phase.slow_count
            report.compilations_dropped += phase.records_dropped
        report.compilations = sorted(records, key=lambda c: (PHASES.index(c.phase), c.step))
        report.distinct_signatures = self._ledger.distinct_signatures()
        report.steady_step_seconds = report.steady_step_seconds_by_phase["train"]
        report.compile_seconds = total_compile
        report.wall_seconds = self._wall + (time.perf_counter() - self._segment_start
                                            if self._segment_start is not None else 0.0)
        report.compile_share = share(total_compile, report.wall_seconds)
        report.jit_active, report.jit_reason = self._final_jit_state(report)
        if self._refused:
            report.jit_active, report.jit_reason = None, self._refused
        report.storms = [self._refreshed(storm) for storm in self._storms]
        report.fallback = dict(self._fallback) if self._fallback else None
        report.traces = list(self._traces)
        report.cache_saved_seconds = self._saved if self._saved_known else None
        report.probe = ("timing" if (self._probe_busy or self._multi_worker) and not self._probe_used else
                        "profiler+timing" if self._probe_busy else "profiler")
        report.notes = list(self._notes)
        for name, count in self._rebuilds.items():
            if count:
                report.notes.append(
                    f"{name}: the step function was rebuilt {count} time(s) outside the monitor (e.g. "
                    "model.compile(...)): a rebuilt function starts with an empty XLA compile cache, so shapes "
                    "compiled before compile again")
        for name, phase in self._phases.items():
            if phase.value_compiles:
                report.notes.append(
                    f"{name}: XLA compiled {phase.value_compiles} module(s) for ragged batches of shapes it had "
                    "compiled already: the model needs the row splits as compile-time constants (e.g. "
                    "tf.reduce_mean over the ragged axis), so XLA compiles per distinct row lengths, not per "
                    "shape. Fix: pad to dense batches (padded_batch, RaggedTensor.to_tensor) or compute from the "
                    "row splits with gathers")
        if self._cache and not self._cache["effective"]:
            report.notes.append(f"the persistent compilation cache at {self._cache['dir']} was configured too late "
                                "for this process (after TensorFlow read its flags): nothing is cached or loaded. "
                                "Fix: xla_keras.configure(cache_dir=...) right after import, before any model is "
                                "built, or TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR at start")
        if self._loads_unknown:
            report.notes.append(f"{self._loads_unknown} executable(s) came from the persistent cache with no fresh "
                                "compile time on record, so what they saved is not counted")
        storm_phases = {s.phase for s in self._storms}
        for name, phase in self._phases.items():
            note = partial_batch_note(name, phase.history) if name not in storm_phases else None
            if note and report.compilation_count[name]:
                report.notes.append(note)
        note = train_vs_validation_note(self._phases["train"].history, self._phases["test"].history)
        if note and report.compilation_count["test"]:
            report.notes.append(note)
        if self._error:
            report.notes.append(self._error)
        report.log_dir = self.log_dir if self._chief else None
        report.versions = _internals.versions()
        return report

    def _refreshed(self, storm: Storm) -> Storm:
        """A storm with its cause and fix recomputed from every shape the
        phase has seen so far (more data than at the moment it opened).
        Cached until the phase sees a new signature: reports are built at
        every flush."""
        history = self._phases[storm.phase].history
        # analyse depends only on the phase's distinct signatures and epoch ends.
        key = (len(history.signatures), history.runs)
        cached = self._analysis_cache.get(storm.phase)
        if cached is None or cached[0] != key:
            cached = self._analysis_cache[storm.phase] = (key, analyse(storm.phase, history, self.storm_threshold))
        varying, advice, fix = cached[1]
        return Storm(**{**storm.__dict__, "varying": varying, "advice": advice, "fix": fix})

    def _final_jit_state(self, report: XlaReport):
        state = self._state
        seen = sum(1 for c in report.compilations if c.source in MEASURED)
        if seen and not state.active and not state.autoclustering:
            # Never say XLA is off when the profiler saw it compile.
            if self._fallback:
                return False, f"{state.reason}; XLA compiled {seen} module(s) before the switch"
            return True, (f"{state.reason}; but the profiler saw XLA compile {seen} module(s): something "
                          "else enabled XLA (e.g. TF_XLA_FLAGS=--tf_xla_auto_jit)")
        if not state.autoclustering:
            return state.active, state.reason
        # Auto-clustering: only compiles actually seen prove that XLA ran.
        compiled = report.total_compilations
        if compiled and seen:
            return True, f"{state.reason}; {compiled} cluster module(s) compiled (seen by the profiler)"
        if self._multi_worker and not self._probe_used:
            return None, (f"{state.reason}; not verified: the profiler stays off under "
                          "MultiWorkerMirroredStrategy (see notes)")
        if self._probe_busy and not self._probe_used:
            return None, f"{state.reason}; not verified: the profiler was busy"
        if self._blind:
            # No compiler events to read, and no _XlaCompile op compiled in a probed step: that may be
            # lazy compilation or a cluster the probes missed, not proof that nothing compiled.
            return None, (f"{state.reason}; not verified: TensorFlow {_internals.versions()['tensorflow']}'s XLA "
                          "compiler emits no profiler events here, and no cluster's _XlaCompile op compiled in a "
                          "probed step" + (" (clusters did run)" if self._xla_ops_seen else ""))
        if sum(report.steps.values()):
            return False, (f"{state.reason}, but no cluster compiled: TensorFlow found nothing worth "
                           "clustering, or the CPU global-jit flag was set after TensorFlow created "
                           "its devices")
        return None, state.reason

    def _distribution(self) -> None:
        """Chief-ness (only the chief writes files) and multi-worker-ness."""
        facts = _internals.strategy_facts(self.model)
        self._chief = facts["chief"]
        self._multi_worker = facts["multi_worker"]
        if self._multi_worker:
            self._note_once("multi-worker-probe", _MULTI_WORKER_PROFILER)
        if self._multi_worker and self.on_storm != "warn":
            self._note_once("multi-worker-storm", (
                f"on_storm={self.on_storm!r} acts as 'warn' under {facts['name']}: each worker sees its own "
                "shard of the data, so a storm can open on one worker only, and stopping or switching XLA "
                "off there alone would leave the other workers waiting in a collective (a hang)"), warn=True)

    def _storm_action(self) -> str:
        return "warn" if self._multi_worker else self.on_storm

    def _xla_expected(self) -> bool:
        """Whether a new signature should count as a compile (and a storm step)."""
        return bool(self._state.active or self._state.autoclustering)

    def _active_words(self) -> str:
        return {True: "ON", False: "OFF", None: "pending (auto-clustering: compiles will tell)"}[
            self._state.active]

    def _read_back(self, phase: str) -> None:
        fn = _internals.unwrap(getattr(self.model, _FUNCTION_ATTR[phase]))
        self._state = self._jit.read_back(self.model, _internals.find_step_function(fn))

    # ------------------------------------------------------------- wrapping

    def _begin_phase(self, phase: str) -> None:
        if self._in_fit and _internals.running_fit(self.model) is None:
            self._abort_fit()  # an exception ended the last fit before on_train_end
        if self._in_fit and self._trace is not None:
            # A train window ends where validation begins (validation's steps are
            # probed, not traced); the user's own range resumes after it.
            kind, stop = self._trace["kind"], self._trace["stop_step"]
            self._stop_trace()
            if kind == "range" and self._phases["train"].step < stop:
                self._trace_plan["range"] = False
                self._note_once("range-split", f"profile={self.profile}: validation ran inside the range, so "
                                "its trace is split in two sessions (validation steps are not traced)")
        if not self._in_fit:
            if not self._watch(self.model):
                return
            self._learn_probe()
            self._check_log_dir()
            _guard_call_callbacks(self)
            self._begin_segment()
            self._distribution()
            if self._jit.apply(self.model):
                setattr(self.model, _FUNCTION_ATTR[phase], None)
                self._forced.add(phase)
        self._install(phase)
        if not self._in_fit:
            self._read_back(phase)
            self._setup_cache()

    def _end_phase(self, phase: str) -> None:
        self._phases[phase].history.end_of_run()
        self._phases[phase].deferred_new = None
        self._epoch_scalars(phase)
        self._remove(phase)
        if not self._in_fit:
            self._restore_model()
            self._end_segment()
            self._finish()

    def _check_log_dir(self) -> None:
        """A log_dir that cannot be written fails the fit here, before the
        first step, naming the path (not mid-epoch, not only in a log).
        Under MultiWorkerMirroredStrategy only the chief writes, and failing
        the chief alone would leave the other workers in a collective: there
        the chief warns and writes nothing instead."""
        facts = _internals.strategy_facts(self.model)
        if self.log_dir is None or not facts["chief"]:
            return  # only the chief writes files
        try:
            os.makedirs(self.log_dir, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".xla_keras_write_test.", dir=self.log_dir)
            os.close(fd)
            os.unlink(probe)
        except OSError as error:
            text = f"XlaMonitor cannot write to log_dir={self.log_dir!r}: {error.strerror or error}"
            if facts["multi_worker"]:
                self._note_once("log-dir", f"{text}; under {facts['name']} the fit goes on on every worker and "
                                "the monitor writes no files (its report stays in memory)")
                warnings.warn(text + ": no files are written", XlaKerasWarning, stacklevel=2)
                self.log_dir = None
                return
            raise LogDirError(error.errno, f"{text}. Pass a writable directory, or log_dir=None "
                              "to keep the report in memory only") from error

    def _on_callback_error(self) -> None:
        """A callback of this fit / evaluate / predict raised (or a Ctrl-C
        landed in one), or the call is gone without its end hook: count the
        step that ran, give the profiler and the flags back, remove the
        wrappers and flush, never masking the error."""
        if not self._enabled or not (self._in_fit or self._wrapped):
            return
        try:
            for phase in list(self._wrapped):
                if self._phases[phase].call_batches:
                    self._end_step(phase)  # our batch end was not reached
            if self._in_fit:
                self._abort_fit()
                return
            self._stop_trace()
            self._unwrap_all()
            self._restore_model()
            self._end_segment(at=self._last_activity)
            self._flush(text=True)
        except Exception as error:  # noqa: BLE001 - never mask the user's error
            logger.error("xla_keras: cleanup after a failed callback failed too: %r", error)

    def _end_fit(self, at: Optional[float] = None) -> None:
        self._stop_trace()
        self._unwrap_all()
        self._restore_model()
        self._in_fit = False
        self._end_segment(at)

    def _abort_fit(self) -> None:
        """Clean up after a fit that ended by an exception: on_train_end never ran."""
        self._end_fit(at=self._last_activity)
        self._flush(text=True)

    def _restore_model(self) -> None:
        if self._jit.restore(self.model):
            # A storm fallback switched the model off for that fit only: its
            # step functions must be rebuilt with the user's own setting. In
            # place, never None: this can run while a call is still using them
            # (an internal error mid-fit, a cleanup from the garbage collector),
            # and Keras looks its function up at every step. Tracing is lazy.
            for phase, attr in _FUNCTION_ATTR.items():
                if getattr(self.model, attr, None) is not None:
                    getattr(self.model, _MAKE_FUNCTION[phase])(force=True)
            self._forced.update(PHASES)

    def _chain(self, phase: str) -> tuple:
        """(live wrappers of other monitors, top to bottom; Keras's function)."""
        fn = getattr(self.model, _FUNCTION_ATTR[phase], None)
        keep = []
        while fn is not None and hasattr(fn, "_xla_keras_original"):
            owner = fn._xla_keras_owner()
            # Another monitor of this same fit / evaluate / predict call (Keras
            # hands one params dict to every callback of a call): chain onto
            # it. Anything else is a leftover of an interrupted call: drop it.
            if (owner is not None and owner is not self and owner._wrapped.get(phase) is fn
                    and owner.params is not None and owner.params is self.params):
                keep.append(fn)
            fn = fn._xla_keras_original
        return keep, fn

    def _relink(self, phase: str, wrappers: list, base: Any) -> None:
        for upper, lower in zip(wrappers, wrappers[1:] + [base]):
            upper._xla_keras_original = lower
        setattr(self.model, _FUNCTION_ATTR[phase], wrappers[0] if wrappers else base)

    def _install(self, phase: str, rebuild: bool = False) -> None:
        model = self.model
        attr = _FUNCTION_ATTR[phase]
        others, original = self._chain(phase)  # drops our own leftovers and dead ones
        step_fn = _internals.find_step_function(original) if original is not None else None
        mismatch = (self.jit != "keep" and not model.run_eagerly
                    and _internals.function_jit_flag(step_fn) != bool(model.jit_compile))
        # Replaced since this phase last ran, and not by us (e.g. model.compile(...)), on the same model:
        # known shapes compile again, and the report should say why.
        replaced = (self._function_models.get(phase) == id(model) and phase not in self._forced
                    and self._ledger.function(phase) is not step_fn)
        self._forced.discard(phase)
        self._function_models[phase] = id(model)
        if original is None or rebuild or mismatch:
            getattr(model, _MAKE_FUNCTION[phase])(force=True)
            original = getattr(model, attr)
            step_fn = _internals.find_step_function(original)
        xla_now = _internals.function_jit_flag(step_fn) or _internals.autoclustering_enabled()
        if self._ledger.set_function(phase, step_fn) and replaced and not rebuild and xla_now:
            self._rebuilds[phase] += 1
        wrapper = _internals.wrap_marker(self._make_wrapper(phase, step_fn), original, weakref.ref(self))
        self._wrapped[phase] = wrapper
        self._relink(phase, [wrapper] + others, original)

    def _remove(self, phase: str) -> None:
        if self._wrapped.pop(phase, None) is not None:
            others, base = self._chain(phase)
            self._relink(phase, others, base)

    def _unwrap_all(self) -> None:
        for phase in list(self._wrapped):
            self._remove(phase)

    def _make_wrapper(self, phase: str, step_fn: Any):
        state = self._phases[phase]
        iterator_types = _internals.data_iterator_types()
        distributed_type = iterator_types[-1]
        pulls = phase != "predict"  # predict_function already receives a list of batches

        def pull(data):
            count = self.model.steps_per_execution
            if not isinstance(data, distributed_type):
                return _pull(data, count)
            return _pull(data, count, _graph_next())

        def wrapped(data):
            original = wrapped._xla_keras_original  # relinked when monitors come and go
            if not self._enabled:
                return original(data)
            state.call_start = time.perf_counter()
            state.call_new = []  # this call's: a failed pull must not forget the last step's
            probe = None
            try:
                if pulls and isinstance(data, iterator_types):
                    batches = pull(data)
                elif isinstance(data, list):
                    batches = data
                else:  # e.g. train_on_batch's generator: run as Keras would, unobserved
                    state.call_batches = 0
                    return original(data)
                probe = self._before_call(phase, state, batches, step_fn)
                outputs = original(batches)
            except StopIteration:
                raise  # the end of an epoch, not an error
            except BaseException:
                self._on_step_error(phase, probe)
                raise
            self._after_call(phase, state, probe, step_fn)
            return outputs

        return wrapped

    def _on_step_error(self, phase: str, probe) -> None:
        """The model raised (or Ctrl-C): the fit or evaluate is over. Give the
        profiler back, put the flags back and flush, without ever replacing
        the user's exception with one of ours."""
        try:
            self._abandon_probe(probe)
            state = self._phases[phase]
            for _, sig in state.call_new:
                # The step did not finish: whether XLA compiled is unknown, so the
                # signature is new again (a probe of its next step will tell).
                self._ledger.forget(phase, sig)
            state.call_new = []
            self._stop_trace()
            text = self._in_fit
            if self._in_fit or phase != "train":
                if self._in_fit:
                    self._end_fit()
                else:
                    self._remove(phase)
                    self._restore_model()
                    self._end_segment()
            self._flush(text=text)
        except Exception as error:  # noqa: BLE001 - never mask the step's own error
            logger.error("xla_keras: cleanup after a failed step failed too: %r", error)

    @_guarded
    def _before_call(self, phase: str, state: _PhaseState, batches: list, step_fn: Any):
        if not self._observing:
            return None
        unwrap = _internals.unwrap_distributed
        state.call_batches = len(batches)
        state.call_new = []
        state.call_probe_sig = None
        state.call_modules = None
        state.ragged_probe = False
        expected = self._xla_expected()
        probe_wanted = False
        for i, batch in enumerate(batches):
            step = state.step + i + 1
            if state.deferred_new is not None:  # it was not the last batch: count it now
                self._count_new(phase, state, state.deferred_new)
                state.deferred_new = None
            sig = signature_of(batch, unwrap)
            state.history.observe(sig)
            is_new, worth_probe = self._ledger.observe(phase, sig)
            fp = self._ledger.last_fingerprint
            if is_new:
                state.call_new.append((step, sig))
                state.last_new_step = step
                if is_ragged(sig):
                    state.ragged_fps.add(fp)  # bounded by the distinct signatures
                # A shape seen before, new only to a rebuilt function (model.compile),
                # compiles again but is no sign of varying shapes: not a storm step.
                if expected and not self._ledger.last_known:
                    rows = batch_rows(sig)
                    if state.usual_rows is None:
                        state.usual_rows = rows
                    if rows is not None and state.usual_rows is not None and rows < state.usual_rows:
                        # Maybe the partial last batch of the epoch, which is no storm by
                        # itself: it counts only if another batch follows in the same run.
                        state.deferred_new = step
                    else:
                        self._count_new(phase, state, step)
            if worth_probe and (is_new or self._state.autoclustering):
                probe_wanted = True
                state.call_probe_sig = state.call_probe_sig or (step, sig)
            elif self._state.active and state.ragged_misses < _RAGGED_PROBE_MISSES and fp in state.ragged_fps:
                probe_wanted = state.ragged_probe = True  # maybe new split values (_RAGGED_PROBE_MISSES)
                state.call_probe_sig = state.call_probe_sig or (step, sig)
            state.call_signature = sig
        state.call_traced = False
        state.call_profiled = self._maybe_start_trace(phase, state, len(batches))
        if state.call_profiled:
            if probe_wanted and expected:
                self._note_once("trace-window", "compile times of steps inside a profiler trace window are "
                                "estimated from step time (the profiler was writing the trace)")
            return None
        if not probe_wanted or self._multi_worker:  # see _MULTI_WORKER_PROFILER
            return None
        state.tracing_before = _internals.tracing_count(step_fn)  # did this step also trace?
        if self._cache and self._cache["effective"] and (self._blind or self._state.active):
            # A cache load shows no compiler event either: a fresh compile is the one that adds an entry.
            state.cache_entries_before = cache_entries(self._cache["dir"])
        try:
            session = _internals.start_probe()
        except _internals.ProfilerBusy:
            self._probe_busy = True
            self._note_once("profiler-busy",
                            "the profiler was busy (another profiling session, e.g. "
                            "keras.callbacks.TensorBoard(profile_batch=...)): some compile times are "
                            "estimated from step time minus the steady median")
            return None
        self._active_probe = session
        return session

    def _count_new(self, phase: str, state: _PhaseState, step: int) -> None:
        opened = self._detector.new_signature(phase, step)
        if opened is not None and state.pending_storm is None:
            state.pending_storm = (step, *opened)

    def _abandon_probe(self, session) -> None:
        if session is not None and self._active_probe is session:
            self._active_probe = None
            _internals.abandon_probe(session)

    @_guarded
    def _after_call(self, phase: str, state: _PhaseState, session, step_fn: Any):
        if session is None:
            return
        try:
            events = _internals.stop_probe(session)
        finally:
            self._active_probe = None
        self._probe_used = True
        state.call_source, state.call_cached = "profiler", False
        state.call_loads = []
        modules = compile_seconds_from_trace(events)
        fresh = self._new_cache_entries(state)  # None: no cache to tell a compile from a load
        if (not modules and not self._blind and state.call_new and self._state.active and fresh != 0
                and not has_compiler_events(events)):
            # jit_compile=True and an input signature new to the function: XLA must have compiled
            # (a cache load writes no cache entry), yet its compiler left no event.
            self._blind = True
            self._note_once("blind-probe", _blind_note("no XLA compiler event appeared in the probe of a step "
                                                       "that compiled"))
        if not modules and self._blind:
            modules = self._op_span_compiles(events, state)  # None: cannot tell, timing decides
            state.call_source = "op_span"
            if modules and fresh is not None:
                # Fresh compiles write cache entries; loads do not. Mixed: cannot tell which is which.
                state.call_cached = True if fresh == 0 else False if fresh >= len(modules) else None
        elif not modules and state.call_new and self._cache and self._cache["effective"]:
            state.call_loads = cache_loads_from_trace(events)
        state.call_modules = modules
        after = _internals.tracing_count(step_fn)
        state.call_traced = after is not None and after != state.tracing_before

    def _op_span_compiles(self, events, state: _PhaseState) -> Optional[List[float]]:
        """Compiles read from the spans of the ops that triggered them, when
        XLA's compiler emits no trace events (see compiles.step_kernel_seconds)."""
        if self._state.active:
            # jit_compile=True: one kernel per batch, and each batch new to the function compiled in its own.
            kernels = step_kernel_seconds(events)
            if len(kernels) != state.call_batches:
                return None  # cannot map kernels to batches: step timing estimates these compiles
            first = state.step + 1
            return [kernels[step - first] for step, _ in state.call_new]
        compiled, ops = xla_compile_op_seconds(events)
        self._xla_ops_seen = self._xla_ops_seen or ops > 0
        return compiled

    def _new_cache_entries(self, state: _PhaseState) -> Optional[int]:
        before, state.cache_entries_before = state.cache_entries_before, None
        if before is None:
            return None
        return max(0, cache_entries(self._cache["dir"]) - before)

    def _learn_probe(self) -> None:
        """Once per report: whether this TensorFlow's XLA compiler is known to
        emit no trace events (the probe then reads op spans from the start)."""
        if self._probe_knowledge:
            return
        self._probe_knowledge = True
        if _internals.profiler_sees_xla_compiler() is False:
            self._blind = True
            self._note_once("blind-probe", _blind_note("known for this version on CPU"))

    # ------------------------------------------------------------ step end

    def _end_step(self, phase: str) -> None:
        state = self._phases[phase]
        n = state.call_batches
        if not n:
            return
        now = time.perf_counter()
        seconds = now - state.call_start
        self._last_activity = now
        state.call_batches = 0
        state.steps_run += n
        first_step = state.step + 1
        state.step += n
        if state.call_modules is not None:
            self._record_probed(phase, state, seconds, n)
        elif state.call_new and self._xla_expected():
            m = len(state.call_new)
            for step, sig in state.call_new:
                record = Compilation(phase, step, sig, 0.0, "timing", step_seconds=seconds,
                                     traced=state.call_traced, call_batches=n, call_compiles=m)
                record.seconds = record.estimate_from(state.timing.median_seconds)
                self._record(phase, record)
        elif not state.call_new and not state.call_profiled:
            per_step = seconds / n
            if state.timing.is_slow(per_step):
                state.slow_count += 1
                if len(state.slow) < state.max_records:
                    state.slow.append(SlowStep(phase, first_step, per_step,
                                               state.timing.median_seconds, state.call_signature))
            else:
                state.timing.add_steady(per_step)
                state.epoch_steady_sum += per_step
                state.epoch_steady_n += 1
                if isinstance(self.update_freq, int) and state.step % self.update_freq < n:
                    self._scalar(phase, TAG_STEP_TIME, 1e3 * per_step, state.step)
        if state.call_new:
            self._scalar(phase, TAG_DISTINCT_SIGNATURES, self._ledger.distinct_count(phase), state.step)
        if self._trace is not None and phase == "train" and state.step >= self._trace["stop_step"]:
            self._stop_trace()
        if state.pending_storm is not None:
            pending, state.pending_storm = state.pending_storm, None
            self._storm(phase, *pending)
        if now - self._last_flush > _FLUSH_EVERY_SECONDS:
            self._flush()

    def _record_probed(self, phase: str, state: _PhaseState, seconds: float, n: int) -> None:
        modules, loads = state.call_modules, state.call_loads
        state.call_modules, state.call_loads = None, []
        owners = state.call_new or ([state.call_probe_sig] if state.call_probe_sig else [])
        ragged_only = state.ragged_probe and not state.call_new
        if not modules and not loads:
            if ragged_only:
                state.ragged_misses += 1
            return  # the probe saw no compile: nothing compiled (e.g. a lazy cluster)
        if ragged_only:
            state.ragged_misses = 0
            state.value_compiles += len(modules or loads)
        cached = state.call_cached if modules else True
        source = state.call_source if modules else "profiler"
        for i, module_seconds in enumerate(modules or loads):
            step, sig = owners[min(i, len(owners) - 1)]
            self._record(phase, Compilation(phase, step, sig, module_seconds, source, cached=cached,
                                            step_seconds=seconds, traced=state.call_traced,
                                            call_batches=n, call_compiles=len(modules or loads)))
            self._cache_account(phase, sig, i, module_seconds, cached)

    def _setup_cache(self) -> None:
        self._cache = persistent_cache()
        self._cache_times = None
        if self._cache and self._cache["effective"]:
            self._cache_times = CompileTimes(self._cache["dir"])
            self._model_key = model_key(self.model)

    def _cache_account(self, phase: str, sig: tuple, index: int, seconds: float, cached: Optional[bool]) -> None:
        """Fresh compiles are remembered in the cache dir; a load is credited
        with what the same module cost when it was compiled fresh."""
        if self._cache_times is None:
            return
        key = f"{self._model_key}|{phase}|{self.jit}|{describe(sig)}|{index}"
        if cached is False:
            self._cache_times.put(key, seconds)
            return
        if cached is None:
            return  # a fresh compile or a load: unknown (see _after_call)
        fresh = self._cache_times.get(key)
        if fresh is None:
            self._loads_unknown += 1
        else:
            self._saved += max(0.0, fresh - seconds)
            self._saved_known += 1

    def _record(self, phase: str, record: Compilation) -> None:
        state = self._phases[phase]
        state.add_record(record)
        self._scalar(phase, TAG_COMPILE_TIME, 1e3 * record.seconds, record.step)
        self._scalar(phase, TAG_COMPILATIONS, state.compile_count, record.step)
        # Events at once; the JSON report too, at most once a second (storms compile a lot).
        self._flush(files_only=time.perf_counter() - self._last_flush < 1.0)

    # ---------------------------------------------------------------- storms

    def _storm(self, phase: str, step: int, count: int, window_start: int) -> None:
        state = self._phases[phase]
        varying, advice, fix = analyse(phase, state.history, self.storm_threshold)
        storm = Storm(phase, step, count, varying, advice, fix, compiles=state.compile_count,
                      compile_seconds=state.compile_seconds(),
                      steady_step_seconds=state.timing.median_seconds, window_start=window_start,
                      action=self._storm_action())
        self._storms.append(storm)
        self._scalar(phase, TAG_STORM, 1.0, step)
        if self.profile == "auto" and not self._trace_plan.get("storm"):
            self._trace_plan["storm_pending"] = True  # trace the next recompiling train step
        text = storm_text(storm, self.storm_window)
        if storm.action == "raise":
            if self._in_fit:
                self._end_fit()
                self._finish()  # flushes and closes every file before the fit stops
            else:
                self._end_phase(phase)
            raise RecompilationStormError(text)
        if storm.action == "fallback":
            self._fall_back(phase, step, text)
            text += (f" on_storm='fallback': XLA is now off for the rest of this "
                     f"{'fit' if self._in_fit else _run_word(phase)}.")
        warnings.warn(text, XlaKerasWarning, stacklevel=2)  # once: the warning is the message
        self._flush()

    def _fall_back(self, phase: str, step: int, storm_text_: str) -> None:
        reason = (f"switched XLA off at {phase} step {step} after a recompilation storm "
                  f"(on_storm='fallback')")
        self._jit.fall_back(self.model, reason)
        self._fallback = {"phase": phase, "step": step, "reason": reason}
        for name in PHASES:
            if name in self._wrapped:
                self._install(name, rebuild=True)  # the non-XLA function, wrapped again
            else:
                setattr(self.model, _FUNCTION_ATTR[name], None)  # rebuilt lazily, non-XLA
                self._forced.add(name)
        self._read_back(phase)

    # ---------------------------------------------------------------- output

    def _out(self) -> Optional[SummaryWriters]:
        """The writers (created on first use, with the custom-scalars layout), or
        None when this monitor writes no files (no log_dir, or not the chief)."""
        if self.log_dir is None or not self._chief:
            return None
        if self._writers is None:
            self._writers = SummaryWriters(self.log_dir)
            self._writers.layout()
        return self._writers

    def _scalar(self, phase: str, tag: str, value: float, step: int) -> None:
        writers = self._out()
        if writers is not None:
            writers.scalar(phase, tag, value, step)

    def _epoch_scalars(self, phase: str) -> None:
        """End of an epoch (train) or of a validation run (test)."""
        state = self._phases[phase]
        if self.update_freq == "epoch" and state.epoch_steady_n:
            self._scalar(phase, TAG_STEP_TIME, 1e3 * state.epoch_steady_sum / state.epoch_steady_n, state.step)
        median = state.timing.median_seconds
        if median is not None:
            self._scalar(phase, TAG_STEADY_STEP_TIME, 1e3 * median, state.step)
        state.epoch_steady_sum, state.epoch_steady_n = 0.0, 0

    def _flush(self, files_only: bool = False, text: bool = False) -> None:
        self._last_flush = time.perf_counter()
        if not files_only and self.log_dir is not None and self._chief:
            report = self.report
            if text:
                self._out().text("train", TAG_REPORT, report.to_markdown(), self._phases["train"].step)
            write_report_json(self.log_dir, report.to_dict())
        if self._writers is not None:
            self._writers.flush()

    # ------------------------------------------------------------ traces

    def _maybe_start_trace(self, phase: str, state: _PhaseState, n: int) -> bool:
        """Open a profiler trace window for the Profile tab when this train call
        should be in one. True if the call runs inside a window."""
        if self._trace is not None:
            return True
        if phase != "train" or self.profile is None or self.log_dir is None or not self._chief:
            return False
        plan, first = self._trace_plan, state.step + 1
        kind = stop = None
        if isinstance(self.profile, tuple):
            start, end = self.profile
            if not plan.get("range") and first <= end and first + n - 1 >= start:  # the call overlaps
                kind, stop = "range", end
        elif plan.get("keras_profiles") or self._multi_worker:
            # keras.callbacks.TensorBoard profiles this fit: leave it the profiler.
            # Multi-worker: only traces the user asked for (see _MULTI_WORKER_PROFILER).
            return False
        elif plan.get("storm_pending") and state.call_new:
            kind, stop = "storm", state.step + n  # one recompiling step
        elif (not plan.get("steady") and not state.call_new and first >= self._fit_first_step + 10
              and first - state.last_new_step > 5):
            kind, stop = "steady", state.step + 5  # a short window of steady steps after warm-up
        if kind is None:
            return False
        plan[kind] = True
        if kind == "storm":
            plan["storm_pending"] = False
        run_dir = os.path.join(self.log_dir, "train")
        try:
            _internals.start_trace(run_dir)
        except Exception as error:  # noqa: BLE001 - another profiler: skip, never crash
            self._note_once("trace-busy", f"skipped a profiler trace: another profiler is running ({error!r}); "
                            "stop only what we started")
            return False
        self._trace = {"kind": kind, "stop_step": stop, "dir": run_dir, "started": time.time()}
        return True

    def _stop_trace(self) -> None:
        """Stop the trace window we opened (and only that one)."""
        trace, self._trace = self._trace, None
        if trace is None:
            return
        try:
            _internals.stop_trace()
        except Exception as error:  # noqa: BLE001 - the window is lost, training goes on
            self._note_once("trace-stop", f"a profiler trace could not be saved: {error!r}", warn=True)
            return
        profile_dir = os.path.join(trace["dir"], "plugins", "profile")
        sessions = sorted((os.path.join(profile_dir, d) for d in os.listdir(profile_dir)), key=os.path.getmtime) \
            if os.path.isdir(profile_dir) else []
        if sessions:
            self._traces.append(f"{trace['kind']}: {sessions[-1]}")
            from .doctor import profile_tab_install, profile_tab_installed
            if not profile_tab_installed():
                self._note_once("profile-tab", "profiler traces were written, but the Profile tab's plugin is not "
                                f"installed, so TensorBoard will not show them. Fix: {profile_tab_install()}")

    def _finish(self) -> None:
        self._flush(text=True)
        if self._writers is not None:
            self._writers.close()
            self._writers = None
        if self.verbose:
            print(self.report)

    def _begin_segment(self) -> None:
        self._segment_start = self._last_activity = time.perf_counter()

    def _end_segment(self, at: Optional[float] = None) -> None:
        if self._segment_start is not None:
            self._wall += (at or time.perf_counter()) - self._segment_start
            self._segment_start = None

    def _note_once(self, key: str, text: str, warn: bool = False) -> None:
        """A note in the report, once. Printed (a warning) only when something
        the user asked for will not happen; otherwise logged at INFO, so that a
        monitored fit stays as quiet as a bare one."""
        if key not in self._noted:
            self._noted.add(key)
            self._notes.append(text)
            (logger.warning if warn else logger.info)("xla_keras: %s", text)

    def _disable(self, error: BaseException) -> None:
        """Log once, stop observing, give back everything we changed.

        Under MultiWorkerMirroredStrategy the hooks keep running their
        structural part (jit switches, function rebuilds, wrappers that pull
        batches): a worker that went back to Keras's own pull alone, or rebuilt
        its functions differently, would issue other collectives than the
        others and hang them. Only observing stops there."""
        if self._error is not None:
            return  # already disabled: logged once
        self._error = f"the monitor disabled itself after an internal error: {error!r}"
        if self._multi_worker:
            self._observing = False
        else:
            self._enabled = False
        logger.error("xla_keras: %s; training goes on unmonitored.\n%s", self._error,
                     "".join(traceback.format_exception(type(error), error, error.__traceback__)))
        self._abandon_probe(self._active_probe)
        try:
            self._stop_trace()  # a window left open would hold the profiler for the whole process
        except Exception:  # noqa: BLE001 - already failing; never raise from here
            pass
        try:
            if self.log_dir is not None and self._chief:
                write_report_json(self.log_dir, self.report.to_dict())  # it says it disabled itself
        except Exception:  # noqa: BLE001
            pass
        try:
            if not self._multi_worker:
                self._unwrap_all()
                self._restore_model()
            if self._writers is not None:
                self._writers.flush()
        except Exception:  # noqa: BLE001 - already failing; never raise from here
            pass


def _warn_keras_multi_worker_fault() -> None:
    """Keras's own fit fails under MultiWorkerMirroredStrategy before any
    callback runs (keras-team/keras#20585): say why now, at construction,
    while the monitor can still speak."""
    cluster = cluster_from_env()
    if not cluster or cluster.get("tasks", 0) < 2:
        return
    try:
        problem = keras_fit_problem()
    except Exception:  # noqa: BLE001 - a hint, never a reason to fail
        return
    if problem:
        warnings.warn(f"{problem}. `xla-keras doctor` prints the smallest patch that makes fit train.",
                      XlaKerasWarning, stacklevel=3)


_GUARDED_HOOKS = ("on_epoch_begin", "on_epoch_end", "on_train_batch_begin", "on_train_batch_end", "on_train_end",
                  "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end",
                  "on_predict_begin", "on_predict_end", "on_predict_batch_begin", "on_predict_batch_end")


def _guard_call_callbacks(monitor: "XlaMonitor") -> None:
    """Wrap the hooks of the running fit's (or evaluate's / predict's)
    CallbackList, once per list, so that an exception escaping any callback
    reaches every monitor of the call before it reaches the user: Keras then
    skips the end hooks, and the step wrapper never sees an error raised
    between steps. As a backstop for what no hook sees (a Ctrl-C in Keras's
    own loop code), the monitor also cleans up when the list is freed, i.e.
    when the call's frames are gone, if its end hook never ran."""
    callback_list = _internals.running_callback_list(monitor.model)
    if callback_list is None:
        return
    token = monitor._call_token = object()
    weakref.finalize(callback_list, _call_gone, weakref.ref(monitor), token)
    if getattr(callback_list, "_xla_keras_guarded", False):
        return

    list_ref = weakref.ref(callback_list)  # no cycle: the list must be freed with the call's frames

    def guard(hook):  # the class's function: a bound method would hold the list too
        @functools.wraps(hook)
        def run(*args, **kwargs):
            try:
                return hook(list_ref(), *args, **kwargs)
            except _end_of_data():
                raise  # Keras ends the epoch on these and goes on (catch_stop_iteration)
            except BaseException:
                for cb in getattr(list_ref(), "callbacks", []):
                    if isinstance(cb, XlaMonitor):
                        cb._on_callback_error()
                raise
        return run

    for name in _GUARDED_HOOKS:
        hook = getattr(type(callback_list), name, None)
        if hook is not None:
            setattr(callback_list, name, guard(hook))  # instance attributes: gone with the list
    callback_list._xla_keras_guarded = True


def _end_of_data() -> tuple:
    """What ends an epoch's data, in Keras's eyes (it catches both)."""
    import tensorflow as tf
    return StopIteration, tf.errors.OutOfRangeError


def _call_gone(ref, token) -> None:
    """The CallbackList of a monitored call was freed: if that call never
    reached its end hook, clean up now."""
    monitor = ref()
    if monitor is None:
        return
    if monitor._call_token is token:
        monitor._on_callback_error()


def _run_word(phase: str) -> str:
    return {"train": "fit", "test": "evaluation", "predict": "prediction"}[phase]


def _pull(iterator: Any, count: int, graph_next: Optional[Any] = None) -> list:
    """Up to ``count`` batches, as Keras's own graph would pull them."""
    batches = []
    for _ in range(count):
        try:
            batches.append(graph_next(iterator) if graph_next is not None else next(iterator))
        except _end_of_data():
            break
    if not batches:
        raise StopIteration
    return batches


_GRAPH_NEXT: List[Any] = []


def _graph_next() -> Any:
    """``iterator.get_next()`` inside a tf.function, for distributed iterators.
    Measured (DESIGN §1): an eager ``next()`` costs ~1 ms per step under
    MirroredStrategy and more under MultiWorkerMirroredStrategy, where the
    pull also runs a cross-worker "has data" all-reduce; in a graph it costs
    what Keras's own pull costs. One function per process, shared by every
    monitor, traced once per iterator type: every worker traces and runs the
    same pulls, so the collectives stay matched."""
    if not _GRAPH_NEXT:
        import tensorflow as tf

        def graph_next(iterator):
            # The pull is ours, not the model's: auto-clustering must not compile
            # it (an XLA module the model's own fit would not have). Measured:
            # pausing the switch around the call is not enough (the function is
            # re-instantiated when the switch comes back); marking the ops is.
            with tf.xla.experimental.jit_scope(compile_ops=False):
                return iterator.get_next()

        _GRAPH_NEXT.append(tf.function(graph_next, autograph=False))
    return _GRAPH_NEXT[0]


def _flush_at_exit(ref) -> None:
    """Backstop for runs interrupted outside the monitor's reach."""
    monitor = ref()
    if monitor is None:
        return
    try:
        monitor._abandon_probe(monitor._active_probe)
        monitor._stop_trace()
        if monitor._in_fit:
            monitor._jit.restore()
        if monitor._writers is not None:
            monitor._writers.flush()
        if monitor.log_dir is not None and monitor._chief and monitor._segment_start is not None:
            write_report_json(monitor.log_dir, monitor.report.to_dict())
    except Exception:  # noqa: BLE001 - interpreter shutdown: best effort
        pass
