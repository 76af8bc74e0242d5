"""The compile ledger as rows a reader scans: one row per signature's compiles of one call (auto-clustering
compiles one module per cluster for a new signature), or per run of compiles at a known signature with one
cause (a value XLA takes as a constant: one compile per step). Pure, on the records' JSON form, so that the
printed report and the XLA tab group alike.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from xla_keras.core.types import KNOWN_SIGNATURE_CAUSES


def ledger_rows(compilations: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Consecutive compiles of one phase and signature grouped into one row: those of one step (the
    modules of one call), and those at a known signature with the same cause (a value, JAX's context);
    a one-off program's modules (``outside_step``: TensorFlow's variable initialiser) in a row of their own.
    Each row: ``{"phase", "first_step", "last_step", "signature", "compiles", "seconds", "cause", "why",
    "estimated", "cached", "last_batch", "first", "source", "cost", "outside_step", "precompiled"}``
    (``first``: the index of its first record; ``source``: the records' own, or "mixed"; ``cost``: the first
    record's that has one, else None)."""
    rows: List[Dict[str, Any]] = []
    for index, c in enumerate(compilations):
        last = rows[-1] if rows else None
        cause = c.get("cause")
        if (
            last is not None
            and last["phase"] == c.get("phase")
            and last["signature"] == c.get("signature")
            and last["cause"] == cause
            and last["outside_step"] == c.get("outside_step")
            and last["precompiled"] == bool(c.get("precompiled"))
            and (last["last_step"] == c.get("step") or cause in KNOWN_SIGNATURE_CAUSES)
        ):
            last["last_step"] = c.get("step")
            last["compiles"] += 1
            last["seconds"] += c.get("seconds") or 0.0
            last["estimated"] = last["estimated"] or c.get("source") == "timing"
            last["cached"] = last["cached"] if last["cached"] == c.get("cached") else None
            last["last_batch"] = last["last_batch"] or bool(c.get("last_batch"))
            last["source"] = last["source"] if last["source"] == c.get("source") else "mixed"
            last["cost"] = last["cost"] or c.get("cost")
            continue
        rows.append(
            {
                "phase": c.get("phase"),
                "first_step": c.get("step"),
                "last_step": c.get("step"),
                "signature": c.get("signature"),
                "compiles": 1,
                "seconds": c.get("seconds") or 0.0,
                "cause": cause,
                "why": c.get("why"),
                "estimated": c.get("source") == "timing",
                "cached": c.get("cached"),
                "last_batch": bool(c.get("last_batch")),
                "first": index,
                "source": c.get("source"),
                "cost": c.get("cost"),
                "outside_step": c.get("outside_step"),
                "precompiled": bool(c.get("precompiled")),
            }
        )
    return rows


# The one-off programs a compile may belong to instead of the step's (``Compilation.outside_step``), in words.
OUTSIDE_STEP_WORDS = {
    "initialize_variables": "TensorFlow's one-off initialiser of the variables the step created, such as "
    "the optimizer's slots",
}


def program_words(program: Optional[str]) -> str:
    """A one-off program's compiles as a clause for a ledger row ("" for the step's own program)."""
    if not program:
        return ""
    return f"outside the step's program: {OUTSIDE_STEP_WORDS.get(program, program)}"


def steps_words(row: Dict[str, Any]) -> str:
    """``step 3``, ``steps 2-20``, or ``precompiled`` (before step 1: ``XlaMonitor(precompile=...)``)."""
    if row.get("precompiled"):
        return "precompiled"
    first, last = row["first_step"], row["last_step"]
    return f"step {first}" if first == last else f"steps {first}-{last}"


def cause_words(cause: Optional[str], why: Optional[str]) -> str:
    """A compile's cause as a short clause for a ledger row ("" for a new signature: the row shows it)."""
    if cause in (None, "signature"):
        return ""
    if cause == "function":
        return "its step function was rebuilt: a new XLA cache"
    short = (why or "").split(" (your line")[0].split(" is computed")[0].split("; ")[0]
    if cause == "value":
        return f"new values of {short}" if short else "new values of an input XLA takes as a constant"
    if cause == "context":
        return f"JAX's context changed: {short}" if short else "JAX's context changed"
    if cause == "placement":
        return f"placed differently: {short}" if short else "the same shapes, placed differently"
    if cause == "retrace":
        return "the step traced again"
    return short or "at a known signature, cause unknown"
