"""One batch's padding, on either backend: lengths up to a fix's table, rows up to its batch size.

Pure: the array operations come in as ``ops`` (``arrays.NumpyOps`` on numpy batches,
``tfdata.TfOps`` on symbolic tensors inside tf.data functions). Leaves are found by the
paths of the monitor's signatures (``xla_keras.core.signatures``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from xla_keras.core.signatures import leaves, map_leaves
from xla_keras.data.plan import Target


def leaf_at(element: Any, path: str) -> Any:
    for leaf_path, leaf in leaves(element):
        if leaf_path == path:
            return leaf
    paths = ", ".join(repr(p) for p, _ in leaves(element)) or "none"
    raise ValueError(f"The data has no input {path!r} (its inputs: {paths}): was the fix made for other data?")


def pad_lengths(
    batch: Any, targets: Tuple[Target, ...], ops: Any, length: Optional[Callable[[Any, Target], Any]] = None
) -> Any:
    """Pad each target leaf at the end of its axis to ``length(size, target)``
    (default: the next length of the target's table)."""
    if not targets:
        return batch
    by_path: Dict[str, List[Target]] = {}
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

    batch = map_leaves(batch, pad)
    if not found:
        # One missing target is normal (predict data has no `y`); all of them means other data.
        paths = ", ".join(repr(p) for p, _ in leaves(batch)) or "none"
        raise ValueError(
            f"None of the fix's inputs ({', '.join(repr(p) for p in by_path)}) is in the data "
            f"(its inputs: {paths}): was the fix made for other data, or batched otherwise?"
        )
    return batch


def rows(batch: Any, ops: Any) -> Any:
    arrays = [leaf for _, leaf in leaves(batch) if ops.rank(leaf) != 0]
    if not arrays:
        raise ValueError("A batch has no array with rows to count.")
    return ops.size(arrays[0], 0)


def pad_rows(batch: Any, batch_size: int, ops: Any) -> Any:
    """Pad a short batch's rows to ``batch_size`` with copies of its last row; padded rows weigh
    nothing. Copies, not zeros: an all-padding row makes a masked model divide by zero (a NaN
    output, and NaN * 0 is NaN in the weighted loss and metrics); a copy keeps outputs finite.

    A batch with ``y`` but no ``sample_weight`` gets one (1 for real rows, 0
    for padded ones) whatever its rows, so every batch keeps one structure;
    a ``sample_weight`` of the user's is padded with zeros.
    """
    real = rows(batch, ops)
    total = ops.maximum(real, batch_size)

    def pad(path: str, leaf: Any) -> Any:
        if ops.rank(leaf) == 0:
            return leaf
        if path == "sample_weight" or path.startswith("sample_weight/"):
            return ops.pad(leaf, 0, total)
        return ops.repeat_last_row(leaf, total)

    batch = map_leaves(batch, pad)
    if isinstance(batch, (tuple, list)) and len(batch) in (2, 3) and batch[1] is not None:
        if len(batch) == 2 or batch[2] is None:
            return (batch[0], batch[1], ops.real_rows(real, total))
    return batch
