"""The records an XlaReport lists: one XLA compile (``Compilation``) and one slow steady step
(``SlowStep``), with their JSON round-trip. Pure: no TensorFlow. Their ``to_dict()`` keys are part of
the report's contract (model.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from xla_keras.core.arguments import known_fields
from xla_keras.core.cost import ProgramCost
from xla_keras.core.signatures import InputSignature, from_jsonable, to_jsonable
from xla_keras.core.timing import excess_over_steady

# Why a compile's seconds are estimated from step time (``Compilation.estimated_because``), in words.
ESTIMATED_BECAUSE = {
    "trace_window": "the steps ran inside a profiler trace window (the profiler was writing the trace)",
    "profiler_busy": "the profiler was busy with another session (e.g. keras.callbacks.TensorBoard(profile_batch=...))",
    "probes_off": "compile probes are off by design here (e.g. under MultiWorkerMirroredStrategy)",
    "not_measured": "the probe ran but could not time the compiles",
    "unprobed": "no compile probe ran for those calls",
}


@dataclass
class Compilation:
    """One compiled XLA module.

    The report's records (``report.compilations``), capped at ``max_records`` per phase (the counts
    stay exact); built by the monitor, read by you.

    Args:
        phase: "train", "test" or "predict".
        step: 1-based global step of the phase at which it compiled.
        signature: the input signature that made it compile.
        seconds: compile time; from the XLA compiler's events when
            ``source == "profiler"``, from the span of the op that triggered
            the compile when ``"op_span"`` (TensorFlow 2.16/2.17 on CPU, whose
            compiler emits no events), from JAX's own compile events when
            ``"jax"`` (tracing + lowering + XLA compile of the step), else
            (``"timing"``) step time minus the steady median.
        source: "profiler", "op_span", "jax" or "timing".
        cached: served from the persistent compilation cache (None: unknown,
            when a probe that cannot see the compiler saw a mix of loads and
            compiles).
        step_seconds: wall time of the whole step that compiled.
        traced: the step also traced the tf.function (first step of a function),
            so a timing estimate includes tracing.
        call_batches: batches the step function's call ran (more than 1 under
            ``steps_per_execution``).
        call_compiles: compiles in that call (a timing estimate shares the
            call's excess time among them).
        last_batch: the step was the last of its epoch (train) or of its
            evaluate / predict run: a partial last batch compiles there.
        estimated_because: why a ``"timing"`` record is an estimate, one of
            ``ESTIMATED_BECAUSE``'s keys ("trace_window", "profiler_busy", "probes_off",
            "not_measured", "unprobed"); None for a measured record.
        cost: what the program costs (FLOPs, bytes, memory: a ``ProgramCost``), analysed off the step
            path after it compiled; None when it was not analysed (``XlaMonitor(cost="off")``, past the
            per-fit cap, or a record read from a report older than schema 9).

    Example:
        `monitor`: the monitor of XlaMonitor's example, after its fit of 2 batches of 32.

        ```pycon
        >>> compilation = monitor.report.compilations[0]
        >>> compilation.phase, compilation.step, compilation.last_batch
        ('train', 1, False)
        >>> [(leaf.path, leaf.shape) for leaf in compilation.signature]
        [('x', (32, 4)), ('y', (32, 1))]

        ```
    """

    phase: str
    step: int
    signature: InputSignature
    seconds: float
    source: str
    cached: Optional[bool] = False
    step_seconds: Optional[float] = None
    traced: bool = False
    call_batches: int = 1
    call_compiles: int = 1
    last_batch: bool = False
    estimated_because: Optional[str] = None
    cost: Optional[ProgramCost] = None

    def to_dict(self) -> Dict[str, Any]:
        """This compile as the report's JSON holds it.

        Returns:
            A dict of the fields; the signature as ``[{"path", "dtype", "shape"}]``.
        """
        return {
            "phase": self.phase,
            "step": self.step,
            "signature": to_jsonable(self.signature),
            "seconds": self.seconds,
            "source": self.source,
            "cached": self.cached,
            "step_seconds": self.step_seconds,
            "traced": self.traced,
            "call_batches": self.call_batches,
            "call_compiles": self.call_compiles,
            "last_batch": self.last_batch,
            "estimated_because": self.estimated_because,
            "cost": None if self.cost is None else self.cost.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Compilation":
        """A compile read back from ``to_dict()``'s form.

        By key, never by position: unknown keys are ignored, optional ones take their defaults.

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            A ``Compilation``.
        """
        known = known_fields(cls, d)
        known["signature"] = from_jsonable(d["signature"])
        if d.get("cost") is not None:
            known["cost"] = ProgramCost.from_dict(d["cost"])
        return cls(**known)

    def estimate_from(self, steady_seconds: Optional[float]) -> float:
        """The timing-fallback estimate: this compile's share of the time its
        call (``call_batches`` batches, ``call_compiles`` new signatures) ran
        above the steady median."""
        if self.step_seconds is None:
            return self.seconds
        steady_call = None if steady_seconds is None else self.call_batches * steady_seconds
        return excess_over_steady(self.step_seconds, steady_call) / max(1, self.call_compiles)


@dataclass
class SlowStep:
    """A step far above the steady median whose input signature was already compiled.

    Something cost time that the compile ledger cannot name (a host stall, garbage collection, a
    tf.data pipeline that waited). A step is slow when it took more than 5 times its phase's steady
    median and more than 20 ms above it. The report keeps them in ``report.slow_steps`` (capped
    at ``max_records`` per phase; ``report.slow_step_count`` counts them all).

    Args:
        phase: "train", "test" or "predict".
        step: 1-based global step of the phase.
        seconds: the step's time, measured as ``basis`` says.
        steady_seconds: the phase's steady step then.
        signature: the step's input signature (compiled before).
        basis: what ``seconds`` is. "step" (TensorFlow): the step's own time, from the batch end before it
            to its own (Keras syncs with the device at every batch end). "host" (JAX, whose steps are
            dispatched asynchronously): the time the training loop spent on the step, from its start to the
            next step's: pulling its batch, dispatching it and the callbacks between steps, and, when the
            device's queue is full, the wait for an earlier step to finish; the device may have hidden part
            of a host stall behind the steps it still had queued.

    Example:
        A record as a saved report holds it (``report.to_dict()["slow_steps"]``), read back:

        ```pycon
        >>> slow = xla_keras.SlowStep.from_dict({"phase": "train", "step": 40, "seconds": 0.3,
        ...     "steady_seconds": 0.002, "signature": [{"path": "x", "dtype": "float32", "shape": [32, 4]}]})
        >>> round(slow.seconds / slow.steady_seconds)  # times the steady step
        150
        >>> slow.signature[0].shape
        (32, 4)

        ```
    """

    phase: str
    step: int
    seconds: float
    steady_seconds: float
    signature: InputSignature
    basis: str = "step"

    def to_dict(self) -> Dict[str, Any]:
        """This slow step as the report's JSON holds it.

        Returns:
            A dict of the fields; the signature as ``[{"path", "dtype", "shape"}]``.
        """
        return {
            "phase": self.phase,
            "step": self.step,
            "seconds": self.seconds,
            "steady_seconds": self.steady_seconds,
            "signature": to_jsonable(self.signature),
            "basis": self.basis,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SlowStep":
        """A slow step read back from ``to_dict()``'s form (unknown keys are ignored).

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            A ``SlowStep``.
        """
        known = known_fields(cls, d)
        known["signature"] = from_jsonable(d["signature"])
        return cls(**known)
