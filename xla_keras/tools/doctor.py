"""xla_keras.doctor(): what this machine and environment will do with XLA.

Findings have a level: "ok", "info", "warn" or "error". "error" is kept for a
configuration that will fail or silently not do what was asked (an unknown
flag in TF_XLA_FLAGS or XLA_FLAGS, auto-clustering requested on CPU without
the global-jit flag); the command line exits non-zero only then.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import List, Optional

from xla_keras.backends.tensorflow import _internals
from xla_keras.backends.tensorflow.flags import AUTO_JIT, CPU_GLOBAL_JIT, PERSISTENT_CACHE, XlaFlags

LEVELS = ("ok", "info", "warn", "error")

# Started in a fresh process with the user's flags: an unknown TF_XLA_FLAGS
# flag kills TensorFlow at its first op, an unknown XLA_FLAGS flag at XLA's
# first compile. Running the real thing is the only list that cannot go stale.
_FLAG_CHECK = (
    "import tensorflow as tf\n"
    "tf.constant(1.0) + 1.0\n"
    "tf.function(lambda a: a * 2.0, jit_compile=True)(tf.ones((2,)))\n"
    "print('XLA_KERAS_FLAGS_OK')\n"
)


@dataclass
class Finding:
    level: str
    topic: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        return f"[{self.level:5s}] {self.topic}: {self.message}" + (f"\n        fix: {self.fix}" if self.fix else "")


def _check_flags_in_subprocess() -> Optional[str]:
    """None if TensorFlow starts and compiles with the current flags, else the reason."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    # The check compiles once: keep it out of the user's persistent cache (same flag, scratch dir).
    scratch = tempfile.mkdtemp(prefix="xla_keras_doctor_")
    env["TF_XLA_FLAGS"] = str(XlaFlags.from_env(env).replacing(PERSISTENT_CACHE, scratch))
    try:
        proc = subprocess.run([sys.executable, "-c", _FLAG_CHECK], env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "TensorFlow did not start within 300 s with these flags"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if "XLA_KERAS_FLAGS_OK" in proc.stdout:
        return None
    for line in proc.stderr.splitlines():
        if "Unknown flag" in line or "Unknown flags" in line:
            return line.split("] ", 1)[-1].strip()
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return f"TensorFlow exited with status {proc.returncode}: {last[:300]}"


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

    Args:
        check_flags: start the framework in a subprocess with the current
            TF_XLA_FLAGS / XLA_FLAGS to prove they are accepted (a few seconds).
    """
    if keras_backend_name() == "jax":
        return _jax_doctor(check_flags)
    findings: List[Finding] = []
    findings.append(
        Finding(
            "info",
            "backend",
            f"Keras runs the TensorFlow backend (KERAS_BACKEND={os.environ.get('KERAS_BACKEND', '(unset)')})",
        )
    )
    # Importing TensorFlow can set TF_CPP_MIN_LOG_LEVEL=1 when it is unset (here, jax imported by it
    # does), after TensorFlow's C++ logging has started (measured: its info lines still print).
    # Read the user's value first.
    tf_was_loaded = "tensorflow" in sys.modules
    user_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")
    versions = {
        name: _internals._version(name)
        for name in ("tensorflow", "keras", "tensorboard", "protobuf", "tensorboard-plugin-profile", "xprof")
    }
    findings.append(
        Finding(
            "info",
            "versions",
            ", ".join(f"{k} {v}" for k, v in versions.items()) + f", xla_keras {_internals.versions()['xla_keras']}",
        )
    )
    unsupported = _internals.keras_unsupported()
    if unsupported:
        findings.append(Finding("warn", "keras", unsupported, 'pip install "keras>=3.7"'))
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        findings.append(
            Finding(
                "info",
                "keras",
                "TF_USE_LEGACY_KERAS is set: tf.keras models are tf_keras models, "
                "which XlaMonitor does not observe (it steps aside, saying so); models built with "
                "`import keras` are Keras 3 and are observed",
            )
        )
    tf_flags, xla_flags = XlaFlags.from_env().tokens, os.environ.get("XLA_FLAGS", "").split()
    findings.append(Finding("info", "TF_XLA_FLAGS", " ".join(tf_flags) or "(not set)"))
    findings.append(Finding("info", "XLA_FLAGS", " ".join(xla_flags) or "(not set)"))
    # Checked first, in a subprocess: with a bad flag, touching TensorFlow here
    # would kill this process too.
    problem = _check_flags_in_subprocess() if check_flags and (tf_flags or xla_flags) else None
    if problem:
        findings.append(
            Finding(
                "error", "flags", f"TensorFlow will not run with these flags: {problem}", "remove or correct the flag"
            )
        )
    elif check_flags and (tf_flags or xla_flags):
        findings.append(Finding("ok", "flags", "TensorFlow started and compiled with these flags"))

    accelerators: list = []
    if problem and "TF_XLA_FLAGS" in problem:
        findings.append(Finding("warn", "devices", "not checked: TensorFlow cannot start with this TF_XLA_FLAGS"))
    else:
        import tensorflow as tf

        devices = tf.config.list_physical_devices()  # does not create the devices
        accelerators = [d for d in devices if d.device_type != "CPU"]
        findings.append(
            Finding(
                "info", "devices", ", ".join(f"{d.device_type}:{d.name.rsplit(':', 1)[-1]}" for d in devices) or "none"
            )
        )
        if accelerators:
            findings.append(
                Finding(
                    "info",
                    "jit_compile='auto'",
                    "resolves to True here (an accelerator is "
                    "present), except under a tf.distribute strategy, where Keras resolves it "
                    "to False",
                )
            )
        else:
            findings.append(
                Finding(
                    "info",
                    "jit_compile='auto'",
                    "resolves to False here: no GPU/TPU, so Keras does not use XLA unless asked",
                    "XlaMonitor(jit='on') or compile(jit_compile=True)",
                )
            )

    if not problem and _internals.tensorflow_version() < (2, 18):
        findings.append(
            Finding(
                "info",
                "compile timing",
                f"TensorFlow {versions['tensorflow']}'s XLA compiler emits "
                "no profiler events on CPU: XlaMonitor times each compile from the span of the op "
                "that triggered it (source='op_span', within a few % of TensorFlow's own lines)",
            )
        )

    from xla_keras.backends.tensorflow.jit import FIX_CPU_AUTOCLUSTERING, cpu_autoclustering_effective

    auto_value = XlaFlags.from_env().value(AUTO_JIT) or ""
    auto_on = _internals.env_auto_jit_on() and not auto_value.startswith("single-gpu")
    cpu_flag = XlaFlags.from_env().enabled(CPU_GLOBAL_JIT) or (
        not problem and cpu_autoclustering_effective() is True
    )  # with a bad flag, TF would abort this process
    if auto_value.startswith("single-gpu") and not accelerators:
        findings.append(
            Finding(
                "info",
                "auto-clustering",
                f"--tf_xla_auto_jit={auto_value} clusters only on a "
                "machine with exactly one GPU: nothing is clustered here",
            )
        )
    if auto_on and not accelerators and not cpu_flag and not problem:
        findings.append(
            Finding(
                "error",
                "auto-clustering",
                "TF_XLA_FLAGS asks for auto-clustering, but this machine "
                "has only CPUs and the CPU global-jit flag is not set: no cluster will compile",
                "add --tf_xla_cpu_global_jit to TF_XLA_FLAGS",
            )
        )
    effective = cpu_autoclustering_effective() if not problem else None
    findings.append(
        Finding(
            "ok" if effective else "info",
            "CPU auto-clustering",
            {
                True: "can compile clusters in this process",
                None: "not enabled yet, and can still be: TensorFlow has not created its devices",
                False: "cannot compile clusters in this process: the CPU global-jit flag was not set before TensorFlow "
                "created its devices",
            }[effective],
            "" if effective else FIX_CPU_AUTOCLUSTERING,
        )
    )

    vmodule = os.environ.get("TF_CPP_VMODULE", "")
    # In-process after TensorFlow's import, "1" may be TensorFlow's own (harmless) value.
    if user_level not in ("", "0") and not (tf_was_loaded and user_level == "1"):
        findings.append(
            Finding(
                "info",
                "logging",
                f"TF_CPP_MIN_LOG_LEVEL={user_level} hides TensorFlow's XLA info "
                'lines ("Compiled cluster using XLA!", compile times)',
                "TF_CPP_MIN_LOG_LEVEL=0 when you need them (xla-keras explain reads them)",
            )
        )
    if "device_compiler" not in vmodule:
        findings.append(
            Finding(
                "info",
                "logging",
                "TensorFlow's per-compile time lines are off",
                "TF_CPP_VMODULE=device_compiler=1 (XlaMonitor measures compiles without them)",
            )
        )

    # Reading Keras imports TensorFlow, which a bad TF_XLA_FLAGS would kill.
    findings.extend(_multi_worker_findings(read_keras=not (problem and "TF_XLA_FLAGS" in problem)))

    if profile_tab_installed():
        findings.append(Finding("ok", "Profile tab", "tensorboard-plugin-profile is installed"))
    else:
        slow = (
            " (on Python 3.10 pip takes minutes to resolve the plugin's dependencies)"
            if sys.version_info < (3, 11) and _internals._release(_internals._version("protobuf")) >= (5,)
            else ""
        )
        findings.append(
            Finding(
                "info",
                "Profile tab",
                "tensorboard-plugin-profile is not installed: the monitor "
                f"still writes traces, but TensorBoard will not show them{slow}",
                profile_tab_install(),
            )
        )

    from xla_keras.backends.tensorflow.jit import persistent_cache

    cache = persistent_cache()
    if cache:
        directory = cache["dir"]
        files = [os.path.join(directory, f) for f in os.listdir(directory)] if os.path.isdir(directory) else []
        entries = [f for f in files if os.path.basename(f).startswith("xla_compile_cache__")]
        size = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
        if cache["effective"]:
            findings.append(
                Finding(
                    "ok",
                    "persistent compilation cache",
                    f"{directory}: {len(entries)} executable(s), {size / 1e6:.1f} MB",
                )
            )
        else:
            findings.append(
                Finding(
                    "warn",
                    "persistent compilation cache",
                    f"{directory} was configured after TensorFlow read its flags: not used in this process",
                    "xla_keras.configure(cache_dir=...) right after import, before any model is built",
                )
            )
    elif problem or not _internals.devices_initialized():
        findings.append(
            Finding(
                "info",
                "persistent compilation cache",
                "not configured (it can still be turned on in this process): every new process compiles again",
                "xla_keras.configure(cache_dir=DIR) right after import, or "
                "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR",
            )
        )
    else:
        findings.append(
            Finding(
                "info",
                "persistent compilation cache",
                "not configured, and too late to turn on in this process (TensorFlow has created its devices)",
                "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR at start",
            )
        )
    return findings


_JAX_FLAG_CHECK = (
    "import jax, jax.numpy as jnp\n"
    "jax.jit(lambda a: a * 2.0)(jnp.ones((2,))).block_until_ready()\n"
    "print('XLA_KERAS_FLAGS_OK')\n"
)


def _jax_doctor(check_flags: bool) -> List[Finding]:
    """The doctor under Keras's JAX backend: versions, devices, XLA_FLAGS, the persistent cache."""
    findings = [
        Finding(
            "info",
            "backend",
            "Keras runs the JAX backend (KERAS_BACKEND="
            f"{os.environ.get('KERAS_BACKEND', '(unset)')}): every jitted step is one XLA program",
        )
    ]
    versions = {
        name: _internals._version(name)
        for name in ("jax", "jaxlib", "keras", "tensorboard", "tensorboard-plugin-profile", "xprof")
    }
    findings.append(
        Finding(
            "info",
            "versions",
            ", ".join(f"{k} {v}" for k, v in versions.items()) + f", xla_keras {_internals.versions()['xla_keras']}",
        )
    )
    xla_flags = os.environ.get("XLA_FLAGS", "").split()
    findings.append(Finding("info", "XLA_FLAGS", " ".join(xla_flags) or "(not set)"))
    problem = None
    if check_flags and xla_flags:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _JAX_FLAG_CHECK],
                capture_output=True,
                text=True,
                timeout=300,
                env=dict(os.environ),
            )
            if "XLA_KERAS_FLAGS_OK" not in proc.stdout:
                lines = [ln for ln in proc.stderr.splitlines() if "nknown flag" in ln] or (
                    proc.stderr.strip().splitlines() or ["(no output)"]
                )[-1:]
                problem = lines[0].split("] ", 1)[-1].strip()[:300]
        except subprocess.TimeoutExpired:
            problem = "JAX did not start within 300 s with these flags"
        findings.append(
            Finding("error", "flags", f"JAX will not compile with these flags: {problem}", "remove or correct the flag")
            if problem
            else Finding("ok", "flags", "JAX started and compiled with these flags")
        )
    if not problem:
        import jax

        from xla_keras.backends.jax import _internals as jax_internals

        devices = jax_internals.devices()
        kinds = sorted({d.platform for d in devices})
        findings.append(
            Finding(
                "info",
                "devices",
                f"{len(devices)} JAX device(s): "
                + ", ".join(f"{d.platform}:{d.id}" for d in devices)
                + f" (default backend {jax.default_backend()}, {jax.process_count()} process(es))",
            )
        )
        if kinds == ["cpu"] and len(devices) == 1:
            findings.append(
                Finding(
                    "info",
                    "devices",
                    "one CPU device: keras.distribution.DataParallel has nothing to split over",
                    "XLA_FLAGS=--xla_force_host_platform_device_count=N to try it on CPU",
                )
            )
    findings.append(
        Finding(
            "info",
            "jit_compile='auto'",
            "resolves to True under JAX when every layer supports "
            "it: Keras jits each step with jax.jit, whatever the device",
            "XlaMonitor(jit='off') to compare with op-by-op execution",
        )
    )
    from xla_keras.backends.jax.jit import persistent_cache

    cache = persistent_cache() if not problem else None
    if cache:
        directory = cache["dir"]
        files = [os.path.join(directory, f) for f in os.listdir(directory)] if os.path.isdir(directory) else []
        size = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
        minimum = cache["min_compile_secs"]
        findings.append(
            Finding(
                "ok",
                "persistent compilation cache",
                f"{directory}: {len(files)} file(s), {size / 1e6:.1f} MB; JAX caches compiles "
                f"that took at least {minimum:g} s",
                ""
                if minimum <= 0
                else "xla_keras.configure(cache_dir=DIR) lowers that to 0, so short CPU compiles are cached too",
            )
        )
    else:
        findings.append(
            Finding(
                "info",
                "persistent compilation cache",
                "not configured: every new process compiles again",
                "xla_keras.configure(cache_dir=DIR) right after import",
            )
        )
    if profile_tab_installed():
        findings.append(Finding("ok", "Profile tab", "tensorboard-plugin-profile / xprof is installed"))
    else:
        findings.append(
            Finding(
                "info",
                "Profile tab",
                "no Profile-tab plugin: the monitor still writes "
                "jax.profiler traces, but TensorBoard will not show them",
                "pip install xprof",
            )
        )
    return findings


def profile_tab_installed() -> bool:
    import importlib.util

    return bool(importlib.util.find_spec("tensorboard_plugin_profile") or importlib.util.find_spec("xprof"))


def profile_tab_install() -> str:
    """The line that installs the Profile tab's plugin without changing a package the user pinned.

    Measured with pip (2026-12): tensorboard-plugin-profile 2.20+ is a shim for xprof (about 40
    packages with its Google Cloud Storage client); unpinned, pip does not re-check TensorFlow's
    protobuf pin and installed protobuf 7 over TensorFlow 2.16-2.19 (which then fails to import),
    and with TensorFlow 2.16's protobuf<5 in the request its resolver backtracked for more than five
    minutes. Releases 2.16-2.19.0 need only protobuf<5 and three small packages. So: the release that
    matches TensorFlow where protobuf is older than 5, else the current plugin with TensorFlow and
    protobuf held where they are."""
    tf_version = _internals._version("tensorflow")
    protobuf = _internals._version("protobuf")
    if _internals._release(protobuf) < (5,):
        minor = min(max((_internals.tensorflow_version() + (0, 16))[1], 16), 19)
        return f'pip install "tensorboard-plugin-profile==2.{minor}.0"'
    return f'pip install tensorboard-plugin-profile "tensorflow=={tf_version}" "protobuf=={protobuf}"'


def _multi_worker_findings(read_keras: bool = True) -> List[Finding]:
    from xla_keras.backends.tensorflow.multiworker import KERAS_ISSUE, cluster_from_env, keras_fit_problem

    cluster = cluster_from_env()
    try:
        problem = keras_fit_problem() if read_keras else None
    except _internals.InternalsMoved as error:
        return [
            Finding("info", "multi-worker", f"could not check Keras's fit under MultiWorkerMirroredStrategy: {error}")
        ]
    fix = f"the patch printed below (run it on every worker before fit), or a Keras release with {KERAS_ISSUE} fixed"
    if cluster is None:
        # Most users train in one process: a hint, not the 30-line patch.
        return (
            [
                Finding(
                    "info",
                    "multi-worker",
                    f"TF_CONFIG not set (single process). {problem}",
                    "with TF_CONFIG set, `xla-keras doctor` prints a patch (xla_keras.multiworker.WORKAROUND)",
                )
            ]
            if problem
            else []
        )
    if "error" in cluster:
        return [Finding("error", "multi-worker", cluster["error"], "fix TF_CONFIG (JSON with 'cluster' and 'task')")]
    role = (
        "the chief: XlaMonitor writes files here"
        if cluster["chief"]
        else "not the chief: XlaMonitor writes no files here"
    )
    where = f"TF_CONFIG: {cluster['tasks']} task(s); this is {cluster['task']} {cluster['index']} ({role})"
    findings = [Finding("info", "multi-worker", where)]
    if problem and cluster["tasks"] > 1:
        # A warning, not an error: TF_CONFIG alone does not say MultiWorkerMirroredStrategy will be used
        # (managed platforms set it for every job).
        findings.append(
            Finding("warn", "multi-worker", problem + " (if this job uses MultiWorkerMirroredStrategy)", fix)
        )
    return findings


def exit_code(findings: List[Finding]) -> int:
    return 1 if any(f.level == "error" for f in findings) else 0
