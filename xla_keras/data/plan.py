"""Reading a fix: its validation, the inputs and lengths it targets, and the refusals.

Pure (no TensorFlow, no Keras): every message a malformed or inapplicable fix gets is made here.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

from xla_keras.storms.fixes import (
    APPLIED_KINDS,
    BUCKET_BY_LENGTH,
    BUCKET_BY_SIZE,
    CONSISTENT_STRUCTURE,
    MAX_GROUP_AXES,
    PAD_TO_LENGTHS,
    REMAINDERS,
    STATIC_VALUE,
    UNKNOWN,
    FixRecord,
)

INT32_MAX = 2**31 - 1  # tf.shape's dtype bounds any length a padded axis can take

ACCEPTED = (
    "apply_fix accepts the kinds "
    + ", ".join(repr(k) for k in APPLIED_KINDS)
    + "; a 'bucket_by_length' fix goes to xla_keras.data.bucket_by_length(unbatched, fix, batch_size)"
)


class Target(NamedTuple):
    path: str
    axis: int
    table: Tuple[int, ...]  # the lengths the axis may take, ascending; empty for bucket targets


class Bucketing(NamedTuple):
    path: str  # the leaf whose real length picks the bucket
    axis: int  # batched axis, as in the fix
    table: Tuple[int, ...]
    targets: Tuple[Target, ...]
    batch_size: int
    remainder: Optional[str]
    rank: Optional[int] = None  # the length leaf's rank in a batch, when the fix says (an example: one less)


class Grouping(NamedTuple):
    """A bucket_by_size fix: rows grouped by their sizes on ``targets``, each group batched to ``batch_size``."""

    targets: Tuple[Target, ...]
    batch_size: int
    remainder: Optional[str]
    sizes: Tuple[Tuple[int, ...], ...]  # the sizes the fix saw (each in the order of targets); may be empty


# tf.data keys a group by one int64: at most MAX_GROUP_AXES sizes, each below this.
GROUP_KEY_BASE = 1 << 20


def check_rank(spec: Bucketing, rank: Optional[int]) -> None:
    """Batched data handed to bucket_by_length would be grouped as if each batch were one example."""
    if spec.rank is not None and rank is not None and rank != spec.rank - 1:
        raise ValueError(
            f"bucket_by_length takes single examples: input {spec.path!r} has {rank} axes here, but an example "
            f"of the data the fix was made for has {spec.rank - 1} (a batch has {spec.rank}). Pass the data "
            "before you batch it (e.g. the dataset before .padded_batch(...))."
        )


def json_form(fix: Any) -> Dict[str, Any]:
    """A typed fix (a storm's ``fix``) as the dict its JSON holds: a fix read back from a saved report
    and one from a live report are checked and applied alike."""
    if isinstance(fix, FixRecord):
        return fix.to_dict()
    if not isinstance(fix, dict):
        raise ValueError(f"A fix is a dict (a storm's `.fix`); got {type(fix).__name__}.")
    return fix


def kind_of(fix: Any) -> str:
    if not isinstance(fix, dict):
        raise ValueError(f"A fix is a dict (a storm's `.fix`); got {type(fix).__name__}.")
    if "kind" not in fix:
        raise ValueError(f"The fix has no 'kind' key (keys: {sorted(map(str, fix))}).")
    return fix["kind"]


def required(d: Any, key: str, what: str) -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"The {what} is not a dict: {d!r}.")
    if key not in d:
        raise ValueError(f"The {what} has no {key!r} key (keys: {sorted(map(str, d))}).")
    return d[key]


def count(value: Any, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}; got {value!r}.")
    return int(value)


def checked_remainder(remainder: Any) -> Optional[str]:
    if remainder not in REMAINDERS:
        raise ValueError(f"The fix's 'remainder' must be 'drop', 'pad' or None; got {remainder!r}.")
    return remainder


def length_table(lengths: Any, what: str) -> Tuple[int, ...]:
    """The advised lengths, then the last one doubled up to int32's range.

    Data longer than every advised length then costs a few more compiles (one
    per doubling), never one per length, never an error, never a truncation.
    """
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise ValueError(f"{what} must be a non-empty list of lengths; got {lengths!r}.")
    table = sorted({count(n, f"each of {what}") for n in lengths})
    while table[-1] * 2 <= INT32_MAX:
        table.append(table[-1] * 2)
    return tuple(table)


def padded_length(n: int, table: Tuple[int, ...]) -> int:
    i = bisect.bisect_left(table, n)
    return table[i] if i < len(table) else n


def targets_of(fix: dict, what: str, lengths: bool, min_axis: int) -> Tuple[Target, ...]:
    targets = required(fix, "targets", f"{what} fix")
    if not isinstance(targets, (list, tuple)):
        raise ValueError(f"The {what} fix's 'targets' must be a list of dicts; got {targets!r}.")
    out = []
    for i, target in enumerate(targets):
        name = f"{what} fix's target {i}"
        path = required(target, "path", name)
        if "@" in str(path):
            continue  # another replica's view of a leaf that is padded under its own path
        axis = count(required(target, "axis", name), f"the axis of {name}", min_axis)
        table = length_table(required(target, "lengths", name), f"the lengths of {name}") if lengths else ()
        out.append(Target(str(path), axis, table))
    return tuple(out)


def remainder_of(fix: dict, default: Optional[str] = None) -> Tuple[Optional[str], Optional[int]]:
    """(remainder, batch_size); remainder None when there is no batch size to hold batches to."""
    remainder = checked_remainder(fix.get("remainder", default))
    batch_size = fix.get("batch_size")
    if batch_size is None:
        return None, None
    return remainder, count(batch_size, "The fix's 'batch_size'")


def refusal(kind: Any) -> ValueError:
    """Why apply_fix cannot apply a fix of this kind, and what to do instead."""
    if kind == CONSISTENT_STRUCTURE:
        return ValueError(
            "The fix 'consistent_structure' cannot be applied mechanically: the batches change structure "
            "or dtype (leaves appear, vanish or change dtype or rank), and which one is right is yours to "
            "say. Feed every batch with the same structure and dtypes: cast in the input pipeline (e.g. "
            "`ds.map(lambda x, y: (tf.cast(x, tf.float32), y))`) and always yield the same keys. " + ACCEPTED + "."
        )
    if kind == STATIC_VALUE:
        return ValueError(
            "The fix 'static_value' cannot be applied to the data: the step computes a value XLA needs as a "
            "compile-time constant (e.g. top_k's k) from the batch or the weights, so XLA compiles again for "
            "each new value. Make it static in the layer that computes it (the fix's 'layer', 'line' and "
            "'change' say where and how). " + ACCEPTED + "."
        )
    if kind == UNKNOWN:
        return ValueError(
            "The fix 'unknown' cannot be applied mechanically: no single input explained the new input "
            "signatures. Compare the storm's `varying` entries with your pipeline. " + ACCEPTED + "."
        )
    if kind == BUCKET_BY_LENGTH:
        return ValueError(
            "A 'bucket_by_length' fix groups single examples, not batches: call "
            "`xla_keras.data.bucket_by_length(unbatched, fix, batch_size)` on the data before you batch "
            "it (it batches), instead of apply_fix."
        )
    return ValueError(f"The fix kind {kind!r} cannot be applied mechanically. " + ACCEPTED + ".")


def grouping(fix: dict) -> Grouping:
    """What a bucket_by_size fix asks for, checked."""
    what = f"{BUCKET_BY_SIZE} fix"
    targets = targets_of(fix, BUCKET_BY_SIZE, lengths=False, min_axis=1)
    if not targets:
        raise ValueError(f"The {what}'s 'targets' name no axis to group rows by.")
    if len(targets) > MAX_GROUP_AXES:
        raise ValueError(f"The {what} groups rows by the sizes of at most {MAX_GROUP_AXES} axes; got {len(targets)}.")
    batch_size = count(required(fix, "batch_size", what), f"The {what}'s 'batch_size'")
    remainder = checked_remainder(fix.get("remainder"))
    sizes = fix.get("sizes") or ()
    if not isinstance(sizes, (list, tuple)) or any(
        not isinstance(s, (list, tuple)) or len(s) != len(targets) for s in sizes
    ):
        raise ValueError(f"The {what}'s 'sizes' must be a list of sizes, one per target each; got {sizes!r}.")
    checked = tuple(tuple(count(n, f"each of the {what}'s sizes") for n in s) for s in sizes)
    return Grouping(targets, batch_size, remainder, checked)


def applied_lengths(fix: dict) -> Tuple[Tuple[str, int, Tuple[int, ...]], ...]:
    """The lengths each target of a checked pad (or bucketing) fix takes after it: the advised ones.
    Data longer than every one of them takes doubled lengths: no longer the fix's lengths exactly."""
    lengths = fix.get("lengths")
    out = []
    for target in fix.get("targets") or ():
        taken = target.get("lengths", lengths)
        if "@" not in str(target["path"]) and isinstance(taken, (list, tuple)) and taken:
            out.append((str(target["path"]), int(target["axis"]), tuple(sorted({int(n) for n in taken}))))
    return tuple(out)


def grouped_lengths(spec: Grouping) -> Tuple[Tuple[str, int, Tuple[int, ...]], ...]:
    """The sizes each target of a bucket_by_size fix takes after it: the sizes the fix saw."""
    if not spec.sizes:
        return ()
    return tuple((t.path, t.axis, tuple(sorted({s[i] for s in spec.sizes}))) for i, t in enumerate(spec.targets))


def bucketing(fix: Any, batch_size: Optional[int]) -> Bucketing:
    """The bucketing a fix asks for: a bucket_by_length fix, or the one a pad_to_lengths fix holds."""
    kind = kind_of(fix)
    outer: dict = {}
    if kind == PAD_TO_LENGTHS:
        if not isinstance(fix.get(BUCKET_BY_LENGTH), dict):
            raise ValueError(
                "This pad_to_lengths fix has no 'bucket_by_length' part (the monitor offers bucketing only "
                "when it can read a real length): pad the batches with "
                "`xla_keras.data.apply_fix(data, fix)` instead."
            )
        outer, fix = fix, fix[BUCKET_BY_LENGTH]
    elif kind != BUCKET_BY_LENGTH:
        raise ValueError(
            f"bucket_by_length takes a 'bucket_by_length' fix (or a 'pad_to_lengths' fix "
            f"that has one); got kind {kind!r}. " + ACCEPTED + "."
        )
    length_of = required(fix, "length_of", "bucket_by_length fix")
    path = str(required(length_of, "path", "bucket_by_length fix's 'length_of'"))
    # Element axis = batched axis - 1: the rows axis has no element counterpart.
    axis = count(
        required(length_of, "axis", "bucket_by_length fix's 'length_of'"),
        "the axis of the bucket_by_length fix's 'length_of'",
        1,
    )
    table = length_table(required(fix, "lengths", "bucket_by_length fix"), "the bucket_by_length fix's 'lengths'")
    targets = targets_of(fix, BUCKET_BY_LENGTH, lengths=False, min_axis=1)
    if batch_size is None:
        batch_size = fix.get("batch_size", outer.get("batch_size"))
    if batch_size is None:
        raise ValueError("bucket_by_length needs a batch size: the fix has none, pass batch_size=.")
    batch_size = count(batch_size, "batch_size")
    remainder = checked_remainder(fix.get("remainder", outer.get("remainder")))
    rank = length_of.get("rank")
    rank = count(rank, "the rank of the bucket_by_length fix's 'length_of'", 1) if rank is not None else None
    return Bucketing(path, axis, table, targets, batch_size, remainder, rank)
