"""Fixes on a ``tf.data.Dataset``: the same padding as on numpy, as dataset transformations.

TensorFlow is imported only when a dataset is handed in: Keras's JAX backend needs none here.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, Tuple

from xla_keras.data.batches import leaf_at, pad_lengths, pad_rows, rows
from xla_keras.data.plan import GROUP_KEY_BASE, INT32_MAX, Bucketing, Grouping, Target, check_rank
from xla_keras.storms.fixes import DROP, PAD


def is_tf_dataset(data: Any) -> bool:
    # The module check comes first so that other data never needs TensorFlow imported.
    if not type(data).__module__.startswith("tensorflow"):
        return False
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(data, tf.data.Dataset)


def _tf() -> Any:
    import tensorflow as tf

    return tf


class TfOps:
    """The array operations of ``batches`` on symbolic tensors inside tf.data functions: dynamic
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
        return tf.maximum(tf.reduce_min(tf.where(lengths >= n, lengths, INT32_MAX)), n)

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


def apply_tf(
    ds: Any,
    targets: Tuple[Target, ...],
    batch_size: Optional[int],
    remainder: Optional[str],
    rebatch: Optional[int] = None,
) -> Any:
    ops = TfOps(_tf())
    if rebatch is not None:
        ds = ds.rebatch(rebatch, drop_remainder=remainder == DROP)
    elif remainder == DROP:
        ds = ds.filter(_element_fn(ds, lambda batch: rows(batch, ops) >= batch_size))

    def fix(batch: Any) -> Any:
        batch = pad_lengths(batch, targets, ops)
        # A "pad" remainder always comes with a batch size (plan.remainder_of).
        return pad_rows(batch, batch_size, ops) if remainder == PAD and batch_size is not None else batch

    return _tf_map(ds, fix) if targets or remainder == PAD else ds


def bucket_tf(ds: Any, spec: Bucketing) -> Any:
    tf = _tf()
    ops = TfOps(tf)
    table = tf.constant(spec.table, tf.int32)
    check_rank(spec, leaf_at(ds.element_spec, spec.path).shape.rank)

    def key(element: Any) -> Any:
        real = ops.real_length(leaf_at(element, spec.path), spec.axis - 1)
        return tf.reduce_sum(tf.cast(table < real, tf.int64))  # index of the first length >= real

    def reduce(bucket: Any, window: Any) -> Any:
        batches = window.padded_batch(spec.batch_size, drop_remainder=spec.remainder == DROP)
        length = tf.gather(table, bucket)
        # max(): an element already padded past its real length keeps every position.
        return _tf_map(batches, lambda batch: pad_lengths(batch, spec.targets, ops, lambda n, _: tf.maximum(n, length)))

    ds = ds.group_by_window(
        key_func=_element_fn(ds, key),
        window_size=spec.batch_size,
        reduce_func=tf.autograph.experimental.do_not_convert(reduce),
    )
    if spec.remainder == PAD:
        ds = _tf_map(ds, lambda batch: pad_rows(batch, spec.batch_size, ops))
    return ds


def group_tf(ds: Any, spec: Grouping) -> Any:
    """Rows regrouped by their sizes on the fix's targets (``group_by_window`` over the unbatched rows),
    each group batched to ``batch_size`` rows; then each group's last rows by the remainder rule."""
    tf = _tf()
    ops = TfOps(tf)
    rows = ds.unbatch()

    def key(element: Any) -> Any:
        combined = tf.constant(0, tf.int64)
        for target in spec.targets:
            size = tf.cast(tf.shape(leaf_at(element, target.path))[target.axis - 1], tf.int64)
            tf.debugging.assert_less(
                size,
                tf.constant(GROUP_KEY_BASE, tf.int64),
                f"bucket_by_size keys groups by sizes below {GROUP_KEY_BASE}",
            )
            combined = combined * GROUP_KEY_BASE + size
        return combined

    def reduce(_: Any, window: Any) -> Any:
        return window.batch(spec.batch_size, drop_remainder=spec.remainder == DROP)

    grouped = rows.group_by_window(
        key_func=_element_fn(rows, key),
        window_size=spec.batch_size,
        reduce_func=tf.autograph.experimental.do_not_convert(reduce),
    )
    if spec.remainder == PAD:
        grouped = _tf_map(grouped, lambda batch: pad_rows(batch, spec.batch_size, ops))
    return grouped
