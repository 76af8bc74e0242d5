"""A real `tensorboard` process for tests: a free loopback port, a log file
(not a pipe: a full pipe would block the server), stopped by its PID."""

import contextlib
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=30):
    """(status, body) of a GET, gunzipped."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return response.status, body


def get_json(url, timeout=30):
    return json.loads(get(url, timeout)[1])


@contextlib.contextmanager
def running_tensorboard(log_dir, work_dir, ready=None, timeout=120, args=()):
    """Yield the base URL of a tensorboard serving ``log_dir`` once
    ``ready(base)`` is true (default: it answers at all)."""
    ready = ready or (lambda base: get(base + "/data/plugins_listing", timeout=5) is not None)
    binary = shutil.which("tensorboard") or os.path.join(os.path.dirname(sys.executable), "tensorboard")
    server_log = os.path.join(str(work_dir), "tensorboard.log")
    log_file = open(server_log, "w")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--logdir", str(log_dir), "--host", "127.0.0.1", "--port", str(port), *args],
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                if ready(base):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                with open(server_log) as f:
                    raise AssertionError("tensorboard did not get ready: " + f.read()[-2000:])
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log_file.close()


def headless_chromium(p):
    """Debian's Chromium, headless, from playwright's sync API ``p`` (no browser is downloaded)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    assert os.path.exists(chromium), "chromium is installed by the README's test command"
    return p.chromium.launch(
        executable_path=chromium,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )
