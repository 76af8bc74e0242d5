"""The cost card on TensorFlow: FLOPs counted from the step's XLA HLO; memory, on request, from XLA's
buffer assignment of the step compiled again.

TensorFlow gives Python the HLO XLA compiles for a jit-compiled ``tf.function``
(``experimental_get_compiler_ir(...)(stage="hlo")``: converted, not compiled; 59 ms for a small MLP's
train step on 2 CPU cores) but keeps the executable that ran, and so XLA's cost and buffer analysis,
out of Python's reach. So FLOPs are the products of that HLO (``core/hlo.py``), an estimate before
XLA's optimisations, and bytes accessed are unavailable. Memory needs an executable: the stage
``optimized_hlo_proto_serialized`` compiles the step again and returns its ``HloProto``, whose buffer
assignment is XLA's own (0.4 s for the same step): only ``XlaMonitor(cost="full")`` pays that.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Mapping

from xla_keras.backends.tensorflow import _internals
from xla_keras.core.cost import ProgramCost
from xla_keras.core.hlo import dot_conv_flops

SOURCE = "the dots and convolutions of the step's XLA HLO (TensorFlow; elementwise operations not counted)"
MEMORY_SOURCE = "memory: XLA's buffer assignment of the step compiled again ({seconds:.2f} s, not in the ledger)"
NO_BYTES = "bytes accessed: TensorFlow gives Python no XLA cost analysis"
NO_MEMORY = "memory: XlaMonitor(cost='full') compiles the step again for XLA's buffer assignment"
NO_CODE = "code bytes: not in XLA's buffer assignment"


def cost_spec(batch: Any) -> Any:
    """The batch's ``tf.TensorSpec`` structure (a distributed batch has none: an error)."""
    import tensorflow as tf

    def spec(value: Any) -> Any:
        if _internals.unwrap_distributed(value) is not value:
            raise TypeError("a distributed batch (one part per replica): the cost card reads one device's program")
        return tf.TensorSpec(value.shape, value.dtype)

    return tf.nest.map_structure(spec, batch)


def buffer_memory(allocations: Iterable[Mapping[str, Any]]) -> Dict[str, int]:
    """A program's memory from XLA's buffer assignment, summed as XLA's own memory statistics sum it
    (``CompiledMemoryStats``, what JAX's ``memory_analysis()`` reads): arguments are the entry
    parameters' allocations, outputs the allocations that may be live out, alias the parameters'
    among them, temp every other allocation but constants and thread-local ones. A parameter is live
    out only where an output reuses its buffer (XLA copies a parameter returned as it is; measured on
    TensorFlow 2.16 and 2.21, and the same as 2.21's ``is_parameter_aliased_with_output``).

    Args:
        allocations: one mapping per allocation, with ``_internals.ALLOCATION_FIELDS``.

    Returns:
        ``argument_bytes``, ``output_bytes``, ``alias_bytes`` and ``temp_bytes``.
    """
    memory = dict.fromkeys(("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes"), 0)
    for a in allocations:
        size = int(a["size"])
        if a["is_entry_computation_parameter"]:
            memory["argument_bytes"] += size
        if a["maybe_live_out"]:
            memory["output_bytes"] += size
            if a["is_entry_computation_parameter"]:
                memory["alias_bytes"] += size
        elif not (a["is_entry_computation_parameter"] or a["is_constant"] or a["is_thread_local"]):
            memory["temp_bytes"] += size
    return memory


def program_cost(step: Any, spec: Any, mode: str) -> ProgramCost:
    """FLOPs of the jit-compiled step ``step`` for the batch shapes of ``spec``; with ``mode`` "full",
    its memory too, from the step compiled again."""
    import tensorflow as tf

    if step is None or not _internals.function_jit_flag(step):
        why = "the step that runs now is not jit-compiled (auto-clustering, off, a fallback, or jit='fastest' off)"
        return ProgramCost(source=SOURCE, unavailable=f"{why}: no one XLA program per step to analyse")
    zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), spec)
    cost = ProgramCost(flops=dot_conv_flops(step.experimental_get_compiler_ir(zeros)(stage="hlo")), source=SOURCE)
    missing = [NO_BYTES, NO_MEMORY]
    if mode == "full":
        started = time.perf_counter()
        try:
            memory = buffer_memory(_internals.compiled_buffer_allocations(step, zeros))
        except Exception as error:  # noqa: BLE001 - the FLOPs stand; the memory says why it is missing
            missing[1] = f"memory: compiling the step again failed: {type(error).__name__}: {error}"[:200]
        else:
            for key, value in memory.items():
                setattr(cost, key, value)
            cost.source = f"{SOURCE}; {MEMORY_SOURCE.format(seconds=time.perf_counter() - started)}"
            missing[1] = NO_CODE
    if cost.flops is None:
        missing.insert(0, "flops: no dot or convolution read")
    cost.unavailable = "; ".join(missing)
    return cost


def device_kind() -> str:
    """The first GPU's name, "" on CPU (no row in the peak table)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return ""
    return str(tf.config.experimental.get_device_details(gpus[0]).get("device_name", ""))
