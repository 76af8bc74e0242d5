"""Precompile on TensorFlow: the step run once on a zero batch of each shape, then every variable it wrote
restored.

TensorFlow compiles a ``jit_compile=True`` function only when it runs, keyed on the concrete shapes of
its call, so the set's programs are made by calling Keras's step function (the same tf.function the
fit runs, which fills the same cache) with one zero batch per shape. The step trains: before the first
call every variable it may write is kept (the model's, its layers' seed generators and metrics, the
optimizer's iterations, learning rate and slots, the compiled metrics), and after the last one each
is assigned back, exactly. The fit's weights then equal a fit without precompile; no step is counted.
The calls run one after another, each timed by the compile probe: run side by side on 2 threads they took
as long in all (13.6 s against 13.8 s for 8 shapes, ``benchmarks/precompile.py``), TensorFlow's compiles of
one function do not overlap.
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Sequence, Tuple

from xla_keras.backends.tensorflow import _internals
from xla_keras.core.precompile import zeros_for
from xla_keras.core.signatures import InputSignature
from xla_keras.core.types import CallPlan, CompileObservation, Precompiled


def why_not(model: Any, signature: InputSignature) -> Optional[str]:
    """Why the batches cannot be precompiled here, or None."""
    import tensorflow as tf

    strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
    if type(strategy).__name__ != "_DefaultDistributionStrategy":
        # With several replicas jit='on' is refused (backends/tensorflow/jit.py), so this is one replica's.
        return f"under {type(strategy).__name__} the batches are per replica: not precompiled"
    if any(leaf.dtype in ("string", "object") for leaf in signature):
        return "string inputs: no zero batch of them"
    if any(leaf.path.rsplit("/", 1)[-1].startswith(("row_splits_", "indices", "dense_shape")) for leaf in signature):
        return "ragged or sparse inputs: no zero batch of them"
    return None


def zero_batch(template: Any, signature: InputSignature) -> Any:
    """A batch like ``template`` (its structure and dtypes) of zeros of ``signature``'s shapes."""
    import numpy as np
    import tensorflow as tf

    def zeros(leaf: Any, shape: Tuple[int, ...]) -> Any:
        return tf.zeros(shape, dtype=leaf.dtype) if isinstance(leaf, tf.Tensor) else np.zeros(shape, dtype=leaf.dtype)

    return zeros_for(template, signature, zeros)


def step_variables(model: Any) -> list:
    """Every variable a step may write: the model's (layers, seed generators, their metrics), the optimizer's,
    the compiled metrics'; each once."""
    found, seen = [], set()
    optimizer = getattr(model, "optimizer", None)
    groups = (model.variables, getattr(optimizer, "variables", ()) or (), model.metrics_variables)
    for group in groups:
        for variable in group:
            if id(variable) not in seen:
                seen.add(id(variable))
                found.append(variable)
    return found


def compile_ahead(
    model: Any,
    phase: str,
    original: Any,
    items: Sequence[Tuple[InputSignature, Any]],
    probe: Any,
    jit: Any,
) -> List[Precompiled]:
    """Run Keras's ``phase`` function (``original``) on each ``(signature, zero batch)``, timed by the
    ``probe`` where it can, then restore every variable the steps wrote."""
    import numpy as np

    unbuilt = _internals.build_for_step(model, items[0][1]) if phase != "predict" else None
    if unbuilt is not None:
        return [Precompiled(sig, 0.0, "timing", error=f"the model is {unbuilt}") for sig, _ in items]
    variables = step_variables(model) if phase != "predict" else []
    kept = [np.array(v.numpy(), copy=True) for v in variables]
    results: List[Precompiled] = []
    try:
        _run_each(phase, original, items, probe, jit, results)
    finally:
        for variable, value in zip(variables, kept):
            variable.assign(value)
    made = len(step_variables(model)) - len(variables) if phase != "predict" else 0
    if made > 0:  # never expected once built: said, so that no one trusts weights it may have moved
        raise RuntimeError(f"precompile: the zero-batch steps made {made} variables it could not restore")
    return results


def _run_each(
    phase: str, original: Any, items: Sequence[Tuple[InputSignature, Any]], probe: Any, jit: Any, results: list
) -> None:
    for signature, batch in items:
        plan = CallPlan(phase, 0, 1, ((0, 0, signature),), True)
        handle = probe.start(plan, jit) if probe is not None else None
        began = time.perf_counter()
        try:
            original([batch])
        except Exception as error:  # noqa: BLE001 - this shape is not compiled ahead; the fit runs as without
            if handle is not None:
                probe.abandon(handle)
            results.append(Precompiled(signature, 0.0, "timing", error=f"{type(error).__name__}: {error}"))
            continue
        wall = time.perf_counter() - began
        seen: Optional[CompileObservation] = probe.stop(handle, plan, jit) if handle is not None else None
        if seen is not None and seen.measured and seen.modules:
            results.append(Precompiled(signature, sum(seen.modules), seen.source, cached=seen.cached))
        else:
            results.append(Precompiled(signature, wall, "timing", cached=None))
