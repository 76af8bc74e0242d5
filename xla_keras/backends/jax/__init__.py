"""Keras's JAX backend: what XlaMonitor needs, behind ``backends.base.Backend``.

``steps.py`` wraps Keras's ``train_function(state, iterator)`` (and test /
predict) and ends each call when the next one begins (no sync), ``probe.py``
counts and times compiles from ``jax.monitoring`` events, ``jit.py`` applies
and reads back ``jit_compile`` and configures JAX's persistent cache, and
``_internals.py`` holds every private JAX / Keras API this backend uses. JAX is
imported inside functions only.
"""

from __future__ import annotations

import weakref
from typing import Any, List, Optional, Sequence, Tuple

from ...jitmodes import JitState
from ...session import Notes
from ...signatures import InputSignature, signature_of
from ..base import Distribution, Installed
from ..chain import FUNCTION_ATTR, MAKE_FUNCTION
from . import _internals
from .jit import MODES, JitController, persistent_cache
from .probe import JaxProbe
from .steps import StepWrappers, end_of_data

__all__ = ["JaxBackend"]


class JaxBackend:
    """One per monitor: it holds the monitor's JIT controller and step wrappers."""

    name = "jax"
    jit_modes: Tuple[str, ...] = MODES
    # Batch-end hooks may run on Keras's executor thread: calls end in the wrapper (steps.py).
    ends_calls_in_wrapper = True
    multi_worker_note = None  # JAX's compile events are seen in every process

    def __init__(self, jit_mode: str = "keep"):
        self.jit = JitController(jit_mode)
        self._wrappers: Optional[StepWrappers] = None
        self._owner: Any = None

    def prepare(self, owner: Any) -> None:
        self._owner = weakref.ref(owner)
        self._wrappers = StepWrappers(owner)

    # ------------------------------------------------------------ support

    def unsupported(self) -> Optional[str]:
        return None

    def foreign_model(self, model: Any) -> Optional[str]:
        if _internals.is_keras3_model(model):
            return None
        kind = f"{type(model).__module__}.{type(model).__qualname__}"
        return f"XlaMonitor observes Keras 3 models, and this is a {kind}: the fit goes on unmonitored"

    def versions(self) -> dict:
        return _internals.versions()

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

    def install(self, model: Any, phase: str, observer: Any, rebuild: bool = False) -> Installed:
        before, token, rebuilt, xla_now = self._wrappers.install(
            model, phase, observer, rebuild=rebuild, enforce_model_jit=self.jit.mode != "keep")
        return Installed(before, token, rebuilt, xla_now)

    def wrapper(self, phase: str) -> Any:
        return self._wrappers.current.get(phase) if self._wrappers else None

    def wrapped_phases(self) -> List[str]:
        return list(self._wrappers.current) if self._wrappers else []

    def remove(self, model: Any, phase: str) -> None:
        self._wrappers.remove(model, phase)

    def remove_all(self, model: Any) -> None:
        if self._wrappers is not None and model is not None:
            self._wrappers.remove_all(model)

    def rebuild_functions(self, model: Any, phases: Sequence[str]) -> None:
        for phase in phases:
            if getattr(model, FUNCTION_ATTR[phase], None) is not None:
                getattr(model, MAKE_FUNCTION[phase])(force=True)

    def drop_function(self, model: Any, phase: str) -> None:
        setattr(model, FUNCTION_ATTR[phase], None)

    def step_function(self, model: Any, phase: str) -> Any:
        """The function Keras's JAX trainer runs per batch (jitted or not), or None."""
        if model is None:
            return None
        return _internals.find_step_function(getattr(model, FUNCTION_ATTR[phase], None))

    # ------------------------------------------------------------ compile probe

    def probe(self, notes: Notes, model: Any, multi_worker: bool) -> JaxProbe:
        model_ref = weakref.ref(model)
        owner = self._owner

        def watching() -> bool:
            monitor = owner() if owner is not None else None
            return bool(monitor is not None and monitor.in_call)

        probe = JaxProbe(notes, lambda phase: self.step_function(model_ref(), phase), watching)
        probe.configure(persistent_cache(), multi_worker)
        return probe

    def cache(self) -> Optional[dict]:
        return persistent_cache()

    # ------------------------------------------------------------ jit

    def apply_jit(self, model: Any) -> bool:
        return self.jit.apply(model)

    def read_back(self, model: Any, phase: str) -> JitState:
        return self.jit.read_back(model, self.step_function(model, phase))

    def fall_back(self, model: Any, reason: str) -> None:
        self.jit.fall_back(model, reason)

    def restore_jit(self, model: Any = None) -> bool:
        return self.jit.restore(model)

    @property
    def jit_refusal(self) -> Optional[str]:
        return self.jit.refusal

    # ------------------------------------------------------------ traces, distribution, data

    def start_trace(self, directory: str) -> None:
        _internals.start_trace(directory)

    def stop_trace(self) -> None:
        _internals.stop_trace()

    def keras_profile_windows(self, model: Any) -> List[Tuple[int, int]]:
        return _internals.keras_profile_windows(model)

    def distribution(self, model: Any) -> Distribution:
        return Distribution(**_internals.distribution_facts())

    def train_step(self, model: Any) -> int:
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None:
            return 0
        # Read once per fit, before the first step: the variable holds its value (no step is in flight).
        return int(optimizer.iterations.numpy())

    def data_kind(self, model: Any) -> str:
        """What a storm fix is written for: tf.data when the running call got a tf.data.Dataset,
        else arrays (numpy, a generator, a PyDataset: the fix then needs no TensorFlow)."""
        data = _internals.user_data(model)
        return "tf.data" if type(data).__module__.startswith("tensorflow") else "arrays"

    def end_of_data(self) -> tuple:
        return end_of_data()

    def running_callback_list(self, model: Any) -> Any:
        return _internals.running_callback_list(model)

    def running_fit(self, model: Any) -> Any:
        return _internals.running_fit(model)

    def multi_worker_fit_problem(self) -> Optional[str]:
        return None

