"""Storms under TensorFlow's MultiWorkerMirroredStrategy: every worker raises or falls back at one step.

Each worker reads and pads its own shard, so a storm can open on one worker only, at its own step.
Acting there alone (stopping, or rebuilding the step function without XLA) would leave the others
waiting in the step's collective. So a storm's raise or fallback waits (``StormAction.pending``) for
the next *agreement step*: every ``AGREE_EVERY_STEPS`` train batches (counted by Keras's batch-end
hook, which every worker runs at every batch, whatever its monitor observes) and at each epoch's
end. There every worker gathers (``Backend.gather``: the strategy's all-gather, ~3 ms on 2 CPU
workers) whether it has a storm pending, and all act on the first worker's, whether or not they have
one of their own. Only in a fit: a storm in a standalone evaluate or predict there warns.
"""

from __future__ import annotations

from xla_keras.callback.state import CallState
from xla_keras.callback.storm_action import StormAction
from xla_keras.core.types import PHASES

AGREE_EVERY_STEPS = 50  # a storm waits at most this many train batches; ~3 ms each time (<0.1 ms a step)


class StormAgreement:
    def __init__(self, state: CallState, action: StormAction):
        self.state = state
        self.action = action
        self.batches = 0  # train batches of this fit: the same count in every worker
        self.on = False  # this fit's workers agree (read by the batch-end hook: one attribute a step)

    def fit_began(self) -> None:
        """After the fit's set-up (its distribution known)."""
        self.batches = 0
        self.action.pending = None
        self.on = self.needed()

    def needed(self) -> bool:
        """A storm may have to act in every worker (the same answer in each: one program, one config)."""
        return self.state.config.on_storm != "warn" and self.action.deferred()

    def batch_ended(self) -> None:
        """Keras's train batch-end hook (TensorFlow), while ``on``: every ``AGREE_EVERY_STEPS`` batches, agree."""
        self.batches += 1
        if self.batches % AGREE_EVERY_STEPS == 0:
            self.agree()

    def agree(self) -> None:
        """At a point every worker reaches in a fit: the first worker's pending storm, acted on by all."""
        if not self.needed() or not self.state.in_fit:
            return
        pending = self.action.pending
        row = [float(PHASES.index(pending.phase)), float(pending.step)] if pending else [-1.0, 0.0]
        rows = self.state.backend.gather(row)
        first = next(((worker, r) for worker, r in enumerate(rows or []) if r[0] >= 0), None)
        if first is not None:
            worker, (phase, step) = first
            self.action.agreed(worker, PHASES[int(phase)], int(step))
