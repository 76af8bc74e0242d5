"""XLA observability and control for Keras ``model.fit``.

``import xla_keras`` stays light: the modules that import TensorFlow and Keras
load on first use of the names that need them (PEP 562).
"""

from __future__ import annotations

__version__ = "0.2.0.dev0"

__all__ = ["XlaMonitor", "XlaReport", "Compilation", "SlowStep", "Storm", "RecompilationStormError",
           "configure", "doctor", "compare", "CompareTable", "XlaKerasWarning",
           "LogDirError", "MonitorConfig", "parse_report", "__version__"]

_LAZY = {
    "XlaMonitor": "monitor",
    "LogDirError": "errors",
    "configure": "backends",
    "doctor": "doctor",
    "compare": "compare",
    "CompareTable": "compare",
    "XlaKerasWarning": "errors",
    "XlaReport": "report",
    "Compilation": "report",
    "SlowStep": "report",
    "Storm": "storms",
    "RecompilationStormError": "storms",
    "MonitorConfig": "config",
    "parse_report": "metadata",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xla_keras' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
