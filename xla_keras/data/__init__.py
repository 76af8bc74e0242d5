"""Apply a recompilation-storm fix to an input pipeline.

A storm's ``fix`` says which inputs to pad to which lengths and how many rows
a batch must have. This package applies it, so that::

    ds = xla_keras.data.apply_fix(ds, storm.fix)

replaces ``exec(storm.fix["code"])``. It takes a ``tf.data.Dataset`` (and
returns one) or the data Keras's other backends take: a
``keras.utils.PyDataset``, a list of batches or a generator of batches (and
returns a ``keras.utils.PyDataset``). TensorFlow is imported only when the
data is a ``tf.data.Dataset``: Keras's JAX backend needs no TensorFlow here.

Leaves are named as the monitor's signatures name them
(``xla_keras.core.signatures.signature_of``): a batch that is a tuple of 1..3
parts is ``x``, ``y``, ``sample_weight``, anything else is ``x``; dicts add
``/key``, tuples and lists ``/index``, namedtuples ``/field``. Axes in a fix
are axes of a batch (axis 0 is the rows).

Modules: ``plan`` reads a fix, ``batches`` pads one batch, ``arrays`` and
``tfdata`` apply a fix to numpy and tf.data pipelines, ``arrays.pydataset`` holds
the PyDataset that numpy results come back in.

Example:
    A storm's ``fixed_batch_size`` fix on batches of 8, 16 and 24 rows:

    ```pycon
    >>> batches = [(np.ones((n, 4)), np.ones((n, 1))) for n in (8, 16, 24)]
    >>> fix = {"kind": "fixed_batch_size", "size": 24, "batch_size": 24, "remainder": "drop"}
    >>> [x.shape for x, y in xla_keras.data.apply_fix(batches, fix)]
    [(24, 4), (24, 4)]

    ```
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

from xla_keras.data import arrays, plan, tfdata
from xla_keras.storms import applied  # xla_keras.data.applied: the fixes applied in this process
from xla_keras.storms.fixes import (
    APPLIED_KINDS,
    BUCKET_BY_LENGTH,
    BUCKET_BY_SIZE,
    DROP,
    DROP_REMAINDER,
    FIXED_BATCH_SIZE,
    PAD,
    PAD_REMAINDER,
    PAD_TO_LENGTHS,
    Fix,
)

__all__ = ["apply_fix", "pad_to_lengths", "bucket_by_length", "APPLIED_KINDS"]


def pad_to_lengths(data: Any, fix: Union[Fix, Dict[str, Any]]) -> Any:
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

    Raises:
        ValueError: for a fix of another kind (use ``apply_fix``), a fix
            missing a key, or a fix whose inputs are not in the data.

    Example:
        ```pycon
        >>> fix = {"kind": "pad_to_lengths",
        ...        "targets": [{"path": "x/tokens", "axis": 1, "lengths": [16, 32, 64]},
        ...                    {"path": "x/mask", "axis": 1, "lengths": [16, 32, 64]}]}
        >>> batches = [({"tokens": np.ones((8, 20)), "mask": np.ones((8, 20))}, np.ones(8))]
        >>> ds = xla_keras.data.pad_to_lengths(batches, fix)
        >>> ds[0][0]["tokens"].shape  # a batch of length 20 becomes 32
        (8, 32)

        ```
    """
    fix = plan.json_form(fix)
    kind = plan.kind_of(fix)
    if kind != PAD_TO_LENGTHS:
        raise ValueError(f"pad_to_lengths takes a 'pad_to_lengths' fix; got kind {kind!r} (use apply_fix).")
    targets = plan.targets_of(fix, PAD_TO_LENGTHS, lengths=True, min_axis=0)
    if tfdata.is_tf_dataset(data):
        fixed = tfdata.apply_tf(data, targets, None, None)
    else:
        fixed = arrays.apply_numpy(data, targets, None, None)
    applied.record(kind, plan.applied_lengths(fix))
    return fixed


def apply_fix(data: Any, fix: Union[Fix, Dict[str, Any]]) -> Any:
    """Apply a recompilation storm's fix to the batches the model is fed.

    The kinds it applies:

    - ``pad_to_lengths``: pads every target input up to its advised lengths
      (see ``pad_to_lengths``), then applies the remainder rule.
    - ``fixed_batch_size``: re-batches to exactly ``size`` rows, then applies
      the remainder rule. On numpy data this reads every batch into memory.
    - ``drop_remainder`` / ``pad_remainder``: the remainder rule only.
    - ``bucket_by_size`` (the exact alternative a ``pad_to_lengths`` fix of
      images holds, ``fix["bucket_by_size"]``): regroups the rows by their
      size on the fix's ``targets`` (an image's height and width), each
      group batched to ``batch_size`` rows, then the remainder rule per
      group. Nothing is padded: one compile per size, every value exact. The
      batches come in the order their groups fill (Keras's ``shuffle``
      shuffles batch order); on numpy data this reads every batch into memory.

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
        After a fit with a storm, ``train_ds = xla_keras.data.apply_fix(train_ds,
        monitor.report.storms[0].fix)``, and the next fit sees the advised shapes only
        (``Storm``'s example runs one). On numpy batches whose last one is short:

        ```pycon
        >>> batches = [(np.ones((32, 4)), np.ones((32, 1))), (np.ones((16, 4)), np.ones((16, 1)))]
        >>> len(xla_keras.data.apply_fix(batches, {"kind": "drop_remainder", "batch_size": 32, "remainder": "drop"}))
        1
        >>> padded = xla_keras.data.apply_fix(batches, {"kind": "pad_remainder", "batch_size": 32, "remainder": "pad"})
        >>> [part.shape for part in padded[1]]  # rows padded to 32, and a sample_weight
        [(32, 4), (32, 1), (32,)]
        >>> padded[1][2][14:18].tolist()  # the padded rows weigh nothing
        [1.0, 1.0, 0.0, 0.0]

        ```
    """
    fix = plan.json_form(fix)
    kind = plan.kind_of(fix)
    if kind == PAD_TO_LENGTHS:
        targets = plan.targets_of(fix, PAD_TO_LENGTHS, lengths=True, min_axis=0)
        remainder, batch_size = plan.remainder_of(fix)
    elif kind == FIXED_BATCH_SIZE:
        size = plan.count(plan.required(fix, "size", "fixed_batch_size fix"), "The fixed_batch_size fix's 'size'")
        remainder = plan.checked_remainder(fix.get("remainder"))
        if tfdata.is_tf_dataset(data):
            return tfdata.apply_tf(data, (), size, remainder, rebatch=size)
        return arrays.rebatch_numpy(data, size, remainder)
    elif kind == BUCKET_BY_SIZE:
        spec = plan.grouping(fix)
        if tfdata.is_tf_dataset(data):
            fixed = tfdata.group_tf(data, spec)
        else:
            fixed = arrays.group_numpy(data, spec)
        applied.record(kind, plan.grouped_lengths(spec))
        return fixed
    elif kind in (DROP_REMAINDER, PAD_REMAINDER):
        plan.required(fix, "batch_size", f"{kind} fix")
        targets = ()
        remainder, batch_size = plan.remainder_of(fix, default=DROP if kind == DROP_REMAINDER else PAD)
        if batch_size is None:
            raise ValueError(f"The {kind} fix's 'batch_size' is None: there is no batch size to hold to.")
    else:
        raise plan.refusal(kind)
    if tfdata.is_tf_dataset(data):
        fixed = tfdata.apply_tf(data, targets, batch_size, remainder)
    else:
        fixed = arrays.apply_numpy(data, targets, batch_size, remainder)
    applied.record(kind, plan.applied_lengths(fix))
    return fixed


def bucket_by_length(data: Any, fix: Union[Fix, Dict[str, Any]], batch_size: Optional[int] = None) -> Any:
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

    Raises:
        ValueError: for a fix that holds no bucketing (apply it with
            ``apply_fix``), a fix missing a key, or no batch size.

    Example:
        With a storm's fix (a ``pad_to_lengths`` fix with a ``"bucket_by_length"`` part) on a
        ``tf.data.Dataset`` of unbatched examples: ``train_ds =
        xla_keras.data.bucket_by_length(examples.shuffle(10_000), fix, batch_size=32)``. On a
        list of token arrays (0 is padding), a fix written out:

        ```pycon
        >>> examples = [(np.ones(n, "int32"), float(n)) for n in (3, 20, 4, 18)]
        >>> fix = {"kind": "bucket_by_length", "length_of": {"path": "x", "axis": 1}, "lengths": [8, 32],
        ...        "targets": [{"path": "x", "axis": 1}], "batch_size": 2, "remainder": "drop"}
        >>> [(x.shape, y.tolist()) for x, y in xla_keras.data.bucket_by_length(examples, fix)]
        [((2, 8), [3.0, 4.0]), ((2, 32), [20.0, 18.0])]

        ```
    """
    fix = plan.json_form(fix)
    spec = plan.bucketing(fix, batch_size)
    if tfdata.is_tf_dataset(data):
        fixed = tfdata.bucket_tf(data, spec)
    else:
        fixed = arrays.bucket_numpy(data, spec)
    inner = fix.get(BUCKET_BY_LENGTH) if plan.kind_of(fix) == PAD_TO_LENGTHS else fix
    applied.record(BUCKET_BY_LENGTH, plan.applied_lengths(inner if isinstance(inner, dict) else {}))
    return fixed
