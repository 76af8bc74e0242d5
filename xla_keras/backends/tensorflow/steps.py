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

import os
import time
import weakref
from typing import Any, List, Optional

from xla_keras.backends.base import StepObserver
from xla_keras.backends.chain import (  # noqa: F401 - FUNCTION_ATTR re-exported
    FUNCTION_ATTR,
    MAKE_FUNCTION,
    WrapperChain,
    unwrap,
)
from xla_keras.backends.tensorflow import _internals, precompile
from xla_keras.backends.tensorflow.flags import data_iterator_types
from xla_keras.backends.tensorflow.quiet import StderrCapture, without_xla_startup_lines
from xla_keras.core.types import PrecompileRunner

# The user asked TensorFlow for more of its logs: its lines about a step XLA refused stay.
VERBOSE_LOGS = bool(os.environ.get("TF_CPP_VMODULE") or os.environ.get("TF_CPP_MAX_VLOG_LEVEL"))


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


class StepWrappers(WrapperChain):
    """One monitor's wrappers on TensorFlow step functions."""

    def __init__(self, owner: StepObserver):
        super().__init__(
            owner,
            _make_wrapper,
            _internals.find_step_function,
            lambda step_fn: _internals.function_jit_flag(step_fn),
            lambda step_fn: _internals.function_jit_flag(step_fn) or _internals.autoclustering_enabled(),
        )


def _make_wrapper(model: Any, phase: str, observer: StepObserver):
    iterator_types = data_iterator_types()
    distributed_type = iterator_types[-1]
    pulls = phase != "predict"  # predict_function already receives a list of batches
    model_ref = weakref.ref(model)

    def batches_of(data):
        model: Any = model_ref()
        count = model.steps_per_execution
        if not isinstance(data, distributed_type):
            return pull(data, count)
        return pull(data, count, graph_next())

    def wrapped(data):
        original = wrapped._xla_keras_original  # type: ignore[attr-defined]  # relinked when monitors come and go
        if not observer.active():
            return original(data)
        start = time.perf_counter()
        probe, began, again = None, False, None
        capture_failed: Optional[StderrCapture] = None
        try:
            if pulls and isinstance(data, iterator_types):
                batches = batches_of(data)
            elif isinstance(data, list):
                batches = data
            else:  # e.g. train_on_batch's generator: run as Keras would, unobserved
                observer.call_unobserved(phase)
                return original(data)
            pulled = time.perf_counter()
            if observer.precompile_pending(phase):  # the phase's first call: its shape set compiles first
                observer.precompile_phase(
                    phase, batches[0], _precompile_runner(model_ref(), phase, original, batches[0])
                )
                waited, pulled = pulled - start, time.perf_counter()
                start = pulled - waited  # the call begins after the precompile, with the pull it waited for
            began = True
            probe = observer.call_began(phase, batches, start, pulled)
            if observer.quiet_phase == phase:  # jit='fastest' tries XLA: its start-up lines stay out
                observer.quiet_phase = None
                outputs = without_xla_startup_lines(lambda: original(batches))
            elif probe is not None and not VERBOSE_LOGS:
                # A call that may compile (a new signature, a value): if XLA refuses it, the lines TensorFlow
                # logs about the refusal stay out of the terminal (the monitor's warning says it in 4 lines).
                capture = StderrCapture()
                with capture:
                    try:
                        outputs = original(batches)
                    except BaseException:
                        capture_failed = capture
                        raise
                capture.release()
            else:
                outputs = original(batches)
        except StopIteration:
            raise  # the end of an epoch, not an error
        except BaseException as error:
            # XLA could not compile an op of the step: the same batches again, without XLA (a new call).
            again = observer.call_unsupported(phase, probe, error) if began else None
            if capture_failed is not None:
                capture_failed.release(drop_warnings=again is not None)
            if again is None:
                observer.call_failed(phase, probe, began)  # a failed pull: the previous call's facts stand
                raise
        if again is not None:
            return again(batches)
        if probe is not None:  # most calls are not probed: their end is the batch-end hook's
            observer.call_ran(phase, probe)
        return outputs

    return wrapped


def _precompile_runner(model: Any, phase: str, original: Any, template: Any) -> PrecompileRunner:
    original = unwrap(original)  # Keras's own function: other monitors' wrappers see no zero batch
    return PrecompileRunner(
        lambda signature: precompile.why_not(model, signature),
        lambda signature: precompile.zero_batch(template, signature),
        lambda items, threads, probe, jit: precompile.compile_ahead(model, phase, original, items, probe, jit),
    )
