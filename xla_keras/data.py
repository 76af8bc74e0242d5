"""Apply a recompilation-storm fix to an input pipeline.

A storm's ``fix`` says which inputs to pad to which lengths and how many rows
a batch must have. This module applies it, so that::

    ds = xla_keras.data.apply_fix(ds, storm.fix)

replaces ``exec(storm.fix["code"])``. It takes a ``tf.data.Dataset`` (and
returns one) or the data Keras's other backends take: a
``keras.utils.PyDataset``, a list of batches or a generator of batches (and
returns a ``keras.utils.PyDataset``). TensorFlow is imported only when the
data is a ``tf.data.Dataset``: Keras's JAX backend needs no TensorFlow here.

Leaves are named as the monitor's signatures name them
(``xla_keras.signatures.signature_of``): a batch that is a tuple of 1..3
parts is ``x``, ``y``, ``sample_weight``, anything else is ``x``; dicts add
``/key``, tuples and lists ``/index``, namedtuples ``/field``. Axes in a fix
are axes of a batch (axis 0 is the rows).
"""

from __future__ import annotations

import bisect
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

__all__ = ["apply_fix", "pad_to_lengths", "bucket_by_length", "APPLIED_KINDS"]

# The kinds apply_fix applies; bucket_by_length has its own function (it needs unbatched data).
APPLIED_KINDS = ("pad_to_lengths", "fixed_batch_size", "drop_remainder", "pad_remainder")

_TOP_LEVEL_NAMES = ("x", "y", "sample_weight")  # as signatures.signature_of names a batch tuple
_REMAINDERS = ("drop", "pad", None)
_INT32_MAX = 2**31 - 1  # tf.shape's dtype bounds any length a padded axis can take

_ACCEPTED = (
    "apply_fix accepts the kinds "
    + ", ".join(repr(k) for k in APPLIED_KINDS)
    + "; a 'bucket_by_length' fix goes to xla_keras.data.bucket_by_length(unbatched, fix, batch_size)"
)


# ------------------------------------------------------------------ fixes


class _Target(NamedTuple):
    path: str
    axis: int
    table: Tuple[int, ...]  # the lengths the axis may take, ascending; empty for bucket targets


class _Bucketing(NamedTuple):
    path: str  # the leaf whose real length picks the bucket
    axis: int  # batched axis, as in the fix
    table: Tuple[int, ...]
    targets: Tuple[_Target, ...]
    batch_size: int
    remainder: Optional[str]
    rank: Optional[int] = None  # the length leaf's rank in a batch, when the fix says (an example: one less)


def _check_rank(spec: "_Bucketing", rank: Optional[int]) -> None:
    """Batched data handed to bucket_by_length would be grouped as if each batch were one example."""
    if spec.rank is not None and rank is not None and rank != spec.rank - 1:
        raise ValueError(
            f"bucket_by_length takes single examples: input {spec.path!r} has {rank} axes here, but an example "
            f"of the data the fix was made for has {spec.rank - 1} (a batch has {spec.rank}). Pass the data "
            "before you batch it (e.g. the dataset before .padded_batch(...))."
        )


def _check_fix(fix: Any) -> str:
    if not isinstance(fix, dict):
        raise ValueError(f"A fix is a dict (a storm's `.fix`); got {type(fix).__name__}.")
    if "kind" not in fix:
        raise ValueError(f"The fix has no 'kind' key (keys: {sorted(map(str, fix))}).")
    return fix["kind"]


def _get(d: Any, key: str, what: str) -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"The {what} is not a dict: {d!r}.")
    if key not in d:
        raise ValueError(f"The {what} has no {key!r} key (keys: {sorted(map(str, d))}).")
    return d[key]


def _count(value: Any, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}; got {value!r}.")
    return int(value)


def _length_table(lengths: Any, what: str) -> Tuple[int, ...]:
    """The advised lengths, then the last one doubled up to int32's range.

    Data longer than every advised length then costs a few more compiles (one
    per doubling), never one per length, never an error, never a truncation.
    """
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise ValueError(f"{what} must be a non-empty list of lengths; got {lengths!r}.")
    table = sorted({_count(n, f"each of {what}") for n in lengths})
    while table[-1] * 2 <= _INT32_MAX:
        table.append(table[-1] * 2)
    return tuple(table)


def _padded_length(n: int, table: Tuple[int, ...]) -> int:
    i = bisect.bisect_left(table, n)
    return table[i] if i < len(table) else n


def _targets(fix: dict, what: str, lengths: bool, min_axis: int) -> Tuple[_Target, ...]:
    targets = _get(fix, "targets", f"{what} fix")
    if not isinstance(targets, (list, tuple)):
        raise ValueError(f"The {what} fix's 'targets' must be a list of dicts; got {targets!r}.")
    out = []
    for i, target in enumerate(targets):
        name = f"{what} fix's target {i}"
        path = _get(target, "path", name)
        if "@" in str(path):
            continue  # another replica's view of a leaf that is padded under its own path
        axis = _count(_get(target, "axis", name), f"the axis of {name}", min_axis)
        table = _length_table(_get(target, "lengths", name), f"the lengths of {name}") if lengths else ()
        out.append(_Target(str(path), axis, table))
    return tuple(out)


def _remainder(fix: dict, default: Optional[str] = None) -> Tuple[Optional[str], Optional[int]]:
    """(remainder, batch_size); remainder None when there is no batch size to hold batches to."""
    remainder = fix.get("remainder", default)
    if remainder not in _REMAINDERS:
        raise ValueError(f"The fix's 'remainder' must be 'drop', 'pad' or None; got {remainder!r}.")
    batch_size = fix.get("batch_size")
    if batch_size is None:
        return None, None
    return remainder, _count(batch_size, "The fix's 'batch_size'")


def _refuse(kind: Any) -> ValueError:
    if kind == "consistent_structure":
        return ValueError(
            "The fix 'consistent_structure' cannot be applied mechanically: the batches change structure "
            "or dtype (leaves appear, vanish or change dtype or rank), and which one is right is yours to "
            "say. Feed every batch with the same structure and dtypes: cast in the input pipeline (e.g. "
            "`ds.map(lambda x, y: (tf.cast(x, tf.float32), y))`) and always yield the same keys. " + _ACCEPTED + "."
        )
    if kind == "unknown":
        return ValueError(
            "The fix 'unknown' cannot be applied mechanically: no single input explained the new input "
            "signatures. Compare the storm's `varying` entries with your pipeline. " + _ACCEPTED + "."
        )
    if kind == "bucket_by_length":
        return ValueError(
            "A 'bucket_by_length' fix groups single examples, not batches: call "
            "`xla_keras.data.bucket_by_length(unbatched, fix, batch_size)` on the data before you batch "
            "it (it batches), instead of apply_fix."
        )
    return ValueError(f"The fix kind {kind!r} cannot be applied mechanically. " + _ACCEPTED + ".")


def _bucketing(fix: Any, batch_size: Optional[int]) -> _Bucketing:
    kind = _check_fix(fix)
    outer: dict = {}
    if kind == "pad_to_lengths":
        if not isinstance(fix.get("bucket_by_length"), dict):
            raise ValueError(
                "This pad_to_lengths fix has no 'bucket_by_length' part (the monitor offers bucketing only "
                "when it can read a real length): pad the batches with "
                "`xla_keras.data.apply_fix(data, fix)` instead."
            )
        outer, fix = fix, fix["bucket_by_length"]
    elif kind != "bucket_by_length":
        raise ValueError(
            f"bucket_by_length takes a 'bucket_by_length' fix (or a 'pad_to_lengths' fix "
            f"that has one); got kind {kind!r}. " + _ACCEPTED + "."
        )
    length_of = _get(fix, "length_of", "bucket_by_length fix")
    path = str(_get(length_of, "path", "bucket_by_length fix's 'length_of'"))
    # Element axis = batched axis - 1: the rows axis has no element counterpart.
    axis = _count(
        _get(length_of, "axis", "bucket_by_length fix's 'length_of'"),
        "the axis of the bucket_by_length fix's 'length_of'",
        1,
    )
    table = _length_table(_get(fix, "lengths", "bucket_by_length fix"), "the bucket_by_length fix's 'lengths'")
    targets = _targets(fix, "bucket_by_length", lengths=False, min_axis=1)
    if batch_size is None:
        batch_size = fix.get("batch_size", outer.get("batch_size"))
    if batch_size is None:
        raise ValueError("bucket_by_length needs a batch size: the fix has none, pass batch_size=.")
    batch_size = _count(batch_size, "batch_size")
    remainder = fix.get("remainder", outer.get("remainder"))
    if remainder not in _REMAINDERS:
        raise ValueError(f"The fix's 'remainder' must be 'drop', 'pad' or None; got {remainder!r}.")
    rank = length_of.get("rank")
    rank = _count(rank, "the rank of the bucket_by_length fix's 'length_of'", 1) if rank is not None else None
    return _Bucketing(path, axis, table, targets, batch_size, remainder, rank)


# ------------------------------------------------------------------ structures


def _map_leaves(batch: Any, fn: Callable[[str, Any], Any]) -> Any:
    """``batch`` with every leaf replaced by ``fn(path, leaf)``, paths as signature_of names them."""
    if isinstance(batch, (tuple, list)) and 1 <= len(batch) <= 3:
        parts = [_map_walk(part, name, fn) for name, part in zip(_TOP_LEVEL_NAMES, batch)]
        return _rebuild(batch, parts)
    return _map_walk(batch, "x", fn)


def _map_walk(value: Any, path: str, fn: Callable[[str, Any], Any]) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        # Visited in signature_of's order (keys sorted, as tf.nest flattens), rebuilt in the user's.
        done = {key: _map_walk(value[key], f"{path}/{key}", fn) for key in sorted(value, key=str)}
        return {key: done[key] for key in value}
    if isinstance(value, (tuple, list)):
        fields = getattr(value, "_fields", None)
        return _rebuild(
            value, [_map_walk(item, f"{path}/{fields[i] if fields else i}", fn) for i, item in enumerate(value)]
        )
    return fn(path, value)


def _rebuild(like: Any, items: list) -> Any:
    if isinstance(like, list):
        return items
    if hasattr(like, "_fields"):
        return type(like)(*items)
    return tuple(items)


def _leaves(batch: Any) -> List[Tuple[str, Any]]:
    """(path, leaf) pairs in signature_of's order."""
    out: List[Tuple[str, Any]] = []
    _map_leaves(batch, lambda path, leaf: out.append((path, leaf)))
    return out


def _leaf_at(element: Any, path: str) -> Any:
    for leaf_path, leaf in _leaves(element):
        if leaf_path == path:
            return leaf
    paths = ", ".join(repr(p) for p, _ in _leaves(element)) or "none"
    raise ValueError(f"The data has no input {path!r} (its inputs: {paths}): was the fix made for other data?")


# ------------------------------------------------------------------ padding, either backend


class _NumpyOps:
    """Array operations on numpy data: no TensorFlow, no Keras."""

    @staticmethod
    def size(leaf: Any, axis: int) -> int:
        return np.shape(leaf)[axis]

    @staticmethod
    def rank(leaf: Any) -> Optional[int]:
        return np.ndim(leaf)

    @staticmethod
    def pad(leaf: Any, axis: int, target: int) -> Any:
        leaf = np.asarray(leaf)
        extra = target - leaf.shape[axis]
        if extra <= 0:
            return leaf
        widths = [(0, 0)] * leaf.ndim
        widths[axis] = (0, extra)
        return np.pad(leaf, widths)  # zeros at the end (False for bool)

    @staticmethod
    def repeat_last_row(leaf: Any, target: int) -> Any:
        leaf = np.asarray(leaf)
        extra = target - leaf.shape[0]
        if extra <= 0:
            return leaf
        return np.concatenate([leaf, np.repeat(leaf[-1:], extra, axis=0)])

    @staticmethod
    def padded_length(n: int, table: Tuple[int, ...]) -> int:
        return _padded_length(n, table)

    @staticmethod
    def maximum(a: int, b: int) -> int:
        return max(a, b)

    @staticmethod
    def real_rows(rows: int, total: int) -> Any:
        return (np.arange(total) < rows).astype(np.float32)

    @staticmethod
    def real_length(leaf: Any, axis: int) -> int:
        nonzero = np.asarray(leaf) != 0
        others = tuple(a for a in range(nonzero.ndim) if a != axis)
        return int((nonzero.any(axis=others) if others else nonzero).sum())


class _TfOps:
    """The same operations on symbolic tensors inside tf.data functions: dynamic
    shapes, so they work where static dimensions are unknown."""

    def __init__(self, tf: Any):
        self.tf = tf

    def size(self, leaf: Any, axis: int) -> Any:
        return self.tf.shape(leaf)[axis]

    def rank(self, leaf: Any) -> Optional[int]:
        return leaf.shape.rank

    def pad(self, leaf: Any, axis: int, target: Any) -> Any:
        tf = self.tf
        extra = tf.maximum(tf.cast(target, tf.int32) - tf.shape(leaf)[axis], 0)
        paddings = tf.scatter_nd([[axis, 1]], tf.reshape(extra, [1]), tf.stack([tf.rank(leaf), 2]))
        out = tf.pad(leaf, paddings, constant_values=tf.zeros([], leaf.dtype))
        if leaf.shape.rank is not None:
            # tf.pad with computed paddings forgets every static dimension; layers such as
            # Dense need the others (features) to build.
            dims = leaf.shape.as_list()
            dims[axis] = None
            out.set_shape(dims)
        return out

    def repeat_last_row(self, leaf: Any, target: Any) -> Any:
        tf = self.tf
        extra = tf.maximum(tf.cast(target, tf.int32) - tf.shape(leaf)[0], 0)
        out = tf.concat([leaf, tf.repeat(leaf[-1:], extra, axis=0)], axis=0)
        if leaf.shape.rank is not None:
            out.set_shape([None] + leaf.shape.as_list()[1:])
        return out

    def padded_length(self, n: Any, table: Tuple[int, ...]) -> Any:
        tf = self.tf
        lengths = tf.constant(table, tf.int32)
        return tf.maximum(tf.reduce_min(tf.where(lengths >= n, lengths, _INT32_MAX)), n)

    def maximum(self, a: Any, b: Any) -> Any:
        return self.tf.maximum(a, b)

    def real_rows(self, rows: Any, total: Any) -> Any:
        return self.tf.cast(self.tf.range(total) < rows, self.tf.float32)

    def real_length(self, leaf: Any, axis: int) -> Any:
        tf = self.tf
        if leaf.shape.rank is None:
            raise ValueError("bucket_by_length needs the length leaf's rank to be known.")
        nonzero = tf.not_equal(leaf, tf.zeros([], leaf.dtype))
        others = [a for a in range(leaf.shape.rank) if a != axis]
        if others:
            nonzero = tf.reduce_any(nonzero, axis=others)
        return tf.reduce_sum(tf.cast(nonzero, tf.int32))


_NUMPY = _NumpyOps()


def _pad_lengths(
    batch: Any, targets: Tuple[_Target, ...], ops: Any, length: Optional[Callable[[Any, _Target], Any]] = None
) -> Any:
    """Pad each target leaf at the end of its axis to ``length(size, target)``
    (default: the next length of the target's table)."""
    if not targets:
        return batch
    by_path: Dict[str, List[_Target]] = {}
    for target in targets:
        by_path.setdefault(target.path, []).append(target)
    found = []

    def pad(path: str, leaf: Any) -> Any:
        for target in by_path.get(path, ()):
            rank = ops.rank(leaf)
            if rank is not None and target.axis >= rank:
                raise ValueError(
                    f"Input {path!r} has {rank} axes: it has no axis {target.axis} to pad "
                    "(the fix's axes are those of a batch; axis 0 is the rows)."
                )
            n = ops.size(leaf, target.axis)
            leaf = ops.pad(leaf, target.axis, length(n, target) if length else ops.padded_length(n, target.table))
            found.append(path)
        return leaf

    batch = _map_leaves(batch, pad)
    if not found:
        # One missing target is normal (predict data has no `y`); all of them means other data.
        paths = ", ".join(repr(p) for p, _ in _leaves(batch)) or "none"
        raise ValueError(
            f"None of the fix's inputs ({', '.join(repr(p) for p in by_path)}) is in the data "
            f"(its inputs: {paths}): was the fix made for other data, or batched otherwise?"
        )
    return batch


def _rows(batch: Any, ops: Any) -> Any:
    leaves = [leaf for _, leaf in _leaves(batch) if ops.rank(leaf) != 0]
    if not leaves:
        raise ValueError("A batch has no array with rows to count.")
    return ops.size(leaves[0], 0)


def _pad_rows(batch: Any, batch_size: int, ops: Any) -> Any:
    """Pad a short batch's rows to ``batch_size`` with copies of its last row; padded rows weigh
    nothing. Copies, not zeros: an all-padding row makes a masked model divide by zero (a NaN
    output, and NaN * 0 is NaN in the weighted loss and metrics); a copy keeps outputs finite.

    A batch with ``y`` but no ``sample_weight`` gets one (1 for real rows, 0
    for padded ones) whatever its rows, so every batch keeps one structure;
    a ``sample_weight`` of the user's is padded with zeros.
    """
    rows = _rows(batch, ops)
    total = ops.maximum(rows, batch_size)

    def pad(path: str, leaf: Any) -> Any:
        if ops.rank(leaf) == 0:
            return leaf
        if path == "sample_weight" or path.startswith("sample_weight/"):
            return ops.pad(leaf, 0, total)
        return ops.repeat_last_row(leaf, total)

    batch = _map_leaves(batch, pad)
    if isinstance(batch, (tuple, list)) and len(batch) in (2, 3) and batch[1] is not None:
        if len(batch) == 2 or batch[2] is None:
            return (batch[0], batch[1], ops.real_rows(rows, total))
    return batch


# ------------------------------------------------------------------ tf.data


def _is_tf_dataset(data: Any) -> bool:
    # The module check comes first so that other data never needs TensorFlow imported.
    if not type(data).__module__.startswith("tensorflow"):
        return False
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(data, tf.data.Dataset)


def _tf() -> Any:
    import tensorflow as tf

    return tf


def _element_fn(ds: Any, fn: Callable[[Any], Any]) -> Callable[..., Any]:
    """``fn`` over whole elements: tf.data calls its functions with a tuple element unpacked
    (exactly ``type(element) is tuple``), which would hide ``(x,)`` from ``x``."""
    unpacked = type(ds.element_spec) is tuple
    # Plain Python over the structure, no control flow on tensors: nothing for AutoGraph to convert
    # (it would only warn that it cannot).
    return _tf().autograph.experimental.do_not_convert(lambda *args: fn(tuple(args) if unpacked else args[0]))


def _tf_map(ds: Any, fn: Callable[[Any], Any]) -> Any:
    tf = _tf()
    return ds.map(_element_fn(ds, fn), num_parallel_calls=tf.data.AUTOTUNE)


def _apply_tf(
    ds: Any,
    targets: Tuple[_Target, ...],
    batch_size: Optional[int],
    remainder: Optional[str],
    rebatch: Optional[int] = None,
) -> Any:
    ops = _TfOps(_tf())
    if rebatch is not None:
        ds = ds.rebatch(rebatch, drop_remainder=remainder == "drop")
    elif remainder == "drop":
        ds = ds.filter(_element_fn(ds, lambda batch: _rows(batch, ops) >= batch_size))

    def fix(batch: Any) -> Any:
        batch = _pad_lengths(batch, targets, ops)
        return _pad_rows(batch, batch_size, ops) if remainder == "pad" else batch

    return _tf_map(ds, fix) if targets or remainder == "pad" else ds


def _bucket_tf(ds: Any, spec: _Bucketing) -> Any:
    tf = _tf()
    ops = _TfOps(tf)
    table = tf.constant(spec.table, tf.int32)
    _check_rank(spec, _leaf_at(ds.element_spec, spec.path).shape.rank)

    def key(element: Any) -> Any:
        real = ops.real_length(_leaf_at(element, spec.path), spec.axis - 1)
        return tf.reduce_sum(tf.cast(table < real, tf.int64))  # index of the first length >= real

    def reduce(bucket: Any, window: Any) -> Any:
        batches = window.padded_batch(spec.batch_size, drop_remainder=spec.remainder == "drop")
        length = tf.gather(table, bucket)
        # max(): an element already padded past its real length keeps every position.
        return _tf_map(
            batches, lambda batch: _pad_lengths(batch, spec.targets, ops, lambda n, _: tf.maximum(n, length))
        )

    ds = ds.group_by_window(
        key_func=_element_fn(ds, key),
        window_size=spec.batch_size,
        reduce_func=tf.autograph.experimental.do_not_convert(reduce),
    )
    if spec.remainder == "pad":
        ds = _tf_map(ds, lambda batch: _pad_rows(batch, spec.batch_size, ops))
    return ds


# ------------------------------------------------------------------ numpy, generators, PyDataset


class _NumpyFix:
    """The per-batch part of a fix on numpy batches (a class, not a closure, so
    a multiprocessing PyDataset can pickle it)."""

    def __init__(self, targets: Tuple[_Target, ...], batch_size: Optional[int], remainder: Optional[str]):
        self.targets, self.batch_size, self.remainder = targets, batch_size, remainder

    def __call__(self, batch: Any, index: int) -> Any:
        if self.remainder == "drop" and _rows(batch, _NUMPY) < self.batch_size:
            # Dropping it here would shift every later index: a lazy sequence is only checked at its end.
            raise ValueError(
                f"Batch {index} has {_rows(batch, _NUMPY)} rows, fewer than {self.batch_size}, and is not the "
                "last: only a sequence's last batch can be dropped lazily. Rebatch the data to a fixed size "
                "first (or pass a generator: it is read into memory and every short batch is dropped)."
            )
        batch = _pad_lengths(batch, self.targets, _NUMPY)
        return _pad_rows(batch, self.batch_size, _NUMPY) if self.remainder == "pad" else batch


_BATCHES_CLASS = None


def _batches_class() -> type:
    """The PyDataset subclass, made on first use so that importing this module imports no Keras."""
    global _BATCHES_CLASS
    if _BATCHES_CLASS is None:
        import keras

        class _Batches(keras.utils.PyDataset):
            """Batches of ``source`` (indexable) through ``fix(batch, index)``, read lazily by index."""

            def __init__(self, source: Any, length: Optional[int], fix: Callable[[Any, int], Any], **kwargs: Any):
                super().__init__(**kwargs)
                self._source, self._length, self._fix = source, length, fix

            @property
            def num_batches(self) -> Optional[int]:
                return self._length

            def __len__(self) -> int:
                if self._length is None:
                    raise TypeError("This PyDataset is infinite: it has no len().")
                return self._length

            def __getitem__(self, index: int) -> Any:
                if self._length is not None:
                    if index < 0:
                        index += self._length
                    if not 0 <= index < self._length:
                        raise IndexError(f"batch index {index} out of range ({self._length} batches)")
                return self._fix(self._source[index], index)

            def on_epoch_begin(self) -> None:
                getattr(self._source, "on_epoch_begin", lambda: None)()

            def on_epoch_end(self) -> None:
                getattr(self._source, "on_epoch_end", lambda: None)()

        # Module-level names, so pickle (multiprocessing workers) finds the class again.
        _Batches.__module__, _Batches.__qualname__ = __name__, "_Batches"
        _BATCHES_CLASS = _Batches
    return _BATCHES_CLASS


def __getattr__(name: str) -> Any:
    if name == "_Batches":  # unpickling in a worker process: build the class there too
        return _batches_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _pydataset(source: Any, length: Optional[int], fix: Callable[[Any, int], Any], like: Any = None) -> Any:
    # A PyDataset source keeps its parallelism: its __getitem__ now runs inside ours.
    kwargs = {}
    for name in ("workers", "use_multiprocessing", "max_queue_size"):
        if hasattr(like, name):
            kwargs[name] = getattr(like, name)
    return _batches_class()(source, length, fix, **kwargs)


_BATCHES_HINT = (
    "the batches the model is fed: a tf.data.Dataset, a keras.utils.PyDataset, a list or a "
    "generator of batches. Batch whole arrays first, e.g. "
    "`[(x[i:i + n], y[i:i + n]) for i in range(0, len(x), n)]`"
)
_EXAMPLES_HINT = (
    "single examples: a tf.data.Dataset, or a list or generator of examples, e.g. "
    "`list(zip(x, y))` for arrays of examples"
)


def _refuse_arrays(data: Any, what: str, hint: str) -> None:
    """Whole arrays (or one batch) look like a sequence of rows: refuse them rather than guess."""
    if type(data).__module__.startswith("tensorflow"):
        raise ValueError(
            f"{what} takes a tf.data.Dataset, not a {type(data).__name__}: apply the fix to the "
            "dataset before distributing it."
        )
    if isinstance(data, (dict, tuple, str)) or (hasattr(data, "shape") and hasattr(data, "dtype")):
        raise ValueError(f"{what} takes {hint}; got a {type(data).__name__}.")


def _indexable(data: Any) -> Tuple[bool, Optional[int]]:
    """(whether ``data`` is read by index, its length: None for an infinite PyDataset)."""
    if not hasattr(data, "__getitem__"):
        return False, None
    if hasattr(type(data), "num_batches"):
        try:
            return True, data.num_batches
        except NotImplementedError:  # a PyDataset without num_batches nor __len__
            pass
    if hasattr(data, "__len__"):
        return True, len(data)
    return False, None


def _apply_numpy(data: Any, targets: Tuple[_Target, ...], batch_size: Optional[int], remainder: Optional[str]) -> Any:
    _refuse_arrays(data, "apply_fix", _BATCHES_HINT)
    fix = _NumpyFix(targets, batch_size, remainder)
    indexable, length = _indexable(data)
    if not indexable:
        try:
            batches = list(data)
        except TypeError:
            raise ValueError(
                f"apply_fix takes a tf.data.Dataset, a PyDataset, or a list or generator of "
                f"batches; got {type(data).__name__}."
            ) from None
        if remainder == "drop":
            batches = [b for b in batches if _rows(b, _NUMPY) >= batch_size]
        source, length, like = batches, len(batches), None
    else:
        source, like = data, data
        if remainder == "drop" and length and _rows(data[length - 1], _NUMPY) < batch_size:
            length -= 1
    if length != 0:
        fix(source[0], 0)  # a fix made for other data fails here, not in the middle of fit
    return _pydataset(source, length, fix, like)


def _read_all(data: Any, what: str, hint: str) -> List[Any]:
    _refuse_arrays(data, what, hint)
    indexable, length = _indexable(data)
    if indexable:
        if length is None:
            raise ValueError(f"{what} reads the whole data and cannot take an infinite PyDataset.")
        return [data[i] for i in range(length)]
    try:
        return list(data)
    except TypeError:
        raise ValueError(f"{what} takes a list, a sequence or a generator; got {type(data).__name__}.") from None


def _rebatch_numpy(data: Any, size: int, remainder: Optional[str]) -> Any:
    batches = _read_all(data, "apply_fix (fixed_batch_size)", _BATCHES_HINT)
    if not batches:
        return _pydataset([], 0, _NumpyFix((), size, remainder))
    columns: Dict[str, list] = {}
    for batch in batches:
        for path, leaf in _leaves(batch):
            columns.setdefault(path, []).append(np.asarray(leaf))
    if any(len(column) != len(batches) for column in columns.values()):
        raise ValueError("fixed_batch_size needs every batch to have the same inputs.")
    try:
        joined = {path: np.concatenate(column) for path, column in columns.items()}
    except ValueError as e:
        raise ValueError(
            f"fixed_batch_size joins batches along their rows; their other axes differ ({e}): "
            "pad them to fixed lengths first."
        ) from None
    total = len(next(iter(joined.values())))
    stop = total - total % size if remainder == "drop" else total
    rebatched = [_map_leaves(batches[0], lambda path, _, i=i: joined[path][i : i + size]) for i in range(0, stop, size)]
    # Dropping is done: what is left of the fix is per batch (pad the last one's rows).
    return _pydataset(rebatched, len(rebatched), _NumpyFix((), size, None if remainder == "drop" else remainder))


def _stack(elements: List[Any]) -> Any:
    """One batch of elements, every leaf padded at the end to the batch's max on each axis (as
    tf.data's padded_batch)."""
    columns: Dict[str, list] = {}
    for element in elements:
        for path, leaf in _leaves(element):
            columns.setdefault(path, []).append(np.asarray(leaf))
    stacked = {}
    for path, column in columns.items():
        if len(column) != len(elements) or len({a.ndim for a in column}) != 1:
            raise ValueError(
                f"Input {path!r} is missing from some elements or changes rank: "
                "bucket_by_length needs elements of one structure."
            )
        if column[0].ndim:
            shape = np.max([a.shape for a in column], axis=0)
            column = [np.pad(a, [(0, int(m) - n) for m, n in zip(shape, a.shape)]) for a in column]
        stacked[path] = np.stack(column)
    return _map_leaves(elements[0], lambda path, _: stacked[path])


def _bucket_numpy(data: Any, spec: _Bucketing) -> Any:
    elements = _read_all(data, "bucket_by_length", _EXAMPLES_HINT)
    open_buckets: Dict[int, list] = {}
    groups = []
    if elements:
        _check_rank(spec, np.ndim(_leaf_at(elements[0], spec.path)))
    for element in elements:
        real = _NUMPY.real_length(_leaf_at(element, spec.path), spec.axis - 1)
        bucket = bisect.bisect_left(spec.table, real)
        group = open_buckets.setdefault(bucket, [])
        group.append(element)
        if len(group) == spec.batch_size:
            groups.append((bucket, group))
            open_buckets[bucket] = []
    if spec.remainder != "drop":
        groups += [(bucket, group) for bucket, group in open_buckets.items() if group]
    batches = []
    for bucket, group in groups:
        length = spec.table[bucket] if bucket < len(spec.table) else 0
        # max(): an element already padded past its real length keeps every position.
        batches.append(_pad_lengths(_stack(group), spec.targets, _NUMPY, lambda n, _, floor=length: max(n, floor)))
    # Dropping is done: what is left of the fix is per batch (pad the partial ones' rows).
    remainder = None if spec.remainder == "drop" else spec.remainder
    return _pydataset(batches, len(batches), _NumpyFix((), spec.batch_size, remainder))


# ------------------------------------------------------------------ public API


def pad_to_lengths(data: Any, fix: Dict[str, Any]) -> Any:
    """Pad every batch's varying inputs up to the lengths a ``pad_to_lengths`` fix advises.

    Each of the fix's ``targets`` (an input's path and batched axis) is
    padded with zeros (False for bool) at the end of its axis, up to the
    first advised length that holds it. Longer than every advised length:
    the last length doubled as often as needed (a few more compiles, never
    a truncation, never an error). Rows are left alone: ``apply_fix`` also
    applies the fix's ``remainder`` rule.

    Args:
        data: the batches, as the model is fed them: a ``tf.data.Dataset``,
            a ``keras.utils.PyDataset`` (or any object with ``__len__`` and
            ``__getitem__``, such as a list of batches: read lazily by
            index), or an iterable or generator of batches (read once into
            memory). TensorFlow is imported only for a ``tf.data.Dataset``.
        fix: a ``pad_to_lengths`` fix (``storm.fix``).

    Returns:
        A ``tf.data.Dataset`` for a ``tf.data.Dataset``, else a
        ``keras.utils.PyDataset`` of numpy batches.

    Example:

    ```python
    fix = {"kind": "pad_to_lengths",
           "targets": [{"path": "x/tokens", "axis": 1, "lengths": [16, 32, 64]},
                       {"path": "x/mask", "axis": 1, "lengths": [16, 32, 64]}]}
    ds = xla_keras.data.pad_to_lengths(ds, fix)  # a batch of length 20 becomes 32
    ```
    """
    kind = _check_fix(fix)
    if kind != "pad_to_lengths":
        raise ValueError(f"pad_to_lengths takes a 'pad_to_lengths' fix; got kind {kind!r} (use apply_fix).")
    targets = _targets(fix, "pad_to_lengths", lengths=True, min_axis=0)
    if _is_tf_dataset(data):
        return _apply_tf(data, targets, None, None)
    return _apply_numpy(data, targets, None, None)


def apply_fix(data: Any, fix: Dict[str, Any]) -> Any:
    """Apply a recompilation storm's fix to the batches the model is fed.

    The kinds it applies:

    - ``pad_to_lengths``: pads every target input up to its advised lengths
      (see ``pad_to_lengths``), then applies the remainder rule.
    - ``fixed_batch_size``: re-batches to exactly ``size`` rows, then applies
      the remainder rule. On numpy data this reads every batch into memory.
    - ``drop_remainder`` / ``pad_remainder``: the remainder rule only.

    The remainder rule (``fix["remainder"]``, with ``fix["batch_size"]``):
    ``"drop"`` (training) drops batches with fewer rows than ``batch_size``.
    ``"pad"`` (validation, predict: every example kept) pads a short batch's
    rows with zeros up to ``batch_size`` and makes the padded rows weigh
    nothing: a ``sample_weight`` part is padded with zeros, and a batch with
    ``x`` and ``y`` but no ``sample_weight`` gets one (1.0 for real rows,
    0.0 for padded rows) on every batch, so all batches keep one structure
    (this conflicts with ``fit(class_weight=...)``: fold class weights into
    sample weights instead). A batch of ``x`` only (predict) just gains rows:
    its predictions gain as many rows at the end, so cut them with
    ``predictions[:n]``. ``None``, or no batch size: rows are left alone.

    Args:
        data: the batches, as the model is fed them: a ``tf.data.Dataset``,
            a ``keras.utils.PyDataset`` (or any object with ``__len__`` and
            ``__getitem__``, such as a list of batches: read lazily by
            index; with ``"drop"`` its last batch is read once to decide the
            length, and only the last batch may be short), or an iterable or
            generator of batches (read once into memory; with ``"drop"``
            every short batch is dropped). TensorFlow is imported only for a
            ``tf.data.Dataset``.
        fix: a storm's ``fix`` dict. Unknown keys are ignored.

    Returns:
        A ``tf.data.Dataset`` for a ``tf.data.Dataset``, else a
        ``keras.utils.PyDataset`` of numpy batches (Keras's ``shuffle``
        shuffles its batch order).

    Raises:
        ValueError: for a fix that cannot be applied mechanically
            (``consistent_structure``, ``unknown``), a ``bucket_by_length``
            fix (call ``bucket_by_length`` on unbatched data), a fix missing
            a key, or a fix whose inputs are not in the data.

    Example:

    ```python
    monitor = xla_keras.XlaMonitor()
    model.fit(train_ds, callbacks=[monitor])
    for storm in monitor.report.storms:
        print(storm.advice)
    train_ds = xla_keras.data.apply_fix(train_ds, monitor.report.storms[0].fix)
    model.fit(train_ds, callbacks=[monitor])  # the advised shapes only
    ```
    """
    kind = _check_fix(fix)
    if kind == "pad_to_lengths":
        targets = _targets(fix, "pad_to_lengths", lengths=True, min_axis=0)
        remainder, batch_size = _remainder(fix)
    elif kind == "fixed_batch_size":
        size = _count(_get(fix, "size", "fixed_batch_size fix"), "The fixed_batch_size fix's 'size'")
        remainder = fix.get("remainder")
        if remainder not in _REMAINDERS:
            raise ValueError(f"The fix's 'remainder' must be 'drop', 'pad' or None; got {remainder!r}.")
        if _is_tf_dataset(data):
            return _apply_tf(data, (), size, remainder, rebatch=size)
        return _rebatch_numpy(data, size, remainder)
    elif kind in ("drop_remainder", "pad_remainder"):
        _get(fix, "batch_size", f"{kind} fix")
        targets = ()
        remainder, batch_size = _remainder(fix, default="drop" if kind == "drop_remainder" else "pad")
        if batch_size is None:
            raise ValueError(f"The {kind} fix's 'batch_size' is None: there is no batch size to hold to.")
    else:
        raise _refuse(kind)
    if _is_tf_dataset(data):
        return _apply_tf(data, targets, batch_size, remainder)
    return _apply_numpy(data, targets, batch_size, remainder)


def bucket_by_length(data: Any, fix: Dict[str, Any], batch_size: Optional[int] = None) -> Any:
    """Batch single examples by their real length, each batch padded to its bucket's length.

    Less padding than ``apply_fix``'s ``pad_to_lengths`` (short examples
    are batched with short ones) for the same compiles. The real length of
    an example is the number of positions along the ``length_of`` input's
    axis where it is nonzero (any nonzero across its other axes): tokens
    with 0 as padding (Keras's ``mask_zero``), or the ones of a mask. An
    example goes to the bucket of the first advised length that holds it
    (beyond the last: the last length doubled as often as needed, each its
    own bucket); every target input of a batch is padded with zeros at the
    end to its bucket's length (never cut: an example already padded past
    its real length keeps its positions), other inputs to the batch's
    longest, as ``padded_batch`` does. The remainder rule applies per
    bucket: ``"drop"`` drops each bucket's last partial batch, ``"pad"``
    pads its rows (see ``apply_fix``), ``None`` keeps it as it is.

    Args:
        data: single examples (unbatched; named like a batch's rows: a
            tuple of 1..3 parts is ``x``, ``y``, ``sample_weight``): a
            ``tf.data.Dataset``, or a list, sequence, iterable or generator
            of examples (read into memory; the batches are made at once).
        fix: a ``bucket_by_length`` fix, or a ``pad_to_lengths`` fix that
            holds one under ``"bucket_by_length"``.
        batch_size: examples per batch; default: the fix's ``batch_size``.

    Returns:
        A batched ``tf.data.Dataset`` (``group_by_window``) for a
        ``tf.data.Dataset``, else a ``keras.utils.PyDataset`` of numpy
        batches, in order of completion (Keras's ``shuffle`` shuffles batch
        order; shuffle examples before bucketing to vary their company).

    Example:

    ```python
    fix = monitor.report.storms[0].fix  # pad_to_lengths, with a "bucket_by_length" part
    examples = tf.data.Dataset.from_generator(...)  # unbatched: ({"tokens": ..., "mask": ...}, label)
    train_ds = xla_keras.data.bucket_by_length(examples.shuffle(10_000), fix, batch_size=32)
    ```
    """
    spec = _bucketing(fix, batch_size)
    if _is_tf_dataset(data):
        return _bucket_tf(data, spec)
    return _bucket_numpy(data, spec)
