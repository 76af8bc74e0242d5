"""A process that has imported the framework once, and forks a child per script run.

Started by tests/forked.py, never by hand. It imports Keras and the backend ``KERAS_BACKEND`` names; at
each fork it runs one thread (OpenBLAS, numpy's, stops its workers before a fork; checked by
tests/test_forked.py), so a child misses no thread. The frameworks read the flags the scenarios set
(``XLA_FLAGS``, ``TF_XLA_FLAGS``) when they first compile, not when they are imported: a child forked
after the import, with its own environment, compiles, dumps and logs as a fresh process would, and
skips the 2-5 CPU-seconds of importing TensorFlow or JAX again. What they read at import
(``TF_CPP_*``, ``KERAS_BACKEND``, ``JAX_*``, ``PYTHONPATH``) is this process's own environment:
tests/forked.py keeps one server per such environment, and a child whose script sets one of them
itself exits with 70, saying so.

Protocol (one JSON object a line): requests on stdin ``{"id", "argv", "env", "cwd", "stdout",
"stderr"}`` (``argv``: ``[script, *args]`` or ``["-c", code, *args]``; ``stdout``/``stderr``: files the
child writes); replies on stdout ``{"id", "pid"}`` when the child started, ``{"id", "status"}`` (a
``subprocess`` return code: negative for a signal) when it ended. The server starts no thread; it
ends when stdin closes and its children have ended.
"""

import json
import os
import select
import sys
import time
import warnings

FILTERS = list(warnings.filters)  # the children's warning filters: a fresh interpreter's
warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)  # Python 3.12+

# TensorFlow's C++ logging reads these when TensorFlow is imported.
TF_LOGGING = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE")
IMPORTED_WITH = {k: os.environ.get(k) for k in TF_LOGGING}

import keras  # noqa: E402 - and the backend it is set to (KERAS_BACKEND)

TENSORFLOW_IMPORTED = "tensorflow" in sys.modules


def _set_too_late():
    """What the script set itself that the frameworks read when imported (here, before the fork): a
    fresh process would have honoured it, this child did not."""
    late = {}
    backend = keras.backend.backend()
    if os.environ.get("KERAS_BACKEND", backend) != backend:
        late["KERAS_BACKEND"] = os.environ["KERAS_BACKEND"]
    if TENSORFLOW_IMPORTED:
        late.update({k: os.environ.get(k) for k in TF_LOGGING if os.environ.get(k) != IMPORTED_WITH[k]})
    return late


def _child(request):
    """In the forked child: the request's environment, files and script, then exit with its code."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request.get("cwd") or os.getcwd())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    warnings.filters[:] = FILTERS
    code = 0
    try:
        code = _run(request["argv"])
        late = _set_too_late()
        if late:
            print(
                f"fork server: the script set {late} after the import here: give it in the run's environment",
                file=sys.stderr,
            )
            code = 70
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit
            import threading

            threading._shutdown()  # as the interpreter does at exit: wait for non-daemon threads
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run(argv):
    import runpy

    if argv[0] == "-c":
        import types

        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        main_module = types.ModuleType("__main__")
        sys.modules["__main__"] = main_module
        exec(compile(argv[1], "<string>", "exec"), main_module.__dict__)
        return 0
    script = os.path.abspath(argv[0])
    sys.argv = [argv[0], *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    runpy.run_path(script, run_name="__main__")
    return 0


def _reply(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    _reply({"ready": os.getpid()})
    children = {}  # pid -> request id
    buffered = b""
    open_input = True
    while open_input or children:
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _reply({"id": children.pop(pid), "status": os.waitstatus_to_exitcode(status)})
        if not open_input:
            time.sleep(0.02)
            continue
        readable, _, _ = select.select([0], [], [], 0.02)
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            open_input = False
            continue
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request)
            children[pid] = request["id"]
            _reply({"id": request["id"], "pid": pid})


if __name__ == "__main__":
    main()
