"""What a persistent compilation cache saved: fresh compile seconds, remembered across processes; and the
atomic write every file the package replaces goes through (``atomic_write_text``).

A persistent XLA cache keeps executables but not what compiling them cost. So
that a later process can say what a load from the cache saved, the monitor
keeps the fresh compile seconds it measured beside the cache, keyed by model
architecture, phase, jit mode, input signature and module index.

Storage: one small JSON file per entry under ``xla_keras_compile_seconds/`` in
the cache directory, named by a hash of its key and replaced atomically
(``files.atomic_write_text``). So a compile writes only its own entry (never the
whole table), two processes sharing a cache directory never lose each other's
entries (no read-modify-write, no file locks, which shared file systems do not
all honour), readers never see half a file, and entries get the umask's
permissions. The single-file sidecar of 0.1 (``xla_keras_compile_seconds.json``)
is still read. Pure: no TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any, Dict, Optional

ENTRIES = "xla_keras_compile_seconds"
LEGACY_SIDECAR = "xla_keras_compile_seconds.json"


def model_key(model: Any, serialize: bool = True) -> str:
    """Stable across processes for the same architecture (layer names included).

    ``serialize=False`` (Keras's JAX backend) skips ``model.to_json()``: Keras's serialization
    imports TensorFlow whenever it is installed (its ``tf.available`` check), seconds and log lines
    a JAX fit must not pay. The key is then the model's class, its layers' classes and names, and
    its weights' paths and shapes."""
    text = None
    if serialize:
        try:
            text = model.to_json()
        except Exception:  # noqa: BLE001 - subclassed models may not serialise: fall back to a coarser key
            text = None
    if text is None:
        layers = [(type(layer).__qualname__, layer.name) for layer in getattr(model, "layers", [])]
        text = type(model).__qualname__ + repr(layers) + repr([(w.path, tuple(w.shape)) for w in model.weights])
    return hashlib.sha1(text.encode()).hexdigest()[:16]


class CompileTimes:
    """Fresh compile seconds per (model, phase, mode, signature, module), in the cache dir."""

    def __init__(self, cache_dir: str):
        self.directory = os.path.join(cache_dir, ENTRIES)
        self._legacy: Optional[Dict[str, float]] = None
        self._legacy_path = os.path.join(cache_dir, LEGACY_SIDECAR)

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, hashlib.sha1(key.encode()).hexdigest()[:24] + ".json")

    def get(self, key: str) -> Optional[float]:
        try:
            with open(self._path(key)) as f:
                entry = json.load(f)
            if entry.get("key") == key:  # a hash collision reads as unknown, never as another entry
                return float(entry["seconds"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return self._legacy_entries().get(key)

    def put(self, key: str, seconds: float) -> None:
        try:
            atomic_write_text(self._path(key), json.dumps({"key": key, "seconds": float(seconds)}))
        except OSError:
            pass  # a read-only or full cache dir: remembering is best effort

    def _legacy_entries(self) -> Dict[str, float]:
        if self._legacy is None:
            try:
                with open(self._legacy_path) as f:
                    self._legacy = {str(k): float(v) for k, v in json.load(f).items()}
            except (OSError, ValueError, AttributeError, TypeError):
                self._legacy = {}
        return self._legacy


class CacheAccount:
    """What loads from the cache saved in this report: each load is credited
    with what the same module cost when compiled fresh (remembered in
    CompileTimes)."""

    def __init__(self, times: Optional[CompileTimes], model: str, mode: str):
        self.times, self.model, self.mode = times, model, mode
        self.saved_seconds = 0.0
        self.loads_known = 0
        self.loads_unknown = 0

    def record(self, phase: str, signature_text: str, index: int, seconds: float, cached: Optional[bool]) -> None:
        if self.times is None or cached is None:
            return  # no cache, or a compile that may have been a load: nothing to learn
        key = f"{self.model}|{phase}|{self.mode}|{signature_text}|{index}"
        if not cached:
            self.times.put(key, seconds)
            return
        fresh = self.times.get(key)
        if fresh is None:
            self.loads_unknown += 1
        else:
            self.saved_seconds += max(0.0, fresh - seconds)
            self.loads_known += 1


# Writing files that readers must never see half-written. Pure (no TensorFlow).


def atomic_write_text(path: str, text: str) -> str:
    """Replace ``path`` with ``text`` atomically; returns ``path``."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
