"""The step path: what the backend's step wrapper reports, call by call (the monitor's ``call_*``
methods delegate here). Per step it does attribute reads and appends only; the session does the
counting, the probe the compile timing.

A call ends at its batch-end hook (TensorFlow) or when the next call of its phase begins (JAX: no
sync, start to start); calls still pending at a phase boundary are settled untimed.

JAX's steps are timed between drains (``core/timing.py``): the full path decides when the wrapper waits
for the device after a call (after a compile, a profiler window, and about once a second: never on the
steady lane), and at phase boundaries the monitor waits on the phase's last outputs itself.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Optional, Protocol, Sequence

from xla_keras.callback.fastest import FastestDriver
from xla_keras.callback.state import CallState
from xla_keras.core.signatures import describe
from xla_keras.core.types import PHASES, CallPlan
from xla_keras.report.model import Compilation
from xla_keras.session.recording import CallOutcome
from xla_keras.session.repeats import SteadyLane

# JAX: the monitor's own work at a call's start longer than this (a trace saved, a flush) spoils the open
# interval (its device time went on meanwhile, so subtracting it would be wrong); shorter, it is noise.
OWN_WORK_SPOILS_SECONDS = 0.002


class CallEvents(Protocol):
    """What the step path hands up: the monitor, given at construction, routes each to the part that
    acts on it (the storm action, the precompile), which sits above the step path."""

    def storm_opened(self, phase: str, step: int, count: int, window_start: int) -> None: ...

    def compiles_seen(self, phase: str, records: Sequence[Compilation]) -> None: ...


class StepPath:
    def __init__(self, state: CallState, fastest: FastestDriver, events: CallEvents):
        self.state = state
        self.fastest = fastest
        self.events = events
        self._plans: Dict[str, CallPlan] = {}
        # The plan of a repeat call (session/repeats.py): one per phase, made once.
        self._repeat_plans = {p: CallPlan(p, 0, 1, (), False) for p in PHASES}
        # The steady lanes (session/repeats.py): the JAX wrapper asks its phase's first, at every call.
        self.lanes: Dict[str, SteadyLane] = {p: SteadyLane() for p in PHASES}
        # JAX: the running call of each phase ends with the device drained (the wrapper waits after it).
        self._sync: Dict[str, bool] = dict.fromkeys(PHASES, False)
        self._compiled: Dict[str, bool] = dict.fromkeys(PHASES, False)  # the phase's last observed call compiled
        self._compiles_outside = 0  # the probe's count at the last drain
        self.active_probe: Optional[Any] = None  # the probe handle of the call running now

    def due(self, phase: str, now: float) -> bool:
        """The next call of ``phase`` begins at ``now``: the previous one ends there (start to start).
        True when that did work (ended a call, or jit='fastest' checked its trial)."""
        state = self.state
        worked = False
        if state.session.call_pending(phase):
            self.end_call(phase, now)
            worked = True
        if state.fastest is not None and phase == "train":
            self.fastest.due(now, (lambda: self._drain_now("train")) if state.ends_in_wrapper else None)
            worked = True
        return worked

    def _drain_now(self, phase: str) -> None:
        """JAX: wait for the phase's last call now (a jit='fastest' check: its block ends here)."""
        held = self.lanes[phase].held
        if held is not None:
            state = self.state
            self.drained(phase, state.session.clock() if state.backend.wait_for(held) else None)

    def disarm(self) -> None:
        """Every phase's steady lane stops and counts the calls it took: the full path decides the next
        calls, and whatever reads the session next finds every call counted (``session/repeats.py``)."""
        for lane in self.lanes.values():
            lane.disarm()

    def settle(self, phases: Iterable[str]) -> None:
        """A phase boundary: each phase's interval closes here (``core/timing.py``). JAX: calls still pending
        end untimed first (their end is not observable without a device sync: the wait includes what the
        device still had queued), then the monitor waits for the phase's last outputs (Keras has just
        drained, or is about to: it costs nothing)."""
        self.disarm()
        state = self.state
        session = state.session
        phases = tuple(phases)
        session.boundary(phases)
        now = session.clock()
        for phase in phases:
            at: Optional[float] = now
            if state.ends_in_wrapper:
                # The run's last call ends where it returned: its host time (a stall in its pull shows),
                # never the device's drain that follows.
                lane = self.lanes[phase]
                returned, lane.returned = lane.returned, None
                end, timed = (returned, True) if returned is not None else (now, False)
                scalars = session.drain(phase, end=end, timed=timed)
                if scalars:
                    state.sink.scalars(scalars)
                if session.call_pending(phase):
                    self.end_call(phase, max(end, session.calls[phase].start), timed=timed)
                held, lane.held = lane.held, None
                if held is not None:
                    at = session.clock() if state.backend.wait_for(held) else None
            if session.phases[phase].interval.open or at is None:
                self._spoil_if_compiled_outside()
                scalars = session.drained(phase, at, boundary=True)
                if scalars:
                    state.sink.scalars(scalars)

    def unobserved(self, phase: str) -> None:
        self.disarm()
        self.state.session.call_skipped(phase)  # e.g. train_on_batch's generator: nothing of ours to count

    def began(self, phase: str, batches: list, now: float, pulled: Optional[float] = None) -> Optional[Any]:
        """Batches pulled for one call (from ``now`` to ``pulled``) that the steady lane did not take.
        JAX: the previous call of the phase ends at ``now``. Returns a probe handle when this call must
        be probed, else None."""
        state = self.state
        sync_at = None
        pull = pulled - now if pulled is not None else 0.0
        if state.ends_in_wrapper:  # JAX (TensorFlow arms no lane, and its calls end at the batch-end hook)
            self.disarm()
            start = opens = now
            if self.due(phase, now):
                done = time.perf_counter()  # the monitor's work at the end of the last call is no step's time
                if done - (pulled or now) > OWN_WORK_SPOILS_SECONDS:
                    # Long enough to matter (a trace saved, a flush): the interval it fell in is no steady
                    # sample, and the next one opens after it.
                    state.session.interval_spoiled(phase, "the monitor's own work")
                    opens = done
                now = done
            session = state.session
            sync_at = session.interval_call(phase, opens)  # opens an interval if the device is idle
            # While compiles come back to back (a storm) no clean interval can begin: no wait for the device then
            # (each would hold the next compile back from running beside the device's step).
            storming = self._compiled[phase] and session.phases[phase].interval.spoiled == "compile"
            self._sync[phase] = (not storming and session.sync_wanted(phase, start)) or self._trial_sample_due(
                phase, start
            )
        if not state.observing:
            state.session.calls[phase].repeating = False
            return None
        current = state.current
        jit, session, sink = current.jit_state, current.session, current.sink
        signature = state.backend.signature
        signatures = [signature(b) for b in batches]
        session.sample_batches(phase, batches)  # a compare per batch; the values are read only for advice
        if state.ends_in_wrapper:  # JAX: the steady case first (a call ends when the next one begins)
            stats, probe = session.phases[phase], current.probe
            quiet = (
                current.traces.quiet_steps(
                    phase,
                    stats.step,
                    stats.last_new_step,
                    sink.log_dir if sink.writes else None,
                    state.dist.multi_worker,
                )
                if len(signatures) == 1 and probe is not None
                else 0
            )
            scalars = session.repeats.count(phase, signatures[0], jit, now) if quiet and probe is not None else None
            if scalars is not None and probe is not None:
                if scalars:
                    sink.scalars(scalars)
                if sink.due():
                    state.flush()
                self._plans[phase] = self._repeat_plans[phase]
                if state.fastest is None and not self._sync[phase]:  # jit='fastest' checks at steps of its own
                    deadline = sink.due_at() if sync_at is None else min(sink.due_at(), sync_at)  # the next sync
                    session.repeats.arm_lane(self.lanes[phase], phase, batches[0], quiet - 1, deadline)
                self.active_probe = probe.start(self._plans[phase], jit)  # a compile there is seen
                return self.active_probe
            scalars = session.drain(phase, end=now)  # the repeats before this call end where it starts
            if scalars:
                sink.scalars(scalars)
        plan = session.call_began(phase, signatures, jit, now, pull)
        self._plans[phase] = plan
        stats = session.phases[phase]
        free_probe = state.backend.probes_every_call  # JAX: its events cost nothing, every call is seen
        if plan.new and state.ends_in_wrapper:  # it compiles: its interval is no steady one, the next starts after it
            session.interval_spoiled(phase, "compile")
            self._sync[phase] = self._sync[phase] or not self._compiled[phase]
        if plan.new:
            # the new batches' shapes, for an analysis off the step path
            current.costs.capture(phase, plan, batches, session.ledger.function(phase))
            if not state.dist.default:
                self._note_per_device(phase, batches[plan.new[0][0]], plan.new[0][2])
        if current.traces.maybe_start(
            phase,
            stats.step,
            plan.batches,
            bool(plan.new),
            stats.last_new_step,
            sink.log_dir if sink.writes else None,
            state.dist.multi_worker,
        ):
            session.call_in_trace_window(phase)
            if state.ends_in_wrapper:  # a profiled step is slower: out of the steady intervals
                session.interval_spoiled(phase, "profiler window")
                # The window's last call waits for the device, so that the trace holds its steps' device work.
                window = current.traces.open
                if window is not None and stats.step + plan.batches >= window["stop_step"]:
                    self._sync[phase] = True
            if not free_probe:
                return None
        if not (plan.probe or free_probe) or current.probe is None:
            return None
        began = session.clock()
        self.active_probe = current.probe.start(plan, jit)
        session.own_work("probes", session.clock() - began)
        if self.active_probe is None and plan.new:  # rare: a new signature the probe cannot time
            facts = current.probe.facts
            session.call_unprobed(phase, "profiler_busy" if facts.busy else "probes_off" if facts.off else "unprobed")
        return self.active_probe

    def _note_per_device(self, phase: str, batch: Any, signature: Any) -> None:
        state = self.state
        words = state.backend.per_device(batch, signature)
        if words:
            state.session.notes.add_once(
                f"per-device-{phase}",
                (
                    f"{phase}: under {state.dist.name} over {state.dist.replicas} devices each device gets "
                    f"{words} (the first new signature; XLA compiles the step once for all devices)"
                ),
            )

    def ran(self, phase: str, handle: Optional[Any]) -> bool:
        """The call returned: stop its probe and record what it saw (a call the lane took: the compile
        events the wrapper caught, recorded at its step). True: the wrapper waits for the device now
        (JAX: ``drained`` follows)."""
        sync, self._sync[phase] = self._sync[phase], False
        if handle is None:
            return sync
        state = self.state
        current = state.current
        try:
            probe = current.probe
            assert probe is not None  # the handle came from it
            began = current.session.clock()
            observation = probe.stop(handle, self._plans[phase], current.jit_state)
            current.session.own_work("probes", current.session.clock() - began)
        finally:
            self.active_probe = None
        compiled = observation is not None and bool(observation.modules)
        if compiled and state.ends_in_wrapper:
            # The next interval starts after this call: the wrapper waits for the device once. Not when the call
            # before compiled too (a storm): no clean interval comes between compiles, and each wait would hold
            # the next compile back from running beside the device's step (a serialised storm, measured: ~0.3 s
            # over 14 compiles of 15 ms steps).
            state.session.interval_spoiled(phase, "compile")
            sync = sync or not self._compiled[phase]
        self._compiled[phase] = compiled
        if self._plans[phase] is self._repeat_plans[phase]:
            if observation is not None:  # a repeat compiled after all: record it now, at its step
                self.disarm()  # (counting the calls the lane took first: it may be one of them)
                self.apply(phase, state.session.repeat_observed(phase, observation))
            return sync
        state.session.call_observed(phase, observation)
        if observation is not None and (observation.traced or self._plans[phase].new):
            self._read_value_keys(phase)
        return sync

    def _read_value_keys(self, phase: str) -> None:
        """After a call that traced: the inputs XLA takes as compile-time constants whose values the step
        computes (``jit/value_keys.py``), read once per trace where XLA compiles the whole step."""
        state = self.state
        current = state.current
        signature = current.session.calls[phase].signature
        if current.jit_state is None or not current.jit_state.active or signature is None:
            return
        keys = state.backend.value_keys(state.model, phase, signature)
        if keys:
            current.session.value_keyed(phase, keys)

    def drained(self, phase: str, at: Optional[float]) -> None:
        """JAX: the wrapper waited for the device after a call, and it was done at ``at`` (None: the
        wait failed). The phase's interval closes there; the next one opens at once."""
        state = self.state
        self.disarm()  # the calls the lane took belong to the interval that closes
        self._spoil_if_compiled_outside()
        scalars = state.session.drained(phase, at)
        if scalars:
            state.sink.scalars(scalars)

    def _spoil_if_compiled_outside(self) -> None:
        """Before an interval closes: a compile outside the step calls since the last drain (JAX compiles
        Keras's metrics and eager ops at the first run's end) took wall time that is no step's, and its
        length is not known apart from its events: the open intervals give no sample."""
        probe = self.state.current.probe
        count = probe.compiles_outside if probe is not None else 0
        if count != self._compiles_outside:
            self._compiles_outside = count
            for phase in PHASES:
                self.state.session.interval_spoiled(phase, "a compile outside the steps")

    def _trial_sample_due(self, phase: str, now: float) -> bool:
        """jit='fastest' measuring on JAX: its samples are shorter intervals (``jit.trial``)."""
        run = self.state.fastest
        if run is None or phase != "train" or not run.trial.running:
            return False
        return run.trial.sample_due(self.state.session.phases["train"], now)

    def abandon_probe(self, handle: Optional[Any]) -> None:
        """Stop ``handle`` (a call's probe) without reading it; ``None``: nothing to stop."""
        state = self.state
        if handle is not None and state.probe is not None:
            state.probe.abandon(handle)
        if handle is self.active_probe:
            self.active_probe = None

    def end_call(self, phase: str, now: Optional[float] = None, timed: bool = True) -> None:
        state = self.state
        current = state.current
        outcome = current.session.call_ended(phase, current.jit_state, now, timed=timed)
        if outcome is not None:
            run = state.fastest
            if run is not None and phase == "train":
                run.trial.called(outcome.seconds)
                if outcome.compiles and current.jit_state.active:
                    run.trial.new_shape_step(
                        current.session.phases["train"].step, outcome.seconds, len(outcome.compiles)
                    )
            self.apply(phase, outcome)
            if not state.ends_in_wrapper:  # TensorFlow: the next step's time starts after the monitor's work
                current.session.after_own_work(phase, current.session.clock())

    def apply(self, phase: str, outcome: CallOutcome) -> None:
        """What a call added: scalars, the trace window's end, compiles, a storm, a periodic flush."""
        state = self.state
        current = state.current
        sink = current.sink
        if outcome.scalars:
            sink.scalars(outcome.scalars)
        if current.traces.open is not None:
            current.traces.after_step(phase, current.session.phases[phase].step)
        if outcome.compiles:  # events at once; the report file at most once a second (storms compile a lot)
            for i, record in enumerate(outcome.compiles):
                current.cache_account.record(phase, describe(record.signature), i, record.seconds, record.cached)
            state.flush(report=sink.report_due())
            if phase in current.session.precompile:
                self.events.compiles_seen(phase, outcome.compiles)
        if outcome.storm is not None:
            self.events.storm_opened(phase, *outcome.storm)
        if sink.due():
            state.flush()
