"""Real sequence lengths, from a bounded sample of the batches the step wrapper already holds, and the
advice they give: padding measured on real lengths, and bucketing by real length as the other fix.

Storm advice pads to lengths read off the batch shapes; how much of a padded
batch is padding is only visible in the values: token ids padded with 0, or a
Keras mask. The step wrapper hands every call's batches to the monitor; this
module keeps a uniform reservoir of them (Vitter's algorithm L: after the
reservoir fills, a step costs one integer compare until the next pick) and
holds only host-resident integer and boolean leaves, never device buffers.
Values are read only when a storm opens or a report is built after a fit.
Pure: numpy only; tensors are duck-typed (TensorFlow's CPU eager tensors
have ``.numpy()`` and a ``.device``).
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from xla_keras.core.signatures import leaves
from xla_keras.storms.buckets import TARGET_PADDING_OVERHEAD, best_buckets, pad_target
from xla_keras.storms.detection import VaryingAxis
from xla_keras.storms.fixes import REMAINDER, BucketByLength, bucket_code, compiles_words, examples_words

# Enough batches for a stable length distribution (a 1% share is ~2-3 batches), and a bounded
# memory: only integer/boolean leaves of rank >= 2 are kept, and at most MAX_BYTES of them.
CAPACITY = 256
MAX_BYTES = 32 << 20
_DEVICE_MODULES = ("jax", "jaxlib")


def _is_countable(dtype_name: str) -> bool:
    return dtype_name == "bool" or "int" in dtype_name


class _OnDevice(Exception):
    """A leaf lives on an accelerator (or is a distributed value): reading it would sync."""


def _host_array(value: Any) -> Optional[Any]:
    """The leaf as something readable on the host without a device sync, or None (not a tensor)."""
    if isinstance(value, np.ndarray):
        return value
    module = type(value).__module__.split(".")[0]
    if module in _DEVICE_MODULES:
        raise _OnDevice  # jax.Array: a device buffer, even on the CPU platform
    device = getattr(value, "device", None)
    if isinstance(device, str) and hasattr(value, "numpy"):
        if "CPU" not in device.upper():
            raise _OnDevice  # a TensorFlow tensor on a GPU/TPU
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        raise _OnDevice  # anything else with a shape (PerReplica parts, ...): not ours to read
    return None


def countable_leaves(batch: Any) -> Dict[str, Any]:
    """``{path: host array}`` of a batch's integer and boolean leaves of rank >= 2, named like
    the signatures (x / y / sample_weight by position). Raises _OnDevice."""
    out: Dict[str, Any] = {}
    for path, value in leaves(batch):
        array = _host_array(value)
        if array is None:
            continue
        dtype = getattr(array.dtype, "name", str(array.dtype))
        if len(array.shape) >= 2 and _is_countable(str(dtype)):
            out[path] = array
    return out


NEVER = 1 << 30  # no further batch will be examined


class BatchSample:
    """A uniform reservoir of one phase's batches (their countable host leaves only)."""

    # Batches examined without one countable leaf (float images, or tensors on a device) before
    # sampling stops for good: a GPU fit must not pay a failed look at every step.
    GIVE_UP_AFTER = 16

    def __init__(self, capacity: int = CAPACITY, max_bytes: int = MAX_BYTES, seed: int = 0):
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.kept: List[Dict[str, Any]] = []
        self.seen = 0
        self.on_device = 0  # batches examined that lived on a device: not sampled
        self._bytes = 0
        self._rng = random.Random(seed)
        self._next: Optional[int] = 0  # 0-based index of the next batch to examine; None: stopped
        self._w = 1.0

    def offer(self, batches: Sequence[Any]) -> None:
        """One call's batches. The steady cost is one compare per batch until the next pick."""
        for batch in batches:
            index = self.seen
            self.seen = index + 1
            if index == self._next:
                self._take(batch)

    def batches_before_pick(self) -> int:
        """How many batches may pass uncompared before the next one to examine (the steady lane's
        budget: it counts ``seen`` itself and stops short of the pick)."""
        return NEVER if self._next is None else max(0, self._next - self.seen)

    def _take(self, batch: Any) -> None:
        try:
            leaves = countable_leaves(batch)
        except _OnDevice:
            self.on_device += 1
            leaves = {}
        if not leaves:
            if not self.kept and self.seen >= self.GIVE_UP_AFTER:
                self._next = None
            elif len(self.kept) < self.capacity:
                self._next = self.seen
            else:
                self._schedule()
            return
        size = sum(int(a.nbytes) if hasattr(a, "nbytes") else int(np.prod(a.shape)) * 8 for a in leaves.values())
        if len(self.kept) < self.capacity and (self._bytes + size <= self.max_bytes or not self.kept):
            self.kept.append(leaves)
            self._bytes += size
            if len(self.kept) < self.capacity:
                self._next = self.seen
                return
            self._w = math.exp(math.log(self._random()) / self.capacity)
        else:
            self.capacity = len(self.kept)  # the memory bound filled it first
            self.kept[self._rng.randrange(len(self.kept))] = leaves
            self._w *= math.exp(math.log(self._random()) / self.capacity)
        self._schedule()

    def _random(self) -> float:
        return self._rng.random() or 1e-12

    def _schedule(self) -> None:
        gap = math.floor(math.log(self._random()) / math.log(1.0 - self._w)) if 0.0 < self._w < 1.0 else 0
        self._next = self.seen + gap

    def reason_unsampled(self) -> Optional[str]:
        """Why no real length can be stated, or None when there is a sample."""
        if self.kept:
            return None
        if self.on_device:
            return "the batches were on a device (reading them would sync it), so no sample was taken"
        return "no integer or mask input was seen on the host"


@dataclass
class RealLengths:
    """Real lengths of one (path, axis) over the sampled batches.

    ``batches``: ``[(fed length, real lengths of its rows)]``, one per sampled batch.
    """

    path: str
    axis: int
    batches: List[Tuple[int, np.ndarray]]
    sampled: int
    seen: int
    rank: int = 2  # the leaf's rank in a batch (an example has one axis fewer)

    def histogram(self) -> Dict[int, int]:
        counts: Dict[int, int] = {}
        for _, rows in self.batches:
            values, n = np.unique(rows, return_counts=True)
            for v, c in zip(values.tolist(), n.tolist()):
                counts[int(v)] = counts.get(int(v), 0) + int(c)
        return counts

    def real_tokens(self) -> int:
        return int(sum(int(rows.sum()) for _, rows in self.batches))

    def fed_tokens(self) -> int:
        return int(sum(fed * len(rows) for fed, rows in self.batches))

    def padded_tokens(self, pad_to) -> int:
        """Tokens of the sampled batches once each is padded to ``pad_to(fed length)``."""
        return int(sum(pad_to(fed) * len(rows) for fed, rows in self.batches))

    def bucketed_tokens(self, pad_to) -> int:
        """Tokens once every row is padded to ``pad_to(its real length)`` (bucketing by length)."""
        return int(
            sum(
                sum(pad_to(int(v)) * int(c) for v, c in zip(*np.unique(rows, return_counts=True)))
                for _, rows in self.batches
            )
        )

    def rows(self) -> int:
        return int(sum(len(rows) for _, rows in self.batches))


def real_lengths(array: Any, axis: int) -> np.ndarray:
    """Per row: positions along ``axis`` that hold a nonzero value (any, across other axes).
    Zero is padding, as for Keras's ``mask_zero``; a mask counts its ones."""
    values = np.asarray(array.numpy() if hasattr(array, "numpy") and not isinstance(array, np.ndarray) else array)
    nonzero = values != 0
    other = tuple(a for a in range(1, values.ndim) if a != axis)
    if other:
        nonzero = nonzero.any(axis=other)
        axis = 1 if axis >= 1 else axis
    return nonzero.sum(axis=axis).astype(np.int64)


def measure(sample: Any, candidates: Sequence[Tuple[str, int]]) -> Optional[RealLengths]:
    """Real lengths of the first candidate ``(path, axis)`` that ``sample`` (anything with ``kept`` and
    ``seen``: a BatchSample or a frozen view of one) holds as a countable
    leaf (tokens, then a co-varying mask or ids), or None."""
    for path, axis in candidates:
        if "@" in path or axis < 1:
            continue
        batches, rank = [], 2
        for kept in sample.kept:
            array = kept.get(path)
            if array is not None and axis < len(array.shape):
                batches.append((int(array.shape[axis]), real_lengths(array, axis)))
                rank = len(array.shape)
        if batches:
            return RealLengths(path, axis, batches, len(batches), sample.seen, rank)
    return None


# Real lengths: the padding the sampled batches really carry, and bucketing by real length as the other fix.


# Bucketing by real length is called the better fix when it cuts at least this share of the
# padded tokens that padding the batches leaves (below it, the simpler fix is as good).
BETTER_BY = 0.05


@dataclass(frozen=True)
class SampleView:
    """The sampled batches at one moment (a storm opened, a fit ended): what real lengths are
    measured on. ``kept`` is a copy of the reservoir's list, never changed afterwards."""

    kept: Tuple[Dict[str, Any], ...] = ()
    seen: int = 0
    version: int = 0
    unsampled: Optional[str] = None  # why nothing was sampled

    def measure(self, candidates: Sequence[Tuple[str, int]]) -> Optional[RealLengths]:
        return measure(self, candidates)  # a view has the sample's kept batches and count


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _zeros(overhead: float) -> str:
    """An overhead (padded / real - 1) as the share of the computed tokens that are padding."""
    return f"{overhead / (1 + overhead):.0%} of the tokens computed are zeros"


def real_length_figures(
    axis: VaryingAxis,
    lengths: Sequence[int],
    view: Optional[SampleView],
    threshold: int,
    batch_size: Optional[int],
    phase: str,
    data: str,
    targets: Sequence[Dict[str, Any]],
    bucketable: bool,
    pad_compiles: int,
    costs: Optional[Costs] = None,
) -> Tuple[Dict[str, Any], str]:
    """Fix fields and advice text from the real lengths of ``axis`` (or an input that varies with it):
    the padding of the batches as fed and after the pad fix, against real tokens, and the bucketing
    alternative computed on the real length distribution."""
    if view is None:
        return {}, ""
    candidates = [(axis.path, axis.axis)] + [(o.rsplit(":", 1)[0], int(o.rsplit(":", 1)[1])) for o in axis.also]
    try:
        measured = view.measure(candidates) if not view.unsampled else None
        failed = None
    except Exception as error:  # noqa: BLE001 - a figure of the advice, never a reason to fail the report
        measured, failed = None, f"reading the sampled batches failed ({type(error).__name__}: {error})"
    if measured is None or measured.real_tokens() <= 0:
        reason = (
            failed
            or view.unsampled
            or (
                "no integer or mask input varies with it (real lengths are counted as the nonzero positions of "
                "token ids or a mask)"
            )
        )
        return ({"real_lengths": {"measured": False, "reason": reason}}, f" Real lengths not measured: {reason}.")
    real = measured.real_tokens()
    fed_overhead = measured.fed_tokens() / real - 1
    pad_tokens = measured.padded_tokens(lambda fed: pad_target(fed, lengths))
    pad_overhead = pad_tokens / real - 1
    rows = measured.rows()
    histogram = measured.histogram()
    sample_words = (
        f"all {measured.sampled} batches"
        if measured.sampled >= measured.seen
        else f"a sample of {measured.sampled} of {measured.seen} batches"
    )
    fields: Dict[str, Any] = {
        "real_lengths": {
            "measured": True,
            "path": measured.path,
            "axis": measured.axis,
            "sampled_batches": measured.sampled,
            "batches_seen": measured.seen,
            "rows": rows,
            "real_tokens": real,
            "mean": round(real / rows, 2) if rows else None,
            "max": max(histogram) if histogram else None,
        },
        "batches_real_padding_overhead": round(fed_overhead, 4),
        "real_padding_overhead": round(pad_overhead, 4),
    }
    text = (
        f" Against the real tokens of '{measured.path}' ({sample_words}; mean real length {real / rows:.1f}), "
        f"padding adds {_pct(fed_overhead)} to the batches as fed ({_zeros(fed_overhead)}) and "
        f"{_pct(pad_overhead)} once padded to {list(lengths)} ({_zeros(pad_overhead)})."
    )
    if not bucketable:
        if phase == "predict":
            text += " (Bucketing by length is not offered for predict: it would reorder the outputs.)"
        return fields, text
    bucket_fields, bucket_text = _bucketing(
        measured, histogram, lengths, threshold, batch_size, phase, data, targets, pad_compiles, costs
    )
    fields.update(bucket_fields)
    return fields, text + bucket_text


def _bucketing(
    measured: RealLengths,
    histogram: Dict[int, int],
    lengths: Sequence[int],
    threshold: int,
    batch_size: Optional[int],
    phase: str,
    data: str,
    targets: Sequence[Dict[str, Any]],
    pad_compiles: int,
    costs: Optional[Costs],
) -> Tuple[Dict[str, Any], str]:
    """The bucketing alternative on the real length distribution (fewest buckets within the padding
    target, below the storm threshold), its fields and its words against padding to ``lengths``."""
    real, rows = measured.real_tokens(), measured.rows()  # sums; the histogram (np.unique per batch) is the caller's
    k, bounds, overhead = 1, *best_buckets(histogram, 1)
    while overhead > TARGET_PADDING_OVERHEAD and k + 1 < threshold:
        more, more_overhead = best_buckets(histogram, k + 1)
        if len(more) == len(bounds):
            break
        k, bounds, overhead = k + 1, more, more_overhead
    per_epoch = (
        costs.rows_per_run
        if costs and costs.rows_per_run
        else rows * max(1.0, measured.seen / max(1, measured.sampled))
    )
    remainder = REMAINDER[phase]
    epoch = bucket_epoch(histogram, bounds, per_epoch, batch_size, remainder)
    bounds = epoch.bounds
    real_per_row = real / rows
    pad_per_row = measured.padded_tokens(lambda fed: pad_target(fed, lengths)) / rows
    # Per example computed (dropped examples cost nothing, padded rows do): the compute comparison.
    bucket_per_row = epoch.tokens / epoch.kept if epoch.kept else float("inf")
    bucket_overhead = measured.bucketed_tokens(lambda v: pad_target(v, bounds)) / real - 1
    bucket = BucketByLength(
        length_of={"path": measured.path, "axis": measured.axis, "rank": measured.rank},
        lengths=bounds,
        targets=[{"path": t["path"], "axis": t["axis"]} for t in targets],
        batch_size=batch_size,
        remainder=remainder,
        compiles=len(bounds),
        real_padding_overhead=round(bucket_overhead, 4),
        examples_per_epoch=round(per_epoch),
        dropped_per_epoch=round(epoch.dropped) if remainder == "drop" else None,
        padded_rows_per_epoch=None if remainder == "drop" else round(epoch.padded_rows),
    )
    bucket = dataclasses.replace(bucket, code=bucket_code(bucket, data))
    ratio = pad_per_row / bucket_per_row if bucket_per_row else 0.0
    saving = 1 - 1 / ratio if ratio else 0.0
    better = "bucket_by_length" if saving >= BETTER_BY else "pad_to_lengths"
    fields = {"bucket_by_length": bucket, "compute_ratio": round(ratio, 4), "better_fix": better}
    if remainder == "drop":
        of = (
            f"of {round(per_epoch)} per epoch"
            if not costs or costs.whole_run
            else f"of the {round(per_epoch)} seen so far"
        )
        rows_words = f"; the partial batch of each bucket is dropped: about {examples_words(round(epoch.dropped))} {of}"
    else:
        rows_words = (
            f"; each bucket's last batch is padded: about {round(epoch.padded_rows)} rows per run that "
            "unweighted metrics and the loss tracker count"
        )
    text = (
        f" Bucketing the examples by real length to {bounds} ({compiles_words(len(bounds))}{rows_words}) adds "
        f"{_pct(bucket_overhead)}."
    )
    if better == "bucket_by_length":
        extra = len(bounds) - pad_compiles
        zeros_pad, zeros_bucket = pad_per_row - real_per_row, bucket_per_row - real_per_row
        text += (
            f" Bucketing saves more compute: {ratio:.2f}x fewer tokens computed per example than padding the "
            f"batches ({saving:.0%} less"
            + (f"; the padding zeros fall {zeros_pad / zeros_bucket:.1f}x" if zeros_bucket > 0 else "")
            + (f"; for {compiles_words(extra)} more" if extra > 0 else "")
            + ")"
        )
        payback = payback_words(extra, costs, measured, pad_per_row, bucket_per_row, per_epoch)
        text += payback + ": `xla_keras.data.bucket_by_length(examples, fix)` on the examples before batching."
    else:
        text += f" Padding the batches is as good (bucketing would save {saving:.0%} of the tokens computed)."
    return fields, text


class Costs(NamedTuple):
    """What a phase's compiles and steps cost, for the advice's trade-offs."""

    rows_per_run: Optional[int]  # examples per epoch (or evaluate / predict run)
    mean_compile_seconds: Optional[float]
    steady_step_seconds: Optional[float]
    whole_run: bool = True  # False: no run has ended yet, rows_per_run is what was seen so far


class BucketEpoch(NamedTuple):
    bounds: List[int]
    tokens: float  # tokens computed per epoch
    kept: float  # examples computed per epoch (dropped ones excluded)
    dropped: float
    padded_rows: float


def bucket_epoch(
    histogram: Dict[int, int], bounds: Sequence[int], per_epoch: float, batch_size: Optional[int], remainder: str
) -> BucketEpoch:
    """One epoch of bucketing by length, expected from the sampled length distribution. With
    ``remainder="drop"`` a bucket that fills no batch would never be trained on: its boundary is
    removed (its examples go up to the next bucket; a sparse last bucket absorbs the one below)."""
    total = sum(histogram.values())
    bounds = list(bounds)
    b = batch_size or 1

    def counts(bs):
        n = [0.0] * len(bs)
        for v, c in histogram.items():
            n[next((i for i, x in enumerate(bs) if v <= x), len(bs) - 1)] += c * per_epoch / total
        return n

    n = counts(bounds)
    while remainder == "drop" and len(bounds) > 1 and min(n) < b:
        i = min(range(len(n)), key=lambda j: n[j])
        del bounds[i if i < len(bounds) - 1 else i - 1]
        n = counts(bounds)
    tokens = kept = dropped = padded = 0.0
    for x, m in zip(bounds, n):
        full = (m // b) * b if remainder == "drop" else -(-m // b) * b
        tokens += full * x
        kept += min(full, m)
        dropped += max(0.0, m - full)
        padded += max(0.0, full - m)
    return BucketEpoch(bounds, tokens, kept, dropped, padded)


def payback_words(
    extra: int,
    costs: Optional[Costs],
    measured: RealLengths,
    pad_per_row: float,
    bucket_per_row: float,
    per_epoch: float,
) -> str:
    """When bucketing's extra compiles are repaid, if step time follows the tokens computed."""
    if extra <= 0 or not costs or not costs.mean_compile_seconds or not costs.steady_step_seconds:
        return ""
    fed_per_row = measured.fed_tokens() / measured.rows()
    seconds_per_token = costs.steady_step_seconds / (fed_per_row * measured.rows() / measured.sampled)
    saved_per_epoch = seconds_per_token * (pad_per_row - bucket_per_row) * per_epoch
    if saved_per_epoch <= 0:
        return ""
    cost = extra * costs.mean_compile_seconds
    epochs = cost / saved_per_epoch
    when = f"{epochs:.1f}" if epochs < 10 else f"{epochs:.0f}"
    return (
        f"; if step time follows the tokens, its {extra} extra compiles (~{cost:.1f} s) are repaid after ~{when} epochs"
    )
