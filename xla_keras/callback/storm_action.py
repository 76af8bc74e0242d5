"""What the monitor does when a recompilation storm opens: warn, raise (the fit stops, files flushed)
or fall back (XLA off for the rest of this fit, its step functions rebuilt and wrapped again)."""

from __future__ import annotations

from typing import NamedTuple, Optional

from xla_keras.callback.agreement import gather_processes
from xla_keras.callback.lifecycle import Lifecycle
from xla_keras.callback.state import RUN_WORD, CallState
from xla_keras.callback.step_functions import StepFunctions
from xla_keras.core.messages import warn
from xla_keras.core.types import PHASES
from xla_keras.errors import RecompilationStormError
from xla_keras.storms.detection import Storm, storm_text


def fallback_words(storm: Storm, run: str, op_by_op_shape_seconds: Optional[float]) -> str:
    """What the fallback means, for the warning's last line. Where XLA off compiles each op per new
    shape (JAX), whether that likely costs more than XLA did: XLA's mean compile per shape at the
    storm against the op-by-op cost per shape measured on the backend."""
    if op_by_op_shape_seconds is None:
        return f"XLA is now off for this {run} (on_storm='fallback'). "
    per_shape = storm.compile_seconds / storm.compiles if storm.compiles else None
    if per_shape is not None and per_shape < op_by_op_shape_seconds:
        return "XLA off (on_storm='fallback'); ops compile per shape: likely slower. "
    return "XLA off (on_storm='fallback'); each op now compiles per shape. "


class PendingStorm(NamedTuple):
    """A storm whose raise or fallback waits for the workers' next agreement (callback/agreement.py)."""

    phase: str
    step: int
    text: str


class StormAction:
    def __init__(self, state: CallState, functions: StepFunctions, lifecycle: Lifecycle):
        self.state = state
        self.functions = functions
        self.lifecycle = lifecycle
        self.pending: Optional[PendingStorm] = None

    def fit_began(self) -> None:
        """A new fit: no storm of an earlier one waits for the workers' agreement."""
        self.pending = None

    def deferred(self) -> bool:
        """Workers that may see different signatures (TensorFlow's, each reading its own shard), with a
        collective to agree by: a storm's raise or fallback waits for their next agreement step."""
        dist = self.state.dist
        return dist.multi_worker and not dist.signatures_agree and dist.processes > 1

    def action(self) -> str:
        # A storm opens at the same step in every process where all see the same signatures (JAX's global
        # arrays); TensorFlow's workers act together at their next agreement step, in a fit (where there is
        # one). Elsewhere a one-worker stop or switch would hang the others. A storm found while cleaning up
        # after an ended or failed call is reported, never acted on (it would raise into the next fit, or
        # switch XLA off for it).
        state, dist = self.state, self.state.dist
        alone = dist.multi_worker and not dist.signatures_agree and not (self.deferred() and state.in_fit)
        return "warn" if alone or state.in_cleanup else state.config.on_storm

    def opened(self, phase: str, step: int, count: int, window_start: int) -> None:
        """A storm opened at ``phase`` step ``step``: record it, then warn, raise or fall back."""
        state = self.state
        session = state.session
        storm = session.open_storm(phase, step, count, window_start, self.action())
        state.sink.scalars([session.storm_scalar(storm)])
        state.current.traces.storm_opened()
        index = len(session.storms) - 1  # its place in report.storms
        run = "fit" if state.in_fit else RUN_WORD[phase]
        then = fallback_words(storm, run, state.backend.op_by_op_shape_seconds) if storm.action == "fallback" else ""
        if storm.action != "warn" and self.deferred():
            then = f"Every worker acts (on_storm={storm.action!r}) at the next agreement step. "
        text = storm_text(storm, index, state.sink.log_dir, session.data_kind, then)
        if storm.action != "warn" and self.deferred():
            self.pending = self.pending or PendingStorm(phase, step, text)
        elif storm.action == "raise":
            self.stop(phase, text)
        elif storm.action == "fallback":
            self._fall_back(phase, step)
        warn(text)  # once: the warning is the message, located at the user's fit call
        state.flush()

    def stop(
        self,
        phase: str,
        text: str,
        why: str = "on_storm='raise' after a recompilation storm",
        error: type = RecompilationStormError,
    ) -> None:
        """on_storm='raise' (or another argument that stops the call, ``why``): the call ends here, its files
        flushed and closed, with the ``error`` of ``text``."""
        state = self.state
        stopped = state.stopped_early(phase, state.in_fit, why)
        if state.in_fit:
            self.lifecycle.end_fit()
            if state.dist.signatures_agree or self.deferred():  # every process raises here, at this step
                gather_processes(state)
            state.current.ended(stopped)
            self.lifecycle.finish()  # flushes and closes every file before the fit stops
        else:
            self.lifecycle.end_phase(phase, stopped)
        self.lifecycle.say_summary()  # no end hook will run: the summary now, before the error
        raise error(text)

    def agreed(self, worker: int, phase: str, step: int) -> None:
        """Every worker, at an agreement step: ``worker``'s storm (``phase`` step ``step``, the first one
        pending) is acted on here, as configured, in every worker."""
        state = self.state
        mine, self.pending = self.pending, None
        train_step = state.session.phases["train"].step
        if state.dist.process != worker or mine is None:
            what = f"worker {worker}'s recompilation storm ({phase} step {step})"
            mine = PendingStorm(
                "train",
                train_step,
                f"Recompilation storm on worker {worker} ({phase} step {step}): on_storm="
                f"{state.config.on_storm!r} acts in every worker at train step {train_step}",
            )
            state.session.notes.add(f"{what}: every worker acted on it at train step {train_step}")
        if state.config.on_storm == "raise":
            self.stop(mine.phase, mine.text)
        why = f"after worker {worker}'s recompilation storm ({phase} step {step}), agreed by every worker"
        self._fall_back("train", train_step, why)

    def _fall_back(self, phase: str, step: int, why: str = "after a recompilation storm") -> None:
        reason = f"switched XLA off at {phase} step {step} {why} (on_storm='fallback')"
        self.functions.switch_off(phase, step, reason)


# TensorFlow's workers act on a storm together.


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
        self.action.fit_began()
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
