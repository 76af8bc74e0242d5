"""How the monitor speaks on the console: at most ``LINES`` lines of at most ``WIDTH`` characters,
and a warning located at the user's code (the line that called ``fit``), not at ours nor at any installed
package's (a KerasHub task model's ``fit`` wraps Keras's: the user's line is below both).

The full text of every finding stays in the report, the XLA tab and ``xla-keras report``; a
console message is its headline, cause, fix and where to read the rest. Pure (no framework import).
"""

from __future__ import annotations

import io
import os
import sys
import sysconfig
import textwrap
import tokenize
import warnings
from functools import lru_cache
from types import FrameType
from typing import Iterable, List, Optional, Type

from xla_keras.errors import XlaKerasWarning

WIDTH = 100
LINES = 4

# Frames of these top-level modules are never the user's code: ours, the frameworks that call our
# callback (installed from source too, where their files are in no site-packages), and the standard-library
# wrappers between them. Python 3.10 has no warnings.warn(skip_file_prefixes=...), so the stack level is
# counted here.
_NOT_USER = {
    "xla_keras",
    "keras",
    "tf_keras",
    "keras_hub",
    "keras_nlp",
    "keras_cv",
    "tensorflow",
    "jax",
    "jaxlib",
    "contextlib",
    "functools",
}
# Nor are the files of any installed package: in a site-packages or dist-packages directory (a venv's, the
# user's site, Debian's), the standard library, or xla_keras itself.
_PACKAGE_DIRS = ("site-packages", "dist-packages")
_LIBRARY_DIRS = tuple(
    dict.fromkeys(
        os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
    )
) + (os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep,)


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


@lru_cache(maxsize=4096)
def library_file(filename: str) -> bool:
    """Whether ``filename`` (a code object's) is an installed package's, never the user's: in a
    site-packages or dist-packages directory, the standard library (a frozen module too) or xla_keras.
    A file Python names in angle brackets other than a frozen module (``<stdin>``, ``<string>``) is the
    user's: code typed or run by hand.

    Example:
        >>> library_file("/venv/lib/python3.11/site-packages/keras_hub/src/utils/pipeline_model.py")
        True
        >>> library_file("/home/me/train.py"), library_file("<stdin>")
        (False, False)
    """
    if filename.startswith("<"):
        return filename.startswith("<frozen ")
    if any(part in _PACKAGE_DIRS for part in filename.replace("\\", "/").split("/")):
        return True
    return os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def _is_user(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__", "") or ""
    return module.split(".")[0] not in _NOT_USER and not library_file(frame.f_code.co_filename)


def user_stacklevel(start: Optional[FrameType] = None) -> int:
    """The ``stacklevel`` for ``warnings.warn`` called from the frame ``start`` (default: the
    caller's) that names the nearest frame outside xla_keras, the frameworks and every installed
    package (``library_file``); 1 when the whole stack is theirs (a thread of their own)."""
    frame: Optional[FrameType] = start if start is not None else sys._getframe(1)
    level = 1
    while frame is not None and not _is_user(frame):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def warn(text: str, category: Type[Warning] = XlaKerasWarning) -> None:
    """Warn once about a problem, in its console form, located at the user's code."""
    warnings.warn(wrapped(text), category, stacklevel=user_stacklevel(sys._getframe(1)) + 1)


def code_within(code: str, width: int = WIDTH) -> List[str]:
    """Python code in lines of at most ``width`` characters, the same program: a long comment wrapped as
    comments (a line's own comment goes on lines of its own above it), a long line continued with a
    backslash between two of its tokens, and a string literal longer than the line continued inside it
    (Python joins a backslash-newline in a literal; the rest of the literal starts the next line). Code
    that does not tokenize is cut as text.

    Example:
        >>> for line in code_within("total = first_value + second_value  # the sum of both", 30):
        ...     print(line)
        # the sum of both
        total = first_value + \\
            second_value
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return [piece for line in code.splitlines() for piece in (textwrap.wrap(line, width) or [""])]
    on_line: dict = {}  # physical line number -> its tokens that start and end on it
    for token in tokens:
        if token.start[0] == token.end[0] and token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER):
            on_line.setdefault(token.start[0], []).append(token)
    out: List[str] = []
    for number, line in enumerate(code.splitlines(), start=1):
        out += _line_within(line, on_line.get(number, []), width) if len(line) > width else [line]
    return out


_FSTRING_START, _FSTRING_END = (getattr(tokenize, name, -1) for name in ("FSTRING_START", "FSTRING_END"))


def _line_within(line: str, tokens: list, width: int) -> List[str]:
    """One physical line of code in lines of at most ``width`` (see ``code_within``)."""
    indent = line[: len(line) - len(line.lstrip())]
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    if comment is not None and not line[: comment.start[1]].strip():  # a comment line
        said = line[comment.start[1] :].lstrip("#").strip()
        return textwrap.wrap(said, width, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ") or [line]
    out: List[str] = []
    if comment is not None:  # its own lines, above the code it comments
        said = comment.string.lstrip("#").strip()
        out = textwrap.wrap(said, width, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ")
        line = line[: comment.start[1]].rstrip()
    in_fstring, opened = [], None  # (Python 3.12+ tokenizes an f-string's parts)
    for t in tokens:
        if t.type == _FSTRING_START and opened is None:
            opened = t.start[1]
        elif t.type == _FSTRING_END and opened is not None:
            in_fstring.append((opened, t.end[1]))
            opened = None
    # Where a backslash may continue the line: before a token, outside an f-string.
    breaks = [t.start[1] for t in tokens if not any(a < t.start[1] < b for a, b in in_fstring)]
    literals = [t for t in tokens if t.type == tokenize.STRING and t.string[:1] in "\"'" and t.end[1] <= len(line)]
    lead, at, inside = indent, len(indent), False  # inside: the line goes on inside a literal
    while True:
        if not inside:
            at = len(line) - len(line[at:].lstrip(" "))
        if len(lead) + len(line) - at <= width:
            return out + [lead + line[at:]]
        room = at + width - len(lead) - 2  # the piece ends at this column at most, then " \\"
        fits = [b for b in breaks if at < b <= room]
        cut = max((b for b in fits if line[b - 1] in " ([{,"), default=max(fits, default=None))  # not in a.b
        if cut is not None:
            out.append(lead + line[at:cut].rstrip(" ") + " \\")
            lead, at, inside = indent + "    ", cut, False
            continue
        cut = room + 1  # inside a literal "\\" alone ends the piece
        literal = next((t for t in literals if t.start[1] < cut <= t.end[1] - 1), None)
        if literal is not None:  # never inside an escape
            cut = max((c for c in _literal_cuts(literal.string, literal.start[1]) if c <= cut), default=at)
        if literal is None or cut <= max(at, literal.start[1] + 1):
            return out + [lead + line[at:]]  # nothing to break at: the line as it is
        out.append(lead + line[at:cut] + "\\")
        lead, at, inside = "", cut, True  # the literal's rest starts its line: a space would be in it


def _literal_cuts(literal: str, column: int) -> List[int]:
    """The columns inside a plain string literal (quoted, no prefix; starting at ``column``) where a
    backslash-newline may continue it: after its opening quotes, before its closing ones, outside an escape."""
    quotes = 3 if literal[:3] in ('"""', "'''") else 1
    cuts, i = [], quotes
    while i < len(literal) - quotes:
        cuts.append(column + i)
        if literal[i] != "\\":
            i += 1
            continue
        following = literal[i + 1 : i + 2]
        if following == "N":
            i = literal.find("}", i) + 1 or len(literal)
        else:
            i += {"x": 4, "u": 6, "U": 10}.get(following, 2)
    return cuts + [column + len(literal) - quotes]
