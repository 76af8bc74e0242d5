"""Scenario scripts in a process of their own, without importing the framework again each time.

``run(argv, env=..., timeout=...)`` is ``subprocess.run(argv, env=env, capture_output=True, text=True,
timeout=timeout)`` for ``argv = [sys.executable, script, *args]`` (or ``-c code``): the script runs in a
child forked from a server that has imported Keras and TensorFlow (tests/fork_server.py), so each
scenario still gets its own process, flags, XLA dump and logs, and pays no import. One server per
environment, less the flags the frameworks read at their first compile (``XLA_FLAGS``, ``TF_XLA_FLAGS``),
started on first use and kept for the session (each pytest-xdist worker has its own).

Used for the ground-truth scenario scripts, which import the framework first thing. Not for what must
see a whole interpreter start (import-time log lines, the doctor's reading of what was imported, import
times): those call ``subprocess`` themselves. Under Keras's JAX backend a script runs as a plain
subprocess: JAX's import is the cheaper one, and a forked JAX child has been seen to die of SIGSEGV
(docs/development.md); so is every script under TensorFlow before 2.18 (``_FORKS``).
``XLA_KERAS_TEST_FORK=off`` runs every script as a plain subprocess, for a comparison or when a server
is suspected.
"""

import atexit
import contextlib
import importlib.metadata
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERVER = os.path.join(HERE, "fork_server.py")
READ_AT_FIRST_COMPILE = ("XLA_FLAGS", "TF_XLA_FLAGS")  # checked: tests/test_forked.py
# Per run, not per server: pytest's name of the running test; a multi-worker cluster's address and task
# (read when a strategy is made).
PER_RUN = ("PYTEST_CURRENT_TEST", "TF_CONFIG")
START_SECONDS = 300


class _Server:
    """One fork server and the runs it has under way."""

    def __init__(self, env: Dict[str, str]):
        self._errors = tempfile.NamedTemporaryFile(prefix="fork_server_", suffix=".log", delete=False)
        self._proc = subprocess.Popen(
            [sys.executable, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors, env=env
        )
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._replies: Dict[int, dict] = {}
        self._events: Dict[int, threading.Event] = {}
        self._ready = threading.Event()
        self._alive = True
        self._reader = threading.Thread(target=self._read, daemon=True, name="fork-server-replies")
        self._reader.start()
        if not self._ready.wait(START_SECONDS) or not self._alive:
            errors = self._server_errors()
            self.close()
            raise RuntimeError(f"the fork server did not start:\n{errors}")

    def _server_errors(self) -> str:
        with open(self._errors.name) as f:
            return f.read()[-4000:]

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = json.loads(line)
            if "ready" in message:
                self._ready.set()
                continue
            with self._lock:
                event = self._events.get(message["id"])
                if event is None:  # a run that timed out and was given up
                    continue
                self._replies.setdefault(message["id"], {}).update(message)
                if "status" in message:
                    event.set()
        self._alive = False  # the server ended: every waiting run learns it
        self._ready.set()
        with self._lock:
            for event in self._events.values():
                event.set()

    def start(self, argv: List[str], env: Dict[str, str], cwd: Optional[str]) -> "Child":
        work = tempfile.mkdtemp(prefix="forked_")
        out, err = os.path.join(work, "stdout"), os.path.join(work, "stderr")
        with self._lock:
            run_id = next(self._ids)
            event = self._events[run_id] = threading.Event()
            request = {
                "id": run_id,
                "argv": argv[1:],
                "env": env,
                "cwd": cwd or os.getcwd(),
                "stdout": out,
                "stderr": err,
            }
            assert self._proc.stdin is not None
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        return Child(self, run_id, event, argv, work)

    def _pid(self, run_id: int) -> Optional[int]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._alive:
            with self._lock:
                reply = self._replies.get(run_id, {})
            if "pid" in reply or "status" in reply:
                return reply.get("pid")
            time.sleep(0.01)
        return None

    def _finish(self, run_id: int) -> dict:
        with self._lock:
            self._events.pop(run_id, None)
            reply = self._replies.pop(run_id, {})
        if "status" not in reply and not self._alive:
            raise RuntimeError(f"the fork server ended during a run:\n{self._server_errors()}")
        return reply

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._reader.join(5)  # the server's end closes its replies: the reader has read to the end
        if self._proc.stdout and not self._reader.is_alive():
            self._proc.stdout.close()
        self._errors.close()
        os.unlink(self._errors.name)


class Child:
    """A script running in a forked child: ``communicate`` and ``returncode`` as ``subprocess.Popen``'s."""

    def __init__(self, server: _Server, run_id: int, event: threading.Event, argv: List[str], work: str):
        self._server, self._id, self._event, self.args, self._work = server, run_id, event, argv, work
        self.returncode: Optional[int] = None
        self._read = False  # communicate has returned or raised: the child has ended (or was killed)

    @property
    def pid(self) -> Optional[int]:
        return self._server._pid(self._id)

    def kill(self) -> None:
        if self._read:
            return
        pid = self.pid
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def communicate(self, timeout: Optional[float] = None):
        """(stdout, stderr) once the child has ended; ``subprocess.TimeoutExpired`` (the child killed) if it
        has not within ``timeout`` seconds."""
        finished = self._event.wait(timeout)
        if not finished:
            self.kill()
            self._event.wait(30)
        try:
            reply = self._server._finish(self._id)
            stdout, stderr = (_read_text(os.path.join(self._work, name)) for name in ("stdout", "stderr"))
        finally:
            shutil.rmtree(self._work, ignore_errors=True)
            self._read = True
        if not finished:
            raise subprocess.TimeoutExpired(self.args, timeout or 0, stdout, stderr)
        self.returncode = reply["status"]
        return stdout, stderr


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def tensorflow_times_compiles_from_profiler_events() -> bool:
    """TensorFlow 2.18 and later: the monitor reads compile seconds from the profiler's XLA events. Before,
    from the compile op's span, whose first one also holds the process's one-time start-up: in a forked
    child 116 ms over TensorFlow 2.16's compile line, where a fresh process's is 2-45 ms idle: those
    scripts keep the fresh process a user's fit starts in (docs/development.md)."""
    try:
        major, minor = (int(part) for part in importlib.metadata.version("tensorflow").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (2, 18)


_FORKS = tensorflow_times_compiles_from_profiler_events()
_SERVERS: Dict[tuple, _Server] = {}
_SERVERS_LOCK = threading.Lock()


def script_env(backend: str, *, dump: Optional[str] = None, **extra: str) -> Dict[str, str]:
    """The environment a ground-truth script runs in: this one, with Keras's ``backend``, no GPU, the
    checkout importable, TensorFlow's log at warnings (the scripts that read only XLA's dump share a
    server there), no ``TF_XLA_FLAGS`` from the shell, XLA's dump in ``dump`` when given; then ``extra``."""
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    env.pop("TF_XLA_FLAGS", None)
    if dump is not None:
        env["XLA_FLAGS"] = f"--xla_dump_to={dump}"
    env.update(extra)
    return env


def _server(env: Dict[str, str]) -> _Server:
    server_env = {k: v for k, v in env.items() if k not in READ_AT_FIRST_COMPILE + PER_RUN}
    key = tuple(sorted(server_env.items()))
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = _Server(server_env)
        return _SERVERS[key]


@atexit.register
def _close_all() -> None:
    for server in _SERVERS.values():
        server.close()


def start(argv: List[str], *, env: Optional[Dict[str, str]] = None, cwd=None):
    """``subprocess.Popen(argv, env=env, cwd=cwd, stdout=PIPE, stderr=PIPE, text=True)``, started in a child
    of the fork server for ``env`` (``argv[0]`` is ``sys.executable``): read it with ``communicate``."""
    assert argv[0] == sys.executable and len(argv) > 1 and argv[1] != "-m", argv
    env = dict(os.environ if env is None else env)
    if os.environ.get("XLA_KERAS_TEST_FORK", "on") == "off" or env.get("KERAS_BACKEND") == "jax" or not _FORKS:
        pipe = subprocess.PIPE
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=pipe, stderr=pipe, text=True)
    return _server(env).start([str(a) for a in argv], env, None if cwd is None else str(cwd))


def run(argv: List[str], *, env: Optional[Dict[str, str]] = None, timeout: Optional[float] = None, cwd=None):
    """``subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)``, run in
    a child of the fork server for ``env`` (``argv[0]`` is ``sys.executable``)."""
    child = start(argv, env=env, cwd=cwd)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        raise
    return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
