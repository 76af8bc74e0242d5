"""The backend-neutral core: what happened in each phase, call by call. Pure (no TensorFlow, no Keras).

It also watches which step function runs each phase (``FunctionWatch``): one a user replaced behind the
monitor starts an empty XLA cache.

A backend's step wrapper tells the session "a call began with these batches"
(their input signatures) and, at the batch-end hook, "the call ended, with this
compile observation or none"; the session answers with what happened: the
compiles it recorded, the scalars to write, a storm that opened. Everything it
keeps is bounded (``phases.py``); ``snapshot()`` freezes it for a report
(``session/build.py``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from xla_keras.config import MonitorConfig
from xla_keras.core.precompile import count_in_loop, precompile_facts
from xla_keras.core.signatures import InputSignature, is_ragged
from xla_keras.core.tags import TAG_DISTINCT_SIGNATURES, TAG_STORM
from xla_keras.core.types import (
    KNOWN_SIGNATURE_CAUSES,
    PHASES,
    CallPlan,
    CompileObservation,
    Notes,
    Precompiled,
    Scalar,
)
from xla_keras.jit.decision import Decision
from xla_keras.jit.modes import JitState
from xla_keras.jit.trial import Trial, trial_view
from xla_keras.jit.value_keys import ValueKey, value_keys_note
from xla_keras.report.model import Compilation
from xla_keras.session.ledger import CompileLedger
from xla_keras.session.phases import (
    CallScratch,
    OwnTime,
    PhaseStats,
    SessionSnapshot,
    WallClock,
    fallback_began,
    fallback_view,
)
from xla_keras.session.recording import CallOutcome, StepRecorder
from xla_keras.session.repeats import Repeats
from xla_keras.session.storm_analysis import CallFacts, StormAnalysis
from xla_keras.storms.detection import Storm, StormDetector, batch_rows
from xla_keras.storms.fixes import AppliedLengths

if TYPE_CHECKING:
    from xla_keras.session.ledger import CompileLedger
    from xla_keras.session.phases import PhaseStats

# Auto-clustering compiles a new signature of an already-run cluster only on
# its second request (TensorFlow's lazy compilation): probe the first few occurrences.
AUTOCLUSTER_PROBES = 3
# JAX: an interval between drains lasts about this long before the monitor waits for the device once (a
# sparse sync). Measured on 2 CPU cores: a sync costs about 0.2 ms of the fit (the queue refills after it);
# once a second that is 0.02%, and under 1% while a sync costs under 10 ms (an accelerator's host-side
# bubble). Runs shorter than this are timed between Keras's own drains (each run's end).
SYNC_SECONDS = 1.0
# A compile probe (TensorFlow: a profiler session around the call) costs a few % of the compile it times: the
# profiler collects every XLA pass's event (~50 ms for a 1 s compile of a Conv1D text model). Calls with a new
# signature under jit_compile=True are probed while the probes' time stays within this share of the monitored
# time plus the allowance; past it their compile is known by the new shape and timed from the step (its time
# minus the steady step, ``estimated_because="probe_budget"``). Auto-clustering's and values' probes, which
# are the only way to see those compiles, always run; so does every probe with a persistent compilation cache
# (a new shape may be a load there, which only a probe tells from a compile: ``probe_budget`` is off, and the
# probes' time is not capped, each ~5% of the compile it times).
PROBE_SHARE = 0.01
PROBE_ALLOWANCE_SECONDS = 0.1


class Session:
    """Per-phase statistics of one report, fed call by call."""

    def __init__(
        self,
        config: MonitorConfig,
        clock: Callable[[], float] = time.perf_counter,
        between_drains: bool = False,
        probe_budget: bool = True,
    ):
        """``between_drains``: steps are dispatched asynchronously (JAX), so step times come from the
        intervals between the device's drains (core/timing.py), not from each call's time. ``probe_budget``:
        a probe costs time (TensorFlow's profiler session; JAX reads its compile events at no cost), so
        new signatures are probed within ``PROBE_SHARE`` (the callback turns it off where a persistent cache
        is effective: callback/step_functions.py)."""
        self.config = config
        self.between_drains = between_drains
        self.probe_budget = probe_budget
        self.clock = clock
        self.phases: Dict[str, PhaseStats] = {p: PhaseStats(config.max_records) for p in PHASES}
        self.calls: Dict[str, CallScratch] = {p: CallScratch() for p in PHASES}
        self.ledger = CompileLedger(probes_per_signature=AUTOCLUSTER_PROBES)
        self.detector = StormDetector(config.storm_rule)
        self.storms: List[Storm] = []
        self.notes = Notes()
        self.own = OwnTime()
        self.wall = WallClock(clock)
        self.fallback: Optional[dict] = None
        self.analysis = StormAnalysis(config)
        self.recorder = StepRecorder(self.phases, self.calls, config.steps_per_scalar, between_drains)
        self.repeats = Repeats(self.phases, self.calls, self.ledger, self.wall, self.drain)
        self.functions = FunctionWatch(self.ledger, self.phases)
        self.data_kind = "tf.data"  # what the storm fix's code is written for (storms.fixes.DATA_KINDS)
        self.model_layers: Tuple[str, ...] = ()  # the model's layer classes (the advice on padded images)
        self.applied_fixes: Tuple[AppliedLengths, ...] = ()  # what xla_keras.data applied in this process
        self._views_taken = 0
        self._open_at_next_call: Set[str] = set()  # TensorFlow: phases whose interval was cut at a switch
        self.run = "fit"  # the running (or last) call: "fit", "evaluate" or "predict"
        self.runs: Dict[str, int] = {}  # calls of each kind so far (the running one's index: runs[run])
        self.jit_decision: Optional[Union[Trial, Decision]] = None  # the last fit's, for the report
        self.precompile: Dict[str, dict] = {}  # per phase: what was compiled before its first step, and after

    # ------------------------------------------------------------ functions

    def functions_forced(self, phases: Sequence[str]) -> None:
        """The monitor itself dropped or rebuilt these phases' functions (not a user's rebuild)."""
        self.functions.forced(phases)

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
        """The step function ``token`` now runs ``phase`` (``before``: the one found there)."""
        self.functions.installed(phase, before, token, model_id, rebuilt, xla_now, keep_previous)

    def set_step(self, phase: str, step: int) -> None:
        """The phase's global step before the next batch (the train step is optimizer.iterations)."""
        stats = self.phases[phase]
        stats.step = stats.last_new_step = step

    # ---------------------------------------------------------------- calls

    def call_began(
        self,
        phase: str,
        signatures: Sequence[InputSignature],
        jit: JitState,
        start: Optional[float] = None,
        pull: float = 0.0,
    ) -> CallPlan:
        """A call of ``phase``'s step function is about to run these batches, which took ``pull`` seconds to
        pull (the input pipeline's wait)."""
        stats, call = self.phases[phase], self.calls[phase]
        call.repeating = False
        call.start = self.clock() if start is None else start
        call.pull = pull
        waits = stats.waits
        waits.input_seconds += call.pull
        if call.pull > waits.longest_input:
            waits.longest_input = call.pull
        if stats.run_began_at is not None:
            self._run_started(stats, call.start - stats.run_began_at)
        if phase in self._open_at_next_call:
            self._open_at_next_call.discard(phase)
            stats.interval.open_at(call.start, stats.step)
        call.batches = len(signatures)
        call.new, call.probe_signature, call.observation = [], None, None
        call.value_probe = call.in_trace_window = False
        call.unprobed = None
        if len(signatures) == 1 and self.repeats.known(phase, signatures[0], jit):
            # The steady case: the same signature as the call before, known to the function (no
            # compile, no storm, nothing to probe). Same bookkeeping as below, without recomputing it.
            stats.history.observe_repeat(signatures[0])
            return CallPlan(phase, stats.step + 1, 1, (), False, False, stats.timing.recent_median_seconds)
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
                call.new.append((step, sig, "function" if self.ledger.last_known else "signature"))
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
            # A precompiled signature's first batch is probed too: a compile there is one the set did not prevent.
            if worth_probe and (is_new or jit.autoclustering or self.ledger.last_ahead):
                if is_new and jit.active and not probe and not self.ledger.last_ahead and self._probes_spent():
                    call.unprobed = "probe_budget"
                else:
                    probe = True
                    call.probe_signature = call.probe_signature or (step, sig)
            elif jit.active and stats.value_probe_due(fp):
                probe = call.value_probe = True  # maybe a new value XLA takes as a constant
                call.probe_signature = call.probe_signature or (step, sig)
            call.signature = sig
            call.fingerprint = fp
        return CallPlan(
            phase,
            stats.step + 1,
            len(signatures),
            tuple(new),
            probe,
            call.value_probe,
            stats.timing.recent_median_seconds,
        )  # no sort per step

    def _probes_spent(self) -> bool:
        """Whether the compile probes have used their budget (``PROBE_SHARE`` of the monitored time and
        ``PROBE_ALLOWANCE_SECONDS``)."""
        spent = self.own.seconds["probes"]
        return self.probe_budget and spent > PROBE_ALLOWANCE_SECONDS + PROBE_SHARE * self.wall.seconds()

    def precompiled(self, phase: str, results: Sequence[Precompiled], facts: dict, seconds: float) -> CallOutcome:
        """``results``: a precompile of ``phase``'s shape set that took ``seconds`` before its first call (its
        records, at step 0; the signatures known to the running function from now on). ``facts``: the
        set's source, threads and what it left out, in words. The precompile is no wait of the run's start."""
        stats = self.phases[phase]
        outcome = CallOutcome()
        for result in results:
            if result.error is None:
                self.ledger.precompiled(phase, result.signature)
                record = Compilation(phase, 0, result.signature, result.seconds, result.source, cached=result.cached)
                record.cause, record.precompiled = "signature", True
                self.recorder.compiled(phase, record, outcome)
        if stats.run_began_at is not None:
            stats.run_began_at += seconds
        self.precompile[phase] = precompile_facts(facts, results, seconds)
        return outcome

    def compiled_in_loop(self, phase: str, records: Sequence[Compilation]) -> List[Compilation]:
        """Of a call's compiles, those of the step's own program after a precompile of ``phase`` (counted)."""
        facts = self.precompile.get(phase)
        return count_in_loop(facts, records) if facts is not None else []

    @staticmethod
    def _run_started(stats: PhaseStats, seconds: float) -> None:
        """A run's first call begins ``seconds`` after its begin hook."""
        stats.run_began_at = None
        waits = stats.waits
        waits.run_start_seconds += max(0.0, seconds)
        waits.run_starts += 1
        if seconds > waits.longest_run_start:
            waits.longest_run_start, waits.longest_run_start_step = seconds, stats.step + 1

    def _count_new(self, phase: str, step: int) -> None:
        opened = self.detector.new_signature(phase, step)
        stats = self.phases[phase]
        if opened is not None and stats.pending_storm is None:
            stats.pending_storm = (step, *opened)

    def call_in_trace_window(self, phase: str) -> None:
        """The call runs inside a profiler trace window: not a steady step (an estimate says why)."""
        self.calls[phase].in_trace_window = True

    def call_unprobed(self, phase: str, because: str) -> None:
        """No probe could time the call's compiles (``ESTIMATED_BECAUSE``'s key, e.g. "profiler_busy")."""
        self.calls[phase].unprobed = because

    def call_observed(self, phase: str, observation: Optional[CompileObservation]) -> None:
        self.calls[phase].observation = observation

    # ------------------------------------------------------------ repeats (the step path's fast paths)

    def repeat_observed(self, phase: str, observation: CompileObservation) -> CallOutcome:
        """A repeat call compiled after all (JAX saw it): its compiles are recorded at its step."""
        outcome = self.recorder.repeat_observed(phase, observation)
        self._count_known_signature(phase, outcome)
        stats = self.phases[phase]
        if stats.pending_storm is not None:
            outcome.storm, stats.pending_storm = stats.pending_storm, None
        return outcome

    def _count_known_signature(self, phase: str, outcome: CallOutcome) -> None:
        """Compiles at a known signature (a value, a retrace, JAX's context or placement) count towards a
        storm as new signatures do: each is a compile of its own."""
        stats = self.phases[phase]
        for record in outcome.compiles:
            if record.cause in KNOWN_SIGNATURE_CAUSES and record.outside_step is None:
                stats.known_signature_compiles += 1
                stats.last_known_cause = (record.cause, record.why)
                self._count_new(phase, record.step)

    def value_keyed(self, phase: str, keys: Sequence[ValueKey]) -> None:
        """The phase's step holds inputs XLA takes as compile-time constants whose values it computes
        (``jit/value_keys.py``): its known signatures may compile again, so its calls are probed."""
        stats = self.phases[phase]
        known = set(stats.value_keys)
        added = tuple(k for k in keys if k not in known)
        if not added:
            return
        stats.value_keys = stats.value_keys + added
        stats.value_misses = 0
        self.notes.add_once(f"value-keys-{phase}", value_keys_note(phase, stats.value_keys))

    def drain(self, phase: str, end: Optional[float] = None, timed: bool = True) -> List[Scalar]:
        """Time the repeats whose end is known (``StepRecorder.drain``)."""
        return self.recorder.drain(phase, end, timed)

    def call_failed(self, phase: str) -> None:
        """The call did not finish: whether XLA compiled is unknown, so its new
        signatures are new again (a probe of their next step will tell). A repeat is uncounted."""
        call = self.calls[phase]
        if call.repeating:
            call.repeating = False
            self.phases[phase].uncount_repeat()
            if call.signature is not None:
                self.ledger.forget(phase, call.signature)
            return
        call.batches = 0  # not a step run: nothing of it is counted (the next call must not end it)
        call.observation = None
        for _, sig, _ in call.new:
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
        # TensorFlow: from the last batch end (Keras's loop and the other callbacks between the two are the
        # step's too); JAX: start to start, the host's time (``between_drains``).
        begin = call.last_end if call.last_end is not None and not self.between_drains else call.start
        seconds = outcome.seconds = now - begin
        call.between = call.start - begin
        call.last_end = now if timed else None
        synced, call.synced = call.synced, False
        timed = timed and not synced  # the host time of a call the monitor waited after holds the wait
        self.wall.last_activity = now
        call.batches = 0
        stats.steps_run += n
        stats.step += n
        observation, call.observation = call.observation, None
        steady = not call.new and not call.in_trace_window and observation is None and timed  # probes cost time
        if not steady and not self.between_drains:  # its own time is known: taken out of the run's interval
            stats.interval.exclude(seconds, n)
        if observation is not None and observation.measured:
            self.recorder.observed(phase, observation, seconds, n, outcome)
        elif call.new and jit.xla_expected:
            self.recorder.estimated(phase, observation, seconds, n, outcome)
        elif steady:
            self.recorder.steady_step(phase, stats, seconds / n, stats.step, n, call.signature, outcome.scalars)
        if call.new:
            outcome.scalars.append(
                Scalar(phase, TAG_DISTINCT_SIGNATURES, self.ledger.distinct_count(phase), stats.step)
            )
        self._count_known_signature(phase, outcome)
        if stats.pending_storm is not None:
            outcome.storm, stats.pending_storm = stats.pending_storm, None
        return outcome

    def end_of_run(self, phase: str) -> List[Scalar]:
        """An epoch (train) or a validation / evaluate / predict run ended: its scalars."""
        stats = self.phases[phase]
        if stats.run_opened is not None:
            stats.last_run_seconds, stats.run_opened = self.clock() - stats.run_opened, None
        return stats.end_of_run(phase, self.config.update_freq)

    def run_began(self, phase: str, at: float) -> None:
        """An epoch (train), a validation / evaluate or a predict run of ``phase`` begins at ``at`` (its begin
        hook). JAX: an interval opens here if the device holds nothing of the phase (the run's own set-up is
        its steps' time too). TensorFlow times each step on its own: the time to the run's first call is the
        run's start (``Waits``), no step's."""
        stats = self.phases[phase]
        stats.run_began_at = stats.run_opened = at
        stats.own_at_run_begin = self.own.total
        if self.between_drains and not stats.interval.open and stats.idle:
            stats.interval.open_at(at, stats.step)

    def own_in_run(self, phase: str) -> float:
        """The monitor's own work (probes, writes, traces, analyses) since ``phase``'s running run began."""
        return max(0.0, self.own.total - self.phases[phase].own_at_run_begin)

    def own_work(self, kind: str, seconds: float) -> None:
        """The monitor's own work took ``seconds`` (``phases.OWN_WORK``): stated, never a step's."""
        self.own.add(kind, seconds)

    def after_own_work(self, phase: str, at: float) -> None:
        """TensorFlow: the monitor's work at a batch end is over at ``at``: the next step's time starts here."""
        call = self.calls[phase]
        if call.last_end is not None:
            call.last_end = at

    def boundary(self, phases: Sequence[str]) -> None:
        """Another phase (or nothing) runs next: the phases' next calls are timed from their own start."""
        for phase in phases:
            self.calls[phase].last_end = None

    # ---------------------------------------------------------------- intervals (core/timing.py)

    def interval_call(self, phase: str, start: float) -> Optional[float]:
        """A call of ``phase`` begins at ``start``: it opens an interval if the device holds nothing of the
        phase. Returns when the open interval should end with a sync (None: no interval is open)."""
        stats = self.phases[phase]
        interval = stats.interval
        if not interval.open and stats.idle:
            interval.open_at(start, stats.step)
        return interval.start + SYNC_SECONDS if interval.start is not None else None

    def interval_spoiled(self, phase: str, why: str) -> None:
        """The open interval holds something that is not a steady step (a compile, a profiler window)."""
        self.phases[phase].interval.spoil(why)

    def sync_wanted(self, phase: str, now: float) -> bool:
        """Whether the call beginning at ``now`` should end with a sync: the open interval has run
        ``SYNC_SECONDS``, or none could open since a drain failed."""
        stats = self.phases[phase]
        start = stats.interval.start
        return (start is None and not stats.idle) or (start is not None and now - start >= SYNC_SECONDS)

    def drained(self, phase: str, at: Optional[float], boundary: bool = False) -> List[Scalar]:
        """The device finished every call of ``phase`` dispatched so far, at ``at`` (None: the wait failed,
        so when is unknown). Closes the open interval (a steady sample when clean); after a sync inside a
        run a new one opens at once; after a ``boundary`` or a spoiled interval the phase's next run (JAX:
        or call) opens it."""
        stats, call = self.phases[phase], self.calls[phase]
        if call.batches:
            call.synced = True  # the pending call's host time now holds the wait
        elif stats.repeats:
            stats.repeats[-1][2] = False  # so does the last repeat's (the steady case): no host time of its own
        scalars: List[Scalar] = []
        if at is None:
            stats.interval.close(0.0, 0)
            stats.idle = False
            return scalars
        dispatched = stats.step + call.batches
        pending = stats.repeats  # the calls not timed yet: each one's host time runs to the next one's start
        for (start, step, _), (following, _, _) in zip(pending, pending[1:]):
            stats.interval.note_host(following - start, step)
        steady = stats.timing.median_seconds
        stalled = stats.interval.stalled(at, dispatched, steady)
        if stalled and steady is None and stats.slow_candidates:
            # No steady step yet, and the first interval held a stall: its calls are judged against the
            # interval's other steps (else they would wait for a clean interval that may never come).
            base = stats.interval.step_base(at, dispatched)
            if base is not None:
                self.recorder.judge_candidates(phase, base)
        spoiled = stats.interval.spoiled is not None or stalled
        sample = stats.interval.close(at, dispatched, steady)
        stats.idle = True
        if sample is not None:
            self.recorder.interval(phase, sample[0], sample[1], dispatched, scalars)
        # After a compile or a profiler window the monitor's own one-off work (the compile's record, its
        # cost analysis) follows at the batch end: the next interval opens at the phase's next call.
        if not boundary and not spoiled:
            stats.interval.open_at(at, dispatched)
        return scalars

    # ---------------------------------------------------------------- jit='fastest'

    @property
    def trial(self) -> Optional[Trial]:
        """jit='fastest' measuring both modes in the running fit."""
        return self.recorder.trial

    def trial_began(self, trial: Trial) -> None:
        self.recorder.trial = self.jit_decision = trial

    def trial_ended(self, trial: Trial, revised: bool = False) -> None:
        """The trial decided, the fit ended, or XLA on was revised to off (``StepRecorder.trial_ended``)."""
        self.recorder.trial_ended(trial, revised)

    # ---------------------------------------------------------------- real lengths

    def sample_batches(self, phase: str, batches: Sequence[object]) -> None:
        """Every call's batches pass here: a compare per batch, a reference kept now and then."""
        self.phases[phase].sample.offer(batches)

    def take_views(self, phases: Sequence[str] = PHASES) -> None:
        """Freeze what the samples hold, for the advice's real lengths: only when a storm opens and
        when a fit (evaluate, predict) ends, never at a periodic flush."""
        for phase in phases:
            if self.phases[phase].sample.seen:
                self._views_taken += 1
                self.phases[phase].take_view(self._views_taken)

    # ---------------------------------------------------------------- storms

    def open_storm(self, phase: str, step: int, count: int, window_start: int, action: str) -> Storm:
        self.take_views((phase,))
        storm = self.analysis.storm(phase, self.phases[phase], self.facts(), step, count, window_start, action)
        self.storms.append(storm)
        return storm

    def fell_back(self, phase: str, step: int, reason: str, cause: str = "storm") -> None:
        """A storm switched XLA off: from now on each phase's steady steps are also timed apart,
        so the report can state what running without XLA cost against the XLA steps before.

        Each phase's open interval is cut at the switch, so that no interval holds steps of both modes
        (one once made the steps after a switch look 2.5x slower than XLA's, where separate fits
        measured 0.9x). TensorFlow: the steps so far are a sample of the XLA side, and the steps from
        the phase's next call on open another interval (the monitor's work on the switch is no step's).
        JAX: the steps the device still holds are unobserved: the interval is dropped, and the next one
        opens after the next drain."""
        for name, stats in self.phases.items():
            if not stats.interval.open:
                continue
            if self.between_drains:
                stats.interval.spoil("the step function switched")
                continue
            call = self.calls[name]
            sample = stats.interval.close(call.last_end if call.last_end is not None else self.clock(), stats.step)
            if sample is not None:
                self.recorder.interval(name, sample[0], sample[1], stats.step, [])
            call.last_end = None  # the next call is timed from its own start
            self._open_at_next_call.add(name)
        self.fallback = fallback_began(phase, step, reason, self.phases, cause)

    def facts(self) -> CallFacts:
        """What the storm advice knows of the running call beyond its shapes (set as each call begins)."""
        return CallFacts(self.data_kind, self.model_layers, self.applied_fixes)

    def storm_scalar(self, storm: Storm) -> Scalar:
        return Scalar(storm.phase, TAG_STORM, 1.0, storm.step)

    def call_segment_began(self, run: str) -> None:
        """A fit, evaluate or predict begins (``run``): the compile budget judges it alone."""
        self.analysis.call_ended(self.phases, self.storms, self.facts(), self.run, self.runs.get(self.run, 1))
        self.run, self.runs[run] = run, self.runs.get(run, 0) + 1
        for stats in self.phases.values():
            stats.call_began()

    # ---------------------------------------------------------------- report

    def snapshot(self) -> SessionSnapshot:
        facts = self.facts()
        storms = tuple(self.analysis.refreshed(s, self.phases[s.phase], facts) for s in self.storms)
        decision = self.jit_decision
        view = trial_view(decision) if isinstance(decision, Trial) else decision.to_dict() if decision else None
        return SessionSnapshot(
            {name: stats.snapshot(self.between_drains) for name, stats in self.phases.items()},
            self.ledger.distinct_signatures(),
            storms,
            tuple(self.notes.texts),
            self.wall.seconds(),
            fallback_view(self.fallback, self.phases),
            self.analysis.advice(self.phases, self.storms, facts, self.run, self.runs.get(self.run, 1)),
            view,
            self.own.view(),
            {phase: _copied(facts) for phase, facts in self.precompile.items()},
        )


def _copied(facts: dict) -> dict:
    return {key: list(value) if isinstance(value, list) else value for key, value in facts.items()}


# Which step function runs each phase, and whether a user replaced one behind the monitor.


class FunctionWatch:
    """A function replaced since its phase last ran, and not by the monitor (e.g. model.compile),
    starts an empty XLA cache: known shapes compile again. Counted per phase (``PhaseStats.rebuilds``)
    so that the report can say why."""

    def __init__(self, ledger: CompileLedger, phases: Dict[str, PhaseStats]):
        self.ledger = ledger
        self.phases = phases
        self._models: Dict[str, int] = {}  # id of the model each phase's function belongs to
        self._forced: set = set()  # phases whose function the monitor itself dropped or rebuilt

    def forced(self, phases: Sequence[str]) -> None:
        """The monitor itself dropped or rebuilt these phases' functions (not a user's rebuild)."""
        self._forced.update(phases)

    def installed(
        self,
        phase: str,
        before: object,
        token: object,
        model_id: int,
        rebuilt: bool,
        xla_now: bool,
        keep_previous: bool = False,
    ) -> None:
        """The step function ``token`` now runs ``phase`` (``before``: the one found there)."""
        replaced = (
            self._models.get(phase) == model_id
            and phase not in self._forced
            and self.ledger.function(phase) is not before
        )
        self._forced.discard(phase)
        self._models[phase] = model_id
        if self.ledger.set_function(phase, token, keep_previous) and replaced and not rebuilt and xla_now:
            self.phases[phase].rebuilds += 1
