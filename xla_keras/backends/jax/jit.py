"""JIT modes on Keras's JAX backend, and JAX's persistent compilation cache.

On JAX there is no global switch and no auto-clustering: ``jit_compile=True``
makes Keras wrap the step in ``jax.jit`` (one XLA program per step), False runs
it op by op (JAX still compiles one small executable per primitive and shape).
The mode is applied to the model like ``model.compile(jit_compile=...)`` and
kept there; a storm fallback lasts for its fit only.
"""

from __future__ import annotations

import linecache
import os
import re
import traceback
from typing import Any, List, Optional

from xla_keras.backends.jax import _internals
from xla_keras.core.types import assert_never
from xla_keras.errors import XlaKerasWarning
from xla_keras.jit.modes import (
    JitMode,
    JitState,
    Refusing,
    SavedModelJit,
    eager_refusal,
    fallback_or_eager,
    fastest_blocked,
    keep_refused,
    refusing_layers,
    refusing_words,
    validate_mode,
)
from xla_keras.jit.unsupported import JAX_DEVICE, Unsupported, UnsupportedOp, quote, user_line

MODES = ("keep", "on", "off", "fastest")

AUTOCLUSTERING_REFUSED = (
    "jit='autoclustering' is a TensorFlow feature (TensorFlow picks clusters of its graph for XLA); Keras runs "
    "the JAX backend here, where a jitted step is already one whole XLA program. Choose 'keep', 'on', 'off' or "
    "'fastest'"
)

OP_BY_OP = (
    "JAX still compiles one small executable per primitive and input shape when it runs a step op by "
    "op; those are counted apart (report.other_compilations['in_steps']), not as step compiles"
)

# What configure(cache_dir=...) asked, for the report.
_opt_in: dict = {"cache_dir": None}


def validate_jax_mode(mode: Any) -> JitMode:
    if mode == "autoclustering":
        raise ValueError(AUTOCLUSTERING_REFUSED)
    return validate_mode(mode, MODES)


def configure(cpu_autoclustering: bool = False, cache_dir: Optional[str] = None) -> dict:
    """``xla_keras.configure`` under Keras's JAX backend: the persistent cache.

    JAX caches only compiles that took at least
    ``jax_persistent_cache_min_compile_time_secs`` (1 s by default, more than
    most CPU compiles take): asking for a cache here lowers it to 0, so every
    step executable is cached and a later process loads it."""
    if not isinstance(cpu_autoclustering, bool):
        raise TypeError(f"cpu_autoclustering must be True or False; got {cpu_autoclustering!r}")
    if cpu_autoclustering:
        raise ValueError(
            "cpu_autoclustering=True is a TensorFlow setting (auto-clustering); Keras runs the JAX "
            "backend here, where jit_compile=True already compiles each step whole. Leave it False"
        )
    result = {}
    if cache_dir is not None:
        if not isinstance(cache_dir, (str, os.PathLike)) or not str(cache_dir):
            raise ValueError(f"cache_dir must be a directory path (str); got {cache_dir!r}")
        path = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
        os.makedirs(path, exist_ok=True)
        _internals.set_cache(path, 0.0)
        _opt_in["cache_dir"] = path
        result["cache_dir"] = True
    return result


def persistent_cache() -> Optional[dict]:
    """``{"dir", "effective", "read_only", "min_compile_secs"}`` of JAX's persistent cache, or None."""
    config = _internals.cache_config()
    if not config["dir"] or not config["enabled"]:
        return None
    return {
        "dir": os.path.abspath(config["dir"]),
        "effective": True,
        "read_only": False,
        "min_compile_secs": config["min_compile_secs"],
    }


class JitController:
    """Applies a jit mode to a model; restores the model's own setting after a fallback."""

    def __init__(self, mode: str):
        self.mode: JitMode = validate_jax_mode(mode)
        self._model_jit = SavedModelJit(_internals.raw_model_jit, _internals.set_raw_model_jit)
        self.refusal: Optional[str] = None
        self.refusing_layers: List[str] = []  # the supports_jit=False layers, when they are the refusal's cause
        self.keep_refusal: Optional[str] = None  # jit='keep' on a model Keras refuses jit_compile=True for
        self.fallback_reason: Optional[str] = None
        self.start_on: Optional[bool] = None  # jit='fastest': the kept decision's mode; None: Keras's auto

    def apply(self, model: Any) -> bool:
        """Apply the mode to the model. Never a global switch: returns False."""
        self.refusal = None
        self.refusing_layers = []
        self.keep_refusal = None
        self.fallback_reason = None
        mode = self.mode
        match mode:
            case "keep":
                layers = [] if model.run_eagerly else self._refusing(model)
                if layers:  # Keras resolved the model's jit_compile to False for them, whatever it was given
                    self.refusing_layers = [name for name, _ in layers]
                    self.keep_refusal = keep_refused(layers)
            case "fastest" | "on" | "off" if model.run_eagerly:
                self.refusal = eager_refusal(mode)
            case "fastest":
                blockers = self._refusing(model)
                self.refusing_layers = [name for name, _ in blockers]
                self.refusal = fastest_blocked(blockers)
                if not self.refusal:
                    on = self.start_on if self.start_on is not None else _internals.auto_jit(model)
                    self._model_jit.apply(model, on)
            case "on" | "off":
                if not self._model_jit.apply(model, mode == "on"):
                    blockers = self._refusing(model)
                    self.refusing_layers = [name for name, _ in blockers]
                    why = refusing_words(blockers) if blockers else "model_supports_jit said no"
                    self.refusal = f"Keras refused jit_compile=True ({why}); the model runs without XLA"
            case "autoclustering":  # refused when the controller is made (validate_jax_mode)
                raise ValueError(AUTOCLUSTERING_REFUSED)
            case _:
                assert_never(mode)
        return False

    @staticmethod
    def _refusing(model: Any) -> List[Refusing]:
        """The layers Keras refuses jit_compile=True for, as the user put them in the model."""
        return refusing_layers(_internals.layers_without_jit(model), lambda: _internals.layers_refusing_jit(model))

    def set_model(self, model: Any, on: bool) -> None:
        """jit='fastest' switches: the model's jit_compile follows the function that runs."""
        self._model_jit.set(model, on)

    def fall_back(self, model: Any, reason: str) -> None:
        self._model_jit.switch_off(model)
        self.fallback_reason = reason

    def restore(self, model: Any = None) -> bool:
        return self._model_jit.restore(model)

    def read_back(self, model: Any, step_fn: Any) -> JitState:
        """What really runs, from the step function Keras's JAX trainer built."""
        done = fallback_or_eager(
            self.mode,
            self.fallback_reason,
            model.run_eagerly,
            self.refusal,
            after_fallback=f"; the step now runs op by op ({OP_BY_OP})",
        )
        if done is not None:
            return done
        state = JitState(self.mode)
        if _internals.is_jitted(step_fn):
            state.active = True
            state.reason = self.refusal or (
                "jax.jit on the step function that runs: every step is one XLA "
                "program, compiled once per new input signature"
            )
            return state
        state.active = False
        if self.refusal:
            state.reason = self.refusal
        elif self.mode == "off":
            state.reason = f"jit='off': the step runs op by op, no whole-step XLA program ({OP_BY_OP})"
        elif self.keep_refusal:
            state.reason = f"{self.keep_refusal}; the step runs op by op ({OP_BY_OP})"
        else:
            state.reason = (
                "XLA is OFF for the step: the model was compiled with jit_compile=False, so the step "
                f"runs op by op ({OP_BY_OP}). Pass jit='on' to compile it whole"
            )
        return state


__all__ = ["configure", "persistent_cache", "JitController", "MODES", "XlaKerasWarning"]


# The errors jax.jit raises while tracing a step that cannot be one program of static shapes, and why.
_TRACE_ERRORS = {
    "NonConcreteBooleanIndexError": "an output's shape depends on the data (jax.jit traces abstract shapes)",
    "ConcretizationTypeError": "a shape or a Python decision depends on the data (jax.jit traces abstract values)",
    "TracerArrayConversionError": "a traced value is pulled into numpy (jax.jit traces abstract values)",
    "TracerBoolConversionError": "Python control flow reads a traced value (jax.jit traces abstract values)",
    "TracerIntegerConversionError": "a traced value is used as a Python int (jax.jit traces abstract values)",
}
# The fix for each, in words (a warning's "Fix:" line: at most 95 characters). Each names what the layer's
# call does instead, as JAX's own page of errors advises (docs.jax.dev/en/latest/errors.html).
_TRACE_FIXES = {
    "NonConcreteBooleanIndexError": "mask instead of indexing with a boolean tensor: keras.ops.where(mask, x, 0)",
    "ConcretizationTypeError": "give that layer static shapes: jnp.nonzero(..., size=n), a mask (keras.ops.where)",
    "TracerArrayConversionError": "use keras.ops (or jax.numpy) instead of numpy in that layer's call",
    "TracerBoolConversionError": "use keras.ops.where (values) or jax.lax.cond (branches), not a Python if on a tensor",
    "TracerIntegerConversionError": (
        "index a tensor with it (keras.ops.take, jax.lax.dynamic_slice), not a list or range"
    ),
}
# A ConcretizationTypeError JAX raised at a Python scalar conversion ("The problem arose with the `int`
# function"): no shape depends on the data, the value only has to stay a tensor.
_CONVERSION = re.compile(r"The problem arose with the `(int|float|complex)` function")
_CONVERSION_FIX = "keep it a tensor: keras.ops.cast(x, dtype) instead of {function}() in that layer's call"


def trace_fix(name: str, message: str) -> str:
    """The fix for the trace error JAX raised (``name``: its class, one of ``_TRACE_ERRORS``; ``message``:
    its words), in words."""
    conversion = _CONVERSION.search(message) if name == "ConcretizationTypeError" else None
    if conversion is not None:
        return _CONVERSION_FIX.format(function=conversion.group(1))
    return _TRACE_FIXES[name]


def unsupported_op(error: BaseException, model: Any) -> Optional[Unsupported]:
    """What stopped ``jax.jit`` from tracing the step, or None when ``error`` is something else: the
    error JAX raised, the innermost layer whose ``call`` was running, the user's line.

    Measured on Keras 3.15 with JAX 0.10: Keras re-raises a layer's error as ``type(error)(message)``,
    which JAX's tracer errors cannot be built from (an ``AttributeError`` in their ``__init__``). JAX's own
    error is then that one's ``__context__``, with the whole traceback; where only the failed rebuild is
    left, the error it was building is the frame's ``self``."""
    import jax
    import keras

    classes = tuple(getattr(jax.errors, name) for name in _TRACE_ERRORS if hasattr(jax.errors, name))
    chain: List[BaseException] = []
    link: Optional[BaseException] = error
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    raised = next((link for link in chain if isinstance(link, classes)), None)
    kind = type(raised) if raised is not None else None
    walked = list(traceback.walk_tb((raised or error).__traceback__))
    for frame, _ in walked if kind is None else ():
        building = frame.f_locals.get("self") if frame.f_code.co_name == "__init__" else None
        if isinstance(building, classes):
            kind = type(building)
            break
    if kind is None:
        return None
    layer = None
    for frame, _ in walked:  # outermost first: the innermost layer's call wins
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "call" else None
        if isinstance(owner, keras.layers.Layer) and not isinstance(owner, keras.Model):
            layer = owner.name
    line = user_line([(frame.f_code.co_filename, number, frame.f_code.co_name) for frame, number in walked])
    source = ""
    if line:
        path, _, rest = line.rpartition(":")
        source = linecache.getline(path, int(rest.split(" ", 1)[0])).strip()
    name = next(klass.__name__ for klass in kind.__mro__ if klass.__name__ in _TRACE_ERRORS)
    words = str(raised) if raised is not None else ""
    first = (words.strip().splitlines() or [""])[0] if raised is not None else f"(raising it failed: {error})"
    return Unsupported(
        ops=(UnsupportedOp(kind.__name__, layer, source or kind.__name__),),
        device=JAX_DEVICE,
        line=line,
        error=quote(f"{kind.__name__}: {first}"),
        why=_TRACE_ERRORS[name],
        raised=raised,
        fix_words=trace_fix(name, words),
    )
