"""The JAX backend's parts: JAX's compile events read in this process (JAX runs beside TensorFlow
here), the numpy storm fixes executed, report schema 4, and the private APIs in
backends/jax/_internals.py checked under KERAS_BACKEND=jax (they must fail loudly when moved)."""

import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from xla_keras.backends.jax import _internals
from xla_keras.backends.jax.jit import MODES, validate_jax_mode
from xla_keras.backends.jax.probe import RECORDER, JaxProbe, split
from xla_keras.core.signatures import Leaf
from xla_keras.core.types import CallPlan, Notes
from xla_keras.data import apply_fix
from xla_keras.jit.modes import JitState
from xla_keras.report.figures import fallback_cost
from xla_keras.report.model import SCHEMA_VERSION
from xla_keras.report.schema import parse_report
from xla_keras.session.storm_analysis import analyse
from xla_keras.storms.detection import ShapeHistory

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T, L, C = _internals.TRACE_EVENT, _internals.LOWER_EVENT, _internals.COMPILE_EVENT


# ------------------------------------------------------------------ reading the events


def test_split_sums_each_step_modules_tracing_lowering_and_compile_and_keeps_others_apart():
    events = [
        (T, 0.10, "train_step", False),
        (T, 0.01, "wrapped_fn", False),
        (L, 0.02, "jit(train_step)", False),
        (C, 0.30, "jit(train_step)", False),
        (L, 0.001, "jit(concatenate)", False),
        (C, 0.004, "jit(concatenate)", False),
        (T, 0.05, "train_step", False),
        (L, 0.01, "jit(train_step)", False),
        (C, 0.02, "jit(train_step)", True),
    ]
    modules, loads, other = split(events, "jit(train_step)", "train_step")
    assert modules == pytest.approx([0.42, 0.08]) and loads == [False, True]
    assert [e[2] for e in other] == ["jit(concatenate)", "jit(concatenate)"]
    # Not jitted (jit_compile=False): every compile is op level.
    modules, _, other = split(events, None, None)
    assert modules == [] and len([e for e in other if e[0] == C]) == 3


def train_step(x):
    return (x * 2.0).sum()


@pytest.fixture
def probe():
    jitted = jax.jit(train_step)
    watching = {"on": True}
    made = JaxProbe(Notes(), lambda phase: jitted, lambda: watching["on"])
    return made, jitted, watching


def _plan(new=True):
    return CallPlan("train", 1, 1, ((0, 1, ()),) if new else (), True)


def test_a_real_jax_compile_is_one_module_timed_and_a_known_shape_is_a_steady_step(probe):
    made, jitted, _ = probe
    handle = made.start(_plan(), JitState("keep", True))
    jitted(np.ones((3, 4), np.float32)).block_until_ready()
    seen = made.stop(handle, _plan(), JitState("keep", True))
    assert len(seen.modules) == 1 and 0 < seen.modules[0] < 30 and seen.source == "jax" and seen.cached is False
    handle = made.start(_plan(False), JitState("keep", True))
    jitted(np.ones((3, 4), np.float32)).block_until_ready()
    assert made.stop(handle, _plan(False), JitState("keep", True)) is None  # nothing compiled: steady


def test_compiles_outside_step_calls_are_totals_only_while_watching(probe):
    made, _, watching = probe
    jax.jit(lambda a: a + 1.0)(np.ones((5,), np.float32)).block_until_ready()
    assert made.other_compiles()["outside_steps"]["count"] == 1
    watching["on"] = False
    jax.jit(lambda a: a + 2.0)(np.ones((6,), np.float32)).block_until_ready()
    assert made.other_compiles()["outside_steps"]["count"] == 1


def test_a_compile_on_another_thread_is_not_the_step_calls(probe):
    made, _, _ = probe
    handle = made.start(_plan(False), JitState("keep", True))
    thread = threading.Thread(target=lambda: jax.jit(lambda a: a * 3.0)(np.ones((7,), np.float32)))
    thread.start()
    thread.join()
    assert made.stop(handle, _plan(False), JitState("keep", True)) is None
    assert made.other_compiles()["outside_steps"]["count"] == 1


def test_nested_calls_of_chained_monitors_both_see_the_compile():
    RECORDER.register()  # as a probe does when made (this test may be the process's first)
    outer, inner = RECORDER.begin(), RECORDER.begin()
    jax.jit(lambda a: a - 1.0)(np.ones((9,), np.float32)).block_until_ready()
    RECORDER.end(inner)
    RECORDER.end(outer)
    assert [e[0] for e in outer if e[0] == C] == [C] and outer == inner


# ------------------------------------------------------------------ modes, reports


def test_jit_modes_refuse_autoclustering_naming_the_choices():
    assert MODES == ("keep", "on", "off", "fastest")
    with pytest.raises(ValueError, match="TensorFlow feature.*'keep', 'on', 'off' or 'fastest'"):
        validate_jax_mode("autoclustering")
    with pytest.raises(ValueError, match="'keep', 'on', 'off', 'fastest'"):
        validate_jax_mode("fast")
    assert validate_jax_mode("fastest") == "fastest"


def test_schema_4_adds_backend_and_other_compilations_and_reads_older_reports():
    assert SCHEMA_VERSION >= 4
    old = parse_report({"schema_version": 3, "jit_mode": "on", "compilations": []})
    assert old.report.backend == "tensorflow" and old.report.other_compilations == {}
    new = parse_report(
        {
            "schema_version": 4,
            "jit_mode": "on",
            "backend": "jax",
            "compilations": [],
            "other_compilations": {"in_steps": {"count": 3, "seconds": 0.5}},
        }
    )
    assert new.report.backend == "jax"
    assert "3 executable(s), 500 ms, inside the step calls" in str(new.report)


@pytest.mark.parametrize(
    "before, after, steps, words",
    [
        (
            0.001,
            0.02,
            (40, 30),
            "train steady step 20 ms without XLA (30 steps) vs 1 ms with XLA before the switch (40 steps): "
            "20.0x as long without XLA",
        ),
        # One steady XLA step in the middle of a storm is no baseline (it once read 0.5x for a faster XLA).
        (0.001, 0.02, (1, 30), "too few steady steps to compare (1 with XLA before the switch, 30 without; 20 needed"),
        (0.001, 0.02, (40, 19), "too few steady steps to compare (40 with XLA before the switch, 19 without"),
        (None, 0.02, (0, 30), "no steady XLA step before the switch"),
        (0.001, None, (40, 0), None),
        # Steps ran since the switch and none was a steady sample: said, with the reason, not left out.
        (0.001, None, (40, 0, 7), "train: 7 steps without XLA, no steady step among them (each step or interval"),
    ],
)
def test_the_fallback_states_what_running_without_xla_cost_on_enough_steps(before, after, steps, words):
    text = fallback_cost(
        {
            "xla_steady_step_seconds": {"train": before},
            "steady_step_seconds_after": {"train": after},
            "xla_steady_steps": {"train": steps[0]},
            "steady_steps_after": {"train": steps[1]},
            "steps_after": {"train": steps[2] if len(steps) > 2 else 0},
        }
    )
    assert (text is None) if words is None else (words in text), text
    if text and "too few" in text:
        assert not re.search(r"\d\.\dx", text), text  # no ratio from too few steps


# ------------------------------------------------------------------ fixes that need no TensorFlow


def _history(shapes):
    history = ShapeHistory()
    for shape in shapes:
        history.observe((Leaf("x", "int32", shape), Leaf("y", "float32", (shape[0],))))
    history.end_of_run()
    return history


def test_the_padding_fix_for_arrays_applies_without_tensorflow_and_pads_to_the_advised_lengths():
    lengths = [5, 9, 13, 17, 33, 41, 50, 62, 70]
    _, _, fix = analyse("train", _history([(8, n) for n in lengths]), 4, data="arrays")
    assert "tf." not in fix["code"] and _applied_to(fix["code"]) == "batches"
    # and one longer than any seen: doubled, never an error
    batches = [(np.ones((8, n), np.int32), np.zeros((8,), np.float32)) for n in lengths + [200]]
    fixed = apply_fix(batches, fix)
    import keras

    assert isinstance(fixed, keras.utils.PyDataset) and len(fixed) == len(batches)
    out_lengths = set()
    for (x, y), n in zip((fixed[i] for i in range(len(fixed))), lengths + [200]):
        assert x.shape[0] == 8 and x.shape[1] >= n and (x[:, n:] == 0).all() and y.shape == (8,)
        out_lengths.add(x.shape[1])
    assert set(fix["lengths"]) <= out_lengths and len(out_lengths) <= len(fix["lengths"]) + 1


def test_the_batch_size_fix_for_arrays_rebatches_a_generator_without_tensorflow():
    _, _, fix = analyse("train", _history([(n, 10) for n in range(16, 24)]), 4, data="arrays")
    assert fix["kind"] == "fixed_batch_size" and "tf." not in fix["code"]
    batches = [(np.full((n, 10), n), np.arange(n)) for n in range(16, 24)]
    fixed = apply_fix(iter(batches), fix)
    out = [fixed[i] for i in range(len(fixed))]
    assert out and all(x.shape == (fix["size"], 10) and y.shape == (fix["size"],) for x, y in out)
    assert sum(len(y) for _, y in out) == (sum(range(16, 24)) // fix["size"]) * fix["size"]


def test_tf_data_keeps_the_tf_data_fix():
    _, _, fix = analyse("train", _history([(8, n) for n in (5, 9, 13, 17, 33)]), 4)
    assert _applied_to(fix["code"]) == "ds"


def _applied_to(code):
    """The data a fix's code applies ``xla_keras.data.apply_fix`` to (the name it assigns back)."""
    import ast

    assignment = ast.parse(code).body[1]
    assert ast.unparse(assignment.value.func) == "xla_keras.data.apply_fix"
    assert ast.unparse(assignment.targets[0]) == ast.unparse(assignment.value.args[0])
    return ast.unparse(assignment.targets[0])


# ------------------------------------------------------------------ private APIs, under KERAS_BACKEND=jax

_INTERNALS_CHECK = r"""
import json, numpy as np, keras
from jax._src import dispatch
from xla_keras.backends.jax import _internals
from xla_keras.backends.jax.jit import persistent_cache
out = {}
for jit in (True, False):
    for spe in (1, 3):
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        m.compile("sgd", "mse", jit_compile=jit, steps_per_execution=spe)
        m.make_train_function(); m.make_test_function(); m.make_predict_function()
        for phase in ("train", "test", "predict"):
            fn = _internals.find_step_function(getattr(m, phase + "_function"))
            out[f"{jit}-{spe}-{phase}"] = [_internals.is_jitted(fn), _internals.compiled_name(fn),
                                           getattr(fn, "__name__", None)]
out["events"] = [dispatch.JAXPR_TRACE_EVENT == _internals.TRACE_EVENT,
                 dispatch.JAXPR_TO_MLIR_MODULE_EVENT == _internals.LOWER_EVENT,
                 dispatch.BACKEND_COMPILE_EVENT == _internals.COMPILE_EVENT]
out["cache"] = sorted(_internals.cache_config())
from jax._src import compilation_cache
out["reset_cache"] = callable(getattr(compilation_cache, "reset_cache", None))
out["raw_jit"] = _internals.raw_model_jit(m)
class Spy(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        out["callback_list"] = type(_internals.running_callback_list(self.model)).__name__
        out["user_data"] = type(_internals.user_data(self.model)).__name__
        out["distribution"] = _internals.distribution_facts()
m.fit(np.ones((6, 4), "float32"), np.ones((6, 1), "float32"), verbose=0, callbacks=[Spy()])
# The cost card lowers the step with the state Keras's trainer passes it (_get_jax_state, per phase).
m2 = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
m2.compile("adam", "mse", metrics=["mae"], jit_compile=True)
m2.fit(np.ones((6, 4), "float32"), np.ones((6, 1), "float32"), verbose=0)
parts = {"train": dict(optimizer_variables=True, metrics_variables=True), "test": dict(metrics_variables=True),
         "predict": {}}
shapes = lambda state: [[list(a.shape) for a in part] for part in state]
out["state"] = {p: shapes(_internals.step_state_specs(m2, p)) == shapes(m2._get_jax_state(
    trainable_variables=True, non_trainable_variables=True, **kw)) for p, kw in parts.items()}
out["state_parts"] = [len(_internals.step_state_specs(m2, p)) for p in parts]
out["device_kind"] = _internals.device_kind()
import jax
fed = jax.device_put(np.ones((2, 4), "float32"))  # how Keras feeds accelerators: uncommitted
pinned = jax.device_put(np.ones((2, 4), "float32"), jax.devices()[0])  # committed
out["batch_specs"] = [s.sharding is None for s in _internals.batch_specs((fed, pinned))]
print("CHECK " + json.dumps(out))
"""


@pytest.mark.slow
def test_the_private_apis_the_jax_backend_uses_are_where_it_expects():
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _INTERNALS_CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("CHECK "))[6:])
    for spe in (1, 3):
        for phase in ("train", "test", "predict"):
            assert out[f"True-{spe}-{phase}"] == [True, f"jit({phase}_step)", f"{phase}_step"], (spe, phase)
            jitted, name, fn_name = out[f"False-{spe}-{phase}"]
            assert not jitted and name is None and fn_name == f"{phase}_step", (spe, phase)
    assert out["events"] == [True, True, True]
    assert out["cache"] == ["dir", "enabled", "min_compile_secs", "min_entry_bytes"] and out["reset_cache"]
    assert out["raw_jit"] is False
    assert out["callback_list"] == "CallbackList" and out["user_data"] == "ndarray"
    assert out["distribution"]["default"] is True
    assert out["state"] == {"train": True, "test": True, "predict": True} and out["state_parts"] == [4, 3, 2]
    assert out["device_kind"] == "cpu"
    assert out["batch_specs"] == [True, False]  # a spec with a sharding counts as committed: JAX's cache would miss


def test_compiles_outside_the_steps_go_to_the_current_models_report_only():
    """One monitor, two models: each report's probe counts outside compiles only while its model
    is the one watched (the reviewer's repro: model B's metric compiles landed in A's report)."""
    import types

    from xla_keras.backends.jax import JaxBackend

    backend = JaxBackend("keep")
    monitor = types.SimpleNamespace(in_call=True, probe=None)
    backend._owner = lambda: monitor

    class Model:  # weakly referenced by the probe
        pass

    models = [Model(), Model()]
    first, second = (backend.probe(Notes(), model, False) for model in models)
    monitor.probe = second
    jax.jit(lambda a: a * 5.0)(np.ones((11,), np.float32)).block_until_ready()
    assert first.other_compiles() == {} and second.other_compiles()["outside_steps"]["count"] == 1
