"""A fix as code: the one line that applies it with ``xla_keras.data``, and its compiles in words. Pure."""

from __future__ import annotations

from typing import Any, Dict

# What the user fed the call (a storm fix's code is written for it): a tf.data.Dataset, arrays
# (numpy / JAX arrays, or nests of them: Keras batches them itself), a keras.utils.PyDataset, or any
# other iterable of batches (a generator, a list).
DATA_KINDS = ("tf.data", "arrays", "pydataset", "generator")
_ARRAY_TYPES = ("ndarray", "Array", "ArrayImpl", "Tensor", "EagerTensor", "DataFrame", "Series")


def data_name(data: str) -> str:
    """The variable a fix's code names the user's data by: ``ds`` (tf.data), ``data`` (a PyDataset),
    ``batches`` (arrays sliced into batches, generators, lists)."""
    return {"tf.data": "ds", "pydataset": "data"}.get(data, "batches")


def data_kind_of(data: Any, default: str) -> str:
    """The kind of ``data`` (one of ``DATA_KINDS``), read from its type; ``default`` when unknown.

    Example:
        >>> import numpy as np
        >>> data_kind_of(np.ones((4, 2)), "tf.data"), data_kind_of((i for i in range(3)), "tf.data")
        ('arrays', 'generator')
    """
    if data is None:
        return default
    kind = type(data)
    if kind.__module__.startswith("tensorflow") and hasattr(data, "element_spec"):
        return "tf.data"
    if any(c.__name__ == "PyDataset" for c in kind.__mro__):
        return "pydataset"
    if isinstance(data, dict):
        data = next(iter(data.values()), None)
    elif isinstance(data, (list, tuple)) and data and not isinstance(data[0], (list, tuple, dict)):
        data = data[0]  # a list of inputs, each an array (a list of batches holds tuples)
    if type(data).__name__ in _ARRAY_TYPES and hasattr(data, "shape"):
        return "arrays"
    return "generator"


def _call(function: str, fix: Dict[str, Any], data: str, extra: str = "") -> str:
    """The one line that applies ``fix`` with ``xla_keras.data``, with the fix written out so the
    line stands alone (no ``storm`` object needed)."""
    minimal = {
        k: fix[k]
        for k in ("kind", "targets", "length_of", "lengths", "size", "rows", "batch_size", "remainder")
        if k in fix
    }
    if fix.get("kind") != "bucket_by_length":
        minimal.pop("lengths", None)  # the targets carry them
    name = data_name(data)
    source = "examples" if function == "bucket_by_length" else name
    return f"import xla_keras\n{name} = xla_keras.data.{function}({source}, {minimal!r}{extra})"


def apply_code(fix: Dict[str, Any], data: str) -> str:
    where = {
        "tf.data": "  # on the dataset as you batched it",
        "pydataset": "  # your PyDataset -> a keras.utils.PyDataset of fixed batches",
    }.get(data, "  # numpy / generator batches -> a keras.utils.PyDataset")
    return _call("apply_fix", fix, data) + where


def bucket_code(fix: Dict[str, Any], data: str) -> str:
    where = (
        "  # on the dataset of single examples, before batching"
        if data == "tf.data"
        else "  # an iterable of single examples -> a keras.utils.PyDataset"
    )
    return _call("bucket_by_length", fix, data) + where


def batch_size_call(phase: str, size: object) -> str:
    """The Keras call that batches arrays to ``size`` rows for ``phase``: Keras batches arrays itself."""
    return {
        "train": f"model.fit(x, y, batch_size={size})",
        "test": f"model.evaluate(x, y, batch_size={size}) (in fit: validation_batch_size={size})",
        "predict": f"model.predict(x, batch_size={size})",
    }[phase]


def compiles_words(n: int) -> str:
    return f"{n} compile" + ("" if n == 1 else "s")
