"""Images of several sizes: zero-padding them changes what the model computes, and the alternatives
that do not (batches of one size each; resizing in the input pipeline).

Pure. Decided from the shapes alone: a float input of rank 4 or more padded on two or more of its
axes besides the rows holds images (NHWC: height and width; video: NTHWC). Its padded pixels are
zeros that a convolution passes on (no Keras convolution takes a mask): every layer that pools or
normalises over the image (BatchNormalization's batch statistics, average pooling) and the
convolutions at the image's edge then compute on them, so outputs and losses change, not only the
compile count. The model's layers, when the monitor read them (``layers``: class names, facts handed
in), name the layers that do.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xla_keras.core.signatures import InputSignature
from xla_keras.storms.detection import ShapeHistory, batch_rows
from xla_keras.storms.fixes import (
    MAX_GROUP_AXES,
    REMAINDER,
    BucketBySize,
    apply_code,
    compiles_words,
    examples_words,
)

# Layers whose statistics or averages run over every pixel of the (padded) image, by class-name prefix.
OVER_THE_IMAGE = (
    "BatchNormalization",
    "SyncBatchNormalization",
    "GroupNormalization",
    "GlobalAveragePooling",
    "GlobalMaxPooling",
    "AveragePooling",
)


def image_inputs(targets: Sequence[Dict[str, Any]], signatures: Sequence[Tuple[InputSignature, int]]) -> List[str]:
    """Paths of the padded leaves that hold images: float, rank 4 or more, padded on 2 or more axes besides
    the rows."""
    padded: Dict[str, set] = {}
    for t in targets:
        if t["axis"] >= 1:
            padded.setdefault(t["path"], set()).add(t["axis"])
    kinds = {leaf.path: (leaf.dtype, len(leaf.shape)) for sig, _ in signatures for leaf in sig}
    return [
        path
        for path, axes in padded.items()
        if len(axes) >= 2 and path in kinds and "float" in kinds[path][0] and kinds[path][1] >= 4
    ]


def layers_over_the_image(layers: Sequence[str]) -> List[str]:
    """The model's layer classes (each once, in model order) that pool or normalise over the image."""
    return list(dict.fromkeys(name for name in layers if name.startswith(OVER_THE_IMAGE)))


def axes_words(targets: Sequence[Dict[str, Any]], paths: Optional[Sequence[str]] = None) -> str:
    """The axes a fix pads, by input: "'x' axes 1 and 2", "'x/tokens' axis 1 and 'x/mask' axis 1"."""
    by_path: Dict[str, List[int]] = {}
    for t in targets:
        if paths is None or t["path"] in paths:
            by_path.setdefault(t["path"], []).append(t["axis"])
    parts = []
    for path, axes in by_path.items():
        axes = sorted(set(axes))
        listed = f"axes {', '.join(map(str, axes[:-1]))} and {axes[-1]}" if len(axes) > 1 else f"axis {axes[0]}"
        parts.append(f"'{path}' {listed}")
    return " and ".join(parts)


def changed_values(
    inputs: Sequence[str], targets: Sequence[Dict[str, Any]], layers: Sequence[str]
) -> Tuple[Dict[str, Any], str]:
    """The fix's ``padding_changes_values`` and its words: what zero-padding the images does to the model."""
    named = layers_over_the_image(layers)
    where = axes_words(targets, inputs)
    if named:
        listed = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
        enters = (
            f"the padded pixels enter this model's {listed} layers (their statistics and averages run over "
            "every pixel) and its convolutions at the image's edge"
        )
    elif layers:
        enters = (
            "the padded pixels reach this model's convolutions at the image's edge (it has no layer that pools "
            "or normalises over the whole image)"
        )
    else:
        enters = (
            "the padded pixels enter every layer that pools or normalises over the image (BatchNormalization's "
            "statistics, average pooling) and the convolutions at the image's edge"
        )
    reason = f"zero-padded images ({where}): {enters}"
    record: Dict[str, Any] = {"inputs": list(inputs), "reason": reason}
    if layers:
        record["layers"] = named
    verb = "changes" if named or not layers else "can change"
    words = (
        f" Zero-padding {verb} what this model computes, not only its compiles: {reason}; outputs and losses change."
    )
    return record, words


def sizes_seen(history: ShapeHistory, keys: Sequence[Tuple[str, int]]) -> Dict[Tuple[int, ...], int]:
    """Rows seen at each size on ``keys`` (path, axis) over every batch of the phase."""
    rows: Dict[Tuple[int, ...], int] = {}
    for fp, sig in history.signatures.items():
        shapes = {leaf.path: leaf.shape for leaf in sig}
        size = tuple(shapes[p][a] if p in shapes and a < len(shapes[p]) else None for p, a in keys)
        n = batch_rows(sig)
        if any(s is None for s in size) or n is None:
            continue
        key = tuple(int(s) for s in size if s is not None)
        rows[key] = rows.get(key, 0) + n * history.batches.get(fp, 0)
    return rows


def by_size(
    phase: str,
    targets: Sequence[Dict[str, Any]],
    history: ShapeHistory,
    batch_size: Optional[int],
    threshold: int,
    data: str,
) -> Tuple[Optional[BucketBySize], str]:
    """The exact alternative: the rows regrouped into batches of one size each (one compile per size),
    or why it is not offered."""
    keys = list(dict.fromkeys((t["path"], t["axis"]) for t in targets if "@" not in t["path"]))
    if phase == "predict":
        return None, " (Batches of one size each are not offered for predict: they would reorder the outputs.)"
    if not batch_size or not keys or len(keys) > MAX_GROUP_AXES:
        return None, ""
    rows = sizes_seen(history, keys)
    if len(rows) >= threshold:
        return None, (
            f" Batches of one size each would compile once per size ({len(rows)} sizes, not below "
            "storm_threshold): resize to a few sizes instead."
        )
    runs = history.runs
    per_run = {size: n / runs if runs else n for size, n in rows.items()}
    remainder = REMAINDER[phase]
    left = {size: n % batch_size for size, n in per_run.items()}
    dropped = round(sum(left.values())) if remainder == "drop" else None
    padded = round(sum((batch_size - n) % batch_size for n in left.values())) if remainder == "pad" else None
    fix = BucketBySize(
        targets=[{"path": p, "axis": a} for p, a in keys],
        sizes=[list(size) for size in sorted(rows)],
        batch_size=batch_size,
        remainder=remainder,
        compiles=len(rows),
        examples_per_epoch=round(sum(per_run.values())),
        dropped_per_epoch=dropped,
        padded_rows_per_epoch=padded,
    )
    fix = dataclasses.replace(fix, code=apply_code(fix, data), data=data)
    epoch = "per epoch" if runs else "seen so far"
    if remainder == "drop":
        rest = (
            f"each size's partial batch is dropped: {examples_words(dropped or 0)} of "
            f"{round(sum(per_run.values()))} {epoch}"
        )
    else:
        rest = f"each size's last batch is padded with rows that weigh nothing: {padded} rows {epoch}"
    words = (
        f" To keep every value exact, batch by size instead: batches of one size each, {len(rows)} sizes = "
        f"{compiles_words(len(rows))}, nothing padded (`xla_keras.data.apply_fix(data, fix['bucket_by_size'])`; "
        f"{rest})."
    )
    return fix, words


def resize(
    inputs: Sequence[str],
    targets: Sequence[Dict[str, Any]],
    signatures: Sequence[Tuple[InputSignature, int]],
    data: str,
) -> Tuple[Dict[str, Any], str]:
    """Advice only (``xla_keras.data`` does not resize: the interpolation and the size are the model's
    choices): each batch resized to one size in the input pipeline, 1 compile, no zeros."""
    largest: Dict[Tuple[str, int], int] = {}
    for sig, _ in signatures:
        for leaf in sig:
            for t in targets:
                if t["path"] == leaf.path and t["path"] in inputs and t["axis"] < len(leaf.shape):
                    size = leaf.shape[t["axis"]]
                    if size is not None:
                        key = (leaf.path, t["axis"])
                        largest[key] = max(largest.get(key, 0), size)
    path = inputs[0]
    size = [largest[(p, a)] for p, a in sorted(largest) if p == path]
    ranks = {len(leaf.shape) for sig, _ in signatures for leaf in sig if leaf.path == path}
    axes = sorted(a for p, a in largest if p == path)
    nhwc = len(inputs) == 1 and path == "x" and ranks == {4} and axes == [1, 2]
    code = None
    if nhwc and data == "tf.data":
        code = (
            "import tensorflow as tf\n"
            f"ds = ds.map(lambda x, *rest: (tf.image.resize(x, {tuple(size)}), *rest))  # 1 compile, no zeros"
        )
    elif nhwc:
        code = f"x = keras.ops.image.resize(x, {tuple(size)})  # each batch's images, where you make the batches"
    record: Dict[str, Any] = {"inputs": list(inputs), "size": size, "compiles": 1}
    if code:
        record["code"] = code
    shown = "x".join(map(str, size))
    words = (
        f" Or resize every image to one size in the input pipeline (here the largest seen, {shown}; any "
        "fixed size works, a smaller one costs less compute): 1 compile, and interpolation changes the pixels "
        "but adds no zeros" + (" (`fix['resize']['code']`)." if code else ".")
    )
    return record, words
