"""The compile probe on TensorFlow: an in-memory profiler session around exactly the calls that compile.

A probe costs ~8 ms, negligible on a step that compiles for hundreds of ms, so
only the calls the session asks for are probed (a signature new to the
function, the first few occurrences under auto-clustering, known ragged
shapes). What a probe returns, in order of preference:

* XLA's compiler events (TensorFlow 2.18+): one duration per compiled module,
  from the op that triggered the compile to the end of its last compiler event
  (``trace_events.compiled_modules``), ``source="profiler"``;
* where the compiler emits no events (2.16/2.17 on CPU, known from the version
  or found out at a step that must have compiled): the span of the op that
  triggered each compile (``source="op_span"``);
* a load from the persistent cache: the op's span up to the executable's first
  run (``cached=True``). A blind probe tells loads from compiles by the cache
  entries a fresh compile writes.
If nothing can be timed, the observation says so and the session estimates
from step time. Only one profiler session may run per process: a busy
profiler is noted once and the call goes unprobed.

Under auto-clustering a train call with a new signature is the one that builds the step's graph: the probe
also keeps that graph, as TensorFlow's executor runs it (``step_graphs``: auto-clustering's coverage names
its nodes from it, whatever the trace window saw).
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from xla_keras.backends.base import ProfilerBusy
from xla_keras.backends.tensorflow import _internals
from xla_keras.backends.tensorflow.flags import tracing_count
from xla_keras.backends.tensorflow.trace_events import (
    STEP_KERNEL_COMPILE_MIN_SECONDS,
    cache_loads_from_trace,
    compiled_modules,
    has_compiler_events,
    step_kernel_seconds,
    xla_compile_ops,
)
from xla_keras.core.types import CallPlan, CompileObservation, Notes
from xla_keras.jit.modes import JitState, ProbeFacts

CACHE_ENTRY_PREFIX = "xla_compile_cache__"
MAX_STEP_GRAPHS = 16  # a storm under auto-clustering builds a graph per signature: the latest are kept


def cache_entries(cache_dir: str) -> int:
    """How many executables TensorFlow's persistent cache holds in ``cache_dir``
    (one file each): a fresh compile adds one, a load adds none."""
    try:
        return sum(1 for name in os.listdir(cache_dir) if name.startswith(CACHE_ENTRY_PREFIX))
    except OSError:
        return 0


def blind_note(how: str) -> str:
    return (
        f"TensorFlow {_internals.versions()['tensorflow']}'s XLA compiler emits no profiler events here ({how}): "
        "compile seconds are the profiler's span of the op that triggered each compile (the step function's "
        "kernel under jit_compile=True, each cluster's _XlaCompile op under auto-clustering; "
        "source='op_span', within a few % of TensorFlow's own compile-time lines), counts come from new input "
        "signatures (jit on) or compiling _XlaCompile ops (auto-clustering)"
    )


class _Handle:
    __slots__ = ("session", "cache_entries", "tracing_before", "graphs")

    def __init__(self, session, cache_entries_before, tracing_before, graphs=False):
        self.session = session
        self.cache_entries = cache_entries_before
        self.tracing_before = tracing_before
        self.graphs = graphs  # TensorFlow keeps the graphs this call builds (auto-clustering's coverage)


class TensorFlowProbe:
    """Probes one report's calls; knows whether XLA's compiler can be seen here."""

    def __init__(self, notes: Notes, step_function: Any = lambda phase: None, step_graphs: Optional[List] = None):
        self.notes = notes
        self._step_function = step_function  # phase -> the tf.function that runs (tracing counts)
        # The graphs that train calls with a new signature built under auto-clustering, as the executor runs
        # them (_internals.stop_graph_collection's lists), the latest last.
        self.step_graphs: List = [] if step_graphs is None else step_graphs
        self.cache: Optional[dict] = None  # the effective persistent cache: {"dir", "effective"}
        self.off = ""
        self.used = self.busy = self.blind = self.xla_ops_seen = False
        self._sees_compiler = _internals.profiler_sees_xla_compiler()  # True, False, or None: not known here
        if self._sees_compiler is False:
            self._go_blind("known for this version on CPU")

    def configure(self, cache: Optional[dict], multi_worker: bool) -> None:
        """At the start of each call: the persistent cache, and whether probes are off (multi-worker:
        stopping a profiler session aborted workers, see MULTI_WORKER_PROFILER)."""
        self.cache = cache if cache and cache.get("effective") else None
        self.off = "under MultiWorkerMirroredStrategy" if multi_worker else ""

    compiles_outside = 0  # XLA compiles only inside the step calls here (auto-clustering's are step calls too)

    @property
    def facts(self) -> ProbeFacts:
        return ProbeFacts(
            used=self.used,
            busy=self.busy,
            off=self.off,
            blind=self.blind,
            xla_ops_seen=self.xla_ops_seen,
            framework=f"TensorFlow {_internals.versions()['tensorflow']}",
        )

    def _go_blind(self, how: str) -> None:
        self.blind = True
        self.notes.add_once("blind-probe", blind_note(how))

    def start(self, plan: CallPlan, jit: JitState) -> Optional[_Handle]:
        if self.off:
            return None
        step_fn = self._step_function(plan.phase)
        # A cache load shows no compiler event either: a fresh compile is the one that adds an entry.
        entries = cache_entries(self.cache["dir"]) if self.cache and (self.blind or jit.active) else None
        tracing = tracing_count(step_fn)  # did this call also trace?
        try:
            session = _internals.start_probe()
        except ProfilerBusy:
            self.busy = True
            self.notes.add_once(
                "profiler-busy",
                "the profiler was busy (another profiling session, e.g. "
                "keras.callbacks.TensorBoard(profile_batch=...)): calls that began while it was could "
                "not be probed",
            )
            return None
        return _Handle(session, entries, tracing, self._collect_graphs(plan, jit))

    def abandon(self, handle: Optional[_Handle]) -> None:
        if handle is not None and handle.session is not None:
            session, handle.session = handle.session, None
            self._keep_graphs(handle, keep=False)
            _internals.abandon_probe(session)

    def _collect_graphs(self, plan: CallPlan, jit: JitState) -> bool:
        """A train call with a new signature under auto-clustering builds the step's graph: keep it."""
        if not (plan.new and plan.phase == "train" and jit.autoclustering):
            return False
        try:
            return _internals.start_graph_collection()
        except Exception as error:  # noqa: BLE001 - the coverage then names the nodes from its trace window
            self.notes.add_once("step-graph", f"the step's graph could not be kept: {error!r}")
            return False

    def _keep_graphs(self, handle: _Handle, keep: bool = True) -> None:
        if not handle.graphs:
            return
        handle.graphs = False
        try:
            graphs = _internals.stop_graph_collection()
        except Exception as error:  # noqa: BLE001 - the coverage then names the nodes from its trace window
            self.notes.add_once("step-graph", f"the step's graph could not be kept: {error!r}")
            return
        if keep:
            self.step_graphs.extend(graphs)
            del self.step_graphs[:-MAX_STEP_GRAPHS]

    def stop(self, handle: _Handle, plan: CallPlan, jit: JitState) -> CompileObservation:
        session, handle.session = handle.session, None
        try:
            events = _internals.stop_probe(session)
        finally:
            self._keep_graphs(handle)
        self.used = True
        after = tracing_count(self._step_function(plan.phase))
        traced = after is not None and after != handle.tracing_before
        fresh = (
            None
            if handle.cache_entries is None or self.cache is None
            else max(0, cache_entries(self.cache["dir"]) - handle.cache_entries)
        )
        modules = compiled_modules(events)
        if modules:
            return CompileObservation(
                tuple(seconds for seconds, _ in modules), "profiler", False, traced, programs=_programs(modules)
            )
        if (
            self._sees_compiler is None
            and not self.blind
            and plan.new
            and jit.active
            and fresh != 0
            and not has_compiler_events(events)
            and self._op_spans(events, plan, jit)
        ):
            # Not known for this version and device (2.16/2.17 with an accelerator): jit_compile=True,
            # an input signature new to the function and a compile-long kernel, yet no compiler event.
            self._go_blind("no XLA compiler event appeared in the probe of a step that compiled")
        if self.blind:
            spans = self._op_spans(events, plan, jit)
            if spans is None:
                return CompileObservation((), "op_span", False, traced, measured=False)
            # Fresh compiles write cache entries; loads do not (nor does a read-only cache: unknown).
            # Mixed: cannot tell which is which.
            if fresh is None or not spans:
                cached = False if not (self.cache and self.cache.get("read_only")) else None
            else:
                cached = True if fresh == 0 else False if fresh >= len(spans) else None
            return CompileObservation(
                tuple(seconds for seconds, _ in spans), "op_span", cached, traced, programs=_programs(spans)
            )
        if plan.new and self.cache:
            loads = cache_loads_from_trace(events)
            if loads:
                return CompileObservation(tuple(loads), "profiler", True, traced)
        return CompileObservation((), "profiler", False, traced)  # nothing compiled (e.g. a lazy cluster)

    def _op_spans(self, events, plan: CallPlan, jit: JitState):
        if jit.active:
            # jit_compile=True: one kernel per batch; a batch that compiled did it in its own kernel,
            # which then runs far longer than a step (a shape new to the ledger may have been compiled
            # already, e.g. by another monitor's calls: then its kernel is step-sized, no compile).
            kernels = step_kernel_seconds(events)
            if len(kernels) != plan.batches:
                return None  # cannot map kernels to batches: step timing estimates these compiles
            floor = max(STEP_KERNEL_COMPILE_MIN_SECONDS, 3 * (plan.steady_seconds or 0.0))
            candidates = plan.new_indices or (range(plan.batches) if plan.value_probe else ())
            return [(kernels[i], None) for i in candidates if kernels[i] >= floor]
        compiled, ops = xla_compile_ops(events)
        self.xla_ops_seen = self.xla_ops_seen or ops > 0
        return compiled


def _programs(modules: List[Tuple[float, Optional[str]]]) -> Tuple[Optional[str], ...]:
    """Each module's program, or () when every one is the step's own."""
    programs = tuple(program for _, program in modules)
    return programs if any(programs) else ()
