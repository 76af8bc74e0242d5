"""Durations as the report and the jit='fastest' trial write them. Pure."""

from __future__ import annotations

from typing import Optional


def ms_text(seconds: Optional[float]) -> str:
    """``12.3 ms`` below a second, ``1.23 s`` from a second up; ``n/a`` when unknown."""
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.2f} s"
