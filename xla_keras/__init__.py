"""XLA observability and control for Keras ``model.fit``.

``import xla_keras`` stays light: the modules that import TensorFlow and Keras
load on first use of the names that need them (PEP 562).
"""

from __future__ import annotations

__version__ = "0.2.0.dev0"
"""This xla_keras's version (PEP 440), as the report's ``versions["xla_keras"]`` records it.

Example:
    ```pycon
    >>> from packaging.version import Version
    >>> Version(xla_keras.__version__) >= Version("0.2.0.dev0")
    True

    ```
"""

__all__ = [
    "XlaMonitor",
    "XlaReport",
    "Compilation",
    "ProgramCost",
    "SlowStep",
    "Storm",
    "RecompilationStormError",
    "UnsupportedOpError",
    "CompileAfterPrecompileError",
    "configure",
    "doctor",
    "compare",
    "CompareTable",
    "XlaKerasWarning",
    "LogDirError",
    "MonitorConfig",
    "parse_report",
    "PhaseAdvice",
    "data",
    "testing",
    "jit_decision",
    "forget_jit_decision",
    "__version__",
]

_SUBMODULES = ("data", "testing")  # public modules, imported on first use (xla_keras.data.apply_fix)

_LAZY = {
    "XlaMonitor": "monitor",
    "LogDirError": "errors",
    "configure": "backends",
    "doctor": "tools.doctor",
    "compare": "tools.compare",
    "CompareTable": "tools.compare",
    "XlaKerasWarning": "errors",
    "XlaReport": "report.model",
    "Compilation": "report.model",
    "ProgramCost": "core.program_cost",
    "SlowStep": "report.model",
    "Storm": "storms.detection",
    "RecompilationStormError": "errors",
    "UnsupportedOpError": "errors",
    "CompileAfterPrecompileError": "errors",
    "MonitorConfig": "config",
    "parse_report": "report.schema",
    "PhaseAdvice": "storms.budget",
    "jit_decision": "callback.fastest_run",
    "forget_jit_decision": "callback.fastest_run",
}


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xla_keras' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
