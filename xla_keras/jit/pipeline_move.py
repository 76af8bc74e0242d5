"""The move that lifts Keras's refusal to compile: layers that declare ``supports_jit=False`` (StringLookup,
IntegerLookup, ...) taken out of the model and applied in the input pipeline, as code naming the user's
layers. Keras then compiles the rest of the model's step with XLA.

The move is offered only where it keeps the model's meaning: each refusing layer is applied once, directly
to one of the model's inputs, and has no trainable weights (a preprocessing layer). The model after it is
``keras.Model`` from the layer's output to the model's output: the same layers and weights, so training
goes on where it was. Elsewhere there is no move to write (the refusal stands; ``jit="autoclustering"``
compiles around such a layer). The same move serves a layer holding an op XLA cannot compile
(``jit/unsupported.py``).
"""

from __future__ import annotations

import keyword
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xla_keras.backends.keras._internals import layer_calls


def _variable(name: str, taken: set) -> str:
    """A Python name for the layer in the fix's code: its own name where it is one."""
    base = re.sub(r"\W", "_", name) or "layer"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = f"layer_{base}"
    variable, n = base, 2
    while variable in taken:
        variable, n = f"{base}_{n}", n + 1
    taken.add(variable)
    return variable


def _inputs(model: Any) -> Any:
    """The model's inputs as it takes them: a dict, a list, or one tensor (a Sequential model has no
    ``input``, only ``inputs``)."""
    try:
        return model.input
    except (AttributeError, ValueError):
        inputs = getattr(model, "inputs", None) or [None]
        return inputs[0] if len(inputs) == 1 else list(inputs)


def _output_words(model: Any) -> str:
    """How the code names the model's output (a Sequential model has only ``outputs``)."""
    try:
        return "model.output" if model.output is not None else "model.outputs[0]"
    except (AttributeError, ValueError):
        return "model.outputs[0]"


def _where_applied(model: Any, layer: Any) -> Optional[Any]:
    """The key (a dict model), index (a list model) or "" (one input) of the model input ``layer`` is
    applied to, or None when it is applied elsewhere, or more than once."""
    if layer_calls(layer) != 1:
        return None
    try:
        applied_to = layer.input
    except (AttributeError, ValueError):
        return None
    structure = _inputs(model)
    if isinstance(structure, dict):
        return next((key for key, tensor in structure.items() if tensor is applied_to), None)
    if isinstance(structure, (list, tuple)):
        return next((i for i, tensor in enumerate(structure) if tensor is applied_to), None)
    return "" if structure is applied_to else None


def layers_on_inputs(model: Any, dtype: str) -> List[str]:
    """The layers applied directly to one of the model's inputs of ``dtype`` (e.g. ``"string"``): what
    runs on that input inside the step, in the model's order."""
    structure = _inputs(model)
    tensors = (
        list(structure.values())
        if isinstance(structure, dict)
        else list(structure)
        if isinstance(structure, (list, tuple))
        else [structure]
    )
    wanted = [t for t in tensors if t is not None and str(getattr(t, "dtype", "")) == dtype]
    names = []
    for layer in getattr(model, "layers", None) or ():
        try:
            applied = layer.input
        except (AttributeError, ValueError):
            continue
        if any(applied is tensor for tensor in wanted):
            names.append(layer.name)
    return names


@dataclass(frozen=True)
class PipelineMove:
    """Layers to take out of the model and apply in the input pipeline, and the code that does it."""

    layers: Tuple[str, ...]
    code: str

    @property
    def words(self) -> str:
        """The move in one sentence, for the warning and the report's ``jit_reason``."""
        return (
            f"Apply {', '.join(self.layers)} in the input pipeline (dataset.map) and the rest compiles: "
            "monitor.report.jit_fix has the code"
        )


def pipeline_move(model: Any, layer_names: Sequence[str], cause: Optional[str] = None) -> Optional[PipelineMove]:
    """The move of ``layer_names`` from ``model`` into ``dataset.map``, as code, or None when one of them
    is not a preprocessing layer of the model's inputs (then no move keeps the model's meaning).

    Args:
        model: the Keras model whose ``jit_compile=True`` Keras refused.
        layer_names: the layers that declare ``supports_jit=False`` (or hold an op XLA cannot compile).
        cause: why XLA does not compile them, for the code's first comment; None: Keras's refusal
            (``supports_jit=False``).

    Returns:
        A ``PipelineMove``: its ``code`` stands ``model`` and ``dataset`` for the user's.

    Example:
        ```pycon
        >>> import keras
        >>> text = keras.Input(shape=(1,), dtype="string")
        >>> lookup = keras.layers.StringLookup(vocabulary=["a", "b"], name="words")
        >>> model = keras.Model(text, keras.layers.Dense(1)(lookup(text)))
        >>> print(pipeline_move(model, ["words"]).code)  # doctest: +NORMALIZE_WHITESPACE
        # xla_keras: Keras runs no step of this model with XLA while words (StringLookup) is in it
        # (supports_jit=False). Apply it in the input pipeline; the layers after it then compile.
        words = model.get_layer("words")
        model = keras.Model(words.output, model.output)  # the same layers and weights, after it
        dataset = dataset.map(lambda x, y: (words(x), y))
        # (arrays: x = words(x) before fit)
        model.compile(...)  # your compile arguments again; XLA now compiles the step

        ```
    """
    if not layer_names:
        return None
    taken = {"model", "dataset", "keras", "x", "y", "inputs"}
    moves: List[Tuple[str, str, Any]] = []  # (layer name, variable, where applied)
    kinds: Dict[str, str] = {}
    for name in layer_names:
        try:
            layer = model.get_layer(name)
        except ValueError:
            return None
        where = _where_applied(model, layer)
        if where is None or getattr(layer, "trainable_weights", None):
            return None  # elsewhere, or a layer that trains: out of the model it would train no more
        kinds[name] = type(layer).__name__
        moves.append((name, _variable(name, taken), where))
    if len({where for _, _, where in moves}) < len(moves):
        return None  # two refusing layers on one input: no input of the model after them to stand for both
    named = ", ".join(f"{name} ({kinds[name]})" for name, _, _ in moves)
    these = "it" if len(moves) == 1 else "them"
    cause = cause or (
        f"Keras runs no step of this model with XLA while {named} {'is' if len(moves) == 1 else 'are'} in it "
        "(supports_jit=False)"
    )
    said = f"xla_keras: {cause}. Apply {these} in the input pipeline; the layers after {these} then compile."
    lines = textwrap.wrap(said, width=96, initial_indent="# ", subsequent_indent="# ")  # 4 to indent it
    lines += [f'{variable} = model.get_layer("{name}")' for name, variable, _ in moves]
    structure, output = _inputs(model), _output_words(model)
    if isinstance(structure, dict):
        outputs = ", ".join(f'"{where}": {variable}.output' for _, variable, where in moves)
        applied = ", ".join(f'"{where}": {variable}(x["{where}"])' for _, variable, where in moves)
        lines += [
            "# the same layers and weights, after the moved ones:",
            f"model = keras.Model({{**model.input, {outputs}}}, {output})",
            f"dataset = dataset.map(lambda x, y: ({{**x, {applied}}}, y))",
        ]
    elif isinstance(structure, (list, tuple)):
        by_index = {where: variable for _, variable, where in moves}
        lines.append("inputs = list(model.inputs)")
        lines += [f"inputs[{where}] = {variable}.output" for _, variable, where in moves]
        lines.append(f"model = keras.Model(inputs, {output})  # the same layers and weights, after them")
        parts = ", ".join(f"{by_index[i]}(x[{i}])" if i in by_index else f"x[{i}]" for i in range(len(structure)))
        lines.append(f"dataset = dataset.map(lambda x, y: (({parts}{',' if len(structure) == 1 else ''}), y))")
    else:
        ((_, variable, _),) = moves
        lines += [
            f"model = keras.Model({variable}.output, {output})  # the same layers and weights, after it",
            f"dataset = dataset.map(lambda x, y: ({variable}(x), y))",
            f"# (arrays: x = {variable}(x) before fit)",
        ]
    lines.append("model.compile(...)  # your compile arguments again; XLA now compiles the step")
    return PipelineMove(tuple(name for name, _, _ in moves), "\n".join(lines))
