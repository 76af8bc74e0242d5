"""Precompile on JAX: the jitted step lowered and compiled for each shape of the set before step 1.

The step Keras runs is ``jax.jit(train_step)`` (``_internals.find_step_function``). Lowering it with the
state Keras passes the step and zero arrays of each shape (placed as the batch's arrays are: numpy, or
on the device with the same commitment and sharding), then ``.compile()``, fills the cache the step's later
calls read: those calls compile nothing. Lowering with ``jax.ShapeDtypeStruct`` instead does not fill it.
The lowerings run one by one (tracing holds the GIL); the compiles run in a thread pool, side by side, where
XLA releases the GIL, each as soon as its shape is lowered. Nothing runs: no weight, no optimizer state, no
metric changes. Under ``keras.distribution`` over several processes each process compiles its own copy of
every program for the global batch, as its loop would, once the processes agree on the set
(``callback/precompile.py``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, Optional, Sequence, Tuple

from xla_keras.backends.jax import _internals
from xla_keras.backends.jax.probe import RECORDER
from xla_keras.core.precompile import zeros_for
from xla_keras.core.signatures import InputSignature
from xla_keras.core.types import Precompiled


def why_not(model: Any, signature: InputSignature) -> Optional[str]:
    """Why the batches cannot be precompiled here, or None."""
    if any(leaf.dtype in ("string", "object") for leaf in signature):
        return "string inputs: no zero batch of them"
    return None


def zero_batch(template: Any, signature: InputSignature) -> Any:
    """A batch like ``template`` (its structure, dtypes and placement) of zeros of ``signature``'s shapes. A
    leaf committed to a sharding (``keras.distribution``) gets the same sharding, each process filling only
    its own devices' shards (the global batch spans every process's devices)."""
    import jax
    import numpy as np

    def zeros(leaf: Any, shape: Tuple[int, ...]) -> Any:
        value = np.zeros(shape, dtype=leaf.dtype)
        if isinstance(leaf, jax.Array):
            if getattr(leaf, "_committed", False):
                return jax.make_array_from_callback(shape, leaf.sharding, lambda index: value[index])
            return jax.device_put(value)
        return value

    return zeros_for(template, signature, zeros)


def compile_ahead(
    original: Any, state: Any, items: Sequence[Tuple[InputSignature, Any]], threads: int
) -> List[Precompiled]:
    """Lower and compile Keras's jitted step (under ``original``, its train / test / predict function) for each
    ``(signature, zero batch)``, with the step's ``state``; the compiles on ``threads`` threads."""
    step = _internals.find_step_function(original)
    if step is None or not _internals.is_jitted(step):
        return [Precompiled(sig, 0.0, "jax", error="the step is not jitted: nothing to compile") for sig, _ in items]
    results: dict = {}

    def compile_one(item: Tuple[InputSignature, Any, float]) -> Precompiled:
        signature, low, lowering = item
        events = RECORDER.precompile_begin()
        began = time.perf_counter()
        try:
            low.compile()
        except Exception as error:  # noqa: BLE001 - as below
            return Precompiled(signature, 0.0, "jax", error=f"{type(error).__name__}: {error}")
        finally:
            RECORDER.precompile_end()
        compiles = [e for e in events if e[0] == _internals.COMPILE_EVENT]
        seconds = sum(e[1] for e in compiles) if compiles else time.perf_counter() - began
        cached = bool(compiles) and all(e[3] for e in compiles)
        return Precompiled(signature, lowering + seconds, "jax", cached=cached)

    # Each shape's compile starts as soon as it is lowered: the next lowering runs beside it.
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(items))), thread_name_prefix="xla_keras") as pool:
        pending = []
        for signature, batch in items:
            events = RECORDER.precompile_begin()
            try:
                low = step.lower(state, batch)
            except Exception as error:  # noqa: BLE001 - this shape is not compiled ahead; the fit runs as without
                results[signature] = Precompiled(signature, 0.0, "jax", error=f"{type(error).__name__}: {error}")
                continue
            finally:
                RECORDER.precompile_end()
            pending.append(pool.submit(compile_one, (signature, low, _lowering_seconds(events))))
        for future in pending:
            result = future.result()
            results[result.signature] = result
    return [results[sig] for sig, _ in items]


def _lowering_seconds(events: list) -> float:
    """The tracing and lowering seconds among a thread's events (JAX's own)."""
    traces = [e[1] for e in events if e[0] == _internals.TRACE_EVENT]
    # Traces nest (the step's holds its inner functions'): the longest is the step's.
    return (max(traces) if traces else 0.0) + sum(e[1] for e in events if e[0] == _internals.LOWER_EVENT)
