"""Reading a report of any schema version written so far (``parse_report``). Pure.

Report schema versions (``xla_report.json``, ``XlaReport.to_dict()``; the current one is
``model.SCHEMA_VERSION``):

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
* 7 - ``steady_step_counts``; a fallback's ``xla_steady_steps`` / ``steady_steps_after``; a
  compile's ``estimated_because``; a storm's ``fix_at_storm``; an advice's ``run`` and ``run_index``; a fix's
  ``data`` (what each figure rests on, and what each advice speaks of).
* 8 - ``processes`` (several processes in one distribution, JAX's or MultiWorkerMirroredStrategy's: each one's compile
  counts, compile seconds and steps per phase, gathered at epoch ends and the fit's end).
* 9 - a compile's ``cost`` (``ProgramCost``: FLOPs, bytes accessed, argument / output / alias / temp /
  code bytes, ``peak_bytes``, their source; null: not analysed) and the report's ``costs`` (per phase:
  achieved FLOP/s, bytes/s and MFU at the steady step). Older reports read with no cost.
* 10 - ``step_timing`` (per phase: ``basis`` "per_step" or "between_drains", the steady ``steps`` and
  ``intervals`` it rests on, why it is ``withheld``); a slow step's ``basis`` ("step" or "host"). JAX's
  step times are measured between the device's drains. Older reports read with ``basis`` "per_step"
  (TensorFlow) or "dispatch" (JAX: their step times were dispatch times, not step times), and slow steps
  of basis "step" ("host" on JAX).
* 11 - ``jit_fix``: code that lets XLA compile what it did not (a refusing layer moved into the input
  pipeline); older reports read with null.
* 12 - ``unsupported_ops``: an op XLA could not compile (``on_unsupported``: the ops, their layers, the
  device type, the user's line, what was done, the fix); ``coverage``: auto-clustering's coverage of the
  train step, from the steady trace window (the op time inside XLA's clusters, each op type outside with
  its nodes, layers, time and reason, the advice); a fallback's ``cause`` ("storm", or "unsupported");
  older reports read with null (and a fallback without a cause was a storm's).
* 13 - why each compile happened: a compile's ``cause`` and ``why``, a storm's ``cause``; fix kinds
  "static_value" and "bucket_by_size", a pad fix's ``padding_changes_values`` and ``resize``;
  ``unsupported_ops``' ``kind`` and ``input``; ``waits`` and ``own_seconds``; a slow step's ``where``,
  ``input_seconds`` and ``between_seconds``; ``coverage``'s ``nodes_from``, ``no_advice``, ``advice.effect``
  and ``ops_outside[].nodes_timed``; ``costs``' ``programs``, ``program_steps``, ``steps_ran``, ``time_base``;
  a compile's ``precompiled`` and the report's ``precompile``; a fallback's ``steps_at_switch`` and
  ``steps_after``. Older reports read with null causes and empty
  ``waits`` / ``own_seconds`` / ``precompile``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from xla_keras.report.model import SCHEMA_VERSION, XlaReport

REPORT_FILE = "xla_report.json"


@dataclass(frozen=True)
class ParsedReport:
    """A report read from its JSON form, and what the reader should know about it.

    Args:
        report: the ``XlaReport``.
        schema_version: its schema version as written (1 for files without the key).
        newer: written by a newer xla_keras: keys this one does not know were skipped.
        message: what to tell the user when set (a newer report), else None.
    """

    report: XlaReport
    schema_version: int  # as written (1 for files without the key)
    newer: bool  # written by a newer xla_keras: keys this one does not know were skipped
    message: Optional[str] = None  # say this to the user when set


def parse_report(data: Dict[str, Any]) -> ParsedReport:
    """Read a report dict of any schema version written so far.

    Older versions are migrated (missing keys take their defaults); a newer
    version is read for the keys this version knows, and ``message`` says so.

    Args:
        data: a report dict, as ``json.load`` reads ``xla_report.json`` (or
            ``XlaReport.to_dict()`` gives it).

    Returns:
        A ``ParsedReport``: ``report`` (an ``XlaReport``), ``schema_version``,
            ``newer`` and ``message``.

    Raises:
        ValueError: for something that is not a report at all.

    Example:
        A report of schema 1 (xla_keras 0.1, no ``schema_version`` key):

        ```pycon
        >>> parsed = xla_keras.parse_report({"jit_mode": "on", "jit_active": True, "compilations": []})
        >>> parsed.schema_version, parsed.newer, parsed.message
        (1, False, None)
        >>> parsed.report.jit_active, parsed.report.backend  # a key it lacks takes its default
        (True, 'tensorflow')
        >>> xla_keras.parse_report({"schema_version": 99, "jit_mode": "on"}).newer
        True

        ```
    """
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


# Old JAX reports (schema 9 or older) timed steps start to start under asynchronous dispatch: those
# figures were the time Python took to queue a step. They are read as such, never as step times.
DISPATCH = "dispatch"


def _migrate(data: Dict[str, Any], version: int) -> Dict[str, Any]:
    # 1 -> 9 only added keys and values (defaults fill them in). 10 added how step times were measured.
    if version >= 10:
        return data
    data = dict(data)
    jax = data.get("backend") == "jax"
    counts = data.get("steady_step_counts") or {}
    data["step_timing"] = {
        phase: {
            "basis": DISPATCH if jax else "per_step",
            "steps": counts.get(phase, 0),
            "intervals": 0,
            "withheld": None,
        }
        for phase in (data.get("steady_step_seconds_by_phase") or {})
    }
    if jax:
        data["slow_steps"] = [{**s, "basis": "host"} for s in data.get("slow_steps") or ()]
    return data
