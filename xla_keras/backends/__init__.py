"""Backends: what XlaMonitor needs from a Keras backend, one package per backend.

``base.py`` is the contract (a Protocol and the plain data crossing it);
``tensorflow/`` and ``jax/`` implement it for Keras's TensorFlow and JAX
backends; ``chain.py`` is the wrapper chain both use. Only a backend's
own ``_internals.py`` touches that framework's private APIs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing only: importing the contract here would load it with every backend module
    from xla_keras.backends.base import BackendClass

SUPPORTED = ("tensorflow", "jax")


def backend_for(keras_backend: str) -> BackendClass:
    """The backend class for ``keras.backend.backend()`` (called with the JIT mode), or raise naming what runs."""
    if keras_backend == "tensorflow":
        from xla_keras.backends.tensorflow import TensorFlowBackend

        return TensorFlowBackend
    if keras_backend == "jax":
        from xla_keras.backends.jax import JaxBackend

        return JaxBackend
    import os

    raise RuntimeError(
        f"xla_keras.XlaMonitor supports Keras's {' and '.join(repr(b) for b in SUPPORTED)} backends, but Keras "
        f"runs the {keras_backend!r} backend here (KERAS_BACKEND={os.environ.get('KERAS_BACKEND', '(unset)')}): "
        f"{keras_backend} does not compile the step with XLA. Set KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax "
        "before keras is first imported."
    )


def configure(cpu_autoclustering: bool = False, cache_dir=None) -> dict:
    """The early opt-in: call right after ``import xla_keras``, before any model is built.

    Under Keras's TensorFlow backend: ``cpu_autoclustering`` sets TensorFlow's CPU
    global-jit flag in time, ``cache_dir`` turns on TensorFlow's persistent XLA cache
    (see ``backends.tensorflow.jit.configure``). Under the JAX backend: ``cache_dir``
    turns on JAX's persistent compilation cache, with its minimum compile time
    lowered to 0 so CPU compiles are cached too; ``cpu_autoclustering=True`` is
    refused (a TensorFlow feature).

    Args:
        cpu_autoclustering: TensorFlow only: let auto-clustering compile on CPU.
        cache_dir: a directory for the persistent compilation cache.

    Returns:
        ``{"cpu_autoclustering": bool, "cache_dir": bool}`` for what was asked:
            whether it will take effect.

    Raises:
        TypeError: ``cpu_autoclustering`` is not True or False.
        ValueError: ``cache_dir`` is not a directory path, or ``cpu_autoclustering=True``
            under Keras's JAX backend.

    Example:
        In a fresh process, right after the import (under TensorFlow, a later call warns and
        says False: TensorFlow has read its flags by then):

        ```pycon
        >>> import xla_keras
        >>> xla_keras.configure(cache_dir="~/.cache/xla")  # doctest: +SKIP
        {'cache_dir': True}
        >>> xla_keras.configure()  # nothing asked, nothing to say
        {}

        ```
    """
    import keras

    if keras.backend.backend() == "jax":
        from xla_keras.backends.jax.jit import configure as configure_jax

        return configure_jax(cpu_autoclustering=cpu_autoclustering, cache_dir=cache_dir)
    from xla_keras.backends.tensorflow.jit import configure as configure_tensorflow

    return configure_tensorflow(cpu_autoclustering=cpu_autoclustering, cache_dir=cache_dir)
