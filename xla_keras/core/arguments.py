"""Argument checks shared by the public entry points. Pure.

Users pass what Keras accepts: numpy integers where an int is meant,
``pathlib.Path`` (or ``~``) where a directory is meant.
"""

from __future__ import annotations

import numbers
import os
from typing import Any, Optional


def integer(value: Any) -> Optional[int]:
    """``value`` as an int if it is an integer (numpy ones included, bool
    excluded), else None."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None


def number(value: Any) -> Optional[float]:
    """``value`` as a float if it is a finite number (numpy ones and numeric strings included, bool
    excluded), else None."""
    if isinstance(value, bool):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if result == result and abs(result) != float("inf") else None


def directory(value: Any, name: str) -> Optional[str]:
    """A directory argument as a str path (``~`` expanded), or None."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str, an os.PathLike (e.g. pathlib.Path) or None; got {type(value).__name__}")
    path = os.fspath(value)
    if isinstance(path, bytes) or not path:
        raise ValueError(f"{name} must be a non-empty directory path or None; got {value!r}")
    return os.path.expanduser(path)
