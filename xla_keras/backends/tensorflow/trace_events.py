"""TensorFlow's profiler trace, read: which XLA modules compiled in a probe, and for how long. Pure.

The events come from ``_internals.stop_probe`` (an in-memory profiler
session around a step); nothing here imports TensorFlow.

Why a module's compile is not simply its compiler events (measured on TF 2.21,
CPU): ``CpuCompiler::RunBackend`` covers HLO->machine code, and
``JitCompiler::Compile`` runs nested inside it, but TF->HLO lowering before it
has no trace event at all. TensorFlow's own "Compilation of XLA executable
time" line spans both. The op that triggers the compile (the function's kernel
under ``jit_compile=True``, ``_XlaCompile`` under auto-clustering) starts when
compilation starts, so a module's compile runs from the start of its innermost
enclosing non-compiler event to the end of its last compiler event. Measured
against TF's line: 416/416, 376/379, 342/345 ms (jit on); 296/298, 136/141 ms
(auto-clustering).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

# One per compiled module (CpuCompiler::RunBackend, GpuCompiler::RunBackend...).
_MODULE_ANCHOR = re.compile(r"^\w*Compiler::RunBackend$")
_MODULE_ANCHOR_FALLBACK = re.compile(r"^\w*Compiler::Compile\w*Executable$")
# Events that are part of compiling, never the op that asked for it.
_COMPILER_EVENT = re.compile(r"Compiler::|^HLO passes|^Codegen$|Pass$|^mlir::|^ThunkEmitter::|^TaskDispatcher::")


class TraceEvent(NamedTuple):
    thread: Tuple[int, int]  # (device id, resource id): one timeline
    name: str
    start_ps: int
    duration_ps: int

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.duration_ps


def _innermost_enclosing(events: List[TraceEvent], anchor: TraceEvent) -> Optional[TraceEvent]:
    best = None
    for e in events:
        if (
            e.start_ps <= anchor.start_ps
            and e.end_ps >= anchor.end_ps
            and e is not anchor
            and not _COMPILER_EVENT.search(e.name)
        ):
            if best is None or e.duration_ps < best.duration_ps:
                best = e
    return best


def compile_seconds_from_trace(events: Iterable[TraceEvent]) -> List[float]:
    """Seconds spent compiling each XLA module seen in a profiler probe, in
    the order the modules were compiled. An empty list means no module was
    compiled during the probe."""
    return [(end - start) / 1e12 for start, end in _module_spans(list(events))]


def compiled_modules(events: Iterable[TraceEvent]) -> List[Tuple[float, Optional[str]]]:
    """(seconds, program) of each XLA module compiled in a profiler probe, in order: ``program`` is the
    one-off function it was compiled for (``ONE_OFF_FUNCTIONS``), None for the step's own program."""
    events = list(events)
    spans = _module_spans(events)
    calls = function_calls(events)
    return [((end - start) / 1e12, one_off_program(calls, start)) for start, end in spans]


# TensorFlow traces each function it runs as "EagerLocalExecute: __inference_<name>_<id>" (a call from
# Python) or "__inference_<name>_<id>" (the function's kernel). Compiles that start inside a one-off
# function are not the step's program: ``initialize_variables`` is the function TensorFlow makes, at a
# tf.function's first call, to initialise the variables its first trace created (Keras's optimizer slots
# and seed generators, built inside the step's first trace); it runs once. Under auto-clustering its
# clusters compile at the first step, before the step's own. Measured on TF 2.21 CPU: a BatchNormalization
# + Dropout model with Adam compiled one such module (its HLO: ``adam/dense_bias_momentum/Initializer/
# zeros``), inside "EagerLocalExecute: __inference_initialize_variables_876", and never ran it again.
_FUNCTION_CALL = re.compile(r"(?:^|: )__inference_(\w+?)_\d+$")
ONE_OFF_FUNCTIONS = ("initialize_variables",)


def function_calls(events: Iterable[TraceEvent]) -> List[Tuple[int, int, str]]:
    """(start, end, name) of each function call traced, any thread."""
    calls = []
    for e in events:
        found = _FUNCTION_CALL.search(e.name)
        if found and e.duration_ps > 0:
            calls.append((e.start_ps, e.end_ps, found.group(1)))
    return calls


def one_off_program(calls: List[Tuple[int, int, str]], at_ps: int) -> Optional[str]:
    """The one-off function (``ONE_OFF_FUNCTIONS``) running at ``at_ps``, if the innermost function call
    around that moment is one; else None (the step's program, or nothing known)."""
    around = [c for c in calls if c[0] <= at_ps <= c[1]]
    if not around:
        return None
    name = min(around, key=lambda c: c[1] - c[0])[2]
    return name if name in ONE_OFF_FUNCTIONS else None


def _module_spans(events: List[TraceEvent]) -> List[Tuple[int, int]]:
    """(start, end) of each module's compile, in picoseconds, in the order they were compiled."""
    by_thread: Dict[Tuple[int, int], List[TraceEvent]] = {}
    for e in events:
        if e.duration_ps > 0:
            by_thread.setdefault(e.thread, []).append(e)
    anchor_re = _MODULE_ANCHOR
    if not any(anchor_re.match(e.name) for evs in by_thread.values() for e in evs):
        anchor_re = _MODULE_ANCHOR_FALLBACK
    found: List[Tuple[int, int, Tuple[int, int]]] = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_ps, -e.duration_ps))
        anchors = [e for e in evs if anchor_re.match(e.name)]
        for i, anchor in enumerate(anchors):
            next_start = anchors[i + 1].start_ps if i + 1 < len(anchors) else None
            outer = _innermost_enclosing(evs, anchor)
            limit = outer.end_ps if outer is not None else None
            end = anchor.end_ps
            for e in evs:
                if e.start_ps < anchor.start_ps or not _COMPILER_EVENT.search(e.name):
                    continue
                if next_start is not None and e.start_ps >= next_start:
                    break
                if limit is None or e.end_ps <= limit:
                    end = max(end, e.end_ps)
            start = outer.start_ps if outer is not None else anchor.start_ps
            previous_end = found[-1][1] if found and found[-1][2] == anchor.thread else None
            if previous_end is not None and previous_end > start:
                start = previous_end  # two modules compiled under one op
            found.append((start, end, anchor.thread))
    found.sort()
    return [(start, end) for start, end, _ in found]


_EXECUTE = re.compile(r"Executable::Execute")
_LOAD_OPS = re.compile(r"^__inference_|^_XlaCompile$|XlaLaunch")


def cache_loads_from_trace(events: Iterable[TraceEvent]) -> List[float]:
    """Seconds spent getting executables that were NOT compiled in this probe:
    loads from TensorFlow's persistent compilation cache.

    Measured on TF 2.21 CPU: a cache hit shows no compiler event at all; the
    op that asked for the executable (the function's kernel under
    jit_compile=True, ``_XlaCompile`` under auto-clustering) runs from the
    start of lowering to the start of the executable's first run. That span
    matched TensorFlow's own "Compilation of XLA executable time" line for the
    load (89.9 vs 87.0 ms, 76.6 vs 75.4 ms). Call this only for a step whose
    signature is new to the function: there an executable must be compiled
    or loaded.
    """
    by_thread: Dict[Tuple[int, int], List[TraceEvent]] = {}
    for e in events:
        if e.duration_ps > 0:
            by_thread.setdefault(e.thread, []).append(e)
    loads = []
    for evs in by_thread.values():
        if any(_COMPILER_EVENT.search(e.name) and "Compiler::" in e.name for e in evs):
            continue  # something compiled on this thread: not (only) a cache load
        ops = [e for e in evs if _LOAD_OPS.search(e.name)]
        # innermost ops only: the kernel, not EagerExecute around it
        ops = [o for o in ops if not any(p is not o and o.start_ps <= p.start_ps and p.end_ps <= o.end_ps for p in ops)]
        for op in ops:
            runs = [e.start_ps for e in evs if _EXECUTE.search(e.name) and op.start_ps <= e.start_ps <= op.end_ps]
            end = min(runs) if runs else op.end_ps
            loads.append((op.start_ps, end))
    loads.sort()
    return [(end - start) / 1e12 for start, end in loads]


def has_compiler_events(events: Iterable[TraceEvent]) -> bool:
    """Whether XLA's compiler left any event in a probe (it compiled, and the
    profiler can see it)."""
    return any("Compiler::" in e.name and e.duration_ps > 0 for e in events)


# When XLA's compiler emits no trace events (TensorFlow 2.16 and 2.17 on CPU),
# the op that asked for the executable is still traced, and a compile happens
# inside it. Measured on TF 2.16 (CPU, small MLP) against TensorFlow's own
# "Compilation of XLA executable time" lines:
# * jit_compile=True: the step function's kernel event on a step whose input
#   signature is new spans lowering + compile + one run: 86.1 vs 85.6 ms,
#   87.6 vs 87.2 ms; on a known signature it takes ~0.2 ms.
# * auto-clustering: each cluster's ``_XlaCompile`` op: 40.7 vs 40.5 ms,
#   74.2 vs 71.3 ms, 87.1 vs 86.9 ms when it compiled, 0.02-0.14 ms when it
#   found the executable in its cache (or deferred a lazy compile).
_STEP_KERNEL = re.compile(r"^__inference_one_step_on_data_\d+$")
_XLA_COMPILE_OP = "_XlaCompile"
# Between the slowest cache lookup (0.14 ms) and the fastest CPU compile seen
# (~15 ms for a one-op function) by two orders of magnitude each way.
XLA_COMPILE_OP_MIN_SECONDS = 1e-3
# A step kernel (jit_compile=True) holds its compile: the fastest seen was 64 ms (a Dense(1) model's
# predict step), a fresh call's first kernel that did not compile 0.4-1.0 ms on an idle CPU and more
# on a busy one (a 1 ms floor counted one as a compile in CI). With no steady step to compare
# against, a kernel must be this long to be a compile.
STEP_KERNEL_COMPILE_MIN_SECONDS = 10e-3


def step_kernel_seconds(events: Iterable[TraceEvent]) -> List[float]:
    """Durations of the step function's kernel events (one per batch Keras
    ran through ``one_step_on_data``), in the order they ran."""
    kernels = sorted((e for e in events if _STEP_KERNEL.match(e.name)), key=lambda e: e.start_ps)
    return [e.duration_ps / 1e12 for e in kernels]


def xla_compile_op_seconds(
    events: Iterable[TraceEvent], min_seconds: float = XLA_COMPILE_OP_MIN_SECONDS
) -> Tuple[List[float], int]:
    """(seconds of each ``_XlaCompile`` op that compiled, in order; how many
    ``_XlaCompile`` ops ran at all). An auto-clustered graph runs one such
    op per cluster per step: none at all means nothing was clustered."""
    compiled, ops = xla_compile_ops(events, min_seconds)
    return [seconds for seconds, _ in compiled], ops


def xla_compile_ops(
    events: Iterable[TraceEvent], min_seconds: float = XLA_COMPILE_OP_MIN_SECONDS
) -> Tuple[List[Tuple[float, Optional[str]]], int]:
    """``xla_compile_op_seconds`` with each compile's program: the one-off function it ran in
    (``ONE_OFF_FUNCTIONS``), None for the step's own."""
    events = list(events)
    calls = function_calls(events)
    ops = sorted((e for e in events if e.name == _XLA_COMPILE_OP), key=lambda e: e.start_ps)
    compiled = [
        (e.duration_ps / 1e12, one_off_program(calls, e.start_ps)) for e in ops if e.duration_ps / 1e12 >= min_seconds
    ]
    return compiled, len(ops)
