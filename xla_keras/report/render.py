"""The report in words: the summary ``str(report)`` prints, the end-of-fit summary (``report.summary()``,
``verbose=1``: at most 12 lines of 100 characters) and the markdown of TensorBoard's Text tab. Pure."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from xla_keras.core.messages import WIDTH, code_within, within
from xla_keras.core.signatures import describe, from_jsonable
from xla_keras.core.timing import ms_text
from xla_keras.core.types import PHASES
from xla_keras.jit.coverage import coverage_words, outside_words
from xla_keras.report.figures import (
    break_even_words,
    compile_time_words,
    cost_words,
    decision_lines,
    fallback_cost,
    op_by_op_words,
    own_words,
    precompile_words,
    processes_words,
    slow_words,
    steady_words,
    wait_findings,
    waits_words,
)
from xla_keras.report.ledger_rows import OUTSIDE_STEP_WORDS, cause_words, ledger_rows, program_words, steps_words
from xla_keras.storms.detection import storm_cause, storm_what
from xla_keras.storms.fixes import APPLIED_TYPES, cause_clause, fix_line, fix_value, recomputed_words, values_words

if TYPE_CHECKING:
    from xla_keras.report.model import XlaReport


def _active_word(active: Optional[bool]) -> str:
    return {True: "yes", False: "NO", None: "unknown"}[active]


def _jit_fix_lines(code: Optional[str]) -> List[str]:
    """The code that lets XLA compile what it did not, whole, indented under its label in 100 columns: a
    longer line (a report written before its code was laid out so) is laid out here, the same program."""
    if not code:
        return []
    return ["  fix (code)      :", *(f"    {line}" if line.strip() else "" for line in code_within(code, WIDTH - 4))]


def op_words(op: Dict[str, Any]) -> str:
    """One op XLA could not compile: ``AsString in layer 'dedup'``."""
    return f"{op['op']} in layer {op['layer']!r}" if op.get("layer") else op["op"]


def unsupported_words(found: Dict[str, Any], line: bool = True) -> str:
    """An op XLA could not compile (``report.unsupported_ops``) in a few words: the ops and their layers,
    the device type, where it was met and, with ``line``, the user's source line."""
    ops = ", ".join(dict.fromkeys(op_words(op) for op in found["ops"]))
    said = f"{ops} ({found.get('device')}) at {found.get('phase')} step {found.get('step')}"
    return said + (f", your line {found['line']}" if line and found.get("line") else "")


def _coverage_lines(coverage: Optional[Dict[str, Any]], full: bool) -> List[str]:
    """Auto-clustering's coverage: the share of op time in XLA, the op types outside (4, or all with
    ``full``) with their reasons, and the advice."""
    if not coverage:
        return []
    ops = coverage.get("ops_outside") or []
    lines = [f"  coverage        : {coverage_words(coverage)}; {coverage.get('nodes_outside')} op node(s) outside"]
    for op in ops if full else ops[:4]:
        lines.append(f"      outside: {outside_words(op)}: {op['reason']}")
    if len(ops) > 4 and not full:
        lines.append(f"      + {len(ops) - 4} more op types outside: report.coverage['ops_outside']")
    advice = coverage.get("advice")
    if advice:  # what the fix does, in the advice's words (a move into dataset.map takes the op out of the step)
        lines.append(f"  coverage fix    : {advice['fix']} ({advice.get('effect') or 'for ' + advice['op']})")
    return lines


def render(report: XlaReport, full: bool = False) -> str:
    """The human summary printed at the end of a fit (``str(report)``), in 100 columns: each storm
    and advice as its headline and its fix, each note in at most 2 lines. ``full=True``
    (``report.details()``, ``xla-keras report --full``) keeps every advice and note whole."""
    phases = [p for p in PHASES if report.steps.get(p)]
    lines = _head_lines(report) + _compile_lines(report, phases) + _coverage_lines(report.coverage, full)
    lines += _time_lines(report, phases) + _storm_and_advice_lines(report, full) + _fallback_lines(report)
    lines += _ledger_lines(report)
    trimmed = not full and bool(report.storms or report.advice)  # each shown as its headline and fix
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


def _head_lines(report: XlaReport) -> List[str]:
    """The title, the jit request and whether XLA ran, why, what it left out, the jit fix."""
    lines = ["XLA report (xla_keras)"]
    lines.append(f"  jit requested   : {report.jit_mode}    XLA active: {_active_word(report.jit_active)}")
    if report.jit_reason:
        lines.append(f"  why             : {report.jit_reason}")
    if report.unsupported_ops:
        lines.append(f"  not compiled    : {unsupported_words(report.unsupported_ops)}")
    lines += _jit_fix_lines(report.jit_fix)
    return lines


def _compile_lines(report: XlaReport, phases: List[str]) -> List[str]:
    """The compiles per phase (their time, how measured) and what was precompiled."""
    by_phase: Dict[str, float] = {}
    sources = set()
    for c in report.compilations:
        by_phase[c.phase] = by_phase.get(c.phase, 0.0) + c.seconds
        sources.add(c.source)
    lines = []
    compiles = (
        ", ".join(
            f"{p} {report.compilation_count.get(p, 0)}" + (f" ({ms_text(by_phase[p])})" if p in by_phase else "")
            for p in phases
        )
        or "none"
    )
    how = f"  [measured by {'/'.join(sorted(sources))}]" if sources else ""
    lines.append(f"  compiles        : {compiles}{how}")
    precompiled = precompile_words(report)
    if precompiled:
        lines.append(f"  precompiled     : {precompiled}")
    return lines


def _time_lines(report: XlaReport, phases: List[str]) -> List[str]:
    """Signatures, compile time, steady steps, the cache, the other programs, cost, break-even, slow steps,
    waits and the monitor's own work."""
    lines = []
    lines.append(
        "  signatures      : " + (", ".join(f"{p} {report.distinct_signatures.get(p, 0)}" for p in phases) or "none")
    )
    lines.append("  compile time    : " + "".join(compile_time_words(report)))
    lines.append(
        "  steady step     : " + (", ".join(f"{p} {steady_words(report, p) or 'n/a'}" for p in phases) or "n/a")
    )
    cached = sum(1 for c in report.compilations if c.cached)
    if cached:
        lines.append(
            f"  persistent cache: {cached} of the compiles were loads from the cache"
            + (f", {ms_text(report.cache_saved_seconds)} saved" if report.cache_saved_seconds is not None else "")
        )
    for line in _other_compile_lines(report):
        lines.append(f"  other compiles  : {line}")
    outside = outside_step_words(report)
    if outside:
        lines.append(f"  outside the step: {outside}")
    processes = processes_words(report)
    if processes:
        lines.append(f"  processes       : {processes}")
    cost = cost_words(report)
    if cost:
        lines.append(f"  cost            : {cost}")
    if report.break_even_steps is not None or report.jit_decision:
        lines.append(f"  break-even      : {break_even_words(report)}")
    if report.slow_step_count:
        worst = max(report.slow_steps, key=lambda s: s.seconds, default=None)
        lines.append(
            f"  slow steps      : {slow_words(report)}"
            + (f" (worst: {worst.phase} step {worst.step}, {ms_text(worst.seconds)})" if worst else "")
        )
    for phase in PHASES:
        waited = waits_words(report, phase)
        if waited:
            lines.append(f"  waits           : {waited}")
    own = own_words(report)
    if own:
        lines.append(f"  monitor work    : {own}")
    return lines


def _storm_and_advice_lines(report: XlaReport, full: bool) -> List[str]:
    """Each storm and advice: whole (``full``), else its headline and its fix."""
    lines = []
    for i, storm in enumerate(report.storms):
        head = f"  STORM ({storm.phase}, step {storm.step}, {storm.action}): "
        if full:
            lines.append(head + storm.advice)
        else:
            lines.append(f"{head}{storm.count} {storm_what(storm)}; {storm_cause(storm)}")
            lines.append(f"      fix: {fix_line(storm.fix, f'report.storms[{i}].fix')}")
            values = values_words(storm.fix, f"report.storms[{i}].fix")
            if values:
                lines.append(f"      {values}")
            if storm.fix_at_storm is not None:
                lines.append(f"      {recomputed_words(storm.fix_at_storm, storm.fix)}")
    for i, item in enumerate(report.advice):
        if full:
            lines.append(f"  ADVICE ({item.phase}, {item.call}): {item.advice}")
        else:
            past = item.recompiles
            beyond = (
                f"{item.compiles} modules; the {past} past the first signature took"
                if past is not None and past != item.compiles - 1
                else f"{item.compiles} compiles; those beyond the first took"
            )
            lines.append(
                f"  ADVICE ({item.phase}, {item.call}): {beyond} "
                f"{ms_text(item.recompile_seconds)} = {item.share:.0%} of the phase (budget {item.budget:.0%}); "
                f"{cause_clause(item.varying, item.fix)}"
            )
            lines.append(f"      fix: {fix_line(item.fix, f'report.advice[{i}].fix')}")
    return lines


def _fallback_lines(report: XlaReport) -> List[str]:
    """The jit='fastest' decision, and a fallback with its measured cost."""
    lines = []
    for line in decision_lines(report.jit_decision):
        lines.append(f"  fastest         : {line}")
    if report.fallback and not report.unsupported_ops:  # else "why" says it
        lines.append(f"  fallback        : {report.fallback['reason']}")
        cost = fallback_cost(report.fallback)
        if cost:
            lines.append(f"  without XLA     : {cost}")
        op_by_op = op_by_op_words(report)
        if op_by_op:
            lines.append(f"  op by op        : {op_by_op}")
    return lines


def _ledger_lines(report: XlaReport) -> List[str]:
    """The compiles' ledger (its first 8 rows) and the profiler traces."""
    lines = []
    if report.compilations:
        lines.append("  compiled for    :")
        rows = ledger_rows([c.to_dict() for c in report.compilations])
        shown = rows[:8]
        for row in shown:
            count = f"{row['compiles']} compiles, " if row["compiles"] > 1 else ""
            cause = program_words(row["outside_step"]) or cause_words(row["cause"], row["why"])
            lines.append(
                f"    {row['phase']} {steps_words(row)}: {describe(from_jsonable(row['signature']))}  "
                f"{count}{ms_text(row['seconds'])}"
                + (f" ({cause})" if cause else "")
                + (" (estimated from step time)" if row["estimated"] else "")
                + (" (loaded from the persistent cache)" if row["cached"] else "")
            )
        rest = report.total_compilations - sum(row["compiles"] for row in shown)
        if rest > 0:
            lines.append(f"    ... {rest} more")
    if report.traces:
        lines.append(
            f"  profiler traces : {len(report.traces)} for the Profile tab "
            f"({', '.join(t.split(':')[0] for t in report.traces)})"
        )
    return lines


_LABEL = re.compile(r"^  [a-z][a-z -]{15}: ")  # "  compile time    : ...": continued under the value


def _wrap(line: str) -> List[str]:
    """One line of the summary in 100 columns, continued under its value (or 6 spaces in)."""
    if len(line) <= WIDTH:
        return [line]
    label = _LABEL.match(line)
    indent = " " * (len(label.group(0)) if label else 6)
    return textwrap.wrap(line, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


_OTHER_WORDS = {
    "in_steps": "inside the step calls, not the step's own program (op by op: one per primitive and shape; "
    "or a helper such as predict's concatenate)",
    "outside_steps": "outside the step calls (initialisation, metrics, optimizer set-up)",
}


def outside_step_words(report: XlaReport) -> str:
    """The modules compiled for a one-off program, not the step's (``report.outside_step_compilations``),
    e.g. ``"train 1 module (62 ms): TensorFlow's initialiser of ... run once; in the compile counts, not in
    the compile budget"``; "" when there are none."""
    parts = [
        f"{p} {int(v.get('count', 0))} module{'s' * (int(v.get('count', 0)) != 1)} ({ms_text(v.get('seconds', 0.0))})"
        for p, v in report.outside_step_compilations.items()
        if v.get("count")
    ]
    if not parts:
        return ""
    programs = sorted({c.outside_step for c in report.compilations if c.outside_step})
    what = "; ".join(OUTSIDE_STEP_WORDS.get(p, p) for p in programs) or "a one-off program"
    return f"{', '.join(parts)}: {what}; in the compile counts, not in the compile budget"


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
        *([f"**not compiled:** {unsupported_words(report.unsupported_ops)}", ""] if report.unsupported_ops else []),
        *([f"```python\n{report.jit_fix}\n```", ""] if report.jit_fix else []),
        "| phase | steps | compiles | compile time | distinct signatures | steady step |",
        "|---|---|---|---|---|---|",
    ]
    for p in phases:
        out.append(
            f"| {p} | {report.steps.get(p, 0)} | {report.compilation_count.get(p, 0)} | "
            f"{ms_text(by_phase.get(p)) if p in by_phase else '0'} | {report.distinct_signatures.get(p, 0)} | "
            f"{steady_words(report, p) or 'n/a'} |"
        )
    out += ["", "**compile time:** " + "".join(compile_time_words(report))]
    out += ["", f"**break-even:** {break_even_words(report)}"]
    for line in _other_compile_lines(report):
        out += ["", f"**other compiles:** {line}"]
    outside = outside_step_words(report)
    if outside:
        out += ["", f"**outside the step:** {outside}"]
    processes = processes_words(report)
    if processes:
        out += ["", f"**processes:** {processes}"]
    cost = cost_words(report)
    if cost:
        out += ["", f"**cost:** {cost}"]
    if report.slow_step_count:
        out += ["", f"**slow steps:** {slow_words(report)}"]
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
        op_by_op = op_by_op_words(report)
        if op_by_op:
            out += ["", f"**op by op:** {op_by_op}"]
    if report.traces:
        out += ["", "### Profiler traces (Profile tab)"] + [f"- `{t}`" for t in report.traces]
    if report.notes:
        out += ["", "### Notes"] + [f"- {n}" for n in report.notes]
    return "\n".join(out)


# The end-of-fit summary (``XlaMonitor(verbose=1)``): at most 12 lines of at most 100 characters.


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
    cause = (report.fallback or {}).get("cause", "storm")
    if report.unsupported_ops or cause == "unsupported":
        # XLA may have run before the op was met (an op in the validation step only).
        ran = f"XLA {'ran until' if report.total_compilations else 'did not run:'} an op it cannot compile"
    elif report.fallback:
        ran = "XLA ran until the storm fallback"
    else:
        ran = _RAN.get(report.jit_active, _RAN[None])
    head = f"xla_keras: {ran} (jit={report.jit_mode!r}); compiles: {counts}"
    lines = [within(head, f" [measured by {'/'.join(sources)}]" if sources else "")]
    total, of_wall, parts = compile_time_words(report)
    lines.append(within(f"  compile time : {total}", of_wall, parts))
    steady = [f"{p} {steady_words(report, p)}" for p in phases if steady_words(report, p)]
    lines.append(within("  steady step  : " + (", ".join(steady) or "not measured")))
    precompiled = precompile_words(report)
    if precompiled:
        lines.append(within(f"  precompiled  : {precompiled}"))
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
    found = report.unsupported_ops
    if found:
        done = "XLA off" if found.get("action") == "fallback" else "stopped"
        ops = ", ".join(dict.fromkeys(op_words(op) for op in found["ops"]))
        head = f"  NOT COMPILED : {ops} ({found.get('phase')} step {found.get('step')}): {done}"
        code = f"; fix: {where}.jit_fix" if found.get("fix") else ""
        lines.append(within(head, code, ", no step lost" if found.get("action") == "fallback" else ""))
    coverage = report.coverage
    if coverage and coverage.get("ops_outside"):
        top = outside_words(coverage["ops_outside"][0], short=True)
        advised = f"; fix: {where}.coverage['advice']" if coverage.get("advice") else ""
        head = f"  COVERAGE     : {coverage_words(coverage).split(' (')[0]}; most outside: {top}"
        lines.append(within(head, advised))
    for i, storm in enumerate(report.storms):
        head = f"  STORM ({storm.phase}, step {storm.step}): {storm.count} {storm_what(storm)}; "
        lines.append(_finding(head, storm_cause(storm)))
        fixes.append((storm.fix, f"{where}.storms[{i}].fix", storm.fix_at_storm))
    for i, item in enumerate(report.advice):
        took = f"recompiles took {ms_text(item.recompile_seconds)} = {item.share:.0%} of the phase"
        head = f"  ADVICE ({item.phase}, {item.call}): {took}; "
        lines.append(_finding(head, cause_clause(item.varying, item.fix)))
        fixes.append((item.fix, f"{where}.advice[{i}].fix", None))
    if report.fallback and not found:
        lines.append(
            within(f"  fallback     : XLA off from {report.fallback.get('phase')} step {report.fallback.get('step')}")
        )
    decision = decision_lines(report.jit_decision)
    if decision:
        lines.append(within(f"  fastest      : {decision[0]}"))
    if report.slow_step_count:
        lines.append(within(f"  slow steps   : {slow_words(report)}"))
    for finding in wait_findings(report):
        lines.append(within(f"  WAIT         : {finding}"))
    applied = [(fix, at, before) for fix, at, before in fixes if isinstance(fix, APPLIED_TYPES)]
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
