"""What a compiled program costs: its FLOPs, bytes and memory (``ProgramCost``), and a phase's achieved
rates at steady state (``phase_rates``). Pure: the backends measure (``backends/*/cost.py``), this reads.

A figure a source cannot give is None ("unavailable"), never a number: XLA's cost analysis answers -1
for what it does not know (jax-ml/jax#16008), and some platforms answer an all-zero record as a
placeholder (jax-ml/jax#18954). A real 0 stays 0 (an output that aliases nothing has 0 alias bytes).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from xla_keras.core.plain_data import known_fields
from xla_keras.core.timing import MIN_STEADY_SAMPLES

# A bounded number of analyses per phase of a fit (or of a standalone evaluate / predict): one per
# distinct signature, and during a storm only the first few programs (each storm compile is one more).
ANALYSES_PER_CALL = 8

COST_CHOICES = ("auto", "full", "off")

MEMORY_FIELDS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "code_bytes")

# Dense peak FLOP/s per device and compute dtype, from the vendors' data sheets (no sparsity). A device
# kind matches a row when the row's key is in its lowercased name (JAX's ``device_kind``, TensorFlow's
# GPU ``device_name``); the first match wins, so longer names come first ("l40s" before "l4", "h100 pcie"
# before "h100"). float32 is the TF32 tensor-core peak where the GPU has one: XLA's float32 matmuls run
# in TF32 there by default. CPUs have no row: their peak depends on cores and clocks, so MFU is withheld
# unless ``XlaMonitor(peak_flops=...)`` says it.
PEAK_FLOPS: Tuple[Tuple[str, Dict[str, float]], ...] = (
    ("h100 pcie", {"bfloat16": 756e12, "float16": 756e12, "float32": 378e12}),
    ("h100 nvl", {"bfloat16": 835e12, "float16": 835e12, "float32": 418e12}),
    ("h100", {"bfloat16": 989e12, "float16": 989e12, "float32": 495e12}),
    ("a100", {"bfloat16": 312e12, "float16": 312e12, "float32": 156e12}),
    ("l40s", {"bfloat16": 362e12, "float16": 362e12, "float32": 183e12}),
    ("l40", {"bfloat16": 181e12, "float16": 181e12, "float32": 90.5e12}),
    ("l4", {"bfloat16": 121e12, "float16": 121e12, "float32": 60e12}),
    ("a10g", {"bfloat16": 70e12, "float16": 70e12, "float32": 35e12}),
    ("v100", {"float16": 125e12, "float32": 15.7e12}),
    ("t4", {"float16": 65e12, "float32": 8.1e12}),
    ("tpu v5 lite", {"bfloat16": 197e12}),
    ("tpu v5e", {"bfloat16": 197e12}),
    ("tpu v5p", {"bfloat16": 459e12}),
    ("tpu v5", {"bfloat16": 459e12}),  # JAX names the v5p "TPU v5"
    ("tpu v4 lite", {"bfloat16": 138e12}),
    ("tpu v4", {"bfloat16": 275e12}),
)


def figure(value: Any) -> Optional[float]:
    """A cost figure as a number, or None when it is a sentinel (negative, NaN, inf) or missing."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


@dataclass
class ProgramCost:
    """What one compiled program (one ``Compilation``) costs, as its source states it.

    Args:
        flops: floating-point operations of one run of the program (one step), or None (unavailable).
        bytes_accessed: bytes the program reads and writes in one run, or None.
        argument_bytes: the program's argument buffers, or None.
        output_bytes: its output buffers, or None.
        alias_bytes: output bytes that reuse argument buffers (donated state), or None.
        temp_bytes: its temporary buffers, or None.
        code_bytes: its generated code, or None.
        source: where the figures come from, in words.
        exact: True when the figures are the compiled program's own (XLA's analysis of the executable
            that ran); False for an estimate (e.g. counted from the program before XLA optimised it).
        unavailable: why figures are missing, when they are (None when every figure is there).

    Example:
        ```pycon
        >>> cost = xla_keras.ProgramCost(flops=1.2e6, argument_bytes=1000, output_bytes=900, alias_bytes=800,
        ...                              temp_bytes=500, source="XLA's analysis")
        >>> cost.peak_bytes  # argument + output - alias + temp: donated state counted once
        1600
        >>> cost.bytes_accessed is None  # unavailable: never a number
        True

        ```
    """

    flops: Optional[float] = None
    bytes_accessed: Optional[float] = None
    argument_bytes: Optional[int] = None
    output_bytes: Optional[int] = None
    alias_bytes: Optional[int] = None
    temp_bytes: Optional[int] = None
    code_bytes: Optional[int] = None
    source: str = ""
    exact: bool = False
    unavailable: Optional[str] = None

    @property
    def peak_bytes(self) -> Optional[int]:
        """The program's memory: argument + output - alias + temp (donated state counted once).

        Returns:
            Bytes, or None when one of the four is unavailable.
        """
        parts = (self.argument_bytes, self.output_bytes, self.alias_bytes, self.temp_bytes)
        if any(part is None for part in parts):
            return None
        argument, output, alias, temp = parts
        return int(argument + output - alias + temp)  # type: ignore[operator]

    def to_dict(self) -> Dict[str, Any]:
        """The figures as the report's JSON holds them (``peak_bytes`` included).

        Returns:
            A dict of the fields and ``peak_bytes``.
        """
        out = asdict(self)
        out["peak_bytes"] = self.peak_bytes
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProgramCost":
        """Read back from ``to_dict()``'s form (unknown keys ignored).

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            A ``ProgramCost``.
        """
        return cls(**known_fields(cls, d))

    @classmethod
    def from_xla(cls, analysis: Optional[Mapping[str, Any]], memory: Any, source: str, exact: bool) -> "ProgramCost":
        """From XLA's cost analysis (a dict with ``flops`` and ``bytes accessed``) and memory statistics
        (an object with ``*_size_in_bytes`` attributes), each possibly None. Sentinels become None.

        Args:
            analysis: XLA's cost analysis of the program, or None.
            memory: XLA's memory statistics of the program, or None.
            source: where they came from, in words.
            exact: whether they are the compiled program's own.

        Returns:
            A ``ProgramCost``.
        """
        flops = bytes_accessed = None
        if analysis:
            flops, bytes_accessed = figure(analysis.get("flops")), figure(analysis.get("bytes accessed"))
            if flops == 0 and bytes_accessed == 0:  # an all-zero record is a placeholder, not a program
                flops = bytes_accessed = None
        sizes: Dict[str, Optional[int]] = dict.fromkeys(MEMORY_FIELDS)
        if memory is not None:
            names = ("argument", "output", "alias", "temp", "generated_code")
            read = [figure(getattr(memory, f"{name}_size_in_bytes", None)) for name in names]
            if any(value for value in read):  # all zero: a placeholder (a real program has arguments)
                sizes = {key: None if value is None else int(value) for key, value in zip(MEMORY_FIELDS, read)}
        cost = cls(flops, bytes_accessed, source=source, exact=exact)
        for key, value in sizes.items():
            setattr(cost, key, value)
        cost.unavailable = cost.missing_words()
        return cost

    def missing_words(self) -> Optional[str]:
        """The figures that are missing, named (None when none is)."""
        missing = [name for name in ("flops", "bytes_accessed", *MEMORY_FIELDS) if getattr(self, name) is None]
        return f"{', '.join(missing)} not given by {self.source}" if missing else None


def peak_flops_for(device_kind: str, dtype: str) -> Optional[float]:
    """The table's dense peak FLOP/s for a device kind and compute dtype, or None when it has no row.

    Args:
        device_kind: the device's name, e.g. "NVIDIA A100-SXM4-40GB" or "TPU v4".
        dtype: the model's compute dtype, e.g. "float32" or "bfloat16".

    Returns:
        FLOP/s, or None.
    """
    kind = device_kind.lower()
    for key, by_dtype in PEAK_FLOPS:
        if key in kind:
            return by_dtype.get(dtype)
    return None


def phase_rates(
    cost: ProgramCost,
    steady_seconds: Optional[float],
    steady_steps: int,
    peak: Optional[Tuple[float, str]],
    withheld: Optional[str] = None,
) -> Dict[str, Any]:
    """A phase's achieved rates at steady state, from its steady program's cost and steady step time.

    Args:
        cost: the cost of the program the phase's steady steps ran.
        steady_seconds: the phase's steady median step, or None (not measured).
        steady_steps: the steady steps that median rests on.
        peak: (FLOP/s of one device, where that figure comes from), or None when unknown. XLA's
            figures are those of one device's program (under data parallelism each device runs one),
            so the rates are per device too.
        withheld: why the rates cannot rest on the steady step here (then they are None), or None.

    Returns:
        ``flops_per_step``, ``peak_bytes`` (the program's memory), ``flops_per_second``,
        ``bytes_per_second`` and ``mfu`` (each None when it cannot be said; the rates also when fewer
        than ``MIN_STEADY_SAMPLES`` steady steps measured them), ``steady_steps``, ``peak_flops``,
        ``peak_source``.
    """
    # A rate rests on the steady median: withheld (None) below the steps a steady figure needs.
    if withheld is None and not (steady_seconds and steady_steps >= MIN_STEADY_SAMPLES):
        withheld = f"{steady_steps} steady steps ({MIN_STEADY_SAMPLES} needed)"
    seconds = None if withheld else steady_seconds
    flops_per_second = cost.flops / seconds if seconds and cost.flops is not None else None
    bytes_per_second = cost.bytes_accessed / seconds if seconds and cost.bytes_accessed is not None else None
    mfu = None
    if flops_per_second is not None and peak is not None and peak[0] > 0:
        mfu = flops_per_second / peak[0]
    return {
        "flops_per_step": cost.flops,
        "peak_bytes": cost.peak_bytes,
        "flops_per_second": flops_per_second,
        "bytes_per_second": bytes_per_second,
        "mfu": mfu,
        "steady_steps": steady_steps,
        "peak_flops": None if peak is None else peak[0],
        "peak_source": None if peak is None else peak[1],
        "rates_withheld": withheld,
    }
