"""The step wrapper on JAX: read each call's batches, keep Keras's asynchronous dispatch.

Keras's JAX trainer calls ``model.train_function(state, iterator)``, a Python
function that takes ``steps_per_execution`` batches with ``next(iterator)`` and
runs the (jitted) step on each. The wrapper pulls those batches itself (numpy
arrays, or jax.Arrays placed on devices: their ``.shape`` / ``.dtype`` are
attribute reads, never a transfer or a sync), hands them to the observer, and
gives Keras an iterator over the same batches. Same step, same compiles.

Timing without a sync per step: JAX returns from a step before the device finishes
it, so a step's end is not observable without blocking. A call therefore ends
when the next call of its phase begins (start to start: the host's time on it),
or untimed at a phase boundary (epoch end, validation, the end of evaluate /
predict). The steps' real time comes from intervals that begin and end with the
device drained (``core/timing.py``): the wrapper keeps the last call's outputs
(one reference), and when the observer asks (after a compile, or about once a
second) it waits for them once; at phase boundaries the monitor waits for them
itself, where Keras has just drained anyway. This is why the monitor does nothing
in its batch-end hooks on JAX and tells Keras it is ``async_safe``: Keras then
keeps dispatching batch-end callbacks on its executor thread, as in a fit without
the monitor.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from xla_keras.backends.base import StepObserver
from xla_keras.backends.chain import FUNCTION_ATTR, WrapperChain, unwrap
from xla_keras.backends.jax import _internals, precompile
from xla_keras.backends.jax.probe import RECORDER
from xla_keras.core.types import PrecompileRunner


def wait_for(outputs: Any) -> bool:
    """Block until the device finished the call that returned ``outputs`` (its logs, or a predict
    batch's outputs: never the state, which the next call donates). False when that failed (a device
    error, or arrays already deleted): then when it finished is unknown."""
    try:
        import jax

        jax.block_until_ready(outputs[0])
        return True
    except Exception:  # noqa: BLE001 - the step's own errors surface where Keras reads its results
        return False


def end_of_data() -> tuple:
    """What ends an epoch's data, in Keras's eyes."""
    return (StopIteration,)


def pull(iterator: Any, count: int) -> list:
    """Up to ``count`` batches, as Keras's ``iterator_step`` would take them."""
    batches = []
    for _ in range(count):
        try:
            batches.append(next(iterator))
        except StopIteration:
            break
    if not batches:
        raise StopIteration
    return batches


class StepWrappers(WrapperChain):
    """One monitor's wrappers on Keras's JAX step functions."""

    def __init__(self, owner: StepObserver):
        super().__init__(
            owner, _make_wrapper, _internals.find_step_function, _internals.is_jitted, _internals.is_jitted
        )


def _make_wrapper(model: Any, phase: str, observer: StepObserver):
    model_ref = weakref.ref(model)
    lane = observer.steady_lane(phase)  # armed by the observer only while nothing but repeats can come
    clock, begin, end = time.perf_counter, RECORDER.begin, RECORDER.end

    def wrapped(state, iterator):
        original = wrapped._xla_keras_original  # type: ignore[attr-defined]  # relinked when monitors come and go
        if lane.budget:  # the steady case: a few operations, no observer call (session/repeats.py)
            start = clock()
            batch = next(iterator)  # StopIteration: the end of an epoch, as in Keras's own pull
            try:
                taken = lane.take(batch, start, clock())
            except Exception:  # noqa: BLE001 - never from here: the full path decides (and contains)
                lane.budget, taken = 0, False
            if taken:
                events = begin()  # a compile during the call (JAX reports it on this thread) is caught
                try:
                    outputs = lane.held = original(state, iter((batch,)))
                except BaseException:
                    end(events)
                    observer.call_failed(phase, None)
                    raise
                end(events)
                lane.returned = clock()
                if events:  # it compiled after all: recorded at its step (the batch tells why: JAX keys more)
                    RECORDER.attach(events, (state, (batch,)))
                    if observer.call_ran(phase, events):
                        observer.call_drained(phase, clock() if wait_for(outputs) else None)
                return outputs
            return _full_call(wrapped, original, state, [batch], start, clock(), phase, observer, model_ref())
        if not observer.active():
            return original(state, iterator)
        model = model_ref()
        start = clock()  # the previous call of this phase ends here, and this one begins
        try:
            batches = pull(iterator, model.steps_per_execution if model is not None else 1)
        except StopIteration:
            raise  # the end of an epoch, not an error
        except BaseException:
            observer.call_failed(phase, None, began=False)
            raise
        return _full_call(wrapped, original, state, batches, start, clock(), phase, observer, model)

    return wrapped


def _full_call(
    wrapped, original, state, batches: list, start: float, pulled: float, phase: str, observer: StepObserver, model
):
    """A call the steady lane did not take: the observer sees its batches (and may arm the lane)."""
    if observer.precompile_pending(phase):  # the phase's first call: its shape set compiles first
        observer.precompile_phase(phase, batches[0], _precompile_runner(original, state, batches[0], model))
        waited = pulled - start
        pulled = time.perf_counter()  # the call begins after the precompile, with the pull it waited for
        start = pulled - waited
    probe = observer.call_began(phase, batches, start, pulled)
    if model is not None and model.steps_per_execution != 1:
        observer.steady_lane(phase).disarm()  # the lane takes one batch per call: for steps_per_execution=1 only
    if observer.step_wrapper(phase) is not wrapped and model is not None:
        # call_began switched the function (a storm fallback rebuilt it op by op; jit='fastest' swapped
        # in the other mode's) and wrapped the new one: this call runs the new Keras function, with the
        # state Keras passed (the monitor never syncs it into the variables mid-step: see
        # XlaMonitor.model). Called directly, not through the new chain, so that monitors around this
        # call do not see the batch twice.
        original = unwrap(getattr(model, FUNCTION_ATTR[phase]))
    lane = observer.steady_lane(phase)
    again = None
    try:
        outputs = lane.held = original(state, iter(batches))
    except BaseException as error:
        # jax.jit could not trace the step (shapes that depend on the data): the same batches again,
        # without XLA (a new call, with the state Keras passed: the failed trace ran nothing).
        again = observer.call_unsupported(phase, probe, error)
        if again is None:
            observer.call_failed(phase, probe)
            raise
    if again is not None:
        return again(state, iter(batches))
    lane.returned = time.perf_counter()
    if probe:  # events: the call compiled (or a helper did): the batches tell why when the signature was known
        RECORDER.attach(probe, (state, batches))
    if observer.call_ran(phase, probe):  # the observer wants the device drained after this call
        observer.call_drained(phase, time.perf_counter() if wait_for(outputs) else None)
    return outputs


def _precompile_runner(original: Any, state: Any, template: Any, model: Any) -> PrecompileRunner:
    original = unwrap(original)  # Keras's own function: other monitors' wrappers see no zero batch
    return PrecompileRunner(
        lambda signature: precompile.why_not(model, signature),
        lambda signature: precompile.zero_batch(template, signature),
        lambda items, threads, probe, jit: precompile.compile_ahead(original, state, items, threads),
    )
