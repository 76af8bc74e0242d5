"""The cost card on JAX: XLA's own cost and memory analysis of the step's program (``jax.stages``).

The jitted step is lowered with the state's and the batch's shapes: JAX serves that from its caches for
shapes the step ran (0.3-0.4 ms, no event, on JAX 0.4.36 and 0.10.2). Then either:

* **compiled** (``cost_analysis()`` and ``memory_analysis()`` of the executable: every figure, exact).
  From JAX 0.10 (``COMPILE_SERVED_FROM``) the executable is the one that ran, served from JAX's cache:
  0.07 ms, no compile event. Before it, JAX compiles again (JAX 0.4.36: 75 ms for a small MLP's step,
  one more "Finished XLA compilation" log line): done only with ``XlaMonitor(cost="full")``;
* or **lowered** only (``cost_analysis()`` of the module before XLA's optimisations, 9 ms there, no
  compile): FLOPs and bytes accessed, estimated; memory unavailable. The default on older JAX.

A compile that happens anyway is bracketed out of the ledger and said in ``source``; with the default,
the source then stays lowered-only for the rest of the process (and a note says why).
"""

from __future__ import annotations

import time
from typing import Any

from xla_keras.backends.jax import _internals
from xla_keras.backends.jax.probe import RECORDER
from xla_keras.core.program_cost import ProgramCost
from xla_keras.core.types import Notes
from xla_keras.core.versions import release

COMPILE_SERVED_FROM = (0, 10)  # the oldest JAX measured to serve lower(...).compile() from its cache
SOURCE = "XLA's cost and memory analysis of the compiled step (jax.stages)"
LOWERED = "XLA's cost analysis of the lowered step, before XLA's optimisations (jax.stages)"
NO_MEMORY = "memory: JAX {version} would compile the step again for it (XlaMonitor(cost='full') pays that)"
COMPILED_AGAIN = (
    "cost card: JAX {version} compiled a step again for its analysis ({seconds:.2f} s, kept out of the ledger); "
    "from now on the card reads the lowered step (FLOPs and bytes; memory with XlaMonitor(cost='full'))"
)


# Once JAX compiled a step again for an analysis, it will again: the default reads lowered steps from then on.
_compiles_again = False


def program_cost(step: Any, model: Any, phase: str, spec: Any, mode: str, notes: Notes) -> ProgramCost:
    """XLA's analysis of the step program ``step`` (``model``'s ``phase`` step) for ``spec``'s batch shapes:
    compiled where JAX serves that from its cache or ``mode`` is "full", else lowered."""
    global _compiles_again
    if step is None or not _internals.is_jitted(step):
        why = "the step that runs now is not jitted (jit_compile=False, a fallback, or jit='fastest' off)"
        return ProgramCost(source=SOURCE, unavailable=f"{why}: no XLA program to analyse")
    version = _internals.versions()["jax"]
    compile_it = mode == "full" or (release(version) >= COMPILE_SERVED_FROM and not _compiles_again)
    state = _internals.step_state_specs(model, phase)
    events = RECORDER.begin()  # kept out of the ledger: these are the analysis's, not the steps'
    started = time.perf_counter()
    try:
        lowered = step.lower(state, spec)
        compiled = lowered.compile() if compile_it else None
    finally:
        RECORDER.end(events)
    if compiled is None:
        cost = ProgramCost.from_xla(_one(lowered.cost_analysis()), None, LOWERED, exact=False)
        devices = _internals.mesh_devices(model)
        if devices > 1:  # the lowered module is the whole program, before XLA splits it: not one device's
            cost.flops = cost.bytes_accessed = None
            cost.unavailable = f"the lowered step is the whole program for {devices} devices; " + NO_MEMORY
        else:
            missing = [name for name in ("flops", "bytes_accessed") if getattr(cost, name) is None]
            cost.unavailable = (f"{', '.join(missing)} not given; " if missing else "") + NO_MEMORY
        cost.unavailable = cost.unavailable.format(version=version)
        return cost
    source = SOURCE
    if any(event == _internals.COMPILE_EVENT for event, *_ in events):
        seconds = time.perf_counter() - started
        source += f" (compiled again for it: {seconds:.2f} s)"
        if mode != "full":
            _compiles_again = True
            notes.add_once("cost-compiled-again", COMPILED_AGAIN.format(version=version, seconds=seconds))
    return ProgramCost.from_xla(
        _guarded(compiled.cost_analysis), _guarded(compiled.memory_analysis), source, exact=True
    )


def _guarded(analysis: Any) -> Any:
    """One of XLA's analyses, or None where the platform cannot give it (jax-ml/jax#16008)."""
    try:
        return _one(analysis())
    except Exception:  # noqa: BLE001 - unavailable, never a training failure
        return None


def _one(analysis: Any) -> Any:
    """JAX before 0.4.31 gives one dict per device program: the first (they are the same program)."""
    if isinstance(analysis, (list, tuple)):
        return analysis[0] if analysis else None
    return analysis


def cost_spec(batch: Any) -> Any:
    """The batch's shapes, dtypes and (committed) shardings, without its values."""
    return _internals.batch_specs(batch)
