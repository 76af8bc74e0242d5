"""TensorBoard output: scalars under LOG_DIR/train and LOG_DIR/validation,
and LOG_DIR/xla_report.json (replaced atomically at every flush).

Writers are created lazily, on the first value written, so a monitor that
never writes leaves no empty run directories. TensorFlow is imported only
when a writer is first needed.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Dict

RUNS = {"train": "train", "test": "validation"}
REPORT_FILE = "xla_report.json"

TAG_STEP_TIME = "xla/step_time_ms"
TAG_COMPILATIONS = "xla/compilations"
TAG_COMPILE_TIME = "xla/compile_time_ms"


class SummaryWriters:
    """One lazily created tf.summary writer per run."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self._writers: Dict[str, Any] = {}

    def _writer(self, run: str) -> Any:
        writer = self._writers.get(run)
        if writer is None:
            import tensorflow as tf
            # flush_millis is a backstop only: the monitor flushes itself after
            # compiles, at epoch ends and every few seconds (DESIGN §1).
            writer = tf.summary.create_file_writer(os.path.join(self.log_dir, run), flush_millis=5000)
            self._writers[run] = writer
        return writer

    def scalar(self, phase: str, tag: str, value: float, step: int) -> None:
        run = RUNS.get(phase)
        if run is None:
            return
        import tensorflow as tf
        with self._writer(run).as_default():
            tf.summary.scalar(tag, value, step=step)

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def write_report_json(log_dir: str, report_dict: dict) -> str:
    """Replace LOG_DIR/xla_report.json atomically (readers never see half a file)."""
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, REPORT_FILE)
    fd, tmp = tempfile.mkstemp(prefix=".xla_report.", suffix=".tmp", dir=log_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(report_dict, f, indent=2, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def read_report_json(log_dir: str) -> dict:
    with open(os.path.join(log_dir, REPORT_FILE)) as f:
        return json.load(f)
