"""The fixes ``xla_keras.data`` applied in this process: the lengths each one's targets take after it.

A monitor reads them when a fit (evaluate, predict) begins, so that the advice recognises data whose
shapes are exactly a fix's lengths and does not advise padding again what a fix already padded (the
fix's own lengths, in a fit too short for its few compiles, would otherwise be merged into fewer).
Pure and bounded: the last ``MAX_KEPT`` fixes, each once.
"""

from __future__ import annotations

import threading
from typing import Iterable, List, Tuple

from xla_keras.storms.fixes import AppliedLengths

MAX_KEPT = 16

_lock = threading.Lock()
_kept: List[AppliedLengths] = []


def record(kind: str, targets: Iterable[Tuple[str, int, Tuple[int, ...]]]) -> None:
    """``apply_fix`` (``bucket_by_length``, ``pad_to_lengths``) applied a fix of ``kind`` whose targets
    take these lengths; the latest is last."""
    entry = AppliedLengths(kind, tuple((str(path), int(axis), tuple(lengths)) for path, axis, lengths in targets))
    if not entry.targets:
        return
    with _lock:
        if entry in _kept:
            _kept.remove(entry)
        _kept.append(entry)
        del _kept[:-MAX_KEPT]


def applied() -> Tuple[AppliedLengths, ...]:
    """The fixes applied in this process so far (at most ``MAX_KEPT``, the latest last)."""
    with _lock:
        return tuple(_kept)


def forget() -> None:
    """Forget every fix applied so far (a test's clean slate)."""
    with _lock:
        _kept.clear()
