"""The cost card on TensorFlow: FLOPs counted from the step's XLA HLO (its live dots and convolutions,
from the HLO text); memory, on request, from XLA's buffer assignment of the step compiled again.

TensorFlow gives Python the HLO XLA compiles for a jit-compiled ``tf.function``
(``experimental_get_compiler_ir(...)(stage="hlo")``: converted, not compiled; 59 ms for a small MLP's
train step on 2 CPU cores) but keeps the executable that ran, and so XLA's cost and buffer analysis,
out of Python's reach. So FLOPs are the products of that HLO (below), an estimate before
XLA's optimisations, and bytes accessed are unavailable. Memory needs an executable: the stage
``optimized_hlo_proto_serialized`` compiles the step again and returns its ``HloProto``, whose buffer
assignment is XLA's own (0.4 s for the same step): only ``XlaMonitor(cost="full")`` pays that.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

from xla_keras.backends.tensorflow import _internals
from xla_keras.core.program_cost import ProgramCost

# FLOPs of an XLA HLO module's dots and convolutions, counted from its text.


_SHAPE = r"[a-z0-9]+\[([0-9,]*)\](?:\{[^}]*\})?"
_OPERAND = _SHAPE + r"\s+%[\w.\-]+"
_PRODUCT = re.compile(
    r"=\s*" + _SHAPE + r"\s+(dot|convolution)\(\s*" + _OPERAND + r"\s*,\s*" + _OPERAND + r"\s*\)(.*)$"
)
_DEFINED = re.compile(r"^\s*(ROOT\s+)?%([\w.\-]+)\s*=")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s*\(.*\{\s*$")
_NAME = re.compile(r"%([\w.\-]+)")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([0-9,]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=(\w+)_(\w+)->(\w+)")
_WINDOW = re.compile(r"window=\{([^}]*)\}")
_GROUPS = re.compile(r"feature_group_count=(\d+)")


def _dims(text: str) -> List[int]:
    return [int(d) for d in text.split(",") if d]


def _window(text: str, rank: int) -> Dict[str, List[List[int]]]:
    """``window={size=3x3 pad=2_2x2_2 stride=2x2 lhs_dilate=.. rhs_dilate=..}`` per spatial dim."""
    fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
    ones = [[1]] * rank
    return {
        "pad": [list(map(int, p.split("_"))) for p in fields["pad"].split("x")] if "pad" in fields else [[0, 0]] * rank,
        "stride": [[int(v)] for v in fields["stride"].split("x")] if "stride" in fields else ones,
        "lhs": [[int(v)] for v in fields["lhs_dilate"].split("x")] if "lhs_dilate" in fields else ones,
        "rhs": [[int(v)] for v in fields["rhs_dilate"].split("x")] if "rhs_dilate" in fields else ones,
    }


def _valid_pairs(size_in: int, kernel: int, size_out: int, pad_low: int, stride: int, lhs: int, rhs: int) -> int:
    """(output position, kernel position) pairs of one spatial dim whose input position is real data."""
    count = 0
    for o in range(size_out):
        for k in range(kernel):
            position = o * stride + k * rhs - pad_low  # in the (lhs-dilated) input
            if position >= 0 and position % lhs == 0 and position // lhs < size_in:
                count += 1
    return count


def _convolution_macs(out: List[int], lhs: List[int], rhs: List[int], rest: str) -> Optional[int]:
    labels, window = _DIM_LABELS.search(rest), _WINDOW.search(rest)
    if labels is None or window is None:
        return None
    lhs_labels, rhs_labels, out_labels = labels[1], labels[2], labels[3]
    if not (len(lhs_labels) == len(lhs) and len(rhs_labels) == len(rhs) and len(out_labels) == len(out)):
        return None
    rank = sum(c.isdigit() for c in lhs_labels)
    w = _window(window[1], rank)
    pairs = 1
    for i in range(rank):  # the window lists spatial dims in their number's order (0, 1, ...)
        dim = str(i)
        pairs *= _valid_pairs(
            lhs[lhs_labels.index(dim)],
            rhs[rhs_labels.index(dim)],
            out[out_labels.index(dim)],
            w["pad"][i][0],
            w["stride"][i][0],
            w["lhs"][i][0],
            w["rhs"][i][0],
        )
    groups = _GROUPS.search(rest)
    features_in = lhs[lhs_labels.index("f")] // (int(groups[1]) if groups else 1)
    return out[out_labels.index("b")] * out[out_labels.index("f")] * features_in * pairs


def _live(lines: List[str]) -> Set[str]:
    """Names of the instructions the entry computation's result depends on (through called computations)."""
    definitions: Dict[str, str] = {}
    roots: Dict[str, str] = {}  # computation -> its ROOT instruction
    entry, current = None, None
    for line in lines:
        header = _COMPUTATION.match(line)
        if header is not None:
            current = header[2]
            if header[1]:
                entry = current
            continue
        defined = _DEFINED.match(line)
        if defined is not None:
            definitions[defined[2]] = line
            if defined[1] and current is not None:
                roots[current] = defined[2]
    if entry is None or entry not in roots:
        return set(definitions)  # not a whole module: everything counts
    live: Set[str] = set()
    stack = [roots[entry]]
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        right = definitions[name].split("=", 1)[1].split(", metadata=")[0]
        for used in _NAME.findall(right):
            if used in definitions:
                stack.append(used)
            elif used in roots:
                stack.append(roots[used])  # a called computation: what its result depends on
    return live


def dot_conv_flops(hlo_text: str) -> Optional[float]:
    """Two FLOPs per multiply-add of every live ``dot`` and ``convolution`` in the module; None when the
    text holds none that can be read (operand shapes are needed inline, as unoptimised HLO prints them).

    Args:
        hlo_text: an HLO module as text.

    Returns:
        FLOPs, or None.
    """
    lines = hlo_text.splitlines()
    live = _live(lines)
    total, found = 0.0, False
    for line in lines:
        defined, match = _DEFINED.match(line), _PRODUCT.search(line)
        if match is None or defined is None or defined[2] not in live:
            continue
        out, kind, lhs, rhs, rest = _dims(match[1]), match[2], _dims(match[3]), _dims(match[4]), match[5]
        if kind == "dot":
            contracting = _LHS_CONTRACTING.search(rest)
            if contracting is None:
                continue
            macs: Optional[int] = math.prod(out) * math.prod(lhs[d] for d in _dims(contracting[1]))
        else:
            macs = _convolution_macs(out, lhs, rhs, rest)
        if macs is not None:
            total += 2.0 * macs
            found = True
    return total if found else None


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
