"""Every private Keras/TF API xla_keras relies on, exercised against the
installed versions: an upgrade that moves one fails here, loudly."""

import glob
import re
import sys

# Imported, not skipped: in the compatibility tier a TensorFlow or Keras that stopped importing is the bug.
import keras
import numpy as np
import pytest
import tensorflow as tf

from xla_keras.backends.tensorflow import _internals, flags


def _model(jit):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse", jit_compile=jit)
    return model


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("phase", ["train", "test"])
def test_find_step_function_reads_the_jit_flag_that_runs(jit, phase):
    model = _model(jit)
    getattr(model, f"make_{phase}_function")()
    step_fn = _internals.find_step_function(getattr(model, f"{phase}_function"))
    assert step_fn is not None and step_fn.__name__ == "one_step_on_data"
    assert _internals.function_jit_flag(step_fn) is jit


@pytest.mark.parametrize("jit", [True, False])
def test_find_step_function_in_predict(jit):
    model = _model(jit)
    model.make_predict_function()
    step_fn = _internals.find_step_function(model.predict_function)
    assert _internals.function_jit_flag(step_fn) is jit


def test_run_eagerly_has_no_step_function():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse", run_eagerly=True)
    model.make_train_function()
    assert _internals.find_step_function(model.train_function) is None
    assert _internals.function_jit_flag(None) is False


def test_list_of_batches_runs_the_jitted_step_and_traces_are_counted():
    model = _model(True)
    model.make_train_function()
    step_fn = _internals.find_step_function(model.train_function)
    x, y = np.ones((3, 4), "float32"), np.ones((3, 2), "float32")
    model.train_function([(tf.constant(x), tf.constant(y))])
    assert flags.tracing_count(step_fn) == 1


def test_compiled_buffer_allocations_read_xla_buffer_assignment_of_the_step():
    model = _model(True)
    model.make_test_function()
    step_fn = _internals.find_step_function(model.test_function)
    x, y = tf.zeros((3, 4)), tf.zeros((3, 2))
    allocations = _internals.compiled_buffer_allocations(step_fn, (x, y))
    assert allocations and all(set(a) == {*_internals.ALLOCATION_FIELDS, _internals.ALIASED} for a in allocations)
    parameters = sorted(a["size"] for a in allocations if a["is_entry_computation_parameter"])
    # the batch (3x4 and 3x2 float32) and the layer's kernel (4x2) and bias (2) are entry parameters
    assert {48, 24, 32, 8} <= set(parameters), parameters
    # the variables the test step updates (its metrics' totals) are read from the alias config: where
    # the proto also says it itself (TensorFlow 2.20+), both agree
    assert any(a[_internals.ALIASED] for a in allocations)
    proto = step_fn.experimental_get_compiler_ir((x, y))(stage="optimized_hlo_proto_serialized")
    from tensorflow.compiler.xla.service import hlo_pb2

    own = hlo_pb2.HloProto.FromString(proto).buffer_assignment.buffer_allocations
    if "is_parameter_aliased_with_output" in hlo_pb2.BufferAllocationProto.DESCRIPTOR.fields_by_name:
        assert [a.is_parameter_aliased_with_output for a in own] == [a[_internals.ALIASED] for a in allocations]


def test_compiled_buffer_allocations_refuse_a_proto_without_a_buffer_assignment():
    class Step:
        def experimental_get_compiler_ir(self, args):
            return lambda stage: b""

    with pytest.raises(ValueError, match="no buffer assignment"):
        _internals.compiled_buffer_allocations(Step(), ())


def test_wrap_marker_and_unwrap():
    def original(it):
        return it

    def wrapper(it):
        return original(it)

    owner = object()
    wrapped = _internals.wrap_marker(wrapper, original, owner)
    assert wrapped._xla_keras_owner is owner
    assert _internals.unwrap(wrapped) is original
    assert _internals.unwrap(original) is original
    assert _internals.unwrap(None) is None


def test_data_iterator_types_match_keras_iterators():
    it = iter(tf.data.Dataset.range(3))
    assert isinstance(it, flags.data_iterator_types())


def test_unwrap_distributed_gives_a_per_replica_component():
    from tensorflow.python.distribute import values as ds_values

    from xla_keras.core.signatures import Replicas, signature_of

    per_replica = ds_values.PerReplica((tf.ones((3, 4)), tf.ones((2, 4))))
    assert not hasattr(per_replica, "shape")  # why unwrapping is needed at all
    components = _internals.unwrap_distributed(per_replica)
    assert isinstance(components, Replicas)
    assert [tuple(c.shape) for c in components] == [(3, 4), (2, 4)]
    # An uneven split: each replica compiles for its own shape, so both are in the signature.
    sig = signature_of((per_replica,), _internals.unwrap_distributed)
    assert [(leaf.path, leaf.shape) for leaf in sig] == [("x", (3, 4)), ("x@1", (2, 4))]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    data = tf.data.Dataset.from_tensor_slices(tf.ones((4, 3))).batch(2)
    ds = strategy.experimental_distribute_dataset(data)
    assert [leaf.shape for leaf in signature_of(next(iter(ds)), _internals.unwrap_distributed)] == [(2, 3)]
    plain = tf.ones((2,))
    assert _internals.unwrap_distributed(plain) is plain


def test_cpu_global_jit_flag_round_trip():
    before = _internals.cpu_global_jit()
    try:
        assert _internals.set_cpu_global_jit(True) is before
        assert _internals.cpu_global_jit() is True
        assert _internals.set_cpu_global_jit(False) is True
        assert _internals.cpu_global_jit() is False
    finally:
        _internals.set_cpu_global_jit(before)


def test_devices_initialized_after_first_op():
    tf.constant(1.0)
    assert _internals.devices_initialized() is True


@pytest.mark.parametrize(
    "value, expected",
    [
        ("--tf_xla_cpu_global_jit", True),
        ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit=true", True),
        ("--tf_xla_cpu_global_jit=false", False),
        ("--tf_xla_auto_jit=2", False),
        ("", False),
    ],
)
def test_env_flag_set(value, expected):
    assert flags.env_flag_set("tf_xla_cpu_global_jit", {"TF_XLA_FLAGS": value}) is expected


def test_autoclustering_switch_round_trip():
    before = _internals.autoclustering_enabled()
    try:
        flags.set_autoclustering(True)
        assert tf.config.optimizer.get_jit() == "autoclustering"
        assert _internals.autoclustering_enabled() is True
        flags.set_autoclustering(False)
        assert _internals.autoclustering_enabled() is False
    finally:
        flags.set_autoclustering(before)


def test_probe_sees_a_compile_as_this_version_is_known_to_show_it_and_reports_busy_profiler(tmp_path):
    """What the probe can see of a compile, per TensorFlow version (measured): 2.19+ name the module
    Compiler::RunBackend, 2.18 CpuCompiler::CompileLegacyCpuExecutable / CpuCompiler::Codegen, 2.16/2.17
    emit no compiler event at all, only the kernel of the function that compiled. An upgrade that
    changes any of this fails here, loudly, with the names it saw."""
    from xla_keras.backends.tensorflow.trace_events import compile_seconds_from_trace, has_compiler_events

    @tf.function(jit_compile=True)
    def f(a):
        return tf.reduce_sum(a * a)

    session = _internals.start_probe()
    f(tf.ones((7, 3)))
    events = _internals.stop_probe(session)
    names = sorted({e.name for e in events})
    kernels = [e for e in events if e.name.startswith("__inference_f_") and e.duration_ps > 0]
    assert kernels, names[:50]  # the op that triggered the compile is traced on every version
    sees = _internals.profiler_sees_xla_compiler()
    assert sees in (True, False, None)
    if sees is False:
        assert not has_compiler_events(events), names[:50]
        assert compile_seconds_from_trace(events) == []
    if sees is True or has_compiler_events(events):
        assert sees is not False
        assert any(
            n.endswith("Compiler::RunBackend")
            or n.endswith("Compiler::CompileLegacyCpuExecutable")
            or n.endswith("Compiler::Codegen")
            for n in names
        ), names[:50]
        seconds = compile_seconds_from_trace(events)
        assert len(seconds) == 1 and 0 < seconds[0] <= kernels[0].duration_ps / 1e12 * 1.01

    tf.profiler.experimental.start(str(tmp_path))
    try:
        with pytest.raises(_internals.ProfilerBusy):
            _internals.start_probe()
    finally:
        tf.profiler.experimental.stop()


def test_tensorflows_variable_initialiser_is_traced_as_a_function_call_of_its_own():
    """A tf.function whose first trace creates a variable (Keras's optimizer slots, built inside the step's
    first trace) makes TensorFlow run a one-off function, ``initialize_variables``, before it: the probe
    tells the modules compiled in it from the step's by this traced call (trace_events.ONE_OFF_FUNCTIONS)."""
    from xla_keras.backends.tensorflow.trace_events import ONE_OFF_FUNCTIONS, function_calls

    made = []

    @tf.function
    def makes_a_variable(a):
        if not made:
            made.append(tf.Variable(lambda: tf.zeros((3,))))
        return a + made[0]

    session = _internals.start_probe()
    makes_a_variable(tf.ones((3,)))
    events = _internals.stop_probe(session)
    calls = function_calls(events)
    names = [name for _, _, name in calls]
    assert "initialize_variables" in ONE_OFF_FUNCTIONS
    assert "initialize_variables" in names and "makes_a_variable" in names, sorted({e.name for e in events})[:60]
    init = next(c for c in calls if c[2] == "initialize_variables")
    step = next(c for c in calls if c[2] == "makes_a_variable")
    assert init[1] <= step[0] or step[1] <= init[0]  # two calls, one after the other


def test_step_kernels_and_xla_compile_ops_are_traced_under_their_names():
    """The op spans a probe falls back to when XLA's compiler emits no events: the step
    function's kernel (one per batch Keras runs) and, under auto-clustering, _XlaCompile."""
    from xla_keras.backends.tensorflow.trace_events import step_kernel_seconds, xla_compile_op_seconds

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse", jit_compile=True, steps_per_execution=2)
    model.make_train_function()
    x, y = tf.ones((3, 4)), tf.ones((3, 2))
    session = _internals.start_probe()
    model.train_function([(x, y), (x, y)])
    events = _internals.stop_probe(session)
    kernels = step_kernel_seconds(events)
    assert len(kernels) == 2, sorted({e.name for e in events})[:60]
    assert kernels[0] > kernels[1]  # the first one compiled
    assert xla_compile_op_seconds(events) == ([], 0)


def test_a_saved_trace_window_reads_back_its_op_kernels_as_name_and_type(tmp_path):
    """The coverage reads the trace window TensorFlow saved (its xplane.pb, with TensorFlow's own
    protobuf): each op kernel that ran is an event named "node:OpType" on the host's plane."""

    @tf.function
    def f(a):
        return tf.reduce_sum(tf.math.square(a))

    f(tf.ones((3, 2)))
    tf.profiler.experimental.start(str(tmp_path))
    f(tf.ones((3, 2)))
    tf.profiler.experimental.stop()
    (session,) = glob.glob(str(tmp_path / "plugins" / "profile" / "*"))
    names = {e.name for e in _internals.trace_window_events(session)}
    kernels = {name.rsplit(":", 1)[1] for name in names if re.fullmatch(r"[^:\s]+:[A-Za-z_]\w*", name)}
    assert {"Square", "Sum"} <= kernels, sorted(names)[:60]
    assert _internals.trace_window_events(str(tmp_path)) == []  # no xplane.pb: nothing


def test_graph_collection_keeps_the_graph_a_function_runs_and_leaves_the_users_trace_alone():
    """Auto-clustering's coverage names its nodes from the step's graph as TensorFlow's executor runs it,
    kept by the eager context's graph collection while the step is built: every node, the cheap kernels
    the profiler never traces (Squeeze) included, with the dtype its op works on."""

    @tf.function
    def f(a):
        return tf.squeeze(tf.math.square(a), axis=1)

    assert _internals.start_graph_collection()
    f(tf.ones((3, 1)))
    graphs = _internals.stop_graph_collection()
    nodes = [node for graph in graphs for node in graph]
    assert {"Square", "Squeeze", "_Arg", "_Retval"} <= {op for _, op, _, _ in nodes}, nodes
    assert [(declustered, dtype) for _, op, declustered, dtype in nodes if op == "Squeeze"] == [(False, "float32")]
    assert _internals.stop_graph_collection() == []  # off: nothing more kept
    tf.summary.trace_on(graph=True)  # the user's own collection: theirs, untouched
    try:
        assert not _internals.start_graph_collection()
    finally:
        tf.summary.trace_off()


def test_probe_lines_stay_out_of_stderr_and_others_lines_stay_in(capfd):
    session = _internals.start_probe()
    print("user line during the probe", file=sys.stderr, flush=True)
    _internals.stop_probe(session)
    del session
    import gc

    gc.collect()
    err = capfd.readouterr().err
    assert "user line during the probe" in err
    assert "Profiler session" not in err, err


def test_strategy_facts_default_and_mirrored():
    facts = _internals.strategy_facts(_model(False))
    assert facts == {
        "name": "_DefaultDistributionStrategy",
        "default": True,
        "replicas": 1,
        "multi_worker": False,
        "chief": True,
    }
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        model = _model(False)
    facts = _internals.strategy_facts(model)
    assert facts["name"] == "MirroredStrategy" and facts["default"] is False and facts["chief"] is True


def test_layers_without_jit_and_raw_jit():
    from log_sources import NoJit

    model = keras.Sequential([keras.Input((4,)), NoJit(), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=False)
    assert _internals.layers_without_jit(model) == [model.layers[0].name]
    assert _internals.raw_model_jit(model) is False
    assert _internals.op_determinism_enabled() is False


def test_a_layer_made_of_layers_is_named_as_the_user_put_it_in_the_model():
    from xla_keras.backends.keras._internals import outermost_layers
    from xla_keras.jit.modes import refusing_words

    class Holder(keras.layers.Layer):
        """A layer of the user's that builds a StringLookup and says nothing of supports_jit itself."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.lookup = keras.layers.StringLookup(vocabulary=["a", "b"], name="held_lookup")

        def call(self, x):
            return self.lookup(x)

    text = keras.Input((1,), dtype="string")
    vectorize = keras.layers.TextVectorization(vocabulary=["a", "b"], output_sequence_length=4, name="vectorize")
    vectorized = vectorize(text)
    model = keras.Model(text, [vectorized, Holder(name="holder")(text)])
    everywhere = _internals.layers_without_jit(model)  # every layer that says so, nested ones too
    (inner,) = set(everywhere) - {"vectorize", "held_lookup"}  # the StringLookup TextVectorization built
    assert inner.startswith("string_lookup") and len(everywhere) == 3
    found = _internals.layers_refusing_jit(model)
    assert found == [("vectorize", ("vectorize", inner)), ("holder", ("held_lookup",))]
    assert refusing_words(found) == "layers with supports_jit=False: vectorize, holder (holding held_lookup)"
    outer = outermost_layers(model)
    assert outer[inner] == outer["vectorize"] == "vectorize" and outer["held_lookup"] == "holder"


def test_layer_calls_counts_a_layers_calls_in_the_model():
    from xla_keras.backends.keras._internals import layer_calls

    dense = keras.layers.Dense(2)
    a, b = keras.Input((2,)), keras.Input((2,))
    keras.Model([a, b], [dense(a), dense(b)])
    assert layer_calls(dense) == 2 and layer_calls(keras.layers.Dense(2)) == 0


def test_layer_names_include_the_layers_of_a_nested_model():
    from xla_keras.backends.keras._internals import layer_names

    inner = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, name="inner_dense")], name="block")
    outer = keras.Sequential([keras.Input((2,)), inner, keras.layers.Dense(1, name="head")], name="outer")
    assert {"block", "inner_dense", "head"} <= set(layer_names(outer))


def test_layer_classes_include_the_layers_of_a_nested_model_and_of_a_custom_layer():
    from xla_keras.backends.keras._internals import layer_classes

    class Block(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.norm = keras.layers.BatchNormalization()

        def call(self, x):
            return self.norm(x)

    inner = keras.Sequential([keras.Input((4, 4, 2)), keras.layers.Conv2D(2, 3, padding="same"), Block()])
    outer = keras.Sequential([keras.Input((4, 4, 2)), inner, keras.layers.GlobalAveragePooling2D()])
    assert {"Sequential", "Conv2D", "Block", "BatchNormalization", "GlobalAveragePooling2D"} <= set(
        layer_classes(outer)
    )


def test_versions_name_the_installed_packages():
    v = _internals.versions()
    assert v["tensorflow"].startswith("2.") and v["keras"].startswith("3.")


@pytest.mark.parametrize(
    "value, on",
    [("2", True), ("1", True), ("single-gpu(2)", True), ("fusible", True), ("0", False), ("-1", False), (None, False)],
)
def test_env_auto_jit_parsing(value, on):
    env = {"TF_XLA_FLAGS": f"--tf_xla_auto_jit={value}" if value is not None else ""}
    assert _internals.env_auto_jit_on(env) is on


def test_auto_jit_mode_override_round_trip(monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2")
    assert _internals.env_auto_jit_on() is True
    _internals.set_auto_jit_off(True)
    try:
        assert _internals.env_auto_jit_on() is False
    finally:
        _internals.set_auto_jit_off(False)
    assert _internals.env_auto_jit_on() is True
    assert _internals.autoclustering_setting() in (None, True, False)
    monkeypatch.delenv("TF_XLA_FLAGS")
    _internals.set_auto_jit_off(False)  # TF's own mode back to the default for the other tests


@pytest.mark.slow
def test_running_fit_and_the_callback_list_of_the_running_call_are_found_from_a_callback():
    seen = {}

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["fit"] = _internals.running_fit(self.model) is not None
            seen["fit list"] = _internals.running_callback_list(self.model)

        def on_test_begin(self, logs=None):
            seen.setdefault("test", []).append(
                (_internals.running_fit(self.model) is not None, _internals.running_callback_list(self.model))
            )

        def on_predict_begin(self, logs=None):
            seen["predict list"] = _internals.running_callback_list(self.model)

    model = _model(False)
    probe = Probe()
    x, y = np.ones((8, 4), np.float32), np.ones((8, 2), np.float32)
    model.fit(x, y, epochs=1, verbose=0, callbacks=[probe], validation_data=(x, y))
    assert seen["fit"] is True
    assert isinstance(seen["fit list"], keras.callbacks.CallbackList) and probe in seen["fit list"].callbacks
    assert seen["test"][0] == (True, seen["fit list"])  # validation shares fit's list
    model.evaluate(x, y, verbose=0, callbacks=[probe])
    in_fit, evaluate_list = seen["test"][1]
    assert in_fit is False and evaluate_list is not seen["fit list"] and probe in evaluate_list.callbacks
    model.predict(x, verbose=0, callbacks=[probe])
    assert probe in seen["predict list"].callbacks
    assert _internals.running_callback_list(model) is None and _internals.running_fit(model) is None


@pytest.mark.parametrize("patched", [(), ("build",), ("logs",), ("build", "logs")])
def test_keras_multi_worker_fit_faults_reads_each_function_that_runs(patched, tmp_path, monkeypatch):
    """tests/test_multiworker.py proves the detection agrees with what fit does on two workers.
    Here: the functions it reads are still where it looks, and each is read on its own, so a
    half-applied patch leaves the other fault reported. The patch is imported from a real file,
    so its source is read as well."""
    import importlib

    from keras.src.backend.tensorflow import trainer

    from xla_keras.backends.tensorflow.multiworker import WORKAROUND

    stock = {"build": trainer.TensorFlowTrainer._maybe_symbolic_build, "logs": trainer.reduce_per_replica}
    assert _internals.keras_multi_worker_fit_faults() == ["build", "logs"]  # Keras 3.15 as installed
    # Same values: only so that monkeypatch puts the stock functions back at teardown.
    monkeypatch.setattr(trainer.TensorFlowTrainer, "_maybe_symbolic_build", stock["build"])
    monkeypatch.setattr(trainer, "reduce_per_replica", stock["logs"])
    name = "mw_patch_" + ("_".join(patched) or "none")
    (tmp_path / f"{name}.py").write_text(WORKAROUND)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(name)  # applies both faults' fixes
    if "build" not in patched:
        trainer.TensorFlowTrainer._maybe_symbolic_build = stock["build"]
    if "logs" not in patched:
        trainer.reduce_per_replica = stock["logs"]
    assert _internals.keras_multi_worker_fit_faults() == [f for f in ("build", "logs") if f not in patched]


def test_restore_autoclustering_setting_round_trip():
    saved = _internals.autoclustering_setting()
    try:
        _internals.restore_autoclustering_setting(True)
        assert _internals.autoclustering_setting() is True and tf.config.optimizer.get_jit() == "autoclustering"
        _internals.restore_autoclustering_setting(None)
        assert _internals.autoclustering_setting() is None
    finally:
        _internals.restore_autoclustering_setting(saved)


def test_has_accelerator_matches_the_physical_devices():
    others = [d for d in tf.config.list_physical_devices() if d.device_type != "CPU"]
    assert _internals.has_accelerator() is bool(others)


def test_set_raw_model_jit_round_trip():
    model = _model("auto")
    _internals.set_raw_model_jit(model, None)
    assert _internals.raw_model_jit(model) is None
    _internals.set_raw_model_jit(model, True)
    assert _internals.raw_model_jit(model) is True and model.jit_compile is True


def test_build_for_step_makes_every_variable_the_first_step_would_before_it_runs():
    """Keras's Trainer._symbolic_build (precompile builds an unbuilt model before its zero-batch steps)."""
    model = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])  # no Input: built at the first step
    model.compile("adam", "mse")
    assert not model.built and not model.optimizer.built
    batch = (np.zeros((4, 5), "float32"), np.zeros((4, 1), "float32"))
    assert _internals.build_for_step(model, batch) is None
    assert model.built and model.optimizer.built and len(model.optimizer.variables) > 2  # the slots too
    assert [tuple(w.shape) for w in model.weights] == [(5, 3), (3,), (3, 1), (1,)]


def test_start_and_stop_trace_write_a_session_and_a_ctrl_c_in_start_frees_the_profiler(tmp_path, monkeypatch):
    _internals.start_trace(str(tmp_path / "a"))
    tf.constant(1.0) + 1.0
    _internals.stop_trace()
    sessions = list((tmp_path / "a" / "plugins" / "profile").iterdir())
    assert len(sessions) == 1 and any(f.name.endswith(".xplane.pb") for f in sessions[0].iterdir())

    real_start = tf.profiler.experimental.start

    def interrupted(logdir, options=None):
        real_start(logdir)  # the session started, then Ctrl-C lands
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.profiler.experimental, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _internals.start_trace(str(tmp_path / "b"))
    monkeypatch.undo()
    tf.profiler.experimental.start(str(tmp_path / "c"))  # free again
    tf.profiler.experimental.stop()


@pytest.mark.slow
def test_keras_profile_windows_reads_keras_tensorboard_in_the_running_fit(tmp_path):
    seen = {}

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["windows"] = _internals.keras_profile_windows(self.model)

    model = _model(False)
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path), profile_batch=(2, 3))
    x, y = np.ones((32, 4), np.float32), np.ones((32, 2), np.float32)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[board, Probe()])
    assert seen["windows"] == [(2, 3)]
    assert _internals.keras_profile_windows(model) == []  # no fit running


@pytest.mark.slow
def test_fit_validates_reads_the_running_fits_validation_data():
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.append(_internals.fit_validates(_internals.callback_model(self)))

    model = _model(False)
    x, y = np.ones((8, 4), np.float32), np.ones((8, 2), np.float32)
    model.fit(x, y, epochs=1, verbose=0, callbacks=[Probe()])
    model.fit(x, y, epochs=1, verbose=0, callbacks=[Probe()], validation_split=0.5)
    model.fit(x, y, epochs=1, verbose=0, callbacks=[Probe()], validation_data=(x, y))
    assert seen == [False, True, True] and _internals.fit_validates(model) is False


def test_auto_jit_is_keras_own_resolution():
    model = _model(False)
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
    assert _internals.auto_jit(model) is has_gpu  # Keras: XLA off on a CPU-only machine


def test_callback_model_reads_the_model_without_the_property():
    callback = keras.callbacks.Callback()
    model = _model(False)
    callback.set_model(model)
    assert _internals.callback_model(callback) is model
    with pytest.raises(_internals.InternalsMoved, match="Callback._model"):
        _internals.callback_model(object())
