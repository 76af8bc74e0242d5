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
from typing import Any, List, Optional, Sequence, Tuple

from ...jitmodes import MODES, JitState
from ...session import Notes
from ...signatures import InputSignature, signature_of
from ..base import Distribution, Installed
from . import _internals
from .jit import JitController, persistent_cache
from .probe import TensorFlowProbe
from .steps import FUNCTION_ATTR, MAKE_FUNCTION, StepWrappers, end_of_data

__all__ = ["TensorFlowBackend"]

# Measured on TF 2.21 with two local workers: stopping a profiler session in
# a MultiWorkerMirroredStrategy worker aborts the process ("double free or
# corruption", in ProfilerSession.stop) in about 1 run in 4; never seen without
# a strategy or under MirroredStrategy.
MULTI_WORKER_PROFILER = (
    "under MultiWorkerMirroredStrategy the monitor does not start the profiler (TensorFlow 2.21 aborted the "
    "worker process when a profiling session stopped, about 1 run in 4 in our tests): new input signatures are "
    "counted as compiles and their seconds estimated from step time; auto-clustering's modules are not counted "
    "one by one, and automatic traces are off (profile=(start, stop) still traces, at that risk)")


class TensorFlowBackend:
    """One per monitor: it holds the monitor's JIT controller and step wrappers."""

    name = "tensorflow"
    jit_modes: Tuple[str, ...] = MODES
    multi_worker_note = MULTI_WORKER_PROFILER
    ends_calls_in_wrapper = False  # Keras runs batch-end hooks in line (TensorFlow is not thread-safe for it)

    def __init__(self, jit_mode: str = "keep"):
        self.jit = JitController(jit_mode)
        self._wrappers: Optional[StepWrappers] = None

    def prepare(self, owner: Any) -> None:
        """At monitor construction: the owner of the wrappers; the CPU global-jit flag while it can still be set."""
        self._wrappers = StepWrappers(owner)
        self.jit.prepare_early()

    # ------------------------------------------------------------ support

    def unsupported(self) -> Optional[str]:
        return _internals.keras_unsupported()

    def foreign_model(self, model: Any) -> Optional[str]:
        if _internals.is_keras3_model(model):
            return None
        kind = f"{type(model).__module__}.{type(model).__qualname__}"
        return (f"XlaMonitor observes Keras 3 models, and this is a {kind} (tf_keras / TF_USE_LEGACY_KERAS=1, or "
                "Keras 2): its fit builds its step functions differently, so the monitor steps aside and the fit "
                "goes on unmonitored. Fix: build the model with Keras 3 (`import keras`, without "
                "TF_USE_LEGACY_KERAS=1)")

    # ------------------------------------------------------------ step functions

    def signature(self, batch: Any) -> InputSignature:
        return signature_of(batch, _internals.unwrap_distributed)

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
        """The tf.function that runs ``phase`` (under every wrapper), or None."""
        return _internals.find_step_function(_internals.unwrap(getattr(model, FUNCTION_ATTR[phase], None)))

    # ------------------------------------------------------------ compile probe

    def probe(self, notes: Notes, model: Any, multi_worker: bool) -> TensorFlowProbe:
        """This report's compile probe (it learns whether XLA's compiler can be seen here)."""
        model_ref = weakref.ref(model)
        probe = TensorFlowProbe(notes, lambda phase: self.step_function(model_ref(), phase))
        probe.configure(persistent_cache(), multi_worker)
        return probe

    def cache(self) -> Optional[dict]:
        """The persistent compilation cache: {"dir", "effective"}, or None."""
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
        return Distribution(**_internals.strategy_facts(model))

    def train_step(self, model: Any) -> int:
        optimizer = getattr(model, "optimizer", None)
        return int(optimizer.iterations.numpy()) if optimizer is not None else 0

    def data_kind(self, model: Any) -> str:
        """What a storm fix is written for: Keras's TensorFlow backend feeds every input through tf.data."""
        return "tf.data"

    def end_of_data(self) -> tuple:
        return end_of_data()

    def running_callback_list(self, model: Any) -> Any:
        return _internals.running_callback_list(model)

    def running_fit(self, model: Any) -> Any:
        return _internals.running_fit(model)

    def versions(self) -> dict:
        return _internals.versions()

    def multi_worker_fit_problem(self) -> Optional[str]:
        from ...multiworker import keras_fit_problem
        return keras_fit_problem()
