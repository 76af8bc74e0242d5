"""The persistent XLA compilation cache: where it is, whether it took effect,
and what it saved.

TensorFlow's cache (TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR) keeps
one ``xla_compile_cache__*.pb`` per executable but not what compiling it cost.
So that a later process can say what a cache load saved, the monitor keeps a
small sidecar file in the same directory with the fresh compile seconds it
measured, keyed by model architecture, phase, input signature and module.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Dict, Optional

SIDECAR = "xla_keras_compile_seconds.json"
FLAG = "tf_xla_persistent_cache_directory"


ENTRY_PREFIX = "xla_compile_cache__"


def cache_entries(cache_dir: str) -> int:
    """How many executables TensorFlow's persistent cache holds in ``cache_dir``
    (one file each): a fresh compile adds one, a load adds none."""
    try:
        return sum(1 for name in os.listdir(cache_dir) if name.startswith(ENTRY_PREFIX))
    except OSError:
        return 0


def model_key(model: Any) -> str:
    """Stable across processes for the same architecture (layer names included)."""
    try:
        text = model.to_json()
    except Exception:  # noqa: BLE001 - subclassed models may not serialise: fall back to a coarser key
        text = type(model).__qualname__ + repr([(w.path, tuple(w.shape)) for w in model.weights])
    return hashlib.sha1(text.encode()).hexdigest()[:16]


class CompileTimes:
    """Fresh compile seconds per (model, phase, signature, module), in the cache dir."""

    def __init__(self, cache_dir: str):
        self.path = os.path.join(cache_dir, SIDECAR)
        self._times: Dict[str, float] = {}
        try:
            with open(self.path) as f:
                self._times = {str(k): float(v) for k, v in json.load(f).items()}
        except (OSError, ValueError, AttributeError):
            self._times = {}

    def get(self, key: str) -> Optional[float]:
        return self._times.get(key)

    def put(self, key: str, seconds: float) -> None:
        self._times[key] = seconds
        directory = os.path.dirname(self.path)
        try:
            fd, tmp = tempfile.mkstemp(prefix=".xla_keras_times.", dir=directory)
            with os.fdopen(fd, "w") as f:
                json.dump(self._times, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only or shared cache dir: saving is best effort
