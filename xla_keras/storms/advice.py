"""Storm advice: the cause read off the shapes seen, the fix computed from them, and what it
saves, measured on real lengths where the batches allow it.

Pure (no TensorFlow). The fix is a dict that ``xla_keras.data.apply_fix`` applies
(``fix["code"]`` is the same call as one line). Real-length figures and the
bucketing alternative: ``real_length_advice``; the partial last batch:
``remainder``; the compile budget: ``budget``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from xla_keras.core.signatures import InputSignature
from xla_keras.storms.buckets import TARGET_PADDING_OVERHEAD, best_buckets, pad_to_boundary
from xla_keras.storms.detection import (
    ShapeHistory,
    VaryingAxis,
    batch_rows,
    partial_batch_signatures,
    structures_differ,
    varying_axes,
)
from xla_keras.storms.fix_code import apply_code, batch_size_call, compiles_words
from xla_keras.storms.real_length_advice import (
    Costs,
    SampleView,
    real_length_figures,
)
from xla_keras.storms.remainder import REMAINDER, remainder_of


def choose_buckets(
    axes: List[VaryingAxis], signatures: Sequence[Tuple[InputSignature, int]], max_compiles: int
) -> Tuple[List[List[int]], float, int]:
    """Bucket each varying axis so the joint number of padded signatures stays
    below ``max_compiles``: start with one bucket each and add buckets where
    they save the most padding while padding is above the target."""
    ks = [1] * len(axes)
    buckets = [best_buckets(a.known_values, 1)[0] for a in axes]

    def joint(bk):
        combos = set()
        index = {(a.path, a.axis): i for i, a in enumerate(axes)}
        for sig, _ in signatures:
            combo = []
            for leaf in sig:
                for axis, size in enumerate(leaf.shape):
                    i = index.get((leaf.path, axis))
                    if i is not None and size is not None:
                        combo.append(pad_to_boundary(size, bk[i]))
            combos.add(tuple(combo))
        return max(1, len(combos))

    def overhead(bk):
        real = padded = 0
        for a, b in zip(axes, bk):
            real += sum(v * w for v, w in a.values.items() if v is not None)
            padded += sum(pad_to_boundary(v, b) * w for v, w in a.values.items() if v is not None)
        return padded / real - 1 if real else 0.0

    while overhead(buckets) > TARGET_PADDING_OVERHEAD:
        options = []
        for i, a in enumerate(axes):
            trial = list(buckets)
            trial[i] = best_buckets(a.known_values, ks[i] + 1)[0]
            if len(trial[i]) == len(buckets[i]):
                continue  # no more distinct lengths to split on
            if joint(trial) < max_compiles:
                options.append((overhead(trial), i, trial))
        if not options:
            break
        _, i, buckets = min(options)
        ks[i] += 1
    return buckets, overhead(buckets), joint(buckets)


# ------------------------------------------------------------------ analysis


def analyse(
    phase: str,
    history: ShapeHistory,
    threshold: int,
    data: str = "tf.data",
    view: Optional[SampleView] = None,
    costs: Optional[Costs] = None,
) -> Tuple[List[Dict[str, Any]], str, Dict[str, Any]]:
    """Cause, advice and fix from everything the phase has seen. ``data``: "tf.data", or
    "arrays" (numpy arrays Keras batches itself, on either backend): the fix's code then
    needs no TensorFlow ("pydataset", "generator": likewise). ``view``: sampled batches to measure real lengths on.

    Returns (varying, advice text without the header line, fix)."""
    partial = partial_batch_signatures(history)
    remainder = remainder_of(phase, history, partial)
    sigs = [(sig, history.batches.get(fp, 1)) for fp, sig in history.signatures.items() if fp not in partial]
    axes = varying_axes(sigs)
    batch_axes = [a for a in axes if a.axis == 0]
    length_axes = [a for a in axes if a.axis != 0]
    varying = [a.describe() for a in axes]
    partial_text = remainder.text(phase) if remainder else ""
    batch_size = None
    if sigs:
        batch_size = batch_rows(max(sigs, key=lambda t: t[1])[0])
    rows_fix = {"batch_size": batch_size, "remainder": REMAINDER[phase] if batch_size else None}
    if length_axes:
        return varying, *_pad_advice(
            phase, length_axes, batch_axes, sigs, threshold, data, view, rows_fix, partial_text, costs
        )
    if batch_axes:
        a = batch_axes[0]
        d = a.describe()
        size = max(a.values, key=lambda v: (a.values[v], v))
        fix = {
            "kind": "fixed_batch_size",
            "path": a.path,
            "size": size,
            "batch_size": size,
            "remainder": REMAINDER[phase],
            "drop_remainder": REMAINDER[phase] == "drop",
        }
        fix["code"], fix["data"] = apply_code(fix, data), data
        rest = (
            "drops the last partial batch"
            if REMAINDER[phase] == "drop"
            else "pads the last batch's rows, which weigh nothing"
        )
        arrays = f" (arrays: `{batch_size_call(phase, size)}`)" if data == "arrays" else ""
        advice = (
            f"The batch size varies (input '{a.path}' axis 0: {d['min']}..{d['max']}, "
            f"{d['n_values']} values). Fix: batch to a fixed size of {size} (the most frequent batch size "
            "seen, the largest on a tie): "
            f"`xla_keras.data.apply_fix(data, fix)` re-batches and {rest} (1 compile){arrays}, or "
            "switch XLA off for this model."
        )
        return varying, advice, fix
    if structures_differ(sigs):
        fix = {"kind": "consistent_structure"}
        advice = (
            "The inputs change structure or dtype between batches (leaves appear, vanish or change "
            "dtype or rank): each variant compiles. Fix: feed every batch with the same structure "
            "and dtypes (cast in the input pipeline)."
        )
        return varying, advice, fix
    if remainder:
        kind = "drop_remainder" if REMAINDER[phase] == "drop" else "pad_remainder"
        fix = {"kind": kind, "rows": remainder.rows, "batch_size": remainder.batch_size, "remainder": REMAINDER[phase]}
        fix["code"], fix["data"] = apply_code(fix, data), data
        return varying, partial_text.strip() + arrays_words(phase, remainder.batch_size, data), fix
    return varying, "New signatures kept arriving but no single input explains them.", {"kind": "unknown"}


def arrays_words(phase: str, batch_size: int, data: str) -> str:
    """For arrays, which Keras batches itself: how to get the batches a fix applies to."""
    if data != "arrays":
        return ""
    rows = "x[i:i + {b}]" if phase == "predict" else "(x[i:i + {b}], y[i:i + {b}])"
    return (
        " Keras batches arrays itself: slice them into batches first (`batches = ["
        + rows.format(b=batch_size)
        + f" for i in range(0, len(x), {batch_size})]`), then apply the fix to `batches`."
    )


def _pad_advice(
    phase: str,
    length_axes: List[VaryingAxis],
    batch_axes: List[VaryingAxis],
    sigs: Sequence[Tuple[InputSignature, int]],
    threshold: int,
    data: str,
    view: Optional[SampleView],
    rows_fix: Dict[str, Any],
    partial_text: str,
    costs: Optional[Costs] = None,
):
    buckets, overhead, compiles = choose_buckets(length_axes, sigs, threshold)
    first = length_axes[0]
    targets = []
    for a, b in zip(length_axes, buckets):
        targets.append({"path": a.path, "axis": a.axis, "lengths": b})
        for other in a.also:  # co-varying leaves (e.g. a mask) get the same lengths
            other_path, other_axis = other.rsplit(":", 1)
            if "@" not in other_path:
                targets.append({"path": other_path, "axis": int(other_axis), "lengths": b})
    fix: Dict[str, Any] = {
        "kind": "pad_to_lengths",
        "path": first.path,
        "axis": first.axis,
        "lengths": buckets[0],
        "targets": targets,
        **rows_fix,
        "drop_remainder": rows_fix["remainder"] == "drop",
        "padding_overhead": round(overhead, 4),
        "compiles": compiles,
    }
    if len(length_axes) > 1:
        fix["per_input"] = [{"path": a.path, "axis": a.axis, "lengths": b} for a, b in zip(length_axes, buckets)]
    fix["code"], fix["data"] = apply_code(fix, data), data

    def together(a: VaryingAxis) -> str:  # co-varying leaves, kept as "path:axis" in the fix's varying list
        named = (f"'{o.rsplit(':', 1)[0]}' axis {o.rsplit(':', 1)[1]}" for o in a.also)
        return f" (with {', '.join(named)})" if a.also else ""

    names = "; ".join(
        f"input '{a.path}' axis {a.axis}{together(a)} varies ({d['min']}..{d['max']}, {d['n_values']} values)"
        for a, d in zip(length_axes, (a.describe() for a in length_axes))
    )
    pad_targets = "; ".join(f"'{a.path}' axis {a.axis} to {b}" for a, b in zip(length_axes, buckets))
    rows = (
        ("batch to a fixed size" if rows_fix["remainder"] == "drop" else "keep every example")
        if rows_fix["batch_size"]
        else "batch to a fixed size"
    )
    bucketable = len(length_axes) == 1 and first.axis >= 1 and phase != "predict"  # predict: order matters
    real_fields, real_text = real_length_figures(
        first,
        buckets[0],
        view,
        threshold,
        rows_fix["batch_size"],
        phase,
        data,
        [t for t in targets if t["lengths"] == buckets[0]],
        bucketable,
        compiles,
        costs,
    )
    fix.update(real_fields)
    advice = (
        f"{names[0].upper()}{names[1:]}. Fix: {rows} and pad {pad_targets}: "
        f"`xla_keras.data.apply_fix(data, fix)` on the data as you batched it "
        f"({compiles_words(compiles)} for the lengths seen so far, {overhead:.0%} more padding than those batches; "
        f"longer data doubles the last length), or switch XLA off for this model.{partial_text}{real_text}"
    )
    if batch_axes:
        advice += " The batch size varies too: use a fixed batch size."
    return advice, fix
