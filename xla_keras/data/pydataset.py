"""The ``keras.utils.PyDataset`` that fixed numpy batches come back in.

The class is made on first use, so that importing ``xla_keras.data`` imports no Keras; the
module ``__getattr__`` makes it again where a multiprocessing worker unpickles one.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

_BATCHES_CLASS = None


def batches_class() -> type:
    """The PyDataset subclass, made on first use so that importing this module imports no Keras."""
    global _BATCHES_CLASS
    if _BATCHES_CLASS is None:
        import keras

        class _Batches(keras.utils.PyDataset):
            """Batches of ``source`` (indexable) through ``fix(batch, index)``, read lazily by index."""

            def __init__(self, source: Any, length: Optional[int], fix: Callable[[Any, int], Any], **kwargs: Any):
                super().__init__(**kwargs)
                self._source, self._length, self._fix = source, length, fix

            @property
            def num_batches(self) -> Optional[int]:
                return self._length

            def __len__(self) -> int:
                if self._length is None:
                    raise TypeError("This PyDataset is infinite: it has no len().")
                return self._length

            def __getitem__(self, index: int) -> Any:
                if self._length is not None:
                    if index < 0:
                        index += self._length
                    if not 0 <= index < self._length:
                        raise IndexError(f"batch index {index} out of range ({self._length} batches)")
                return self._fix(self._source[index], index)

            def on_epoch_begin(self) -> None:
                getattr(self._source, "on_epoch_begin", lambda: None)()

            def on_epoch_end(self) -> None:
                getattr(self._source, "on_epoch_end", lambda: None)()

        # Module-level names, so pickle (multiprocessing workers) finds the class again.
        _Batches.__module__, _Batches.__qualname__ = __name__, "_Batches"
        _BATCHES_CLASS = _Batches
    return _BATCHES_CLASS


def __getattr__(name: str) -> Any:
    if name == "_Batches":  # unpickling in a worker process: build the class there too
        return batches_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pydataset(source: Any, length: Optional[int], fix: Callable[[Any, int], Any], like: Any = None) -> Any:
    """A PyDataset of ``fix(source[i], i)``; it keeps the parallelism of ``like`` (a PyDataset source),
    whose ``__getitem__`` now runs inside ours."""
    kwargs = {}
    for name in ("workers", "use_multiprocessing", "max_queue_size"):
        if hasattr(like, name):
            kwargs[name] = getattr(like, name)
    return batches_class()(source, length, fix, **kwargs)
