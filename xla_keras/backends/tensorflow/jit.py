"""JIT modes on Keras's TensorFlow backend: apply, read back what really runs, restore after a fit.

The monitor's ``jit=`` choice is applied to the model the way
``model.compile(jit_compile=...)`` would be: the model keeps it after the fit
(so a second fit does not rebuild and recompile). Global TensorFlow state the
monitor changes (the auto-clustering switch, the CPU global-jit flag) is put
back when the fit ends.
"""

from __future__ import annotations

import os
import re
from typing import Any, List, Literal, Optional

from xla_keras.backends.keras._internals import layer_names
from xla_keras.backends.tensorflow import _internals
from xla_keras.backends.tensorflow.flags import (
    CPU_GLOBAL_JIT,
    PERSISTENT_CACHE,
    PERSISTENT_CACHE_READ_ONLY,
    XlaFlags,
    env_auto_jit_on,
    env_flag_set,
    has_accelerator,
    set_autoclustering,
)
from xla_keras.core.messages import warn
from xla_keras.core.types import assert_never
from xla_keras.errors import XlaKerasWarning
from xla_keras.jit.modes import (
    MODES,
    JitMode,
    JitState,
    Refusing,
    SavedModelJit,
    eager_refusal,
    fallback_or_eager,
    fastest_as_keep,
    fastest_blocked,
    keep_refused,
    refusing_layers,
    refusing_words,
    validate_mode,
)
from xla_keras.jit.unsupported import Unsupported, UnsupportedOp, layer_named, quote, quoted_root, user_line

__all__ = [
    "configure",
    "persistent_cache",
    "cpu_autoclustering_effective",
    "JitController",
    "MODES",
    "FIX_CPU_AUTOCLUSTERING",
    "XlaKerasWarning",
    "unsupported_op",
]
FIX_CPU_AUTOCLUSTERING = (
    "call xla_keras.configure(cpu_autoclustering=True) right after import, before any "
    "model is built, or start Python with TF_XLA_FLAGS=--tf_xla_cpu_global_jit"
)

# What configure() did, so the monitor can tell an early opt-in from a late one.
_opt_in: dict = {
    "cpu_autoclustering": None,  # None: not asked; True: in time; False: too late
    "cache_dir": None,
}  # (absolute dir, in time) once asked


def configure(cpu_autoclustering: bool = False, cache_dir: Optional[str] = None) -> dict:
    """The early opt-in: call right after ``import xla_keras``, before any model is built.

    TensorFlow reads its CPU global-jit flag when it creates its devices (its
    first op: building a model is enough). Set later, auto-clustering on CPU
    silently compiles nothing. This call sets the flag while it can still
    take effect, and says plainly when it is too late.

    Args:
        cpu_autoclustering: let ``tf.config.optimizer.set_jit("autoclustering")``
            (or ``XlaMonitor(jit="autoclustering")``) compile clusters on CPU.
        cache_dir: turn on TensorFlow's persistent XLA compilation cache in
            this directory (a later process loads executables instead of
            compiling them again).

    Returns:
        ``{"cpu_autoclustering": bool, "cache_dir": bool}`` for what was
        asked: whether it will take effect.

    Example:
        >>> import xla_keras
        >>> xla_keras.configure(cpu_autoclustering=True)  # doctest: +SKIP
        {'cpu_autoclustering': True}
    """
    if not isinstance(cpu_autoclustering, bool):
        raise TypeError(f"cpu_autoclustering must be True or False; got {cpu_autoclustering!r}")
    result = {}
    if cache_dir is not None:
        if not isinstance(cache_dir, (str, os.PathLike)) or not str(cache_dir):
            raise ValueError(f"cache_dir must be a directory path (str); got {cache_dir!r}")
        path = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
        os.makedirs(path, exist_ok=True)
        in_time = not _internals.devices_initialized()
        if in_time:
            os.environ["TF_XLA_FLAGS"] = str(XlaFlags.from_env().with_value(PERSISTENT_CACHE, path))
        else:
            warn(
                "xla_keras.configure(cache_dir=...) came too late: TensorFlow has already created its devices "
                "and read TF_XLA_FLAGS, so no persistent compilation cache is used in this process. Fix: call "
                "it right after import, before any model is built, or start Python with "
                f"TF_XLA_FLAGS=--tf_xla_persistent_cache_directory={path}.",
            )
        _opt_in["cache_dir"] = (path, in_time)
        result["cache_dir"] = in_time
    if cpu_autoclustering:
        in_time = not _internals.devices_initialized()
        _internals.set_cpu_global_jit(True)
        _opt_in["cpu_autoclustering"] = in_time
        if not in_time:
            warn(
                "xla_keras.configure(cpu_autoclustering=True) came too late: TensorFlow has already "
                "created its devices, so auto-clustering on CPU will compile nothing in this process. "
                f"Fix: {FIX_CPU_AUTOCLUSTERING}.",
            )
        result["cpu_autoclustering"] = in_time
    return result


def persistent_cache() -> Optional[dict]:
    """``{"dir", "effective", "read_only"}`` of TensorFlow's persistent compilation cache,
    or None when none is configured. ``effective`` is False when
    configure(cache_dir=...) came after TensorFlow read its flags."""
    flags = XlaFlags.from_env()
    value = flags.value(PERSISTENT_CACHE)
    directory = os.path.abspath(value) if value else None
    read_only = flags.enabled(PERSISTENT_CACHE_READ_ONLY)
    asked = _opt_in["cache_dir"]
    if asked is not None and not asked[1] and asked[0] != directory:
        return {"dir": asked[0], "effective": False, "read_only": read_only}
    if directory is None:
        return None
    return {"dir": directory, "effective": True, "read_only": read_only}


def cpu_autoclustering_effective() -> Optional[bool]:
    """Whether CPU clusters can compile in this process: True, False, or None
    when TensorFlow has not created its devices yet (it still can be set)."""
    if env_flag_set(CPU_GLOBAL_JIT):
        return True
    if _opt_in["cpu_autoclustering"] is not None:
        return _opt_in["cpu_autoclustering"]
    if not _internals.devices_initialized():
        return None
    return False


class JitController:
    """Applies a jit mode to a model and restores the global flags it changed."""

    _UNSET = object()

    def __init__(self, mode: str):
        self.mode: JitMode = validate_mode(mode)
        self._saved_autoclustering: Any = self._UNSET
        self._model_jit = SavedModelJit(_internals.raw_model_jit, _internals.set_raw_model_jit)
        self.refusal: Optional[str] = None
        self.refusing_layers: List[str] = []  # the supports_jit=False layers, when they are the refusal's cause
        self.keep_refusal: Optional[str] = None  # jit='keep' on a model Keras refuses jit_compile=True for
        self.fallback_reason: Optional[str] = None
        self._overrode_env_auto_jit = False
        self.start_on: Optional[bool] = None  # jit='fastest': the kept decision's mode; None: Keras's auto

    def prepare_early(self) -> None:
        """Called at monitor construction: if TensorFlow has not created its
        devices yet, the CPU flag can still be set in time. It stays set: it
        only matters when devices are created, which happens once."""
        if self.mode == "autoclustering" and cpu_autoclustering_effective() is None:
            _internals.set_cpu_global_jit(True)
            _opt_in["cpu_autoclustering"] = True

    def _set_autoclustering(self, enabled: bool) -> bool:
        """Switch TF's auto-clustering; True if that changed anything.

        Off must also override TF_XLA_FLAGS=--tf_xla_auto_jit, which (measured)
        wins over tf.config.optimizer.set_jit(False)."""
        changed = False
        if not enabled and env_auto_jit_on():
            _internals.set_auto_jit_off(True)
            self._overrode_env_auto_jit = True
            changed = True
        if _internals.autoclustering_enabled() != enabled:
            if self._saved_autoclustering is self._UNSET:
                self._saved_autoclustering = _internals.autoclustering_setting()
            set_autoclustering(enabled)
            changed = True
        return changed

    def apply(self, model: Any) -> bool:
        """Apply the mode to the model and the global switches.

        Returns True when the auto-clustering switch changed, so every step
        function must be rebuilt; a function whose jit flag differs from the
        model's is rebuilt by the caller anyway."""
        self.refusal = None
        self.refusing_layers = []
        self.keep_refusal = None
        self.fallback_reason = None
        mode = self.mode
        match mode:
            case "keep":
                return self._apply_keep(model)
            case "fastest":
                return not self._runs_eagerly(model) and self._apply_fastest(model, _internals.strategy_facts(model))
            case "on" | "off" | "autoclustering":
                return not self._runs_eagerly(model) and self._apply_xla(model, mode, _internals.strategy_facts(model))
            case _:
                assert_never(mode)

    def _apply_keep(self, model: Any) -> bool:
        """jit='keep': the model's own jit_compile runs; said when Keras refuses it for the model."""
        layers = [] if model.run_eagerly else self._refusing(model)
        if layers:  # Keras resolved the model's jit_compile to False for them, whatever it was given
            self.refusing_layers = [name for name, _ in layers]
            self.keep_refusal = keep_refused(layers)
        return False

    def _runs_eagerly(self, model: Any) -> bool:
        """A model that runs eagerly compiles nothing whatever the mode: the refusal says so."""
        if model.run_eagerly:
            self.refusal = eager_refusal(self.mode)
        return bool(model.run_eagerly)

    def _apply_xla(self, model: Any, mode: Literal["on", "off", "autoclustering"], facts: dict) -> bool:
        """jit='on' / 'off' / 'autoclustering': the model's jit_compile, and auto-clustering around the step
        function only for 'autoclustering'."""
        if mode == "on" and (facts["replicas"] > 1 or facts["multi_worker"]):
            self.refusal = (
                f"jit='on' refused under {facts['name']} with {facts['replicas']} replicas: "
                "jit_compile=True crashes fit there (XLA cannot reach variables on another "
                "replica's device; CPU collectives are not implemented under XLA) while the flag "
                "still reads True. Use jit='autoclustering' instead"
            )
            return False
        if not self._model_jit.apply(model, mode == "on"):
            blockers = self._refusing(model)
            self.refusing_layers = [name for name, _ in blockers]
            why = (
                refusing_words(blockers)
                if blockers
                else "op determinism is enabled (tf.config.experimental.enable_op_determinism)"
                if _internals.op_determinism_enabled()
                else "Keras's model_supports_jit said no"
            )
            self.refusal = f"Keras refused jit_compile=True ({why}); the model runs without XLA"
        # "off" and "on" both mean: no auto-clustering around the step function.
        return self._set_autoclustering(mode == "autoclustering")

    def _apply_fastest(self, model: Any, facts: dict) -> bool:
        """jit='fastest' starts in Keras's own choice (or the model's kept decision), with no
        auto-clustering around the step function: the trial compares jit_compile on and off."""
        if facts["replicas"] > 1 or facts["multi_worker"]:
            self.refusal = fastest_as_keep(
                f"under {facts['name']} with {facts['replicas']} replicas"
                + (" across workers" if facts["multi_worker"] else "")
                + ": jit_compile=True is refused there (see jit='on'), so only one mode can run"
            )
            return False
        blockers = self._refusing(model)
        self.refusing_layers = [name for name, _ in blockers]
        self.refusal = fastest_blocked(blockers, _internals.op_determinism_enabled())
        if self.refusal:
            return False
        self._model_jit.apply(model, self.start_on if self.start_on is not None else _internals.auto_jit(model))
        return self._set_autoclustering(False)

    @staticmethod
    def _refusing(model: Any) -> List[Refusing]:
        """The layers Keras refuses jit_compile=True for, as the user put them in the model."""
        return refusing_layers(_internals.layers_without_jit(model), lambda: _internals.layers_refusing_jit(model))

    def set_model(self, model: Any, on: bool) -> None:
        """jit='fastest' switches: the model's jit_compile follows the function that runs."""
        self._model_jit.set(model, on)

    def fall_back(self, model: Any, reason: str) -> None:
        """Switch this fit to non-XLA (on a storm). The model's own setting
        comes back at restore()."""
        self._model_jit.switch_off(model)
        self._set_autoclustering(False)
        self.fallback_reason = reason

    def restore(self, model: Any = None) -> bool:
        """Put back what this controller changed for the fit. Returns True when
        the model's jit setting was put back (its step functions must then be
        rebuilt before they run again)."""
        if self._saved_autoclustering is not self._UNSET:
            _internals.restore_autoclustering_setting(self._saved_autoclustering)
            self._saved_autoclustering = self._UNSET
        if self._overrode_env_auto_jit:
            _internals.set_auto_jit_off(False)
            self._overrode_env_auto_jit = False
        return self._model_jit.restore(model)

    def read_back(self, model: Any, step_fn: Any) -> JitState:
        """What really runs, from the step function Keras built."""
        done = fallback_or_eager(self.mode, self.fallback_reason, model.run_eagerly, self.refusal)
        if done is not None:
            return done
        state = JitState(self.mode)
        if _internals.function_jit_flag(step_fn):
            state.active = True
            state.reason = self.refusal or (
                "jit_compile=True on the step function that runs: every step is one "
                "XLA program, compiled once per new input signature"
            )
            return state
        if _internals.autoclustering_enabled():
            return self._read_back_autoclustering(state)
        state.active = False
        if self.refusal:
            state.reason = self.refusal
        elif self.mode == "off":
            state.reason = "jit='off': the step function runs without XLA"
        else:
            state.reason = self.keep_refusal or self._why_keep_is_off(model)
        return state

    def _read_back_autoclustering(self, state: JitState) -> JitState:
        if has_accelerator():
            state.autoclustering = True
            state.reason = "auto-clustering: TensorFlow compiles clusters of the graph with XLA"
            return state
        if cpu_autoclustering_effective() is False:
            state.active = False
            state.reason = (
                "auto-clustering was requested, but on CPU it compiles nothing unless TensorFlow's "
                "CPU global-jit flag is set before TensorFlow creates its devices, and it was not "
                f"(or too late): no cluster compiles in this process. Fix: {FIX_CPU_AUTOCLUSTERING}"
            )
            return state
        state.autoclustering = True
        state.reason = (
            "auto-clustering on CPU (global-jit flag set in time): TensorFlow compiles clusters of the graph with XLA"
        )
        return state

    @staticmethod
    def _why_keep_is_off(model: Any) -> str:
        facts = _internals.strategy_facts(model)
        if not facts["default"]:
            return (
                f"XLA is OFF for this fit: Keras resolves jit_compile='auto' to False under "
                f"tf.distribute ({facts['name']}), and the model's jit_compile is False"
            )
        if not has_accelerator():
            return (
                "XLA is OFF for this fit: Keras resolved jit_compile='auto' to False (no GPU), "
                "or the model was compiled with jit_compile=False. Pass jit='on' to try it"
            )
        return "XLA is OFF for this fit: the model was compiled with jit_compile=False"


# TensorFlow's words when the step's graph holds an op XLA cannot compile (TF 2.16 to 2.21, measured).
_UNSUPPORTED = "Detected unsupported operations when trying to compile graph"
_DEVICE = re.compile(r"compile graph \S+ on (\w+):")
_OP = re.compile(r"(\w+) \(No registered '\w+' OpKernel for \w+ devices compatible with node \{\{node ([^}]+)\}\}")
_DTYPE = re.compile(r"\bT=DT_([A-Z0-9]+)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


# An input XLA needs as a compile-time constant, computed by the step (TF 2.16 to 2.21, measured):
# "Input 1 to node `functional_1/pick_k_1/range` with op Range must be a compile-time constant."
_CONSTANT = re.compile(r"Input (\d+) to node `([^`]+)` with op (\w+) must be a compile-time constant")
# XLA's own failures while it compiles the step (an internal check, an unimplemented lowering): the error
# the step raises quotes them. Measured: "during context [Unknown]: RET_CHECK failure
# (external/xla/xla/service/hlo_verifier.cc:...) dynamic_reshape->operand(i)..." for a top_k whose k the
# step computes, differentiated.
_XLA_FAILURE = re.compile(r"RET_CHECK failure \(external/xla/|during context \[|\bXLA compilation\b|xla::")


def unsupported_op(error: BaseException, model: Any) -> Optional[Unsupported]:
    """What XLA refused in the step, read from TensorFlow's error, or None when ``error`` is something
    else: ops with no XLA kernel (``InvalidArgumentError``: each op's layer from its node's name scopes,
    the user's line from the stack TensorFlow quotes where the op was created; an ``_Arg`` is the step's
    own input, a dtype XLA takes no tensor of), an op's input XLA needs as a compile-time constant that
    the step computes from its data, or XLA's own failure to compile the step."""
    import tensorflow as tf

    if not isinstance(error, (tf.errors.InvalidArgumentError, tf.errors.InternalError, tf.errors.UnimplementedError)):
        return None
    text = str(getattr(error, "message", None) or error)
    try:
        names = layer_names(model) if model is not None else []
    except Exception:  # noqa: BLE001 - the layers are words; the fallback does not need them
        names = []
    constant = _CONSTANT.search(text)
    if constant is not None:
        return _constant_refusal(text, constant, names)
    at = text.find(_UNSUPPORTED)
    if at < 0:
        return _compile_failure(text) if _XLA_FAILURE.search(text) else None
    if not isinstance(error, tf.errors.InvalidArgumentError):
        return None
    end = text.find("The op is created at", at)
    decisive = " ".join(text[at : end if end > 0 else None].split())
    device = _DEVICE.search(decisive)
    ops = tuple(
        UnsupportedOp(op, layer_named(node.split("/")[:-1], names), node)
        for op, node in dict.fromkeys(_OP.findall(decisive))
    )
    if not ops:
        return None
    frames = [(path, int(number), name) for path, number, name in _FRAME.findall(text[at:])]
    dtype = _DTYPE.search(decisive)
    input_dtype = dtype.group(1).lower() if dtype and any(op.op == "_Arg" for op in ops) else None
    if input_dtype:
        why = f"the step takes a {input_dtype} input, and XLA takes no {input_dtype} tensor"
    elif "attributes didn't match" in decisive:
        why = "XLA has a kernel for it, but not for these dtypes or attributes"
    else:
        why = "XLA has no kernel for it on this device"
    return Unsupported(
        ops=ops,
        device=device.group(1) if device else "XLA",
        line=user_line(frames, quoted_root(path for path, _, _ in frames)),
        error=quote(re.sub(r"\[[^\]]*\]", "", decisive, count=1)),  # the graph's attributes: noise
        why=why,
        input_dtype=input_dtype,
    )


def _constant_refusal(text: str, found: "re.Match[str]", names: List[str]) -> Unsupported:
    """An op's input XLA needs as a compile-time constant, which the step computes from its data: the op,
    its input (by name where TensorFlow's op registry has it), its layer and the user's line."""
    index, node, op = int(found.group(1)), found.group(2), found.group(3)
    frames = [(path, int(number), name) for path, number, name in _FRAME.findall(text[found.end() :])]
    input_name = _internals.op_input_name(op, index)
    return Unsupported(
        ops=(UnsupportedOp(op, layer_named(node.split("/")[:-1], names), node),),
        device="XLA",
        line=user_line(frames, quoted_root(path for path, _, _ in frames)),
        error=quote(found.group(0)),
        why=(
            f"XLA needs its {input_name} as a compile-time constant, and the step computes it from its data "
            "(the batch or the weights)"
        ),
        kind="constant",
        input=input_name,
    )


def _compile_failure(text: str) -> Unsupported:
    """XLA's own failure to compile the step, in its words (the first line that names it)."""
    line = next((line for line in text.splitlines() if _XLA_FAILURE.search(line)), text)
    frames = [(path, int(number), name) for path, number, name in _FRAME.findall(text)]
    return Unsupported(
        ops=(UnsupportedOp("XLA", None, "the step"),),
        device="XLA",
        line=user_line(frames, quoted_root(path for path, _, _ in frames)),
        error=quote(line),
        why=f"XLA failed to compile it ({quote(line)[:120]})",
        kind="compile",
    )
