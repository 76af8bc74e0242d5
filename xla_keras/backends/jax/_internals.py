"""The ONE place the JAX backend touches private Keras / JAX APIs.

Keras's JAX trainer (``keras/src/backend/jax/trainer.py``) builds
``model.train_function`` as a plain Python ``iterator_step(state, iterator)``
that closes over ``step_function``: ``jax.jit(self.train_step)`` when
``jit_compile`` is true, the bare method otherwise. That closure is the truth
about what runs, whatever ``model.jit_compile`` says. ``tests/test_jax_internals.py``
exercises every function here against the installed versions.

Keras-level helpers that do not depend on the backend (the running fit's
frame, the callback list, Keras's own profile windows, the wrapper markers)
are shared with the TensorFlow backend's ``_internals``: they read Keras, not
TensorFlow, and import no TensorFlow.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from xla_keras.backends.base import ProfilerBusy
from xla_keras.backends.chain import unwrap
from xla_keras.backends.keras._internals import (  # noqa: F401 - re-exported: Keras-level, backend-neutral
    InternalsMoved,
    auto_jit,
    callback_model,
    fit_validates,
    keras_profile_windows,
    layers_refusing_jit,
    layers_without_jit,
    raw_model_jit,
    running_callback_list,
    running_fit,
    set_raw_model_jit,
    user_data,
)
from xla_keras.core.versions import installed_version as _version

TESTED_VERSIONS = {"jax": "0.4.36-0.10", "keras": "3.7-3.15"}

# jax.monitoring event names (jax/_src/dispatch.py, compiler.py). Public
# listeners, but the names are JAX's internal constants.
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"


def versions() -> dict:
    from xla_keras import __version__

    return {"jax": _version("jax"), "jaxlib": _version("jaxlib"), "keras": _version("keras"), "xla_keras": __version__}


def _is_jitted(obj: Any) -> bool:
    """A ``jax.jit``-wrapped function (PjitFunction): it lowers and wraps a Python function."""
    return callable(obj) and hasattr(obj, "lower") and hasattr(obj, "__wrapped__")


def _closure_values(fn: Any) -> list:
    cells = getattr(fn, "__closure__", None) or ()
    values = []
    for cell in cells:
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    return values


def find_step_function(fn: Any, depth: int = 3) -> Optional[Any]:
    """The function Keras's ``iterator_step`` runs per batch: the jitted ``*_step``
    (jit_compile=True) or the bare step function (jit_compile=False); None when
    ``fn`` is not Keras's JAX step function. Breadth-first over closures: predict
    nests one ``iterator_step`` in another, next to a jitted ``concatenate``."""
    level, plain = [unwrap(fn)], None
    for _ in range(depth + 1):
        deeper = []
        for current in level:
            for value in _closure_values(current):
                name = getattr(value, "__name__", "")
                if _is_jitted(value) and name != "concatenate":
                    return value
                if callable(value) and name.endswith("_step") and name != "iterator_step" and not _is_jitted(value):
                    plain = plain or value
                if callable(value) and getattr(value, "__closure__", None):
                    deeper.append(value)
        level = deeper
    return plain


def is_jitted(step_fn: Any) -> bool:
    """The step function that runs is one XLA program (``jax.jit``)."""
    return _is_jitted(step_fn)


def compiled_name(step_fn: Any) -> Optional[str]:
    """The name JAX gives the jitted step's modules in its events and logs ("jit(train_step)")."""
    if not _is_jitted(step_fn):
        return None
    return f"jit({getattr(step_fn, '__name__', '')})"


def traced_name(step_fn: Any) -> Optional[str]:
    """The name JAX gives the jitted step in its tracing events ("train_step")."""
    return getattr(step_fn, "__name__", None) if _is_jitted(step_fn) else None


def executable_count(step_fn: Any) -> Optional[int]:
    """Executables the jitted step holds in its in-memory cache (private ``_cache_size``)."""
    size = getattr(step_fn, "_cache_size", None)
    try:
        return int(size()) if callable(size) else None
    except Exception:  # noqa: BLE001 - a count is a hint
        return None


def keras_distribution() -> Any:
    """Keras's global distribution (``keras.distribution.distribution()``), or None."""
    import keras

    return keras.distribution.distribution()


def distribution_facts() -> dict:
    import jax

    dist = keras_distribution()
    processes = jax.process_count()
    facts = {
        "multi_worker": processes > 1,
        "chief": jax.process_index() == 0,
        "process": jax.process_index(),
        "signatures_agree": True,  # a batch is a global jax.Array: its shape is the same in every process
    }
    if dist is None:
        return {"name": "default", "default": True, "replicas": 1, "processes": 1, **facts}
    mesh = getattr(dist, "device_mesh", None)
    devices = getattr(mesh, "devices", None)
    replicas = int(getattr(devices, "size", 0) or len(jax.devices()))
    flat = list(getattr(devices, "flat", None) or jax.devices())
    spanned = len({getattr(d, "process_index", 0) for d in flat}) or 1
    return {"name": type(dist).__name__, "default": False, "replicas": replicas, "processes": spanned, **facts}


def shard_shape(value: Any) -> Optional[Tuple[int, ...]]:
    """The per-device shape of a sharded jax.Array (attribute reads, no transfer), or None."""
    sharding = getattr(value, "sharding", None)
    if sharding is None or not hasattr(sharding, "shard_shape"):
        return None
    try:
        return tuple(int(d) for d in sharding.shard_shape(value.shape))
    except Exception:  # noqa: BLE001 - a fact for the report, never a failure
        return None


def devices() -> list:
    """``jax.devices()``, without JAX's INFO line about platforms it could not start ("Unable to
    initialize backend 'tpu'"): no finding, and a bare jax.devices() in user code does not show it."""
    import logging

    import jax

    bridge = logging.getLogger("jax._src.xla_bridge")  # JAX's module logger
    level = bridge.level
    bridge.setLevel(logging.WARNING)
    try:
        return jax.devices()
    finally:
        bridge.setLevel(level)


# --------------------------------------------------------------------------
# JAX's persistent compilation cache (jax.config options).


def cache_config() -> dict:
    import jax

    return {
        "dir": jax.config.jax_compilation_cache_dir,
        "min_compile_secs": float(jax.config.jax_persistent_cache_min_compile_time_secs),
        "min_entry_bytes": int(jax.config.jax_persistent_cache_min_entry_size_bytes),
        "enabled": bool(getattr(jax.config, "jax_enable_compilation_cache", True)),
    }


def set_cache(directory: str, min_compile_secs: float) -> None:
    """Point JAX's persistent cache at ``directory``. JAX reads the directory when
    it first needs the cache; ``reset_cache`` makes a later change take effect."""
    import jax

    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_secs))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    try:
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except Exception:  # noqa: BLE001 - older JAX: the next compile reads the config
        pass


# --------------------------------------------------------------------------
# Traces for the Profile tab.


def start_trace(logdir: str) -> None:
    import jax

    try:
        jax.profiler.start_trace(logdir)
    except RuntimeError as error:
        if "already" in str(error).lower():
            raise ProfilerBusy(str(error)) from error
        raise


def stop_trace() -> Optional[Callable[[], None]]:
    """Stop the trace window and collect its data (fast), leaving the save for later: the function that
    saves it to the window's log dir (JAX's save converts and writes the trace: 0.6-9 s after a storm,
    measured, where collecting took 0.001-0.09 s). Where this JAX cannot split the two, the trace is saved
    now and None is returned."""
    import jax

    try:
        from jax._src import profiler as jax_profiler
    except ImportError as e:
        raise InternalsMoved("jax._src.profiler", e) from e
    state = getattr(jax_profiler, "_profile_state", None)
    session = getattr(state, "profile_session", None)
    if (
        state is None
        or session is None
        or not hasattr(session, "export")
        or getattr(state, "create_perfetto_trace", False)
    ):
        jax.profiler.stop_trace()
        return None
    with state.lock:
        log_dir = str(state.log_dir)
        xspace = session.stop()
        state.reset()
        clear = getattr(jax_profiler, "clear_metadata", None)
        if clear is not None:
            clear()

    def save() -> None:
        session.export(xspace, log_dir)

    return save


# --------------------------------------------------------------------------
# The state Keras passes its step (keras/src/backend/jax/trainer.py, _get_jax_state): per phase, the
# variable lists in the order fit / evaluate / predict pass them. The cost card lowers the jitted step
# with their shapes (core/program_cost.py).

_STATE_LISTS = {
    "train": ("trainable_variables", "non_trainable_variables", "optimizer", "metrics_variables"),
    "test": ("trainable_variables", "non_trainable_variables", "metrics_variables"),
    "predict": ("trainable_variables", "non_trainable_variables"),
}


def step_state_specs(model: Any, phase: str) -> tuple:
    """The step's state argument as ``JAXTrainer._get_jax_state`` builds it for ``phase``: the variables'
    current values (references, nothing copied: the same arguments as the step's, so JAX's caches serve
    the lowering and the executable), or a ``jax.ShapeDtypeStruct`` where Keras purged a value mid-loop
    (``Variable._value`` is None: reading ``.value`` then would build a fresh initialised copy)."""
    import jax

    def spec(variable: Any) -> Any:
        if getattr(variable, "_value", None) is None:
            return jax.ShapeDtypeStruct(tuple(variable.shape), variable.dtype)
        return variable.value

    lists = []
    for name in _STATE_LISTS[phase]:
        try:
            variables = model.optimizer.variables if name == "optimizer" else getattr(model, name)
        except AttributeError as e:
            raise InternalsMoved(f"JAXTrainer state ({name})", e) from e
        lists.append([spec(v) for v in variables])
    return tuple(lists)


def batch_specs(batch: Any) -> Any:
    """The batch's ``jax.ShapeDtypeStruct``s, as the step received it: a committed array's sharding is
    kept, an uncommitted one's (``jax.device_put(x)``, how Keras feeds accelerators) is not, since a spec
    with a sharding counts as committed and would miss JAX's cache (private ``_committed``)."""
    import jax

    def spec(leaf: Any) -> Any:
        sharding = getattr(leaf, "sharding", None) if getattr(leaf, "_committed", False) else None
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

    return jax.tree.map(spec, batch)


def mesh_devices(model: Any) -> int:
    """Devices a Keras distribution spreads the step over (1 without one)."""
    distribution = keras_distribution()
    mesh = getattr(distribution, "device_mesh", None)
    devices = getattr(mesh, "devices", None)
    return int(getattr(devices, "size", 1) or 1) if distribution is not None else 1


def device_kind() -> str:
    """The first local device's ``device_kind`` (e.g. "cpu", "NVIDIA A100-SXM4-40GB", "TPU v4")."""
    import jax

    devices = jax.local_devices()
    return str(getattr(devices[0], "device_kind", "")) if devices else ""


# --------------------------------------------------------------------------
# Why the step compiled again at a known input signature: JAX keys its caches on the tracing context (its
# configuration) and on each argument's type and placement, not only on shapes. The monitor keeps, per
# step compile, the context and the batch's placement, and words a later compile's cause from the
# difference, in JAX's own words for the context (``jax_explain_cache_misses``'s explanation).


def trace_context() -> tuple:
    """JAX's tracing context now (part of the jit cache's key: its configuration, context managers)."""
    try:
        from jax._src import config
    except ImportError as e:
        raise InternalsMoved("jax._src.config", e) from e
    return tuple(config.trace_context())


def explain_context(new: tuple, old: tuple) -> str:
    """Why two tracing contexts differ, in the words of JAX's cache-miss explanation (its
    ``diff_tracing_ctx``, as ``jax_explain_cache_misses`` logs it) where this JAX has them."""
    try:
        from jax._src.interpreters import partial_eval
    except ImportError as e:
        raise InternalsMoved("jax._src.interpreters.partial_eval", e) from e
    diff = getattr(partial_eval, "diff_tracing_ctx", None)
    if diff is not None:
        found = diff(new, old)
        if found is not None:
            return " ".join(str(found[-1]).split())
    changed = sum(1 for a, b in zip(new, old) if a != b) + abs(len(new) - len(old))
    return f"Tracing context doesn't match, e.g. due to config or context manager ({changed} values differ)"


def placement(leaf: Any) -> str:
    """How one argument array is placed and typed beyond its shape and dtype, in words: a numpy array, or a
    jax.Array committed to its device(s) or not, its sharding when it spans several devices, a weak type."""
    try:
        import jax
    except ImportError:  # pragma: no cover - the JAX backend runs with JAX
        return type(leaf).__name__
    if not isinstance(leaf, jax.Array):
        if isinstance(leaf, (int, float, complex)):
            return "a Python scalar (weak type)"
        return "a numpy array" if type(leaf).__name__ == "ndarray" else f"a {type(leaf).__name__}"
    sharding = leaf.sharding
    devices = list(getattr(sharding, "device_set", ()) or ())
    where = f"on {devices[0]}" if len(devices) == 1 else f"sharded over {len(devices)} devices ({sharding})"
    committed = getattr(leaf, "_committed", None)
    state = " committed" if committed else " uncommitted" if committed is not None else ""
    weak = ", weak type" if getattr(leaf, "weak_type", False) else ""
    return f"a{state} jax.Array {where}{weak}".replace("a uncommitted", "an uncommitted")
