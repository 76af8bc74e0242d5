"""xla_keras.doctor(): what this machine and environment will do with XLA.

Findings have a level: "ok", "info", "warn" or "error". "error" is kept for a
configuration that will fail or silently not do what was asked (an unknown
flag in TF_XLA_FLAGS or XLA_FLAGS, auto-clustering requested on CPU without
the global-jit flag); the command line exits non-zero only then. Each backend
finds its own (``backends/<name>/doctor.py``); this module gathers and prints.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import List

from xla_keras.core.versions import profile_tab_install, profile_tab_installed

LEVELS = ("ok", "info", "warn", "error")


@dataclass
class Finding:
    level: str
    topic: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        return f"[{self.level:5s}] {self.topic}: {self.message}" + (f"\n        fix: {self.fix}" if self.fix else "")


def keras_backend_name() -> str:
    """The backend Keras runs (or will run) in this process, without importing Keras: as Keras
    decides it (KERAS_BACKEND, then ~/.keras/keras.json, then TensorFlow)."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        return keras.backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    import json

    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def doctor(check_flags: bool = True) -> List[Finding]:
    """Findings about versions, devices, jit resolution, flags, logging and the Profile tab.

    What ``xla-keras doctor`` prints, for the backend Keras runs (or will run) in this process.

    Args:
        check_flags: start the framework in a subprocess with the current
            TF_XLA_FLAGS / XLA_FLAGS to prove they are accepted (a few seconds).

    Returns:
        A list of findings, each with ``level`` ("ok", "info", "warn" or "error": a
            configuration that will fail or silently not do what was asked), ``topic``,
            ``message`` and ``fix`` ("" when there is nothing to do); ``str(finding)`` is
            its printed line.

    Example:
        ```pycon
        >>> findings = xla_keras.doctor(check_flags=False)
        >>> [finding.topic for finding in findings][:2]
        ['backend', 'versions']
        >>> {finding.level for finding in findings} <= {"ok", "info", "warn", "error"}
        True

        ```
    """
    tab_installed = profile_tab_installed()
    if keras_backend_name() == "jax":
        from xla_keras.backends.jax import doctor as jax_doctor

        return [Finding(*f) for f in jax_doctor.findings(check_flags, tab_installed)]
    from xla_keras.backends.tensorflow import doctor as tf_doctor

    install_line = "" if tab_installed else profile_tab_install()
    return [Finding(*f) for f in tf_doctor.findings(check_flags, tab_installed, install_line)]


def exit_code(findings: List[Finding]) -> int:
    return 1 if any(f.level == "error" for f in findings) else 0
