"""What the monitor writes for TensorBoard and for tools: names, layout, report schema. Pure.

In the spirit of TensorBoard's ``plugins/*/metadata.py``: the writer
(``sink.py``) and every reader (``xla-keras report``, the XLA tab) share these
constants, and ``parse_report`` reads every report version written so far.

Report schema versions (``xla_report.json``, ``XlaReport.to_dict()``):

* 1 - xla_keras 0.1: no ``schema_version`` key; ``source`` is "profiler" or
  "timing"; ``cached`` is a bool.
* 2 - xla_keras 0.2: ``schema_version``; ``source`` may be "op_span" (TensorFlow
  2.16/2.17), ``cached`` may be null (unknown). Keys are only ever added.
* 3 - a compile's ``last_batch`` (it happened on the last step of an epoch or
  of an evaluate / predict run); the report's ``run_state`` ("running",
  "interrupted", "finished"; null before anything ran).
* 4 - ``backend`` ("tensorflow" or "jax"; older reports are TensorFlow's),
  ``other_compilations`` (JAX: executables kept out of the step ledger, as
  totals), ``source`` may be "jax" and ``probe`` "jax.monitoring".
* 5 - ``advice`` (phases over the compile budget, below the storm threshold:
  ``advice.PhaseAdvice``); a storm's ``fix`` gains ``targets``, ``batch_size``,
  ``remainder`` and, for padded inputs, real-length figures
  (``real_lengths``, ``batches_real_padding_overhead``,
  ``real_padding_overhead``, ``bucket_by_length``, ``compute_ratio``,
  ``better_fix``); fix kind "pad_remainder" (validation / predict).
* 6 - ``jit_decision`` (``jit="fastest"``: the mode kept, why, both modes'
  medians and spreads, steps measured per mode, the trial's compile seconds,
  the predicted saving; ``fastest.Decision``); ``jit_mode`` may be "fastest".

The XLA tab reads the report from the event files, not from the loose JSON
file (TensorBoard's data provider serves summaries only): the same dict,
gzip-compressed JSON in a string tensor under ``TAG_REPORT_DATA`` with
``PLUGIN_NAME`` as its plugin, in the ``train`` run. ``PLUGIN_CONTENT`` in
the summary's metadata names the encoding, so the encoding can change later.
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from typing import Any, Dict, Optional

# Runs, as keras.callbacks.TensorBoard names them.
RUNS = {"train": "train", "test": "validation"}
REPORT_FILE = "xla_report.json"

TAG_STEP_TIME = "xla/step_time_ms"
TAG_STEADY_STEP_TIME = "xla/steady_step_time_ms"
TAG_COMPILATIONS = "xla/compilations"
TAG_COMPILE_TIME = "xla/compile_time_ms"
TAG_DISTINCT_SIGNATURES = "xla/distinct_signatures"
TAG_STORM = "xla/storm"
TAG_REPORT = "xla/report"
# The XLA tab (xla_keras.tensorboard): its plugin name, shared by the writer (sink.py) and the
# reader (the tab's backend), and the report it reads.
PLUGIN_NAME = "xla_keras"
TAG_REPORT_DATA = "xla/report_data"
PLUGIN_CONTENT = b'{"encoding": "gzip+json", "version": 1}'
MAX_REPORT_DATA_BYTES = 64 * 1024 * 1024  # a decompressed report larger than this is not ours
SCALAR_TAGS = (
    TAG_STEP_TIME,
    TAG_STEADY_STEP_TIME,
    TAG_COMPILATIONS,
    TAG_COMPILE_TIME,
    TAG_DISTINCT_SIGNATURES,
    TAG_STORM,
)

# The custom-scalars layout: one category, four charts (title, tags).
LAYOUT_CATEGORY = "XLA"
LAYOUT_CHARTS = (
    ("step time vs steady step time (ms)", (TAG_STEP_TIME, TAG_STEADY_STEP_TIME)),
    ("compilations and distinct signatures", (TAG_COMPILATIONS, TAG_DISTINCT_SIGNATURES)),
    ("compile time (ms)", (TAG_COMPILE_TIME,)),
    ("recompilation storms", (TAG_STORM,)),
)

SCHEMA_VERSION = 6


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


@dataclass(frozen=True)
class ParsedReport:
    """A report read from its JSON form, and what the reader should know about it."""

    report: Any  # XlaReport
    schema_version: int  # as written (1 for files without the key)
    newer: bool  # written by a newer xla_keras: keys this one does not know were skipped
    message: Optional[str] = None  # say this to the user when set


def parse_report(data: Dict[str, Any]) -> ParsedReport:
    """Read a report dict of any schema version written so far.

    Older versions are migrated (missing keys take their defaults); a newer
    version is read for the keys this version knows, and ``message`` says so.
    Raises ValueError for something that is not a report at all."""
    from xla_keras.report.model import XlaReport

    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an XlaMonitor report")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"schema_version must be an int >= 1; got {version!r}")
    if "jit_mode" not in data and "compilations" not in data:
        raise ValueError("no jit_mode or compilations key: not an XlaMonitor report")
    report = XlaReport.from_dict(_migrate(data, version))
    if version > SCHEMA_VERSION:
        from xla_keras import __version__

        return ParsedReport(
            report,
            version,
            True,
            f"written by a newer xla_keras (report schema {version}; this is "
            f"xla_keras {__version__}, schema {SCHEMA_VERSION}): only the keys this version knows "
            "are shown",
        )
    return ParsedReport(report, version, False)


def _migrate(data: Dict[str, Any], version: int) -> Dict[str, Any]:
    # 1 -> 2 only added keys and values (defaults fill them in): nothing to rewrite yet.
    return data
