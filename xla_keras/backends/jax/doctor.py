"""What this machine and environment will do with XLA under Keras's JAX backend: doctor's findings.

A finding is a tuple (level, topic, message[, fix]); ``xla_keras.tools.doctor``
gathers and prints them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Optional, Tuple

from xla_keras.backends.jax import _internals
from xla_keras.backends.jax.jit import persistent_cache
from xla_keras.core.versions import versions_line

Finding = Tuple[str, ...]  # (level, topic, message) or (level, topic, message, fix)

_JAX_FLAG_CHECK = (
    "import jax, jax.numpy as jnp\n"
    "jax.jit(lambda a: a * 2.0)(jnp.ones((2,))).block_until_ready()\n"
    "print('XLA_KERAS_FLAGS_OK')\n"
)


def findings(check_flags: bool, tab_installed: bool) -> List[Finding]:
    """Versions, devices, XLA_FLAGS, jit resolution, the persistent cache and the Profile tab."""
    findings: List[Finding] = [
        (
            "info",
            "backend",
            "Keras runs the JAX backend (KERAS_BACKEND="
            f"{os.environ.get('KERAS_BACKEND', '(unset)')}): every jitted step is one XLA program",
        )
    ]
    packages = ("jax", "jaxlib", "keras", "tensorboard", "tensorboard-plugin-profile", "xprof")
    findings.append(("info", "versions", versions_line(packages)))
    xla_flags = os.environ.get("XLA_FLAGS", "").split()
    findings.append(("info", "XLA_FLAGS", " ".join(xla_flags) or "(not set)"))
    problem = _flag_problem() if check_flags and xla_flags else None
    if check_flags and xla_flags:
        findings.append(
            ("error", "flags", f"JAX will not compile with these flags: {problem}", "remove or correct the flag")
            if problem
            else ("ok", "flags", "JAX started and compiled with these flags")
        )
    if not problem:
        findings += _device_findings()
    findings.append(
        (
            "info",
            "jit_compile='auto'",
            "resolves to True under JAX when every layer supports "
            "it: Keras jits each step with jax.jit, whatever the device",
            "XlaMonitor(jit='off') to compare with op-by-op execution",
        )
    )
    findings.append(_cache_finding(persistent_cache() if not problem else None))
    findings.append(_tab_finding(tab_installed))
    return findings


def _flag_problem() -> Optional[str]:
    """Why JAX will not compile with this XLA_FLAGS (checked in a subprocess: a bad flag aborts the
    process that reads it), or None."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _JAX_FLAG_CHECK],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ),
        )
    except subprocess.TimeoutExpired:
        return "JAX did not start within 300 s with these flags"
    if "XLA_KERAS_FLAGS_OK" in proc.stdout:
        return None
    lines = [ln for ln in proc.stderr.splitlines() if "nknown flag" in ln] or (
        proc.stderr.strip().splitlines() or ["(no output)"]
    )[-1:]
    return lines[0].split("] ", 1)[-1].strip()[:300]


def _device_findings() -> List[Finding]:
    import jax

    devices = _internals.devices()
    kinds = sorted({d.platform for d in devices})
    findings: List[Finding] = [
        (
            "info",
            "devices",
            f"{len(devices)} JAX device(s): "
            + ", ".join(f"{d.platform}:{d.id}" for d in devices)
            + f" (default backend {jax.default_backend()}, {jax.process_count()} process(es))",
        )
    ]
    if kinds == ["cpu"] and len(devices) == 1:
        findings.append(
            (
                "info",
                "devices",
                "one CPU device: keras.distribution.DataParallel has nothing to split over",
                "XLA_FLAGS=--xla_force_host_platform_device_count=N to try it on CPU",
            )
        )
    return findings


def _cache_finding(cache: Optional[dict]) -> Finding:
    if not cache:
        return (
            "info",
            "persistent compilation cache",
            "not configured: every new process compiles again",
            "xla_keras.configure(cache_dir=DIR) right after import",
        )
    directory = cache["dir"]
    files = [os.path.join(directory, f) for f in os.listdir(directory)] if os.path.isdir(directory) else []
    size = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    minimum = cache["min_compile_secs"]
    return (
        "ok",
        "persistent compilation cache",
        f"{directory}: {len(files)} file(s), {size / 1e6:.1f} MB; JAX caches compiles that took at least {minimum:g} s",
        ""
        if minimum <= 0
        else "xla_keras.configure(cache_dir=DIR) lowers that to 0, so short CPU compiles are cached too",
    )


def _tab_finding(tab_installed: bool) -> Finding:
    if tab_installed:
        return ("ok", "Profile tab", "tensorboard-plugin-profile / xprof is installed")
    return (
        "info",
        "Profile tab",
        "no Profile-tab plugin: the monitor still writes jax.profiler traces, but TensorBoard will not show them",
        "pip install xprof",
    )
