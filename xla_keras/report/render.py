"""The report in words: the summary ``str(report)`` prints and the markdown of TensorBoard's Text tab. Pure."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from xla_keras.core.messages import WIDTH
from xla_keras.core.signatures import describe
from xla_keras.core.types import PHASES
from xla_keras.report.units import ms_text
from xla_keras.storms.detection import cause_clause, fix_line, storm_cause

if TYPE_CHECKING:
    from xla_keras.report.model import XlaReport


def _active_word(active: Optional[bool]) -> str:
    return {True: "yes", False: "NO", None: "unknown"}[active]


def render(report: XlaReport, full: bool = False) -> str:
    """The human summary printed at the end of a fit (``str(report)``), in 100 columns: each storm
    and advice as its headline and its fix, each note in at most 2 lines. ``full=True``
    (``report.details()``, ``xla-keras report --full``) keeps every advice and note whole."""
    phases = [p for p in PHASES if report.steps.get(p)]
    by_phase: Dict[str, float] = {}
    sources = set()
    for c in report.compilations:
        by_phase[c.phase] = by_phase.get(c.phase, 0.0) + c.seconds
        sources.add(c.source)
    lines = ["XLA report (xla_keras)"]
    lines.append(f"  jit requested   : {report.jit_mode}    XLA active: {_active_word(report.jit_active)}")
    if report.jit_reason:
        lines.append(f"  why             : {report.jit_reason}")
    compiles = (
        ", ".join(
            f"{p} {report.compilation_count.get(p, 0)}" + (f" ({ms_text(by_phase[p])})" if p in by_phase else "")
            for p in phases
        )
        or "none"
    )
    how = f"  [measured by {'/'.join(sorted(sources))}]" if sources else ""
    lines.append(f"  compiles        : {compiles}{how}")
    lines.append(
        "  signatures      : " + (", ".join(f"{p} {report.distinct_signatures.get(p, 0)}" for p in phases) or "none")
    )
    lines.append(
        f"  compile time    : {ms_text(report.compile_seconds)}"
        + (
            f" = {report.compile_share:.0%} of {ms_text(report.wall_seconds)} monitored"
            if report.compile_share is not None
            else ""
        )
    )
    lines.append(
        "  steady step     : "
        + (", ".join(f"{p} {ms_text(report.steady_step_seconds_by_phase.get(p))}" for p in phases) or "n/a")
    )
    cached = sum(1 for c in report.compilations if c.cached)
    if cached:
        lines.append(
            f"  persistent cache: {cached} of the compiles were loads from the cache"
            + (f", {ms_text(report.cache_saved_seconds)} saved" if report.cache_saved_seconds is not None else "")
        )
    for line in _other_compile_lines(report):
        lines.append(f"  other compiles  : {line}")
    if report.break_even_steps is not None:
        lines.append(f"  break-even      : {report.break_even_steps:.0f} steps")
    elif _measured_both(report):
        lines.append(f"  break-even      : {_no_break_even(report)}")
    if report.slow_step_count:
        worst = max(report.slow_steps, key=lambda s: s.seconds, default=None)
        lines.append(
            f"  slow steps      : {report.slow_step_count} known-signature steps far above the "
            f"steady median" + (f" (worst: {worst.phase} step {worst.step}, {ms_text(worst.seconds)})" if worst else "")
        )
    trimmed = False
    for i, storm in enumerate(report.storms):
        head = f"  STORM ({storm.phase}, step {storm.step}, {storm.action}): "
        if full:
            lines.append(head + storm.advice)
        else:
            lines.append(f"{head}{storm.count} new input shapes; {storm_cause(storm)}")
            lines.append(f"      fix: {fix_line(storm.fix, f'report.storms[{i}].fix')}")
            trimmed = True
    for i, item in enumerate(report.advice):
        if full:
            lines.append(f"  ADVICE ({item.phase}): {item.advice}")
        else:
            lines.append(
                f"  ADVICE ({item.phase}): {item.compiles} compiles; those beyond the first took "
                f"{ms_text(item.recompile_seconds)} = {item.share:.0%} of the phase (budget {item.budget:.0%}); "
                f"{cause_clause(item.varying, item.fix)}"
            )
            lines.append(f"      fix: {fix_line(item.fix, f'report.advice[{i}].fix')}")
            trimmed = True
    for line in decision_lines(report.jit_decision):
        lines.append(f"  fastest         : {line}")
    if report.fallback:
        lines.append(f"  fallback        : {report.fallback['reason']}")
        cost = fallback_cost(report.fallback)
        if cost:
            lines.append(f"  without XLA     : {cost}")
    if report.compilations:
        lines.append("  compiled for    :")
        shown = report.compilations[:8]
        for c in shown:
            lines.append(
                f"    {c.phase} step {c.step}: {describe(c.signature)}  {ms_text(c.seconds)}"
                + (" (estimated from step time)" if c.source == "timing" else "")
                + (" (loaded from the persistent cache)" if c.cached else "")
            )
        rest = report.total_compilations - len(shown)
        if rest > 0:
            lines.append(f"    ... {rest} more")
    if report.traces:
        lines.append(
            f"  profiler traces : {len(report.traces)} for the Profile tab "
            f"({', '.join(t.split(':')[0] for t in report.traces)})"
        )
    for note in report.notes:
        said = _wrap(f"  note: {note}")
        trimmed = trimmed or (not full and len(said) > 2)
        lines.extend(said if full or len(said) <= 2 else [said[0], said[1][: WIDTH - 2] + " …"])
    if trimmed:
        where = f", xla-keras report --full {report.log_dir}" if report.log_dir else ""
        lines.append(f"  details         : report.details(){where}")
    if report.log_dir:
        lines.append(f"  logs            : tensorboard --logdir {report.log_dir}")
    return "\n".join(wrapped for line in lines for wrapped in _wrap(line))


_LABEL = re.compile(r"^  [a-z][a-z -]{15}: ")  # "  compile time    : ...": continued under the value


def _wrap(line: str) -> List[str]:
    """One line of the summary in 100 columns, continued under its value (or 6 spaces in)."""
    if len(line) <= WIDTH:
        return [line]
    label = _LABEL.match(line)
    indent = " " * (len(label.group(0)) if label else 6)
    return textwrap.wrap(line, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def fallback_cost(fallback: Dict[str, Any]) -> Optional[str]:
    """What running without XLA cost after a storm fallback, measured: the phase's steady step
    after the switch against its steady XLA step before it."""
    before = fallback.get("xla_steady_step_seconds") or {}
    after = fallback.get("steady_step_seconds_after") or {}
    parts = []
    for phase in PHASES:
        new, old = after.get(phase), before.get(phase)
        if new is None:
            continue
        if old:
            parts.append(
                f"{phase} steady step {ms_text(new)} vs {ms_text(old)} with XLA before the switch ({new / old:.1f}x)"
            )
        else:
            parts.append(
                f"{phase} steady step {ms_text(new)} (no steady XLA step was measured before the switch: "
                "every XLA step had compiled)"
            )
    return "; ".join(parts) or None


def _measured_both(report: XlaReport) -> bool:
    medians = (report.jit_decision or {}).get("medians") or {}
    return medians.get("on") is not None and medians.get("off") is not None


def _no_break_even(report: XlaReport) -> str:
    if _measured_both(report):
        return "never: XLA's steady steps were not faster than without it (jit='fastest' measured both)"
    return "unknown (no non-XLA baseline measured)"


def decision_lines(decision: Optional[Dict[str, Any]]) -> List[str]:
    """jit='fastest' in a few lines: the mode kept and why, then the evidence."""
    if not decision:
        return []
    medians, spreads = decision.get("medians") or {}, decision.get("spreads") or {}
    steps = decision.get("steps_measured") or {}
    kept = decision.get("mode")
    lines = [f"XLA {kept.upper()} kept ({decision.get('basis')})" if kept else "measuring (no decision yet)"]
    measured = [
        f"XLA {m}: median {ms_text(medians.get(m))} (IQR {ms_text(spreads.get(m))}) over {steps.get(m, 0)} steps"
        for m in ("on", "off")
        if medians.get(m) is not None
    ]
    if measured:
        lines.append("; ".join(measured))
    cost = [f"trial compiles {ms_text(decision.get('trial_compile_seconds') or 0.0)}"]
    saving = decision.get("predicted_saving_seconds")
    if saving is not None:
        cost.append(f"predicted saving {ms_text(saving)} over the {decision.get('steps_left')} steps left")
    if decision.get("switches"):
        cost.append(f"{decision['switches']} switches")
    if decision.get("revised_at_step") is not None:
        cost.append(f"XLA off again from train step {decision['revised_at_step']} (compiles beyond the price)")
    lines.append(", ".join(cost))
    return lines


_OTHER_WORDS = {
    "in_steps": "inside the step calls, not the step's own program (op by op: one per primitive and shape; "
    "or a helper such as predict's concatenate)",
    "outside_steps": "outside the step calls (initialisation, metrics, optimizer set-up)",
}


def _other_compile_lines(report: XlaReport) -> List[str]:
    """Compiles kept out of the step ledger, one line per kind (JAX)."""
    return [
        f"{int(v.get('count', 0))} executable(s), {ms_text(v.get('seconds', 0.0))}, {_OTHER_WORDS.get(k, k)}"
        for k, v in sorted(report.other_compilations.items())
        if v.get("count")
    ]


def render_markdown(report: XlaReport) -> str:
    """The report as markdown, for TensorBoard's Text tab (``xla/report``)."""
    phases = [p for p in PHASES if report.steps.get(p)] or ["train"]
    by_phase: Dict[str, float] = {}
    for c in report.compilations:
        by_phase[c.phase] = by_phase.get(c.phase, 0.0) + c.seconds
    out = [
        "## XLA report",
        "",
        f"**jit requested:** `{report.jit_mode}` &nbsp; **XLA active:** {_active_word(report.jit_active)}",
        "",
        f"{report.jit_reason}",
        "",
        "| phase | steps | compiles | compile time | distinct signatures | steady step |",
        "|---|---|---|---|---|---|",
    ]
    for p in phases:
        out.append(
            f"| {p} | {report.steps.get(p, 0)} | {report.compilation_count.get(p, 0)} | "
            f"{ms_text(by_phase.get(p)) if p in by_phase else '0'} | {report.distinct_signatures.get(p, 0)} | "
            f"{ms_text(report.steady_step_seconds_by_phase.get(p))} |"
        )
    out += [
        "",
        f"**compile time:** {ms_text(report.compile_seconds)}"
        + (
            f" ({report.compile_share:.0%} of {ms_text(report.wall_seconds)} monitored)"
            if report.compile_share is not None
            else ""
        ),
    ]
    out.append("")
    out.append(
        "**break-even:** "
        + (f"{report.break_even_steps:.0f} steps" if report.break_even_steps is not None else _no_break_even(report))
    )
    for line in _other_compile_lines(report):
        out += ["", f"**other compiles:** {line}"]
    if report.slow_step_count:
        out += ["", f"**slow steps:** {report.slow_step_count} known-signature steps far above the steady median"]
    if report.storms:
        out += ["", "### Recompilation storms"]
        for storm in report.storms:
            out.append(
                f"- **{storm.phase}, step {storm.step}** ({storm.count} new shapes, action "
                f"`{storm.action}`): {storm.advice}"
            )
    if report.advice:
        out += ["", "### Compile budget"]
        out += [f"- **{item.phase}**: {item.advice}" for item in report.advice]
    if report.jit_decision:
        out += ["", "### jit='fastest'"] + [f"- {line}" for line in decision_lines(report.jit_decision)]
    if report.fallback:
        out += ["", f"**fallback:** {report.fallback['reason']}"]
        cost = fallback_cost(report.fallback)
        if cost:
            out += ["", f"**without XLA:** {cost}"]
    if report.traces:
        out += ["", "### Profiler traces (Profile tab)"] + [f"- `{t}`" for t in report.traces]
    if report.notes:
        out += ["", "### Notes"] + [f"- {n}" for n in report.notes]
    return "\n".join(out)
