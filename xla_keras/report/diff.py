"""Two runs side by side: what changed in their compiles, and whether it stays within bounds. Pure.

``diff_reports(baseline, run)`` compares two reports phase by phase: compiles, compile seconds, the
steady step (with the steps it rests on), the signatures compiled in one and not the other, storms,
and the ``jit="fastest"`` decision. ``crossed(diff, bounds)`` says, in one line, which bound a run
crosses. ``render_diff(diff, format)`` writes it as text, markdown (a pull-request comment) or JSON (with
``DIFF_SCHEMA_VERSION``). ``xla-keras diff`` is the command line over these.

A figure of the comparison is a row of ``FIGURES``: a name and how to read it off a report's phase.
A report field added later (the cost card's, say) joins the diff as one more row.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from xla_keras.core.timing import ms_text
from xla_keras.core.types import PHASES
from xla_keras.report.figures import quantity
from xla_keras.report.model import XlaReport
from xla_keras.report.schema import DISPATCH

DIFF_SCHEMA_VERSION = 1
FORMATS = ("text", "markdown", "json")


def _compile_seconds(report: XlaReport, phase: str) -> float:
    return sum(c.seconds for c in report.compilations if c.phase == phase)


# name -> (what it reads off a report for a phase, how it is written)
FIGURES: Dict[str, Tuple[Callable[[XlaReport, str], Any], Callable[[Any], str]]] = {
    "compiles": (lambda r, p: r.compilation_count.get(p, 0), str),
    "compile_seconds": (_compile_seconds, lambda s: ms_text(s)),
    "steady_step_seconds": (
        lambda r, p: r.steady_step_seconds_by_phase.get(p),
        lambda s: "n/a" if s is None else ms_text(s),
    ),
    "steady_steps": (lambda r, p: r.steady_step_counts.get(p, 0), str),
    # How the steady step was measured (schema 10): "per_step", "between_drains", or "dispatch" (a JAX report
    # of schema 9 or older: its figure was a dispatch time, never compared with a step time).
    "step_timing": (lambda r, p: (r.step_timing.get(p) or {}).get("basis"), lambda b: str(b)),
    "steady_withheld": (lambda r, p: (r.step_timing.get(p) or {}).get("withheld"), lambda w: str(w or "")),
    "storms": (lambda r, p: sum(1 for s in r.storms if s.phase == p), str),
    # The cost card (schema 9): None for older reports and unanalysed phases.
    "flops_per_step": (lambda r, p: r.costs.get(p, {}).get("flops_per_step"), lambda v: quantity(v, "FLOP")),
    "flops_per_second": (lambda r, p: r.costs.get(p, {}).get("flops_per_second"), lambda v: quantity(v, "FLOP/s")),
    "peak_bytes": (lambda r, p: r.costs.get(p, {}).get("peak_bytes"), lambda v: quantity(v, "B")),
}


def _signatures(report: XlaReport, phase: str) -> List[str]:
    from xla_keras.core.signatures import describe

    seen: List[str] = []
    for c in report.compilations:
        if c.phase == phase and describe(c.signature) not in seen:
            seen.append(describe(c.signature))
    return seen


@dataclass
class PhaseDiff:
    phase: str
    baseline: Dict[str, Any]
    run: Dict[str, Any]
    added: List[str] = field(default_factory=list)  # signatures the run compiled and the baseline did not
    removed: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "phase": self.phase,
            "baseline": self.baseline,
            "run": self.run,
            "signatures_added": self.added,
            "signatures_removed": self.removed,
        }


@dataclass
class ReportDiff:
    phases: List[PhaseDiff]
    jit_decision: Dict[str, Optional[str]]  # {"baseline": "on (measured)", "run": ...}
    capped: bool = False  # a report kept only part of its compile records: signatures may be missing
    crossed: Optional[str] = None  # set by ``check``: the bounds crossed, in one line
    not_compared: List[str] = field(default_factory=list)  # figures left out, and why, in words

    def phase(self, name: str) -> Optional[PhaseDiff]:
        return next((p for p in self.phases if p.phase == name), None)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "diff_schema_version": DIFF_SCHEMA_VERSION,
            "phases": [p.to_dict() for p in self.phases],
            "jit_decision": dict(self.jit_decision),
            "signature_records_capped": self.capped,
            "crossed": self.crossed,
            "not_compared": list(self.not_compared),
        }


def _decision(report: XlaReport) -> Optional[str]:
    d = report.jit_decision
    return None if not d else f"{d.get('mode') or 'measuring'} ({d.get('basis')})"


def diff_reports(baseline: XlaReport, run: XlaReport) -> ReportDiff:
    """The phases either report ran, compared."""
    phases = []
    for phase in PHASES:
        if not (baseline.steps.get(phase) or run.steps.get(phase)):
            continue
        before, after = _signatures(baseline, phase), _signatures(run, phase)
        phases.append(
            PhaseDiff(
                phase,
                {name: read(baseline, phase) for name, (read, _) in FIGURES.items()},
                {name: read(run, phase) for name, (read, _) in FIGURES.items()},
                [s for s in after if s not in before],
                [s for s in before if s not in after],
            )
        )
    capped = bool(baseline.compilations_dropped or run.compilations_dropped)
    diff = ReportDiff(phases, {"baseline": _decision(baseline), "run": _decision(run)}, capped)
    for p in phases:
        sides = [name for name, side in (("the baseline", p.baseline), ("the run", p.run)) if _dispatch_timed(side)]
        if sides:
            diff.not_compared.append(
                f"{p.phase} steady step: {' and '.join(sides)} timed it as JAX dispatched it (a report of xla_keras "
                "before 0.4): a dispatch time, not a step time"
            )
    return diff


def _dispatch_timed(side: Dict[str, Any]) -> bool:
    return side.get("step_timing") == DISPATCH


def _steady_comparable(p: PhaseDiff) -> bool:
    return not (_dispatch_timed(p.baseline) or _dispatch_timed(p.run))


@dataclass(frozen=True)
class Bounds:
    """What a run may not exceed against its baseline; None: not checked."""

    max_compiles: Dict[str, int] = field(default_factory=dict)  # phase -> the run's compiles at most
    max_compile_seconds_ratio: Optional[float] = None  # run / baseline, all phases
    max_steady_ratio: Optional[float] = None  # run / baseline, per phase where both measured it

    def __post_init__(self) -> None:
        for phase, count in self.max_compiles.items():
            if phase not in PHASES:
                raise ValueError(f"max compiles: phase must be one of {', '.join(PHASES)}; got {phase!r}")
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"max compiles for {phase}: a count >= 0; got {count!r}")
        for name in ("max_compile_seconds_ratio", "max_steady_ratio"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name.replace('_', ' ')}: a finite number > 0; got {value!r}")


def check(diff: ReportDiff, bounds: Bounds) -> Optional[str]:
    """The bounds the run crosses, in one line (also kept in ``diff.crossed``), or None."""
    reasons = []
    for phase, most in bounds.max_compiles.items():
        ran = diff.phase(phase)
        got = ran.run["compiles"] if ran is not None else 0
        if got > most:
            reasons.append(f"{phase} compiled {got} times (at most {most})")
    if bounds.max_compile_seconds_ratio is not None:
        before = sum(p.baseline["compile_seconds"] for p in diff.phases)
        after = sum(p.run["compile_seconds"] for p in diff.phases)
        if after > 0 and (before == 0 or after / before > bounds.max_compile_seconds_ratio):
            ratio = "the baseline compiled nothing" if before == 0 else f"{after / before:.2f}x the baseline"
            reasons.append(f"compile time {ms_text(after)}, {ratio} (at most {bounds.max_compile_seconds_ratio}x)")
    if bounds.max_steady_ratio is not None:
        for p in diff.phases:
            before, after = p.baseline["steady_step_seconds"], p.run["steady_step_seconds"]
            if before and after and _steady_comparable(p) and after / before > bounds.max_steady_ratio:
                reasons.append(
                    f"{p.phase} steady step {ms_text(after)}, {after / before:.2f}x the baseline "
                    f"(at most {bounds.max_steady_ratio}x)"
                )
    diff.crossed = "; ".join(reasons) or None
    return diff.crossed


def _cell(name: str, before: Any, after: Any) -> str:
    write = FIGURES[name][1]
    if before == after:
        return write(after)
    return f"{write(before)} -> {write(after)}"


def _steady_cell(p: PhaseDiff) -> str:
    """The steady step's cell: "withheld" where a side could not know it yet (schema 10)."""
    if not _steady_comparable(p):
        return "not compared: a dispatch time"

    def side(figures: Dict[str, Any]) -> str:
        if figures["steady_step_seconds"] is None and figures.get("steady_withheld"):
            return "withheld"
        return FIGURES["steady_step_seconds"][1](figures["steady_step_seconds"])

    before, after = side(p.baseline), side(p.run)
    return after if before == after else f"{before} -> {after}"


def _rows(diff: ReportDiff) -> List[List[str]]:
    rows = []
    for p in diff.phases:
        steady = _steady_cell(p)
        rows.append(
            [
                p.phase,
                _cell("compiles", p.baseline["compiles"], p.run["compiles"]),
                _cell("compile_seconds", p.baseline["compile_seconds"], p.run["compile_seconds"]),
                f"{steady} ({_cell('steady_steps', p.baseline['steady_steps'], p.run['steady_steps'])} steps)",
                f"+{len(p.added)} -{len(p.removed)}",
                _cell("storms", p.baseline["storms"], p.run["storms"]),
            ]
        )
    return rows


HEAD = ["phase", "compiles", "compile time", "steady step", "signatures", "storms"]


def _verdict(diff: ReportDiff) -> str:
    return f"bounds crossed: {diff.crossed}" if diff.crossed else "within bounds"


def render_diff(diff: ReportDiff, fmt: str = "text", names: Tuple[str, str] = ("baseline", "run")) -> str:
    """The diff as ``fmt``: one of ``FORMATS``."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if fmt == "json":
        return json.dumps({**diff.to_dict(), "baseline": names[0], "run": names[1]}, indent=2, sort_keys=True)
    rows, lines = _rows(diff), []
    decision = diff.jit_decision
    if fmt == "markdown":
        lines += [f"**XLA compiles: `{names[1]}` against `{names[0]}`**", ""]
        lines += ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        for p in diff.phases:
            lines += [f"- {p.phase}: new signature `{s}`" for s in p.added]
            lines += [f"- {p.phase}: gone `{s}`" for s in p.removed]
        if decision["baseline"] or decision["run"]:
            lines.append(f"- jit='fastest' decision: {decision['baseline']} -> {decision['run']}")
        lines += ["", f"**{_verdict(diff)}**"]
    else:
        widths = [max(len(r[i]) for r in [HEAD, *rows]) for i in range(len(HEAD))]
        lines.append(f"xla-keras diff: {names[1]} against {names[0]}")
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [HEAD, *rows]]
        for p in diff.phases:
            lines += [f"  {p.phase}: + {s}" for s in p.added] + [f"  {p.phase}: - {s}" for s in p.removed]
        if decision["baseline"] or decision["run"]:
            lines.append(f"  jit='fastest' decision: {decision['baseline']} -> {decision['run']}")
        lines.append(f"  {_verdict(diff)}")
    for words in diff.not_compared:
        lines.append(f"- not compared: {words}" if fmt == "markdown" else f"  not compared: {words}")
    if diff.capped:
        lines.append("(a report kept only part of its compile records: some signatures may be missing)")
    return "\n".join(lines)
