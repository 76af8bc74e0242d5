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
HOST_MEMORY_SPACE = 5  # XLA's Layout::kHostMemorySpace: host buffers are not the device's memory


def cost_spec(batch: Any) -> Any:
    """The batch's ``tf.TensorSpec`` structure (a distributed batch has none: an error)."""
    import tensorflow as tf

    def spec(value: Any) -> Any:
        if _internals.unwrap_distributed(value) is not value:
            raise TypeError("a distributed batch (one part per replica): the cost card reads one device's program")
        return tf.TensorSpec(value.shape, value.dtype)

    return tf.nest.map_structure(spec, batch)


def buffer_memory(allocations: Iterable[Mapping[str, Any]]) -> Dict[str, int]:
    """A program's device memory from XLA's buffer assignment, summed as XLA sums its own memory
    statistics (``CompiledMemoryStats.PopulateBufferStatsFromAllocations``, what JAX's
    ``memory_analysis()`` reads): arguments are the entry parameters' allocations, alias those an output
    reuses, outputs the allocations that may be live out, temp every other one but constants and
    thread-local ones. Allocations in the host memory space are not device memory: set apart, as there.

    Args:
        allocations: one mapping per allocation, with ``_internals.ALLOCATION_FIELDS`` and ``ALIASED``.

    Returns:
        ``argument_bytes``, ``output_bytes``, ``alias_bytes`` and ``temp_bytes``.
    """
    memory = dict.fromkeys(("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes"), 0)
    for a in allocations:
        if a["color"] == HOST_MEMORY_SPACE:
            continue
        size = int(a["size"])
        if a["is_entry_computation_parameter"]:
            memory["argument_bytes"] += size
            memory["alias_bytes"] += size if a[_internals.ALIASED] else 0
        if a["maybe_live_out"]:
            memory["output_bytes"] += size
        elif not (a["is_entry_computation_parameter"] or a["is_constant"] or a["is_thread_local"]):
            memory["temp_bytes"] += size
    return memory


def program_cost(step: Any, spec: Any, mode: str) -> ProgramCost:
    """FLOPs of the jit-compiled step ``step`` for the batch shapes of ``spec``; with ``mode`` "full",
    its memory too, from the step compiled again. Each part that fails says why; the other stands."""
    import tensorflow as tf

    if step is None or not _internals.function_jit_flag(step):
        why = "the step that runs now is not jit-compiled (auto-clustering, off, a fallback, or jit='fastest' off)"
        return ProgramCost(source=SOURCE, unavailable=f"{why}: no one XLA program per step to analyse")
    zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), spec)
    cost = ProgramCost(source=SOURCE, exact=False)  # FLOPs counted before XLA's optimisations: an estimate
    missing = [NO_BYTES, NO_MEMORY]
    try:
        cost.flops = dot_conv_flops(step.experimental_get_compiler_ir(zeros)(stage="hlo"))
        if cost.flops is None:
            missing.insert(0, "flops: no dot or convolution read")
    except Exception as error:  # noqa: BLE001 - unavailable, with the reason; never a training failure
        missing.insert(0, f"flops: reading the step's HLO failed: {_first_line(error)}")
    if mode == "full":
        missing[-1] = _read_memory(cost, step, zeros)
    cost.unavailable = "; ".join(missing)
    return cost


def _read_memory(cost: ProgramCost, step: Any, zeros: Any) -> str:
    """Fills ``cost``'s memory from XLA's buffer assignment of the step compiled again; returns what
    stays missing, in words."""
    import tensorflow as tf

    devices = {device.device_type for device in tf.config.list_logical_devices()}
    if not devices <= {"CPU", "GPU"}:  # TensorFlow reads the proto without a check: known set on CPU and GPU
        return f"memory: read on CPU and GPU only ({', '.join(sorted(devices - {'CPU', 'GPU'}))} here)"
    started = time.perf_counter()
    try:
        memory = buffer_memory(_internals.compiled_buffer_allocations(step, zeros))
    except Exception as error:  # noqa: BLE001 - the FLOPs stand; the memory says why it is missing
        return f"memory: reading XLA's buffer assignment failed: {_first_line(error)}"
    for key, value in memory.items():
        setattr(cost, key, value)
    cost.source = f"{SOURCE}; {MEMORY_SOURCE.format(seconds=time.perf_counter() - started)}"
    return NO_CODE


def _first_line(error: BaseException) -> str:
    """An error in one short line (TensorFlow's are often many)."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:120]


def device_kind() -> str:
    """The first GPU's name, "" on CPU (no row in the peak table)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return ""
    return str(tf.config.experimental.get_device_details(gpus[0]).get("device_name", ""))
