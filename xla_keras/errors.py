"""The exceptions and warning category users may catch. Pure."""

from __future__ import annotations

from xla_keras.storms.detection import RecompilationStormError

__all__ = ["XlaKerasWarning", "LogDirError", "RecompilationStormError"]


class XlaKerasWarning(UserWarning):
    """A configuration that will not do what was asked, or a storm."""


class LogDirError(OSError):
    """The log_dir cannot be written: the user's error, raised before the first step."""
