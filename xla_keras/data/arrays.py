"""Fixes on numpy batches: a list, a sequence or a generator of batches, or a PyDataset.

No TensorFlow: what comes back is a ``keras.utils.PyDataset`` (``pydataset``, below) of numpy batches,
read lazily by index where the data allows it.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from xla_keras.core.signatures import leaves, map_leaves
from xla_keras.data.batches import leaf_at, pad_lengths, pad_rows, rows
from xla_keras.data.plan import Bucketing, Grouping, Target, check_rank, padded_length
from xla_keras.storms.fixes import DROP, PAD


class NumpyOps:
    """The array operations of ``batches`` on numpy data: no TensorFlow, no Keras."""

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
        return padded_length(n, table)

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


NUMPY = NumpyOps()


class NumpyFix:
    """The per-batch part of a fix on numpy batches (a class, not a closure, so
    a multiprocessing PyDataset can pickle it)."""

    def __init__(self, targets: Tuple[Target, ...], batch_size: Optional[int], remainder: Optional[str]):
        self.targets, self.batch_size, self.remainder = targets, batch_size, remainder

    def __call__(self, batch: Any, index: int) -> Any:
        if self.remainder == DROP and rows(batch, NUMPY) < self.batch_size:
            # Dropping it here would shift every later index: a lazy sequence is only checked at its end.
            raise ValueError(
                f"Batch {index} has {rows(batch, NUMPY)} rows, fewer than {self.batch_size}, and is not the "
                "last: only a sequence's last batch can be dropped lazily. Rebatch the data to a fixed size "
                "first (or pass a generator: it is read into memory and every short batch is dropped)."
            )
        batch = pad_lengths(batch, self.targets, NUMPY)
        # A "pad" remainder always comes with a batch size (plan.remainder_of).
        return (
            pad_rows(batch, self.batch_size, NUMPY) if self.remainder == PAD and self.batch_size is not None else batch
        )


BATCHES_HINT = (
    "the batches the model is fed: a tf.data.Dataset, a keras.utils.PyDataset, a list or a "
    "generator of batches. Batch whole arrays first, e.g. "
    "`[(x[i:i + n], y[i:i + n]) for i in range(0, len(x), n)]`"
)
EXAMPLES_HINT = (
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


def apply_numpy(data: Any, targets: Tuple[Target, ...], batch_size: Optional[int], remainder: Optional[str]) -> Any:
    _refuse_arrays(data, "apply_fix", BATCHES_HINT)
    fix = NumpyFix(targets, batch_size, remainder)
    indexable, length = _indexable(data)
    if not indexable:
        try:
            batches = list(data)
        except TypeError:
            raise ValueError(
                f"apply_fix takes a tf.data.Dataset, a PyDataset, or a list or generator of "
                f"batches; got {type(data).__name__}."
            ) from None
        if remainder == DROP:
            batches = [b for b in batches if rows(b, NUMPY) >= batch_size]
        source, length, like = batches, len(batches), None
    else:
        source, like = data, data
        if remainder == DROP and length and rows(data[length - 1], NUMPY) < batch_size:
            length -= 1
    if length != 0:
        fix(source[0], 0)  # a fix made for other data fails here, not in the middle of fit
    return pydataset(source, length, fix, like)


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


def rebatch_numpy(data: Any, size: int, remainder: Optional[str]) -> Any:
    batches = _read_all(data, "apply_fix (fixed_batch_size)", BATCHES_HINT)
    if not batches:
        return pydataset([], 0, NumpyFix((), size, remainder))
    columns: Dict[str, list] = {}
    for batch in batches:
        for path, leaf in leaves(batch):
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
    stop = total - total % size if remainder == DROP else total

    def rows_from(start: int) -> Any:
        return map_leaves(batches[0], lambda path, _: joined[path][start : start + size])

    rebatched = [rows_from(i) for i in range(0, stop, size)]
    # Dropping is done: what is left of the fix is per batch (pad the last one's rows).
    return pydataset(rebatched, len(rebatched), NumpyFix((), size, None if remainder == DROP else remainder))


def group_numpy(data: Any, spec: Grouping) -> Any:
    """Rows regrouped by their sizes on the fix's targets, each group batched to ``batch_size`` rows,
    in the order the groups fill; then each group's last rows by the remainder rule."""
    batches = _read_all(data, "apply_fix (bucket_by_size)", BATCHES_HINT)
    open_groups: Dict[Tuple[int, ...], Tuple[Any, Dict[str, List[Any]], int]] = {}
    out: List[Any] = []

    def joined(template: Any, columns: Dict[str, List[Any]], rows: int) -> Tuple[Any, Dict[str, List[Any]]]:
        """``rows`` rows off the front of the group, and what is left of it."""
        whole = {path: np.concatenate(column) for path, column in columns.items()}
        batch = map_leaves(template, lambda path, _: whole[path][:rows])
        return batch, {path: [array[rows:]] for path, array in whole.items()}

    for batch in batches:
        key = tuple(int(np.shape(leaf_at(batch, t.path))[t.axis]) for t in spec.targets)
        template, columns, rows = open_groups.get(key, (batch, {}, 0))
        for path, leaf in leaves(batch):
            columns.setdefault(path, []).append(np.asarray(leaf))
        rows += NUMPY.size(leaf_at(batch, spec.targets[0].path), 0)
        while rows >= spec.batch_size:
            full, columns = joined(template, columns, spec.batch_size)
            out.append(full)
            rows -= spec.batch_size
        open_groups[key] = (template, columns, rows)
    if spec.remainder != DROP:
        out += [joined(template, columns, rows)[0] for template, columns, rows in open_groups.values() if rows]
    # Dropping is done: what is left of the fix is per batch (pad the partial ones' rows).
    remainder = None if spec.remainder == DROP else spec.remainder
    return pydataset(out, len(out), NumpyFix((), spec.batch_size, remainder))


def _stack(elements: List[Any]) -> Any:
    """One batch of elements, every leaf padded at the end to the batch's max on each axis (as
    tf.data's padded_batch)."""
    columns: Dict[str, list] = {}
    for element in elements:
        for path, leaf in leaves(element):
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
    return map_leaves(elements[0], lambda path, _: stacked[path])


def _at_least(floor: int) -> Callable[[int, Target], int]:
    return lambda n, _: max(n, floor)


def bucket_numpy(data: Any, spec: Bucketing) -> Any:
    elements = _read_all(data, "bucket_by_length", EXAMPLES_HINT)
    open_buckets: Dict[int, list] = {}
    groups = []
    if elements:
        check_rank(spec, np.ndim(leaf_at(elements[0], spec.path)))
    for element in elements:
        real = NUMPY.real_length(leaf_at(element, spec.path), spec.axis - 1)
        bucket = bisect.bisect_left(spec.table, real)
        group = open_buckets.setdefault(bucket, [])
        group.append(element)
        if len(group) == spec.batch_size:
            groups.append((bucket, group))
            open_buckets[bucket] = []
    if spec.remainder != DROP:
        groups += [(bucket, group) for bucket, group in open_buckets.items() if group]
    batches = []
    for bucket, group in groups:
        length = spec.table[bucket] if bucket < len(spec.table) else 0
        # max(): an element already padded past its real length keeps every position.
        batches.append(pad_lengths(_stack(group), spec.targets, NUMPY, _at_least(length)))
    # Dropping is done: what is left of the fix is per batch (pad the partial ones' rows).
    remainder = None if spec.remainder == DROP else spec.remainder
    return pydataset(batches, len(batches), NumpyFix((), spec.batch_size, remainder))


# The ``keras.utils.PyDataset`` that fixed numpy batches come back in.


_BATCHES_CLASS = None


def batches_class() -> type:
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
        return batches_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pydataset(source: Any, length: Optional[int], fix: Callable[[Any, int], Any], like: Any = None) -> Any:
    """A PyDataset of ``fix(source[i], i)``; it keeps the parallelism of ``like`` (a PyDataset source),
    whose ``__getitem__`` now runs inside ours."""
    kwargs = {}
    for name in ("workers", "use_multiprocessing", "max_queue_size"):
        if hasattr(like, name):
            kwargs[name] = getattr(like, name)
    return batches_class()(source, length, fix, **kwargs)
