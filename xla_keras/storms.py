"""Recompilation storms: detection over a window, causes, and computed advice.

Pure (no TensorFlow). A storm is ``threshold`` signatures new to the running
function within ``window`` steps of one phase: each one is an XLA compile of
hundreds of ms against ~1 ms steady steps. The cause is read off the shapes
actually seen, and the fix is computed from them: the exact lengths to pad to,
the padding it costs and the compiles it implies, plus tf.data code that
applies it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .arguments import integer
from .signatures import InputSignature, diff, fingerprint

ON_STORM = ("warn", "raise", "fallback")
# Beyond this many distinct signatures per phase the history keeps counting
# batches of known signatures but stores no new ones: memory stays bounded.
MAX_TRACKED_SIGNATURES = 4096
# Bucket boundaries are rounded up to a multiple of this (friendlier kernels,
# fewer distinct candidates); lengths at or below it are kept exact.
BOUNDARY_MULTIPLE = 8
# The smallest number of buckets whose padding overhead is at most this wins.
TARGET_PADDING_OVERHEAD = 0.20
MAX_VALUES_LISTED = 64


class RecompilationStormError(RuntimeError):
    """Raised by ``XlaMonitor(on_storm="raise")``: the message is the storm's advice."""


@dataclass
class Storm:
    """A burst of new input signatures in one phase, and what to do about it.

    Attributes:
        phase: "train", "test" or "predict".
        step: the step at which the storm opened (the threshold-th new signature).
        count: new signatures within the window at that step.
        varying: ``[{"path", "axis", "min", "max", "n_values", "values"}]``.
        advice: the human text.
        fix: machine-readable fix (``kind`` is "pad_to_lengths", "fixed_batch_size",
            "drop_remainder" or "consistent_structure").
        compiles: compiles of the phase so far; compile_seconds: their time.
        steady_step_seconds: the phase's steady median when it opened.
        action: what the monitor did: "warn", "raise" or "fallback".
    """

    phase: str
    step: int
    count: int
    varying: List[Dict[str, Any]] = field(default_factory=list)
    advice: str = ""
    fix: Dict[str, Any] = field(default_factory=dict)
    compiles: int = 0
    compile_seconds: float = 0.0
    steady_step_seconds: Optional[float] = None
    window_start: int = 0
    action: str = "warn"

    def to_dict(self) -> Dict[str, Any]:
        return {"phase": self.phase, "step": self.step, "count": self.count, "varying": self.varying,
                "advice": self.advice, "fix": self.fix, "compiles": self.compiles,
                "compile_seconds": self.compile_seconds,
                "steady_step_seconds": self.steady_step_seconds, "window_start": self.window_start,
                "action": self.action}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Storm":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


class StormDetector:
    """Opens a storm when a phase's window holds ``threshold`` new signatures.

    One storm at a time per phase: the next can open only after the count in
    the window has fallen back below the threshold. Memory: ``threshold``
    step numbers per phase.
    """

    def __init__(self, threshold: int = 8, window: int = 200):
        if integer(threshold) is None or threshold < 2:
            raise ValueError(f"storm_threshold must be an int >= 2; got {threshold!r}")
        if integer(window) is None or window < 1:
            raise ValueError(f"storm_window must be an int >= 1; got {window!r}")
        self.threshold = integer(threshold)
        self.window = integer(window)
        self._recent: Dict[str, deque] = {}
        self._open: Dict[str, bool] = {}

    def new_signature(self, phase: str, step: int) -> Optional[Tuple[int, int]]:
        """Record a new signature at ``step``. Returns ``(count, window_start)``
        when this one opens a storm, else None."""
        recent = self._recent.setdefault(phase, deque(maxlen=self.threshold))
        recent.append(step)
        first = step - self.window + 1
        count = sum(1 for s in recent if s >= first)
        if count < self.threshold:
            self._open[phase] = False
            return None
        if self._open.get(phase):
            return None
        self._open[phase] = True
        return count, recent[0]


# ------------------------------------------------------------------ history


class ShapeHistory:
    """The signatures a phase has seen, with batch counts and epoch ends."""

    def __init__(self, max_signatures: int = MAX_TRACKED_SIGNATURES):
        self.max_signatures = max_signatures
        self.signatures: Dict[int, InputSignature] = {}
        self.batches: Dict[int, int] = {}
        self.ends: Dict[int, int] = {}   # times a signature was the last batch of an epoch
        self.runs = 0                    # epochs (train) or evaluate/predict runs ended
        self.last: Optional[int] = None
        self.untracked = 0

    def observe(self, signature: InputSignature) -> None:
        fp = fingerprint(signature)
        count = self.batches.get(fp)
        if count is None:
            if len(self.signatures) >= self.max_signatures:
                self.untracked += 1
                self.last = None
                return
            self.signatures[fp] = signature
            count = 0
        self.batches[fp] = count + 1
        self.last = fp

    def observe_repeat(self, signature: InputSignature) -> None:
        """``observe`` for a batch of the same signature as the last one observed."""
        if self.last is not None:
            self.batches[self.last] += 1
        else:
            self.observe(signature)

    def end_of_run(self) -> None:
        """The last batch observed closed an epoch (or an evaluate/predict run)."""
        self.runs += 1
        if self.last is not None:
            self.ends[self.last] = self.ends.get(self.last, 0) + 1


def _structure(sig: InputSignature) -> tuple:
    return tuple((leaf.path, leaf.dtype, len(leaf.shape)) for leaf in sig)


def partial_batch_signatures(history: ShapeHistory) -> Dict[int, Tuple[int, int]]:
    """Signatures that only ever came as the last batch of an epoch (or run)
    with fewer rows than the usual batch size: ``{fp: (rows, batch_size)}``.
    Their other axes may differ too (a padded last batch)."""
    if len(history.signatures) < 2 or not history.ends:
        return {}
    rows_weight: Dict[int, int] = {}
    for fp, sig in history.signatures.items():
        rows = batch_rows(sig)
        if rows is not None:
            rows_weight[rows] = rows_weight.get(rows, 0) + history.batches.get(fp, 0)
    if not rows_weight:
        return {}
    batch_size = max(rows_weight, key=lambda r: (rows_weight[r], r))
    found = {}
    for fp, ends in history.ends.items():
        sig = history.signatures.get(fp)
        if sig is None or ends != history.batches.get(fp):
            continue
        rows = batch_rows(sig)
        if rows is not None and rows < batch_size:
            found[fp] = (rows, batch_size)
    return found


def batch_rows(sig: InputSignature) -> Optional[int]:
    """Rows of a batch: axis 0, when every leaf agrees on it."""
    rows = {leaf.shape[0] for leaf in sig if leaf.shape}
    return rows.pop() if len(rows) == 1 else None


# ------------------------------------------------------------------ causes


@dataclass
class _Axis:
    path: str
    axis: int
    values: Dict[int, int]           # value -> batches
    also: List[str] = field(default_factory=list)  # co-varying "path:axis"

    def describe(self) -> Dict[str, Any]:
        vals = sorted(v for v in self.values if v is not None)
        out = {"path": self.path, "axis": self.axis, "min": vals[0] if vals else None,
               "max": vals[-1] if vals else None, "n_values": len(vals),
               "values": vals[:MAX_VALUES_LISTED]}
        if self.also:
            out["also"] = list(self.also)
        return out


def varying_axes(signatures: Sequence[Tuple[InputSignature, int]]) -> List[_Axis]:
    """(path, axis) whose size differs between signatures of the dominant
    structure, co-varying axes merged (e.g. tokens and mask lengths)."""
    if not signatures:
        return []
    by_structure: Dict[tuple, List[Tuple[InputSignature, int]]] = {}
    for sig, n in signatures:
        by_structure.setdefault(_structure(sig), []).append((sig, n))
    group = max(by_structure.values(), key=lambda g: sum(n for _, n in g))
    columns: Dict[Tuple[str, int], List[Optional[int]]] = {}
    weights = [n for _, n in group]
    for sig, _ in group:
        for leaf in sig:
            for axis, size in enumerate(leaf.shape):
                columns.setdefault((leaf.path, axis), []).append(size)
    merged: Dict[tuple, _Axis] = {}
    for (path, axis), column in columns.items():
        if len(set(column)) < 2:
            continue
        key = tuple(column)
        if key in merged:
            merged[key].also.append(f"{path}:{axis}")
            continue
        values: Dict[int, int] = {}
        for size, w in zip(column, weights):
            values[size] = values.get(size, 0) + w
        merged[key] = _Axis(path, axis, values)
    return list(merged.values())


def structures_differ(signatures: Sequence[Tuple[InputSignature, int]]) -> bool:
    return len({_structure(sig) for sig, _ in signatures}) > 1


# ------------------------------------------------------------------ buckets


# Lengths up to this stay exact candidates (rounding short sequences to 8
# would cost a lot of padding: 9..18 as [16, 24] is 45%).
EXACT_UP_TO = 32
MAX_CANDIDATES = 128


def _round_up(value: int, multiple: int, exact_up_to: int = EXACT_UP_TO) -> int:
    if value <= exact_up_to:
        return value
    return int(math.ceil(value / multiple) * multiple)


def _candidates(lengths: Dict[int, int], multiple: int) -> Dict[int, List[int]]:
    """Candidate boundaries -> the observed lengths they cover. Short lengths
    stay exact, longer ones are rounded up to ``multiple``; past
    MAX_CANDIDATES every length is put on a coarser grid, doubling until it
    fits (the grid always coarsens, so this ends)."""
    exact_up_to = EXACT_UP_TO
    while True:
        rounded: Dict[int, List[int]] = {}
        for v in sorted(lengths):
            rounded.setdefault(_round_up(v, multiple, exact_up_to), []).append(v)
        if len(rounded) <= MAX_CANDIDATES:
            return rounded
        exact_up_to = 0
        multiple *= 2


def best_buckets(lengths: Dict[int, int], k: int, multiple: int = BOUNDARY_MULTIPLE) -> Tuple[List[int], float]:
    """At most ``k`` lengths to pad to, minimising padding over the observed
    lengths (``{length: batches}``). Returns (sorted boundaries, overhead) with
    overhead = padded / real - 1. Exact dynamic programme over the candidate
    boundaries (short lengths exact, longer ones rounded up to ``multiple``)."""
    real = sum(v * w for v, w in lengths.items())
    if not lengths or real <= 0:
        return [], 0.0
    rounded = _candidates(lengths, multiple)
    cands = sorted(rounded)
    n = len(cands)
    k = max(1, min(k, n))
    # Weight and token sums per candidate, prefix sums for O(1) group costs.
    w = [sum(lengths[v] for v in rounded[c]) for c in cands]
    s = [sum(v * lengths[v] for v in rounded[c]) for c in cands]
    pw, ps = [0], [0]
    for a, b in zip(w, s):
        pw.append(pw[-1] + a)
        ps.append(ps[-1] + b)

    def cost(i: int, j: int) -> int:  # candidates i..j padded to cands[j]
        return cands[j] * (pw[j + 1] - pw[i]) - (ps[j + 1] - ps[i])

    inf = float("inf")
    best = [[inf] * n for _ in range(k + 1)]
    back = [[-1] * n for _ in range(k + 1)]
    for j in range(n):
        best[1][j] = cost(0, j)
    for b in range(2, k + 1):
        for j in range(n):
            for i in range(b - 2, j):
                c = best[b - 1][i] + cost(i + 1, j)
                if c < best[b][j]:
                    best[b][j], back[b][j] = c, i
    b = min(range(1, k + 1), key=lambda x: (best[x][n - 1], x))
    boundaries, j = [], n - 1
    while b >= 1 and j >= 0:
        boundaries.append(cands[j])
        j = back[b][j]
        b -= 1
    boundaries.sort()
    return boundaries, best_cost_overhead(lengths, boundaries)


def best_cost_overhead(lengths: Dict[int, int], boundaries: Sequence[int]) -> float:
    real = sum(v * w for v, w in lengths.items())
    padded = sum(_pad_to(v, boundaries) * w for v, w in lengths.items())
    return padded / real - 1 if real else 0.0


def _pad_to(v: int, boundaries: Sequence[int]) -> int:
    for b in boundaries:
        if v <= b:
            return b
    return v  # longer than every boundary: unseen length, left as is


def choose_buckets(axes: List[_Axis], signatures: Sequence[Tuple[InputSignature, int]],
                   max_compiles: int) -> Tuple[List[List[int]], float, int]:
    """Bucket each varying axis so the joint number of padded signatures stays
    below ``max_compiles``: start with one bucket each and add buckets where
    they save the most padding while padding is above the target."""
    ks = [1] * len(axes)
    buckets = [best_buckets(a.values, 1)[0] for a in axes]

    def joint(bk):
        combos = set()
        index = {(a.path, a.axis): i for i, a in enumerate(axes)}
        for sig, _ in signatures:
            combo = []
            for leaf in sig:
                for axis, size in enumerate(leaf.shape):
                    i = index.get((leaf.path, axis))
                    if i is not None and size is not None:
                        combo.append(_pad_to(size, bk[i]))
            combos.add(tuple(combo))
        return max(1, len(combos))

    def overhead(bk):
        real = padded = 0
        for a, b in zip(axes, bk):
            real += sum(v * w for v, w in a.values.items() if v is not None)
            padded += sum(_pad_to(v, b) * w for v, w in a.values.items() if v is not None)
        return padded / real - 1 if real else 0.0

    while overhead(buckets) > TARGET_PADDING_OVERHEAD:
        options = []
        for i, a in enumerate(axes):
            trial = list(buckets)
            trial[i] = best_buckets(a.values, ks[i] + 1)[0]
            if len(trial[i]) == len(buckets[i]):
                continue  # no more distinct lengths to split on
            if joint(trial) < max_compiles:
                options.append((overhead(trial), i, trial))
        if not options:
            break
        _, i, buckets = min(options)
        ks[i] += 1
    return buckets, overhead(buckets), joint(buckets)


# ------------------------------------------------------------------ advice


_PAD_UP = """\
def _pad_up(t, axis, lengths):
    # pad axis `axis` up to the next of the advised lengths
    n = tf.shape(t)[axis]
    fits = tf.boolean_mask(tf.constant(lengths), tf.constant(lengths) >= n)
    # longer than every length seen: the last one doubled as often as needed
    # (a few more compiles, never one per length, never an error)
    last = lengths[-1]
    doublings = tf.math.ceil(tf.math.log(tf.cast(n, tf.float32) / last) / tf.math.log(2.0))
    beyond = last * tf.cast(2.0 ** tf.maximum(doublings, 0.0), tf.int32)
    target = tf.cond(tf.size(fits) > 0, lambda: fits[0], lambda: tf.maximum(beyond, n))
    return tf.pad(t, tf.scatter_nd([[axis, 1]], [target - n], [tf.rank(t), 2]))
"""


# The same padding for data that is not tf.data (Keras's JAX backend takes numpy arrays,
# generators and PyDatasets as well): numpy only, no TensorFlow.
_PAD_UP_NUMPY = """\
import math

import numpy as np


def _pad_up(t, axis, lengths):
    # pad axis `axis` (with 0) up to the next of the advised lengths
    t = np.asarray(t)
    n = t.shape[axis]
    fits = [length for length in lengths if length >= n]
    # longer than every length seen: the last one doubled as often as needed
    # (a few more compiles, never one per length, never an error)
    target = fits[0] if fits else max(n, lengths[-1] * 2 ** math.ceil(math.log2(n / lengths[-1])))
    widths = [(0, 0)] * t.ndim
    widths[axis] = (0, target - n)
    return np.pad(t, widths)
"""

_APPLY_NUMPY = """\
# A generator: batches = (pad_to_lengths(*batch) for batch in batches)
# A keras.utils.PyDataset: return pad_to_lengths(*batch) from __getitem__"""

REBATCH_NUMPY = """\
import keras
import numpy as np


def rebatch(batches, size):
    # batches of exactly `size` rows from batches of any size (a last partial batch is dropped)
    pending, rows = [], 0
    for batch in batches:
        pending.append(batch)
        rows += len(keras.tree.flatten(batch)[0])
        while rows >= size:
            joined = keras.tree.map_structure(lambda *parts: np.concatenate(parts), *pending)
            yield keras.tree.map_structure(lambda a: a[:size], joined)
            pending, rows = [keras.tree.map_structure(lambda a: a[size:], joined)], rows - size


"""

DATA_KINDS = ("tf.data", "arrays")  # arrays: numpy / generators / PyDataset (no TensorFlow in the fix)


def _index(part: str) -> str:
    return f"[{part}]" if part.isdigit() else f"[{part!r}]"


def pad_code(targets: Sequence[Tuple[str, int, Sequence[int]]], top_names: Sequence[str], compiles: int,
             data: str = "tf.data") -> str:
    """Code that pads every batch's ``(path, axis)`` up to the next of its
    ``lengths``, for any input structure, so it applies to several varying
    inputs at once: a tf.data map after the user's own batching, or (``data``
    "arrays") a numpy function to apply to each batch of a generator or
    PyDataset."""
    names = _map_args(top_names)
    body, copied, tuples = [], set(), []
    for path, axis, lengths in targets:
        if "@" in path:
            continue  # another replica's view of a leaf already padded
        parts = path.split("/")
        expr = parts[0]
        for part in parts[1:]:
            if expr not in copied:  # copy a container before writing into it
                if part.isdigit():
                    body.append(f"    {expr} = list({expr})")
                    tuples.append(expr)
                else:
                    body.append(f"    {expr} = dict({expr})")
                copied.add(expr)
            expr += _index(part)
        body.append(f"    {expr} = _pad_up({expr}, {axis}, {list(lengths)})")
    body += [f"    {expr} = tuple({expr})" for expr in reversed(tuples)]
    args = ", ".join(names)
    ret = names[0] if len(names) == 1 else args
    if data == "arrays":
        return (
            "# Batch to a fixed size, then pad every batch up to the advised lengths: "
            + _compiles(compiles) + " for the shapes seen.\n"
            + _PAD_UP_NUMPY + "\n\n"
            f"def pad_to_lengths({args}):\n" + "\n".join(body) + f"\n    return {ret}\n\n\n" + _APPLY_NUMPY)
    return (
        "# Batch with drop_remainder=True (e.g. .padded_batch(32, drop_remainder=True)), then pad\n"
        "# every batch up to the advised lengths: " + _compiles(compiles) + " for the shapes seen.\n"
        + _PAD_UP + "\n\n"
        f"def pad_to_lengths({args}):\n" + "\n".join(body) + f"\n    return {ret}\n\n\n"
        "ds = ds.map(pad_to_lengths)"
    )


def _map_args(top_names: Sequence[str]) -> List[str]:
    """Argument names of a tf.data map function over the element (x[, y[, sample_weight]])."""
    names = ["x"]
    if "y" in top_names or "sample_weight" in top_names:
        names.append("y")
    if "sample_weight" in top_names:
        names.append("sample_weight")
    return names


def bucket_code(path: str, axis: int, lengths: Sequence[int], batch_size: Optional[int],
                top_names: Sequence[str] = ("x", "y")) -> str:
    """The bucket_by_sequence_length alternative for one input: also groups
    examples by length (less padding), on the dataset of single examples.
    Lengths longer than every advised one make it fail, so it is offered as
    text, not as the fix's ``code``."""
    expr = path.split("/")[0] + "".join(_index(p) for p in path.split("/")[1:])
    args = ", ".join(_map_args(top_names))
    return (
        f"ds.bucket_by_sequence_length(lambda {args}: tf.shape({expr})[{axis - 1}], "
        f"bucket_boundaries={[b + 1 for b in lengths]}, bucket_batch_sizes=[{batch_size or 32}] * "
        f"{len(lengths) + 1}, pad_to_bucket_boundary=True, drop_remainder=True)"
    )


def _compiles(n: int) -> str:
    return f"{n} compile" + ("" if n == 1 else "s")


def _fmt_ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


def analyse(phase: str, history: ShapeHistory, threshold: int,
            data: str = "tf.data") -> Tuple[List[Dict[str, Any]], str, Dict[str, Any]]:
    """Cause, advice and fix from everything the phase has seen. ``data``: "tf.data", or
    "arrays" (numpy, generators, PyDataset under Keras's JAX backend): the fix's code then
    needs no TensorFlow.

    Returns (varying, advice text without the header line, fix)."""
    partial = partial_batch_signatures(history)
    sigs = [(sig, history.batches.get(fp, 1)) for fp, sig in history.signatures.items() if fp not in partial]
    axes = varying_axes(sigs)
    batch_axes = [a for a in axes if a.axis == 0]
    length_axes = [a for a in axes if a.axis != 0]
    varying = [a.describe() for a in axes]
    partial_text = ""
    if partial:
        rows, full = next(iter(partial.values()))
        if phase == "train":
            partial_text = (f" The last batch of each epoch also has {rows} rows instead of {full} (one extra "
                            "compile per phase): batch with drop_remainder=True to avoid it.")
        else:  # dropping rows would change metrics or predictions
            partial_text = (f" The last batch of each run also has {rows} rows instead of {full}: one extra "
                            "compile, which keeps every example (pad it to the full size to avoid it; "
                            "drop_remainder=True would drop examples from the results).")
    batch_size = None
    if sigs:
        main = max(sigs, key=lambda t: t[1])[0]
        batch_size = batch_rows(main)
    if length_axes:
        buckets, overhead, compiles = choose_buckets(length_axes, sigs, threshold)
        per_input = [{"path": a.path, "axis": a.axis, "lengths": b} for a, b in zip(length_axes, buckets)]
        first = length_axes[0]
        targets = []
        for a, b in zip(length_axes, buckets):
            targets.append((a.path, a.axis, b))
            for other in a.also:  # co-varying leaves (e.g. a mask) get the same lengths
                other_path, other_axis = other.rsplit(":", 1)
                targets.append((other_path, int(other_axis), b))
        tops = sorted({leaf.path.split("/")[0].split("@")[0] for sig, _ in sigs for leaf in sig})
        code = pad_code(targets, tops, compiles, data)
        fix = {"kind": "pad_to_lengths", "path": first.path, "axis": first.axis, "lengths": buckets[0],
               "padding_overhead": round(overhead, 4), "compiles": compiles, "drop_remainder": True,
               "code": code}
        if len(length_axes) > 1:
            fix["per_input"] = per_input
        def together(a: _Axis) -> str:
            return f" (with {', '.join(repr(o) for o in a.also)})" if a.also else ""

        names = "; ".join(
            f"input '{a.path}' axis {a.axis}{together(a)} varies ({d['min']}..{d['max']}, {d['n_values']} values)"
            for a, d in zip(length_axes, (a.describe() for a in length_axes)))
        pad_targets = "; ".join(f"'{a.path}' axis {a.axis} to {b}" for a, b in zip(length_axes, buckets))
        alternative = ""
        if (len(length_axes) == 1 and first.axis >= 1 and not first.also and len(buckets[0]) > 1
                and data == "tf.data"):
            alternative = (" To also cut padding, bucket the examples by length instead (data longer than "
                           f"{buckets[0][-1]} must be cut first): `"
                           + bucket_code(first.path, first.axis, buckets[0], batch_size, tops) + "`.")
        advice = (f"{names[0].upper()}{names[1:]}. Fix: batch with drop_remainder=True and pad "
                  f"{pad_targets} (the fix's code does it: {_compiles(compiles)} for the lengths seen so far, "
                  f"{overhead:.0%} more padding than those batches; longer data doubles the last length), "
                  f"or switch XLA off for this model.{partial_text}{alternative}")
        if batch_axes:
            advice += " The batch size varies too: use a fixed batch size."
        return varying, advice, fix
    if batch_axes:
        a = batch_axes[0]
        d = a.describe()
        size = max(a.values, key=lambda v: (a.values[v], v))
        if data == "arrays":
            code = REBATCH_NUMPY + f"batches = rebatch(batches, {size})  # arrays: model.fit(x, y, batch_size={size})"
            how = f"`rebatch(batches, {size})` in the fix's code, or `batch_size={size}` for arrays"
        else:
            code = f"ds = ds.rebatch({size}, drop_remainder=True)  # or .unbatch().batch({size}, drop_remainder=True)"
            how = f"`ds.rebatch({size}, drop_remainder=True)`"
        fix = {"kind": "fixed_batch_size", "path": a.path, "size": size, "drop_remainder": True, "code": code}
        advice = (f"The batch size varies (input '{a.path}' axis 0: {d['min']}..{d['max']}, "
                  f"{d['n_values']} values). Fix: batch to a fixed size, e.g. "
                  f"{how} (1 compile), or switch XLA off for this model.{partial_text}")
        return varying, advice, fix
    if structures_differ(sigs):
        fix = {"kind": "consistent_structure"}
        advice = ("The inputs change structure or dtype between batches (leaves appear, vanish or change "
                  "dtype or rank): each variant compiles. Fix: feed every batch with the same structure "
                  "and dtypes (cast in the input pipeline).")
        return varying, advice, fix
    if partial:
        rows, full = next(iter(partial.values()))
        return varying, partial_text.strip(), {"kind": "drop_remainder", "rows": rows, "batch_size": full}
    return varying, "New signatures kept arriving but no single input explains them.", {"kind": "unknown"}


def storm_text(storm: Storm, window: int) -> str:
    """The one-paragraph warning (also the RecompilationStormError message)."""
    return (f"Recompilation storm ({storm.phase}): {storm.count} new input shapes in "
            f"{storm.step - storm.window_start + 1} steps (window {window}), {storm.compiles} compiles so "
            f"far, {_fmt_ms(storm.compile_seconds)} compiling"
            + (f" vs {_fmt_ms(storm.steady_step_seconds)} per steady step" if storm.steady_step_seconds is not None
               else " (no steady step measured yet)")
            + f". {storm.advice}")


def partial_batch_note(phase: str, history: ShapeHistory) -> Optional[str]:
    """A partial last batch costs one extra compile: worth a line, never a storm."""
    partial = partial_batch_signatures(history)
    if not partial:
        return None
    rows, full = next(iter(partial.values()))
    if phase == "train":
        return (f"train: the last batch of each epoch has {rows} rows instead of {full}: one extra compile "
                "for this phase (no storm by itself); batch with drop_remainder=True to avoid it")
    return (f"{phase}: the last batch of each run has {rows} rows instead of {full}: one extra compile for this "
            "phase (no storm by itself), which keeps every example; pad it to the full size to avoid it "
            "(drop_remainder=True would drop examples from the results)")


def train_vs_validation_note(train: ShapeHistory, test: ShapeHistory) -> Optional[str]:
    """Validation batches shaped unlike training batches: say why that costs
    no extra compile (the test function is a separate XLA program that compiles
    its own shapes anyway), so it is not mistaken for a storm cause."""
    if not train.batches or not test.batches:
        return None
    main_train = train.signatures[max(train.batches, key=train.batches.get)]
    main_test = test.signatures[max(test.batches, key=test.batches.get)]
    changes = [c for c in diff(main_train, main_test) if c.axis is not None]
    if not changes:
        return None
    described = ", ".join(f"'{c.path}' axis {c.axis}: {c.old} in training vs {c.new} in validation"
                          for c in changes[:3])
    return (f"validation batches are shaped unlike training batches ({described}); the validation step "
            "is a separate XLA program that compiles its own shapes anyway, so this costs no extra compile")
