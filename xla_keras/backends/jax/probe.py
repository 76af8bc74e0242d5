"""Compile accounting on JAX, from JAX's own ``jax.monitoring`` events.

JAX reports every compile it does, synchronously, on the thread that asked for
it: the tracing of a function (``jaxpr_trace_duration``, named after the Python
function), its lowering to an MLIR module and the XLA backend compile (both
named ``jit(<function>)``), and, for the persistent cache, a hit just before
the compile event it replaced. One process-wide listener (``EventRecorder``)
files each event under the step call that is running on that thread, or,
outside every step call, as a compile outside the steps.

Per call the probe (``JaxProbe.stop``) reads the events in order:

* every backend compile named like the step function that ran is one XLA
  executable: one ``Compilation``, its seconds the step's tracing + lowering +
  backend compile (the three ``jax_log_compiles`` lines), ``cached`` when the
  persistent cache served it;
* any other compile inside the call is op level (``jit_compile=False`` runs the
  step op by op, and JAX compiles one small executable per primitive and
  shape) or a helper (predict's jitted ``concatenate``): counted as a total;
* a call that compiled nothing and had no new signature returns None, so its
  time counts as a steady step.

The listener costs nothing on a step that compiles nothing: JAX calls it only
when it compiles. Registering costs nothing per step either: a step call only
pushes and pops a list.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from xla_keras.backends.jax import _internals
from xla_keras.core.signatures import fingerprint, signature_of
from xla_keras.core.types import CallPlan, CompileObservation, Notes
from xla_keras.jit.modes import JitState, ProbeFacts

Event = Tuple[str, float, str, bool]  # (event name, seconds, fun_name, served by the persistent cache)
_KEPT = (_internals.TRACE_EVENT, _internals.LOWER_EVENT, _internals.COMPILE_EVENT)


class Totals:
    """Count and seconds of compiles kept out of the step ledger."""

    __slots__ = ("count", "seconds")

    def __init__(self):
        self.count = 0
        self.seconds = 0.0

    def add(self, events: List[Event]) -> None:
        for event, seconds, _, _ in events:
            if event == _internals.COMPILE_EVENT:
                self.count += 1
            if event != _internals.TRACE_EVENT:  # a trace may nest inside another: lowering + compile only
                self.seconds += seconds

    def to_dict(self) -> dict:
        return {"count": self.count, "seconds": self.seconds}


class EventRecorder:
    """The process-wide jax.monitoring listener (registered once, on first use)."""

    def __init__(self):
        self._calls: List[List[Event]] = []  # open step calls (chained monitors nest them)
        self._thread: Optional[int] = None
        self._outside: "weakref.WeakSet" = weakref.WeakSet()  # probes counting compiles outside the steps
        self._hits: set = set()  # the threads whose next compile event is a cache load
        self._precompiling: Dict[int, List[Event]] = {}  # thread -> the events of its precompile (before step 1)
        self._batches: Dict[int, Any] = {}  # id(events) -> the batches of a call that compiled (read at its stop)
        self._registered = False
        self._lock = threading.Lock()

    def register(self) -> None:
        with self._lock:
            if self._registered:
                return
            from jax import monitoring

            monitoring.register_event_duration_secs_listener(self._on_duration)
            monitoring.register_event_listener(self._on_event)
            self._registered = True

    def begin(self) -> List[Event]:
        events: List[Event] = []
        self._calls.append(events)
        self._thread = threading.get_ident()
        return events

    def end(self, events: List[Event]) -> None:
        calls = self._calls
        if calls and calls[-1] is events:  # the usual case: the innermost call ends first
            calls.pop()
        else:
            for i in range(len(calls) - 1, -1, -1):
                if calls[i] is events:
                    del calls[i]
                    break
        if not calls:
            self._thread = None

    def precompile_begin(self) -> List[Event]:
        """This thread precompiles (``backends/jax/precompile.py``): its events are its own until ``precompile_end``."""
        self.register()
        events: List[Event] = []
        self._precompiling[threading.get_ident()] = events
        return events

    def precompile_end(self) -> None:
        self._precompiling.pop(threading.get_ident(), None)

    def watch_outside(self, probe: "JaxProbe") -> None:
        self._outside.add(probe)

    def attach(self, events: List[Event], batches: Any) -> None:
        """The batches of a call that compiled (``events`` not empty): its probe reads their placement."""
        self._batches[id(events)] = batches

    def batches_of(self, events: List[Event]) -> Any:
        return self._batches.pop(id(events), None)

    def _on_event(self, event: str, **_: Any) -> None:
        if event == _internals.CACHE_HIT_EVENT:
            self._hits.add(threading.get_ident())  # the next compile event of this thread was a load

    def _on_duration(self, event: str, seconds: float, **kwargs: Any) -> None:
        if event not in _KEPT:
            return
        hit = False
        thread = threading.get_ident()
        if event == _internals.COMPILE_EVENT and thread in self._hits:
            hit = True
            self._hits.discard(thread)
        record = (event, float(seconds), str(kwargs.get("fun_name", "")), hit)
        precompiling = self._precompiling.get(thread)
        if precompiling is not None:  # a precompile's own events: no step's, and no compile outside the steps
            precompiling.append(record)
            return
        if self._calls and threading.get_ident() == self._thread:
            for events in self._calls:
                events.append(record)
            return
        for probe in list(self._outside):
            probe.outside_step(record)


RECORDER = EventRecorder()


UNNAMED_EVENTS = (
    "JAX {version} names no function in its compile events (JAX 0.6.1 and later do): the step's compiles are "
    "the growth of its jitted function's executable cache, taken in order from the unnamed compile events of "
    "the call (the step runs before any helper of its call, e.g. predict's concatenate)"
)


def split(
    events: List[Event], compiled: Optional[str], traced: Optional[str], unnamed_steps: Optional[int] = None
) -> Tuple[list, list, list]:
    """(seconds of each step executable, whether each was a cache load, the other compiles' events).

    Events without a name (JAX before 0.6.1) inside a jitted step call: the first ``unnamed_steps``
    compiles are the step's (all of them when that is unknown), the rest are others."""
    modules: List[float] = []
    loads: List[bool] = []
    other: List[Event] = []
    # The step's tracing and lowering, until its compile event closes them. Unnamed traces nest (the
    # step's own trace holds its inner functions' traces): the longest of them is the step's.
    pending, unnamed_trace = 0.0, 0.0
    budget = unnamed_steps
    for record in events:
        event, seconds, name, hit = record
        unnamed = compiled is not None and not name and (budget is None or budget > 0)
        if event == _internals.COMPILE_EVENT and compiled is not None and (name == compiled or unnamed):
            if unnamed and budget is not None:
                budget -= 1
            modules.append(pending + unnamed_trace + seconds)
            loads.append(hit)
            pending, unnamed_trace = 0.0, 0.0
        elif event == _internals.TRACE_EVENT and compiled is not None and unnamed:
            unnamed_trace = max(unnamed_trace, seconds)
        elif compiled is not None and (
            (event == _internals.LOWER_EVENT and (name == compiled or unnamed))
            or (event == _internals.TRACE_EVENT and name == traced)
        ):
            pending += seconds
        elif event != _internals.TRACE_EVENT:
            other.append(record)
    return modules, loads, other


class JaxProbe:
    """One report's compile accounting. It is free, so every step call is observed
    (``always``); the monitor does not need to choose which calls to probe."""

    always = True

    def __init__(self, notes: Notes, step_function: Callable[[str], Any], watching: Callable[[], bool]):
        self.notes = notes
        self._step_function = step_function  # phase -> the function that runs per batch
        self._watching = watching  # the monitor is inside a fit / evaluate / predict
        self.cache: Optional[dict] = None
        self.used = False
        self.op_level = Totals()  # compiles inside step calls that are not the step's executable
        self.outside = Totals()  # compiles outside the step calls, while watching
        self.off = ""
        self._sizes: Dict[str, Tuple[int, Optional[int]]] = {}  # phase -> (id of the step fn, executables it held)
        self.keys = CompileKeys()
        RECORDER.register()
        RECORDER.watch_outside(self)

    @property
    def facts(self) -> ProbeFacts:
        return ProbeFacts(used=self.used, framework=f"JAX {_internals.versions()['jax']}", source="jax.monitoring")

    def configure(self, cache: Optional[dict], multi_worker: bool) -> None:
        self.cache = cache if cache and cache.get("effective") else None

    def start(self, plan: CallPlan, jit: JitState) -> List[Event]:
        if plan.phase not in self._sizes:  # once per phase: what the step function held before we watched
            self._sizes[plan.phase] = self._executables(plan.phase)
        return RECORDER.begin()

    def _executables(self, phase: str) -> Tuple[int, Optional[int]]:
        step_fn = self._step_function(phase)
        return id(step_fn), _internals.executable_count(step_fn)

    def abandon(self, handle: Optional[List[Event]]) -> None:
        if handle is not None:
            RECORDER.end(handle)

    def stop(self, handle: List[Event], plan: CallPlan, jit: JitState) -> Optional[CompileObservation]:
        RECORDER.end(handle)
        self.used = True
        if not handle and not plan.new:
            return None  # nothing compiled: a steady step
        step_fn = self._step_function(plan.phase)
        before, now = self._sizes.get(plan.phase), (id(step_fn), _internals.executable_count(step_fn))
        self._sizes[plan.phase] = now
        unnamed_steps = None
        if any(not e[2] for e in handle):
            self.notes.add_once("jax-unnamed-events", UNNAMED_EVENTS.format(version=_internals.versions()["jax"]))
            if now[1] is not None:
                held = before[1] if before is not None and before[0] == now[0] and before[1] is not None else 0
                unnamed_steps = max(0, now[1] - held)
        modules, loads, other = split(
            handle, _internals.compiled_name(step_fn), _internals.traced_name(step_fn), unnamed_steps
        )
        if other:
            self.op_level.add(other)
        batches = RECORDER.batches_of(handle)
        if not modules:
            # Nothing of the step compiled; op-level or helper compiles still cost this step time.
            return CompileObservation((), "jax", False, False) if (plan.new or other) else None
        cached: Optional[bool] = all(loads) if (all(loads) or not any(loads)) else None
        traced = any(e[0] == _internals.TRACE_EVENT for e in handle)
        cause, why = self.keys.compiled(plan.phase, id(step_fn), batches, bool(plan.new))
        return CompileObservation(tuple(modules), "jax", cached, traced, cause=cause, why=why)

    @property
    def compiles_outside(self) -> int:
        return self.outside.count

    def outside_step(self, record: Event) -> None:
        if self._watching():
            self.outside.add([record])

    def other_compiles(self) -> Dict[str, dict]:
        """Compiles kept out of the step ledger, as totals for the report."""
        out = {}
        if self.op_level.count:
            out["in_steps"] = self.op_level.to_dict()
        if self.outside.count:
            out["outside_steps"] = self.outside.to_dict()
        return out


# Per phase, the compiles whose keys are kept to tell why a later one happened (the last ones, bounded).
KEPT_KEYS = 64
# (signature fingerprint, id of the step function, tracing context, ((input, its placement), ...))
Key = Tuple[int, int, tuple, Tuple[Tuple[str, str], ...]]


class CompileKeys:
    """What JAX keyed each step compile on beyond the input signature: the tracing context (its
    configuration) and each argument's placement (numpy or jax.Array, sharding, committed, weak type), the
    step's state (the model's variables) included. A compile at a known signature is explained by its
    difference from the closest earlier compile of that signature, as JAX's cache-miss explanation does."""

    def __init__(self) -> None:
        self._keys: Dict[str, List[Key]] = {}

    def compiled(self, phase: str, function: int, arguments: Any, new: bool) -> Tuple[Optional[str], Optional[str]]:
        """A step compile of ``phase`` (``new``: at a signature new to the function; ``arguments``: the call's
        (state, batches)): its (cause, words) when the signature was known (``core.types.CAUSES``), else
        (None, None)."""
        if not arguments or not arguments[1]:
            return (None, None) if new else ("unknown", "the batch of the call that compiled was not kept")
        state, batches = arguments
        signature = signature_of(batches[-1], None)
        leaves = _leaves(batches[-1])
        named = [(f"input '{leaf.path}'", _internals.placement(array)) for leaf, array in zip(signature, leaves)]
        if state is not None:
            kinds = sorted({_internals.placement(array) for array in _leaves(state)})
            named.append(("the step's state (the model's variables)", "; ".join(kinds)))
        key: Key = (fingerprint(signature), function, _internals.trace_context(), tuple(named))
        kept = self._keys.setdefault(phase, [])
        same = [k for k in kept if k[0] == key[0]]
        kept.append(key)
        del kept[:-KEPT_KEYS]
        if new:
            return None, None
        if not any(k[1] == function for k in same):
            return "function", "a step function JAX had not compiled for this signature (a new jitted function)"
        closest = min((k for k in same if k[1] == function), key=lambda k: _differences(k, key))
        if closest[2] != key[2]:
            return "context", _internals.explain_context(key[2], closest[2])
        changed = [(name, old, now) for (name, old), (_, now) in zip(closest[3], key[3]) if old != now]
        if changed:
            name, old, now = changed[0]
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            return "placement", (
                f"the same shapes and dtypes, placed or typed differently: {name} is now {now}, before {old}{more}; "
                "JAX compiles once per placement of its arguments (sharding, committed device) and weak type"
            )
        return "unknown", "JAX compiled the step again at the same signature, context and placement"


def _differences(old: Key, new: Key) -> int:
    context = sum(1 for a, b in zip(old[2], new[2]) if a != b)
    return context + sum(1 for a, b in zip(old[3], new[3]) if a != b)


def _leaves(batch: Any) -> List[Any]:
    """A batch's (or the state's) arrays, in the order ``signature_of`` walks them (nests of tuples, lists
    and dicts)."""
    if isinstance(batch, dict):
        return [leaf for key in sorted(batch, key=str) for leaf in _leaves(batch[key])]
    if isinstance(batch, (tuple, list)):
        return [leaf for part in batch for leaf in _leaves(part)]
    return [] if batch is None else [batch]
