"""What a call's end adds to its phase: compile records, step times, and the scalars for them. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from xla_keras.core.signatures import InputSignature
from xla_keras.core.tags import TAG_COMPILATIONS, TAG_COMPILE_TIME, TAG_STEP_TIME
from xla_keras.core.timing import SLOW_FACTOR, SLOW_MIN_EXCESS_SECONDS, PhaseTiming
from xla_keras.core.types import CompileObservation, Scalar
from xla_keras.report.model import Compilation, SlowStep
from xla_keras.session.phases import CallScratch, PhaseStats

if TYPE_CHECKING:
    from xla_keras.jit.trial import Trial


class CallOutcome:
    """What one call added: compiles recorded, scalars to write, a storm that opened.
    (Slots, not a dataclass: one is made per step.)"""

    __slots__ = ("compiles", "scalars", "storm", "seconds")

    def __init__(self):
        self.compiles: List[Compilation] = []
        self.scalars: List[Scalar] = []
        self.storm: Optional[Tuple[int, int, int]] = None  # (step, count, window_start) of a storm that opened
        self.seconds = 0.0


# JAX: host times far enough above anything a steady step could be, kept until the first interval tells
# the steady step (a stall in a fit's first run); at most this many.
SLOW_CANDIDATES = 64


class StepRecorder:
    """Records compiles (probed, or estimated from step time), steady and slow steps, and the repeats'
    times taken in bulk. While jit='fastest' measures both modes (``trial``), the train phase's step
    times go to the trial instead: the phase's median would mix the two modes."""

    def __init__(
        self,
        phases: Dict[str, PhaseStats],
        calls: Dict[str, CallScratch],
        steps_per_scalar: Optional[int],
        between_drains: bool = False,
    ):
        self.phases = phases
        self.calls = calls
        self.steps_per_scalar = steps_per_scalar  # xla/step_time_ms every this many steps (None: per epoch)
        self.trial: Optional[Trial] = None
        # JAX (core/timing.py): calls' times are host times, which only find slow steps; the steady step
        # and its scalars come from the intervals between drains (``interval``).
        self.between_drains = between_drains

    # ---------------------------------------------------------------- compiles

    def compiled(self, phase: str, record: Compilation, outcome: CallOutcome) -> None:
        stats = self.phases[phase]
        stats.add_record(record)
        if self.trial is not None and phase == "train":
            self.trial.compiled((record.seconds,))
        outcome.compiles.append(record)
        outcome.scalars.append(Scalar(phase, TAG_COMPILE_TIME, 1e3 * record.seconds, record.step))
        outcome.scalars.append(Scalar(phase, TAG_COMPILATIONS, stats.compile_count, record.step))

    def estimated(
        self, phase: str, observation: Optional[CompileObservation], seconds: float, n: int, outcome: CallOutcome
    ) -> None:
        """No probe timed the call's compiles: one record per new signature, from step time."""
        stats, call = self.phases[phase], self.calls[phase]
        traced = observation is not None and observation.traced
        because = (
            "trace_window"
            if call.in_trace_window
            else "not_measured"
            if observation is not None
            else call.unprobed or "unprobed"
        )
        for step, sig, cause in call.new:
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
                estimated_because=because,
                cause=cause,
            )
            record.seconds = record.estimate_from(stats.timing.estimate_base)
            self.compiled(phase, record, outcome)

    def observed(
        self, phase: str, observation: CompileObservation, seconds: float, n: int, outcome: CallOutcome
    ) -> None:
        """A probe timed the call: one record per module it saw compile, each with its cause."""
        stats, call = self.phases[phase], self.calls[phase]
        assert call.signature is not None  # a probed call began with batches
        modules = observation.modules
        known_only = not call.new
        if call.value_probe and known_only:
            if not modules:
                stats.value_misses += 1
                return
            stats.value_misses = stats.value_skipped = 0
        if not modules:
            return  # the probe saw no compile: nothing compiled (e.g. a lazy cluster)
        why: Optional[str] = None
        if call.new:
            owners = call.new
        else:
            # A compile with no new signature belongs to the batch probed (a lazy cluster, a value, a
            # retrace), else (JAX: e.g. a rebuilt function's first call) to the last batch.
            step, sig = call.probe_signature or (stats.step, call.signature)
            cause, why = known_signature_cause(call, stats, observation)
            owners = [(step, sig, cause)]
            if cause == "value":
                stats.value_compiles += sum(1 for i in range(len(modules)) if observation.program(i) is None)
        steps_own = 0  # the step's own modules so far: they map to the call's new signatures in order
        for i, module_seconds in enumerate(modules):
            program = observation.program(i)
            step, sig, cause = owners[min(steps_own, len(owners) - 1)]
            steps_own += program is None
            self.compiled(
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
                    cause=cause,
                    why=why,
                    outside_step=program,
                ),
                outcome,
            )

    def repeat_observed(self, phase: str, observation: CompileObservation) -> CallOutcome:
        """A repeat call compiled after all (JAX saw it): its compiles are recorded at its step,
        and its time is not a steady step."""
        stats, call = self.phases[phase], self.calls[phase]
        assert call.signature is not None  # a repeat repeats a call that began with batches
        outcome = CallOutcome()
        if stats.repeats:
            stats.repeats[-1][2] = False
        cause, why = known_signature_cause(call, stats, observation)
        for i, module_seconds in enumerate(observation.modules):
            self.compiled(
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
                    cause=cause,
                    why=why,
                    outside_step=observation.program(i),
                ),
                outcome,
            )
        return outcome

    # ---------------------------------------------------------------- step times

    def trial_ended(self, trial: Trial, revised: bool = False) -> None:
        """The trial decided (or the fit ended, or its XLA-on decision was revised to off): the train
        phase's steady median starts again from the kept mode's measured steps, so the report describes
        the steps that run now."""
        if self.trial is not trial and not revised:
            return
        self.trial = None
        timing = self.phases["train"].timing = PhaseTiming()
        for seconds, steps in zip(trial.samples[trial.on], trial.sample_steps[trial.on]):
            if self.between_drains:
                timing.add_interval(seconds, steps)
            else:
                timing.add_steady(seconds)

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
        last = len(done) - 1
        times = [
            (stop - start, step)
            for i, ((start, step, steady), stop) in enumerate(zip(done, ends))
            if steady and (timed or end is None or i < last)
        ]
        self.steady_steps(phase, stats, times, 1, self.calls[phase].signature, scalars)
        return scalars

    def steady_step(
        self,
        phase: str,
        stats: PhaseStats,
        per_step: float,
        step: int,
        n: int,
        signature: Optional[InputSignature],
        scalars: List[Scalar],
    ) -> None:
        """One call's time per batch, for the steady median (or a slow step); ``step``: its last. (The
        TensorFlow path, once per step: ``steady_steps`` with one time, without its runs.)"""
        if self.between_drains:
            self._host_steps(phase, stats, [(per_step, step)], n, signature)
        elif self.trial is not None and phase == "train":
            self.steady_steps(phase, stats, [(per_step, step)], n, signature, scalars)
        elif per_step > stats.timing.slow_above():
            self._slow(phase, stats, per_step, step, n, signature)
        else:
            stats.timing.add_steady(per_step)
            stats.add_to_run(per_step, n)  # the epoch's mean steady step (its scalar)
            if stats.after_switch is not None:
                stats.after_switch.add_steady(per_step)
            every = self.steps_per_scalar
            if every is not None and step % every < n:
                scalars.append(Scalar(phase, TAG_STEP_TIME, 1e3 * per_step, step))

    def steady_steps(
        self,
        phase: str,
        stats: PhaseStats,
        times: List[Tuple[float, int]],
        n: int,
        signature: Optional[InputSignature],
        scalars: List[Scalar],
    ) -> None:
        """Calls' times per batch with the step each ended at (``n`` batches a call), in order: the
        steady median's samples, or slow steps. Added in runs that share one median (the repeats drain
        64 at a time), with the same outcome as one by one."""
        if self.between_drains:
            self._host_steps(phase, stats, times, n, signature)
            return
        every = self.steps_per_scalar
        if self.trial is not None and phase == "train":
            # jit='fastest' is measuring both modes: the phase's median (and its slow steps) would mix
            # them; it starts again from the kept mode's steps when the trial ends (trial_ended).
            for per_step, step in times:
                self.trial.add(step, per_step)
                stats.add_to_run(per_step, 1)  # the run's interval is dropped: its steps speak for the epoch
                if every is not None and step % every < n:
                    scalars.append(Scalar(phase, TAG_STEP_TIME, 1e3 * per_step, step))
            return
        timing, i = stats.timing, 0
        while i < len(times):
            run = times[i : i + timing.samples_before_refresh()]
            i += len(run)
            threshold, steady = timing.slow_above(), []  # type: float, List[float]
            for per_step, step in run:
                if per_step > threshold:
                    self._add_steady(stats, steady)
                    steady = []
                    self._slow(phase, stats, per_step, step, n, signature)
                    threshold = timing.slow_above()  # reading the median refreshed it
                    continue
                steady.append(per_step)
                if every is not None and step % every < n:
                    scalars.append(Scalar(phase, TAG_STEP_TIME, 1e3 * per_step, step))
            self._add_steady(stats, steady)

    def interval(self, phase: str, per_step: float, steps: int, step: int, scalars: List[Scalar]) -> None:
        """A clean interval between drains (JAX) ended at ``step``: ``steps`` steps of ``per_step`` seconds
        each on average. It is one sample of the steady step, weighing ``steps``; the step-time scalar is
        written here, at drains only (one point per interval: its mean)."""
        stats = self.phases[phase]
        if not self.between_drains:
            return  # TensorFlow times each step on its own: its steady step is their median (core/timing.py)
        if self.trial is not None and phase == "train":
            # jit='fastest' measures: under JAX an interval is the trial's sample, not the phase's.
            self.trial.add_interval(step, per_step, steps)
            return
        stats.add_to_run(per_step, steps)
        every = self.steps_per_scalar
        if self.between_drains and every is not None and (step // every) > ((step - steps) // every):
            scalars.append(Scalar(phase, TAG_STEP_TIME, 1e3 * per_step, step))
        stats.timing.add_interval(per_step, steps)
        if stats.after_switch is not None:
            stats.after_switch.add_interval(per_step, steps)
        if stats.slow_candidates and stats.timing.slow_above() < float("inf"):
            waiting, stats.slow_candidates = stats.slow_candidates, []
            for seconds, at, batches, signature in waiting:
                self._host_steps(phase, stats, [(seconds, at)], batches, signature)

    def judge_candidates(self, phase: str, base: float) -> None:
        """JAX: the host times kept before the steady step was known, judged against ``base`` (a step's
        time, from the interval they fell in): those far above it are slow steps."""
        stats = self.phases[phase]
        waiting, stats.slow_candidates = stats.slow_candidates, []
        threshold = max(SLOW_FACTOR * base, base + SLOW_MIN_EXCESS_SECONDS)
        for seconds, at, batches, signature in waiting:
            if seconds > threshold:
                self._slow(phase, stats, seconds, at, batches, signature, basis="host", steady=base)

    def _host_steps(
        self,
        phase: str,
        stats: PhaseStats,
        times: List[Tuple[float, int]],
        n: int,
        signature: Optional[InputSignature],
    ) -> None:
        """JAX: calls' host times (start to next start) against the steady step between drains. Far above it,
        the loop itself stalled on the step (its batch's pull, a callback, a collection): a slow step, timed
        on the host. Never a steady sample: the host time of a queued step is not its time."""
        threshold = stats.timing.slow_above()  # inf while no steady step is known
        for per_step, step in times:
            stats.interval.note_host(per_step, step)
            if per_step > threshold:
                self._slow(phase, stats, per_step, step, n, signature, basis="host")
            elif threshold == float("inf") and per_step > SLOW_MIN_EXCESS_SECONDS:
                # Judged once the first interval tells the steady step (a stall in the first run, say).
                if len(stats.slow_candidates) < SLOW_CANDIDATES:
                    stats.slow_candidates.append((per_step, step, n, signature))

    @staticmethod
    def _add_steady(stats: PhaseStats, values: List[float]) -> None:
        if not values:
            return
        stats.timing.add_steady_run(values)
        stats.add_to_run(sum(values) / len(values), len(values))
        if stats.after_switch is not None:
            stats.after_switch.add_steady_run(values)

    def _slow(
        self,
        phase: str,
        stats: PhaseStats,
        per_step: float,
        step: int,
        n: int,
        signature: Optional[InputSignature],
        basis: str = "step",
        steady: Optional[float] = None,
    ) -> None:
        stats.slow_count += 1
        median = stats.timing.median_seconds if steady is None else steady
        if len(stats.slow) < stats.max_records and median is not None and signature is not None:
            slow = SlowStep(phase, step - n + 1, per_step, median, signature, basis)
            call = self.calls.get(phase)
            if basis == "step" and call is not None:  # TensorFlow: the call's own parts are known
                slow.input_seconds, slow.between_seconds = call.pull / n, call.between / n
                slow.where = where_it_sat(per_step, slow.input_seconds, slow.between_seconds)
            stats.slow.append(slow)


def known_signature_cause(
    call: CallScratch, stats: PhaseStats, observation: CompileObservation
) -> Tuple[str, Optional[str]]:
    """(cause, words) of a compile at a signature the running function had compiled (``core/types.py``
    CAUSES): what the probe read (JAX: its tracing context or the arrays' placement changed), a value
    XLA takes as a constant (a value probe), a retrace, else the signature itself (auto-clustering
    compiles a known signature's cluster lazily, at its second request)."""
    if observation.cause is not None:
        return observation.cause, observation.why
    if call.value_probe:
        if stats.value_keys:
            return "value", stats.value_keys[0].why()
        return "value", (
            "XLA takes the ragged input's row splits as compile-time constants: it compiles again for each "
            "new set of row lengths"
        )
    if observation.traced:
        return "retrace", "the step function traced again at this signature (a new concrete function)"
    return "signature", None


def where_it_sat(seconds: float, input_seconds: float, between_seconds: float) -> str:
    """Where a slow step's time went (``SlowStep.where``): "input" (the input pipeline's wait), "between_steps"
    (Keras's loop and the other callbacks between two steps), or "step" (the step itself: the device, or the
    host busy), whichever part is the largest."""
    inside = seconds - input_seconds - between_seconds
    parts = {"input": input_seconds, "between_steps": between_seconds, "step": inside}
    return max(parts, key=lambda part: parts[part])
