"""Repeat calls: the step path's steady case, counted at once and timed in bulk. Pure.

A one-batch call whose signature is the last call's, known to the function that runs (no compile,
no storm, nothing to probe), is counted by ``Repeats.count`` (step, batch counts, ledger) and only
its start is kept: its time is the next call's start minus its own, taken in bulk later
(``Session.drain``, at most ``REPEAT_DRAIN`` waiting).

Once a call was counted so, the step path arms the wrapper's ``SteadyLane`` for as many calls as
nothing else can be due: no profiler window opening, no pick of the length sample, no drain, no
periodic flush. The JAX step wrapper asks the lane first: a call whose batch ``SameShapes.matches``
the armed one only leaves its start time there, and the lane counts the calls it took exactly as
``count`` would have (at their steps, in order) when it disarms. Anything else (a new shape, a
phase boundary, an error, a compile, a switch of the function) disarms it: the full path decides.
Measured (docs/benchmarks.md): before the lane a steady step's bookkeeping cost 8-9 us
alone and added 65-95 us to a 0.25-0.3 ms jitted step inside a fit; with it, 2 us alone and 12-45 us.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from xla_keras.core.signatures import InputSignature, SameShapes
from xla_keras.core.types import Scalar
from xla_keras.jit.modes import JitState
from xla_keras.session.ledger import CompileLedger
from xla_keras.session.phases import CallScratch, PhaseStats, WallClock

# Repeats are timed in bulk once this many are waiting.
REPEAT_DRAIN = 64


class Repeats:
    """The repeat calls of one session's phases, and their lanes."""

    def __init__(
        self,
        phases: Dict[str, PhaseStats],
        calls: Dict[str, CallScratch],
        ledger: CompileLedger,
        wall: WallClock,
        drain: Callable[[str], List[Scalar]],
    ):
        self.phases, self.calls, self.ledger, self.wall = phases, calls, ledger, wall
        self._drain = drain

    def known(self, phase: str, signature: InputSignature, jit: JitState) -> bool:
        """The batch has the last batch's signature, known to the current function, not ragged, with
        no partial batch pending, no auto-clustering probes and no value keys (``jit/value_keys.py``):
        counted as such in the ledger (True),
        or nothing is counted (False: the caller observes it in full)."""
        stats, call = self.phases[phase], self.calls[phase]
        return (
            call.signature is not None
            and stats.deferred_new is None
            and not jit.autoclustering
            and not stats.value_keys
            and signature == call.signature
            and self.ledger.repeat(phase, call.fingerprint, stats.ragged_fps)
        )

    def count(self, phase: str, signature: InputSignature, jit: JitState, start: float) -> Optional[List[Scalar]]:
        """A one-batch call (JAX's step wrapper), when it is ``known`` and no call is pending: counted
        now. None: take the full path (``Session.call_began``). Else the scalars of repeats timed now
        (usually none)."""
        stats, call = self.phases[phase], self.calls[phase]
        if call.batches or call.in_trace_window or not self.known(phase, signature, jit):
            return None
        call.repeating = True
        stats.history.observe_repeat(signature)
        stats.step += 1
        stats.steps_run += 1
        self.wall.last_activity = start
        stats.repeats.append([start, stats.step, True])
        if len(stats.repeats) > REPEAT_DRAIN:
            return self._drain(phase)
        return []

    def arm_lane(self, lane: "SteadyLane", phase: str, batch: object, budget: int, deadline: float) -> None:
        """After ``count`` counted ``batch``'s call: ``lane`` takes the next calls like it, at most
        ``budget`` of them (fewer if the repeats drain or the length sample picks first), while they
        start before ``deadline``."""
        stats = self.phases[phase]
        budget = min(budget, REPEAT_DRAIN - len(stats.repeats), stats.sample.batches_before_pick())
        fingerprint = self.calls[phase].fingerprint
        lane.arm(batch, stats, self.wall, fingerprint, self.ledger.occurrences(phase), budget, deadline)


def _never(batch: Any) -> bool:
    return False  # a disarmed lane's shape test


class SteadyLane:
    """One phase's lane for one step wrapper (JAX): ``take`` is all a steady step does. The calls it
    takes are counted when it disarms (``disarm``, at the next call of the full path, a phase boundary,
    a failure, a flush): until then only their start times are kept, at most ``budget`` of them."""

    __slots__ = (
        "budget",
        "starts",
        "pulls",
        "longest_pull",
        "held",
        "returned",
        "_deadline",
        "_matches",
        "_stats",
        "_fp",
        "_occurrences",
        "_wall",
    )

    def __init__(self) -> None:
        self.budget = 0  # calls it may still take; 0: disarmed
        self.starts: List[float] = []  # the calls taken since it armed (their start times)
        self.pulls = 0.0  # the input pipeline's wait over the calls taken, added up when it disarms
        self.longest_pull = 0.0
        # The phase's last call's outputs, whoever ran it (JAX: what the monitor waits on to drain the
        # device at a sync or a phase boundary; dropped at the boundary). One reference, replaced per call.
        self.held: Any = None
        # When that call returned (JAX: dispatched): the host's end of a run's last call, whose next start
        # never comes (the device's drain at the boundary is not its time).
        self.returned: Optional[float] = None
        self._deadline = 0.0
        self._matches: Callable[[Any], bool] = _never
        self._stats: Optional[PhaseStats] = None
        self._fp = 0
        self._occurrences: Dict[int, int] = {}  # the ledger's counts for the phase's function
        self._wall: Optional[WallClock] = None

    def arm(
        self,
        batch: Any,
        stats: PhaseStats,
        wall: WallClock,
        fingerprint: Optional[int],
        occurrences: Dict[int, int],
        budget: int,
        deadline: float,
    ) -> None:
        """The next ``budget`` calls that start before ``deadline`` and match ``batch`` are taken here."""
        self.disarm()
        if budget <= 0 or fingerprint is None or stats.history.last != fingerprint:
            return
        same = SameShapes.of(batch)
        if same is None:
            return
        self._matches, self._stats, self._wall = same.matches, stats, wall
        self._fp, self._occurrences = fingerprint, occurrences
        self._deadline, self.budget = deadline, budget

    def take(self, batch: Any, now: float, pulled: Optional[float] = None) -> bool:
        """Take this one-batch call (True), or leave it to the full path (False: the lane disarms).
        ``pulled``: when the batch's pull ended (its wait for the input pipeline began at ``now``)."""
        if now < self._deadline and self._matches(batch):
            self.starts.append(now)
            self.budget -= 1
            if pulled is not None:
                waited = pulled - now
                self.pulls += waited
                if waited > self.longest_pull:
                    self.longest_pull = waited
            return True
        self.disarm()
        return False

    def disarm(self) -> None:
        """Stop, and count the calls taken as ``Repeats.count`` counts each (in order, at their steps)."""
        self.budget = 0
        starts, stats = self.starts, self._stats
        if not starts or stats is None:
            return
        taken, first = len(starts), stats.step + 1
        stats.repeats.extend([start, first + i, True] for i, start in enumerate(starts))
        stats.step += taken
        stats.steps_run += taken
        stats.history.batches[self._fp] += taken
        self._occurrences[self._fp] += taken
        stats.sample.seen += taken  # the lane stops short of the sample's next pick (its budget)
        stats.waits.input_seconds += self.pulls
        stats.waits.longest_input = max(stats.waits.longest_input, self.longest_pull)
        self.pulls = self.longest_pull = 0.0
        if self._wall is not None:
            self._wall.last_activity = starts[-1]
        starts.clear()
