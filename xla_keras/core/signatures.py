"""Input signatures: what XLA keys its compile cache on.

XLA compiles once per distinct concrete input shape and dtype, even when
``tf.function`` tracing has relaxed the shapes to ``None`` (measured: 2 traces, 25 compiles). So the
signature of a batch is the tuple of ``(path, dtype, shape)`` of every input
leaf, read from Python attributes only: building one never syncs the device.

It also owns the one walk over a batch's nested structure (``top_level``,
``children``, ``leaves``, ``map_leaves``) that the data fixes and the length
sample use, so that every part of the package names a leaf alike.

This module is pure: it duck-types tensors (anything with ``.shape`` and
``.dtype``) and imports no TensorFlow.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Tuple

Shape = Tuple[Optional[int], ...]

# Keras unpacks a batch tuple as (x, y, sample_weight): name the top level so.
TOP_LEVEL_NAMES = ("x", "y", "sample_weight")


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


# ------------------------------------------------------------------ the batch tree
# One set of rules for every walk over a batch (signatures, xla_keras.data, the length sample), so
# that they name each leaf alike: the paths are a contract (reports, fixes, real lengths).


def _splits(batch: Any) -> bool:
    # Like keras's unpack_x_y_sample_weight: any list or tuple of 1..3 parts, namedtuples too.
    return isinstance(batch, (list, tuple)) and 1 <= len(batch) <= 3


def top_level(batch: Any) -> List[Tuple[str, Any]]:
    """A batch's parts with their names: ``x``, ``y``, ``sample_weight`` by position for a list or
    tuple of 1..3 parts (namedtuples too, as Keras unpacks them), else the whole batch as ``x``."""
    if _splits(batch):
        return list(zip(TOP_LEVEL_NAMES, batch))
    return [("x", batch)]


def children(value: Any) -> Optional[List[Tuple[Any, Any]]]:
    """``(key, item)`` of a container, None for anything else. Dicts by sorted key (as tf.nest and
    keras.tree flatten them, so the order is stable), namedtuples by field name, lists and tuples by index."""
    if isinstance(value, dict):
        return [(key, value[key]) for key in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        fields = getattr(value, "_fields", None)
        return list(zip(fields, value)) if fields else list(enumerate(value))
    return None


def leaves(batch: Any) -> List[Tuple[str, Any]]:
    """``(path, leaf)`` pairs in ``signature_of``'s order and with its paths. A leaf is anything but a
    container or None: composite tensors stay whole and Python scalars are kept (signature_of splits
    the former and drops the latter)."""
    out: List[Tuple[str, Any]] = []
    for name, part in top_level(batch):
        _collect(part, name, out)
    return out


def _collect(value: Any, path: str, out: List[Tuple[str, Any]]) -> None:
    if value is None:
        return
    items = children(value)
    if items is None:
        out.append((path, value))
        return
    for key, item in items:
        _collect(item, f"{path}/{key}", out)


def map_leaves(batch: Any, fn: Callable[[str, Any], Any]) -> Any:
    """``batch`` with every leaf (as in ``leaves``) replaced by ``fn(path, leaf)``, visited in the same
    order. Containers keep their type (a dict its key order); None stays None."""
    if _splits(batch):
        return _rebuild(batch, [_map(part, name, fn) for name, part in top_level(batch)])
    return _map(batch, "x", fn)


def _map(value: Any, path: str, fn: Callable[[str, Any], Any]) -> Any:
    if value is None:
        return None
    items = children(value)
    if items is None:
        return fn(path, value)
    done = [(key, _map(item, f"{path}/{key}", fn)) for key, item in items]
    if isinstance(value, dict):
        by_key = dict(done)
        return {key: by_key[key] for key in value}  # visited sorted, rebuilt in the user's order
    return _rebuild(value, [item for _, item in done])


def _rebuild(like: Any, items: list) -> Any:
    if isinstance(like, list):
        return items
    if hasattr(like, "_fields"):
        return type(like)(*items)
    return tuple(items)


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
    items = children(value)
    if items is not None:
        for key, item in items:
            _walk(item, f"{path}/{key}", out, unwrap)
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
    for name, part in top_level(batch):
        _walk(part, name, out, unwrap)
    return tuple(out)


class SameShapes:
    """A quick test that a batch has the signature of the batch it was made from, without walking it:
    the step path's steady case (a jitted step of ~0.25 ms cannot afford a walk per step).

    It covers the batches Keras hands a step most often: ``x``, ``(x, y)`` or ``(x, y, sample_weight)``
    whose parts are numpy arrays or jax.Arrays, dicts of them, or None. ``of`` returns None for any
    other batch (its signature is then built in full). ``matches`` is True only for a batch whose
    ``signature_of`` equals the reference's: the same structure, leaf types, shapes and dtypes.

    Example:
        >>> import numpy as np
        >>> same = SameShapes.of((np.zeros((8, 4)), np.zeros((8, 1))))
        >>> same.matches((np.ones((8, 4)), np.ones((8, 1)))), same.matches((np.ones((7, 4)), np.ones((7, 1))))
        (True, False)
    """

    __slots__ = ("_kind", "_parts", "_whole", "matches")

    def __init__(self, kind: Any, parts: tuple, whole: bool):
        self._kind = kind  # the batch's type (a tuple or list of parts, or the one part's type)
        self._parts = parts  # per part: None, (type, shape, dtype), or a dict of those by key
        self._whole = whole  # the batch is one part (not a tuple or list of parts)
        # ``matches(batch)``: one call per steady step, so the usual batch, a tuple of 1-3 arrays, gets a
        # test with nothing but its own compares (_leaves_test); anything else the general one.
        leaves = not whole and kind is tuple and all(type(part) is tuple for part in parts)
        self.matches: Callable[[Any], bool] = _leaves_test(parts) if leaves else self._general

    @classmethod
    def of(cls, batch: Any) -> Optional["SameShapes"]:
        whole = not _splits(batch)
        parts = tuple(_quick_part(part) for part in ((batch,) if whole else batch))
        if any(part is _UNSUPPORTED for part in parts):
            return None
        return cls(type(batch), parts, whole)

    def _general(self, batch: Any) -> bool:
        if type(batch) is not self._kind:
            return False
        if self._whole:
            return _part_matches(batch, self._parts[0])
        parts = self._parts
        if len(batch) != len(parts):
            return False
        for value, ref in zip(batch, parts):
            if not _part_matches(value, ref):
                return False
        return True


def _leaves_test(parts: tuple) -> Callable[[Any], bool]:
    """``matches`` for a tuple of 1-3 array leaves, unrolled."""
    (t0, s0, d0) = parts[0]
    if len(parts) == 1:

        def one(b: Any) -> bool:
            return type(b) is tuple and len(b) == 1 and type(b[0]) is t0 and b[0].shape == s0 and b[0].dtype == d0

        return one
    (t1, s1, d1) = parts[1]
    if len(parts) == 2:

        def two(b: Any) -> bool:
            if type(b) is not tuple or len(b) != 2:
                return False
            x, y = b
            return (
                type(x) is t0 and type(y) is t1 and x.shape == s0 and y.shape == s1 and x.dtype == d0 and y.dtype == d1
            )

        return two
    (t2, s2, d2) = parts[2]

    def three(b: Any) -> bool:
        if type(b) is not tuple or len(b) != 3:
            return False
        x, y, w = b
        return (
            type(x) is t0
            and type(y) is t1
            and type(w) is t2
            and x.shape == s0
            and y.shape == s1
            and w.shape == s2
            and x.dtype == d0
            and y.dtype == d1
            and w.dtype == d2
        )

    return three


_UNSUPPORTED = object()


def _quick_leaf(value: Any) -> Any:
    if _plain_leaf(value) != 2:  # numpy arrays and jax.Arrays only: their .shape is a tuple of ints
        return _UNSUPPORTED
    return (type(value), value.shape, value.dtype)


def _quick_part(part: Any) -> Any:
    if part is None:
        return None
    if type(part) is dict:
        if not all(isinstance(key, str) for key in part):
            return _UNSUPPORTED
        leaves = {key: _quick_leaf(value) for key, value in part.items()}
        return _UNSUPPORTED if any(leaf is _UNSUPPORTED for leaf in leaves.values()) else leaves
    return _quick_leaf(part)


def _part_matches(value: Any, ref: Any) -> bool:
    if ref is None:
        return value is None
    if type(ref) is dict:
        if type(value) is not dict or value.keys() != ref.keys():
            return False
        return all(_leaf_matches(value[key], leaf) for key, leaf in ref.items())
    return _leaf_matches(value, ref)


def _leaf_matches(value: Any, ref: tuple) -> bool:
    kind, shape, dtype = ref
    if type(value) is not kind or value.shape != shape:
        return False
    other = value.dtype
    return other is dtype or other == dtype


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
