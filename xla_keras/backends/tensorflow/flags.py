"""TensorFlow's XLA settings: TF_XLA_FLAGS, parsed one way for the whole package (pure), and the
settings and facts read or set through TensorFlow's public APIs (TensorFlow imported on call).

TensorFlow reads ``TF_XLA_FLAGS`` once, when it creates its devices: tokens of
the form ``--name`` or ``--name=value`` (the leading dashes optional), the last
occurrence of a name winning. An unknown name kills the process at its first
op, which is why ``xla-keras doctor`` proves a value in a subprocess.
"""

from __future__ import annotations

import os
from typing import Any, List, Mapping, Optional, Tuple

ENV = "TF_XLA_FLAGS"
CPU_GLOBAL_JIT = "tf_xla_cpu_global_jit"
AUTO_JIT = "tf_xla_auto_jit"
PERSISTENT_CACHE = "tf_xla_persistent_cache_directory"
PERSISTENT_CACHE_READ_ONLY = "tf_xla_persistent_cache_read_only"


class XlaFlags:
    """The tokens of a TF_XLA_FLAGS value."""

    def __init__(self, text: str = ""):
        self.tokens: List[str] = text.split()

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "XlaFlags":
        return cls((os.environ if env is None else env).get(ENV, ""))

    @staticmethod
    def _split(token: str):
        name, _, value = token.lstrip("-").partition("=")
        return name, value

    def value(self, name: str) -> Optional[str]:
        """The value of ``--name`` (its last occurrence), "" for a bare ``--name``, None when absent."""
        found = None
        for token in self.tokens:
            key, value = self._split(token)
            if key == name:
                found = value
        return found

    def enabled(self, name: str) -> bool:
        """A boolean flag: present, and not ``=false`` / ``=0``."""
        value = self.value(name)
        return value is not None and value.strip().lower() not in ("false", "0")

    def with_value(self, name: str, value: str) -> "XlaFlags":
        """A copy in which ``--name=value`` replaces every occurrence of ``name`` (appended last)."""
        out = XlaFlags()
        out.tokens = [t for t in self.tokens if self._split(t)[0] != name] + [f"--{name}={value}"]
        return out

    def replacing(self, name: str, value: str) -> "XlaFlags":
        """A copy with the value of every existing ``--name`` replaced in place (nothing added)."""
        out = XlaFlags()
        out.tokens = [f"--{name}={value}" if self._split(t)[0] == name else t for t in self.tokens]
        return out

    def __str__(self) -> str:
        return " ".join(self.tokens)

    def __bool__(self) -> bool:
        return bool(self.tokens)


def auto_jit_value(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    value = XlaFlags.from_env(env).value(AUTO_JIT)
    return None if value is None else value.strip().lower()


def auto_jit_on(value: Optional[str]) -> bool:
    """``--tf_xla_auto_jit=1|2|single-gpu(N)|fusible`` turns auto-clustering on."""
    if value is None:
        return False
    return value.startswith(("single-gpu", "fusible")) or (value.lstrip("-").isdigit() and int(value) > 0)


def env_flag_set(flag: str, env: Optional[dict] = None) -> bool:
    """Whether ``--flag`` (or ``--flag=true``) is in TF_XLA_FLAGS."""
    return XlaFlags.from_env(env).enabled(flag.lstrip("-"))


# What _internals.set_auto_jit_off last set in TensorFlow (None: the TF_XLA_FLAGS value rules).
_auto_jit_override: Optional[str] = None


def override_auto_jit(value: Optional[str]) -> None:
    """Remember the --tf_xla_auto_jit value set in TensorFlow over the environment's (None: none)."""
    global _auto_jit_override
    _auto_jit_override = value


def env_auto_jit_on(env: Optional[dict] = None) -> bool:
    """TF_XLA_FLAGS=--tf_xla_auto_jit=1|2|single-gpu(N)|fusible turns
    auto-clustering on, and (measured) overrides tf.config.optimizer.set_jit(False)."""
    if env is None and _auto_jit_override is not None:
        return auto_jit_on(_auto_jit_override)
    return auto_jit_on(auto_jit_value(env))


# TensorFlow and Keras facts read through their public APIs (TensorFlow imported on call).


def tracing_count(step_fn: Any) -> Optional[int]:
    if step_fn is None:
        return None
    try:
        return step_fn.experimental_get_tracing_count()
    except Exception:  # noqa: BLE001 - only a hint in the report
        return None


def data_iterator_types() -> Tuple[type, ...]:
    import tensorflow as tf

    return (tf.data.Iterator, tf.distribute.DistributedIterator)


def set_autoclustering(enabled: bool) -> None:
    import tensorflow as tf

    tf.config.optimizer.set_jit("autoclustering" if enabled else False)


def has_accelerator() -> bool:
    import tensorflow as tf

    return any(d.device_type != "CPU" for d in tf.config.list_physical_devices())
