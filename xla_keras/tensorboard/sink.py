"""Where the monitor's output goes: TensorBoard event files and the report file. No TensorFlow.

One ``OutputSink`` per report: it decides whether to write at all (a log_dir,
and only the chief under tf.distribute), creates the event-file writers
lazily (a monitor that never writes leaves no empty run directories), and
throttles flushes. Flushing matters because another callback's exception can
end a fit without any hook of ours running again: events are flushed right
after a compile, at epoch ends, and at least every ``FLUSH_EVERY_SECONDS``,
and the report file is replaced atomically at most once a second while
compiles pour in. The XLA tab's copy of the report (a summary, see
``metadata.TAG_REPORT_DATA``) is appended to the event file at epoch ends and
at the end, and at most every ``REPORT_DATA_EVERY_SECONDS`` in between, so that
the tab refreshes during a long epoch while the event file grows by a bounded
amount (a 1,000-compile report is ~40 kB compressed).

Events are written with TensorBoard's own pure-Python writer, not tf.summary:
a scalar costs ~25 us instead of ~350 us of TensorFlow ops, which matters for
update_freq="batch" on ~1 ms steps.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import struct
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from xla_keras.core.cache import atomic_write_text
from xla_keras.report.schema import REPORT_FILE
from xla_keras.tensorboard.metadata import (
    LAYOUT_CATEGORY,
    LAYOUT_CHARTS,
    RUNS,
    TAG_REPORT,
    TAG_REPORT_DATA,
    create_summary_metadata,
    encode_report_data,
)

FLUSH_EVERY_SECONDS = 5.0
REPORT_EVERY_SECONDS = 1.0
REPORT_DATA_EVERY_SECONDS = 10.0


def _layout() -> Any:
    from tensorboard.plugins.custom_scalar import layout_pb2

    def chart(title, tags):
        return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=[f"^{t}$" for t in tags]))

    return layout_pb2.Layout(
        category=[
            layout_pb2.Category(title=LAYOUT_CATEGORY, chart=[chart(title, tags) for title, tags in LAYOUT_CHARTS])
        ]
    )


def _string_tensor(value: bytes) -> Any:
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING, string_val=[value], tensor_shape=tensor_shape_pb2.TensorShapeProto()
    )


class LocalEventFile:
    """An event file on a local filesystem, written without TensorFlow.

    TensorBoard's own EventFileWriter reaches the filesystem through
    ``tensorboard.compat.tf``, which imports TensorFlow whenever it is installed:
    a JAX fit would pay TensorFlow's import (seconds, and its log lines). Same
    format (TFRecord of Event protos via TensorBoard's RecordWriter); writes are
    buffered and flushed by the sink, with the same 5 s backstop."""

    _ids = itertools.count()

    def __init__(self, logdir: str, flush_secs: float = 5.0):
        os.makedirs(logdir, exist_ok=True)
        from tensorboard.compat.proto.event_pb2 import Event

        # TensorBoard's own naming (tools read the host and pid from it): time, host, pid, a counter. The
        # counter is zero-padded: TensorBoard reads a run's files in name order, and two files of one
        # second named .9 and .10 would be read newest first (the older report would win).
        name = "events.out.tfevents.%010d.%s.%s.%06d" % (
            time.time(),
            socket.gethostname(),
            os.getpid(),
            next(self._ids),
        )
        self._file = open(os.path.join(logdir, name), "wb")
        self._flush_secs = flush_secs
        self._flushed = time.monotonic()
        self.add_event(Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def add_event(self, event: Any) -> None:
        self._file.write(tf_record(event.SerializeToString()))
        if time.monotonic() - self._flushed > self._flush_secs:
            self.flush()

    def flush(self) -> None:
        self._file.flush()
        self._flushed = time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def _import_writers() -> None:
    """Import what the writers need (TensorBoard's protos and two plugins' metadata: 40-50 ms, protobuf's
    own import most of it)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2  # noqa: F401
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata  # noqa: F401
    from tensorboard.plugins.text import metadata as text_metadata  # noqa: F401


_IMPORTING: List[threading.Thread] = []


def _import_writers_soon() -> None:
    """Start importing what the writers need on a thread of its own, once per process: it runs beside the
    first step's compile (which lets go of the GIL), not before it. A writer's first import of the same
    modules waits for it (Python's per-module import lock); a failure surfaces there, in the caller."""
    if not _IMPORTING:
        thread = threading.Thread(target=_import_quietly, name="xla_keras-writers-import", daemon=True)
        _IMPORTING.append(thread)
        thread.start()


def _import_quietly() -> None:
    try:
        _import_writers()
    except Exception:  # noqa: BLE001 - the writer's own import says it, where it is needed
        pass


# An event file is a TFRecord file: each record is its length (uint64, little-endian), the masked CRC-32C of
# the length, the data, the masked CRC-32C of the data. Written here rather than with TensorBoard's
# RecordWriter: importing it imports all of ``tensorboard.summary`` and its TensorFlow stub (90-180 ms, a
# fixed cost of every monitored fit, measured), for these few lines. The same checksums as TensorBoard's
# (``tests/test_tensorboard.py`` reads the files back with TensorBoard's own reader).


def _crc32c_table() -> Tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    crc, table = 0xFFFFFFFF, _CRC32C
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tf_record(data: bytes) -> bytes:
    """One TFRecord: the framing TensorBoard reads event files with."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


class SummaryWriters:
    """One lazily created event-file writer per run (``train``, ``validation``)."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self._writers: Dict[str, Any] = {}

    def _writer(self, run: str) -> Any:
        writer = self._writers.get(run)
        if writer is None:
            path = os.path.join(self.log_dir, run)
            if "://" in path:  # gs://, s3://, hdfs://: TensorBoard's writer, through TensorFlow's filesystems
                from tensorboard.summary.writer.event_file_writer import EventFileWriter

                # flush_secs is a backstop only: the sink flushes itself (see the module's docstring).
                writer = EventFileWriter(path, flush_secs=5)
            else:
                writer = LocalEventFile(path)
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
            self._event(
                run,
                step,
                Summary.Value(
                    tag=tag,
                    metadata=metadata.create_summary_metadata(display_name=tag, description=""),
                    tensor=_string_tensor(markdown.encode("utf-8")),
                ),
            )

    def report_data(self, report_dict: dict, step: int) -> None:
        """The report for the XLA tab, as a summary of our plugin in the ``train`` run."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._event(
            "train",
            step,
            Summary.Value(
                tag=TAG_REPORT_DATA,
                metadata=create_summary_metadata(),
                tensor=_string_tensor(encode_report_data(report_dict)),
            ),
        )

    def layout(self) -> None:
        """The custom-scalars layout with the "XLA" category (written once per writer)."""
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.custom_scalar import metadata

        self._event(
            "train",
            0,
            Summary.Value(
                tag=metadata.CONFIG_SUMMARY_TAG,
                metadata=metadata.create_summary_metadata(),
                tensor=_string_tensor(_layout().SerializeToString()),
            ),
        )

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def write_report_json(log_dir: str, report_dict: dict) -> str:
    """Replace LOG_DIR/xla_report.json atomically (readers never see half a file)."""
    return atomic_write_text(os.path.join(log_dir, REPORT_FILE), json.dumps(report_dict, indent=2, sort_keys=True))


class OutputSink:
    """The gate (log_dir set, chief), the writers, the flush throttle and the report file."""

    def __init__(self, log_dir: Optional[str], clock: Callable[[], float] = time.perf_counter):
        self.log_dir = log_dir
        self.chief = True
        self._clock = clock
        self._writers: Optional[SummaryWriters] = None
        self._last_flush: Optional[float] = None  # never flushed: due
        self._last_report_data: Optional[float] = None

    @property
    def writes(self) -> bool:
        return self._directory() is not None

    def _directory(self) -> Optional[str]:
        """Where this process writes: log_dir on the chief, else None."""
        return self.log_dir if self.chief else None

    def unwritable(self) -> Optional[OSError]:
        """None if log_dir can be written (or nothing is written here); else the error. Called
        before a fit changes anything, so that a bad log_dir fails before the first step."""
        directory = self._directory()
        if directory is None:
            return None
        try:
            os.makedirs(directory, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".xla_keras_write_test.", dir=directory)
            os.close(fd)
            os.unlink(probe)
        except OSError as error:
            return error
        _import_writers_soon()
        return None

    def _out(self) -> Optional[SummaryWriters]:
        directory = self._directory()
        return None if directory is None else self._writers_in(directory)

    def _writers_in(self, directory: str) -> SummaryWriters:
        """The event writers, made (with the custom-scalars layout) at their first use."""
        if self._writers is None:
            self._writers = SummaryWriters(directory)
            self._writers.layout()
        return self._writers

    def scalars(self, scalars: Iterable) -> None:
        writers = self._out()
        if writers is not None:
            for s in scalars:
                writers.scalar(s.phase, s.tag, s.value, s.step)

    def due(self) -> bool:
        """A periodic flush is due (FLUSH_EVERY_SECONDS since the last one)."""
        return self._last_flush is None or self._clock() - self._last_flush > FLUSH_EVERY_SECONDS

    def due_at(self) -> float:
        """When ``due`` turns True, on the sink's clock (-inf: it is due now)."""
        return float("-inf") if self._last_flush is None else self._last_flush + FLUSH_EVERY_SECONDS

    def report_due(self) -> bool:
        """The report file may be replaced again (REPORT_EVERY_SECONDS since the last flush)."""
        return self._last_flush is None or self._clock() - self._last_flush >= REPORT_EVERY_SECONDS

    def flush(self, report: Optional[Callable[[], Any]] = None, text: bool = False, step: int = 0) -> None:
        """Flush the event files; with ``report``, also write the report file (and, with ``text``,
        the markdown report for the Text tab at ``step``)."""
        self._last_flush = self._clock()
        directory = self._directory()
        if report is not None and directory is not None:
            built = report()
            as_dict = built.to_dict()
            if text:
                self._writers_in(directory).text("train", TAG_REPORT, built.to_markdown(), step)
            if (
                text
                or self._last_report_data is None
                or self._last_flush - self._last_report_data >= REPORT_DATA_EVERY_SECONDS
            ):
                self._last_report_data = self._last_flush
                self._writers_in(directory).report_data(as_dict, step)
            write_report_json(directory, as_dict)
        if self._writers is not None:
            self._writers.flush()

    def write_report(self, report: Any) -> None:
        """Only the report file (best effort callers catch)."""
        directory = self._directory()
        if directory is not None:
            write_report_json(directory, report.to_dict())

    def flush_events(self) -> None:
        if self._writers is not None:
            self._writers.flush()

    def close(self) -> None:
        if self._writers is not None:
            self._writers.close()
            self._writers = None
