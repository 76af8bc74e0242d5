"""What every backend's profiler says when it cannot start. Pure."""

from __future__ import annotations


class ProfilerBusy(RuntimeError):
    """Another profiler session (e.g. keras.callbacks.TensorBoard's) is running."""
