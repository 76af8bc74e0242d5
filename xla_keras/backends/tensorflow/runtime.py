"""TensorFlow and Keras facts read through their public APIs (TensorFlow imported on call)."""

from __future__ import annotations

from typing import Any, Optional, Tuple


def tracing_count(step_fn: Any) -> Optional[int]:
    if step_fn is None:
        return None
    try:
        return step_fn.experimental_get_tracing_count()
    except Exception:  # noqa: BLE001 - only a hint in the report
        return None


def data_iterator_types() -> Tuple[type, ...]:
    import tensorflow as tf

    return (tf.data.Iterator, tf.distribute.DistributedIterator)


def set_autoclustering(enabled: bool) -> None:
    import tensorflow as tf

    tf.config.optimizer.set_jit("autoclustering" if enabled else False)


def has_accelerator() -> bool:
    import tensorflow as tf

    return any(d.device_type != "CPU" for d in tf.config.list_physical_devices())
