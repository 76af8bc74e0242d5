"""Keras's TensorFlow backend: what XlaMonitor needs, behind ``backends.base.Backend``.

``steps.py`` wraps the step functions and pulls batches, ``probe.py`` times
compiles with the profiler, ``jit.py`` applies and reads back JIT modes (and
``configure()``, the early opt-in), ``flags.py`` parses TF_XLA_FLAGS, and
``_internals.py`` holds every private TensorFlow / Keras API the package uses.
TensorFlow itself is imported inside functions only: ``import xla_keras``
stays light.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from xla_keras.backends.base import Distribution, StepObserver
from xla_keras.backends.chain import FUNCTION_ATTR
from xla_keras.backends.keras_backend import KerasBackend, is_keras3_model
from xla_keras.backends.tensorflow import _internals, cost
from xla_keras.backends.tensorflow.flags import has_accelerator, tracing_count
from xla_keras.backends.tensorflow.jit import JitController, persistent_cache, unsupported_op
from xla_keras.backends.tensorflow.probe import TensorFlowProbe
from xla_keras.backends.tensorflow.steps import StepWrappers, end_of_data
from xla_keras.core.program_cost import ProgramCost
from xla_keras.core.signatures import InputSignature, signature_of
from xla_keras.core.types import Notes
from xla_keras.core.versions import keras_unsupported
from xla_keras.jit.coverage import GraphNode, step_graph, trace_coverage
from xla_keras.jit.modes import MODES
from xla_keras.jit.unsupported import layer_named, user_line
from xla_keras.jit.value_keys import ValueKey
from xla_keras.storms.fixes import data_kind_of

__all__ = ["TensorFlowBackend"]

# Measured on TF 2.21 with two local workers: stopping a profiler session in
# a MultiWorkerMirroredStrategy worker aborts the process ("double free or
# corruption", in ProfilerSession.stop) in about 1 run in 4; never seen without
# a strategy or under MirroredStrategy.
MULTI_WORKER_PROFILER = (
    "under MultiWorkerMirroredStrategy the monitor does not start the profiler (TensorFlow 2.21 aborted the "
    "worker process when a profiling session stopped, about 1 run in 4 in our tests): new input signatures are "
    "counted as compiles and their seconds estimated from step time; auto-clustering's modules are not counted "
    "one by one, and automatic traces are off (profile=(start, stop) still traces, at that risk)"
)


class TensorFlowBackend(KerasBackend):
    """One per monitor: it holds the monitor's JIT controller and step wrappers."""

    name = "tensorflow"
    jit_modes: ClassVar[Tuple[str, ...]] = MODES
    multi_worker_note: Optional[str] = MULTI_WORKER_PROFILER
    op_by_op_shape_seconds: Optional[float] = None  # TensorFlow's kernels run without compiling
    ends_calls_in_wrapper = False  # Keras runs batch-end hooks in line (TensorFlow is not thread-safe for it)
    parallel_precompile = False  # one function's compiles do not overlap (backends/tensorflow/precompile.py)
    precompiles_in_processes = False  # under a tf.distribute strategy the set is not precompiled (why_not)
    _internals = _internals
    _wrapper_chain = StepWrappers
    _unsupported_op = staticmethod(unsupported_op)
    # Measured (TF 2.21, 2-core CPU): a fit's first call traces Keras's step (0.63-1.0 s for the small MLP
    # and CNN of benchmarks/); the XLA function's first call traces it again and compiles it: 1.3-2.0x
    # that in the fit (MLP 1.3x, CNN 1.9x, an LSTM 2.3x; up to 2.5x when the first trace was not the
    # process's first). Back to the non-XLA function: one more trace, at most as long as the first call.
    trial_first_call = {True: 2.0, False: 1.0}

    def __init__(self, jit_mode: str = "keep"):
        super().__init__(JitController(jit_mode))
        self._gatherer: Optional[Tuple[Any, int]] = None  # MultiWorkerMirroredStrategy: (strategy, worker)
        self._traced: Dict[str, Tuple[int, int]] = {}  # phase -> (id of the step fn, tracing count) last read
        # The step graphs the probes kept (auto-clustering: a train call with a new signature builds one).
        self._step_graphs: List[Any] = []

    def prepare(self, owner: StepObserver) -> None:
        """At monitor construction: the owner of the wrappers; the CPU global-jit flag while it can still be set."""
        super().prepare(owner)
        self.jit.prepare_early()

    # ------------------------------------------------------------ support

    def unsupported(self) -> Optional[str]:
        return keras_unsupported()

    def trace_coverage(self, session_dir: str, layer_names: Sequence[str], steps: int) -> Optional[dict]:
        """Auto-clustering's coverage of the train step, from the steady trace window TensorFlow saved
        (``steps`` train steps): its nodes from the step's graph the probe kept when the step was built,
        their times from the window."""
        events = [(e.name, e.duration_ps) for e in _internals.trace_window_events(session_dir)]
        graphs = [[GraphNode(*node) for node in graph] for graph in self._step_graphs]
        return trace_coverage(
            events, layer_names, steps, op_time=not has_accelerator(), graph=step_graph(graphs, events)
        )

    def foreign_model(self, model: Any) -> Optional[str]:
        if is_keras3_model(model):
            return None
        kind = f"{type(model).__module__}.{type(model).__qualname__}"
        return (
            f"XlaMonitor observes Keras 3 models, and this is a {kind} (tf_keras / TF_USE_LEGACY_KERAS=1, or "
            "Keras 2): its fit builds its step functions differently, so the monitor steps aside and the fit "
            "goes on unmonitored. Fix: build the model with Keras 3 (`import keras`, without "
            "TF_USE_LEGACY_KERAS=1)"
        )

    # ------------------------------------------------------------ step functions

    def signature(self, batch: Any) -> InputSignature:
        return signature_of(batch, _internals.unwrap_distributed)

    def step_function(self, model: Any, phase: str) -> Any:
        """The tf.function that runs ``phase`` (under every wrapper), or None."""
        if model is None:
            return None
        return _internals.find_step_function(_internals.unwrap(getattr(model, FUNCTION_ATTR[phase], None)))

    cost_source = cost.SOURCE
    # Measured (2-core CPU): lowering the step again took 12-36% of its compile (an MLP: 55-100 ms of 0.45 s;
    # a Conv1D text model: 0.18 s of 0.5-1.2 s).
    cost_share_of_compile = 0.25
    storm_trace_window = True
    steady_window_in_short_fits = True  # auto-clustering's coverage reads the steady window (jit/coverage.py)

    def cost_spec(self, batch: Any) -> Any:
        return cost.cost_spec(batch)

    def program_cost(self, model: Any, phase: str, spec: Any, mode: str, notes: Notes) -> ProgramCost:
        return cost.program_cost(self.step_function(model, phase), spec, mode)

    def device_kind(self) -> str:
        return cost.device_kind()

    def value_keys(self, model: Any, phase: str, signature: InputSignature) -> Optional[Tuple[ValueKey, ...]]:
        """Inputs XLA takes as compile-time constants whose values the step computes from its arguments,
        read once per trace from the step function's graphs (``_internals.compile_time_constant_uses``):
        None when the function did not trace since the last read, or does not compile as one XLA program."""
        step_fn = self.step_function(model, phase)
        if step_fn is None or not _internals.function_jit_flag(step_fn):
            return None
        count = tracing_count(step_fn)
        if count is None or self._traced.get(phase) == (id(step_fn), count):
            return None
        self._traced[phase] = (id(step_fn), count)
        uses = _internals.compile_time_constant_uses(step_fn)
        if not uses:
            return ()
        variables = _internals.variable_handles(model)
        names = self.layer_names(model)
        paths = [leaf.path for leaf in signature]
        keys = []
        for use in uses:
            if len(paths) == use["arguments"]:
                inputs = tuple(dict.fromkeys(paths[i] for i in use["args"] if i < len(paths)))
            else:
                inputs = ("the batch",) if use["args"] else ()
            weights = tuple(sorted({variables.get(id(h), "a captured tensor") for h in use["captured"]}))
            keys.append(
                ValueKey(
                    op=use["op"],
                    input=use["input"],
                    node=use["node"],
                    layer=layer_named(use["node"].split("/")[:-1], names),
                    line=user_line(use["frames"]),
                    inputs=inputs,
                    weights=weights,
                )
            )
        return tuple(dict.fromkeys(keys))

    def function_fresh(self, model: Any, phase: str) -> Optional[bool]:
        """The phase's step function has never run (its first call will trace), or None: unknown."""
        count = tracing_count(self.step_function(model, phase))
        return None if count is None else count == 0

    # ------------------------------------------------------------ compile probe

    def probe(self, notes: Notes, model: Any, multi_worker: bool) -> TensorFlowProbe:
        """This report's compile probe (it learns whether XLA's compiler can be seen here)."""
        model_ref = weakref.ref(model)
        probe = TensorFlowProbe(notes, lambda phase: self.step_function(model_ref(), phase), self._step_graphs)
        probe.configure(persistent_cache(), multi_worker)
        return probe

    def cache(self) -> Optional[dict]:
        """The persistent compilation cache: {"dir", "effective"}, or None."""
        return persistent_cache()

    # ------------------------------------------------------------ distribution, data

    def distribution(self, model: Any) -> Distribution:
        facts = Distribution(**_internals.strategy_facts(model))
        self._gatherer = (model.distribute_strategy, facts.process) if facts.processes > 1 else None
        return facts

    def data_kind(self, model: Any) -> str:
        """What a storm fix is written for: the kind of the running call's data (``DATA_KINDS``;
        Keras's TensorFlow backend feeds every kind through tf.data, but the fix goes on the user's)."""
        return data_kind_of(_internals.user_data(model), default="tf.data")

    def end_of_data(self) -> tuple:
        return end_of_data()

    def wait_for(self, outputs: Any) -> bool:
        """Keras syncs at every batch end on TensorFlow: a call's outputs are ready once its hook ran."""
        return True

    def gather(self, values: Sequence[float]) -> Optional[List[List[float]]]:
        """Under MultiWorkerMirroredStrategy: every worker's ``values``, by the strategy's all-gather."""
        if self._gatherer is None:
            return None
        from xla_keras.backends.tensorflow.multiworker import gather_rows

        strategy, process = self._gatherer
        return gather_rows(strategy, process, values)

    def multi_worker_fit_problem(self) -> Optional[str]:
        """Keras's own fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): why, when
        TF_CONFIG describes a cluster of two tasks or more; None otherwise."""
        from xla_keras.backends.tensorflow.multiworker import cluster_from_env, keras_fit_problem

        cluster = cluster_from_env()
        if not cluster or cluster.get("tasks", 0) < 2:
            return None
        return keras_fit_problem()
