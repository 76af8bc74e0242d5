"""Keras's JAX backend: what XlaMonitor needs, behind ``backends.base.Backend``.

``steps.py`` wraps Keras's ``train_function(state, iterator)`` (and test /
predict) and ends each call when the next one begins (no sync), ``probe.py``
counts and times compiles from ``jax.monitoring`` events, ``jit.py`` applies
and reads back ``jit_compile`` and configures JAX's persistent cache, and
``_internals.py`` holds every private JAX / Keras API this backend uses. JAX is
imported inside functions only. What both backends share is ``keras_backend.py``. Several JAX
processes gather a few numbers from each here (``allgather``).
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from xla_keras.backends.base import CompileProbe, Distribution
from xla_keras.backends.jax import _internals, cost
from xla_keras.backends.jax.jit import MODES, JitController, persistent_cache, unsupported_op
from xla_keras.backends.jax.probe import RECORDER, JaxProbe
from xla_keras.backends.jax.steps import StepWrappers, end_of_data, wait_for
from xla_keras.backends.keras_backend import KerasBackend, is_keras3_model
from xla_keras.core.program_cost import ProgramCost
from xla_keras.core.signatures import InputSignature, signature_of
from xla_keras.core.types import Notes
from xla_keras.storms.fixes import data_kind_of

__all__ = ["JaxBackend"]


class JaxBackend(KerasBackend):
    """One per monitor: it holds the monitor's JIT controller and step wrappers."""

    name = "jax"
    jit_modes: ClassVar[Tuple[str, ...]] = MODES
    # Batch-end hooks may run on Keras's executor thread: calls end in the wrapper (steps.py).
    ends_calls_in_wrapper = True
    multi_worker_note: Optional[str] = None  # JAX's compile events are seen in every process
    probes_every_call = JaxProbe.always  # its events cost nothing: every call is seen
    parallel_precompile = True  # the compiles of a lowered step overlap (backends/jax/precompile.py)
    precompiles_in_processes = True  # every process lowers its own copy of the step for the global batch
    # Measured (2-core CPU, batch size over 30 values, on_storm="fallback" against "warn"): op by op,
    # each new shape compiled ~38 executables, 1.0-1.5 s, for MLPs of depth 2 and 16 and a 2-layer
    # convnet, against 0.30-0.48 s for XLA's whole step; steps ran 25-120x slower. docs/jax.md.
    op_by_op_shape_seconds: Optional[float] = 1.0
    _internals = _internals
    _wrapper_chain = StepWrappers
    _unsupported_op = staticmethod(unsupported_op)
    # Measured (JAX on a 2-core CPU): the jitted step's first call (trace + compile) took 0.42 s (MLP) and
    # 1.0 s (CNN); the op-by-op step's first call compiles one executable per primitive and shape: 3.8 s
    # and 6.3 s, up to 9x (cached for the process after that). The other way, at most the first call.
    trial_first_call = {True: 1.0, False: 10.0}

    def __init__(self, jit_mode: str = "keep"):
        super().__init__(JitController(jit_mode))

    # ------------------------------------------------------------ support

    def unsupported(self) -> Optional[str]:
        return None

    def foreign_model(self, model: Any) -> Optional[str]:
        if is_keras3_model(model):
            return None
        kind = f"{type(model).__module__}.{type(model).__qualname__}"
        return f"XlaMonitor observes Keras 3 models, and this is a {kind}: the fit goes on unmonitored"

    # ------------------------------------------------------------ step functions

    def signature(self, batch: Any) -> InputSignature:
        return signature_of(batch, None)  # no distribution wrappers to take off: jax.Arrays are global

    def per_device(self, batch: Any, signature: InputSignature) -> Optional[str]:
        """Under keras.distribution: each input's per-device shape, in words (attribute reads
        of the shardings, no transfer), or None when no input is split across devices."""
        import keras

        leaves = [leaf for leaf in keras.tree.flatten(batch) if hasattr(leaf, "shape")]
        parts = []
        for leaf, described in zip(leaves, signature):
            shard = _internals.shard_shape(leaf)
            if shard is not None and tuple(shard) != tuple(leaf.shape):
                parts.append(f"{described.path}:{list(shard)} of {list(leaf.shape)}")
        return ", ".join(parts) or None

    def function_fresh(self, model: Any, phase: str) -> Optional[bool]:
        """The jitted step has compiled nothing yet (its first call will), or None: unknown (op by op)."""
        step_fn = self.step_function(model, phase)
        count = _internals.executable_count(step_fn) if _internals.is_jitted(step_fn) else None
        return None if count is None else count == 0

    # ------------------------------------------------------------ compile probe, persistent cache

    def probe(self, notes: Notes, model: Any, multi_worker: bool) -> JaxProbe:
        model_ref = weakref.ref(model)
        owner = self._owner
        made: list = []

        def watching() -> bool:
            """The monitor is in a call, for this probe's model (its current report's probe)."""
            monitor = owner() if owner is not None else None
            return bool(monitor is not None and monitor.in_call and made and monitor.probe is made[0])

        probe = JaxProbe(notes, lambda phase: self.step_function(model_ref(), phase), watching)
        made.append(probe)
        probe.configure(persistent_cache(), multi_worker)
        return probe

    def compiles_outside_steps(self, probe: CompileProbe) -> Dict[str, dict]:
        """Compiles seen outside the step functions (initialisers, metrics, casts), by kind."""
        return probe.other_compiles() if isinstance(probe, JaxProbe) else {}

    def cache(self) -> Optional[dict]:
        return persistent_cache()

    # ------------------------------------------------------------ distribution, data

    def distribution(self, model: Any) -> Distribution:
        return Distribution(**_internals.distribution_facts())

    def data_kind(self, model: Any) -> str:
        """What a storm fix is written for: the kind of the running call's data (``DATA_KINDS``)."""
        return data_kind_of(_internals.user_data(model), default="arrays")

    def end_of_data(self) -> tuple:
        return end_of_data()

    def wait_for(self, outputs: Any) -> bool:
        return wait_for(outputs)

    def multi_worker_fit_problem(self) -> Optional[str]:
        return None

    cost_source = cost.SOURCE
    cost_share_of_compile = 0.0  # JAX serves the executable that ran from its cache (lowered only: ~9 ms)
    # No window on a recompiling step: it holds XLA's compile passes, and JAX took 2.8-9.2 s to save one after a
    # storm (KerasHub DistilBERT, measured); the ledger times each compile from JAX's own events.
    storm_trace_window = False
    # A short fit gets no steady window: starting, stopping and saving JAX's trace took ~0.1 s, half of a
    # 20-step MLP fit's fixed cost (benchmarks/fixed_cost.py).
    steady_window_in_short_fits = False

    def cost_spec(self, batch: Any) -> Any:
        return cost.cost_spec(batch)

    def program_cost(self, model: Any, phase: str, spec: Any, mode: str, notes: Notes) -> ProgramCost:
        return cost.program_cost(self.step_function(model, phase), model, phase, spec, mode, notes)

    def device_kind(self) -> str:
        return _internals.device_kind()

    def gather(self, values: Sequence[float]) -> Optional[List[List[float]]]:
        return allgather(values)


# Several JAX processes under one keras.distribution: a few numbers from each, gathered.


def allgather(values: Sequence[float]) -> List[List[float]]:
    """Every process's ``values``, in process order (float32: counts stay exact below 2**24)."""
    import numpy as np
    from jax.experimental import multihost_utils

    events = RECORDER.begin()  # the gather's own compile: caught here, and dropped
    try:
        rows = multihost_utils.process_allgather(np.asarray(values, dtype=np.float32))
    finally:
        RECORDER.end(events)
    return [[float(v) for v in row] for row in np.asarray(rows).reshape(-1, len(values))]
