"""Per-phase state of one report, and the frozen snapshots reports are built from. Pure.

Per phase there are two kinds of state: ``PhaseStats`` lives as long as the report (steps, timing,
shape history, compile accounting, records), and ``CallScratch`` is one call's working set (its
batches, which are new, what the probe saw), reset at the next call. Everything is bounded:
counters, fingerprints of distinct signatures, capped records, ring buffers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from xla_keras.core.signatures import InputSignature
from xla_keras.core.tags import TAG_STEADY_STEP_TIME, TAG_STEP_TIME
from xla_keras.core.timing import BETWEEN_DRAINS, PER_STEP, DrainedInterval, PhaseTiming
from xla_keras.core.types import MEASURED, CompileObservation, Scalar
from xla_keras.jit.value_keys import VALUE_PROBE_EVERY, VALUE_PROBE_MISSES, ValueKey
from xla_keras.report.model import Compilation, SlowStep
from xla_keras.storms.budget import PhaseAdvice
from xla_keras.storms.detection import ShapeHistory, Storm
from xla_keras.storms.lengths import BatchSample, SampleView


@dataclass
class Waits:
    """What a phase waited for outside its steps' own work: the input pipeline (the step wrapper pulls
    each call's batches, so it times the pull), and each run's start (from its begin hook to its first
    call: Keras makes the epoch's data iterator and releases the last one there, and other callbacks'
    begin hooks run)."""

    input_seconds: float = 0.0
    longest_input: float = 0.0
    run_start_seconds: float = 0.0
    run_starts: int = 0  # runs whose start was measured
    longest_run_start: float = 0.0
    longest_run_start_step: int = 0  # the first step of that run

    def to_dict(self) -> Dict[str, float]:
        return dataclasses.asdict(self)


class PhaseStats:
    """One phase over the report's life: steps, timing, shapes, compile accounting, records."""

    def __init__(self, max_records: int):
        self.timing = PhaseTiming()
        self.history = ShapeHistory()
        self.sample = BatchSample()  # a bounded reservoir of host batches, for real lengths
        self.view: Optional[SampleView] = None  # the sample as last measured (storm open, fit end)
        self.step = 0  # global 1-based step of the last batch run
        self.steps_run = 0  # batches run under the monitor
        self.runs = 0  # epochs (train) or validation / evaluate / predict runs ended
        self.last_new_step = 0
        self.pending_storm: Optional[Tuple[int, int, int]] = None  # (step, count, window_start)
        self.deferred_new: Optional[int] = None  # step of a smaller new batch, maybe the last
        self.usual_rows: Optional[int] = None
        self.compile_count = 0
        self.ragged_fps: set = set()  # fingerprints of ragged signatures (bounded by the distinct ones)
        # Inputs XLA takes as compile-time constants whose values the step computes (jit/value_keys.py):
        # known signatures may compile again, so calls are probed (``value_probe_due``).
        self.value_keys: Tuple[ValueKey, ...] = ()
        self.value_misses = 0  # value probes in a row that saw no compile
        self.value_skipped = 0  # calls not probed since the last value probe, once probes back off
        self.value_compiles = 0  # compiles at known signatures caused by values (split values, value keys)
        self.known_signature_compiles = 0  # compiles at a known signature, whatever their cause
        self.last_known_cause: Optional[Tuple[str, Optional[str]]] = None  # (cause, words) of the last one
        self.measured_seconds = 0.0  # compiles timed by a probe
        # Modules of a one-off program, not the step's (``Compilation.outside_step``): counted in
        # compile_count and measured_seconds too (a probe always times them).
        self.outside_compiles = 0
        self.outside_seconds = 0.0
        self.timing_step_share = 0.0  # sum of step_seconds / call_compiles of timing estimates
        self.timing_batch_share = 0.0  # sum of call_batches / call_compiles of timing estimates
        self.records: List[Compilation] = []
        self.records_dropped = 0
        self.max_records = max_records
        self.slow: List[SlowStep] = []
        self.slow_count = 0
        # JAX: (host seconds, step, batches, signature) of calls that may be slow, before the steady step is known
        self.slow_candidates: List[Tuple[float, int, int, Optional[InputSignature]]] = []
        self.epoch_steady_sum = 0.0
        self.epoch_steady_n = 0
        self.rebuilds = 0  # step functions rebuilt outside the monitor
        self.after_switch: Optional[PhaseTiming] = None  # steady steps since a storm fallback (non-XLA)
        # Repeat calls counted but not yet timed: [start, step, steady] (bounded: drained at REPEAT_DRAIN).
        self.repeats: List[list] = []
        self.call_base: Optional[CallBase] = None  # where the phase stood when the running call began
        # JAX: the open interval between drains (core/timing.py), and whether the device is known to hold
        # nothing of this phase (after a drain: the next call may open an interval at its start).
        self.interval = DrainedInterval()
        self.idle = True
        self.waits = Waits()
        self.run_began_at: Optional[float] = None  # a run's begin hook, until its first call begins
        self.run_opened: Optional[float] = None  # the running run's begin hook
        self.last_run_seconds = 0.0  # the last run's wall time, begin hook to end
        self.own_at_run_begin = 0.0  # the monitor's own work (``OwnTime.total``) when the running run began

    def value_probe_due(self, fingerprint: int) -> bool:
        """Whether a batch of a known signature should be probed for a compile a value causes: the
        phase's step holds value keys, or the signature is ragged (XLA takes row splits as constants).
        Every call while probes keep finding compiles; after ``VALUE_PROBE_MISSES`` misses in a row,
        one call in ``VALUE_PROBE_EVERY`` (a compile, or a slow step, brings every call back)."""
        if not self.value_keys and fingerprint not in self.ragged_fps:
            return False
        if self.value_misses < VALUE_PROBE_MISSES:
            return True
        self.value_skipped += 1
        if self.value_skipped >= VALUE_PROBE_EVERY:
            self.value_skipped = 0
            return True
        return False

    def call_began(self) -> None:
        """A fit, evaluate or predict begins: the compile budget judges the phase from here."""
        self.call_base = CallBase(
            self.compile_count,
            self.compile_seconds(),
            self.steps_run,
            self.step,
            len(self.records),
            self.records_dropped,
            self.history.mark(),
            self.outside_compiles,
            self.outside_seconds,
        )

    def add_record(self, record: Compilation) -> None:
        self.compile_count += 1
        if record.outside_step is not None:
            self.outside_compiles += 1
            self.outside_seconds += record.seconds
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
        """Exact total; timing estimates use the current steady step."""
        median = self.timing.estimate_base or 0.0
        return self.measured_seconds + max(0.0, self.timing_step_share - median * self.timing_batch_share)

    def take_view(self, version: int) -> None:
        """Freeze what the sample holds now (``version``: the session's count of views taken)."""
        sample = self.sample
        self.view = SampleView(tuple(sample.kept), sample.seen, version, sample.reason_unsampled())

    def uncount_repeat(self) -> None:
        """The last repeat call failed: it was counted when it began, and it did not run."""
        if self.repeats:
            self.repeats.pop()
        self.step -= 1
        self.steps_run -= 1
        if self.history.last is not None:
            self.history.batches[self.history.last] -= 1

    def end_of_run(self, phase: str, update_freq: object) -> List[Scalar]:
        """An epoch (train) or a validation / evaluate / predict run ended: its scalars."""
        self.runs += 1
        self.history.end_of_run()
        self.deferred_new = None  # it was the partial last batch of the run
        for record in reversed(self.records):  # the run's last step compiled: say so in the ledger
            if record.step != self.step:
                break
            record.last_batch = True
        scalars = []
        if update_freq == "epoch" and self.epoch_steady_n:
            scalars.append(Scalar(phase, TAG_STEP_TIME, 1e3 * self.epoch_steady_sum / self.epoch_steady_n, self.step))
        median = self.timing.median_seconds
        if median is not None:  # withheld (no number) while unknown
            scalars.append(Scalar(phase, TAG_STEADY_STEP_TIME, 1e3 * median, self.step))
        self.epoch_steady_sum, self.epoch_steady_n = 0.0, 0
        return scalars

    def add_to_run(self, seconds_per_step: float, steps: int) -> None:
        """Steady steps of the running run (epoch), for its step_time scalar."""
        self.epoch_steady_sum += seconds_per_step * steps
        self.epoch_steady_n += steps

    def steady_withheld(self, between_drains: bool) -> Optional[str]:
        """Why the phase has no steady step while it ran steps, or None (it has one, or ran nothing)."""
        if self.timing.median_seconds is not None or not self.steps_run:
            return None
        if not between_drains:
            return "every step compiled, was probed or ran in a profiler window"
        if self.interval.open or not self.timing.interval_count:
            return (
                "no interval between drains yet: under asynchronous dispatch a step's time is known once the "
                "device has drained (at the run's end, or the monitor's next sync, about once a second)"
            )
        return "every interval between drains held a compile, a profiler window or a switch of the step function"

    def snapshot(self, between_drains: bool = False) -> PhaseSnapshot:
        median = self.timing.estimate_base
        # Timing estimates use the final steady median: new records, never the stored ones changed.
        records = tuple(
            dataclasses.replace(r, seconds=r.estimate_from(median)) if r.source == "timing" else r for r in self.records
        )
        return PhaseSnapshot(
            self.steps_run,
            self.compile_count,
            self.compile_seconds(),
            self.timing.median_seconds,
            self.timing.median_samples,
            records,
            self.records_dropped,
            tuple(self.slow),
            self.slow_count,
            self.value_compiles,
            self.rebuilds,
            self.history,
            self.timing.basis if not between_drains else BETWEEN_DRAINS,
            self.timing.median_intervals,
            self.steady_withheld(between_drains),
            self.value_keys,
            dataclasses.replace(self.waits),
            self.outside_compiles,
            self.outside_seconds,
        )


@dataclass(frozen=True)
class CallBase:
    """A phase as it stood when a fit, evaluate or predict began: the compile budget judges one call."""

    compiles: int
    compile_seconds: float
    steps_run: int
    step: int
    records: int
    records_dropped: int
    history: Tuple[Dict[int, int], Dict[int, int], int]  # ShapeHistory.mark()
    outside_compiles: int = 0
    outside_seconds: float = 0.0


@dataclass
class CallScratch:
    """One call's working set, reset when the next call begins."""

    start: float = 0.0
    batches: int = 0
    new: List[Tuple[int, InputSignature, str]] = field(default_factory=list)  # (step, signature, cause)
    probe_signature: Optional[Tuple[int, InputSignature]] = None
    signature: Optional[InputSignature] = None  # the last batch's
    value_probe: bool = False  # known signatures probed for compiles a value causes
    in_trace_window: bool = False
    unprobed: Optional[str] = None  # why a call with new signatures had no probe (ESTIMATED_BECAUSE's keys)
    observation: Optional[CompileObservation] = None
    fingerprint: Optional[int] = None  # the last batch's, for the repeat fast path
    repeating: bool = False  # the last call took the repeat fast path
    # TensorFlow: the last call's end (its batch-end hook), where the next call's step time starts: a step
    # is timed from one batch end to the next, Keras's loop and the other callbacks included. None after a
    # phase boundary (the next call is timed from its own start).
    last_end: Optional[float] = None
    synced: bool = False  # JAX: the monitor waited for the device after this call: its host time includes that
    pull: float = 0.0  # the call's wait for the input pipeline (the wrapper's pull)
    between: float = 0.0  # TensorFlow: from the last batch end to this call's start (Keras's loop, callbacks)


# What the monitor's own work is (``OwnTime``): never a step's time, stated in the report.
OWN_WORK = ("traces", "writes", "cost", "probes")


class OwnTime:
    """The monitor's own work, in seconds by kind (``OWN_WORK``): trace windows started, stopped and saved,
    files written, programs analysed, compile probes started and stopped. It is kept out of every step
    figure (the step path starts the next step's time after it) and stated in the report."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = dict.fromkeys(OWN_WORK, 0.0)

    def add(self, kind: str, seconds: float) -> None:
        self.seconds[kind] = self.seconds.get(kind, 0.0) + max(0.0, seconds)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def view(self) -> Dict[str, float]:
        return {**self.seconds, "total": self.total}


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


def fallback_began(phase: str, step: int, reason: str, phases: Dict[str, PhaseStats], cause: str = "storm") -> dict:
    """A fallback switched XLA off (``cause``: "storm", or "unsupported": an op XLA cannot compile): from
    now on each phase's steady steps are also timed apart (the report compares them with the XLA steps
    before)."""
    fallback = {
        "phase": phase,
        "step": step,
        "reason": reason,
        "cause": cause,
        "xla_steady_step_seconds": {p: s.timing.compare_seconds for p, s in phases.items()},
        "xla_steady_steps": {p: s.timing.compare_samples for p, s in phases.items()},
        "steps_at_switch": {p: s.steps_run for p, s in phases.items()},
    }
    for stats in phases.values():
        stats.after_switch = PhaseTiming()
        stats.timing = PhaseTiming()  # the report's steady step describes the steps that run now
    return fallback


def fallback_view(fallback: Optional[dict], phases: Dict[str, PhaseStats]) -> Optional[dict]:
    """A storm fallback as the report shows it: with each phase's steady step since the switch."""
    if not fallback:
        return None
    view = dict(fallback)
    view["steady_step_seconds_after"] = {
        p: (s.after_switch.compare_seconds if s.after_switch is not None else None) for p, s in phases.items()
    }
    view["steady_steps_after"] = {
        p: (s.after_switch.compare_samples if s.after_switch is not None else 0) for p, s in phases.items()
    }
    at_switch = fallback.get("steps_at_switch") or {}
    view["steps_after"] = {p: s.steps_run - at_switch.get(p, s.steps_run) for p, s in phases.items()}
    return view


@dataclass(frozen=True)
class PhaseSnapshot:
    steps: int
    compile_count: int
    compile_seconds: float
    steady_seconds: Optional[float]
    steady_count: int  # the steady steps the median rests on (the kept mode's, after jit='fastest')
    records: Tuple[Compilation, ...]
    records_dropped: int
    slow: Tuple[SlowStep, ...]
    slow_count: int
    value_compiles: int
    rebuilds: int
    history: ShapeHistory  # read-only for the report's notes (partial batches, train vs validation)
    steady_basis: str = PER_STEP  # how the steady step was measured (core/timing.py BASES)
    steady_intervals: int = 0  # the drained intervals it rests on (between_drains)
    steady_withheld: Optional[str] = None  # why there is no steady step though steps ran
    value_keys: Tuple[ValueKey, ...] = ()  # inputs XLA takes as constants whose values the step computes
    waits: Optional[Waits] = None
    outside_compiles: int = 0  # modules of one-off programs, not the step's (in compile_count too)
    outside_seconds: float = 0.0


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
    own_seconds: Optional[Dict[str, float]] = None  # the monitor's own work by kind, and its total
    precompile: Optional[Dict[str, dict]] = None  # per phase: its precompile (session/session.py Session.precompiled)
