"""What both Keras backends do the same way: the step wrappers on ``model.<phase>_function``, the JIT
controller's delegation, traces and Keras-level facts. No framework import.

A backend subclasses ``KerasBackend`` and supplies its ``_internals`` module (``start_trace``,
``stop_trace``, ``keras_profile_windows``, ``running_callback_list``, ``running_fit``, ``versions``,
``find_step_function``), its JIT controller (``apply``, ``read_back``, ``fall_back``, ``restore``,
``refusal``, ``mode``), its wrapper chain, its compile probe, and the facts that differ
(distribution, what ends an epoch's data, the persistent cache).
"""

from __future__ import annotations

import weakref
from dataclasses import replace
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

from xla_keras.backends.base import CompileProbe, Installed, StepObserver
from xla_keras.backends.chain import FUNCTION_ATTR, MAKE_FUNCTION, unwrap
from xla_keras.backends.keras._internals import layer_classes, layer_names, outermost_layers
from xla_keras.backends.keras.pipeline_move import PipelineMove, layers_on_inputs, pipeline_move
from xla_keras.core.signatures import InputSignature
from xla_keras.jit.modes import JitState
from xla_keras.jit.unsupported import Unsupported, autoclustering_fix
from xla_keras.jit.value_keys import ValueKey, static_words

# The report's jit_reason is read where no monitor is (a saved log dir): it points at the report's own field.
THE_REPORTS = "the report's jit_fix"
# jit='keep' on a model Keras refuses jit_compile=True for, where no move keeps the model's meaning.
AROUND = (
    "jit='autoclustering' compiles the layers around them (on CPU after "
    "xla_keras.configure(cpu_autoclustering=True), right after import)"
)


def is_keras3_model(model: Any) -> bool:
    """A Keras 3 model (not tf_keras / TF_USE_LEGACY_KERAS=1 / Keras 2)."""
    import keras

    return isinstance(model, keras.Model)


class KerasBackend:
    """The shared half of a backend: one per monitor, holding its JIT controller and wrappers."""

    name = ""
    jit_modes: ClassVar[Tuple[str, ...]] = ()
    ends_calls_in_wrapper = False
    probes_every_call = False  # the probe runs on the calls the session picks (it costs a profiler session)
    multi_worker_note: Optional[str] = None
    _internals: Any = None  # the backend's _internals module
    _wrapper_chain: Any = None  # the backend's WrapperChain subclass
    # jit='fastest': the other mode's first call against the fit's first call, by direction (to XLA
    # on: True), measured on each backend; the trial's one-time cost is estimated with it.
    trial_first_call: Dict[bool, float] = {True: 1.0, False: 1.0}
    # The backend's reader of a step's error: an op XLA cannot compile (``jit.unsupported_op``), or None.
    _unsupported_op: Any = None

    def __init__(self, jit: Any):
        self.jit = jit
        self._wrappers: Any = None
        self._owner: Any = None
        self._kept: Dict[str, Dict[bool, Any]] = {}  # jit='fastest': phase -> {XLA on: Keras's function}
        self._move: Optional[PipelineMove] = None  # the refusing layers' move into the input pipeline
        # An op XLA cannot compile switched XLA off for this fit: (the fix's code, the report's record).
        self._after_unsupported: Optional[Tuple[Optional[str], Dict[str, Any]]] = None

    def prepare(self, owner: StepObserver) -> None:
        """At monitor construction: the owner of the wrappers (the monitor)."""
        self._owner = weakref.ref(owner)
        self._wrappers = self._wrapper_chain(owner)

    def versions(self) -> dict:
        return self._internals.versions()

    # ------------------------------------------------------------ step functions

    def install(self, model: Any, phase: str, observer: StepObserver, rebuild: bool = False) -> Installed:
        before, token, rebuilt, xla_now = self._wrappers.install(
            model, phase, observer, rebuild=rebuild, enforce_model_jit=self.jit.mode != "keep"
        )
        return Installed(before, token, rebuilt, xla_now)

    def wrapper(self, phase: str) -> Any:
        return self._wrappers.current.get(phase) if self._wrappers else None

    def wrapped_phases(self) -> List[str]:
        return list(self._wrappers.current) if self._wrappers else []

    def remove(self, model: Any, phase: str) -> None:
        self._wrappers.remove(model, phase)

    def remove_all(self, model: Any) -> None:
        if self._wrappers is not None and model is not None:
            self._wrappers.remove_all(model)

    def rebuild_functions(self, model: Any, phases: Sequence[str]) -> None:
        for phase in phases:
            if getattr(model, FUNCTION_ATTR[phase], None) is not None:
                getattr(model, MAKE_FUNCTION[phase])(force=True)

    def drop_function(self, model: Any, phase: str) -> None:
        setattr(model, FUNCTION_ATTR[phase], None)

    def per_device(self, batch: Any, signature: InputSignature) -> Optional[str]:
        """Each input's per-device shape in words, or None (no backend-level sharding to describe)."""
        return None

    def compiles_outside_steps(self, probe: CompileProbe) -> Dict[str, dict]:
        """Compiles seen outside the step functions: none that this backend's probe can see."""
        return {}

    # ------------------------------------------------------------ jit='fastest': both functions kept

    def set_fastest_start(self, on: Optional[bool]) -> None:
        """jit='fastest': the mode the next ``apply_jit`` starts the model in (a kept decision), or None."""
        self.jit.start_on = on

    def switch_jit(self, model: Any, phase: str, on: bool, observer: StepObserver) -> Installed:
        """Run ``phase`` with XLA ``on`` or off, keeping both of Keras's functions: a switch back
        reuses the function built before, with every executable XLA compiled for it (a rebuild would
        start an empty cache and compile again). The first switch to a mode builds its function
        the way the storm fallback's mid-fit rebuild does. The model's jit_compile follows."""
        kept = self._kept.setdefault(phase, {})
        current = unwrap(getattr(model, FUNCTION_ATTR[phase], None))
        if current is not None and not model.run_eagerly:
            kept[self._wrappers.jit_flag(current)] = current
        self.jit.set_model(model, on)
        target = kept.get(on)
        before, token, rebuilt, xla_now = self._wrappers.install(
            model, phase, observer, rebuild=target is None and current is not None, enforce_model_jit=True, base=target
        )
        if target is None and not model.run_eagerly:
            kept[on] = unwrap(getattr(model, FUNCTION_ATTR[phase]))
        return Installed(before, token, rebuilt, xla_now)

    def settle_kept(self, model: Any, on: bool) -> None:
        """The fit ended (wrappers removed): each phase keeps the function of the mode kept, the other
        is released; a function of the other mode with none kept for this one is dropped (Keras
        rebuilds it lazily from the model's jit_compile)."""
        self.jit.set_model(model, on)
        for phase, kept in self._kept.items():
            current = unwrap(getattr(model, FUNCTION_ATTR[phase], None))
            if kept.get(on) is not None:
                setattr(model, FUNCTION_ATTR[phase], kept[on])
            elif current is not None and self._wrappers.jit_flag(current) != on:
                self.drop_function(model, phase)
        for phase in ("test", "predict"):
            current = getattr(model, FUNCTION_ATTR[phase], None)
            if phase not in self._kept and current is not None and self._wrappers.jit_flag(unwrap(current)) != on:
                self.drop_function(model, phase)
        self._kept.clear()

    def layer_names(self, model: Any) -> List[str]:
        """Every layer's name, nested ones included (what a node's name scopes name)."""
        return layer_names(model)

    def layer_kinds(self, model: Any) -> Tuple[str, ...]:
        """The class names of the model's layers, nested ones included, each once (in model order)."""
        return tuple(dict.fromkeys(layer_classes(model)))

    def trace_coverage(self, session_dir: str, layer_names: Sequence[str], steps: int) -> Optional[dict]:
        """Auto-clustering's coverage from a saved trace window: none without auto-clustering (JAX)."""
        return None

    def value_keys(self, model: Any, phase: str, signature: InputSignature) -> Optional[Tuple[ValueKey, ...]]:
        """None: no input of the step is a compile-time constant XLA keys on by value (JAX traces the step
        with abstract values: a value-dependent shape fails the trace instead)."""
        return None

    def callback_model(self, callback: Any) -> Any:
        return self._internals.callback_model(callback)

    def auto_jit(self, model: Any) -> bool:
        """Keras's own jit_compile='auto' for this model here."""
        return self._internals.auto_jit(model)

    def fit_validates(self, model: Any) -> bool:
        return self._internals.fit_validates(model)

    def step_function(self, model: Any, phase: str) -> Any:
        """The function that runs ``phase``'s steps (under every wrapper), or None."""
        if model is None:
            return None
        return self._internals.find_step_function(getattr(model, FUNCTION_ATTR[phase], None))

    # ------------------------------------------------------------ jit

    def apply_jit(self, model: Any) -> bool:
        self._after_unsupported = None
        changed = self.jit.apply(model)
        # Only a refusal the layers caused has their move (not one under a strategy, or eager); jit='keep'
        # too: Keras refuses jit_compile=True for such a model whatever the mode, and jit='on' cannot help.
        self._move = pipeline_move(model, self.jit.refusing_layers) if self.jit.refusing_layers else None
        return changed

    def read_back(self, model: Any, phase: str) -> JitState:
        state = self.jit.read_back(model, self.step_function(model, phase))
        refused = self.jit.refusal or self.jit.keep_refusal
        if self.jit.refusing_layers and refused and state.reason.startswith(refused) and not state.active:
            if self._move is not None:
                state = replace(state, reason=f"{state.reason}. {self._move.words(THE_REPORTS)}", fix=self._move.code)
            elif self.jit.keep_refusal and "autoclustering" in self.jit_modes:
                state = replace(state, reason=f"{state.reason}. {AROUND}")
        if self._after_unsupported is not None and self.jit.fallback_reason:
            fix, record = self._after_unsupported
            state = replace(state, fix=fix, unsupported=record)
        return state

    def fall_back(self, model: Any, reason: str, unsupported: Optional[Tuple[Optional[str], dict]] = None) -> None:
        """XLA off for the rest of this fit (a storm, or ``unsupported``: an op XLA cannot compile, with the
        fix's code and the report's record)."""
        self.jit.fall_back(model, reason)
        self._after_unsupported = unsupported

    def unsupported_op(self, error: BaseException, model: Any) -> Optional[Unsupported]:
        """An op XLA cannot compile, read from the error a step raised; None: the error is something else."""
        found = self._unsupported_op(error, model) if self._unsupported_op is not None else None
        if found is None or not found.input_dtype:
            return found
        # The step's own input XLA takes no tensor of: the layers that take it are where the op belongs.
        try:
            layers = layers_on_inputs(model, found.input_dtype)
        except Exception:  # noqa: BLE001 - words only: the fallback does not need them
            return found
        if len(layers) != 1:
            return found
        return replace(found, ops=tuple(replace(op, layer=op.layer or layers[0]) for op in found.ops))

    def unsupported_fix(self, model: Any, found: Unsupported) -> Tuple[Optional[str], str]:
        """The fix for ``found``, as code (or None) and in words (not where the code is: the caller says). TensorFlow:
        its layers moved into the input pipeline where each is a preprocessing layer of the model's inputs (a layer the
        user put in the model, with the layers it holds), else auto-clustering, which compiles the rest of the step.
        JAX (no auto-clustering; a layer whose shapes follow the data has no tf.data map to move to): the fix for
        the error JAX raised, in words."""
        if "autoclustering" not in self.jit_modes:
            return None, found.fix_words or "give that layer static shapes, or keep jit_compile=False for it"
        if found.kind == "compile" and found.input:  # the likely cause: a value XLA needs as a constant
            return None, static_words(found.ops[0].op, found.input)
        if found.kind == "compile":
            return None, (
                "XLA failed to compile this step (its words: monitor.report.unsupported_ops): keep the model "
                "without XLA (jit='off'), or change the layer the error points at"
            )
        layers: Sequence[str] = found.layers
        if found.input_dtype:  # the step's own input: the layers that take it move with it
            layers = layers_on_inputs(model, found.input_dtype)
        else:  # a layer the user put in the model moves whole, with the layers it holds
            outer = outermost_layers(model)
            layers = list(dict.fromkeys(outer.get(name, name) for name in layers))
        whole = bool(layers) and (bool(found.input_dtype) or all(op.layer for op in found.ops))
        cause = f"XLA cannot compile {found.what()} ({found.device}): {found.why}"
        move = pipeline_move(model, layers, cause) if whole else None
        if move is not None:
            moved = ", ".join(move.layers)
            return move.code, f"apply {moved} in the input pipeline (dataset.map)"
        if found.kind == "constant":
            return None, static_words(found.ops[0].op, found.input or "input")
        return autoclustering_fix(found), "jit='autoclustering' compiles the rest of the step"

    def restore_jit(self, model: Any = None) -> bool:
        return self.jit.restore(model)

    @property
    def jit_refusal(self) -> Optional[str]:
        """Why the mode could not be applied, and the move that lifts a layer's refusal where there is one."""
        refusal = self.jit.refusal
        return f"{refusal}. {self._move.words()}" if refusal and self._move is not None else refusal

    # ------------------------------------------------------------ traces, Keras facts

    def start_trace(self, directory: str) -> None:
        self._internals.start_trace(directory)

    def stop_trace(self) -> Optional[Callable[[], None]]:
        """Stop the trace window; the save, when it can wait (JAX), or None (saved)."""
        return self._internals.stop_trace()

    def keras_profile_windows(self, model: Any) -> List[Tuple[int, int]]:
        return self._internals.keras_profile_windows(model)

    def train_step(self, model: Any) -> int:
        """The optimizer's step count, read once per fit (before the first step: nothing in flight)."""
        optimizer = getattr(model, "optimizer", None)
        return int(optimizer.iterations.numpy()) if optimizer is not None else 0

    def running_callback_list(self, model: Any) -> Any:
        return self._internals.running_callback_list(model)

    def running_fit(self, model: Any) -> Any:
        return self._internals.running_fit(model)

    def batch_begin_hooks_in_use(self, callback_list: Any) -> Tuple[str, ...]:
        """The batch-begin hooks some callback of ``callback_list`` (a monitor aside) overrides; Keras's
        ``on_batch_begin`` is the train hook's alias."""
        import keras

        base = keras.callbacks.Callback
        aliases = {"on_train_batch_begin": ("on_train_batch_begin", "on_batch_begin")}
        used = []
        for hook in ("on_train_batch_begin", "on_test_batch_begin", "on_predict_batch_begin"):
            for callback in getattr(callback_list, "callbacks", None) or ():
                if getattr(callback, "_xla_keras_monitor", False):
                    continue
                if any(getattr(type(callback), n, None) is not getattr(base, n) for n in aliases.get(hook, (hook,))):
                    used.append(hook)
                    break
        return tuple(used)
