"""The move that lifts Keras's refusal to compile: layers that declare ``supports_jit=False`` (StringLookup,
IntegerLookup, TextVectorization, ...) taken out of the model and applied in the input pipeline, as code
naming the user's layers. Keras then compiles the rest of the model's step with XLA.

The move is offered only where it keeps the model's meaning: each refusing layer is applied once, directly
to one of the model's inputs, and has no trainable weights (a preprocessing layer). The model after it is
``keras.Model`` from the layer's output to the model's output: the same layers and weights, so training
goes on where it was. Every input that model reads must then be preprocessed: the code defines
``preprocess`` once and uses it for fit's data, its ``validation_data``, ``evaluate`` and ``predict`` (a
model fed raw validation data raises nothing: its val_loss is computed on the wrong inputs). Elsewhere
there is no move to write (the refusal stands; ``jit="autoclustering"`` compiles around such a layer).
The same move serves a layer holding an op XLA cannot compile (``jit/unsupported.py``).

The code's lines fit in ``CODE_WIDTH`` columns (100 with the report's indent), whatever the names.
"""

from __future__ import annotations

import json
import keyword
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from xla_keras.backends.keras._internals import layer_calls

CODE_WIDTH = 96  # the code's columns: 4 more indent it under its label in 100
_NAME = 22  # a variable's characters at most (before a suffix that tells two apart): what keeps lines in width

# The names the code uses for the user's own objects, and its helpers: no layer's variable takes them.
RESERVED = {"model", "dataset", "validation_data", "test_data", "keras", "x", "inputs", "history", "loss"}
RESERVED |= {"predictions", "preprocess", "preprocess_batch", "y_and_weights"}


def _variable(name: str, taken: set) -> str:
    """A Python name for the layer in the fix's code: its own name where it is one (its first
    ``_NAME`` characters)."""
    base = re.sub(r"\W", "_", name)[:_NAME] or "layer"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = f"layer_{base}"[:_NAME]
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


def _literal(text: str) -> str:
    """``text`` as a Python string literal in double quotes (JSON's escapes are Python's)."""
    return json.dumps(text, ensure_ascii=False)


def _literal_lines(text: str, start: str, end: str, indent: str = "") -> List[str]:
    """``start + "text" + end`` on one line when it fits in ``CODE_WIDTH``; else the literal cut into pieces
    on lines of their own between ``start`` and ``end`` (``start`` opens a bracket: Python joins them)."""
    one = f"{indent}{start}{_literal(text)}{end}"
    if len(one) <= CODE_WIDTH:
        return [one]
    pieces = [""]
    for character in text:  # each piece's literal within the line (an escape takes more than 1 column)
        if pieces[-1] and len(_literal(pieces[-1] + character)) > CODE_WIDTH - len(indent) - 4:
            pieces.append("")
        pieces[-1] += character
    return [f"{indent}{start}", *(f"{indent}    {_literal(piece)}" for piece in pieces), f"{indent}{end}"]


# A piece of code laid out on one line where it fits, else one argument per line: a text, or
# (opening, arguments, closing).
Node = Union[str, Tuple[str, List[Any], str]]


def _flat(node: Node) -> str:
    if isinstance(node, str):
        return node
    opening, arguments, closing = node
    return opening + ", ".join(_flat(argument) for argument in arguments) + closing


def _laid_out(node: Node, indent: str = "", after: str = "") -> List[str]:
    """``node`` on one line of at most ``CODE_WIDTH`` where it fits, else its arguments one per line."""
    one = f"{indent}{_flat(node)}{after}"
    if len(one) <= CODE_WIDTH or isinstance(node, str):
        return [one]
    opening, arguments, closing = node
    lines = [f"{indent}{opening}"]
    for argument in arguments:
        lines += _laid_out(argument, indent + "    ", ",")
    return lines + [f"{indent}{closing.lstrip(',')}{after}"]  # a one-tuple's comma: its argument's now


def _comment(text: str, indent: str = "") -> List[str]:
    return textwrap.wrap(text, width=CODE_WIDTH, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ")


@dataclass(frozen=True)
class PipelineMove:
    """Layers to take out of the model and apply in the input pipeline, and the code that does it."""

    layers: Tuple[str, ...]
    code: str

    def words(self, code_at: str = "monitor.report.jit_fix") -> str:
        """The move in one sentence: for the warning, and (``code_at="the report's jit_fix"``: read from a
        saved log dir too, where no monitor is) for the report's ``jit_reason``."""
        return (
            f"Apply {', '.join(self.layers)} in the input pipeline (dataset.map) and the rest compiles: "
            f"{code_at} has the code (for the train, validation, evaluate and predict data)"
        )


def pipeline_move(model: Any, layer_names: Sequence[str], cause: Optional[str] = None) -> Optional[PipelineMove]:
    """The move of ``layer_names`` from ``model`` into ``dataset.map``, as code, or None when one of them
    is not a preprocessing layer of the model's inputs (then no move keeps the model's meaning).

    Args:
        model: the Keras model whose ``jit_compile=True`` Keras refused.
        layer_names: the model's own layers (as the user put them in it) that declare
            ``supports_jit=False``, hold one that does, or hold an op XLA cannot compile.
        cause: why XLA does not compile them, for the code's first comment; None: Keras's refusal
            (``supports_jit=False``).

    Returns:
        A ``PipelineMove``: its ``code`` stands ``model``, ``dataset`` (fit's data), ``validation_data``,
        ``test_data`` and ``x`` (what ``predict`` takes) for the user's.

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
        # the same layers and weights, after it:
        model = keras.Model(words.output, model.output)
        <BLANKLINE>
        def preprocess(x):
            \"\"\"The inputs as the layers after words take them.\"\"\"
            return words(x)
        <BLANKLINE>
        def preprocess_batch(x, *y_and_weights):
            \"\"\"A dataset's element (inputs, targets, sample weights) with its inputs preprocessed.\"\"\"
            return (preprocess(x), *y_and_weights)
        <BLANKLINE>
        model.compile(...)  # your compile arguments again; XLA now compiles the step
        # every input the model reads goes through preprocess: fit's data and its validation_data,
        # evaluate's and predict's (arrays too: model.fit(preprocess(x), y,
        # validation_data=(preprocess(x_val), y_val), ...)).
        history = model.fit(
            dataset.map(preprocess_batch),
            validation_data=validation_data.map(preprocess_batch),
            # your other fit arguments (epochs, callbacks, ...)
        )
        loss = model.evaluate(test_data.map(preprocess_batch))
        predictions = model.predict(preprocess(x))  # a dataset of inputs: .map(preprocess_batch)

        ```
    """
    if not layer_names:
        return None
    taken = set(RESERVED)
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
    lines = _comment(f"xla_keras: {cause}. Apply {these} in the input pipeline; the layers after {these} then compile.")
    for name, variable, _ in moves:
        lines += _literal_lines(name, f"{variable} = model.get_layer(", ")")
    bound, keys = _keys(moves, taken) if isinstance(_inputs(model), dict) else ([], {})
    lines += bound + _rebuilt(model, moves, keys, these) + [""] + _preprocess(model, moves, keys) + [""]
    lines += [
        "def preprocess_batch(x, *y_and_weights):",
        '    """A dataset\'s element (inputs, targets, sample weights) with its inputs preprocessed."""',
        "    return (preprocess(x), *y_and_weights)",
        "",
        "model.compile(...)  # your compile arguments again; XLA now compiles the step",
        *_comment(
            "every input the model reads goes through preprocess: fit's data and its validation_data, "
            "evaluate's and predict's (arrays too: model.fit(preprocess(x), y, "
            "validation_data=(preprocess(x_val), y_val), ...))."
        ),
        "history = model.fit(",
        "    dataset.map(preprocess_batch),",
        "    validation_data=validation_data.map(preprocess_batch),",
        "    # your other fit arguments (epochs, callbacks, ...)",
        ")",
        "loss = model.evaluate(test_data.map(preprocess_batch))",
        "predictions = model.predict(preprocess(x))  # a dataset of inputs: .map(preprocess_batch)",
    ]
    return PipelineMove(tuple(name for name, _, _ in moves), "\n".join(lines))


def _keys(moves: Sequence[Tuple[str, str, Any]], taken: set) -> Tuple[List[str], Dict[Any, str]]:
    """A dict model's input keys as the code writes them: a literal, or a variable bound first where a line
    that uses it would not fit (a long key)."""
    lines: List[str] = []
    keys: Dict[Any, str] = {}
    for _, variable, where in moves:
        key = _literal(where)
        if len(f"    x[{key}] = {variable}(x[{key}])") > CODE_WIDTH:
            name = _variable(f"{variable[: _NAME - 4]}_key", taken)
            one = f"{name} = {key}"
            lines += [one] if len(one) <= CODE_WIDTH else _literal_lines(where, f"{name} = (", ")")
            key = name
        keys[where] = key
    return lines, keys


def _rebuilt(model: Any, moves: Sequence[Tuple[str, str, Any]], keys: Dict[Any, str], these: str) -> List[str]:
    """The model after the moved layers: from their outputs (and the other inputs) to the model's output."""
    structure, output = _inputs(model), _output_words(model)
    if isinstance(structure, dict):
        lines = ["inputs = dict(model.input)"]
        lines += [f"inputs[{keys[where]}] = {variable}.output" for _, variable, where in moves]
        return lines + [f"# the same layers and weights, after {these}:", f"model = keras.Model(inputs, {output})"]
    if isinstance(structure, (list, tuple)):
        lines = ["inputs = list(model.inputs)"]
        lines += [f"inputs[{where}] = {variable}.output" for _, variable, where in moves]
        return lines + [f"model = keras.Model(inputs, {output})  # the same layers and weights, after {these}"]
    ((_, variable, _),) = moves
    return [f"# the same layers and weights, after {these}:", f"model = keras.Model({variable}.output, {output})"]


def _preprocess(model: Any, moves: Sequence[Tuple[str, str, Any]], keys: Dict[Any, str]) -> List[str]:
    """``preprocess(x)``: the model's inputs as the layers after the moved ones take them."""
    said = f"The inputs as the layers after {', '.join(name for name, _, _ in moves)} take them."
    if len(f'    """{said}"""') > CODE_WIDTH:
        said = "The inputs as the layers after the moved ones take them."
    lines = ["def preprocess(x):", f'    """{said}"""']
    structure = _inputs(model)
    if isinstance(structure, dict):
        lines.append("    x = dict(x)")
        lines += [f"    x[{keys[where]}] = {variable}(x[{keys[where]}])" for _, variable, where in moves]
        return lines + ["    return x"]
    if isinstance(structure, (list, tuple)):
        by_index = {where: variable for _, variable, where in moves}
        parts: List[Any] = [f"{by_index[i]}(x[{i}])" if i in by_index else f"x[{i}]" for i in range(len(structure))]
        return lines + _laid_out(("return (", parts, ",)" if len(parts) == 1 else ")"), "    ")
    ((_, variable, _),) = moves
    return lines + [f"    return {variable}(x)"]
