"""Compiles a value causes: an input XLA takes as a compile-time constant whose value the step computes
from its own data. Pure.

XLA compiles a program for fixed shapes and for fixed values of some op inputs: ``tf.math.top_k``'s
``k``, a reshape's or a slice's sizes, a range's bounds, reduction axes. When the step computes such a
value from the batch or from the weights, TensorFlow keys XLA's cache on the values of the arguments it
is computed from: the step compiles again whenever they change (with a batch's values: at nearly every
step), or XLA refuses it ("must be a compile-time constant"). The backend reads the traced step's graph
once per trace (``backends/tensorflow/_internals.py``: ``compile_time_constant_uses``) into
``ValueKey`` records; the session then probes the phase's calls so that every such compile is observed,
and the records give each one its cause in words and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

# What each op's compile-time-constant input is, in words, and how to make it static.
_SIZES = "static sizes (from x.shape or Python ints; pad and mask)"
_AXES = "a Python int"
_FIXES = {
    "TopKV2": "a fixed value (a Python int) and mask the values past the k you want",
    "Range": "a fixed length (a Python int) and a mask",
    "Reshape": _SIZES,
    "Fill": _SIZES,
    "Tile": _SIZES,
    "Slice": _SIZES,
    "StridedSlice": _SIZES,
    "Pad": _SIZES,
    "PadV2": _SIZES,
    "MirrorPad": _SIZES,
    "BroadcastTo": _SIZES,
    "Split": _AXES,
    "SplitV": _SIZES,
    "OneHot": "a fixed depth (a Python int)",
}


@dataclass(frozen=True)
class ValueKey:
    """One input XLA needs as a compile-time constant, whose value the step computes from its arguments.

    Args:
        op: TensorFlow's op type (``"TopKV2"``).
        input: the input's name in the op's definition (``"k"``).
        node: the node (``"functional_1/pick_k_1/TopKV2"``).
        layer: the model's layer the node belongs to, or None.
        line: the user's source line that made the op, or None.
        inputs: the step's inputs its value is computed from (``("x",)``).
        weights: the variables its value is computed from (``("dense/kernel",)``): they change at every
            train step.
    """

    op: str
    input: str
    node: str
    layer: Optional[str]
    line: Optional[str]
    inputs: Tuple[str, ...] = ()
    weights: Tuple[str, ...] = ()

    def what(self) -> str:
        """``TopKV2's k in layer 'pick_k'``."""
        where = f" in layer {self.layer!r}" if self.layer else f" ({self.node})"
        return f"{self.op}'s {self.input}{where}"

    def source(self) -> str:
        """Where the value comes from, in words."""
        parts = []
        if self.inputs:
            names = ", ".join(f"'{name}'" for name in self.inputs[:3])
            parts.append(f"the values of input {names}" if len(self.inputs) == 1 else f"the values of inputs {names}")
        if self.weights:
            names = ", ".join(f"'{name}'" for name in self.weights[:2])
            more = f" and {len(self.weights) - 2} more" if len(self.weights) > 2 else ""
            parts.append(f"the weights {names}{more}")
        return " and ".join(parts) or "the step's arguments"

    def why(self) -> str:
        """The cause of a compile this key made, in one sentence."""
        line = f" (your line: {self.line})" if self.line else ""
        return (
            f"{self.what()}{line} is computed from {self.source()}; XLA needs it as a compile-time "
            "constant, so it compiles the step again for each new value"
        )

    def fix(self) -> str:
        """How to make the value static, in words."""
        moved = (
            "; or compute it in the input pipeline and bucket it to a few values (each value compiles once)"
            if self.inputs and not self.weights
            else ""
        )
        return static_words(self.op, self.input) + moved


def static_words(op: str, input_name: str) -> str:
    """How to give ``op``'s ``input_name`` a value XLA knows when it compiles, in words."""
    return f"give {op}'s {input_name} {_FIXES.get(op, 'a static value (a Python number)')}"


def value_keys_note(phase: str, keys: Sequence[ValueKey]) -> str:
    """The report's note when a phase's step holds value keys: what the monitor does about them."""
    first = keys[0]
    more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    return (
        f"{phase}: {first.what()}{more} is computed from {first.source()}, and XLA takes it as a compile-time "
        "constant: the step may compile again at a known input signature, so every call of this phase is "
        "probed for compiles (about 1 ms a call, while compiles keep coming; then one call in "
        f"{VALUE_PROBE_EVERY} after {VALUE_PROBE_MISSES} calls in a row compiled nothing)"
    )


# A phase whose step holds value keys (or ragged row splits, which XLA also takes as constants) is
# probed at every call until this many probes in a row saw no compile; then one call in
# ``VALUE_PROBE_EVERY``, and every call again after a compile or a slow step.
VALUE_PROBE_MISSES = 8
VALUE_PROBE_EVERY = 8
