"""The end-of-fit summary (``XlaMonitor(verbose=1)``): at most 12 lines of at most 100 characters.

What ran, the compiles, the compile time, the steady step, then one line per finding (a storm, a
compile-budget advice, a fallback, the ``jit="fastest"`` decision, slow steps), the first fix as one
line of code, and where the rest is. ``str(report)`` (render.py) is the longer form, ``report.details()``
the whole. Pure.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, Tuple

from xla_keras.core.messages import WIDTH, within
from xla_keras.core.types import PHASES
from xla_keras.report.figures import compile_time_words, decision_lines, slow_words, steady_words
from xla_keras.report.units import ms_text
from xla_keras.storms.detection import cause_clause, fix_line, storm_cause
from xla_keras.storms.fixes import APPLIED_KINDS, fix_value

if TYPE_CHECKING:
    from xla_keras.report.model import XlaReport

MAX_LINES = 12
_RAN = {True: "XLA ran", False: "XLA did not run", None: "XLA use unknown"}


def summary(report: XlaReport, where: str = "monitor.report") -> str:
    """The summary of ``report`` in at most ``MAX_LINES`` lines of at most ``WIDTH`` characters.

    ``where``: the expression that holds the report, for the lines that point into it.
    """
    phases = [p for p in PHASES if report.steps.get(p)]
    sources = sorted({c.source for c in report.compilations})
    counts = ", ".join(f"{p} {report.compilation_count.get(p, 0)}" for p in phases) or "none"
    if len(report.processes) > 1:  # each process counts its own compiles: the same, or where to look
        same = all(
            row.get("compilation_count") == report.processes[0].get("compilation_count") for row in report.processes
        )
        counts += f" ({len(report.processes)} processes, " + ("the same in each)" if same else "not all alike)")
    ran = "XLA ran until the storm fallback" if report.fallback else _RAN.get(report.jit_active, _RAN[None])
    head = f"xla_keras: {ran} (jit={report.jit_mode!r}); compiles: {counts}"
    lines = [within(head, f" [measured by {'/'.join(sources)}]" if sources else "")]
    total, of_wall, parts = compile_time_words(report)
    lines.append(within(f"  compile time : {total}", of_wall, parts))
    steady = [f"{p} {steady_words(report, p)}" for p in phases if steady_words(report, p)]
    lines.append(within("  steady step  : " + (", ".join(steady) or "not measured")))
    findings, fix = _findings(report, where)
    room = MAX_LINES - len(lines) - 1 - bool(report.notes) - len(fix)  # 1: the "more" line
    if len(findings) > room:
        findings = findings[: room - 1] + [f"  + {len(findings) - room + 1} more findings: print({where})"]
    lines.extend(findings + fix)
    if report.notes:
        lines.append(f"  notes        : {len(report.notes)} (print({where}))")
    more = [f"print({where})"] + ([f"xla-keras report {report.log_dir}", "the XLA tab"] if report.log_dir else [])
    lines.append(within("  more         : " + ", ".join(more)))
    return "\n".join(line if len(line) <= WIDTH else line[: WIDTH - 1] + "…" for line in lines)


def _findings(report: XlaReport, where: str) -> Tuple[List[str], List[str]]:
    """One line per finding; and the first finding's fix as one line of code, as the user applies it."""
    lines, fixes = [], []
    for i, storm in enumerate(report.storms):
        head = f"  STORM ({storm.phase}, step {storm.step}): {storm.count} new input shapes; "
        lines.append(_finding(head, storm_cause(storm)))
        fixes.append((storm.fix, f"{where}.storms[{i}].fix", storm.fix_at_storm))
    for i, item in enumerate(report.advice):
        took = f"recompiles took {ms_text(item.recompile_seconds)} = {item.share:.0%} of the phase"
        head = f"  ADVICE ({item.phase}, {item.call}): {took}; "
        lines.append(_finding(head, cause_clause(item.varying, item.fix)))
        fixes.append((item.fix, f"{where}.advice[{i}].fix", None))
    if report.fallback:
        lines.append(
            within(f"  fallback     : XLA off from {report.fallback.get('phase')} step {report.fallback.get('step')}")
        )
    decision = decision_lines(report.jit_decision)
    if decision:
        lines.append(within(f"  fastest      : {decision[0]}"))
    if report.slow_step_count:
        lines.append(within(f"  slow steps   : {slow_words(report)}"))
    applied = [(fix, at, before) for fix, at, before in fixes if fix.get("kind") in APPLIED_KINDS]
    if not applied:
        return lines, []
    fix, at, before = applied[0]
    others = [where_ for _, where_, _ in applied[1:]]
    also = f" (also {', '.join(others)})" if others else ""
    out = [within(f"  fix          : {fix_line(fix, at)}", also)]
    if before:  # the storm's warning named another value: say which holds now, and why
        out.append(
            within(f"  fix changed  : {fix_value(fix)} from every shape seen ({fix_value(before)} at the storm)")
        )
    return lines, out


def _finding(head: str, cause: str) -> str:
    """``head`` + ``cause`` in one line: the cause's figures ``(3..59, 41 values)`` give way first."""
    return head + cause if len(head) + len(cause) <= WIDTH else within(head + _RANGE.sub("", cause))


_RANGE = re.compile(r" \([^()]*\)")
