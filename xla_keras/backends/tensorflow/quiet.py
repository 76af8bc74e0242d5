"""Keep the profiler's own log lines (and XLA's start-up lines in a jit='fastest' trial) out of the
user's terminal, and nothing else.

TensorFlow's profiler logs four INFO lines for every session it starts and stops
("Profiler session initializing / started / collecting data / tear down"), plus
"Collecting XSpace to repository" when a trace is saved. A bare fit prints none
of them; a monitor that probes each new input shape printed 158 of 264 lines of
one storm run. They come from C++ straight to file descriptor 2, so Python's
logging cannot filter them.

:func:`without_profiler_lines` runs one profiler call (start, stop, the
session's destructor) with fd 2 sent to a temporary file, then writes back every
captured line that is not the profiler's own. The window is only that call,
never the step in between, so TensorFlow's lines printed while the step runs
(e.g. "Compilation of XLA executable time") reach the terminal untouched; a line
another thread printed inside the window is written back right after it. Pure:
no TensorFlow.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from typing import BinaryIO, Callable, Optional, TypeVar

T = TypeVar("T")

# The profiler's own INFO lines, in both of TensorFlow's log formats:
#   "2026-12-01 06:01:45.622786: I external/local_tsl/tsl/profiler/lib/profiler_session.cc:68] ..."
#   "I0000 00:00:1796104901.894342   15480 profiler_session.cc:81] ..."
# Its warnings and errors (a trace that could not be saved) are never filtered.
PROFILER_LINE = re.compile(
    rb"^(?:I\d{4} [\d:.]+\s+\d+ |[\d-]+ [\d:.]+: I )\S*?"
    rb"(/profiler/\S*|\b(profiler_session|save_profile|profiler_server|profiler_factory|profiler_lock|"
    rb"device_tracer\w*|host_tracer\w*|python_tracer\w*|cupti\w*|rocm_tracer\w*|xplane\w*)\.cc):\d+\]"
)
# XLA's start-up lines, logged once per process when TensorFlow first compiles with XLA. A
# jit='fastest' trial's first XLA step would print them where a bare fit in Keras's default mode (no
# XLA on a CPU) prints none; a fit that keeps XLA prints them anyway. Info level only.
XLA_STARTUP_LINE = re.compile(
    rb"^(?:I\d{4} [\d:.]+\s+\d+ |[\d-]+ [\d:.]+: I )\S*?(service\.cc:\d+\] +(XLA service|StreamExecutor)|"
    rb"dump_mlir_util\.cc:\d+\] disabling MLIR crash reproducer|device_compiler\.h:\d+\] Compiled cluster using XLA)"
    # absl's notice before its first log line (TensorFlow 2.18: XLA's start-up is that first line)
    rb"|^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
)
# One window at a time: two overlapping windows (two threads) would leave fd 2 on a closed file.
_WINDOW = threading.RLock()


def filter_profiler_lines(data: bytes, pattern: "re.Pattern[bytes]" = PROFILER_LINE) -> bytes:
    """``data`` without the lines the profiler logged about itself (or those ``pattern`` finds)."""
    if not data:
        return data
    lines = data.splitlines(keepends=True)
    return b"".join(line for line in lines if not pattern.search(line))


def without_profiler_lines(call: Callable[[], T]) -> T:
    """Run ``call()`` with the profiler's log lines on fd 2 filtered out.

    Every other line written to fd 2 meanwhile is written back afterwards,
    also when ``call`` raises (Ctrl-C included). A hard crash inside the
    window (the process aborts) loses what it printed there."""
    with _WINDOW:
        return _filtered(call, PROFILER_LINE)


def without_xla_startup_lines(call: Callable[[], T]) -> T:
    """Run ``call()`` (a step that may be the process's first XLA compile) without XLA's start-up
    lines on fd 2; every other line is written back, as in ``without_profiler_lines``."""
    with _WINDOW:
        return _filtered(call, XLA_STARTUP_LINE)


def _filtered(call: Callable[[], T], pattern: "re.Pattern[bytes]") -> T:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable fd 2 (e.g. closed): nothing to filter
        return call()
    try:
        capture = tempfile.TemporaryFile()
    except OSError:
        os.close(saved)
        return call()
    with capture:
        os.dup2(capture.fileno(), 2)
        try:
            return call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            try:
                capture.seek(0)
                kept = filter_profiler_lines(capture.read(), pattern)
                while kept:
                    kept = kept[os.write(2, kept) :]
            except OSError:
                pass


# TensorFlow's log records at warning or error level (a first line with its prefix; the lines after it
# without one are the same record): what a step XLA refused to compile prints (about 30-90 lines with the
# stack of the op's definition) before its error reaches Python, where the monitor then falls back.
_RECORD_START = re.compile(rb"^(?:[IWEF]\d{4} [\d:.]+\s+\d+ |[\d-]+ [\d:.]+: [IWEF] )")
_WARNING_RECORD = re.compile(rb"^(?:[WEF]\d{4} [\d:.]+\s+\d+ |[\d-]+ [\d:.]+: [WEF] )")


def without_warning_records(data: bytes) -> bytes:
    """``data`` without TensorFlow's warning and error records (each with its continuation lines)."""
    kept, dropping = [], False
    for line in data.splitlines(keepends=True):
        if _RECORD_START.match(line):
            dropping = bool(_WARNING_RECORD.match(line))
        if not dropping:
            kept.append(line)
    return b"".join(kept)


class StderrCapture:
    """fd 2 sent to a temporary file while a call runs (``with``), then written back by ``release``: all of
    it, or without TensorFlow's warning and error records (``drop_warnings``: the step's XLA refusal the
    monitor handles). Lines another thread printed meanwhile are written back too, only later."""

    def __init__(self) -> None:
        self._saved: Optional[int] = None
        self._file: Optional[BinaryIO] = None
        self.data = b""

    def __enter__(self) -> "StderrCapture":
        _WINDOW.acquire()
        try:
            sys.stderr.flush()
            self._saved = os.dup(2)
            self._file = tempfile.TemporaryFile()
            os.dup2(self._file.fileno(), 2)
        except (OSError, ValueError, AttributeError):  # no usable fd 2: nothing captured
            if self._saved is not None:
                os.close(self._saved)
            self._saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._saved is not None and self._file is not None:
                try:
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                os.dup2(self._saved, 2)
                os.close(self._saved)
                self._file.seek(0)
                self.data = self._file.read()
        finally:
            if self._file is not None:
                self._file.close()
            _WINDOW.release()

    def release(self, drop_warnings: bool = False) -> None:
        data = without_warning_records(self.data) if drop_warnings else self.data
        self.data = b""
        try:
            while data:
                data = data[os.write(2, data) :]
        except OSError:
            pass
