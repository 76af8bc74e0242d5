"""Input signatures: what XLA keys its compile cache on.

XLA compiles once per distinct concrete input shape and dtype, even when
``tf.function`` tracing has relaxed the shapes to ``None`` (measured: 2 traces, 25 compiles). So the
signature of a batch is the tuple of ``(path, dtype, shape)`` of every input
leaf, read from Python attributes only: building one never syncs the device.

This module is pure: it duck-types tensors (anything with ``.shape`` and
``.dtype``) and imports no TensorFlow.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple, Optional, Tuple

Shape = Tuple[Optional[int], ...]

# Keras unpacks a batch tuple as (x, y, sample_weight): name the top level so.
_TOP_LEVEL_NAMES = ("x", "y", "sample_weight")


class Leaf(NamedTuple):
    """One input tensor of a batch: where it sits, its dtype and its shape."""

    path: str
    dtype: str
    shape: Shape

    def describe(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.path}:{self.dtype}[{dims}]"


InputSignature = Tuple[Leaf, ...]


class AxisChange(NamedTuple):
    """One way two signatures differ. ``axis`` is None for a structural change
    (a leaf appeared or vanished, its rank or dtype changed)."""

    path: str
    axis: Optional[int]
    old: Any
    new: Any


# Per-step fast paths: a dtype's name and whether a type is a plain tensor leaf are
# fixed facts of the dtype / type, so they are computed once (numpy's dtype.name and
# five failed hasattr() calls per leaf were most of a signature's cost).
_DTYPE_NAMES: dict = {}
_PLAIN_LEAF_TYPES: dict = {}
# numpy arrays and jax.Arrays: their .shape is already a tuple of Python ints.
_INT_SHAPE_MODULES = ("numpy", "jax", "jaxlib")


def _dtype_name(dtype: Any) -> str:
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):
        pass
    name = getattr(dtype, "name", None)
    name = name if isinstance(name, str) else str(dtype)
    try:
        if len(_DTYPE_NAMES) < 256:
            _DTYPE_NAMES[dtype] = name
    except TypeError:  # unhashable dtype object
        pass
    return name


def _shape_tuple(shape: Any) -> Shape:

    dims = []
    for d in shape:
        # TensorShape yields ints or None; tf.compat.v1 Dimensions carry .value.
        d = getattr(d, "value", d)
        dims.append(None if d is None else int(d))
    return tuple(dims)


def _components(value: Any) -> Optional[list]:
    """Component tensors of composite tensors, named as TensorFlow names them.

    XLA sees a RaggedTensor as its flat values plus one row-splits vector per
    ragged dimension, and a SparseTensor as indices, values and dense_shape.
    """
    if hasattr(value, "flat_values") and hasattr(value, "nested_row_splits"):
        parts = [("flat_values", value.flat_values)]
        parts += [(f"row_splits_{i}", s) for i, s in enumerate(value.nested_row_splits)]
        return parts
    if all(hasattr(value, a) for a in ("indices", "values", "dense_shape")):
        return [("indices", value.indices), ("values", value.values), ("dense_shape", value.dense_shape)]
    return None


class Replicas(tuple):
    """The per-replica components of one distributed value (from ``unwrap``).

    Replicas usually get the same shapes; when they do not (a final batch
    split unevenly), each replica compiles for its own, so the extra
    replicas' differing leaves are added with an ``@N`` path suffix.
    """


def _plain_leaf(value: Any) -> int:
    """0: not a plain tensor; 1: a plain tensor; 2: one whose .shape is a tuple of ints (numpy, JAX)."""
    kind = type(value)
    plain = _PLAIN_LEAF_TYPES.get(kind)
    if plain is None:
        plain = int(
            not isinstance(value, (Replicas, dict, list, tuple))
            and _components(value) is None
            and hasattr(value, "shape")
            and hasattr(value, "dtype")
        )
        if plain and kind.__module__.split(".")[0] in _INT_SHAPE_MODULES and type(value.shape) is tuple:
            plain = 2
        if len(_PLAIN_LEAF_TYPES) < 256:
            _PLAIN_LEAF_TYPES[kind] = plain
    return plain


def _walk(value: Any, path: str, out: list, unwrap: Optional[Callable[[Any], Any]]) -> None:
    if unwrap is not None:
        value = unwrap(value)
    if value is None:
        return
    plain = _plain_leaf(value)
    if plain:
        out.append(Leaf(path, _dtype_name(value.dtype), value.shape if plain == 2 else _shape_tuple(value.shape)))
        return
    if isinstance(value, Replicas):
        first: list = []
        if value:
            _walk(value[0], path, first, unwrap)
        out.extend(first)
        for i, component in enumerate(value[1:], start=1):
            other: list = []
            _walk(component, path, other, unwrap)
            if other != first:
                out.extend(Leaf(f"{leaf.path}@{i}", leaf.dtype, leaf.shape) for leaf in other)
        return
    if isinstance(value, dict):
        # Sorted like tf.nest / keras.tree flatten dicts, so the order is stable.
        for key in sorted(value, key=str):
            _walk(value[key], f"{path}/{key}" if path else str(key), out, unwrap)
        return
    if isinstance(value, (list, tuple)):
        fields = getattr(value, "_fields", None)  # namedtuple: use field names
        for i, item in enumerate(value):
            name = fields[i] if fields else str(i)
            _walk(item, f"{path}/{name}" if path else name, out, unwrap)
        return
    parts = _components(value)
    if parts is not None:
        for name, part in parts:
            _walk(part, f"{path}/{name}", out, unwrap)
        return
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        out.append(Leaf(path, _dtype_name(value.dtype), _shape_tuple(value.shape)))
        return
    # Python scalars and strings passed as data have no shape: they are part of
    # the trace, not of XLA's cache key, so they are left out.


def _identity(value: Any) -> Any:
    return value


def signature_of(batch: Any, unwrap: Optional[Callable[[Any], Any]] = _identity) -> InputSignature:
    """The signature of one batch as Keras hands it to the step function.

    A tuple batch is named ``x``, ``y``, ``sample_weight`` (Keras's own
    unpacking); anything else is ``x``. ``unwrap`` turns distribution wrappers
    (PerReplica values) into plain structures before they are walked.

    Example:
        >>> class T:  # any object with .shape and .dtype
        ...     def __init__(self, *shape): self.shape, self.dtype = shape, "float32"
        >>> [l.describe() for l in signature_of(({"tokens": T(8, 5)}, T(8, 1)))]
        ['x/tokens:float32[8,5]', 'y:float32[8,1]']
    """
    out: list = []
    if unwrap is not None:
        batch = unwrap(batch)
    if isinstance(batch, Replicas):  # the whole batch is one distributed value
        first = signature_of(batch[0], unwrap) if batch else ()
        out.extend(first)
        for i, component in enumerate(batch[1:], start=1):
            other = signature_of(component, unwrap)
            if other != first:
                out.extend(Leaf(f"{leaf.path}@{i}", leaf.dtype, leaf.shape) for leaf in other)
        return tuple(out)
    if isinstance(batch, list):
        batch = tuple(batch)
    # Like keras's unpack_x_y_sample_weight: any tuple of 1..3 (namedtuples too)
    # is split by position.
    if isinstance(batch, tuple) and 1 <= len(batch) <= 3:
        for name, part in zip(_TOP_LEVEL_NAMES, batch):
            _walk(part, name, out, unwrap)
    else:
        _walk(batch, "x", out, unwrap)
    return tuple(out)


def is_ragged(signature: InputSignature) -> bool:
    """Whether the batch holds a RaggedTensor (its row splits are leaves)."""
    return any(leaf.path.rsplit("/", 1)[-1].startswith("row_splits_") for leaf in signature)


def fingerprint(signature: InputSignature) -> int:
    """A small exact key for counting distinct signatures without keeping them."""
    return hash(signature)


def describe(signature: InputSignature) -> str:
    return " ".join(leaf.describe() for leaf in signature) or "(no tensor inputs)"


def diff(old: InputSignature, new: InputSignature) -> list:
    """Which input and axis changed between two signatures, old vs new size."""
    changes = []
    old_by_path = {leaf.path: leaf for leaf in old}
    new_by_path = {leaf.path: leaf for leaf in new}
    for path, leaf in new_by_path.items():
        before = old_by_path.get(path)
        if before is None:
            changes.append(AxisChange(path, None, None, leaf.describe()))
        elif before.dtype != leaf.dtype or len(before.shape) != len(leaf.shape):
            changes.append(AxisChange(path, None, before.describe(), leaf.describe()))
        else:
            for axis, (a, b) in enumerate(zip(before.shape, leaf.shape)):
                if a != b:
                    changes.append(AxisChange(path, axis, a, b))
    for path, leaf in old_by_path.items():
        if path not in new_by_path:
            changes.append(AxisChange(path, None, leaf.describe(), None))
    return changes


def to_jsonable(signature: InputSignature) -> list:
    return [{"path": leaf.path, "dtype": leaf.dtype, "shape": list(leaf.shape)} for leaf in signature]


def from_jsonable(items: Iterable[dict]) -> InputSignature:
    return tuple(Leaf(i["path"], i["dtype"], tuple(i["shape"])) for i in items)
