"""Real sequence lengths, from a bounded sample of the batches the step wrapper already holds.

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

import math
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from xla_keras.core.signatures import leaves

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
