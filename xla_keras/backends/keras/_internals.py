"""The ONE place that touches private Keras APIs shared by both backends (the model's stored jit flag,
the locals of a running fit, a callback's model).

Each is reached through a small function that fails with ``InternalsMoved``
naming the versions; ``tests/test_internals.py`` exercises each one against
the installed Keras. TensorFlow's own private APIs live in
``backends/tensorflow/_internals.py``, JAX's in ``backends/jax/_internals.py``.
"""

from __future__ import annotations

from types import FrameType
from typing import Any, Dict, List, Optional, Tuple

TESTED_VERSIONS = {"tensorflow": "2.16-2.21", "keras": "3.7-3.15"}


class InternalsMoved(RuntimeError):
    """A private Keras/TF API this package needs is gone or changed."""

    def __init__(self, what: str, error: Optional[BaseException] = None):
        # Imported here: the tensorflow package imports this module.
        from xla_keras.core.versions import installed_version as _version

        super().__init__(
            f"xla_keras cannot reach {what} in tensorflow {_version('tensorflow')} / keras "
            f"{_version('keras')} (tested on tensorflow {TESTED_VERSIONS['tensorflow']}, keras "
            f"{TESTED_VERSIONS['keras']}): {error!r}. Please report this with both versions."
        )


def layers_without_jit(model: Any) -> List[str]:
    """Names of the layers that declare supports_jit=False (Keras then refuses
    jit_compile=True)."""
    try:
        layers = model._flatten_layers()
    except AttributeError as e:
        raise InternalsMoved("keras Layer._flatten_layers", e) from e
    return [layer.name for layer in layers if not getattr(layer, "supports_jit", True)]


def layers_refusing_jit(model: Any) -> List[Tuple[str, Tuple[str, ...]]]:
    """The model's own layers (as the user put them in it) that declare supports_jit=False or hold a
    layer that does, each with the names of those it holds, itself included: ``("text_vectorization",
    ("text_vectorization", "string_lookup"))`` (a TextVectorization builds its own StringLookup). The
    model itself comes first where it declares it."""
    try:
        own = list(model._flatten_layers(include_self=False, recursive=False))
        found = [(layer.name, tuple(_without_jit(layer._flatten_layers()))) for layer in own]
    except AttributeError as e:
        raise InternalsMoved("keras Layer._flatten_layers", e) from e
    itself = [(model.name, (model.name,))] if not getattr(model, "supports_jit", True) else []
    return itself + [(name, held) for name, held in found if held]


def _without_jit(layers: Any) -> List[str]:
    return [layer.name for layer in layers if not getattr(layer, "supports_jit", True)]


def outermost_layers(model: Any) -> Dict[str, str]:
    """Each layer's name, nested ones included, to the name of the model's own layer that holds it (a
    layer of the model's own maps to itself): the layer as the user put it in the model."""
    try:
        own = list(model._flatten_layers(include_self=False, recursive=False))
        outer: Dict[str, str] = {}
        for layer in own:
            for inner in layer._flatten_layers():
                outer.setdefault(inner.name, layer.name)
    except AttributeError as e:
        raise InternalsMoved("keras Layer._flatten_layers", e) from e
    return outer


def layer_names(model: Any) -> List[str]:
    """The names of every layer of the model, nested ones included (what a node's name scopes name)."""
    return [layer.name for layer in _flat_layers(model)]


def layer_classes(model: Any) -> List[str]:
    """The class names of every layer of the model, nested ones included (custom layers' sublayers too)."""
    return [type(layer).__name__ for layer in _flat_layers(model)]


def _flat_layers(model: Any) -> List[Any]:
    try:
        return list(model._flatten_layers())
    except AttributeError as e:
        raise InternalsMoved("keras Layer._flatten_layers", e) from e


def layer_calls(layer: Any) -> int:
    """How many times ``layer`` was called in building the model (its inbound nodes): a layer's public
    ``input`` is its first call's, whatever the others."""
    try:
        return len(layer._inbound_nodes)
    except AttributeError as e:
        raise InternalsMoved("keras Operation._inbound_nodes", e) from e


def set_raw_model_jit(model: Any, value: Any) -> None:
    """Put back a stored jit_compile as it was (None = "auto", unresolved),
    bypassing the setter's support check."""
    if not hasattr(model, "_jit_compile"):
        raise InternalsMoved("keras Trainer._jit_compile", AttributeError("_jit_compile"))
    model._jit_compile = value


def raw_model_jit(model: Any) -> Any:
    """The model's stored jit_compile, without resolving "auto" (None)."""
    try:
        return model._jit_compile
    except AttributeError as e:
        raise InternalsMoved("keras Trainer._jit_compile", e) from e


def auto_jit(model: Any) -> bool:
    """What Keras's own ``jit_compile="auto"`` resolves to for this model here (no GPU, a
    tf.distribute strategy or a layer without XLA support: False). jit='fastest' starts there."""
    try:
        return bool(model._resolve_auto_jit_compile())
    except AttributeError as e:
        raise InternalsMoved("keras Trainer._resolve_auto_jit_compile", e) from e


def _model_call_frames(model: Any, names: Tuple[str, ...]):
    """Locals of the frames, innermost first, of ``model.<name>(...)`` calls on the stack.
    Walks frames: call it once per fit / evaluate / predict, never per step."""
    import sys

    frame: Optional[FrameType] = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in names:
            local = _locals_of(frame)
            if local.get("self") is model:
                yield local
        frame = frame.f_back


def _locals_of(frame: FrameType) -> dict:
    """A copy of a running frame's locals. Before Python 3.13 ``f_locals`` is a snapshot dict the frame
    keeps: left filled, it keeps what the function has since let go alive until the next read (measured:
    a fit's previous validation iterator, whose destruction, 0.6-0.9 s on TensorFlow, then ran inside the
    monitor's next validation-begin hook instead of in Keras's loop). Cleared after the copy (a tracer
    refreshes it before it reads it); from 3.13 it is a live view with nothing to clear."""
    live = frame.f_locals
    local = dict(live)
    if type(live) is dict:
        live.clear()
    return local


def running_fit(model: Any) -> Optional[dict]:
    """The local variables of ``model.fit`` when it is on the call stack
    (validation inside a fit), else None (e.g. a fit that an exception ended
    before on_train_end)."""
    return next(_model_call_frames(model, ("fit",)), None)


def callback_model(callback: Any) -> Any:
    """The model Keras handed a callback (``set_model``), read without the ``Callback.model``
    property: under JAX that property syncs the training state into the model's variables, and a
    sync inside a step (where the monitor switches functions) makes the next step restart from
    the variables, one step behind (a donated buffer fails, an undonated one loses the update)."""
    try:
        return vars(callback)["_model"]
    except (KeyError, TypeError) as e:
        raise InternalsMoved("keras Callback._model", e) from e


def user_data(model: Any) -> Any:
    """The ``x`` the user passed to the running fit / evaluate / predict (its frame's local), or None."""
    frame = next(_model_call_frames(model, ("fit", "evaluate", "predict")), None)
    return frame.get("x") if frame is not None else None


def fit_validates(model: Any) -> bool:
    """The running ``model.fit`` validates (its ``validation_data`` local, which validation_split
    fills too); False outside a fit."""
    local = running_fit(model)
    return bool(local is not None and local.get("validation_data") is not None)


def running_callback_list(model: Any) -> Any:
    """The CallbackList of the innermost running ``model.fit`` / ``evaluate``
    / ``predict`` (its ``callbacks`` local), or None outside them. Validation
    inside fit shares fit's list."""
    import keras

    for local in _model_call_frames(model, ("fit", "evaluate", "predict")):
        callbacks = local.get("callbacks")
        # A user's own fit() override holds a plain list: Keras's is further up.
        # (tests/test_internals.py fails loudly if Keras's own local moves.)
        if isinstance(callbacks, keras.callbacks.CallbackList):
            return callbacks
    return None


def keras_profile_windows(model: Any) -> List[Tuple[int, int]]:
    """(start, stop) batches that keras.callbacks.TensorBoard callbacks of the
    running fit will profile, found through the fit call's `callbacks` local."""
    import keras

    local = running_fit(model)
    callback_list = local.get("callbacks") if local is not None else None
    return [
        (int(cb._start_batch), int(cb._stop_batch))
        for cb in getattr(callback_list, "callbacks", None) or []
        if isinstance(cb, keras.callbacks.TensorBoard) and getattr(cb, "_stop_batch", 0) > 0
    ]


def build_for_step(model: Any, batch: Any) -> Optional[str]:
    """Build every variable the step would create at its first trace (the model's layers, the compiled loss
    and metrics, the optimizer's slots) from ``batch``'s shapes, as Keras's ``Trainer._symbolic_build`` does
    before a distributed fit; returns why something is still unbuilt, or None. Initializers draw their seeds
    when they are made, so the values are those the first step would have made."""
    try:
        model._symbolic_build(data_batch=batch)
        layers = list(model._flatten_layers())
    except AttributeError as e:
        raise InternalsMoved("keras Trainer._symbolic_build", e) from e
    unbuilt = [layer.name for layer in layers if not layer.built]
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        unbuilt.append("the optimizer")
    return f"not built before its first step: {', '.join(unbuilt[:3])}" if unbuilt else None
