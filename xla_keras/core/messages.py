"""How the monitor speaks on the console: at most ``LINES`` lines of at most ``WIDTH`` characters,
and a warning located at the user's code (the line that called ``fit``), not at ours.

The full text of every finding stays in the report, the XLA tab and ``xla-keras report``; a
console message is its headline, cause, fix and where to read the rest. Pure (no framework import).
"""

from __future__ import annotations

import sys
import textwrap
import warnings
from types import FrameType
from typing import Iterable, Optional, Type

from xla_keras.errors import XlaKerasWarning

WIDTH = 100
LINES = 4

# Frames of these top-level modules are never the user's code: ours, the frameworks that call our
# callback, and the standard-library wrappers between them. Python 3.10 has no
# warnings.warn(skip_file_prefixes=...), so the stack level is counted here.
_NOT_USER = {"xla_keras", "keras", "tf_keras", "tensorflow", "jax", "jaxlib", "contextlib", "functools"}


def shaped(lines: Iterable[str]) -> str:
    """The console form of a message: its non-empty lines, at most ``LINES``, each cut to ``WIDTH``
    characters (an ellipsis marks a cut: the report holds the rest).

    Example:
        >>> shaped(["Storm (train): 8 shapes", "", "Fix: pad"])
        'Storm (train): 8 shapes\\nFix: pad'
    """
    given = [line.rstrip() for line in lines if line.strip()]
    kept = [line if len(line) <= WIDTH else line[: WIDTH - 1] + "…" for line in given[:LINES]]
    if len(given) > LINES and not kept[-1].endswith("…"):
        kept[-1] = kept[-1][: WIDTH - 2] + " …"
    return "\n".join(kept)


def wrapped(text: str) -> str:
    """``text`` in its console form: each line wrapped at ``WIDTH`` characters, then ``shaped``.

    Example:
        >>> print(wrapped("xla_keras: " + "word " * 30))
        xla_keras: word word word word word word word word word word word word word word word word word word
        word word word word word word word word word word word word
    """
    lines = []
    for line in text.splitlines():
        lines.extend(textwrap.wrap(line, WIDTH, break_long_words=False, break_on_hyphens=False))
    return shaped(lines)


def say(text: str) -> None:
    """Print a message that is no problem (what the monitor decided), in its console form."""
    print(wrapped(text))


def within(base: str, *extras: str) -> str:
    """``base`` with as many of ``extras``, in order, as fit in ``WIDTH`` characters: the optional
    parts of a line (a comparison, where else to look) give way before the line is cut.

    Example:
        >>> within("Fix: pad", " (1 compile)", " " + "x" * 100)
        'Fix: pad (1 compile)'
    """
    line = base
    for extra in extras:
        if len(line) + len(extra) > WIDTH:
            break
        line += extra
    return line


def _is_user(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__", "") or ""
    return module.split(".")[0] not in _NOT_USER


def user_stacklevel(start: Optional[FrameType] = None) -> int:
    """The ``stacklevel`` for ``warnings.warn`` called from the frame ``start`` (default: the
    caller's) that names the nearest frame outside xla_keras and the frameworks; 1 when the whole
    stack is theirs (a thread of their own)."""
    frame: Optional[FrameType] = start if start is not None else sys._getframe(1)
    level = 1
    while frame is not None and not _is_user(frame):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def warn(text: str, category: Type[Warning] = XlaKerasWarning) -> None:
    """Warn once about a problem, in its console form, located at the user's code."""
    warnings.warn(wrapped(text), category, stacklevel=user_stacklevel(sys._getframe(1)) + 1)
