"""The contract types between the backends' step wrappers, the session and the callback. Pure.

A backend's step wrapper tells the session "a call began with these batches" and gets a ``CallPlan``
back (its probe reads it); its probe's ``CompileObservation`` goes in when the call ends, and a
``CallOutcome`` (session/recording.py) comes out: the compiles recorded, the scalars to write, a storm
that opened.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, List, NamedTuple, NoReturn, Optional, Sequence, Tuple

from xla_keras.core.messages import wrapped
from xla_keras.core.signatures import InputSignature

logger = logging.getLogger("xla_keras")

PHASES = ("train", "test", "predict")
# How a compile's seconds were measured: from XLA's compiler events in a profiler
# probe; from the span of the op that triggered the compile, when the compiler
# emits no events (TensorFlow 2.16/2.17 on CPU); or step time minus the steady
# median (no probe could run).
SOURCES = ("profiler", "op_span", "jax", "timing")
MEASURED = ("profiler", "op_span", "jax")  # seconds observed in a probe, not estimated from step time
# Why XLA compiled (``Compilation.cause``):
# - "signature": an input signature new to the phase (a shape, dtype or structure not seen before);
# - "function": a signature the phase had seen, new to the step function that runs now (it was rebuilt:
#   model.compile, a jit switch), whose XLA cache starts empty;
# - "value": a known signature with a new value of an input XLA takes as a compile-time constant (an op's
#   input the step computes from the batch or the weights; ragged row splits);
# - "retrace": the step function traced again at a known signature (a new concrete function);
# - "context": JAX: the tracing context changed (a JAX config such as jax_default_matmul_precision);
# - "placement": JAX: the same shapes and dtypes placed or typed differently (a committed device, a
#   sharding, a weak type);
# - "unknown": a compile at a known signature the monitor could not explain.
CAUSES = ("signature", "function", "value", "retrace", "context", "placement", "unknown")
# The causes of compiles at a known signature: each one counts towards a storm, as a new signature does.
KNOWN_SIGNATURE_CAUSES = ("value", "retrace", "context", "placement", "unknown")


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
    (they are then estimated from step time, like an unprobed call).
    ``cause``, ``why``: what the probe knows of why a known signature compiled (JAX: the tracing
    context or the arrays' placement changed), else None.
    ``programs``: per module, the one-off function it was compiled for, outside the step's program
    (TensorFlow's ``"initialize_variables"``), None for the step's own; () when every one is the step's."""

    modules: Tuple[float, ...] = ()
    source: str = "profiler"
    cached: Optional[bool] = False
    traced: bool = False
    measured: bool = True
    cause: Optional[str] = None  # the probe's own reading of why a known signature compiled (``CAUSES``)
    why: Optional[str] = None  # that cause in words
    programs: Tuple[Optional[str], ...] = ()

    def program(self, index: int) -> Optional[str]:
        """The one-off function module ``index`` was compiled for, or None (the step's own program)."""
        return self.programs[index] if index < len(self.programs) else None


@dataclass(frozen=True)
class Precompiled:
    """One signature of a precompile's set, compiled before the phase's first step (``backends/<name>/precompile.py``).
    ``seconds``: what compiling it took, by ``source`` ("jax": JAX's trace, lowering and compile events;
    "profiler" / "op_span": TensorFlow's probe; "timing": the wall time of the zero-batch step that compiled
    it, when no probe could time it). ``cached``: the persistent cache served it (None: unknown).
    ``error``: why it was not compiled (then the other figures are 0)."""

    signature: InputSignature
    seconds: float
    source: str
    cached: Optional[bool] = False
    error: Optional[str] = None


class PrecompileRunner(NamedTuple):
    """What a step wrapper hands the monitor to precompile its phase (``backends/<name>/precompile.py``), with
    the first batch as the template: why its batches cannot be precompiled (or None), a zero batch of a
    signature, and the compile of ``(signature, zero batch)`` pairs on some threads (with the compile probe
    and the JIT state, which TensorFlow's probe reads)."""

    refusal: Callable[[InputSignature], Optional[str]]
    zeros: Callable[[InputSignature], Any]
    compile: Callable[[Sequence[Tuple[InputSignature, Any]], int, Any, Any], List[Precompiled]]


class CallPlan(NamedTuple):
    """What the session decided when a call began: the backend's probe reads it.
    (A NamedTuple: one is made per step, and a frozen dataclass costs microseconds to build.)"""

    phase: str
    first_step: int  # global step of the call's first batch
    batches: int
    new: Tuple[Tuple[int, int, InputSignature], ...]  # (index in the call, step, signature) new to the function
    probe: bool  # worth a compile probe
    value_probe: bool = False  # probing a known signature for compiles a value causes
    steady_seconds: Optional[float] = None  # the phase's steady median step, when known

    @property
    def new_indices(self) -> Tuple[int, ...]:
        return tuple(i for i, _, _ in self.new)


def assert_never(value: NoReturn) -> NoReturn:
    """The end of an exhaustive ``match`` (a ``Fix``'s kinds, the jit modes): mypy fails where a case has
    no branch."""
    raise AssertionError(f"a case with no branch here: {value!r}")


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
        (logger.warning if warn else logger.info)("%s", wrapped(f"xla_keras: {text}"))  # the report has it all

    def add(self, text: str) -> None:
        self.texts.append(text)
