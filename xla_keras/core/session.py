"""The backend-neutral core: what happened in each phase, call by call. Pure (no TensorFlow, no Keras).

A backend's step wrapper tells the session "a call began with these batches"
(their input signatures) and, at the batch-end hook, "the call ended, with this
compile observation or none"; the session answers with what happened: the
compiles it recorded, the scalars to write, a storm that opened. Everything it
keeps is bounded: counters, fingerprints of distinct signatures, capped
records, ring buffers. ``snapshot()`` freezes it for a report.

Per phase there are two kinds of state: ``PhaseStats`` lives as long as the
report (steps, timing, shape history, compile accounting, records), and
``CallScratch`` is one call's working set (its batches, which are new, what the
probe saw), reset at the next call.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from xla_keras.config import MonitorConfig
from xla_keras.core.ledger import CompileLedger
from xla_keras.core.signatures import InputSignature, is_ragged
from xla_keras.core.timing import PhaseTiming, break_even_steps, share
from xla_keras.jit.modes import JitState, ProbeFacts, verdict
from xla_keras.jit.trial import Decision, Trial
from xla_keras.report.model import MEASURED, PHASES, Compilation, SlowStep, XlaReport
from xla_keras.report.schema import (
    TAG_COMPILATIONS,
    TAG_COMPILE_TIME,
    TAG_DISTINCT_SIGNATURES,
    TAG_STEADY_STEP_TIME,
    TAG_STEP_TIME,
    TAG_STORM,
)
from xla_keras.storms.advice import Costs, PhaseAdvice, SampleView, analyse, budget_text, over_budget
from xla_keras.storms.detection import (
    ShapeHistory,
    Storm,
    StormDetector,
    batch_rows,
    partial_batch_note,
    train_vs_validation_note,
)
from xla_keras.storms.lengths import BatchSample

logger = logging.getLogger("xla_keras")

# Auto-clustering compiles a new signature of an already-run cluster only on
# its second request (TensorFlow's lazy compilation): probe the first few occurrences.
AUTOCLUSTER_PROBES = 3
# XLA also keys its cache on the values of compile-time constant arguments: a
# model that needs ragged row splits as constants compiles per split values.
# Known ragged batches are probed until this many in a row compiled nothing.
RAGGED_PROBE_MISSES = 8
# Repeats (see Session.call_repeats) are timed in bulk once this many are waiting.
REPEAT_DRAIN = 64


class Scalar(NamedTuple):
    phase: str
    tag: str
    value: float
    step: int


@dataclass(frozen=True)
class CompileObservation:
    """What a probe saw of one call. ``modules``: seconds of each XLA module
    compiled (or loaded, when ``cached`` is True) during the call, in order;
    empty when nothing compiled. ``source``: "profiler" (XLA's compiler events)
    or "op_span" (the span of the op that triggered each compile).
    ``cached``: None when fresh compiles and loads could not be told apart.
    ``traced``: the step function also traced during the call.
    ``measured``: False when the probe ran but could not time the compiles
    (they are then estimated from step time, like an unprobed call)."""

    modules: Tuple[float, ...] = ()
    source: str = "profiler"
    cached: Optional[bool] = False
    traced: bool = False
    measured: bool = True


class CallPlan(NamedTuple):
    """What the session decided when a call began: the backend's probe reads it.
    (A NamedTuple: one is made per step, and a frozen dataclass costs microseconds to build.)"""

    phase: str
    first_step: int  # global step of the call's first batch
    batches: int
    new: Tuple[Tuple[int, int, InputSignature], ...]  # (index in the call, step, signature) new to the function
    probe: bool  # worth a compile probe
    ragged_probe: bool = False  # probing a known ragged signature (new split values?)
    steady_seconds: Optional[float] = None  # the phase's steady median step, when known

    @property
    def new_indices(self) -> Tuple[int, ...]:
        return tuple(i for i, _, _ in self.new)


class CallOutcome:
    """What one call added: compiles recorded, scalars to write, a storm that opened.
    (Slots, not a dataclass: one is made per step.)"""

    __slots__ = ("compiles", "scalars", "storm", "seconds")

    def __init__(self):
        self.compiles: List[Compilation] = []
        self.scalars: List[Scalar] = []
        self.storm: Optional[Tuple[int, int, int]] = None  # (step, count, window_start) of a storm that opened
        self.seconds = 0.0


class PhaseStats:
    """One phase over the report's life: steps, timing, shapes, compile accounting, records."""

    def __init__(self, max_records: int):
        self.timing = PhaseTiming()
        self.history = ShapeHistory()
        self.sample = BatchSample()  # a bounded reservoir of host batches, for real lengths
        self.view: Optional[SampleView] = None  # the sample as last measured (storm open, fit end)
        self.step = 0  # global 1-based step of the last batch run
        self.steps_run = 0  # batches run under the monitor
        self.last_new_step = 0
        self.pending_storm: Optional[Tuple[int, int, int]] = None  # (step, count, window_start)
        self.deferred_new: Optional[int] = None  # step of a smaller new batch, maybe the last
        self.usual_rows: Optional[int] = None
        self.compile_count = 0
        self.ragged_fps: set = set()  # fingerprints of ragged signatures (bounded by the distinct ones)
        self.ragged_misses = 0  # ragged probes in a row that saw no compile
        self.value_compiles = 0  # compiles of known ragged shapes (new split values)
        self.measured_seconds = 0.0  # compiles timed by a probe
        self.timing_step_share = 0.0  # sum of step_seconds / call_compiles of timing estimates
        self.timing_batch_share = 0.0  # sum of call_batches / call_compiles of timing estimates
        self.records: List[Compilation] = []
        self.records_dropped = 0
        self.max_records = max_records
        self.slow: List[SlowStep] = []
        self.slow_count = 0
        self.epoch_steady_sum = 0.0
        self.epoch_steady_n = 0
        self.rebuilds = 0  # step functions rebuilt outside the monitor
        self.after_switch: Optional[PhaseTiming] = None  # steady steps since a storm fallback (non-XLA)
        # Repeat calls counted but not yet timed: [start, step, steady] (bounded: drained at REPEAT_DRAIN).
        self.repeats: List[list] = []

    def add_record(self, record: Compilation) -> None:
        self.compile_count += 1
        if record.source in MEASURED:
            self.measured_seconds += record.seconds
        else:
            self.timing_step_share += (record.step_seconds or 0.0) / record.call_compiles
            self.timing_batch_share += record.call_batches / record.call_compiles
        if len(self.records) < self.max_records:
            self.records.append(record)
        else:
            self.records_dropped += 1

    def compile_seconds(self) -> float:
        """Exact total; timing estimates use the current steady median."""
        median = self.timing.median_seconds or 0.0
        return self.measured_seconds + max(0.0, self.timing_step_share - median * self.timing_batch_share)


@dataclass
class CallScratch:
    """One call's working set, reset when the next call begins."""

    start: float = 0.0
    batches: int = 0
    new: List[Tuple[int, InputSignature]] = field(default_factory=list)  # (step, signature)
    probe_signature: Optional[Tuple[int, InputSignature]] = None
    signature: Optional[InputSignature] = None  # the last batch's
    ragged_probe: bool = False
    in_trace_window: bool = False
    observation: Optional[CompileObservation] = None
    fingerprint: Optional[int] = None  # the last batch's, for the repeat fast path
    repeating: bool = False  # the last call took the repeat fast path


class Notes:
    """Notes for the report, each once. Logged at INFO unless something the
    user asked for will not happen (then WARNING), so that a monitored fit
    stays as quiet as a bare one."""

    def __init__(self):
        self.texts: List[str] = []
        self._keys: set = set()

    def add_once(self, key: str, text: str, warn: bool = False) -> None:
        if key in self._keys:
            return
        self._keys.add(key)
        self.texts.append(text)
        (logger.warning if warn else logger.info)("xla_keras: %s", text)

    def add(self, text: str) -> None:
        self.texts.append(text)


class WallClock:
    """Monitored wall time: the sum of the segments (fits, standalone evaluates, predicts)."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self.total = 0.0
        self.segment_start: Optional[float] = None
        self.last_activity = 0.0

    def begin(self) -> None:
        self.segment_start = self.last_activity = self._clock()

    def end(self, at: Optional[float] = None) -> None:
        if self.segment_start is not None:
            self.total += (at or self._clock()) - self.segment_start
            self.segment_start = None

    def seconds(self) -> float:
        running = self._clock() - self.segment_start if self.segment_start is not None else 0.0
        return self.total + running

    @property
    def running(self) -> bool:
        return self.segment_start is not None


@dataclass(frozen=True)
class PhaseSnapshot:
    steps: int
    compile_count: int
    compile_seconds: float
    steady_seconds: Optional[float]
    records: Tuple[Compilation, ...]
    records_dropped: int
    slow: Tuple[SlowStep, ...]
    slow_count: int
    value_compiles: int
    rebuilds: int
    history: ShapeHistory  # read-only for the report's notes (partial batches, train vs validation)


@dataclass(frozen=True)
class SessionSnapshot:
    """The session at one moment, frozen: reports are built from this, never from live state."""

    phases: Dict[str, PhaseSnapshot]
    distinct_signatures: Dict[str, int]
    storms: Tuple[Storm, ...]
    notes: Tuple[str, ...]
    wall_seconds: float
    fallback: Optional[dict]
    advice: Tuple[PhaseAdvice, ...] = ()
    jit_decision: Optional[dict] = None


class Session:
    """Per-phase statistics of one report, fed call by call."""

    def __init__(self, config: MonitorConfig, clock: Callable[[], float] = time.perf_counter):
        self.config = config
        self.clock = clock
        self.phases: Dict[str, PhaseStats] = {p: PhaseStats(config.max_records) for p in PHASES}
        self.calls: Dict[str, CallScratch] = {p: CallScratch() for p in PHASES}
        self.ledger = CompileLedger(probes_per_signature=AUTOCLUSTER_PROBES)
        self.detector = StormDetector(config.storm_threshold, config.storm_window)
        self.storms: List[Storm] = []
        self.notes = Notes()
        self.wall = WallClock(clock)
        self.fallback: Optional[dict] = None
        self._analysis: Dict[str, tuple] = {}  # phase -> (key, analysis)
        self._function_models: Dict[str, int] = {}  # id of the model each phase's function belongs to
        self._forced: set = set()  # phases whose function the monitor itself dropped or rebuilt
        self.data_kind = "tf.data"  # what the storm fix's code is written for (advice.DATA_KINDS)
        self._views_taken = 0
        self.trial: Optional[Trial] = None  # jit='fastest' measuring both modes in the running fit
        self.jit_decision: Optional[Union[Trial, Decision]] = None  # the last fit's, for the report

    # ------------------------------------------------------------ functions

    def functions_forced(self, phases: Sequence[str]) -> None:
        """The monitor itself dropped or rebuilt these phases' functions (not a user's rebuild)."""
        self._forced.update(phases)

    def function_installed(
        self,
        phase: str,
        before: object,
        token: object,
        model_id: int,
        rebuilt: bool,
        xla_now: bool,
        keep_previous: bool = False,
    ) -> None:
        """The step function ``token`` now runs ``phase`` (``before``: the one found there). A
        function replaced since the phase last ran, and not by the monitor (e.g. model.compile),
        starts an empty XLA cache: known shapes compile again, and the report says why."""
        replaced = (
            self._function_models.get(phase) == model_id
            and phase not in self._forced
            and self.ledger.function(phase) is not before
        )
        self._forced.discard(phase)
        self._function_models[phase] = model_id
        if self.ledger.set_function(phase, token, keep_previous) and replaced and not rebuilt and xla_now:
            self.phases[phase].rebuilds += 1

    def set_step(self, phase: str, step: int) -> None:
        """The phase's global step before the next batch (the train step is optimizer.iterations)."""
        stats = self.phases[phase]
        stats.step = stats.last_new_step = step

    # ---------------------------------------------------------------- calls

    def call_began(
        self, phase: str, signatures: Sequence[InputSignature], jit: JitState, start: Optional[float] = None
    ) -> CallPlan:
        """A call of ``phase``'s step function is about to run these batches."""
        stats, call = self.phases[phase], self.calls[phase]
        call.repeating = False
        if len(signatures) == 1 and self._repeats_last(phase, signatures[0], jit):
            # The steady case: the same signature as the call before, known to the function (no
            # compile, no storm, nothing to probe). Same bookkeeping as below, without recomputing it.
            call.start = self.clock() if start is None else start
            call.batches = 1
            call.new, call.probe_signature, call.observation = [], None, None
            call.ragged_probe = call.in_trace_window = False
            stats.history.observe_repeat(signatures[0])
            return CallPlan(phase, stats.step + 1, 1, (), False, False, stats.timing.recent_median_seconds)
        call.start = self.clock() if start is None else start
        call.batches = len(signatures)
        call.new, call.probe_signature, call.observation = [], None, None
        call.ragged_probe = call.in_trace_window = False
        expected = jit.xla_expected
        probe = False
        new = []
        for i, sig in enumerate(signatures):
            step = stats.step + i + 1
            if stats.deferred_new is not None:  # it was not the last batch: count it now
                self._count_new(phase, stats.deferred_new)
                stats.deferred_new = None
            stats.history.observe(sig)
            is_new, worth_probe = self.ledger.observe(phase, sig)
            fp = self.ledger.last_fingerprint
            if is_new:
                call.new.append((step, sig))
                new.append((i, step, sig))
                stats.last_new_step = step
                if is_ragged(sig):
                    stats.ragged_fps.add(fp)
                # A shape seen before, new only to a rebuilt function (model.compile),
                # compiles again but is no sign of varying shapes: not a storm step.
                if expected and not self.ledger.last_known:
                    rows = batch_rows(sig)
                    if stats.usual_rows is None:
                        stats.usual_rows = rows
                    if rows is not None and stats.usual_rows is not None and rows < stats.usual_rows:
                        # Maybe the partial last batch of the epoch, which is no storm by
                        # itself: it counts only if another batch follows in the same run.
                        stats.deferred_new = step
                    else:
                        self._count_new(phase, step)
            if worth_probe and (is_new or jit.autoclustering):
                probe = True
                call.probe_signature = call.probe_signature or (step, sig)
            elif jit.active and stats.ragged_misses < RAGGED_PROBE_MISSES and fp in stats.ragged_fps:
                probe = call.ragged_probe = True  # maybe new split values (RAGGED_PROBE_MISSES)
                call.probe_signature = call.probe_signature or (step, sig)
            call.signature = sig
            call.fingerprint = fp
        return CallPlan(
            phase,
            stats.step + 1,
            len(signatures),
            tuple(new),
            probe,
            call.ragged_probe,
            stats.timing.recent_median_seconds,
        )  # no sort per step

    def _count_new(self, phase: str, step: int) -> None:
        opened = self.detector.new_signature(phase, step)
        stats = self.phases[phase]
        if opened is not None and stats.pending_storm is None:
            stats.pending_storm = (step, *opened)

    def call_in_trace_window(self, phase: str, plan: CallPlan, jit: JitState, probed: bool = False) -> None:
        """The call runs inside a profiler trace window: not a steady step; with no probe
        (``probed``: JAX's events still time compiles there), compile times from step time."""
        self.calls[phase].in_trace_window = True
        if plan.probe and jit.xla_expected and not probed:
            self.notes.add_once(
                "trace-window",
                "compile times of steps inside a profiler trace window are "
                "estimated from step time (the profiler was writing the trace)",
            )

    def call_observed(self, phase: str, observation: Optional[CompileObservation]) -> None:
        self.calls[phase].observation = observation

    # ------------------------------------------------------------ repeats (the step path's fast path)

    def call_repeats(
        self, phase: str, signature: InputSignature, jit: JitState, start: float
    ) -> Optional[List[Scalar]]:
        """The fast path of a one-batch call (JAX's step wrapper): when its signature is the last
        call's, known to the function, not ragged, and no call is pending, the call is counted at
        once (step, batch count, ledger) and only its start is kept: its time is the next call's
        start minus its own, taken in bulk later (``drain``). None: take the full path
        (``call_began``). Else the scalars of repeats timed now (usually none)."""
        stats, call = self.phases[phase], self.calls[phase]
        if call.batches or call.in_trace_window or not self._repeats_last(phase, signature, jit):
            return None
        call.repeating = True
        stats.history.observe_repeat(signature)
        stats.step += 1
        stats.steps_run += 1
        self.wall.last_activity = start
        stats.repeats.append([start, stats.step, True])
        if len(stats.repeats) > REPEAT_DRAIN:
            return self.drain(phase)
        return []

    def _repeats_last(self, phase: str, signature: InputSignature, jit: JitState) -> bool:
        """The batch has the last batch's signature, known to the current function, not ragged, with
        no partial batch pending and no auto-clustering probes: counted as such in the ledger (True),
        or nothing is counted (False: the caller observes it in full)."""
        stats, call = self.phases[phase], self.calls[phase]
        return (
            call.signature is not None
            and stats.deferred_new is None
            and not jit.autoclustering
            and signature == call.signature
            and self.ledger.repeat(phase, call.fingerprint, stats.ragged_fps)
        )

    def repeat_observed(self, phase: str, observation: CompileObservation) -> CallOutcome:
        """A repeat call compiled after all (JAX saw it): its compiles are recorded at its step,
        and its time is not a steady step."""
        stats, call = self.phases[phase], self.calls[phase]
        outcome = CallOutcome()
        if stats.repeats:
            stats.repeats[-1][2] = False
        for module_seconds in observation.modules:
            self._record(
                phase,
                Compilation(
                    phase,
                    stats.step,
                    call.signature,
                    module_seconds,
                    observation.source,
                    cached=observation.cached,
                    traced=observation.traced,
                    call_compiles=len(observation.modules),
                ),
                outcome,
            )
        return outcome

    def drain(self, phase: str, end: Optional[float] = None, timed: bool = True) -> List[Scalar]:
        """Time the repeats whose end is known: each ends where the next one starts, the last at
        ``end`` (``timed`` False: not observed as it happened, so not a steady step); without
        ``end`` the last one waits for its end."""
        stats = self.phases[phase]
        items = stats.repeats
        if not items:
            return []
        ends = [item[0] for item in items[1:]]
        if end is None:
            done, stats.repeats = items[:-1], items[-1:]
        else:
            done, stats.repeats = items, []
            ends.append(end)
        scalars: List[Scalar] = []
        signature = self.calls[phase].signature
        for i, ((start, step, steady), stop) in enumerate(zip(done, ends)):
            if steady and (timed or end is None or i < len(done) - 1):
                self._steady_step(phase, stats, stop - start, step, 1, signature, scalars)
        return scalars

    def _steady_step(
        self,
        phase: str,
        stats: PhaseStats,
        per_step: float,
        step: int,
        n: int,
        signature: Optional[InputSignature],
        scalars: List[Scalar],
    ) -> None:
        """One call's time per batch, for the steady median (or a slow step); ``step``: its last."""
        if self.trial is not None and phase == "train":
            # jit='fastest' is measuring both modes: the phase's median (and its slow steps) would mix
            # them; it starts again from the kept mode's steps when the trial ends (trial_ended).
            self.trial.add(step, per_step)
        elif stats.timing.is_slow(per_step):
            stats.slow_count += 1
            if len(stats.slow) < stats.max_records:
                stats.slow.append(SlowStep(phase, step - n + 1, per_step, stats.timing.median_seconds, signature))
            return
        else:
            stats.timing.add_steady(per_step)
            if stats.after_switch is not None:
                stats.after_switch.add_steady(per_step)
        stats.epoch_steady_sum += per_step
        stats.epoch_steady_n += 1
        every = self.config.steps_per_scalar
        if every is not None and step % every < n:
            scalars.append(Scalar(phase, TAG_STEP_TIME, 1e3 * per_step, step))

    def call_failed(self, phase: str) -> None:
        """The call did not finish: whether XLA compiled is unknown, so its new
        signatures are new again (a probe of their next step will tell). A repeat is uncounted."""
        call = self.calls[phase]
        if call.repeating:
            call.repeating = False
            stats = self.phases[phase]
            if stats.repeats:
                stats.repeats.pop()
            stats.step -= 1
            stats.steps_run -= 1
            if stats.history.last is not None:
                stats.history.batches[stats.history.last] -= 1
            if call.signature is not None:
                self.ledger.forget(phase, call.signature)
            return
        call.batches = 0  # not a step run: nothing of it is counted (the next call must not end it)
        call.observation = None
        for _, sig in call.new:
            self.ledger.forget(phase, sig)
        call.new = []

    def call_skipped(self, phase: str) -> None:
        """A call ran unobserved (not batches the wrapper could read): its batch end counts nothing."""
        self.calls[phase].batches = 0

    def call_pending(self, phase: str) -> bool:
        """A call began and its end was not reported yet."""
        return self.calls[phase].batches > 0

    def call_ended(
        self, phase: str, jit: JitState, now: Optional[float] = None, timed: bool = True
    ) -> Optional[CallOutcome]:
        """The batch-end hook of the call: account its steps, compiles and time (None: no call was pending).
        ``timed``: False when the end was not observed as it happened (JAX's last call before a phase
        boundary, whose wait includes queued device work): it then never counts as a steady step."""
        stats, call = self.phases[phase], self.calls[phase]
        n = call.batches
        if not n:
            return None
        outcome = CallOutcome()
        now = self.clock() if now is None else now
        seconds = outcome.seconds = now - call.start
        self.wall.last_activity = now
        call.batches = 0
        stats.steps_run += n
        stats.step += n
        observation, call.observation = call.observation, None
        if observation is not None and observation.measured:
            self._record_observed(phase, observation, seconds, n, outcome)
        elif call.new and jit.xla_expected:
            traced = observation is not None and observation.traced
            for step, sig in call.new:
                record = Compilation(
                    phase,
                    step,
                    sig,
                    0.0,
                    "timing",
                    step_seconds=seconds,
                    traced=traced,
                    call_batches=n,
                    call_compiles=len(call.new),
                )
                record.seconds = record.estimate_from(stats.timing.median_seconds)
                self._record(phase, record, outcome)
        elif not call.new and not call.in_trace_window and observation is None and timed:  # probes cost time
            self._steady_step(phase, stats, seconds / n, stats.step, n, call.signature, outcome.scalars)
        if call.new:
            outcome.scalars.append(
                Scalar(phase, TAG_DISTINCT_SIGNATURES, self.ledger.distinct_count(phase), stats.step)
            )
        if stats.pending_storm is not None:
            outcome.storm, stats.pending_storm = stats.pending_storm, None
        return outcome

    def _record_observed(
        self, phase: str, observation: CompileObservation, seconds: float, n: int, outcome: CallOutcome
    ) -> None:
        stats, call = self.phases[phase], self.calls[phase]
        # A compile with no new signature (JAX: e.g. a rebuilt function's first call) belongs to the last batch.
        owners = call.new or ([call.probe_signature] if call.probe_signature else [(stats.step, call.signature)])
        ragged_only = call.ragged_probe and not call.new
        modules = observation.modules
        if not modules:
            if ragged_only:
                stats.ragged_misses += 1
            return  # the probe saw no compile: nothing compiled (e.g. a lazy cluster)
        if ragged_only:
            stats.ragged_misses = 0
            stats.value_compiles += len(modules)
        for i, module_seconds in enumerate(modules):
            step, sig = owners[min(i, len(owners) - 1)]
            self._record(
                phase,
                Compilation(
                    phase,
                    step,
                    sig,
                    module_seconds,
                    observation.source,
                    cached=observation.cached,
                    step_seconds=seconds,
                    traced=observation.traced,
                    call_batches=n,
                    call_compiles=len(modules),
                ),
                outcome,
            )

    def _record(self, phase: str, record: Compilation, outcome: CallOutcome) -> None:
        stats = self.phases[phase]
        stats.add_record(record)
        if self.trial is not None and phase == "train":
            self.trial.compiled((record.seconds,))
        outcome.compiles.append(record)
        outcome.scalars.append(Scalar(phase, TAG_COMPILE_TIME, 1e3 * record.seconds, record.step))
        outcome.scalars.append(Scalar(phase, TAG_COMPILATIONS, stats.compile_count, record.step))

    def end_of_run(self, phase: str) -> List[Scalar]:
        """An epoch (train) or a validation / evaluate / predict run ended: its scalars."""
        stats = self.phases[phase]
        stats.history.end_of_run()
        stats.deferred_new = None  # it was the partial last batch of the run
        for record in reversed(stats.records):  # the run's last step compiled: say so in the ledger
            if record.step != stats.step:
                break
            record.last_batch = True
        scalars = []
        if self.config.update_freq == "epoch" and stats.epoch_steady_n:
            scalars.append(
                Scalar(phase, TAG_STEP_TIME, 1e3 * stats.epoch_steady_sum / stats.epoch_steady_n, stats.step)
            )
        median = stats.timing.median_seconds
        if median is not None:
            scalars.append(Scalar(phase, TAG_STEADY_STEP_TIME, 1e3 * median, stats.step))
        stats.epoch_steady_sum, stats.epoch_steady_n = 0.0, 0
        return scalars

    # ---------------------------------------------------------------- jit='fastest'

    def trial_began(self, trial: Trial) -> None:
        self.trial = self.jit_decision = trial

    def trial_ended(self, trial: Trial, revised: bool = False) -> None:
        """The trial decided (or the fit ended, or its XLA-on decision was revised to off): the train
        phase's steady median starts again from the kept mode's measured steps, so the report describes
        the steps that run now."""
        if self.trial is not trial and not revised:
            return
        self.trial = None
        timing = self.phases["train"].timing = PhaseTiming()
        for seconds in trial.samples[trial.on]:
            timing.add_steady(seconds)

    # ---------------------------------------------------------------- real lengths

    def sample_batches(self, phase: str, batches: Sequence[object]) -> None:
        """Every call's batches pass here: a compare per batch, a reference kept now and then."""
        self.phases[phase].sample.offer(batches)

    def take_views(self, phases: Sequence[str] = PHASES) -> None:
        """Freeze what the samples hold, for the advice's real lengths: only when a storm opens and
        when a fit (evaluate, predict) ends, never at a periodic flush."""
        for phase in phases:
            sample = self.phases[phase].sample
            if sample.seen:
                self._views_taken += 1
                self.phases[phase].view = SampleView(
                    tuple(sample.kept), sample.seen, self._views_taken, sample.reason_unsampled()
                )

    # ---------------------------------------------------------------- storms

    def open_storm(self, phase: str, step: int, count: int, window_start: int, action: str) -> Storm:
        stats = self.phases[phase]
        self.take_views((phase,))
        varying, advice, fix = self._analyse(phase)
        storm = Storm(
            phase,
            step,
            count,
            varying,
            advice,
            fix,
            compiles=stats.compile_count,
            compile_seconds=stats.compile_seconds(),
            steady_step_seconds=stats.timing.median_seconds,
            window_start=window_start,
            action=action,
        )
        self.storms.append(storm)
        return storm

    def fell_back(self, phase: str, step: int, reason: str) -> None:
        """A storm switched XLA off: from now on each phase's steady steps are also timed apart,
        so the report can state what running without XLA cost against the XLA steps before."""
        self.fallback = {
            "phase": phase,
            "step": step,
            "reason": reason,
            "xla_steady_step_seconds": {p: s.timing.median_seconds for p, s in self.phases.items()},
        }
        for stats in self.phases.values():
            stats.after_switch = PhaseTiming()

    def _fallback_view(self) -> Optional[dict]:
        if not self.fallback:
            return None
        view = dict(self.fallback)
        view["steady_step_seconds_after"] = {
            p: (s.after_switch.median_seconds if s.after_switch is not None else None) for p, s in self.phases.items()
        }
        return view

    def storm_scalar(self, storm: Storm) -> Scalar:
        return Scalar(storm.phase, TAG_STORM, 1.0, storm.step)

    def _refreshed(self, storm: Storm) -> Storm:
        """A storm with its cause and fix recomputed from every shape the
        phase has seen so far (more data than at the moment it opened).
        Cached until the phase sees a new signature: reports are built at
        every flush."""
        varying, advice, fix = self._analyse(storm.phase)
        return dataclasses.replace(storm, varying=varying, advice=advice, fix=fix)

    def _analyse(self, phase: str) -> tuple:
        stats = self.phases[phase]
        history, view = stats.history, stats.view
        key = (len(history.signatures), history.runs, self.data_kind, view.version if view else None)
        cached = self._analysis.get(phase)
        if cached is None or cached[0] != key:  # analyse reads only these (and the costs of that moment)
            cached = self._analysis[phase] = (
                key,
                analyse(phase, history, self.config.storm_threshold, self.data_kind, view, self._costs(stats)),
            )
        return cached[1]

    @staticmethod
    def _costs(stats: PhaseStats) -> Costs:
        rows = sum(
            (batch_rows(sig) or 0) * stats.history.batches.get(fp, 0) for fp, sig in stats.history.signatures.items()
        )
        per_run = rows // stats.history.runs if stats.history.runs else rows  # so far, in the first run
        mean = stats.compile_seconds() / stats.compile_count if stats.compile_count else None
        return Costs(per_run or None, mean, stats.timing.median_seconds, bool(stats.history.runs))

    def _budget_advice(self, storm_phases: set) -> Tuple[PhaseAdvice, ...]:
        """Phases below the storm threshold whose recompiles cost more than the compile budget."""
        out = []
        for phase, stats in self.phases.items():
            if phase in storm_phases:
                continue
            first = stats.records[0].seconds if stats.records and stats.records[0].source in MEASURED else None
            over = over_budget(
                stats.compile_count,
                stats.compile_seconds(),
                stats.steps_run,
                stats.timing.median_seconds,
                self.config.compile_budget,
                first,
            )
            if over is None:
                continue
            varying, advice, fix = self._analyse(phase)
            if fix.get("kind") == "unknown":
                continue  # nothing in the shapes explains the compiles: no fix to offer
            item = PhaseAdvice(
                phase,
                stats.compile_count,
                stats.compile_seconds(),
                *over,
                self.config.compile_budget,
                varying,
                advice,
                fix,
            )
            item.advice = budget_text(phase, item)
            out.append(item)
        return tuple(out)

    # ---------------------------------------------------------------- report

    def snapshot(self) -> SessionSnapshot:
        phases = {}
        for name, stats in self.phases.items():
            median = stats.timing.median_seconds
            # Timing estimates use the final steady median: new records, never the stored ones changed.
            records = tuple(
                dataclasses.replace(r, seconds=r.estimate_from(median)) if r.source == "timing" else r
                for r in stats.records
            )
            phases[name] = PhaseSnapshot(
                stats.steps_run,
                stats.compile_count,
                stats.compile_seconds(),
                median,
                records,
                stats.records_dropped,
                tuple(stats.slow),
                stats.slow_count,
                stats.value_compiles,
                stats.rebuilds,
                stats.history,
            )
        storms = tuple(self._refreshed(s) for s in self.storms)
        decision = self.jit_decision
        view = decision.view() if isinstance(decision, Trial) else decision.to_dict() if decision else None
        return SessionSnapshot(
            phases,
            self.ledger.distinct_signatures(),
            storms,
            tuple(self.notes.texts),
            self.wall.seconds(),
            self._fallback_view(),
            self._budget_advice({s.phase for s in storms}),
            view,
        )


@dataclass(frozen=True)
class ReportContext:
    """What the report needs beyond the session: the monitor's and the backend's facts."""

    jit_mode: str
    jit_state: JitState
    probe: ProbeFacts
    traces: Tuple[str, ...] = ()
    cache_saved_seconds: Optional[float] = None
    extra_notes: Tuple[str, ...] = ()  # the backend's and the monitor's notes (cache, errors)
    refused: Optional[str] = None  # the monitor stepped aside: the reason replaces the verdict
    log_dir: Optional[str] = None
    versions: Dict[str, str] = field(default_factory=dict)
    run_state: Optional[str] = None
    backend: str = "tensorflow"
    other_compilations: Dict[str, dict] = field(default_factory=dict)


def build_report(snapshot: SessionSnapshot, context: ReportContext) -> XlaReport:
    """An XlaReport from a frozen snapshot: nothing live is read or changed."""
    report = XlaReport(jit_mode=context.jit_mode)
    records: List[Compilation] = []
    for name, phase in snapshot.phases.items():
        records.extend(phase.records)
        report.compilation_count[name] = phase.compile_count
        report.steps[name] = phase.steps
        report.steady_step_seconds_by_phase[name] = phase.steady_seconds
        report.slow_steps.extend(phase.slow)
        report.slow_step_count += phase.slow_count
        report.compilations_dropped += phase.records_dropped
    report.compilations = sorted(records, key=lambda c: (PHASES.index(c.phase), c.step))
    report.distinct_signatures = dict(snapshot.distinct_signatures)
    report.steady_step_seconds = report.steady_step_seconds_by_phase["train"]
    report.compile_seconds = sum(p.compile_seconds for p in snapshot.phases.values())
    report.wall_seconds = snapshot.wall_seconds
    report.compile_share = share(report.compile_seconds, report.wall_seconds)
    measured = sum(1 for c in report.compilations if c.source in MEASURED)
    report.jit_active, report.jit_reason = verdict(
        context.jit_state,
        context.probe,
        measured=measured,
        compiled=report.total_compilations,
        steps=sum(report.steps.values()),
        fell_back=snapshot.fallback is not None or bool(snapshot.jit_decision and snapshot.jit_decision["switches"]),
    )
    if context.refused:
        report.jit_active, report.jit_reason = None, context.refused
    report.storms = list(snapshot.storms)
    report.advice = list(snapshot.advice)
    report.fallback = snapshot.fallback
    report.jit_decision = snapshot.jit_decision
    if snapshot.jit_decision:
        report.break_even_steps = _trial_break_even(snapshot.jit_decision, report)
    report.traces = list(context.traces)
    report.cache_saved_seconds = context.cache_saved_seconds
    report.probe = context.probe.label
    report.notes = list(snapshot.notes) + _phase_notes(snapshot) + list(context.extra_notes)
    report.log_dir = context.log_dir
    report.versions = dict(context.versions)
    report.run_state = context.run_state
    report.backend = context.backend
    report.other_compilations = {k: dict(v) for k, v in context.other_compilations.items()}
    return report


def _phase_notes(snapshot: SessionSnapshot) -> List[str]:
    notes = []
    for name, phase in snapshot.phases.items():
        if phase.rebuilds:
            notes.append(
                f"{name}: the step function was rebuilt {phase.rebuilds} time(s) outside the monitor (e.g. "
                "model.compile(...)): a rebuilt function starts with an empty XLA compile cache, so shapes "
                "compiled before compile again"
            )
    for name, phase in snapshot.phases.items():
        if phase.value_compiles:
            notes.append(
                f"{name}: XLA compiled {phase.value_compiles} module(s) for ragged batches of shapes it had "
                "compiled already: the model needs the row splits as compile-time constants (e.g. "
                "tf.reduce_mean over the ragged axis), so XLA compiles per distinct row lengths, not per "
                "shape. Fix: pad to dense batches (padded_batch, RaggedTensor.to_tensor) or compute from the "
                "row splits with gathers"
            )
    storm_phases = {s.phase for s in snapshot.storms} | {a.phase for a in snapshot.advice}  # advice says it all
    for name, phase in snapshot.phases.items():
        note = partial_batch_note(name, phase.history) if name not in storm_phases else None
        if note and phase.compile_count:
            notes.append(note)
    note = train_vs_validation_note(snapshot.phases["train"].history, snapshot.phases["test"].history)
    if note and snapshot.phases["test"].compile_count:
        notes.append(note)
    return notes


def _trial_break_even(decision: dict, report: XlaReport) -> Optional[float]:
    """jit='fastest' measured both modes' steady steps in this fit: the steps after which the train
    phase's XLA compiles are repaid (inf: XLA's steps were not faster)."""
    medians = decision.get("medians") or {}
    return break_even_steps(
        sum(c.seconds for c in report.compilations if c.phase == "train"), medians.get("on"), medians.get("off")
    )
