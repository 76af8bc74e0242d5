"""Fix kinds: the ``kind`` of a storm's machine-readable ``fix``.

Saved reports and the fix code printed in them hold these strings: they never change.
"""

from __future__ import annotations

PAD_TO_LENGTHS = "pad_to_lengths"
FIXED_BATCH_SIZE = "fixed_batch_size"
DROP_REMAINDER = "drop_remainder"
PAD_REMAINDER = "pad_remainder"
# Also the key of the bucketing part that a pad_to_lengths fix may hold (a fix of this kind).
BUCKET_BY_LENGTH = "bucket_by_length"
CONSISTENT_STRUCTURE = "consistent_structure"
UNKNOWN = "unknown"

# The kinds xla_keras.data.apply_fix applies; bucket_by_length has its own function (it needs unbatched data).
APPLIED_KINDS = (PAD_TO_LENGTHS, FIXED_BATCH_SIZE, DROP_REMAINDER, PAD_REMAINDER)
"""The fix kinds ``xla_keras.data.apply_fix`` applies (a storm's ``fix["kind"]``).

The others: ``"bucket_by_length"`` has its own function (``xla_keras.data.bucket_by_length``, on
unbatched examples); ``"consistent_structure"`` and ``"unknown"`` are changes to make by hand, which
the storm's advice names.

Example:
    ```pycon
    >>> xla_keras.data.APPLIED_KINDS
    ('pad_to_lengths', 'fixed_batch_size', 'drop_remainder', 'pad_remainder')

    ```
"""
# Kinds that no code can apply: the user changes the pipeline by hand.
MANUAL_KINDS = (CONSISTENT_STRUCTURE, UNKNOWN)
KINDS = APPLIED_KINDS + (BUCKET_BY_LENGTH,) + MANUAL_KINDS

# A fix's "remainder": what becomes of a batch with fewer rows than its "batch_size".
DROP = "drop"
PAD = "pad"
REMAINDERS = (DROP, PAD, None)


def fix_value(fix: dict) -> str:
    """What a fix sets, in a few words (``"size 25"``, ``"lengths [32, 64]"``; empty when the fix
    does not say): two fixes with the same words apply the same change."""
    kind = fix.get("kind")
    if kind == FIXED_BATCH_SIZE and fix.get("size"):
        return f"size {fix['size']}"
    if kind == PAD_TO_LENGTHS:
        lengths = list(dict.fromkeys(str(t["lengths"]) for t in fix.get("targets") or [] if t.get("lengths")))
        if not lengths:
            return ""
        rows = f", batch size {fix['batch_size']}" if fix.get("batch_size") else ""
        return "lengths " + "; ".join(lengths) + rows
    if kind in (DROP_REMAINDER, PAD_REMAINDER) and fix.get("batch_size"):
        return f"batch size {fix['batch_size']}"
    return ""


def recomputed_words(at_storm: dict, now: dict) -> str:
    """Why a storm's fix in the report differs from the one its warning was computed with."""

    def words(fix: dict) -> str:
        return fix_value(fix) or f"a {fix.get('kind')} fix"

    return (
        f"Recomputed from every shape seen by the end: {words(now)} ({words(at_storm)} when the storm "
        "opened, from the shapes seen by then); the warning's line reads this fix from the report."
    )
