"""What the XLA tab shows, computed from a report dict. Pure: no TensorBoard, no TensorFlow.

The tab's backend (``plugin.py``) reads reports through TensorBoard's data
provider and hands them here; the ES module only lays out what these functions
return, so every number the tab shows is computed (and tested) in Python, from
the same dict as ``xla_report.json``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from xla_keras.core.plain_data import number_fields
from xla_keras.core.signatures import AxisChange, describe, diff, from_jsonable
from xla_keras.core.types import PHASES
from xla_keras.report.figures import (
    break_even_words,
    compile_time_words,
    cost_words,
    fallback_cost,
    op_by_op_words,
    precompile_words,
    processes_words,
    steady_words,
)
from xla_keras.report.ledger_rows import cause_words, ledger_rows, program_words, steps_words
from xla_keras.report.model import Compilation, XlaReport
from xla_keras.report.schema import ParsedReport, parse_report
from xla_keras.storms.budget import PhaseAdvice
from xla_keras.storms.detection import Storm
from xla_keras.storms.fixes import cause_clause, fix_from_dict
from xla_keras.tensorboard.metadata import RUNS

# TensorBoard run names the monitor writes under its log_dir, and the tab's run.
TRAIN_RUN, VALIDATION_RUN = RUNS["train"], RUNS["test"]
ROOT_RUN = "."  # the monitor's log_dir is TensorBoard's logdir itself


def tab_run(tensorboard_run: str) -> Optional[str]:
    """The monitor's log dir (the tab's run) of a TensorBoard run, or None if it is not one of ours:
    ``"fit1/train"`` -> ``"fit1"``, ``"train"`` -> ``"."``."""
    head, _, leaf = tensorboard_run.rpartition("/")
    if leaf not in (TRAIN_RUN, VALIDATION_RUN):
        return None
    return head or ROOT_RUN


def tensorboard_run(run: str, leaf: str = TRAIN_RUN) -> str:
    return leaf if run == ROOT_RUN else f"{run}/{leaf}"


# ------------------------------------------------------------------ the ledger


def change_text(old: Optional[list], new: list, last_batch: bool = False) -> str:
    """What changed from the previous distinct signature of the phase, in words:
    ``"x axis 1: 84 → 90"``, ``"batch 64 → 16 (last batch)"``, ``"first signature"``."""
    if old is None:
        return "first signature"
    changes = diff(from_jsonable(old), from_jsonable(new))
    if not changes:
        return "no shape change"
    batch = _batch_change(changes, new)
    if batch is not None:
        return f"batch {_dim(batch.old)} → {_dim(batch.new)}" + (" (last batch)" if last_batch else "")
    return "; ".join(_one_change(c) for c in changes)


def _batch_change(changes: Sequence[AxisChange], new: list) -> Optional[AxisChange]:
    """Every input changed its axis 0 the same way, and nothing else changed: the batch size."""
    ranked = [leaf for leaf in new if leaf["shape"]]
    if not changes or len(changes) != len(ranked):
        return None
    first = changes[0]
    same = all(c.axis == 0 and (c.old, c.new) == (first.old, first.new) for c in changes)
    return first if same else None


def _one_change(change: AxisChange) -> str:
    if change.axis is None:
        if change.old is None:
            return f"{change.new} added"
        if change.new is None:
            return f"{change.old} removed"
        return f"{change.old} → {change.new}"
    return f"{change.path} axis {change.axis}: {_dim(change.old)} → {_dim(change.new)}"


def _dim(size: Any) -> str:
    return "?" if size is None else str(size)


def ledger(compilations: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per group of compiles, in the order they happened, grouped as the printed report groups them
    (``report/ledger_rows.py``: a signature's modules of one call, as auto-clustering compiles one per
    cluster; a run of compiles at a known signature with one cause; a one-off program's modules), each with
    its count of modules, its cause in words, and what changed since the previous *distinct* signature of
    its phase (a one-off program's row leaves that to the step's rows)."""
    previous: Dict[str, list] = {}
    out = []
    for index, row in enumerate(ledger_rows(compilations)):
        phase, signature = row["phase"], row["signature"] or []
        before = previous.get(str(phase))
        if before is not None and before == signature:
            changed = "same signature"
        else:
            changed = change_text(before, signature, row["last_batch"])
            if not row["outside_step"]:
                previous[str(phase)] = signature
        modules = row["compiles"]
        out.append(
            {
                "index": index + 1,
                "phase": phase,
                "step": row["first_step"],
                "last_step": row["last_step"],
                "steps": steps_words(row),
                "modules": modules,
                "modules_words": f"{modules} module{'s' * (modules != 1)}",
                "cause": program_words(row["outside_step"]) or cause_words(row["cause"], row["why"]),
                "outside_step": row["outside_step"],
                "precompiled": row["precompiled"],
                "seconds": row["seconds"],
                "source": row["source"],
                "cached": row["cached"],
                "last_batch": row["last_batch"],
                "signature": describe(from_jsonable(signature)),
                "changed": changed,
                "first_record": row["first"] + 1,
                **_cost_cells(row["cost"]),
            }
        )
    return out


def _cost_cells(cost: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The cost card's ledger columns: FLOPs and peak memory (null: unavailable, and why)."""
    cost = cost or {}
    why = cost.get("unavailable") or ("" if cost else "not analysed")
    return {"flops": cost.get("flops"), "peak_bytes": cost.get("peak_bytes"), "cost_note": why}


# ------------------------------------------------------------------ the rest of a run


def status(report: Dict[str, Any]) -> Dict[str, Any]:
    """The status strip: jit requested / active / why, compiles, seconds, steady step, break-even;
    the figures in words as the summary says them (each with the steps it rests on)."""
    counts = report.get("compilation_count") or {}
    said = parse_report(report).report  # migrated: an older JAX report's step times say what they were
    fallback = report.get("fallback")
    train_timing = said.step_timing.get("train") or {}
    return {
        # The steady step's card: withheld (no number, the reason beside it), or a dispatch time of an old
        # JAX report, never shown as a step time.
        "steady_withheld": train_timing.get("withheld"),
        "steady_basis": train_timing.get("basis"),
        "compile_time_words": "".join(compile_time_words(said)),
        "steady_words": {p: steady_words(said, p) for p in PHASES if steady_words(said, p)},
        "break_even_words": break_even_words(said),
        "cost_words": cost_words(said) or "",
        "fallback_words": "; ".join(w for w in (fallback_cost(fallback), op_by_op_words(said)) if w)
        if fallback
        else "",
        "jit_mode": report.get("jit_mode"),
        "jit_active": report.get("jit_active"),
        "jit_reason": report.get("jit_reason", ""),
        "jit_fix": report.get("jit_fix"),
        "unsupported_ops": report.get("unsupported_ops"),
        "coverage": report.get("coverage"),
        "compilation_count": {p: counts.get(p, 0) for p in PHASES},
        "total_compilations": sum(counts.get(p, 0) for p in PHASES),
        "compilations_listed": len(report.get("compilations") or []),
        "compilations_dropped": report.get("compilations_dropped", 0),
        "distinct_signatures": report.get("distinct_signatures") or {},
        "steps": report.get("steps") or {},
        "compile_seconds": report.get("compile_seconds"),
        "wall_seconds": report.get("wall_seconds"),
        "compile_share": report.get("compile_share"),
        "steady_step_seconds": report.get("steady_step_seconds"),
        "steady_step_seconds_by_phase": report.get("steady_step_seconds_by_phase") or {},
        "break_even_steps": report.get("break_even_steps"),
        "cache_saved_seconds": report.get("cache_saved_seconds"),
        "probe": report.get("probe"),
        "storms": len(report.get("storms") or []),
        "advice": len(report.get("advice") or []),
        "fallback": report.get("fallback"),
        "versions": report.get("versions") or {},
        "run_state": report.get("run_state"),
        "backend": report.get("backend") or "tensorflow",
        "other_compilations": report.get("other_compilations") or {},
        "outside_step_compilations": report.get("outside_step_compilations") or {},
        "processes_words": processes_words(said) or "",
        "precompile_words": precompile_words(said) or "",
    }


def storms(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A card per storm: the advice, the numbers, the fix and its code."""
    return [
        {
            "step": s.get("step"),
            "window_start": s.get("window_start"),
            "count": s.get("count"),
            "compiles": s.get("compiles"),
            "compile_seconds": s.get("compile_seconds"),
            "steady_step_seconds": s.get("steady_step_seconds"),
            "action": s.get("action"),
            **_advised(s),
        }
        for s in report.get("storms") or []
    ]


def _advised(item: Dict[str, Any]) -> Dict[str, Any]:
    """What storm and budget cards share: the phase, the cause in one clause, the advice, what varies
    and the fix."""
    fix = item.get("fix") or {}
    return {
        "phase": item.get("phase"),
        "cause": cause_clause(item.get("varying") or [], fix_from_dict(fix)),
        "advice": item.get("advice", ""),
        "varying": item.get("varying") or [],
        "fix_kind": fix.get("kind"),
        "fix_code": fix.get("code"),
        "fix": fix,
        "real": real_padding(fix),
    }


def real_padding(fix: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The fix's real-length figures, for a table: padding against real tokens as fed, after the
    pad fix and after bucketing, which saves more, and why nothing was measured when it was not."""
    real = fix.get("real_lengths")
    if not isinstance(real, dict):
        return None
    if not real.get("measured"):
        return {"measured": False, "reason": real.get("reason", "")}
    bucket = fix.get("bucket_by_length") or {}
    return {
        "measured": True,
        "path": real.get("path"),
        "sampled_batches": real.get("sampled_batches"),
        "batches_seen": real.get("batches_seen"),
        "mean": real.get("mean"),
        "rows": [
            {"fix": "as fed", "lengths": None, "compiles": None, "overhead": fix.get("batches_real_padding_overhead")},
            {
                "fix": "pad_to_lengths",
                "lengths": fix.get("lengths"),
                "compiles": fix.get("compiles"),
                "overhead": fix.get("real_padding_overhead"),
            },
        ]
        + (
            [
                {
                    "fix": "bucket_by_length",
                    "lengths": bucket.get("lengths"),
                    "compiles": bucket.get("compiles"),
                    "overhead": bucket.get("real_padding_overhead"),
                }
            ]
            if bucket
            else []
        ),
        "better_fix": fix.get("better_fix"),
        "compute_ratio": fix.get("compute_ratio"),
        "bucket_code": bucket.get("code"),
    }


def budget_advice(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A card per phase over the compile budget (below the storm threshold): advice and fix."""
    return [
        {
            "compiles": a.get("compiles"),
            "compile_seconds": a.get("compile_seconds"),
            "recompile_seconds": a.get("recompile_seconds"),
            "wall_seconds": a.get("wall_seconds"),
            "share": a.get("share"),
            "budget": a.get("budget"),
            **_advised(a),
        }
        for a in report.get("advice") or []
    ]


def jit_decision_card(report: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """jit='fastest': the mode kept and why, and a row per mode (median, spread, steps measured)."""
    decision = report.get("jit_decision")
    if not isinstance(decision, dict):
        return None
    medians, spreads = decision.get("medians") or {}, decision.get("spreads") or {}
    steps, blocks = decision.get("steps_measured") or {}, decision.get("blocks") or {}
    first = decision.get("first_call_seconds") or {}
    return {
        "mode": decision.get("mode"),
        "basis": decision.get("basis"),
        "why": decision.get("why", ""),
        "default": decision.get("default"),
        "rows": [
            {
                "mode": m,
                "median": medians.get(m),
                "spread": spreads.get(m),
                "steps": steps.get(m, 0),
                "blocks": blocks.get(m, 0),
                "first_call": first.get(m),
                "kept": decision.get("mode") == m,
            }
            for m in ("on", "off")
        ],
        "ratio": decision.get("ratio"),
        "trial_compile_seconds": decision.get("trial_compile_seconds"),
        "predicted_saving_seconds": decision.get("predicted_saving_seconds"),
        "steps_left": decision.get("steps_left"),
        "decided_at_step": decision.get("decided_at_step"),
        "switches": decision.get("switches"),
        "expected_compiles": decision.get("expected_compiles"),
        "revised_at_step": decision.get("revised_at_step"),
    }


def traces(report: Dict[str, Any], run: str) -> List[Dict[str, Any]]:
    """Each trace window and the run name the Profile tab lists it under (``<run>/train/<session>``)."""
    out = []
    for entry in report.get("traces") or []:
        kind, _, path = str(entry).partition(": ")
        session = os.path.basename(path.rstrip("/\\")) if path else ""
        out.append(
            {"kind": kind, "session": session, "profile_run": f"{tensorboard_run(run)}/{session}" if session else None}
        )
    return out


def summary_row(run: str, report: Dict[str, Any]) -> Dict[str, Any]:
    """One row of the compare view (several runs side by side, e.g. compare()'s three modes)."""
    s = status(report)
    return {
        "run": run,
        "jit_mode": s["jit_mode"],
        "jit_active": s["jit_active"],
        "compilation_count": s["compilation_count"],
        "total_compilations": s["total_compilations"],
        "compile_seconds": s["compile_seconds"],
        "wall_seconds": s["wall_seconds"],
        "steady_step_seconds": s["steady_step_seconds"],
        "steady_withheld": s["steady_withheld"],
        "steady_basis": s["steady_basis"],
        "storms": s["storms"],
        "break_even_steps": s["break_even_steps"],
        "run_state": report.get("run_state"),
    }


def parse_checked(report: Any) -> ParsedReport:
    """The report parsed, if the tab can show it; else ValueError saying what is wrong with it (a report
    written by hand, or damaged: the tab says so instead of failing). The tab parses each report once."""
    try:
        parsed = parse_report(report)
    except (TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"the report is malformed: {error}") from None
    _numbers(report, XlaReport, "")
    for key, record in (("compilations", Compilation), ("storms", Storm), ("advice", PhaseAdvice)):
        for i, item in enumerate(report.get(key) or []):
            _numbers(item, record, f"{key}[{i}].")
    decision = report.get("jit_decision")
    if decision is not None:
        if not isinstance(decision, dict):
            raise ValueError(f"the report is malformed: jit_decision is {decision!r}, not an object")
        for key in ("trial_compile_seconds", "predicted_saving_seconds", "decided_at_step", "steps_left"):
            _number(decision.get(key), f"jit_decision.{key}")
        for key in ("medians", "spreads"):
            for mode, value in (decision.get(key) or {}).items():
                _number(value, f"jit_decision.{key}[{mode!r}]")
    return parsed


def _numbers(data: Dict[str, Any], record: Any, where: str) -> None:
    """Each number field of the dataclass ``record`` in ``data`` is a number (its fields say which)."""
    for name, optional, keyed in number_fields(record):
        if keyed:
            for key, value in (data.get(name) or {}).items():
                _number(value, f"{where}{name}[{key!r}]", none=optional)
        else:
            _number(data.get(name), f"{where}{name}", none=optional)


def _number(value: Any, name: str, none: bool = True) -> None:
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"the report is malformed: {name} is {value!r}, not a number")


def state_message(report: Dict[str, Any], written: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """What the reader should know about how complete the run's data is."""
    state = report.get("run_state")
    step = (written or {}).get("step")
    at = f" (at train step {step})" if step is not None else ""
    if state == "running":
        return (
            f"This report was written while the fit was running{at}. If it is not running any more, it was "
            "killed before its next flush (or its last events were not fully written): what is shown is what "
            "it had logged by then."
        )
    if state == "interrupted":
        stopped = next((n for n in report.get("notes") or [] if "stopped early" in n), None)
        return "Interrupted: " + (stopped or "the last call stopped early; the report holds what ran before.")
    return None


def against_baseline(rows: List[Dict[str, Any]], baseline: str, report: Dict[str, Any]) -> Dict[str, Any]:
    """A run's ledger (``rows``) against a baseline run's report: the run's compiles whose (phase,
    signature) the baseline never compiled (their ledger indexes), and the baseline's the run never did."""
    theirs = [(r["phase"], r["signature"]) for r in ledger(report.get("compilations") or [])]
    ours = {(r["phase"], r["signature"]) for r in rows}
    gone: List[Dict[str, Any]] = []
    for phase, signature in theirs:  # in the baseline's order, each once
        if (phase, signature) not in ours and {"phase": phase, "signature": signature} not in gone:
            gone.append({"phase": phase, "signature": signature})
    known = set(theirs)
    return {
        "run": baseline,
        "new": [r["index"] for r in rows if (r["phase"], r["signature"]) not in known],
        "gone": gone,
    }


def run_view(
    run: str,
    report: Dict[str, Any],
    written: Optional[Dict[str, Any]] = None,
    parsed: Optional[ParsedReport] = None,
) -> Dict[str, Any]:
    """Everything the tab shows for one run. ``messages`` say what the reader should know about the
    data itself (still running or interrupted, written by a newer xla_keras, records capped).
    ``parsed``: the report as :func:`parse_checked` read it, when the caller has it already."""
    if parsed is None:
        parsed = parse_checked(report)  # ValueError for something that is not a report
    messages = [parsed.message] if parsed.message else []
    state = state_message(report, written)
    if state:
        messages.append(state)
    dropped = report.get("compilations_dropped") or 0
    if dropped:
        messages.append(
            f"{dropped} more compiles happened than the report lists (max_records): counts and "
            "seconds include them, the ledger and the timeline show the first "
            f"{len(report.get('compilations') or [])}"
        )
    return {
        "run": run,
        "status": status(report),
        "ledger": ledger(report.get("compilations") or []),
        "storms": storms(report),
        "advice": budget_advice(report),
        "jit_decision": jit_decision_card(report),
        "traces": traces(report, run),
        "notes": list(report.get("notes") or []),
        "messages": messages,
        "written": written,
    }
