"""The chain of step-function wrappers on a model, shared by every backend. No framework import.

Keras looks ``model.<phase>_function`` up at every step, so a monitor watches a
call by replacing that attribute with a wrapper. Several monitors of one call
chain their wrappers; a wrapper left by an interrupted call (its owner gone, or
no longer holding it) is dropped at the next install. Each backend supplies
the wrapper itself and how to read the step function Keras built.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict

from xla_keras.backends.base import StepObserver

FUNCTION_ATTR = {"train": "train_function", "test": "test_function", "predict": "predict_function"}
MAKE_FUNCTION = {"train": "make_train_function", "test": "make_test_function", "predict": "make_predict_function"}


def wrap_marker(wrapper: Any, original: Callable, owner: Any) -> Callable:
    """Mark our wrapper (and its owner) so a leftover one is found and another
    live monitor's wrapper is chained onto rather than removed."""
    wrapper._xla_keras_original = original
    wrapper._xla_keras_owner = owner
    return wrapper


def unwrap(fn: Any) -> Any:
    """The Keras function under every xla_keras wrapper."""
    while fn is not None and hasattr(fn, "_xla_keras_original"):
        fn = fn._xla_keras_original
    return fn


class WrapperChain:
    """One monitor's wrappers, per phase. ``owner`` (a ``StepObserver``) offers ``params`` (Keras hands
    one params dict to every callback of a call) and ``step_wrapper(phase)``.

    ``make_wrapper(model, phase, observer)``: the backend's wrapper; ``step_function(fn)``: the
    step function under Keras's ``fn``; ``jit_flag(step_fn)``: it is compiled whole by XLA;
    ``xla_now(step_fn)``: XLA compiles it now (jit flag or auto-clustering)."""

    def __init__(
        self,
        owner: StepObserver,
        make_wrapper: Callable,
        step_function: Callable,
        jit_flag: Callable,
        xla_now: Callable,
    ):
        self._owner = weakref.ref(owner)
        self._make_wrapper = make_wrapper
        self._step_function = step_function
        self._jit_flag = jit_flag
        self._xla_now = xla_now
        self.current: Dict[str, Any] = {}

    def _chain(self, model: Any, phase: str) -> tuple:
        """(live wrappers of other monitors of this call, top to bottom; Keras's function)."""
        me = self._owner()
        fn = getattr(model, FUNCTION_ATTR[phase], None)
        keep = []
        while fn is not None and hasattr(fn, "_xla_keras_original"):
            owner = fn._xla_keras_owner()
            # Another monitor of this same fit / evaluate / predict call: chain onto it.
            # Anything else is a leftover of an interrupted call: drop it.
            if (
                owner is not None
                and owner is not me
                and owner.step_wrapper(phase) is fn
                and owner.params is not None
                and me is not None
                and owner.params is me.params
            ):
                keep.append(fn)
            fn = fn._xla_keras_original
        return keep, fn

    @staticmethod
    def _relink(model: Any, phase: str, wrappers: list, base: Any) -> None:
        for upper, lower in zip(wrappers, wrappers[1:] + [base]):
            upper._xla_keras_original = lower
        setattr(model, FUNCTION_ATTR[phase], wrappers[0] if wrappers else base)

    def install(
        self,
        model: Any,
        phase: str,
        observer: StepObserver,
        rebuild: bool = False,
        enforce_model_jit: bool = False,
        base: Any = None,
    ):
        """Wrap ``phase``'s function (building it when missing, when ``rebuild``, or when its jit flag
        differs from the model's and ``enforce_model_jit``), or ``base``: a Keras function built
        earlier (jit='fastest' swaps its two). Returns (step function found before, the one that
        runs, rebuilt, XLA compiles it now)."""
        others, original = self._chain(model, phase)  # drops our own leftovers and dead ones
        before = self._step_function(original) if original is not None else None
        if base is not None:
            original, rebuild = base, False
        mismatch = (
            base is None
            and enforce_model_jit
            and not model.run_eagerly
            and self._jit_flag(before) != bool(model.jit_compile)
        )
        step_fn = before if base is None else self._step_function(base)
        if original is None or rebuild or mismatch:
            getattr(model, MAKE_FUNCTION[phase])(force=True)
            original = getattr(model, FUNCTION_ATTR[phase])
            step_fn = self._step_function(original)
        wrapper = wrap_marker(self._make_wrapper(model, phase, observer), original, self._owner)
        self.current[phase] = wrapper
        self._relink(model, phase, [wrapper] + others, original)
        return before, step_fn, bool(original is None or rebuild or mismatch), bool(self._xla_now(step_fn))

    def jit_flag(self, fn: Any) -> bool:
        """Whether Keras's function ``fn`` runs its step compiled whole by XLA."""
        return bool(self._jit_flag(self._step_function(fn)))

    def remove(self, model: Any, phase: str) -> None:
        if self.current.pop(phase, None) is not None:
            others, base = self._chain(model, phase)
            self._relink(model, phase, others, base)

    def remove_all(self, model: Any) -> None:
        for phase in list(self.current):
            self.remove(model, phase)
