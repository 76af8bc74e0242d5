"""TensorBoard output: scalars under LOG_DIR/train and LOG_DIR/validation,
and LOG_DIR/xla_report.json (replaced atomically at every flush).

Writers are created lazily, on the first value written, so a monitor that
never writes leaves no empty run directories. No TensorFlow here.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any, Dict

RUNS = {"train": "train", "test": "validation"}
REPORT_FILE = "xla_report.json"

TAG_STEP_TIME = "xla/step_time_ms"
TAG_STEADY_STEP_TIME = "xla/steady_step_time_ms"
TAG_COMPILATIONS = "xla/compilations"
TAG_COMPILE_TIME = "xla/compile_time_ms"
TAG_DISTINCT_SIGNATURES = "xla/distinct_signatures"
TAG_STORM = "xla/storm"
TAG_REPORT = "xla/report"
LAYOUT_CATEGORY = "XLA"


def _layout() -> Any:
    """The custom-scalars layout: one "XLA" category, three charts."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    def chart(title, tags):
        return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(
            tag=[f"^{t}$" for t in tags]))

    return layout_pb2.Layout(category=[layout_pb2.Category(title=LAYOUT_CATEGORY, chart=[
        chart("step time vs steady step time (ms)", [TAG_STEP_TIME, TAG_STEADY_STEP_TIME]),
        chart("compilations and distinct signatures", [TAG_COMPILATIONS, TAG_DISTINCT_SIGNATURES]),
        chart("compile time (ms)", [TAG_COMPILE_TIME]),
        chart("recompilation storms", [TAG_STORM]),
    ])])


def _string_tensor(value: bytes) -> Any:
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[value],
                                  tensor_shape=tensor_shape_pb2.TensorShapeProto())


class SummaryWriters:
    """One lazily created event-file writer per run.

    Events are written with TensorBoard's own pure-Python writer, not
    tf.summary: a scalar costs ~25 us instead of ~350 us of TensorFlow ops,
    which matters for update_freq="batch" on ~1 ms steps.
    """

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self._writers: Dict[str, Any] = {}

    def _writer(self, run: str) -> Any:
        writer = self._writers.get(run)
        if writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
            # flush_secs is a backstop only: the monitor flushes itself after
            # compiles, at epoch ends and every few seconds (DESIGN §1).
            writer = EventFileWriter(os.path.join(self.log_dir, run), flush_secs=5)
            self._writers[run] = writer
        return writer

    def scalar(self, phase: str, tag: str, value: float, step: int) -> None:
        run = RUNS.get(phase)
        if run is None:
            return
        from tensorboard.compat.proto.summary_pb2 import Summary
        self._event(run, step, Summary.Value(tag=tag, simple_value=float(value)))

    def _event(self, run: str, step: int, value: Any) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        self._writer(run).add_event(Event(wall_time=time.time(), step=int(step), summary=Summary(value=[value])))

    def text(self, phase: str, tag: str, markdown: str, step: int) -> None:
        """A text summary (TensorBoard's Text tab renders it as markdown)."""
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text import metadata
        run = RUNS.get(phase)
        if run is not None:
            self._event(run, step, Summary.Value(
                tag=tag, metadata=metadata.create_summary_metadata(display_name=tag, description=""),
                tensor=_string_tensor(markdown.encode("utf-8"))))

    def layout(self) -> None:
        """The custom-scalars layout with the "XLA" category (written once per writer)."""
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.custom_scalar import metadata
        self._event("train", 0, Summary.Value(
            tag=metadata.CONFIG_SUMMARY_TAG, metadata=metadata.create_summary_metadata(),
            tensor=_string_tensor(_layout().SerializeToString())))

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def write_report_json(log_dir: str, report_dict: dict) -> str:
    """Replace LOG_DIR/xla_report.json atomically (readers never see half a file).

    The temporary file is created with open(..., "x"), so it gets the umask's
    permissions like the event files beside it (mkstemp's would be 0600)."""
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, REPORT_FILE)
    tmp = os.path.join(log_dir, f".xla_report.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x") as f:
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
