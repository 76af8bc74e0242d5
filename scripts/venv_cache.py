"""Venvs reused between CI runs while what they pin is unchanged (scripts/compat.py, package_check.py).

Installing TensorFlow into a fresh venv is most of a compatibility tier's time and all of it is the
same from run to run. A cached venv holds only what a check starts from: a tier's pinned TensorFlow
(or JAX), the packaging check's dependencies. It lives under ``~/.cache/xla_keras/venvs/<name>-<key>``,
``key`` a hash of the interpreter's exact version and the requirement lines, and each use:

- verifies the venv against the package list recorded when it was built (every name and version);
  one that differs (an interrupted build, someone installing into it) is rebuilt, never used;
- rebuilds it after ``MAX_AGE_DAYS``, so that what pip pairs with a pin follows the index as a fresh
  venv's would;
- hands out a copy made of hard links: pip unlinks a file before it writes one and Python replaces its
  bytecode files, so what a run installs or compiles never reaches the cached venv.

``XLA_KERAS_VENV_CACHE=off`` builds every venv fresh (the cold run); ``XLA_KERAS_VENV_CACHE=DIR`` moves
the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from typing import Callable, Dict, Iterator, List

FORMAT = 1  # bump when what a cached venv holds changes meaning
MAX_AGE_DAYS = 7
VENV_OPTIONS: List[str] = []  # tests/test_venv_cache.py: ["--without-pip"], venvs in a blink
PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore", "PIP_NO_INPUT": "1"}


def cache_root() -> str:
    setting = os.environ.get("XLA_KERAS_VENV_CACHE", "")
    return (
        setting if setting not in ("", "off") else os.path.join(os.path.expanduser("~"), ".cache", "xla_keras", "venvs")
    )


def enabled() -> bool:
    return os.environ.get("XLA_KERAS_VENV_CACHE", "") != "off"


def _run(cmd: List[str], timeout: float = 1800) -> str:
    env = dict(os.environ, **PIP_ENV)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


_LIST = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted((d.metadata['Name'], d.version) for d in m.distributions())))"
)


def packages(python: str) -> Dict[str, str]:
    """Every distribution installed in this interpreter's environment, name -> version."""
    listed = json.loads(_run([python, "-I", "-c", _LIST]))  # -I: not the current directory's egg-info
    return {name.lower().replace("_", "-"): version for name, version in listed}


def _create(base_python: str, venv: str) -> None:
    _run([base_python, "-m", "venv", *VENV_OPTIONS, venv])


def key_of(python: str, requirements: List[str]) -> str:
    version = _run([python, "-c", "import sys; print(sys.version)"]).strip()
    pinned = json.dumps({"format": FORMAT, "python": version, "requirements": sorted(requirements)}, sort_keys=True)
    return hashlib.sha256(pinned.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """One builder per cached venv: two CI runs on one machine wait for each other, not clobber."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _python_of(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def _usable(cached: str) -> str:
    """Why the cached venv cannot be used, or "" when it can."""
    manifest = os.path.join(cached, "manifest.json")
    if not os.path.isfile(manifest):
        return "none cached"
    with open(manifest) as f:
        recorded = json.load(f)
    age_days = (time.time() - recorded["built"]) / 86400
    if age_days > MAX_AGE_DAYS:
        return f"built {age_days:.0f} days ago"
    try:
        now = packages(_python_of(os.path.join(cached, "venv")))
    except (RuntimeError, OSError) as error:
        return f"does not run ({str(error).splitlines()[0]})"
    if now != recorded["packages"]:
        moved = sorted(set(now.items()) ^ set(recorded["packages"].items()))
        return f"differs from what was built: {moved[:6]}"
    return ""


def venv_with(name: str, base_python: str, requirements: List[str], dest: str, install: Callable[[str], None]) -> str:
    """A venv at ``dest`` holding exactly what ``install(python)`` puts into a fresh venv of
    ``base_python``, given that it installs ``requirements``: a copy of the cached one when its pins are
    unchanged and it verifies, else built (and cached). Returns a line saying which, for the log."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    if not enabled():
        _create(base_python, dest)
        install(_python_of(dest))
        return "built fresh (cache off)"
    cached = os.path.join(cache_root(), f"{name}-{key_of(base_python, requirements)}")
    with _locked(cached):
        why = _usable(cached)
        if why:
            shutil.rmtree(cached, ignore_errors=True)
            venv = os.path.join(cached, "venv")
            start = time.monotonic()
            _create(base_python, venv)
            install(_python_of(venv))
            record = {"built": time.time(), "requirements": requirements, "packages": packages(_python_of(venv))}
            with open(os.path.join(cached, "manifest.json"), "w") as f:
                json.dump(record, f, indent=1)
            said = f"built and cached ({why}; {time.monotonic() - start:.0f} s)"
        else:
            said = "reused from the cache (pins unchanged, every package verified)"
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            subprocess.run(["cp", "-al", os.path.join(cached, "venv"), dest], check=True, capture_output=True)
        except subprocess.CalledProcessError:  # another filesystem: a real copy
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(os.path.join(cached, "venv"), dest, symlinks=True)
    return said
