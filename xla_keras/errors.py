"""The exceptions and warning category users may catch. Pure."""

from __future__ import annotations

__all__ = ["XlaKerasWarning", "LogDirError", "RecompilationStormError"]


class XlaKerasWarning(UserWarning):
    """A configuration that will not do what was asked, or a storm."""


class LogDirError(OSError):
    """The log_dir cannot be written: the user's error, raised before the first step."""


class RecompilationStormError(RuntimeError):
    """Raised by ``XlaMonitor(on_storm="raise")``: the message is the storm's 4-line console message
    (what happened, cause, fix, where the full advice is: ``report.storms[i].advice``)."""
