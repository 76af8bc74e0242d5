"""What a compiled program costs: its FLOPs, bytes and memory (``ProgramCost``), and a phase's achieved
rates at steady state (``phase_rates``). Pure: the backends measure (``backends/*/cost.py``), this reads.

A figure a source cannot give is None ("unavailable"), never a number: XLA's cost analysis answers -1
for what it does not know (jax-ml/jax#16008), and some platforms answer an all-zero record as a
placeholder (jax-ml/jax#18954). A real 0 stays 0 (an output that aliases nothing has 0 alias bytes).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from xla_keras.core.plain_data import known_fields
from xla_keras.core.timing import MIN_STEADY_SAMPLES

# A rate rests on the phase's steady step: it is withheld below the steady steps a steady figure needs.
# Under JAX the steady step is measured between drains (core/timing.py), the device's own time, so a short
# run (an epoch of 20 steps) gives rates as soon as one interval closed; no minimum run length applies.
MIN_RATE_STEPS = MIN_STEADY_SAMPLES

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


@dataclass(frozen=True)
class ProgramSteps:
    """One program a phase ran and the steps that ran it (``cost`` None: a program never analysed, or
    steps whose signature the phase could not keep)."""

    cost: Optional[ProgramCost]
    steps: int


# The share of a phase's steps whose program's FLOPs must be known for its rates: the steps left out could
# cost more or less than those counted, so they may move the mean by their share at most.
MIN_RATE_COVERAGE = 0.9


def rate_steps_words(steady_steps: int) -> str:
    """Why a rate is withheld below ``MIN_RATE_STEPS`` steady steps."""
    return f"{steady_steps} steady steps ({MIN_RATE_STEPS} needed)"


def phase_rates(
    programs: Union[ProgramCost, Sequence[ProgramSteps]],
    steady_seconds: Optional[float],
    steady_steps: int,
    peak: Optional[Tuple[float, str]],
    withheld: Optional[str] = None,
    intervals: int = 0,
    mean_seconds: Optional[float] = None,
) -> Dict[str, Any]:
    """A phase's achieved rates at steady state: the FLOPs its steps ran over the time they took.

    Each program's FLOPs count once per step that ran it: ``flops_per_step`` is their mean over the
    steps whose program's FLOPs are known (``program_steps`` of the phase's ``steps_ran``: at least
    ``MIN_RATE_COVERAGE`` of them, else the figures are withheld, the steps left out could cost otherwise),
    and the time base is the phase's steady step (the monitor keeps no time per signature), so
    ``flops_per_second`` = sum(FLOPs x steps) / (steps x steady step). With several programs the steady
    step is a mean time: the intervals' (JAX), or ``mean_seconds``, the mean of the steps timed one by one
    (TensorFlow), where their median would be one program's step.

    Args:
        programs: the programs the phase ran, each with the steps that ran it; a single ``ProgramCost``:
            the one program every step ran.
        steady_seconds: the phase's steady step, or None (not measured).
        steady_steps: the steady steps it rests on.
        peak: (FLOP/s of one device, where that figure comes from), or None when unknown. XLA's
            figures are those of one device's program (under data parallelism each device runs one),
            so the rates are per device too.
        withheld: why the rates cannot rest on the steady step here (then they are None), or None.
        intervals: the intervals the steady step is the mean of (0: the median of steps timed one by one).
        mean_seconds: the mean of the steps timed one by one (TensorFlow), the time base of several programs.

    Returns:
        ``flops_per_step`` (the mean over the steps whose FLOPs are known), ``peak_bytes`` (the largest
        program's memory, when every program's is known), ``flops_per_second``, ``bytes_per_second`` and
        ``mfu`` (each None when it cannot be said; the rates also below ``MIN_RATE_STEPS`` steady steps),
        ``steady_steps``, ``programs`` and ``program_steps`` (the programs and steps the FLOPs weigh),
        ``steps_ran`` (every step of the phase's programs), ``time_base`` (in words), ``peak_flops``,
        ``peak_source``, ``rates_withheld``.
    """
    if isinstance(programs, ProgramCost):
        programs = (ProgramSteps(programs, max(1, steady_steps)),)
    ran = [program for program in programs if program.steps > 0]
    total = sum(program.steps for program in ran)
    counted = [p for p in ran if p.cost is not None and p.cost.flops is not None]
    steps = sum(program.steps for program in counted)
    flops_per_step = _mean_per_step(counted, "flops", steps)
    bytes_per_step = _mean_per_step(counted, "bytes_accessed", steps)
    peaks = [program.cost.peak_bytes for program in ran if program.cost is not None]
    known = [peak for peak in peaks if peak is not None]
    peak_bytes = max(known) if known and len(known) == len(ran) else None  # the largest program's, if all known
    if withheld is None and ran and steps < MIN_RATE_COVERAGE * total:
        unknown = len(ran) - len(counted)
        withheld = (
            f"FLOPs unknown for {total - steps} of {total} steps ({unknown} of {len(ran)} programs not analysed: "
            "past the cap or the card's budget, unavailable, or not kept)"
        )
        flops_per_step = bytes_per_step = None
    # A rate rests on the steady step: withheld (None) below the steps a steady figure needs.
    if withheld is None and not (steady_seconds and steady_steps >= MIN_RATE_STEPS):
        withheld = rate_steps_words(steady_steps)
    several = len(ran) > 1 and not intervals
    base = mean_seconds if several else steady_seconds
    if withheld is None and several and not base:
        withheld = f"{len(ran)} programs: no mean of their steps' times yet"
    seconds = None if withheld else base
    flops_per_second = flops_per_step / seconds if seconds and flops_per_step is not None else None
    bytes_per_second = bytes_per_step / seconds if seconds and bytes_per_step is not None else None
    mfu = None
    if flops_per_second is not None and peak is not None and peak[0] > 0:
        mfu = flops_per_second / peak[0]
    return {
        "flops_per_step": flops_per_step,
        "peak_bytes": peak_bytes,
        "flops_per_second": flops_per_second,
        "bytes_per_second": bytes_per_second,
        "mfu": mfu,
        "steady_steps": steady_steps,
        "programs": len(counted),
        "program_steps": steps,
        "steps_ran": total,
        "time_base": time_base_words(steady_steps, intervals, several),
        "peak_flops": None if peak is None else peak[0],
        "peak_source": None if peak is None else peak[1],
        "rates_withheld": withheld,
    }


def time_base_words(steady_steps: int, intervals: int, mean: bool = False) -> str:
    """The time the rates divide by, in words."""
    if intervals:
        return f"the phase's steady step: the mean of {steady_steps} steps over {intervals} intervals"
    if mean:
        return "the mean of the phase's steady steps, each timed on its own (several programs)"
    return f"the phase's steady step: the median of {steady_steps} steps timed one by one"


def _mean_per_step(ran: Sequence[ProgramSteps], name: str, total: int) -> Optional[float]:
    """The figure's mean over the steps that ran (each program's once per step that ran it), or None
    when one of the programs lacks it."""
    summed = 0.0
    for program in ran:
        value = None if program.cost is None else getattr(program.cost, name)
        if value is None:
            return None
        summed += value * program.steps
    return summed / total if ran and total else None
