"""What the monitor writes for TensorBoard: run names, the report's tags, the custom-scalars layout and the XLA tab's
report data (plugin name, content version, encoding); the scalars' tags are in ``core/tags.py``. Pure: TensorBoard is
imported inside functions only.

In the spirit of TensorBoard's ``plugins/*/metadata.py``: the writer (``sink.py``) and the readers (the
tab's backend) share these. The tab reads the report from the event files, not from the loose JSON file
(TensorBoard's data provider serves summaries only): the same dict, gzip-compressed JSON in a string
tensor under ``TAG_REPORT_DATA`` with ``PLUGIN_NAME`` as its plugin, in the ``train`` run.
``PLUGIN_CONTENT`` in the summary's metadata names the encoding and its version, so it can change later.
"""

from __future__ import annotations

import gzip
import io
import json
from typing import Any, Dict

from xla_keras.core.tags import (
    TAG_COMPILATIONS,
    TAG_COMPILE_TIME,
    TAG_DISTINCT_SIGNATURES,
    TAG_FLOPS_PER_SECOND,
    TAG_MFU,
    TAG_STEADY_STEP_TIME,
    TAG_STEP_TIME,
    TAG_STORM,
)

# Runs, as keras.callbacks.TensorBoard names them.
RUNS = {"train": "train", "test": "validation"}

TAG_REPORT = "xla/report"

# The custom-scalars layout: one category, five charts (title, tags).
LAYOUT_CATEGORY = "XLA"
LAYOUT_CHARTS = (
    ("step time vs steady step time (ms)", (TAG_STEP_TIME, TAG_STEADY_STEP_TIME)),
    ("compilations and distinct signatures", (TAG_COMPILATIONS, TAG_DISTINCT_SIGNATURES)),
    ("compile time (ms)", (TAG_COMPILE_TIME,)),
    ("recompilation storms", (TAG_STORM,)),
    ("achieved FLOP/s and MFU at the steady step", (TAG_FLOPS_PER_SECOND, TAG_MFU)),
)

# The XLA tab (xla_keras.tensorboard): its plugin name and the report it reads.
PLUGIN_NAME = "xla_keras"
TAG_REPORT_DATA = "xla/report_data"
PLUGIN_CONTENT = b'{"encoding": "gzip+json", "version": 1}'
MAX_REPORT_DATA_BYTES = 64 * 1024 * 1024  # a decompressed report larger than this is not ours


def create_summary_metadata() -> Any:
    """The metadata of the report data summary: our plugin, our content, a tensor."""
    from tensorboard.compat.proto.summary_pb2 import DATA_CLASS_TENSOR, SummaryMetadata

    return SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=PLUGIN_CONTENT),
        data_class=DATA_CLASS_TENSOR,
    )


def content_version(content: bytes) -> int:
    """The version in a report data summary's plugin content (1 when it names none or is unreadable)."""
    try:
        return int(json.loads(content.decode("utf-8")).get("version", 1))
    except (ValueError, AttributeError, UnicodeDecodeError):
        return 1


def encode_report_data(report_dict: Dict[str, Any]) -> bytes:
    """The report dict as the tab's summary holds it (compact JSON, gzip: ~10x smaller)."""
    return gzip.compress(json.dumps(report_dict, separators=(",", ":"), sort_keys=True).encode("utf-8"), 6)


def decode_report_data(data: bytes) -> Dict[str, Any]:
    """Inverse of :func:`encode_report_data`; ValueError for anything that is not one."""
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"report data must be bytes, not {type(data).__name__}")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            raw = f.read(MAX_REPORT_DATA_BYTES + 1)
    except (OSError, EOFError) as error:
        raise ValueError(f"report data is not gzip: {error}") from None
    if len(raw) > MAX_REPORT_DATA_BYTES:
        raise ValueError(f"report data is larger than {MAX_REPORT_DATA_BYTES} bytes decompressed")
    try:
        decoded = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"report data is not JSON: {error}") from None
    if not isinstance(decoded, dict):
        raise ValueError(f"report data is a JSON {type(decoded).__name__}, not a report")
    return decoded
