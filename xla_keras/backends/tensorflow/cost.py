"""The cost card on TensorFlow: FLOPs counted from the step's XLA HLO.

TensorFlow gives Python the HLO XLA compiles for a jit-compiled ``tf.function``
(``experimental_get_compiler_ir(...)(stage="hlo")``: converted, not compiled; 59 ms for a small MLP's
train step on 2 CPU cores) but no cost or buffer analysis: its optimised HLO (``stage="optimized_hlo"``)
runs XLA's passes again (0.26 s there) and still states no memory. So FLOPs are the products of that
HLO (``core/hlo.py``), an estimate before XLA's optimisations, and bytes and memory are unavailable.
"""

from __future__ import annotations

from typing import Any

from xla_keras.backends.tensorflow import _internals
from xla_keras.core.cost import ProgramCost
from xla_keras.core.hlo import dot_conv_flops

SOURCE = "the dots and convolutions of the step's XLA HLO (TensorFlow; elementwise operations not counted)"
NOT_GIVEN = "bytes accessed and memory: TensorFlow gives Python no XLA cost or buffer analysis"


def cost_spec(batch: Any) -> Any:
    """The batch's ``tf.TensorSpec`` structure (a distributed batch has none: an error)."""
    import tensorflow as tf

    def spec(value: Any) -> Any:
        if _internals.unwrap_distributed(value) is not value:
            raise TypeError("a distributed batch (one part per replica): the cost card reads one device's program")
        return tf.TensorSpec(value.shape, value.dtype)

    return tf.nest.map_structure(spec, batch)


def program_cost(step: Any, spec: Any) -> ProgramCost:
    """FLOPs of the jit-compiled step ``step`` for the batch shapes of ``spec``."""
    import tensorflow as tf

    if step is None or not _internals.function_jit_flag(step):
        why = "the step that runs now is not jit-compiled (auto-clustering, off, a fallback, or jit='fastest' off)"
        return ProgramCost(source=SOURCE, unavailable=f"{why}: no one XLA program per step to analyse")
    zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), spec)
    flops = dot_conv_flops(step.experimental_get_compiler_ir(zeros)(stage="hlo"))
    missing = NOT_GIVEN if flops is not None else f"flops (no dot or convolution read); {NOT_GIVEN}"
    return ProgramCost(flops=flops, source=SOURCE, exact=False, unavailable=missing)


def device_kind() -> str:
    """The first GPU's name, "" on CPU (no row in the peak table)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return ""
    return str(tf.config.experimental.get_device_details(gpus[0]).get("device_name", ""))
