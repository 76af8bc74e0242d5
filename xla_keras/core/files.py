"""Writing files that readers must never see half-written. Pure (no TensorFlow).

One helper for every file the package replaces while others may read it (the
report, the compile-time sidecar): the text goes to a temporary file in the
same directory, created with ``open(..., "x")`` so it gets the umask's
permissions like any file the user's process creates (``mkstemp`` would make it
0600), then ``os.replace`` swaps it in atomically. On any failure, Ctrl-C
included, the temporary file is removed.
"""

from __future__ import annotations

import os
import uuid


def atomic_write_text(path: str, text: str) -> str:
    """Replace ``path`` with ``text`` atomically; returns ``path``."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
