"""The step wrapper on TensorFlow: read each call's batches without changing what runs.

In ``on_train_begin`` (``on_test_begin``, ``on_predict_begin``) the monitor
replaces ``model.<phase>_function`` with a wrapper that pulls the call's
``steps_per_execution`` batches from the tf.data iterator itself, hands them
to the observer (which reads their shapes: attribute reads, no device sync)
and passes Keras the batches as a list, which Keras (3.7+) runs through the
same jitted ``one_step_on_data``. Still XLA, same compiles; no measurable
overhead (it skips Keras's own pull).

Wrappers are chained when several monitors watch one call, and a leftover of
an interrupted call (one whose owner is gone or no longer holds it) is dropped
at the next install. Keras looks its function up at every step, so rebuilding
it (a jit switch) means wrapping the new one.
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Dict, List, Optional

from . import _internals

FUNCTION_ATTR = {"train": "train_function", "test": "test_function", "predict": "predict_function"}
MAKE_FUNCTION = {"train": "make_train_function", "test": "make_test_function", "predict": "make_predict_function"}


def end_of_data() -> tuple:
    """What ends an epoch's data, in Keras's eyes (it catches both)."""
    import tensorflow as tf
    return StopIteration, tf.errors.OutOfRangeError


def pull(iterator: Any, count: int, graph_next: Optional[Any] = None) -> list:
    """Up to ``count`` batches, as Keras's own graph would pull them."""
    batches = []
    for _ in range(count):
        try:
            batches.append(graph_next(iterator) if graph_next is not None else next(iterator))
        except end_of_data():
            break
    if not batches:
        raise StopIteration
    return batches


_GRAPH_NEXT: List[Any] = []


def graph_next() -> Any:
    """``iterator.get_next()`` inside a tf.function, for distributed iterators.
    Measured: an eager ``next()`` costs ~1 ms per step under MirroredStrategy
    and more under MultiWorkerMirroredStrategy, where the pull also runs a
    cross-worker "has data" all-reduce; in a graph it costs what Keras's own
    pull costs. One function per process, shared by every monitor, traced once
    per iterator type: every worker traces and runs the same pulls, so the
    collectives stay matched."""
    if not _GRAPH_NEXT:
        import tensorflow as tf

        def get_next(iterator):
            # The pull is ours, not the model's: auto-clustering must not compile
            # it (an XLA module the model's own fit would not have). Measured:
            # pausing the switch around the call is not enough (the function is
            # re-instantiated when the switch comes back); marking the ops is.
            with tf.xla.experimental.jit_scope(compile_ops=False):
                return iterator.get_next()

        _GRAPH_NEXT.append(tf.function(get_next, autograph=False))
    return _GRAPH_NEXT[0]


class StepWrappers:
    """One monitor's wrappers, per phase. ``owner`` must offer ``params`` (Keras hands one
    params dict to every callback of a call) and ``step_wrapper(phase)``."""

    def __init__(self, owner: Any):
        self._owner = weakref.ref(owner)
        self.current: Dict[str, Any] = {}

    def _chain(self, model: Any, phase: str) -> tuple:
        """(live wrappers of other monitors of this call, top to bottom; Keras's function)."""
        me = self._owner()
        fn = getattr(model, FUNCTION_ATTR[phase], None)
        keep = []
        while fn is not None and hasattr(fn, "_xla_keras_original"):
            owner = fn._xla_keras_owner()
            # Another monitor of this same fit / evaluate / predict call: chain onto it.
            # Anything else is a leftover of an interrupted call: drop it.
            if (owner is not None and owner is not me and owner.step_wrapper(phase) is fn
                    and owner.params is not None and me is not None and owner.params is me.params):
                keep.append(fn)
            fn = fn._xla_keras_original
        return keep, fn

    @staticmethod
    def _relink(model: Any, phase: str, wrappers: list, base: Any) -> None:
        for upper, lower in zip(wrappers, wrappers[1:] + [base]):
            upper._xla_keras_original = lower
        setattr(model, FUNCTION_ATTR[phase], wrappers[0] if wrappers else base)

    def install(self, model: Any, phase: str, observer: Any, rebuild: bool = False,
                enforce_model_jit: bool = False):
        """Wrap ``phase``'s function (building it when missing, when ``rebuild``, or when its jit flag
        differs from the model's and ``enforce_model_jit``). Returns (step function found before,
        the one that runs, rebuilt, XLA compiles it now)."""
        others, original = self._chain(model, phase)  # drops our own leftovers and dead ones
        before = _internals.find_step_function(original) if original is not None else None
        mismatch = (enforce_model_jit and not model.run_eagerly
                    and _internals.function_jit_flag(before) != bool(model.jit_compile))
        step_fn = before
        if original is None or rebuild or mismatch:
            getattr(model, MAKE_FUNCTION[phase])(force=True)
            original = getattr(model, FUNCTION_ATTR[phase])
            step_fn = _internals.find_step_function(original)
        xla_now = _internals.function_jit_flag(step_fn) or _internals.autoclustering_enabled()
        wrapper = _internals.wrap_marker(_make_wrapper(model, phase, observer), original, self._owner)
        self.current[phase] = wrapper
        self._relink(model, phase, [wrapper] + others, original)
        return before, step_fn, bool(original is None or rebuild or mismatch), xla_now

    def remove(self, model: Any, phase: str) -> None:
        if self.current.pop(phase, None) is not None:
            others, base = self._chain(model, phase)
            self._relink(model, phase, others, base)

    def remove_all(self, model: Any) -> None:
        for phase in list(self.current):
            self.remove(model, phase)


def _make_wrapper(model: Any, phase: str, observer: Any):
    iterator_types = _internals.data_iterator_types()
    distributed_type = iterator_types[-1]
    pulls = phase != "predict"  # predict_function already receives a list of batches
    model_ref = weakref.ref(model)

    def batches_of(data):
        count = model_ref().steps_per_execution
        if not isinstance(data, distributed_type):
            return pull(data, count)
        return pull(data, count, graph_next())

    def wrapped(data):
        original = wrapped._xla_keras_original  # relinked when monitors come and go
        if not observer.active():
            return original(data)
        start = time.perf_counter()
        probe, began = None, False
        try:
            if pulls and isinstance(data, iterator_types):
                batches = batches_of(data)
            elif isinstance(data, list):
                batches = data
            else:  # e.g. train_on_batch's generator: run as Keras would, unobserved
                observer.call_unobserved(phase)
                return original(data)
            began = True
            probe = observer.call_began(phase, batches, start)
            outputs = original(batches)
        except StopIteration:
            raise  # the end of an epoch, not an error
        except BaseException:
            observer.call_failed(phase, probe, began)  # a failed pull: the previous call's facts stand
            raise
        observer.call_ran(phase, probe)
        return outputs

    return wrapped
