"""The ONE place that touches private Keras / TensorFlow APIs.

Every private attribute or module the package relies on is reached through a
small function here, and ``tests/test_internals.py`` exercises each one
against the installed versions, so an upgrade that moves something fails
loudly in CI instead of silently turning the monitor blind.

Tested on TensorFlow 2.16-2.21 with Keras 3.7-3.15 (the README's matrix).
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from xla_keras.backends.base import ProfilerBusy
from xla_keras.backends.chain import unwrap, wrap_marker  # noqa: F401 - our own markers, re-exported for the helpers below
from xla_keras.backends.keras._internals import (  # noqa: F401 - Keras-level, re-exported for the backend's callers
    TESTED_VERSIONS,
    InternalsMoved,
    _model_call_frames,
    auto_jit,
    build_for_step,
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
from xla_keras.backends.tensorflow.flags import (
    auto_jit_value,
    env_auto_jit_on,
    has_accelerator,
    override_auto_jit,
)
from xla_keras.backends.tensorflow.quiet import without_profiler_lines
from xla_keras.backends.tensorflow.trace_events import TraceEvent
from xla_keras.core.versions import installed_version, tensorflow_version


def versions() -> dict:
    from xla_keras import __version__

    return {
        "tensorflow": installed_version("tensorflow"),
        "keras": installed_version("keras"),
        "xla_keras": __version__,
    }


# --------------------------------------------------------------------------
# The step function Keras built, and the jit flag it really runs with.
# Keras's train_function closes over a tf.function named one_step_on_data
# (keras/src/backend/tensorflow/trainer.py, _make_function); its _jit_compile
# tells the truth, whatever model.jit_compile says.

_STEP_FUNCTION_NAME = "one_step_on_data"


def _is_tf_function(obj: Any) -> bool:
    # Keras wraps the tf.function with functools.wraps, which copies its
    # __dict__ (so _jit_compile too) onto a plain function: insist on the
    # real tf.function type, reached through __wrapped__.
    import tensorflow as tf

    return isinstance(obj, tf.types.experimental.PolymorphicFunction) and hasattr(obj, "_jit_compile")


def _children(obj: Any) -> List[Any]:
    out = []
    for attr in ("__wrapped__", "_python_function", "_xla_keras_original"):
        child = getattr(obj, attr, None)
        if child is not None:
            out.append(child)
    for cell in getattr(obj, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value):
            out.append(value)
    return out


def find_step_function(fn: Any) -> Optional[Any]:
    """The innermost ``tf.function`` named one_step_on_data reachable from a
    Keras train/test/predict function, else the outermost tf.function, else
    None (run_eagerly)."""
    seen, stack, outer = set(), [fn], None
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if _is_tf_function(obj):
            if getattr(obj, "__name__", "") == _STEP_FUNCTION_NAME:
                return obj
            outer = outer or obj
        stack.extend(_children(obj))
    return outer


def function_jit_flag(step_fn: Any) -> bool:
    """Whether the tf.function found by find_step_function compiles with XLA."""
    if step_fn is None:
        return False
    try:
        return bool(step_fn._jit_compile)
    except AttributeError as e:
        raise InternalsMoved("tf.function._jit_compile", e) from e


# Inputs XLA's TensorFlow bridge takes as compile-time constants (the tf2xla kernels read them with
# ``ConstantInput``: XlaOpRegistry's compile-time-constant inputs), by op type: each such input's index
# (-1: the last). TensorFlow does not expose the registry to Python. When the value of such an input is
# computed from the step's arguments (the batch, or the weights it reads), XLA keys its cache on those
# arguments' values: it compiles the step again for each new value (measured: ``tf.math.top_k`` with a
# ``k`` computed from the batch compiled at every step of a fit), or refuses ("must be a compile-time
# constant"). ``tests/test_internals.py`` checks a sample against TensorFlow's own behaviour.
COMPILE_TIME_CONSTANT_INPUTS = {
    "TopKV2": (1,),
    "Range": (0, 1, 2),
    "Reshape": (1,),
    "Fill": (0,),
    "Tile": (1,),
    "Slice": (1, 2),
    "StridedSlice": (1, 2, 3),
    "Pad": (1,),
    "PadV2": (1,),
    "MirrorPad": (1,),
    "Transpose": (1,),
    "ConcatV2": (-1,),
    "Sum": (1,),
    "Mean": (1,),
    "Max": (1,),
    "Min": (1,),
    "Prod": (1,),
    "All": (1,),
    "Any": (1,),
    "EuclideanNorm": (1,),
    "ExpandDims": (1,),
    "BroadcastTo": (1,),
    "OneHot": (1,),
    "ArgMax": (1,),
    "ArgMin": (1,),
    "GatherV2": (2,),
    "ReverseV2": (1,),
    "Split": (0,),
    "SplitV": (1, 2),
    "Cumsum": (1,),
    "Cumprod": (1,),
    "UnsortedSegmentSum": (2,),
    "UnsortedSegmentMax": (2,),
    "UnsortedSegmentMin": (2,),
    "UnsortedSegmentProd": (2,),
    "RandomUniform": (0,),
    "RandomStandardNormal": (0,),
    "TruncatedNormal": (0,),
    "RandomUniformInt": (0,),
    "StatelessRandomUniformV2": (0,),
    "StatelessRandomNormalV2": (0,),
    "StatelessTruncatedNormalV2": (0,),
    "ResizeBilinear": (1,),
    "ResizeNearestNeighbor": (1,),
    "ResizeBicubic": (1,),
    "Empty": (0,),
    "Conv2DBackpropInput": (0,),
    "Conv2DBackpropFilter": (1,),
    "Multinomial": (1,),
    "MatrixBandPart": (1, 2),
    "LinSpace": (2,),
    "ScatterNd": (2,),
    "Roll": (1, 2),
    "SpaceToBatchND": (1, 2),
    "BatchToSpaceND": (1, 2),
    "TensorListReserve": (0, 1),
}
# Ops whose output XLA knows when it compiles, whatever the value of their input: shapes are static
# within one compile. A compile-time constant computed from these alone is a constant.
_STATIC_WHEN_COMPILED = frozenset({"Const", "Shape", "ShapeN", "Size", "Rank", "VariableShape"})


def compile_time_constant_uses(step_fn: Any) -> List[dict]:
    """Every input XLA needs as a compile-time constant in the step function's traced graphs whose value
    comes from the function's arguments, with where it comes from. One dict per such input:
    ``{"op", "input", "node", "frames", "args", "arguments", "captured"}``: the op type, the input's name
    in the op's definition (``"k"``), the node, the stack that created the op (outermost first: (file,
    line, function)), the indices of the step's own arguments it reads (the batch's leaves, in order), how
    many arguments the function has, and the captured tensors it reads (variables' handles). Ops inside
    control-flow branches are not read."""
    if step_fn is None:
        return []
    try:
        concrete = step_fn._list_all_concrete_functions()
    except AttributeError as e:
        raise InternalsMoved("tf.function._list_all_concrete_functions", e) from e
    uses: List[dict] = []
    seen = set()
    for function in concrete:
        graph = function.graph
        captured = {id(internal): external for external, internal in graph.captures}
        arguments = {id(t): i for i, t in enumerate(function.inputs) if id(t) not in captured}
        for op in graph.get_operations():
            indices = COMPILE_TIME_CONSTANT_INPUTS.get(op.type)
            if not indices:
                continue
            for index in indices:
                position = index if index >= 0 else len(op.inputs) + index
                if not 0 <= position < len(op.inputs):
                    continue
                args, handles = _argument_sources(op.inputs[position], arguments, captured)
                if not args and not handles:
                    continue  # a constant, or known from static shapes alone
                key = (op.name, position, tuple(args), tuple(id(h) for h in handles))
                if key in seen:
                    continue
                seen.add(key)
                try:
                    name = op.op_def.input_arg[min(position, len(op.op_def.input_arg) - 1)].name
                except Exception:  # noqa: BLE001 - the input's name is words only
                    name = f"input {position}"
                frames = [(f.filename, f.lineno, f.name) for f in op.traceback]
                uses.append(
                    {
                        "op": op.type,
                        "input": name,
                        "node": op.name,
                        "frames": frames,
                        "args": sorted(set(args)),
                        "arguments": len(arguments),
                        "captured": handles,
                    }
                )
    return uses


def _argument_sources(tensor: Any, arguments: dict, captured: dict):
    """(argument indices, captured tensors) that ``tensor``'s value is computed from, walking its
    producers back to the graph's placeholders; shapes, sizes and constants end a path."""
    args: List[int] = []
    handles: List[Any] = []
    seen = set()
    stack = [tensor]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if id(t) in arguments:
            args.append(arguments[id(t)])
            continue
        if id(t) in captured:
            handles.append(captured[id(t)])
            continue
        op = t.op
        if op.type in _STATIC_WHEN_COMPILED:
            continue
        stack.extend(op.inputs)
    return args, handles


def op_input_name(op_type: str, index: int) -> str:
    """The name of an op's ``index``-th input in TensorFlow's op registry (``"limit"`` for Range's 1), or
    ``"input N"`` when the registry does not have it."""
    try:
        from tensorflow.python.framework import op_def_registry
    except ImportError as e:
        raise InternalsMoved("tensorflow.python.framework.op_def_registry", e) from e
    op_def = op_def_registry.get(op_type)
    if op_def is None or not op_def.input_arg:
        return f"input {index}"
    return op_def.input_arg[min(index, len(op_def.input_arg) - 1)].name


def variable_handles(model: Any) -> dict:
    """``id(handle)`` -> the variable's path, for each of the model's variables (optimizer's and metrics'
    included): what a captured resource in the step's graph is."""
    out = {}
    for variable in _all_variables(model):
        value = getattr(variable, "_value", None)  # Keras 3's TensorFlow variable holds a tf.Variable
        handle = getattr(value, "handle", None)
        if handle is not None:
            out[id(handle)] = getattr(variable, "path", None) or getattr(variable, "name", "?")
    return out


def _all_variables(model: Any) -> List[Any]:
    variables = list(getattr(model, "variables", []) or [])
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        variables.extend(getattr(optimizer, "variables", []) or [])
    return variables


# XLA's BufferAllocationProto fields the cost card reads (in every TensorFlow tested; ``color`` is the
# memory space, with XLA's default colorer), and whether an output reuses the allocation: 2.16's proto
# has no such field, so it is read from the module's input-output alias config (every version has it).
ALLOCATION_FIELDS = (
    "size",
    "is_entry_computation_parameter",
    "maybe_live_out",
    "is_constant",
    "is_thread_local",
    "color",
)
ALIASED = "aliased_with_output"


def compiled_buffer_allocations(step_fn: Any, args: Any) -> List[dict]:
    """XLA's buffer assignment of ``step_fn`` compiled again for ``args`` (TensorFlow keeps the executable
    that ran out of Python's reach; ``stage="optimized_hlo_proto_serialized"`` returns an executable's
    ``HloProto``): a dict of ``ALLOCATION_FIELDS`` and ``ALIASED`` per allocation. ValueError if none."""
    try:
        from tensorflow.compiler.xla.service import hlo_pb2
    except ImportError as e:
        raise InternalsMoved("tensorflow.compiler.xla.service.hlo_pb2", e) from e
    proto = hlo_pb2.HloProto.FromString(
        step_fn.experimental_get_compiler_ir(args)(stage="optimized_hlo_proto_serialized")
    )
    if not proto.buffer_assignment.buffer_allocations:
        raise ValueError("the compiled step's HloProto holds no buffer assignment")
    aliases = {
        (e.parameter_number, tuple(e.parameter_shape_index)) for e in proto.hlo_module.input_output_alias.entries
    }
    allocations = []
    for a in proto.buffer_assignment.buffer_allocations:
        aliased = a.is_entry_computation_parameter and (a.parameter_number, tuple(a.parameter_shape_index)) in aliases
        allocations.append({**{field: getattr(a, field) for field in ALLOCATION_FIELDS}, ALIASED: aliased})
    return allocations


# --------------------------------------------------------------------------
# Batches: the iterator Keras passes in and distribution wrappers.


def unwrap_distributed(value: Any) -> Any:
    """PerReplica values carry no shape: their per-replica components do, and
    those are XLA's cache key (each replica compiles for its own shapes, and
    a final partial batch splits unevenly, e.g. 3 and 2 rows)."""
    try:
        from tensorflow.python.distribute import values as ds_values
    except ImportError as e:
        raise InternalsMoved("tensorflow.python.distribute.values", e) from e
    if isinstance(value, ds_values.DistributedValues):
        from xla_keras.core.signatures import Replicas

        return Replicas(value.values)
    return value


# --------------------------------------------------------------------------
# Global XLA flags.


def _tf_session_module():
    try:
        from tensorflow.python.client import _pywrap_tf_session

        _pywrap_tf_session.TF_SetTfXlaCpuGlobalJit  # noqa: B018 - presence check
        return _pywrap_tf_session
    except (ImportError, AttributeError) as e:
        raise InternalsMoved("_pywrap_tf_session.TF_SetTfXlaCpuGlobalJit", e) from e


def set_cpu_global_jit(enabled: bool) -> bool:
    """Set TF's CPU global-jit flag; returns the previous value."""
    return bool(_tf_session_module().TF_SetTfXlaCpuGlobalJit(int(bool(enabled))))


def cpu_global_jit() -> bool:
    """The CPU global-jit flag as TensorFlow holds it now (reads by setting and
    restoring, the only read the C API offers)."""
    previous = set_cpu_global_jit(True)
    set_cpu_global_jit(previous)
    return previous


def devices_initialized() -> bool:
    """Whether TensorFlow has created its devices (its first op does), after
    which flags read at device creation no longer take effect."""
    try:
        from tensorflow.python.eager import context

        return bool(context.context()._initialized)
    except (ImportError, AttributeError) as e:
        raise InternalsMoved("tensorflow.python.eager.context.context()._initialized", e) from e


def set_auto_jit_off(off: bool) -> None:
    """Override TF_XLA_FLAGS' --tf_xla_auto_jit (off=True) or put its value back."""
    value = "-1" if off else (auto_jit_value() or "0")
    _tf_session_module().TF_SetXlaAutoJitMode(value)
    override_auto_jit("-1" if off else None)


def autoclustering_setting() -> Optional[bool]:
    """TensorFlow's own jit level as set from Python: None (never set: the
    TF_XLA_FLAGS default applies), True (autoclustering) or False (off)."""
    try:
        from tensorflow.python.eager import context

        return context.context()._optimizer_jit
    except (ImportError, AttributeError) as e:
        raise InternalsMoved("tensorflow.python.eager.context.context()._optimizer_jit", e) from e


def restore_autoclustering_setting(value: Optional[bool]) -> None:
    from tensorflow.python.eager import context

    context.context().optimizer_jit = value  # None puts the TF_XLA_FLAGS default back


def autoclustering_enabled() -> bool:
    """Whether graphs are auto-clustered: set from Python, or by the
    TF_XLA_FLAGS default when Python never set a level."""
    import tensorflow as tf

    if tf.config.optimizer.get_jit() == "autoclustering":
        return True
    return autoclustering_setting() is None and env_auto_jit_on()


# --------------------------------------------------------------------------
# The in-memory profiler probe.


class Probe:
    """One in-memory profiler session around a step. Holds the only
    reference to TensorFlow's session, so that its destructor (which logs a
    line too) runs inside the quiet window of :func:`stop_probe`."""

    __slots__ = ("session",)

    def __init__(self, session: Any):
        self.session = session


def start_probe() -> Probe:
    try:
        from tensorflow.python.profiler.internal import _pywrap_profiler
    except ImportError as e:
        raise InternalsMoved("tensorflow.python.profiler.internal._pywrap_profiler", e) from e
    import tensorflow as tf

    def start():
        session = _pywrap_profiler.ProfilerSession()
        try:
            session.start("", {})
            return Probe(session)
        except tf.errors.AlreadyExistsError as e:
            busy = str(e)
        session = None  # noqa: F841 - freed here, inside the quiet window (its destructor logs)
        raise ProfilerBusy(busy)

    return without_profiler_lines(start)


def _stop_session(probe: Probe) -> bytes:
    session, probe.session = probe.session, None
    if session is None:
        return b""
    try:
        return session.stop()
    finally:
        session = None  # noqa: F841 - destructor inside the quiet window


def stop_probe(probe: Probe) -> List[TraceEvent]:
    """Stop a probe and return its trace events (with a duration)."""
    data = without_profiler_lines(lambda: _stop_session(probe))  # first: the profiler is freed
    try:
        from tensorflow.tsl.profiler.protobuf import trace_events_pb2
    except ImportError as e:
        raise InternalsMoved("tensorflow.tsl.profiler.protobuf.trace_events_pb2", e) from e
    trace = trace_events_pb2.Trace()
    trace.ParseFromString(data)
    return [
        TraceEvent((e.device_id, e.resource_id), e.name, e.timestamp_ps, e.duration_ps)
        for e in trace.trace_events
        if e.duration_ps > 0
    ]


def trace_window_events(session_dir: str) -> List[TraceEvent]:
    """The host's events of a trace window TensorFlow saved in ``session_dir`` (its ``*.xplane.pb``, read
    with TensorFlow's own protobuf): the op kernels the executor ran, ``name:Type`` each."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError as e:
        raise InternalsMoved("tensorflow.tsl.profiler.protobuf.xplane_pb2", e) from e
    events: List[TraceEvent] = []
    for name in sorted(os.listdir(session_dir)):
        if not name.endswith(".xplane.pb"):
            continue
        space = xplane_pb2.XSpace()
        with open(os.path.join(session_dir, name), "rb") as f:
            space.ParseFromString(f.read())
        for index, plane in enumerate(space.planes):
            if not plane.name.startswith("/host:"):
                continue
            metadata = plane.event_metadata
            for line in plane.lines:
                base = line.timestamp_ns * 1000
                events.extend(
                    TraceEvent((index, line.id), metadata[e.metadata_id].name, base + e.offset_ps, e.duration_ps)
                    for e in line.events
                )
    return events


# --------------------------------------------------------------------------
# The graph a function runs, as TensorFlow built it (auto-clustering's coverage names its nodes).

# The attributes naming the dtype a node's op works on, first found first (a lookup's keys are its Tin).
_DTYPE_ATTRS = ("Tin", "T", "dtype", "key_dtype")
# Set by partial declustering on a node XLA's clustering had taken and a later pass gave back.
_DECLUSTERED = "_XlaAlreadyClustered"


def start_graph_collection() -> bool:
    """Ask TensorFlow to keep the graph of each function it instantiates from now on: the graph its
    executor runs, after grappler and XLA's clustering passes (the eager context's graph collection).
    False, and nothing started, while ``tf.summary.trace_on`` collects: that run metadata is the user's."""
    try:
        from tensorflow.python.eager import context
        from tensorflow.python.ops import summary_ops_v2
    except ImportError as e:
        raise InternalsMoved("tensorflow.python.eager.context / tensorflow.python.ops.summary_ops_v2", e) from e
    if getattr(summary_ops_v2, "_current_trace_context", None) is not None:
        return False
    context.context().enable_graph_collection()
    return True


def stop_graph_collection() -> List[List[Tuple[str, str, bool, Optional[str]]]]:
    """Stop collecting; the graphs TensorFlow built meanwhile, one list per graph its executor runs: each
    node's (name, op type, declustered, dtype), declustered when XLA's clustering had taken the node and a
    later pass gave it back, dtype the one its op works on (a lookup's keys), or None."""
    from tensorflow.python.eager import context

    ctx = context.context()
    try:
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_graph_collection()
    if metadata is None:
        return []
    import tensorflow as tf

    def dtype(node: Any) -> Optional[str]:
        for key in _DTYPE_ATTRS:
            if key in node.attr and node.attr[key].type:
                return tf.dtypes.as_dtype(node.attr[key].type).name
        return None

    return [
        [(n.name, n.op, _DECLUSTERED in n.attr, dtype(n)) for n in graph.node]
        for function in metadata.function_graphs
        for graph in function.partition_graphs
    ]


def abandon_probe(probe: Probe) -> None:
    """Stop a probe whose events nobody will read (an error path): best effort."""
    try:
        without_profiler_lines(lambda: _stop_session(probe))
    except Exception:  # noqa: BLE001 - stopping is best effort on the error path
        pass


def profiler_sees_xla_compiler() -> Optional[bool]:
    """Whether XLA's compiler emits trace events the probe can read.

    Measured on CPU: TensorFlow 2.18 and later do (CpuCompiler::...,
    Compiler::RunBackend); 2.16 and 2.17 emit none at all, while the op that
    triggers a compile (the step function's kernel under jit_compile=True,
    ``_XlaCompile`` under auto-clustering) is traced on every version. None:
    not known (2.16/2.17 with an accelerator, which we could not measure)."""
    version = tensorflow_version()
    if version >= (2, 18):
        return True
    if version == (0,) or has_accelerator():  # no version found, or a device we could not measure
        return None
    return False


# --------------------------------------------------------------------------
# Distribution.


def strategy_facts(model: Any) -> dict:
    """Name, replica count, multi-worker-ness and chief-ness of the model's strategy."""
    import tensorflow as tf

    strategy = model.distribute_strategy
    extended = strategy.extended
    multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    default = type(strategy).__name__ == "_DefaultDistributionStrategy"
    facts = {
        "name": type(strategy).__name__,
        "default": default,
        "replicas": int(strategy.num_replicas_in_sync),
        "multi_worker": multi_worker,
        "chief": bool(getattr(extended, "should_checkpoint", True)),
    }
    if multi_worker:  # the workers, in order: the "chief" task first when there is one
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec().as_dict()
        chiefs = len(spec.get("chief", []))
        facts["processes"] = chiefs + len(spec.get("worker", []))
        facts["process"] = int(resolver.task_id) + (chiefs if resolver.task_type == "worker" else 0)
    return facts


def keras_multi_worker_fit_faults() -> List[str]:
    """The steps of Keras's fit that fail under MultiWorkerMirroredStrategy
    (keras-team/keras#20585), read from the source of the functions that run:
    "build" (the first batch is averaged across workers to build the model)
    and "logs" (scalar logs averaged with axis=0). A function that is no
    longer Keras's own (patched, e.g. by xla_keras.multiworker.WORKAROUND) is
    read too when its source is available, else taken as fixed; Keras's own
    without source (a stripped install) cannot be read and is not reported.
    The multi-worker test proves this agrees with what fit does on two workers."""
    import inspect
    import re

    try:
        from keras.src.backend.tensorflow import trainer

        functions = {"build": trainer.TensorFlowTrainer._maybe_symbolic_build, "logs": trainer.reduce_per_replica}
    except (ImportError, AttributeError) as e:
        raise InternalsMoved(
            "keras.src.backend.tensorflow.trainer (_maybe_symbolic_build, reduce_per_replica)", e
        ) from e
    patterns = {
        "build": r"distribute_strategy\.reduce\(\s*[\"']MEAN[\"']",
        "logs": r"strategy\.reduce\(\s*[\"']MEAN[\"'],\s*v,\s*axis=0\s*\)",
    }
    faults = []
    for name, function in functions.items():
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            continue  # no source: patched from a string, or a stripped install (see docstring)
        if re.search(patterns[name], source):
            faults.append(name)
    return faults


def op_determinism_enabled() -> bool:
    try:
        from tensorflow.python.framework.config import is_op_determinism_enabled
    except ImportError as e:
        raise InternalsMoved("tensorflow.python.framework.config.is_op_determinism_enabled", e) from e
    return bool(is_op_determinism_enabled())


# --------------------------------------------------------------------------
# Trace windows for the Profile tab (tf.profiler.experimental).


def start_trace(logdir: str) -> None:
    """tf.profiler.experimental.start, without its leak: when it fails because
    a low-level session is running, TF 2.21 leaves its module-level session
    set, so every later start in the process fails too. Undo that."""
    import tensorflow as tf

    try:
        from tensorflow.python.profiler import profiler_v2
    except ImportError as e:
        raise InternalsMoved("tensorflow.python.profiler.profiler_v2", e) from e
    before = profiler_v2._profiler
    try:
        without_profiler_lines(lambda: tf.profiler.experimental.start(logdir))
    except BaseException:
        # A failed start, or a Ctrl-C that landed after the session started
        # (TF resets its module-level session only on Exception): never leave
        # a session behind, running or not.
        if before is None and profiler_v2._profiler is not None:
            session, profiler_v2._profiler = profiler_v2._profiler, None

            def drop():
                nonlocal session
                try:
                    session.stop()
                except Exception:  # noqa: BLE001 - it never started
                    pass
                session = None  # its destructor logs: inside the quiet window

            without_profiler_lines(drop)
        raise


def stop_trace() -> None:
    """Stop the trace window and save it (TensorFlow collects and writes in one call: tens of ms)."""
    import tensorflow as tf
    from tensorflow.python.profiler import profiler_v2

    try:
        without_profiler_lines(tf.profiler.experimental.stop)
    except BaseException:
        # The export failed or was interrupted (a Ctrl-C while the trace is
        # written): TF keeps its module-level session set and the profiler
        # busy for the whole process. Drop it.
        profiler_v2._profiler = None
        raise
