"""Backends: what XlaMonitor needs from a Keras backend, one package per backend.

``base.py`` is the contract (a Protocol and the plain data crossing it);
``tensorflow/`` implements it for Keras's TensorFlow backend. Only a backend's
own ``_internals.py`` touches that framework's private APIs.
"""

from __future__ import annotations


def backend_for(keras_backend: str):
    """The backend class for ``keras.backend.backend()``, or raise naming what runs."""
    if keras_backend == "tensorflow":
        from .tensorflow import TensorFlowBackend
        return TensorFlowBackend
    import os
    raise RuntimeError(
        f"xla_keras.XlaMonitor needs Keras's TensorFlow backend, but Keras runs the {keras_backend!r} backend "
        f"here (KERAS_BACKEND={os.environ.get('KERAS_BACKEND', '(unset)')}): XLA under jit_compile, the "
        "tf.function step and the TensorFlow profiler it reads are TensorFlow's. Set "
        "KERAS_BACKEND=tensorflow before keras is first imported.")
