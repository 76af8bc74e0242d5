"""What this machine and environment will do with XLA under Keras's TensorFlow backend: doctor's findings.

A finding is a tuple (level, topic, message[, fix]); ``xla_keras.tools.doctor``
gathers and prints them. TensorFlow is imported only after the flags were
proven in a subprocess: an unknown TF_XLA_FLAGS flag kills the process that
reads it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional, Tuple

from xla_keras.backends.tensorflow import _internals
from xla_keras.backends.tensorflow.flags import AUTO_JIT, CPU_GLOBAL_JIT, PERSISTENT_CACHE, XlaFlags, env_auto_jit_on
from xla_keras.backends.tensorflow.jit import FIX_CPU_AUTOCLUSTERING, cpu_autoclustering_effective, persistent_cache
from xla_keras.backends.tensorflow.multiworker import KERAS_ISSUE, cluster_from_env, keras_fit_problem
from xla_keras.core.versions import installed_version, keras_unsupported, release, versions_line

Finding = Tuple[str, ...]  # (level, topic, message) or (level, topic, message, fix)

# Started in a fresh process with the user's flags: an unknown TF_XLA_FLAGS
# flag kills TensorFlow at its first op, an unknown XLA_FLAGS flag at XLA's
# first compile. Running the real thing is the only list that cannot go stale.
_FLAG_CHECK = (
    "import tensorflow as tf\n"
    "tf.constant(1.0) + 1.0\n"
    "tf.function(lambda a: a * 2.0, jit_compile=True)(tf.ones((2,)))\n"
    "print('XLA_KERAS_FLAGS_OK')\n"
)


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


def findings(check_flags: bool, tab_installed: bool, tab_install_line: str) -> List[Finding]:
    """Versions, devices, jit resolution, flags, logging, multi-worker, the Profile tab (installed or not:
    ``tab_install_line`` installs it) and the persistent cache."""
    # Importing TensorFlow can set TF_CPP_MIN_LOG_LEVEL=1 when it is unset (here, jax imported by it
    # does), after TensorFlow's C++ logging has started (measured: its info lines still print).
    # Read the user's value first.
    tf_was_loaded = "tensorflow" in sys.modules
    user_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")
    found = _package_findings()
    flag_findings, problem = _flag_findings(check_flags)
    device_findings, accelerators = _device_findings(problem)
    found += flag_findings + device_findings + _compile_timing_findings(problem)
    found += _autoclustering_findings(problem, accelerators)
    found += _logging_findings(user_level, tf_was_loaded)
    # Reading Keras imports TensorFlow, which a bad TF_XLA_FLAGS would kill.
    found += multi_worker_findings(read_keras=not (problem and "TF_XLA_FLAGS" in problem))
    found += _tab_findings(tab_installed, tab_install_line)
    return found + _cache_findings(problem)


def _package_findings() -> List[Finding]:
    findings: List[Finding] = []
    findings.append(
        (
            "info",
            "backend",
            f"Keras runs the TensorFlow backend (KERAS_BACKEND={os.environ.get('KERAS_BACKEND', '(unset)')})",
        )
    )
    packages = ("tensorflow", "keras", "tensorboard", "protobuf", "tensorboard-plugin-profile", "xprof")
    findings.append(("info", "versions", versions_line(packages)))
    unsupported = keras_unsupported()
    if unsupported:
        findings.append(("warn", "keras", unsupported, 'pip install "keras>=3.7"'))
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        findings.append(
            (
                "info",
                "keras",
                "TF_USE_LEGACY_KERAS is set: tf.keras models are tf_keras models, "
                "which XlaMonitor does not observe (it steps aside, saying so); models built with "
                "`import keras` are Keras 3 and are observed",
            )
        )
    return findings


def _flag_findings(check_flags: bool) -> Tuple[List[Finding], Optional[str]]:
    findings: List[Finding] = []
    tf_flags, xla_flags = XlaFlags.from_env().tokens, os.environ.get("XLA_FLAGS", "").split()
    findings.append(("info", "TF_XLA_FLAGS", " ".join(tf_flags) or "(not set)"))
    findings.append(("info", "XLA_FLAGS", " ".join(xla_flags) or "(not set)"))
    # Checked first, in a subprocess: with a bad flag, touching TensorFlow here
    # would kill this process too.
    problem = _check_flags_in_subprocess() if check_flags and (tf_flags or xla_flags) else None
    if problem:
        findings.append(
            ("error", "flags", f"TensorFlow will not run with these flags: {problem}", "remove or correct the flag")
        )
    elif check_flags and (tf_flags or xla_flags):
        findings.append(("ok", "flags", "TensorFlow started and compiled with these flags"))
    return findings, problem


def _device_findings(problem: Optional[str]) -> Tuple[List[Finding], list]:
    findings: List[Finding] = []
    accelerators: list = []
    if problem and "TF_XLA_FLAGS" in problem:
        findings.append(("warn", "devices", "not checked: TensorFlow cannot start with this TF_XLA_FLAGS"))
    else:
        import tensorflow as tf

        devices = tf.config.list_physical_devices()  # does not create the devices
        accelerators = [d for d in devices if d.device_type != "CPU"]
        findings.append(
            ("info", "devices", ", ".join(f"{d.device_type}:{d.name.rsplit(':', 1)[-1]}" for d in devices) or "none")
        )
        if accelerators:
            findings.append(
                (
                    "info",
                    "jit_compile='auto'",
                    "resolves to True here (an accelerator is "
                    "present), except under a tf.distribute strategy, where Keras resolves it "
                    "to False",
                )
            )
        else:
            findings.append(
                (
                    "info",
                    "jit_compile='auto'",
                    "resolves to False here: no GPU/TPU, so Keras does not use XLA unless asked",
                    "XlaMonitor(jit='on') or compile(jit_compile=True)",
                )
            )
    return findings, accelerators


def _compile_timing_findings(problem: Optional[str]) -> List[Finding]:
    findings: List[Finding] = []
    if not problem and release(installed_version("tensorflow")) < (2, 18):
        findings.append(
            (
                "info",
                "compile timing",
                f"TensorFlow {installed_version('tensorflow')}'s XLA compiler emits "
                "no profiler events on CPU: XlaMonitor times each compile from the span of the op "
                "that triggered it (source='op_span', within a few % of TensorFlow's own lines)",
            )
        )
    return findings


def _autoclustering_findings(problem: Optional[str], accelerators: list) -> List[Finding]:
    findings: List[Finding] = []
    auto_value = XlaFlags.from_env().value(AUTO_JIT) or ""
    auto_on = env_auto_jit_on() and not auto_value.startswith("single-gpu")
    cpu_flag = XlaFlags.from_env().enabled(CPU_GLOBAL_JIT) or (
        not problem and cpu_autoclustering_effective() is True
    )  # with a bad flag, TF would abort this process
    if auto_value.startswith("single-gpu") and not accelerators:
        findings.append(
            (
                "info",
                "auto-clustering",
                f"--tf_xla_auto_jit={auto_value} clusters only on a "
                "machine with exactly one GPU: nothing is clustered here",
            )
        )
    if auto_on and not accelerators and not cpu_flag and not problem:
        findings.append(
            (
                "error",
                "auto-clustering",
                "TF_XLA_FLAGS asks for auto-clustering, but this machine "
                "has only CPUs and the CPU global-jit flag is not set: no cluster will compile",
                "add --tf_xla_cpu_global_jit to TF_XLA_FLAGS",
            )
        )
    effective = cpu_autoclustering_effective() if not problem else None
    findings.append(
        (
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
    return findings


def _logging_findings(user_level: str, tf_was_loaded: bool) -> List[Finding]:
    findings: List[Finding] = []
    vmodule = os.environ.get("TF_CPP_VMODULE", "")
    # In-process after TensorFlow's import, "1" may be TensorFlow's own (harmless) value.
    if user_level not in ("", "0") and not (tf_was_loaded and user_level == "1"):
        findings.append(
            (
                "info",
                "logging",
                f"TF_CPP_MIN_LOG_LEVEL={user_level} hides TensorFlow's XLA info "
                'lines ("Compiled cluster using XLA!", compile times)',
                "TF_CPP_MIN_LOG_LEVEL=0 when you need them (xla-keras explain reads them)",
            )
        )
    if "device_compiler" not in vmodule:
        findings.append(
            (
                "info",
                "logging",
                "TensorFlow's per-compile time lines are off",
                "TF_CPP_VMODULE=device_compiler=1 (XlaMonitor measures compiles without them)",
            )
        )

    if "mark_for_compilation_pass" not in vmodule:
        findings.append(
            (
                "info",
                "logging",
                "auto-clustering's own summary (per graph: the clusters built, the nodes left out and why) is off",
                "once, in a separate run: TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=mark_for_compilation_pass=3 "
                "python train.py 2>&1 | xla-keras explain - (XlaMonitor(jit='autoclustering') measures the "
                "coverage without it)",
            )
        )
    return findings


def _tab_findings(tab_installed: bool, tab_install_line: str) -> List[Finding]:
    findings: List[Finding] = []
    if tab_installed:
        findings.append(("ok", "Profile tab", "tensorboard-plugin-profile is installed"))
    else:
        slow = (
            " (on Python 3.10 pip takes minutes to resolve the plugin's dependencies)"
            if sys.version_info < (3, 11) and release(installed_version("protobuf")) >= (5,)
            else ""
        )
        findings.append(
            (
                "info",
                "Profile tab",
                "tensorboard-plugin-profile is not installed: the monitor "
                f"still writes traces, but TensorBoard will not show them{slow}",
                tab_install_line,
            )
        )
    return findings


def _cache_findings(problem: Optional[str]) -> List[Finding]:
    findings: List[Finding] = []
    cache = persistent_cache()
    if cache:
        directory = cache["dir"]
        files = [os.path.join(directory, f) for f in os.listdir(directory)] if os.path.isdir(directory) else []
        entries = [f for f in files if os.path.basename(f).startswith("xla_compile_cache__")]
        size = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
        if cache["effective"]:
            findings.append(
                (
                    "ok",
                    "persistent compilation cache",
                    f"{directory}: {len(entries)} executable(s), {size / 1e6:.1f} MB",
                )
            )
        else:
            findings.append(
                (
                    "warn",
                    "persistent compilation cache",
                    f"{directory} was configured after TensorFlow read its flags: not used in this process",
                    "xla_keras.configure(cache_dir=...) right after import, before any model is built",
                )
            )
    elif problem or not _internals.devices_initialized():
        findings.append(
            (
                "info",
                "persistent compilation cache",
                "not configured (it can still be turned on in this process): every new process compiles again",
                "xla_keras.configure(cache_dir=DIR) right after import, or "
                "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR",
            )
        )
    else:
        findings.append(
            (
                "info",
                "persistent compilation cache",
                "not configured, and too late to turn on in this process (TensorFlow has created its devices)",
                "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR at start",
            )
        )
    return findings


def multi_worker_findings(read_keras: bool = True) -> List[Finding]:
    cluster = cluster_from_env()
    try:
        problem = keras_fit_problem() if read_keras else None
    except _internals.InternalsMoved as error:
        return [("info", "multi-worker", f"could not check Keras's fit under MultiWorkerMirroredStrategy: {error}")]
    fix = f"the patch printed below (run it on every worker before fit), or a Keras release with {KERAS_ISSUE} fixed"
    if cluster is None:
        # Most users train in one process: a hint, not the 30-line patch.
        return (
            [
                (
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
        return [("error", "multi-worker", cluster["error"], "fix TF_CONFIG (JSON with 'cluster' and 'task')")]
    role = (
        "the chief: XlaMonitor writes files here"
        if cluster["chief"]
        else "not the chief: XlaMonitor writes no files here"
    )
    where = f"TF_CONFIG: {cluster['tasks']} task(s); this is {cluster['task']} {cluster['index']} ({role})"
    findings: List[Finding] = [("info", "multi-worker", where)]
    if problem and cluster["tasks"] > 1:
        # A warning, not an error: TF_CONFIG alone does not say MultiWorkerMirroredStrategy will be used
        # (managed platforms set it for every job).
        findings.append(("warn", "multi-worker", problem + " (if this job uses MultiWorkerMirroredStrategy)", fix))
    return findings
